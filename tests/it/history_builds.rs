//! Build records in the state database on real SQLite: idempotence, paging, lookups, and the query plans.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::history::{new_build, temp_db};
use meshtop::backends::state::{BuildEnd, BuildQuery, StateDb, StateError, builds_sql};
use meshtop::mesh::builds::BuildStatus;
use meshtop::mesh::operation::OperationKind;

fn end(status: BuildStatus, digest: Option<&str>) -> BuildEnd {
    BuildEnd {
        status,
        digest: digest.map(str::to_string),
        error: (status == BuildStatus::Failed).then(|| "step 3 failed".to_string()),
        log_tail: Some("last lines".into()),
        ended_ms: 2_000,
    }
}

#[test]
fn start_is_idempotent_and_a_finished_build_never_returns_to_running() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    let b = new_build("b1", Some("api"), 1_000);
    h.start_build(&b).unwrap();
    h.start_build(&b).unwrap();
    assert_eq!(h.count_builds("demo", None).unwrap(), 1);

    assert!(
        h.finish_build("b1", &end(BuildStatus::Succeeded, Some("sha256:aaa")))
            .unwrap()
    );
    // The second result is ignored: the first stands.
    assert!(
        !h.finish_build("b1", &end(BuildStatus::Failed, None))
            .unwrap()
    );
    // A late start does not bring it back to running.
    h.start_build(&b).unwrap();
    let row = h.build("b1").unwrap().unwrap();
    assert_eq!(row.status, BuildStatus::Succeeded);
    assert_eq!(row.digest.as_deref(), Some("sha256:aaa"));
    assert_eq!(row.error, None);
    assert_eq!(row.ended_ms, Some(2_000));
    assert_eq!(h.count_builds("demo", None).unwrap(), 1);

    // Finishing as running is refused; finishing an unknown id changes nothing.
    assert!(
        h.finish_build("b1", &end(BuildStatus::Running, None))
            .is_err()
    );
    assert!(
        !h.finish_build("nope", &end(BuildStatus::Failed, None))
            .unwrap()
    );
    assert_eq!(h.build("nope").unwrap(), None);
}

#[test]
fn a_failed_build_keeps_its_error_and_log_tail_and_a_build_without_module_its_repository() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    h.start_build(&new_build("b1", None, 1_000)).unwrap();
    h.finish_build("b1", &end(BuildStatus::Failed, None))
        .unwrap();
    let row = h.build("b1").unwrap().unwrap();
    assert_eq!(row.module, None);
    assert_eq!(row.subject(), "/src/demo");
    assert_eq!(row.error.as_deref(), Some("step 3 failed"));
    assert_eq!(row.log_tail.as_deref(), Some("last lines"));
    let json = serde_json::to_value(&row).unwrap();
    assert_eq!(json["status"], "failed");
    assert_eq!(json["ref"], "b1-amd64");
}

#[test]
fn status_words_round_trip() {
    for s in [
        BuildStatus::Running,
        BuildStatus::Succeeded,
        BuildStatus::Failed,
        BuildStatus::Cancelled,
        BuildStatus::Stopped,
    ] {
        assert_eq!(BuildStatus::parse(s.as_str()), Some(s));
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
    assert_eq!(BuildStatus::parse("done"), None);
}

#[test]
fn fail_running_marks_only_running_rows_of_that_converge() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    h.start_build(&new_build("done", Some("a"), 1)).unwrap();
    h.finish_build("done", &end(BuildStatus::Succeeded, Some("sha256:d")))
        .unwrap();
    h.start_build(&new_build("run1", Some("b"), 2)).unwrap();
    h.start_build(&new_build("run2", Some("c"), 3)).unwrap();
    let mut other = new_build("other", Some("d"), 4);
    other.operation_id = Some("c2".into());
    h.start_build(&other).unwrap();
    let mut other_mesh = new_build("elsewhere", Some("b"), 5);
    other_mesh.mesh = "other".into();
    h.start_build(&other_mesh).unwrap();

    assert_eq!(
        h.fail_running("demo", "c1", BuildStatus::Cancelled, "interrupted")
            .unwrap(),
        2
    );
    assert_eq!(
        h.build("done").unwrap().unwrap().status,
        BuildStatus::Succeeded
    );
    for id in ["run1", "run2"] {
        let row = h.build(id).unwrap().unwrap();
        assert_eq!(row.status, BuildStatus::Cancelled);
        assert_eq!(row.error.as_deref(), Some("interrupted"));
        assert!(row.ended_ms.is_some());
    }
    assert_eq!(
        h.build("other").unwrap().unwrap().status,
        BuildStatus::Running
    );
    assert_eq!(
        h.build("elsewhere").unwrap().unwrap().status,
        BuildStatus::Running
    );
    assert!(
        h.fail_running("demo", "c2", BuildStatus::Succeeded, "x")
            .is_err()
    );
    assert_eq!(
        h.build("other").unwrap().unwrap().status,
        BuildStatus::Running
    );
}

#[test]
fn builds_page_newest_first_with_the_cursor() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    // 25 builds of api (api-10 and api-11 share a start time), 5 of web; every 8th api build failed.
    for i in 0..25 {
        let started = if i == 11 { 100 } else { i * 10 };
        h.start_build(&new_build(&format!("api-{i:02}"), Some("api"), started))
            .unwrap();
        let status = if i % 8 == 0 {
            BuildStatus::Failed
        } else {
            BuildStatus::Succeeded
        };
        h.finish_build(&format!("api-{i:02}"), &end(status, None))
            .unwrap();
    }
    for i in 0..5 {
        h.start_build(&new_build(&format!("web-{i}"), Some("web"), 1_000 + i))
            .unwrap();
    }
    assert_eq!(h.count_builds("demo", Some("api")).unwrap(), 25);
    assert_eq!(h.count_builds("demo", None).unwrap(), 30);
    assert_eq!(h.count_builds("other", None).unwrap(), 0);

    let mut q = BuildQuery {
        mesh: "demo".into(),
        module: Some("api".into()),
        limit: 10,
        ..Default::default()
    };
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = h.builds(&q).unwrap();
        pages += 1;
        assert!(page.len() <= 10);
        seen.extend(page.iter().map(|r| (r.started_ms, r.id.clone())));
        match q.next_cursor(&page) {
            Some(cursor) => q.before = Some(cursor),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25, "every row exactly once");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(seen, sorted, "newest first, ties by id, no duplicates");
    assert_eq!(seen[0].1, "api-24");

    let all = h
        .builds(&BuildQuery {
            mesh: "demo".into(),
            limit: 3,
            ..Default::default()
        })
        .unwrap();
    let ids: Vec<_> = all.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["web-4", "web-3", "web-2"]);

    let failed = h
        .builds(&BuildQuery {
            mesh: "demo".into(),
            failed_only: true,
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    let ids: Vec<_> = failed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["api-24", "api-16", "api-08", "api-00"]);
    let failed_page = h
        .builds(&BuildQuery {
            mesh: "demo".into(),
            module: Some("api".into()),
            failed_only: true,
            limit: 2,
            before: Some((160, "api-16".into())),
        })
        .unwrap();
    let ids: Vec<_> = failed_page.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["api-08", "api-00"]);
}

#[test]
fn build_by_digest_finds_the_artifact_and_the_published_digest() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    h.start_build(&new_build("old", Some("api"), 1)).unwrap();
    h.finish_build("old", &end(BuildStatus::Succeeded, Some("sha256:img")))
        .unwrap();
    h.set_published("old", "reg/api:abc-amd64", "sha256:pub")
        .unwrap();
    // A newer failed attempt that names the same artifact does not win over the succeeded one.
    h.start_build(&new_build("newer-failed", Some("api"), 5))
        .unwrap();
    h.finish_build(
        "newer-failed",
        &BuildEnd {
            digest: Some("sha256:img".into()),
            ..end(BuildStatus::Failed, None)
        },
    )
    .unwrap();

    let by_artifact = h.build_by_digest("demo", "sha256:img").unwrap().unwrap();
    assert_eq!(by_artifact.id, "old");
    let by_published = h.build_by_digest("demo", "sha256:pub").unwrap().unwrap();
    assert_eq!(by_published.id, "old");
    assert_eq!(
        by_published.published_ref.as_deref(),
        Some("reg/api:abc-amd64")
    );
    assert!(h.build_by_digest("demo", "sha256:none").unwrap().is_none());
    assert!(h.build_by_digest("other", "sha256:img").unwrap().is_none());
    assert!(matches!(
        h.set_published("nope", "r", "d"),
        Err(StateError::UnknownBuild { .. })
    ));
}

#[test]
fn last_builds_gives_the_newest_build_per_module() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    h.start_build(&new_build("a1", Some("api"), 1)).unwrap();
    h.start_build(&new_build("a2", Some("api"), 9)).unwrap();
    h.start_build(&new_build("w1", Some("web"), 5)).unwrap();
    h.start_build(&new_build("n1", None, 99)).unwrap();
    let mut elsewhere = new_build("x1", Some("zeta"), 100);
    elsewhere.mesh = "other".into();
    h.start_build(&elsewhere).unwrap();

    let last = h.last_builds("demo").unwrap();
    let ids: Vec<_> = last
        .iter()
        .map(|(m, r)| (m.as_str(), r.id.as_str()))
        .collect();
    assert_eq!(ids, [("api", "a2"), ("web", "w1")]);
    assert!(h.last_builds("empty").unwrap().is_empty());
}

fn plan(conn: &rusqlite::Connection, sql: &str) -> String {
    let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let nulls = vec![rusqlite::types::Value::Null; st.parameter_count()];
    let rows: Vec<String> = st
        .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows.join("\n")
}

fn scans_builds(plan: &str) -> bool {
    plan.lines()
        .any(|l| l.trim() == "SCAN builds" || l.trim() == "SCAN b2")
}

#[test]
fn the_hot_queries_use_indexes_not_scans() {
    let (_dir, path) = temp_db();
    drop(StateDb::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    for (module, failed, cursor, index) in [
        (true, false, false, "builds_by_module"),
        (true, false, true, "builds_by_module"),
        (false, false, false, "builds_by_time"),
        (false, false, true, "builds_by_time"),
        (true, true, false, "builds_failed_by_module"),
        (false, true, true, "builds_failed_by_time"),
    ] {
        let p = plan(&conn, &builds_sql(module, failed, cursor));
        assert!(
            p.contains(&format!("USING INDEX {index} ")),
            "module={module} failed={failed}: {p}"
        );
        assert!(!scans_builds(&p), "{p}");
        assert!(
            !p.contains("TEMP B-TREE"),
            "sorts instead of walking the index: {p}"
        );
    }
    let p = plan(&conn, meshtop::backends::state::BUILD_BY_DIGEST_SQL);
    assert!(
        p.contains("builds_by_digest") && p.contains("builds_by_published_digest"),
        "{p}"
    );
    assert!(!scans_builds(&p), "{p}");
    let p = plan(&conn, meshtop::backends::state::LAST_BUILDS_SQL);
    assert!(!scans_builds(&p), "{p}");
    // Every converge asks it as it finishes: both ends of the rowid tree, no scan.
    let p = plan(&conn, meshtop::backends::state::EVENT_ID_RANGE_SQL);
    assert!(!p.lines().any(|l| l.contains("SCAN events")), "{p}");
    assert_eq!(p.matches("SEARCH events").count(), 2, "{p}");
}

/// Issue 10, item 3: a build whose end could not be written (a full disk) stays `running` with its
/// lock released; the next open of the state closes it, saying why. A row whose converge still
/// holds the mesh stays running.
#[test]
fn the_next_open_closes_rows_left_running_by_a_converge_that_is_gone() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    let holder = meshtop::backends::state::Holder::here("alive");
    h.lock_mesh("demo", "default", &holder).unwrap().unwrap();
    let mut live = new_build("b-live", Some("api"), 1);
    live.operation_id = Some("alive".into());
    h.start_build(&live).unwrap();
    let mut orphan = new_build("b-orphan", Some("web"), 2);
    orphan.operation_id = Some("gone".into());
    h.start_build(&orphan).unwrap();
    drop(h);

    let h = StateDb::open(&path).unwrap();
    let closed = h.build("b-orphan").unwrap().unwrap();
    assert_eq!(closed.status, BuildStatus::Stopped, "{closed:?}");
    assert!(closed.ended_ms.is_some());
    let error = closed.error.unwrap();
    assert!(
        error.contains("process gone") && error.contains("could not be written"),
        "{error}"
    );
    assert_eq!(
        h.build("b-live").unwrap().unwrap().status,
        BuildStatus::Running
    );
    assert_eq!(h.close_orphans().unwrap(), 0, "nothing more to close");
}

/// Items 2 and 4 of what was left of issue 10: the lock still names a converge whose process is
/// gone from this host (it was killed, or exited unable to write its end and release the lock: a
/// full disk). The next open closes its rows as `stopped`; before, the lock kept them `running`.
#[test]
fn the_next_open_closes_rows_of_a_lock_holder_whose_process_is_gone() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    let mut dead = meshtop::backends::state::Holder::here("killed");
    dead.pid = dead_pid();
    h.lock_mesh("demo", "default", &dead).unwrap().unwrap();
    let mut row = new_build("b-killed", Some("api"), 1);
    row.operation_id = Some("killed".into());
    h.start_build(&row).unwrap();
    drop(h);

    let h = StateDb::open(&path).unwrap();
    let closed = h.build("b-killed").unwrap().unwrap();
    assert_eq!(closed.status, BuildStatus::Stopped, "{closed:?}");
    assert!(closed.error.unwrap().contains("process gone"));
    // The lock itself is left to the next converge's take-over.
    assert_eq!(
        h.mesh_holder("demo", "default")
            .unwrap()
            .unwrap()
            .operation_id,
        "killed"
    );
}

/// A pid no process has (the child waited for).
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Issue 14: a running row whose holder's heartbeat is stale reads as `stopped (process gone)`
/// (derived: the row still says running, nothing is written: the holder may be frozen and wake);
/// with a fresh heartbeat it reads as running.
#[test]
fn a_running_row_reads_as_process_gone_once_its_holders_heartbeat_is_stale() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    let now = meshtop::backends::state::now_ms();
    let elsewhere = |operation_id: &str, heartbeat_ms| meshtop::backends::state::Holder {
        operation_id: operation_id.into(),
        host: "another-host".into(),
        pid: 1,
        since_ms: heartbeat_ms,
        heartbeat_ms,
    };
    h.lock_mesh("demo", "default", &elsewhere("fresh", now))
        .unwrap()
        .unwrap();
    h.lock_mesh(
        "other",
        "default",
        &elsewhere("frozen", now - 10 * 60 * 1000),
    )
    .unwrap()
    .unwrap();
    let mut fresh = new_build("b-fresh", Some("api"), 1);
    fresh.operation_id = Some("fresh".into());
    h.start_build(&fresh).unwrap();
    let mut frozen = new_build("b-frozen", Some("api"), 2);
    frozen.mesh = "other".into();
    frozen.operation_id = Some("frozen".into());
    h.start_build(&frozen).unwrap();
    drop(h);

    let h = StateDb::open(&path).unwrap();
    let fresh = h.build("b-fresh").unwrap().unwrap();
    assert!(!fresh.process_gone, "{fresh:?}");
    assert_eq!(fresh.shown_status(), "running");
    let frozen = h.build("b-frozen").unwrap().unwrap();
    assert_eq!(
        frozen.status,
        BuildStatus::Running,
        "the row is not rewritten"
    );
    assert!(frozen.process_gone, "{frozen:?}");
    assert_eq!(frozen.shown_status(), "stopped (process gone)");
    let listed = h
        .builds(&BuildQuery {
            mesh: "other".into(),
            limit: 10,
            ..BuildQuery::default()
        })
        .unwrap();
    assert!(listed[0].process_gone);
    assert!(h.last_builds("other").unwrap()["api"].process_gone);
    let json = serde_json::to_value(&frozen).unwrap();
    assert_eq!(json["status"], "running");
    assert_eq!(json["process_gone"], true);
}

/// A build of an operation carries its short id (`#n`); one outside any operation has none.
#[test]
fn a_build_carries_the_short_id_of_its_operation() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    h.begin_operation("demo", "default", OperationKind::Converge, "op-a")
        .unwrap();
    let op = h
        .begin_operation("demo", "default", OperationKind::Converge, "op-b")
        .unwrap();
    let mut b = new_build("b1", Some("api"), 1);
    b.operation_id = Some("op-b".into());
    h.start_build(&b).unwrap();
    h.start_build(&new_build("b2", Some("web"), 2)).unwrap();
    assert_eq!(op.number, 2);
    assert_eq!(h.build("b1").unwrap().unwrap().operation, Some(2));
    let rows = h
        .builds(&BuildQuery {
            mesh: "demo".into(),
            limit: 10,
            ..BuildQuery::default()
        })
        .unwrap();
    let ops: Vec<_> = rows.iter().map(|r| (r.id.as_str(), r.operation)).collect();
    assert_eq!(ops, [("b2", None), ("b1", Some(2))]);
}
