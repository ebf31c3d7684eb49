//! Issue 3: a converge the record answers in full, in-process, on a generated 50-module mesh
//! (5 tiers of FROM-scratch modules with one tiny file each, `policy = "record"`, platforms set in
//! `[mesh]`). The record is stamped with made-up artifacts, so no image and no daemon is needed;
//! every iteration asserts that each module decided `record` and that the daemon was never asked.
//! Also: the plan alone (what `meshtop plan` does on the same mesh).
//! The host case, the process-level figures and the listing ratio are in `scripts/bench-converge.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use meshtop::backends::daemon::LazyDaemon;
use meshtop::backends::state::StateDb;
use meshtop::converge::engine::{ConvergeRequest, converge};
use meshtop::converge::plan::{NoManifests, PlanContext, dry_run};
use meshtop::converge::targets;
use meshtop::mesh::decide::Decision;
use meshtop::mesh::model::{Mesh, Record, RecordEntry};

const TIERS: usize = 5;
const PER_TIER: usize = 10;

/// Write the mesh: `t<tier>-m<i>`, each tier's module i built on the previous tier's module i.
fn generate(dir: &Path, name: &str) -> PathBuf {
    let mut toml = format!(
        "[mesh]\nname = \"{name}\"\nplatforms = [\"linux/amd64\"]\n\n[target]\nkind = \"docker\"\n"
    );
    for tier in 0..TIERS {
        for i in 0..PER_TIER {
            let module = format!("t{tier}-m{i}");
            let context = dir.join(&module);
            std::fs::create_dir_all(&context).unwrap();
            std::fs::write(context.join("file.txt"), format!("module {module}\n")).unwrap();
            let (dockerfile, base) = if tier == 0 {
                (
                    format!("FROM scratch\nCOPY file.txt /{module}.txt\n"),
                    String::new(),
                )
            } else {
                (
                    format!("ARG BASE\nFROM ${{BASE}}\nCOPY file.txt /{module}.txt\n"),
                    format!("base = \"t{}-m{i}\"\n", tier - 1),
                )
            };
            std::fs::write(context.join("Dockerfile"), dockerfile).unwrap();
            toml.push_str(&format!(
                "\n[[module]]\nname = \"{module}\"\ncontext = \"{module}\"\n{base}policy = \"record\"\n"
            ));
        }
    }
    let file = dir.join("mesh.toml");
    std::fs::write(&file, toml).unwrap();
    file
}

/// The record a converge that built everything would have stamped, with made-up artifacts:
/// resolved tier by tier (a dependent's ref needs its base's artifact).
async fn fake_record(mesh: &Mesh) -> Record {
    let mut record = Record::new();
    for _ in 0..TIERS {
        let ctx = PlanContext {
            mesh,
            record: record.clone(),
            record_source: "the docker record".into(),
            selected: None,
            force: false,
            host_images_answer: true,
            target: meshtop::converge::targets::docker().describe(),
        };
        // Every module here is either in the record or unbuilt; a host listing that fails (no
        // daemon) reads as "holds nothing", which is all this needs.
        let plan = dry_run(ctx, Arc::new(LazyDaemon::new()), &NoManifests)
            .await
            .unwrap();
        for module in plan.modules {
            if let Some(reference) = module.reference {
                let digest = format!("sha256:{:064x}", record.len() + 1);
                record
                    .entry(module.name)
                    .or_insert(RecordEntry::new(reference, digest));
            }
        }
    }
    assert_eq!(record.len(), TIERS * PER_TIER);
    record
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("bench-converge-{}", std::process::id());
    let file = generate(&dir.path().join("mesh"), &name);
    let mesh = meshtop::workspace::file::load(&file).unwrap();
    let state = dir.path().join("state.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let record = runtime.block_on(fake_record(&mesh));
    let setup = StateDb::open(&state).unwrap();
    let holder = meshtop::backends::state::Holder::here("bench-setup");
    setup.lock_mesh(&name, "default", &holder).unwrap().unwrap();
    setup
        .stamp_record(&name, "default", "bench-setup", &record)
        .unwrap();
    setup.unlock_mesh(&name, "default", "bench-setup").unwrap();
    drop(setup);

    let mut group = c.benchmark_group("converge_50_modules");
    group.sample_size(30);
    group.bench_function("record_answers_every_module", |b| {
        b.iter(|| {
            let daemon = Arc::new(LazyDaemon::new());
            let (_cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
            let request = ConvergeRequest {
                mesh: mesh.clone(),
                state_path: state.clone(),
                force: false,
                jobs: 2,
                modules: None,
                wait: false,
                target: targets::docker(),
            };
            let summary = runtime
                .block_on(converge(request, daemon.clone(), None, cancel_rx))
                .unwrap();
            assert!(summary.ok && summary.stamped);
            assert!(
                summary
                    .modules
                    .iter()
                    .all(|m| m.decision == Decision::Record)
            );
            assert!(
                !daemon.was_asked(),
                "a record-answered converge asked the daemon"
            );
        });
    });
    group.bench_function("plan_record_answers_every_module", |b| {
        b.iter(|| {
            let daemon = Arc::new(LazyDaemon::new());
            let ctx = PlanContext {
                mesh: &mesh,
                record: record.clone(),
                record_source: "the docker record".into(),
                selected: None,
                force: false,
                host_images_answer: true,
                target: meshtop::converge::targets::docker().describe(),
            };
            let plan = runtime
                .block_on(dry_run(ctx, daemon.clone(), &NoManifests))
                .unwrap();
            assert_eq!(plan.modules.len(), TIERS * PER_TIER);
            assert!(!daemon.was_asked());
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
