//! The state database under a big history: 1,000,000 build rows across 200 modules.
//! Generated once (one transaction), then `builds(mesh, module, limit 20)`, the same with a
//! cursor deep in the history, `build_by_digest`, and `last_builds` are measured.
//! Target (issue 2): `builds MODULE` under 5 ms.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use meshtop::backends::state::{BuildQuery, StateDb};

const ROWS: u64 = 1_000_000;
const MODULES: u64 = 200;
const MESH: &str = "bench";

fn module(i: u64) -> String {
    format!("module-{:03}", i % MODULES)
}

fn digest(i: u64) -> String {
    format!(
        "sha256:{:064x}",
        u128::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
    )
}

fn published(i: u64) -> String {
    format!(
        "sha256:{:064x}",
        u128::from(i).wrapping_mul(0xC2B2_AE3D_27D4_EB4F_1656_67B1_9E37_79F9)
    )
}

/// Fill the database: one transaction, rows in time order, ~2% failed, every 10th published,
/// every 1000th without a module. Two other meshes get a few rows so every query must filter.
fn generate(path: &Path) {
    drop(StateDb::open(path).unwrap()); // the schema
    let mut conn = rusqlite::Connection::open(path).unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "synchronous", "OFF").unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut st = tx
            .prepare(
                "INSERT INTO builds (id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref, \
                 digest, platforms, status, forced, why, host, started_ms, ended_ms, error, log_tail, \
                 published_ref, published_digest, operation_id) \
                 VALUES (?1, ?2, ?3, '/src/bench', ?4, 0, NULL, NULL, ?5, ?6, 'linux/amd64', ?7, 0, 'files changed', \
                 'builder', ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )
            .unwrap();
        let start = 1_700_000_000_000_i64;
        for i in 0..ROWS + 2_000 {
            let mesh = if i < ROWS {
                MESH
            } else if i % 2 == 0 {
                "other-a"
            } else {
                "other-b"
            };
            let failed = i % 50 == 7;
            let module = (i % 1000 != 999).then(|| module(i));
            let started = start + i64::try_from(i).unwrap() * 1_000;
            st.execute(rusqlite::params![
                format!("{:012x}-{i:08}", started),
                mesh,
                module,
                format!("{:040x}", u128::from(i) * 7919),
                format!("{:012x}-amd64", i),
                (!failed).then(|| digest(i)),
                if failed { "failed" } else { "succeeded" },
                started,
                started + 30_000,
                failed.then_some("step 3/7: exit code 1"),
                failed.then_some("line 1\nline 2\nline 3"),
                (i % 10 == 0).then(|| format!("localhost:5000/m:{i:012x}-amd64")),
                (i % 10 == 0).then(|| published(i)),
                format!("converge-{}", i / 200),
            ])
            .unwrap();
        }
    }
    tx.commit().unwrap();
    conn.execute_batch("ANALYZE").unwrap();
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let t = Instant::now();
    generate(&path);
    eprintln!(
        "generated {ROWS} rows across {MODULES} modules in {:.1?}",
        t.elapsed()
    );
    let h = StateDb::open(&path).unwrap();
    assert_eq!(h.count_builds(MESH, None).unwrap(), ROWS);

    // One cold-ish single shot of each, printed for the note, before criterion's warm loops.
    let q = BuildQuery {
        mesh: MESH.into(),
        module: Some(module(42)),
        limit: 20,
        ..Default::default()
    };
    let t = Instant::now();
    let page = h.builds(&q).unwrap();
    eprintln!(
        "single builds(module, limit 20): {:.2?} ({} rows)",
        t.elapsed(),
        page.len()
    );
    assert_eq!(page.len(), 20);

    let mut g = c.benchmark_group("history_1m");
    g.measurement_time(Duration::from_secs(5));
    let mut m = 0;
    g.bench_function("builds(module, limit 20)", |b| {
        b.iter(|| {
            m = (m + 37) % MODULES;
            let q = BuildQuery {
                mesh: MESH.into(),
                module: Some(module(m)),
                limit: 20,
                ..Default::default()
            };
            let rows = h.builds(black_box(&q)).unwrap();
            assert_eq!(rows.len(), 20);
        });
    });
    g.bench_function("builds(all, limit 20)", |b| {
        let q = BuildQuery {
            mesh: MESH.into(),
            limit: 20,
            ..Default::default()
        };
        b.iter(|| assert_eq!(h.builds(black_box(&q)).unwrap().len(), 20));
    });
    let deep = h
        .builds(&BuildQuery {
            mesh: MESH.into(),
            module: Some(module(7)),
            limit: 2_500,
            ..Default::default()
        })
        .unwrap();
    let cursor = deep.last().map(|r| (r.started_ms, r.id.clone()));
    g.bench_function(
        "builds(module, limit 20, cursor at half the history)",
        |b| {
            let q = BuildQuery {
                mesh: MESH.into(),
                module: Some(module(7)),
                limit: 20,
                before: cursor.clone(),
                ..Default::default()
            };
            b.iter(|| assert_eq!(h.builds(black_box(&q)).unwrap().len(), 20));
        },
    );
    g.bench_function("builds(module, failed only, limit 20)", |b| {
        let q = BuildQuery {
            mesh: MESH.into(),
            module: Some(module(7)),
            failed_only: true,
            limit: 20,
            before: None,
        };
        b.iter(|| assert_eq!(h.builds(black_box(&q)).unwrap().len(), 20));
    });
    let mut i = 0_u64;
    g.bench_function("build_by_digest(artifact)", |b| {
        b.iter(|| {
            i = (i + 7_919) % ROWS;
            let i = if i % 50 == 7 { i + 1 } else { i };
            assert!(
                h.build_by_digest(MESH, black_box(&digest(i)))
                    .unwrap()
                    .is_some()
            );
        });
    });
    let mut j = 0_u64;
    g.bench_function("build_by_digest(published)", |b| {
        b.iter(|| {
            j = (j + 7_910) % ROWS;
            assert!(
                h.build_by_digest(MESH, black_box(&published(j)))
                    .unwrap()
                    .is_some()
            );
        });
    });
    g.sample_size(20);
    g.bench_function("last_builds(200 modules)", |b| {
        b.iter(|| {
            assert_eq!(
                h.last_builds(black_box(MESH)).unwrap().len(),
                MODULES as usize
            )
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
