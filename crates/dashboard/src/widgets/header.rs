//! The header: mesh, target (its kind and place), state database, and each source's
//! age and last error. Below it, one line for the filter, warnings and the last notice.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::keys::Mode;
use crate::app::msg::SourceId;
use crate::app::state::AppState;
use crate::mesh::live::OperationState;
use crate::mesh::progress::operation_label;
use crate::timefmt;

use super::lines::{Palette, put};

/// `target docker`, `target kubernetes (context kind-dev, namespace demo)`: as the target says
/// itself; a mesh's named target by its name first (`target prod · kubernetes (…)`).
fn target_text(state: &AppState) -> String {
    let target = &state.target;
    let name = if target.name == crate::mesh::model::DEFAULT_TARGET {
        String::new()
    } else {
        format!("{} · ", target.name)
    };
    match &target.place {
        Some(place) => format!("target {name}{} ({place})", target.kind),
        None => format!("target {name}{}", target.kind),
    }
}

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    let context = &state.context;
    let mut first = format!(" meshtop · {} · {}", context.mesh, target_text(state));
    if let Some(registry) = &context.registry {
        first.push_str(&format!(" · registry {registry}"));
    }
    if state.readonly {
        first.push_str(" · read-only");
    }
    if state.auto_converge {
        first.push_str(" · auto-converge on");
    }
    first.push_str(&format!(" · state {}", context.state_path));
    put(
        buf,
        area,
        area.x,
        area.y,
        usize::MAX,
        &first,
        palette.heading(),
    );
    let y = area.y + 1;
    let mut x = put(buf, area, area.x, y, usize::MAX, " ", palette.plain());
    let shown = SourceId::ALL
        .into_iter()
        .filter(|id| *id != SourceId::Registry || state.context.registry.is_some())
        // Shown once the mesh has an upstream to ask about (or asking failed).
        .filter(|id| {
            *id != SourceId::Upstreams
                || !state.upstreams.is_empty()
                || state.source(*id).error.is_some()
        });
    for (i, id) in shown.enumerate() {
        if i > 0 {
            x = put(buf, area, x, y, usize::MAX, " · ", palette.dim());
        }
        x = put(buf, area, x, y, usize::MAX, id.name(), palette.plain());
        let status = state.source(id);
        let age = status.ok_ms.map(|at| timefmt::age_since(at, state.now_ms));
        x = match (&status.error, age) {
            (None, Some(age)) => put(
                buf,
                area,
                x,
                y,
                usize::MAX,
                &format!(" {age}"),
                palette.good(),
            ),
            (None, None) => put(buf, area, x, y, usize::MAX, " …", palette.dim()),
            (Some((_, error)), age) => {
                let last = age.map_or("never answered".to_string(), |a| format!("last ok {a}"));
                put(
                    buf,
                    area,
                    x,
                    y,
                    usize::MAX,
                    &format!(" ✗ {error} ({last})"),
                    palette.bad(),
                )
            }
        };
    }
}

/// Someone else's operation holding the mesh for the team (the followed one says itself).
pub(crate) fn held_text(state: &AppState) -> Option<String> {
    let held = state.held_by.as_ref()?;
    let own = state.followed().is_some_and(|(live, now)| {
        now == OperationState::Running && live.operation_id == held.operation_id
    });
    // An action this dashboard runs holds the Lease itself: its own line says so.
    let mine = state.running.is_some();
    (!own && !mine).then(|| format!("⚑ {}", held.text(&timefmt::local_time(held.since_ms))))
}

/// Whether the line under the header has something to say.
pub(crate) fn has_notice_line(state: &AppState) -> bool {
    state.mode == Mode::Filter
        || !state.filter.is_empty()
        || !state.warnings.is_empty()
        || registry_warning(state).is_some()
        || state.notice.is_some()
        || state.running.is_some()
        || operation_text(state).is_some()
        || held_text(state).is_some()
}

/// The plan's word that the mesh's registry could not be asked (read as holding nothing).
fn registry_warning(state: &AppState) -> Option<&str> {
    state.plan.as_ref()?.registry_error.as_deref()
}

/// The followed operation while it runs (`⟳ #42 · tier 2 of 3 · 3/7 done · 42s`), or when its
/// process is gone without a last word; nothing once it finished (the notice says how).
pub fn operation_text(state: &AppState) -> Option<(String, bool)> {
    let (live, now) = state.followed()?;
    let label = operation_label(live.operation, &live.operation_id);
    match now {
        OperationState::Running => {
            let mut parts = vec![match &state.operation.started_with {
                Some(title) => format!("⟳ {label} {title}"),
                None => format!("⟳ {label}"),
            }];
            if let Some(tier) = live.tier {
                parts.push(tier.text());
            }
            let (done, total) = live.done_of();
            let elapsed = timefmt::elapsed(live.elapsed_ms(state.now_ms));
            // Read from mid-way (its start fell out of the first read): say only what is known.
            if live.saw_start {
                if total > 0 {
                    parts.push(format!("{done}/{total} done"));
                }
                parts.push(elapsed);
            } else {
                parts.push(format!("{done} done"));
                parts.push(format!("over {elapsed}"));
            }
            if !live.pool.builders.is_empty() {
                parts.push(format!("builders {}", live.pool.line()));
            }
            Some((parts.join(" · "), false))
        }
        OperationState::Gone => Some((format!("✗ {label} stopped (process gone)"), true)),
        OperationState::Finished => None,
    }
}

pub(crate) fn draw_notice(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    if area.height == 0 {
        return;
    }
    let y = area.y;
    let mut x = area.x;
    if state.mode == Mode::Filter || !state.filter.is_empty() {
        let cursor = if state.mode == Mode::Filter {
            "█"
        } else {
            ""
        };
        let text = format!(
            " /{}{cursor} ({} of {}) ",
            state.filter,
            state.visible.len(),
            state.modules.len()
        );
        x = put(buf, area, x, y, usize::MAX, &text, palette.info());
    }
    match (operation_text(state), &state.running) {
        (Some((text, gone)), _) => {
            let style = if gone { palette.bad() } else { palette.warn() };
            x = put(buf, area, x, y, usize::MAX, &format!(" {text} "), style);
        }
        (None, Some(running)) => {
            x = put(
                buf,
                area,
                x,
                y,
                usize::MAX,
                &format!(" ⟳ {} ", running.label()),
                palette.warn(),
            );
        }
        (None, None) => {}
    }
    if let Some(text) = held_text(state) {
        x = put(
            buf,
            area,
            x,
            y,
            usize::MAX,
            &format!(" {text} "),
            palette.warn(),
        );
    }
    if let Some(notice) = &state.notice {
        let style = if notice.error {
            palette.bad()
        } else {
            palette.plain()
        };
        x = put(
            buf,
            area,
            x,
            y,
            usize::MAX,
            &format!(" {} ", notice.text),
            style,
        );
    }
    if let Some(warning) = registry_warning(state) {
        x = put(
            buf,
            area,
            x,
            y,
            usize::MAX,
            &format!(" ⚠ {warning} "),
            palette.warn(),
        );
    }
    if let Some(first) = state.warnings.first() {
        let more = if state.warnings.len() > 1 {
            format!(" (+{} more, see ? help)", state.warnings.len() - 1)
        } else {
            String::new()
        };
        put(
            buf,
            area,
            x,
            y,
            usize::MAX,
            &format!(" ⚠ {first}{more}"),
            palette.warn(),
        );
    }
}
