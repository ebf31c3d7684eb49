//! The pins a converge ends (a third address of a module's own inputs, or forced): ended in the
//! same write as its stamp, each said why.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::progress::{Emitter, Payload};
use crate::backends::state::{StateDb, StateError, locked};
use crate::mesh::model::Mesh;
use crate::mesh::pin::PinChange;

/// The pins a converge's plan ended (a third address, or forced) that are still pinned.
pub(crate) fn ended_pins(
    mesh: &Mesh,
    target: &str,
    db: &Mutex<StateDb>,
    ended: &BTreeMap<String, String>,
) -> PinChange {
    let pinned = locked(db)
        .map_err(StateError::from)
        .and_then(|h| h.pins(&mesh.name, target))
        .unwrap_or_default();
    PinChange {
        set: Vec::new(),
        end: ended
            .keys()
            .filter(|module| pinned.contains_key(*module))
            .cloned()
            .collect(),
    }
}

/// Say why each pin the converge's stamp ended ended.
pub(crate) fn say_ended(emitter: &Emitter, why: &BTreeMap<String, String>, ended: &PinChange) {
    for module in &ended.end {
        if let Some(why) = why.get(module) {
            emitter.emit(Payload::Warning, Some(module), why.clone());
        }
    }
}
