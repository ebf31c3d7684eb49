//! The dashboard's polls on a Kubernetes target read what the screen shows (issue 55): the entries
//! and pins as `plan` reads them, the record history of the module whose detail is open (its shard
//! alone), and nothing again while the index is unchanged. Counted by the API test server's own
//! request log, over a sharded record of 2,000 modules with ten stamps each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::kube_api::KubeApi;
use common::kube_mesh::KubeMesh;
use meshtop::app::msg::{PollParams, SourceId};
use meshtop::backends::cluster::HISTORY_KEPT;
use meshtop::backends::state::StateDb;
use meshtop::converge::targets::Overrides;
use meshtop::sources::{Session, Source};

use crate::record_shards::{index_of, modules, stamp};

const MODULES: usize = 2_000;

/// One poll of `source`: what the server's log says it was asked (by verb), and the bytes it sent.
async fn poll(
    api: &KubeApi,
    source: &dyn Source,
    params: &PollParams,
) -> (BTreeMap<String, usize>, usize) {
    api.reset_counts();
    let answer = source.poll(params.clone()).await;
    assert!(answer.is_ok(), "{:?} poll: {answer:?}", source.id());
    (api.requests_by_verb(), api.response_bytes())
}

fn count(verbs: &BTreeMap<String, usize>, verb: &str) -> usize {
    verbs.get(verb).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_polls_read_what_the_screen_shows_and_an_unchanged_index_once() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("rpoll", &api, true, "test-ctx", "");
    let ns = k.namespace.clone();
    let cluster = api.cluster(&ns);
    for round in 0..HISTORY_KEPT {
        let entries = modules(0, MODULES, &format!("r{round}"));
        stamp(&cluster, &entries, &format!("op-{round}"))
            .await
            .unwrap();
    }
    let index = index_of(&api, &ns);
    assert!(
        index.history.len() > 10 * index.shards.len().max(1),
        "{} record shards, {} history shards",
        index.shards.len(),
        index.history.len()
    );
    // SAFETY: set before the session connects, while no other thread reads the environment.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("KUBECONFIG", &k.kubeconfig);
    }
    let mesh = meshtop::workspace::file::load(&k.mesh.mesh_file()).unwrap();
    let session = Session::new(Arc::new(mesh), k.mesh.state(), Overrides::default());
    let sources: std::collections::HashMap<SourceId, Arc<dyn Source>> =
        meshtop::sources::all(&session)
            .into_iter()
            .map(|s| (s.id(), s))
            .collect();
    let shown = PollParams::default();

    // The record panel, first poll: the namespace (the index), the record's shards, the Lease
    // (who holds the mesh). Before, the whole history's shards too.
    let record_source = sources[&SourceId::Record].as_ref();
    let (first, first_bytes) = poll(&api, record_source, &shown).await;
    assert_eq!(count(&first, "GET namespaces/…"), 1, "{first:?}");
    assert_eq!(
        count(&first, "GET configmaps/…"),
        index.shards.len(),
        "the record's shards alone, not the history's {}: {first:?}",
        index.history.len()
    );
    // Unchanged: one GET of the namespace for the record, and the Lease; nothing else.
    let (again, again_bytes) = poll(&api, record_source, &shown).await;
    assert_eq!(count(&again, "GET namespaces/…"), 1, "{again:?}");
    assert_eq!(again.values().sum::<usize>(), 2, "{again:?}");
    assert!(
        again_bytes * 10 < first_bytes,
        "an unchanged poll answered {again_bytes} bytes, the first {first_bytes}"
    );

    // Every other poll that reads the target: the record as what decides reads it, from what
    // the session read already; a bounded number of objects whatever the record's size.
    for id in [SourceId::Machines, SourceId::Plan] {
        let source = sources[&id].as_ref();
        poll(&api, source, &shown).await;
        let (verbs, _) = poll(&api, source, &shown).await;
        assert_eq!(count(&verbs, "GET namespaces/…"), 1, "{id:?}: {verbs:?}");
        assert_eq!(count(&verbs, "GET configmaps/…"), 0, "{id:?}: {verbs:?}");
        assert!(verbs.values().sum::<usize>() <= 8, "{id:?}: {verbs:?}");
    }

    // One module's detail open: its history is read from the one shard that holds it, and lands
    // in the state database where the detail reads it.
    let module = "module-01234";
    let holder = index
        .history
        .iter()
        .rev()
        .find(|s| s.first.as_deref().unwrap() <= module)
        .unwrap();
    let opened = PollParams {
        history_opened: Some(module.to_string()),
        ..PollParams::default()
    };
    let (verbs, _) = poll(&api, record_source, &opened).await;
    assert_eq!(count(&verbs, "GET configmaps/…"), 1, "{verbs:?}");
    let path = format!("/api/v1/namespaces/{ns}/configmaps/{}", holder.name);
    assert_eq!(api.requests(&path), 1, "its shard alone: {verbs:?}");
    let db = StateDb::open(&k.mesh.state()).unwrap();
    let stamps = db.stamps(k.name(), "default", module, 50).unwrap();
    assert_eq!(stamps.len(), HISTORY_KEPT, "{stamps:?}");
    let operations: std::collections::BTreeSet<String> =
        stamps.iter().map(|s| s.by.operation_id.clone()).collect();
    let expected = (0..HISTORY_KEPT)
        .map(|round| format!("op-{round}"))
        .collect();
    assert_eq!(operations, expected, "the module's ten stamps");
    let other = db.stamps(k.name(), "default", "module-00001", 50).unwrap();
    assert!(other.is_empty(), "another module's history was read");
    let (verbs, _) = poll(&api, record_source, &opened).await;
    assert_eq!(count(&verbs, "GET configmaps/…"), 0, "{verbs:?}");

    // A stamp of one module: the next poll reads the shard that changed, not the others.
    stamp(&cluster, &modules(0, 1, "r-new"), "op-new")
        .await
        .unwrap();
    let (verbs, _) = poll(&api, record_source, &shown).await;
    assert_eq!(count(&verbs, "GET namespaces/…"), 1, "{verbs:?}");
    assert_eq!(count(&verbs, "GET configmaps/…"), 1, "{verbs:?}");
}
