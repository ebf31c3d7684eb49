//! What the dashboard's polls ask of the API test server on a Kubernetes target whose record is in
//! shards: a generated mesh of `n` modules (`scripts/gen-mesh.sh`, `BASES=0`), its record stamped
//! ten times over (the last stamp the refs the plan computes), and the dashboard's own sources
//! (`meshtop::sources`) polled through one session as its pollers poll them. Requests and bytes are
//! the server's own count (its request log, the bodies it sent), per poll.

use std::path::Path;
use std::sync::Arc;

use meshtop::app::msg::{PollParams, SourceId};
use meshtop::converge::targets::Overrides;
use meshtop::sources::{Session, Source};

use super::KubeApi;
use super::second_converge::{generate, planned_refs, stamp_ten_times};

/// Polls of each source after its first, averaged.
const POLLS: usize = 5;

/// The requests and bytes of one poll, as the server counted them.
async fn one_poll(api: &KubeApi, source: &dyn Source, params: &PollParams) -> (usize, usize) {
    api.reset_counts();
    if let Err(error) = source.poll(params.clone()).await {
        println!("    {:?} poll failed: {error:?}", source.id());
    }
    (api.total_requests(), api.response_bytes())
}

/// `POLLS` polls after the first: the requests and bytes of each, on average.
async fn steady(api: &KubeApi, source: &dyn Source, params: &PollParams) -> (usize, usize) {
    let (mut requests, mut bytes) = (0, 0);
    for _ in 0..POLLS {
        let (r, b) = one_poll(api, source, params).await;
        requests += r;
        bytes += b;
    }
    (requests / POLLS, bytes / POLLS)
}

/// The mesh of `n` modules in `dir` on namespace `ns` of the server `KUBECONFIG` names.
fn mesh_on(dir: &Path, n: usize, ns: &str) {
    generate(dir, n, 0, "kubernetes");
    let file = dir.join("mesh.toml");
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "kind = \"kubernetes\"\n",
        &format!("kind = \"kubernetes\"\nnamespace = \"{ns}\"\n"),
    );
    std::fs::write(&file, text).unwrap();
}

/// The figures at `n` modules (`KUBECONFIG` names `api` already).
pub(super) async fn measure(api: &KubeApi, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let ns = format!("polls-{n}");
    api.put_namespace(&ns, &[]);
    mesh_on(dir.path(), n, &ns);
    let env = ("KUBECONFIG", std::env::var("KUBECONFIG").unwrap());
    let all = planned_refs(dir.path(), &env);
    let cluster = api.cluster(&ns);
    stamp_ten_times(&cluster, &all).await;
    let whole = api.cluster(&ns).read_record().await.unwrap();
    let index = &whole.index;
    println!(
        "dashboard polls, {n} modules ({} record shards, {} history shards): before this change every record poll read {} objects, {} bytes",
        index.shards.len(),
        index.history.len(),
        whole.cost.objects,
        whole.cost.bytes
    );
    let mesh = meshtop::workspace::file::load(&dir.path().join("mesh.toml")).unwrap();
    let session = Session::new(
        Arc::new(mesh),
        dir.path().join("state.db"),
        Overrides::default(),
    );
    let sources = meshtop::sources::all(&session);
    let source = |id: SourceId| {
        sources
            .iter()
            .find(|s| s.id() == id)
            .map(Arc::clone)
            .unwrap()
    };
    let shown = PollParams::default();
    let record = source(SourceId::Record);
    let (requests, bytes) = one_poll(api, record.as_ref(), &shown).await;
    println!("  record, first poll: {requests} requests, {bytes} bytes");
    let (requests, bytes) = steady(api, record.as_ref(), &shown).await;
    println!("  record, index unchanged: {requests} requests, {bytes} bytes a poll");
    for id in [SourceId::Machines, SourceId::Plan] {
        let polled = source(id);
        one_poll(api, polled.as_ref(), &shown).await;
        let (requests, bytes) = steady(api, polled.as_ref(), &shown).await;
        println!("  {id:?}, index unchanged: {requests} requests, {bytes} bytes a poll");
    }
    let opened = PollParams {
        history_opened: all.get(n / 2).map(|(name, _)| name.clone()),
        ..PollParams::default()
    };
    let (requests, bytes) = one_poll(api, record.as_ref(), &opened).await;
    println!("  record, a module's history opened: {requests} requests, {bytes} bytes");
    let (requests, bytes) = steady(api, record.as_ref(), &opened).await;
    println!(
        "  record, the same history open, unchanged: {requests} requests, {bytes} bytes a poll"
    );
    let changed: Vec<(String, String)> = all
        .iter()
        .take(1)
        .map(|(name, reference)| (name.clone(), format!("{reference}-moved")))
        .collect();
    super::stamp(
        &cluster,
        &changed
            .iter()
            .map(|(name, reference)| (name.clone(), super::second_converge::entry(reference, 10)))
            .collect(),
        "op-moved",
    )
    .await;
    let (requests, bytes) = one_poll(api, record.as_ref(), &shown).await;
    println!("  record, after a stamp of one module: {requests} requests, {bytes} bytes");
}
