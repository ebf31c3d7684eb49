//! The Kubernetes record at 10,000 modules (issue 41), on the API test server on loopback: what a
//! stamp and a read cost — wall time, objects (requests) and bytes — in the sharded form, against
//! the plain form's one namespace GET at the largest record that still fits it (the reference).
//! Then a real second converge at 10,000 modules on the API test server (`scripts/gen-mesh.sh`,
//! `KIND=kubernetes`) whose record answers for every module: wall time, requests by verb, the
//! record's bytes read. Run by `scripts/bench-scale.sh`; prints one line per figure. Not a test:
//! nothing is asserted. `RECORD_SCALE_MODULES` (default 10000) sizes the converge's mesh;
//! `RECORD_SCALE_PARTS` (`record`, `converge`; default both) picks what runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/common/mod.rs"]
#[allow(
    dead_code,
    unused_imports,
    reason = "the tests' helpers: this takes a few, the test binary judges the rest"
)]
mod common;

use std::time::Instant;

use common::kube_api::KubeApi;
use meshtop::backends::cluster::{Cluster, RecordForm, TeamWrite};
use meshtop::mesh::model::{Record, RecordEntry};
use meshtop::mesh::operation::OperationKind;
use meshtop::mesh::pin::{PinChange, Stamper};

const NS: &str = "bench-record";

fn modules(from: usize, n: usize, tag: &str) -> Record {
    (from..from + n)
        .map(|i| {
            (
                format!("m{i:05}"),
                RecordEntry::new(
                    format!("registry.example.com:5000/scale/m{i:05}:{tag}"),
                    format!("sha256:{:0>64}", format!("{i}{tag}")),
                ),
            )
        })
        .collect()
}

async fn stamp(cluster: &Cluster, entries: &Record, op: &str) {
    let by = Stamper {
        operation_id: op.into(),
        kind: OperationKind::Converge,
        short: Some(1),
        host: "bench".into(),
        pid: 1,
        at_ms: 1,
        from_target: None,
    };
    let write = TeamWrite {
        entries,
        pins: &PinChange::default(),
        by: &by,
    };
    cluster.stamp_team(&write, true).await.unwrap();
}

fn shard_bytes(api: &KubeApi) -> usize {
    api.all("configmaps", NS)
        .iter()
        .map(|m| m["data"]["team.json"].as_str().map_or(0, str::len))
        .sum()
}

async fn measure(n: usize) {
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    // A full history: ten converges of every module.
    let started = Instant::now();
    for round in 0..10 {
        stamp(
            &cluster,
            &modules(0, n, &format!("r{round}")),
            &format!("op-{round}"),
        )
        .await;
    }
    let first = started.elapsed() / 10;
    let read = cluster.read_record().await.unwrap();
    let form = match read.form {
        RecordForm::Plain => "annotations".to_string(),
        RecordForm::Shards { shards, bytes } => format!("{shards} shards, {bytes} bytes"),
    };
    println!(
        "{n} modules, 10 stamps each in the history: {form}; a stamp of every module {:.0} ms",
        first.as_secs_f64() * 1e3
    );
    // Read: what every converge, plan and status pays.
    let runs = 5;
    api.reset_counts();
    let started = Instant::now();
    for _ in 0..runs {
        cluster.read_record().await.unwrap();
    }
    let per = started.elapsed() / runs;
    println!(
        "  read with the whole history (history, rollback, gc):  {:.1} ms, {} objects, {} bytes",
        per.as_secs_f64() * 1e3,
        api.total_requests() / runs as usize,
        read.cost.bytes
    );
    api.reset_counts();
    let started = Instant::now();
    let mut entries = None;
    for _ in 0..runs {
        entries = Some(cluster.read_entries().await.unwrap());
    }
    let per = started.elapsed() / runs;
    println!(
        "  read of the entries and pins (converge, plan, status):  {:.1} ms, {} objects, {} bytes",
        per.as_secs_f64() * 1e3,
        api.total_requests() / runs as usize,
        entries.map_or(0, |r| r.cost.bytes)
    );
    // A converge that changed 10 modules.
    let before = shard_bytes(&api);
    let names_before: Vec<String> = api
        .all("configmaps", NS)
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    api.reset_counts();
    let started = Instant::now();
    stamp(&cluster, &modules(n / 2, 10, "changed"), "op-changed").await;
    let took = started.elapsed();
    let written: usize = api
        .all("configmaps", NS)
        .iter()
        .filter(|m| !names_before.contains(&m["metadata"]["name"].as_str().unwrap().to_string()))
        .map(|m| m["data"]["team.json"].as_str().map_or(0, str::len))
        .sum();
    println!(
        "  stamp of 10 changed modules: {:.1} ms, {} requests, {} shard bytes written (of {} in all)",
        took.as_secs_f64() * 1e3,
        api.total_requests(),
        written,
        before
    );
    println!("    requests: {}", verbs(&api));
}

/// The requests since the last reset, by verb (`GET configmaps/… 26, PATCH namespaces/… 1`).
fn verbs(api: &KubeApi) -> String {
    api.requests_by_verb()
        .iter()
        .map(|(verb, n)| format!("{verb} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sizes the dashboard's polls and the Docker converge are measured at (`RECORD_SCALE_SIZES`,
/// default `1000 3000`: each finishes in well under ten minutes on two cores).
fn sizes() -> Vec<usize> {
    std::env::var("RECORD_SCALE_SIZES")
        .unwrap_or_else(|_| "1000 3000".into())
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// The dashboard's polls at each size, on one API test server that `KUBECONFIG` names.
async fn dashboard_polls_at(sizes: &[usize]) {
    let api = KubeApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig("bench")).unwrap();
    // SAFETY: set before any session connects; nothing else reads the environment meanwhile.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("KUBECONFIG", &kubeconfig);
    }
    for &n in sizes {
        dashboard_polls::measure(&api, n).await;
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // `RECORD_SCALE_PARTS` picks what runs (default every part): `record` (the reference: the
        // largest plain record, about 1,000 modules, then 10,000 in shards), `converge` (a real
        // second converge on Kubernetes at `RECORD_SCALE_MODULES`), `polls` (the dashboard's polls
        // on Kubernetes) and `docker` (a second converge on Docker, counted at the daemon's
        // socket), these two at each of `RECORD_SCALE_SIZES`.
        let parts = std::env::var("RECORD_SCALE_PARTS").unwrap_or_default();
        let part = |name: &str| parts.is_empty() || parts.split_whitespace().any(|p| p == name);
        if part("record") {
            measure(1_000).await;
            measure(10_000).await;
        }
        if part("converge") {
            let n = std::env::var("RECORD_SCALE_MODULES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(10_000);
            second_converge::measure(n).await;
        }
        if part("polls") {
            dashboard_polls_at(&sizes()).await;
        }
        if part("docker") {
            for n in sizes() {
                second_converge::measure_docker(n, 0).await;
            }
        }
    });
}

#[path = "record_scale/second_converge.rs"]
mod second_converge;

#[path = "record_scale/dashboard_polls.rs"]
mod dashboard_polls;
