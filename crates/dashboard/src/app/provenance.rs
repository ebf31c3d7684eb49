//! BUILT BY where this machine has no build row: which running artifacts' signed provenance to
//! ask for (each once; a failed read again after `r`), and the answers as they come. The reads
//! are the sources' (`sources/provenance.rs`, the same checks as `meshtop status`), the drawing
//! the machines pane's.

use crate::mesh::provenance::ReadProvenance;

use super::msg::{Effect, ProvenanceAsk, SourceError};
use super::state::AppState;
use super::view_state::Loaded;

/// After a history poll: ask for the provenance of each running artifact it found no build of
/// (`unbuilt`) and that was not asked yet, when the mesh trusts keys and names a registry.
pub(super) fn wanted(state: &mut AppState, unbuilt: &[String]) -> Vec<Effect> {
    if !state.reads_provenance {
        return Vec::new();
    }
    let mut asks = Vec::new();
    for digest in unbuilt {
        if state.provenance.contains_key(digest) {
            continue;
        }
        // A digest of the record's history that no machine runs is not asked for.
        let Some(machine) = state.machines.iter().find(|m| m.running.contains(digest)) else {
            continue;
        };
        let recorded = state
            .machines_record
            .as_ref()
            .or(state.record.as_ref())
            .and_then(|record| record.get(&machine.module))
            .cloned();
        asks.push(ProvenanceAsk {
            digest: digest.clone(),
            image: machine.image.clone(),
            recorded,
        });
        state.provenance.insert(
            digest.clone(),
            Loaded {
                loading: true,
                ..Loaded::default()
            },
        );
    }
    if asks.is_empty() {
        return Vec::new();
    }
    state.dirty = true;
    vec![Effect::FetchProvenance(asks)]
}

/// A provenance read answered.
pub(super) fn read(
    state: &mut AppState,
    digest: String,
    at_ms: i64,
    result: Result<Option<ReadProvenance>, SourceError>,
) {
    state.provenance.insert(
        digest,
        Loaded {
            loading: false,
            at_ms: Some(at_ms),
            result: Some(result),
        },
    );
    state.dirty = true;
}

/// `r`: the reads that failed are asked again with the next history poll.
pub(super) fn forget_failed(state: &mut AppState) {
    state
        .provenance
        .retain(|_, loaded| !matches!(loaded.result, Some(Err(_))));
}
