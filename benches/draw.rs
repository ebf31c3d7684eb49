//! One frame of a 1,000-module mesh with 10,000 history rows (paged: the state holds a window)
//! drawn to a 200×60 TestBackend. Target: under 2 ms.

#[path = "../tests/it/common/dashboard.rs"]
#[allow(
    dead_code,
    reason = "the tests' helpers: this takes a few, the test binary judges the rest"
)]
mod fixture;

use criterion::{Criterion, criterion_group, criterion_main};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn draw(c: &mut Criterion) {
    let mut state = fixture::big_state(1_000, 10_000);
    state.selected = 500;
    let mut terminal = match Terminal::new(TestBackend::new(200, 60)) {
        Ok(terminal) => terminal,
        Err(error) => panic!("test backend: {error}"),
    };
    c.bench_function("draw 1000 modules, 10000 history rows, 200x60", |b| {
        b.iter(|| {
            // A full redraw each time: the previous frame is forgotten.
            terminal.clear().ok();
            terminal
                .draw(|frame| meshtop::widgets::draw(frame, &state))
                .map(|_| ())
                .ok();
        });
    });
}

criterion_group!(benches, draw);
criterion_main!(benches);
