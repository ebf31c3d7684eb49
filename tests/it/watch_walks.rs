//! Watching re-plans only what changed (issue 11): while the contexts are watched, a plan walks
//! again only the modules whose contexts reported a change; the others answer from their last
//! walk. Counted through the memo's walk counter and the stat cache's reads, never by timing.
//! Real files, the real notify watcher (inotify here), a real state database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshtop::backends::daemon::LazyDaemon;
use meshtop::backends::state::StateDb;
use meshtop::converge::plan::{Plan, PlanContext, StateManifests, dry_run_watched};
use meshtop::mesh::model::{Mesh, Record};
use meshtop::workspace::walks::WalkMemo;
use meshtop::workspace::watch::ContextWatcher;

const MODULES: [&str; 3] = ["alpha", "beta", "gamma"];

fn generate(dir: &Path) -> Mesh {
    let mut toml = String::from(
        "[mesh]\nname = \"walks\"\nplatforms = [\"linux/amd64\"]\n\n[target]\nkind = \"docker\"\n",
    );
    for module in MODULES {
        let context = dir.join(module);
        std::fs::create_dir_all(context.join("src")).unwrap();
        std::fs::write(context.join("Dockerfile"), "FROM scratch\nCOPY . /\n").unwrap();
        for i in 0..40 {
            std::fs::write(
                context.join(format!("src/f{i}.txt")),
                format!("{module} {i}\n"),
            )
            .unwrap();
        }
        toml.push_str(&format!(
            "\n[[module]]\nname = \"{module}\"\ncontext = \"{module}\"\npolicy = \"record\"\n"
        ));
    }
    let file = dir.join("mesh.toml");
    std::fs::write(&file, toml).unwrap();
    meshtop::workspace::file::load(&file).unwrap()
}

async fn plan(mesh: &Mesh, history: &Mutex<StateDb>, memo: &WalkMemo) -> Plan {
    let ctx = PlanContext {
        mesh,
        record: Record::new(),
        record_source: "the docker record".into(),
        selected: None,
        force: false,
        host_images_answer: true,
        target: meshtop::converge::targets::docker().describe(),
    };
    let manifests = StateManifests {
        db: history,
        mesh: &mesh.name,
        target: "default",
    };
    dry_run_watched(ctx, Arc::new(LazyDaemon::new()), &manifests, Some(memo))
        .await
        .unwrap()
}

fn walks(memo: &WalkMemo) -> Vec<u64> {
    MODULES.iter().map(|m| memo.walks(m)).collect()
}

fn reference(plan: &Plan, module: &str) -> String {
    let planned = plan.modules.iter().find(|m| m.name == module).unwrap();
    planned.reference.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_in_one_context_walks_only_that_module_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mesh = generate(&root);
    let db = tempfile::tempdir().unwrap();
    let history = Mutex::new(StateDb::open(&db.path().join("state.db")).unwrap());
    let memo = Arc::new(WalkMemo::new());

    // Not watched: every plan walks every context.
    let first = plan(&mesh, &history, &memo).await;
    plan(&mesh, &history, &memo).await;
    assert_eq!(
        walks(&memo),
        vec![2, 2, 2],
        "unwatched plans walk everything"
    );

    let mut watcher = ContextWatcher::start(&mesh, None, Vec::new()).unwrap();
    assert_eq!(watcher.fallback, None, "inotify watches are available here");
    watcher.remember_walks(memo.clone());
    plan(&mesh, &history, &memo).await;
    let steady = plan(&mesh, &history, &memo).await;
    assert_eq!(
        walks(&memo),
        vec![3, 3, 3],
        "the first watched plan walks, the next one answers from it"
    );
    for module in MODULES {
        assert_eq!(reference(&steady, module), reference(&first, module));
    }

    // An editor's save in beta: the watcher names beta, and the next plan walks beta only.
    let tmp = root.join("beta/src/.f7.txt.swp");
    std::fs::write(&tmp, "beta 7, edited\n").unwrap();
    std::fs::rename(&tmp, root.join("beta/src/f7.txt")).unwrap();
    let touched = tokio::time::timeout(
        Duration::from_secs(10),
        watcher.next_burst(Duration::from_millis(200)),
    )
    .await
    .expect("the watcher saw the save within 10 s")
    .unwrap();
    assert_eq!(touched, BTreeSet::from(["beta".to_string()]));
    let after = plan(&mesh, &history, &memo).await;
    assert_eq!(walks(&memo), vec![3, 4, 3], "only beta is walked again");
    assert_ne!(reference(&after, "beta"), reference(&first, "beta"));
    assert_eq!(reference(&after, "alpha"), reference(&first, "alpha"));
    assert_eq!(reference(&after, "gamma"), reference(&first, "gamma"));

    // The walk of beta matches one made from scratch (the memo only skips walks).
    let fresh = plan(&mesh, &history, &WalkMemo::new()).await;
    for module in MODULES {
        assert_eq!(reference(&after, module), reference(&fresh, module));
    }

    // The watcher gone: plans walk every context again.
    drop(watcher);
    plan(&mesh, &history, &memo).await;
    assert_eq!(walks(&memo), vec![4, 5, 4]);
}
