//! One key at 10,000 modules, the way the dashboard's loop answers it (src/tui.rs `run_loop`):
//! `update` with the key, the frame drawn (a 160×50 TestBackend: the same size as
//! scripts/bench-scale.sh's tmux window), and the pollers' parameters derived and compared. No
//! terminal and no tmux: the key → state → frame path the dashboard owns. Target (issue 41): well
//! under 50 ms a key, which also has the terminal's own work to pay.
//!
//! Keys: `j` (one row down, mid-table), `G` (to the last row, from the first), the last character
//! of a filter (`/` and all the others typed before), Escape (clearing that filter: every row
//! back). Each measured press starts from the same state (cloned outside the timing).

#[path = "../tests/it/common/dashboard.rs"]
#[allow(
    dead_code,
    reason = "the tests' helpers: this takes a few, the test binary judges the rest"
)]
mod fixture;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use meshtop::app::msg::Msg;
use meshtop::app::state::AppState;
use meshtop::app::update::update;

const MODULES: usize = 10_000;
const SIZE: (u16, u16) = (160, 50);

fn press(state: &mut AppState, code: KeyCode) {
    let _ = update(state, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

/// What the loop does for one key: update, draw (the state is dirty), derive the pollers' asks.
fn answer(terminal: &mut Terminal<TestBackend>, state: &mut AppState, code: KeyCode) {
    press(state, code);
    terminal
        .draw(|frame| meshtop::widgets::draw(frame, state))
        .map(|_| ())
        .ok();
    state.dirty = false;
    std::hint::black_box(state.poll_params());
}

fn terminal() -> Terminal<TestBackend> {
    match Terminal::new(TestBackend::new(SIZE.0, SIZE.1)) {
        Ok(terminal) => terminal,
        Err(error) => panic!("test backend: {error}"),
    }
}

/// Time `code` pressed on a clone of `before` (the clone is not timed).
fn bench_key(c: &mut Criterion, name: &str, before: &AppState, code: KeyCode) {
    let mut terminal = terminal();
    // The frame before the key is on the terminal, as in the dashboard.
    terminal
        .draw(|frame| meshtop::widgets::draw(frame, before))
        .map(|_| ())
        .ok();
    c.bench_function(name, |b| {
        b.iter_batched(
            || before.clone(),
            |mut state| {
                answer(&mut terminal, &mut state, code);
                state
            },
            BatchSize::PerIteration,
        );
    });
}

fn keys(c: &mut Criterion) {
    let mut base = fixture::big_state(MODULES, 100);
    base.size = SIZE;
    base.dirty = false;

    let mut middle = base.clone();
    middle.selected = MODULES / 2;
    bench_key(c, "j at 10000 modules", &middle, KeyCode::Char('j'));

    bench_key(c, "G at 10000 modules", &base, KeyCode::Char('G'));

    // `/` and all but the last character typed: the last one narrows to one row.
    let mut filtering = base.clone();
    press(&mut filtering, KeyCode::Char('/'));
    for c in "module-077".chars() {
        press(&mut filtering, KeyCode::Char(c));
    }
    bench_key(
        c,
        "last filter character at 10000 modules",
        &filtering,
        KeyCode::Char('7'),
    );

    let mut filtered = filtering.clone();
    press(&mut filtered, KeyCode::Char('7'));
    bench_key(
        c,
        "Escape (filter cleared) at 10000 modules",
        &filtered,
        KeyCode::Esc,
    );
}

criterion_group!(benches, keys);
criterion_main!(benches);
