//! The build history as the dashboard holds it: a window of pages, never the whole table.
//! Scrolling past either end of the window asks for the next page through `BuildQuery.before`;
//! pages that fall out of the window are dropped (their cursor is kept to fetch them again).

use std::collections::VecDeque;

use crate::mesh::builds::BuildRow;

use super::msg::{PageRequest, Placement};

/// Rows fetched per page.
pub const PAGE_SIZE: usize = 100;
/// At most this many rows are held; beyond, a page is dropped at the far end.
pub const MAX_ROWS: usize = 1_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Page {
    /// The cursor this page was fetched with (None: the newest page).
    before: Option<(i64, String)>,
    rows: Vec<BuildRow>,
}

#[derive(Debug, Clone, Default)]
pub struct BuildsWindow {
    /// The module whose builds are shown, None for the whole mesh.
    pub scope: Option<String>,
    pages: VecDeque<Page>,
    /// Cursors of pages dropped at the top, the nearest last.
    dropped_above: Vec<Option<(i64, String)>>,
    /// No older rows exist below the window.
    pub end: bool,
    pub selected: usize,
    /// A page fetch is in flight (never two at once).
    pub loading: bool,
    /// When the newest page was last fetched.
    pub fetched_ms: Option<i64>,
}

impl BuildsWindow {
    pub(crate) fn new(scope: Option<String>) -> BuildsWindow {
        BuildsWindow {
            scope,
            ..BuildsWindow::default()
        }
    }

    pub fn len(&self) -> usize {
        self.pages.iter().map(|p| p.rows.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.iter().all(|p| p.rows.is_empty())
    }

    /// Whether the window starts at the newest build.
    pub fn at_head(&self) -> bool {
        self.dropped_above.is_empty()
    }

    /// Rows `from..from+count` of the window, in order (what a pane draws).
    pub fn rows(&self, from: usize, count: usize) -> impl Iterator<Item = &BuildRow> {
        self.pages
            .iter()
            .flat_map(|p| p.rows.iter())
            .skip(from)
            .take(count)
    }

    pub fn row(&self, index: usize) -> Option<&BuildRow> {
        self.rows(index, 1).next()
    }

    pub fn selected_row(&self) -> Option<&BuildRow> {
        self.row(self.selected)
    }

    /// Show another scope: the window empties and the newest page is asked for.
    pub fn rescope(&mut self, scope: Option<String>) -> PageRequest {
        *self = BuildsWindow::new(scope);
        self.loading = true;
        self.request(None, Placement::Replace)
    }

    fn request(&self, before: Option<(i64, String)>, placement: Placement) -> PageRequest {
        PageRequest {
            module: self.scope.clone(),
            before,
            limit: PAGE_SIZE,
            placement,
        }
    }

    /// The newest page as a poll found it. It replaces the top page only while the window is
    /// at the head; the selection stays on the same build.
    pub(crate) fn refresh_head(
        &mut self,
        scope: &Option<String>,
        rows: Vec<BuildRow>,
        at_ms: i64,
    ) -> bool {
        if scope != &self.scope || !self.at_head() {
            return false;
        }
        let keep = self.selected_row().map(|r| r.id.clone());
        let short = rows.len() < PAGE_SIZE;
        match self.pages.front_mut() {
            Some(first) if first.rows == rows => return false,
            Some(first) => first.rows = rows,
            None => self.pages.push_back(Page { before: None, rows }),
        }
        if self.pages.len() == 1 {
            self.end = short;
        }
        self.fetched_ms = Some(at_ms);
        self.reselect(keep);
        true
    }

    fn reselect(&mut self, keep: Option<String>) {
        if let Some(id) = keep
            && let Some(index) = self
                .pages
                .iter()
                .flat_map(|p| p.rows.iter())
                .position(|r| r.id == id)
        {
            self.selected = index;
        }
        self.selected = self.selected.min(self.len().saturating_sub(1));
    }

    /// A page fetched on request. Returns false when it no longer fits (scope changed).
    pub(crate) fn apply_page(
        &mut self,
        request: &PageRequest,
        rows: Vec<BuildRow>,
        at_ms: i64,
    ) -> bool {
        if request.module != self.scope {
            return false;
        }
        self.loading = false;
        let short = rows.len() < request.limit;
        let page = Page {
            before: request.before.clone(),
            rows,
        };
        match request.placement {
            Placement::Replace => {
                self.pages = VecDeque::from([page]);
                self.dropped_above.clear();
                self.end = short;
                self.selected = 0;
                self.fetched_ms = Some(at_ms);
            }
            Placement::Append => {
                if self.pages.back().is_some_and(|p| p.before == page.before) {
                    return false;
                }
                self.end = short;
                self.pages.push_back(page);
                while self.len() > MAX_ROWS && self.pages.len() > 1 {
                    if let Some(dropped) = self.pages.pop_front() {
                        self.selected = self.selected.saturating_sub(dropped.rows.len());
                        self.dropped_above.push(dropped.before);
                    }
                }
            }
            Placement::Prepend => {
                if self.dropped_above.last() != Some(&page.before) {
                    return false;
                }
                self.dropped_above.pop();
                self.selected += page.rows.len();
                self.pages.push_front(page);
                while self.len() > MAX_ROWS && self.pages.len() > 1 {
                    self.pages.pop_back();
                    self.end = false;
                }
            }
        }
        self.selected = self.selected.min(self.len().saturating_sub(1));
        true
    }

    /// Move the selection by `delta` rows; returns the page to fetch when it ran past an end.
    pub(crate) fn move_by(&mut self, delta: isize) -> Option<PageRequest> {
        let len = self.len();
        if delta < 0 {
            let up = delta.unsigned_abs();
            if up > self.selected && !self.at_head() && !self.loading {
                self.selected = 0;
                self.loading = true;
                return Some(self.request(
                    self.dropped_above.last().cloned().flatten(),
                    Placement::Prepend,
                ));
            }
            self.selected = self.selected.saturating_sub(up);
            return None;
        }
        let target = self.selected + delta.unsigned_abs();
        self.selected = target.min(len.saturating_sub(1));
        if target + 1 >= len && !self.end && !self.loading && len > 0 {
            let cursor = self
                .pages
                .back()
                .and_then(|p| p.rows.last())
                .map(|r| (r.started_ms, r.id.clone()));
            if cursor.is_some() {
                self.loading = true;
                return Some(self.request(cursor, Placement::Append));
            }
        }
        None
    }

    /// Back to the newest build (refetching it when the window had scrolled away from it).
    pub(crate) fn jump_to_top(&mut self) -> Option<PageRequest> {
        if self.at_head() {
            self.selected = 0;
            return None;
        }
        let scope = self.scope.clone();
        Some(self.rescope(scope))
    }
}
