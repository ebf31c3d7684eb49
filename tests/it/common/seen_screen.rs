//! A test terminal whose screen a test can read while the dashboard's loop owns the terminal: each
//! flush copies ratatui's `TestBackend` buffer as text into a shared cell, so that a scripted event
//! stream waits until the screen shows what it waits for, instead of sleeping for a guess.

use std::sync::{Arc, Mutex};

use ratatui::backend::{Backend, ClearType, TestBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};

/// The screen as it was last flushed, shared with the test.
#[derive(Clone, Default)]
pub(crate) struct Seen(Arc<Mutex<String>>);

impl Seen {
    pub(crate) fn text(&self) -> String {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// A `TestBackend` that says each flushed screen to its [`Seen`].
pub(crate) struct SeenBackend {
    inner: TestBackend,
    seen: Seen,
}

impl SeenBackend {
    pub(crate) fn new(width: u16, height: u16) -> (SeenBackend, Seen) {
        let seen = Seen::default();
        let backend = SeenBackend {
            inner: TestBackend::new(width, height),
            seen: seen.clone(),
        };
        (backend, seen)
    }

    pub(crate) fn buffer(&self) -> &ratatui::buffer::Buffer {
        self.inner.buffer()
    }
}

impl Backend for SeenBackend {
    type Error = <TestBackend as Backend>::Error;

    fn draw<'a, I>(&mut self, content: I) -> Result<(), Self::Error>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.inner.draw(content)
    }
    fn hide_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.hide_cursor()
    }
    fn show_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.show_cursor()
    }
    fn get_cursor_position(&mut self) -> Result<Position, Self::Error> {
        self.inner.get_cursor_position()
    }
    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> Result<(), Self::Error> {
        self.inner.set_cursor_position(position)
    }
    fn clear(&mut self) -> Result<(), Self::Error> {
        self.inner.clear()
    }
    fn clear_region(&mut self, clear_type: ClearType) -> Result<(), Self::Error> {
        self.inner.clear_region(clear_type)
    }
    fn size(&self) -> Result<Size, Self::Error> {
        self.inner.size()
    }
    fn window_size(&mut self) -> Result<WindowSize, Self::Error> {
        self.inner.window_size()
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.inner.flush()?;
        if let Ok(mut seen) = self.seen.0.lock() {
            *seen = super::dashboard::text(self.inner.buffer());
        }
        Ok(())
    }
}
