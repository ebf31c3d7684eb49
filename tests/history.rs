//! The state database on real SQLite, one temporary directory per test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use meshtop::backends::history::{
    BuildEnd, BuildQuery, BuildStatus, EventRow, History, HistoryError, NewBuild, NewEvent,
    SCHEMA_VERSION, SendRow, builds_sql,
};
use meshtop::mesh::model::{Record, RecordEntry};

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("state.db");
    (dir, path)
}

fn new_build(id: &str, module: Option<&str>, started_ms: i64) -> NewBuild {
    NewBuild {
        id: id.to_string(),
        mesh: "demo".into(),
        module: module.map(str::to_string),
        repository: "/src/demo".into(),
        commit: Some("abc123".into()),
        dirty: false,
        base_module: None,
        base_digest: None,
        reference: Some(format!("{id}-amd64")),
        platforms: "linux/amd64".into(),
        forced: false,
        why: "new module".into(),
        host: "builder".into(),
        started_ms,
        converge_id: Some("c1".into()),
    }
}

fn end(status: BuildStatus, digest: Option<&str>) -> BuildEnd {
    BuildEnd {
        status,
        digest: digest.map(str::to_string),
        error: (status == BuildStatus::Failed).then(|| "step 3 failed".to_string()),
        log_tail: Some("last lines".into()),
        ended_ms: 2_000,
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[test]
fn migrates_from_empty_and_reopen_keeps_data() {
    let (_dir, path) = temp_db();
    let h = History::open(&path).unwrap();
    assert_eq!(h.path(), path);
    h.start_build(&new_build("b1", Some("api"), 1_000)).unwrap();
    drop(h);

    let raw = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let journal: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
    drop(raw);

    let h = History::open(&path).unwrap();
    let row = h.build("b1").unwrap().unwrap();
    assert_eq!(row.module.as_deref(), Some("api"));
    assert_eq!(row.status, BuildStatus::Running);
}

#[test]
fn file_mode_is_0600_and_looser_modes_are_tightened() {
    let (_dir, path) = temp_db();
    drop(History::open(&path).unwrap());
    assert_eq!(mode(&path), 0o600);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(History::open(&path).unwrap());
    assert_eq!(mode(&path), 0o600);
}

#[test]
fn newer_schema_is_refused_and_the_file_untouched() {
    let (_dir, path) = temp_db();
    drop(History::open(&path).unwrap());
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.pragma_update(None, "user_version", SCHEMA_VERSION + 5)
        .unwrap();
    let _: String = raw
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .unwrap();
    drop(raw);
    let before = std::fs::read(&path).unwrap();

    let err = History::open(&path).unwrap_err();
    assert!(
        matches!(err, HistoryError::TooNew { found, known, .. } if found == SCHEMA_VERSION + 5 && known == SCHEMA_VERSION),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("version {}", SCHEMA_VERSION + 5)),
        "{message}"
    );
    assert!(
        message.contains(&format!("({SCHEMA_VERSION})")),
        "{message}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the newer database was modified"
    );
    assert!(!Path::new(&format!("{}-wal", path.display())).exists());
}

#[test]
fn a_file_that_is_not_a_database_is_a_clear_error() {
    let (_dir, path) = temp_db();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text =
        "this is a text file, long enough to look like a header to anyone at all....\n".repeat(20);
    std::fs::write(&path, &text).unwrap();
    let err = History::open(&path).unwrap_err();
    assert!(matches!(err, HistoryError::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
    assert!(err.to_string().contains("--state"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the file was modified"
    );
}

#[test]
fn a_directory_in_place_of_the_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = History::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("directory"), "{err}");
}

#[test]
fn an_unwritable_location_names_the_path() {
    // Under /proc nothing can be created, not even by root.
    let path = Path::new("/proc/meshtop-no-such-dir/state.db");
    let err = History::open(path).unwrap_err();
    assert!(matches!(err, HistoryError::Dir { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("/proc/meshtop-no-such-dir/state.db"),
        "{err}"
    );

    // A parent that is a regular file.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), b"x").unwrap();
    let path = dir.path().join("file").join("state.db");
    let err = History::open(&path).unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_read_only_database_names_the_path() {
    if running_as_root() {
        eprintln!(
            "skipped: permission bits do not bind root (an_unwritable_location_names_the_path covers root)"
        );
        return;
    }
    let (_dir, path) = temp_db();
    drop(History::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    let err = History::open(&path).unwrap_err();
    assert!(matches!(err, HistoryError::ReadOnly { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );

    // A read-only directory where the file does not exist yet.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
    let path = dir.path().join("state.db");
    let err = History::open(&path).unwrap_err();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn start_is_idempotent_and_a_finished_build_never_returns_to_running() {
    let (_dir, path) = temp_db();
    let h = History::open(&path).unwrap();
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
    let h = History::open(&path).unwrap();
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
    ] {
        assert_eq!(BuildStatus::parse(s.as_str()), Some(s));
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
    assert_eq!(BuildStatus::parse("done"), None);
}

#[test]
fn fail_running_marks_only_running_rows_of_that_converge() {
    let (_dir, path) = temp_db();
    let h = History::open(&path).unwrap();
    h.start_build(&new_build("done", Some("a"), 1)).unwrap();
    h.finish_build("done", &end(BuildStatus::Succeeded, Some("sha256:d")))
        .unwrap();
    h.start_build(&new_build("run1", Some("b"), 2)).unwrap();
    h.start_build(&new_build("run2", Some("c"), 3)).unwrap();
    let mut other = new_build("other", Some("d"), 4);
    other.converge_id = Some("c2".into());
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
    let h = History::open(&path).unwrap();
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
    let h = History::open(&path).unwrap();
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
        Err(HistoryError::UnknownBuild { .. })
    ));
}

#[test]
fn last_builds_gives_the_newest_build_per_module() {
    let (_dir, path) = temp_db();
    let h = History::open(&path).unwrap();
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
    drop(History::open(&path).unwrap());
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
    let p = plan(&conn, meshtop::backends::history::BUILD_BY_DIGEST_SQL);
    assert!(
        p.contains("builds_by_digest") && p.contains("builds_by_published_digest"),
        "{p}"
    );
    assert!(!scans_builds(&p), "{p}");
    let p = plan(&conn, meshtop::backends::history::LAST_BUILDS_SQL);
    assert!(!scans_builds(&p), "{p}");
}

#[test]
fn stamping_the_record_merges_and_clear_forgets() {
    let (_dir, path) = temp_db();
    let h = History::open(&path).unwrap();
    assert!(h.record("demo").unwrap().is_empty());
    let entry = |r: &str, d: &str| RecordEntry {
        reference: r.into(),
        digest: d.into(),
    };
    let first: Record = [
        ("api".to_string(), entry("api:1", "sha256:a1")),
        ("web".to_string(), entry("web:1", "sha256:w1")),
    ]
    .into_iter()
    .collect();
    h.stamp_record("demo", "c1", &first).unwrap();
    let second: Record = [("api".to_string(), entry("api:2", "sha256:a2"))]
        .into_iter()
        .collect();
    h.stamp_record("demo", "c2", &second).unwrap();
    h.stamp_record("other", "c3", &second).unwrap();

    let record = h.record("demo").unwrap();
    assert_eq!(record.len(), 2);
    assert_eq!(record["api"], entry("api:2", "sha256:a2"));
    assert_eq!(
        record["web"],
        entry("web:1", "sha256:w1"),
        "a module outside the converge is kept"
    );
    let stamps = h.record_stamps("demo").unwrap();
    assert_eq!(stamps["api"].1, "c2");
    assert_eq!(stamps["web"].1, "c1");

    h.clear_record("demo").unwrap();
    assert!(h.record("demo").unwrap().is_empty());
    assert_eq!(h.record("other").unwrap().len(), 1);
}

#[test]
fn manifests_per_mesh_module_and_ref() {
    let (_dir, path) = temp_db();
    let h = History::open(&path).unwrap();
    assert_eq!(h.latest_manifest("demo", "api").unwrap(), None);
    h.save_manifest("demo", "api", "r1", r#"{"a":"1"}"#)
        .unwrap();
    h.save_manifest("demo", "api", "r2", r#"{"a":"2"}"#)
        .unwrap();
    h.save_manifest("other", "api", "r9", r#"{"a":"9"}"#)
        .unwrap();
    assert_eq!(
        h.manifest("demo", "api", "r1").unwrap().as_deref(),
        Some(r#"{"a":"1"}"#)
    );
    assert_eq!(h.manifest("demo", "web", "r1").unwrap(), None);
    assert_eq!(
        h.latest_manifest("demo", "api").unwrap(),
        Some(("r2".into(), r#"{"a":"2"}"#.into()))
    );
    // Saving r1 again makes it the latest and replaces its text.
    h.save_manifest("demo", "api", "r1", r#"{"a":"1b"}"#)
        .unwrap();
    assert_eq!(
        h.latest_manifest("demo", "api").unwrap(),
        Some(("r1".into(), r#"{"a":"1b"}"#.into()))
    );
}

#[test]
fn events_are_read_in_order_after_a_cursor_from_another_handle() {
    let (_dir, path) = temp_db();
    let writer = History::open(&path).unwrap();
    let reader = History::open(&path).unwrap();
    assert_eq!(reader.latest_converge("demo").unwrap(), None);
    let event = |c: &str, kind: &str, text: &str| NewEvent {
        mesh: "demo".into(),
        converge_id: c.into(),
        kind: kind.into(),
        module: Some("api".into()),
        text: text.into(),
    };
    let first = writer.append_event(&event("c1", "tier", "tier 0")).unwrap();
    writer
        .append_event(&NewEvent {
            mesh: "other".into(),
            ..event("c9", "tier", "elsewhere")
        })
        .unwrap();
    let second = writer
        .append_event(&event("c1", "build-output", "step 1"))
        .unwrap();
    let third = writer
        .append_event(&event("c2", "decision", "record"))
        .unwrap();
    assert!(first < second && second < third);

    let all: Vec<EventRow> = reader.events_after("demo", 0, 100).unwrap();
    let texts: Vec<_> = all.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(texts, ["tier 0", "step 1", "record"]);
    let after: Vec<_> = reader.events_after("demo", first, 1).unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, second);
    assert_eq!(after[0].kind, "build-output");
    assert_eq!(after[0].converge_id, "c1");
    assert!(reader.events_after("demo", third, 10).unwrap().is_empty());
    assert_eq!(
        reader.latest_converge("demo").unwrap().as_deref(),
        Some("c2")
    );
}

#[test]
fn sends_newest_first_per_module() {
    let (_dir, path) = temp_db();
    let h = History::open(&path).unwrap();
    let send = |module: &str, machine: &str, at_ms: i64, outcome: &str| SendRow {
        mesh: "demo".into(),
        module: module.into(),
        machine: machine.into(),
        from_digest: "sha256:old".into(),
        to_ref: "api:2".into(),
        to_digest: "sha256:new".into(),
        outcome: outcome.into(),
        at_ms,
        converge_id: None,
    };
    h.record_send(&send("api", "api-1", 10, "moved")).unwrap();
    h.record_send(&send("api", "api-2", 20, "failed: port in use"))
        .unwrap();
    h.record_send(&send("web", "web-1", 15, "moved")).unwrap();
    let api = h.sends("demo", Some("api"), 10).unwrap();
    assert_eq!(
        api.iter().map(|s| s.machine.as_str()).collect::<Vec<_>>(),
        ["api-2", "api-1"]
    );
    assert_eq!(api[0].outcome, "failed: port in use");
    assert_eq!(api[0], send("api", "api-2", 20, "failed: port in use"));
    let all = h.sends("demo", None, 2).unwrap();
    assert_eq!(
        all.iter().map(|s| s.machine.as_str()).collect::<Vec<_>>(),
        ["api-2", "web-1"]
    );
    assert!(h.sends("other", None, 10).unwrap().is_empty());
}
