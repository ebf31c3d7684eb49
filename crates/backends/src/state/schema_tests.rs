#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Migrations on databases of the version before that hold rows: 6 (the `stopped` build status),
//! 10 (every target keyed apart), 11 (the names say operation).

use rusqlite::{Connection, params};

use super::{MIGRATIONS, SCHEMA_VERSION, open};

/// A database made by the first five migrations, as a binary of schema version 5 left it.
fn v5_database(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    for migration in &MIGRATIONS[..5] {
        conn.execute_batch(migration).unwrap();
    }
    conn.pragma_update(None, "user_version", 5).unwrap();
    conn
}

fn insert(conn: &Connection, id: &str, status: &str, error: Option<&str>) {
    conn.execute(
        "INSERT INTO builds (id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref, \
         digest, platforms, status, forced, why, host, started_ms, ended_ms, error, log_tail, published_ref, \
         published_digest, converge_id) \
         VALUES (?1, 'demo', 'api', 'demo/api', 'c0ffee', 1, 'base', 'sha256:b', 'demo/api:1-amd64', \
         'sha256:d', 'linux/amd64', ?2, 0, 'new module', 'host-a', 1000, 2000, ?3, 'tail', \
         'reg/demo/api:1', 'sha256:p', 'conv-1')",
        params![id, status, error],
    )
    .unwrap();
}

/// A name as migration 11 says it: operation where any operation is meant.
fn as_11_names(text: &str) -> String {
    text.replace("converge_locks", "operation_locks")
        .replace("converge_id", "operation_id")
}

/// Rows read from a version-10 database as they read now: the names of 11, and (12) the steps'
/// data none.
fn as_now(table: &str, rows: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut now: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let mut row: Vec<String> = row.iter().map(|cell| as_11_names(cell)).collect();
            if table == "events" {
                row.push("payload=Null".into());
            }
            // 13: a build's builder and push time.
            if table == "builds" {
                row.push("builder=Null".into());
                row.push("push_ms=Null".into());
                // 15: its daemon's time.
                row.push("daemon_ms=Null".into());
            }
            // 14: a record entry's manifest and signer.
            if table == "records" {
                row.push("manifest=Null".into());
                row.push("signed_by=Null".into());
            }
            row.sort();
            row
        })
        .collect();
    now.sort();
    now
}

/// Every row of `builds`, every column as text, by id.
fn rows(conn: &Connection) -> Vec<Vec<String>> {
    let mut st = conn.prepare("SELECT * FROM builds ORDER BY id").unwrap();
    let width = st.column_count();
    st.query_map([], |r| {
        (0..width)
            .map(|i| {
                let v: rusqlite::types::Value = r.get(i)?;
                Ok(format!("{v:?}"))
            })
            .collect()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The columns of `builds` (name, type, not null, default, primary key) and its indexes' SQL.
fn shape(conn: &Connection) -> (Vec<String>, Vec<(String, String)>) {
    let mut st = conn.prepare("PRAGMA table_info(builds)").unwrap();
    let columns = st
        .query_map([], |r| {
            Ok(format!(
                "{} {} {} {:?} {}",
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, i64>(5)?
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut st = conn
        .prepare(
            "SELECT name, coalesce(sql, '') FROM sqlite_master \
             WHERE type = 'index' AND tbl_name = 'builds' ORDER BY name",
        )
        .unwrap();
    let indexes = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (columns, indexes)
}

fn status_of(conn: &Connection, id: &str) -> String {
    conn.query_row("SELECT status FROM builds WHERE id = ?1", [id], |r| {
        r.get(0)
    })
    .unwrap()
}

#[test]
fn migration_6_keeps_every_row_column_and_index_and_names_old_stops_stopped() {
    // Migrations 7 (the stat cache, one row per context), 8 (`published_ms`, added as a column the
    // old rows leave NULL), 9 (pins' own inputs, the history by time) and 10 (every target keyed
    // apart; the builds stay the mesh's), 11 (`converge_id` is `operation_id`) and 12 (each step's
    // data, a column of `events`), 13 (a build's builder and push time) and 14 (a record entry's
    // manifest and signer, the verified pulls) 15 (a build's daemon time) 16 (each operation's timeline), 17 (the images run out of an index) 18 (the ref of a verified pull) and 19 (what upstream registries served when last asked) came after it.
    assert_eq!(SCHEMA_VERSION, 19);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let v5 = v5_database(&path);
    insert(&v5, "ok", "succeeded", None);
    insert(
        &v5,
        "broken",
        "failed",
        Some("step 3 failed: stopped: no such file"),
    );
    insert(
        &v5,
        "closed",
        "failed",
        Some(
            "stopped: converge conv-1 ended without recording the end of this build (it was killed, or its record could not be written); nothing was stamped for it",
        ),
    );
    insert(
        &v5,
        "taken",
        "failed",
        Some("converge conv-1 (host host-a, pid 42) stopped without finishing this build"),
    );
    insert(&v5, "ctrl-c", "cancelled", Some("interrupted"));
    insert(&v5, "live", "running", None);
    // v5 refuses the new status: that is why the table is made again.
    assert!(
        v5.execute("UPDATE builds SET status = 'stopped' WHERE id = 'ok'", [])
            .is_err()
    );
    let (columns_before, indexes_before) = shape(&v5);
    let columns_before: Vec<String> = columns_before.iter().map(|c| as_11_names(c)).collect();
    let indexes_before: Vec<(String, String)> = indexes_before
        .into_iter()
        .map(|(name, sql)| (name, as_11_names(&sql)))
        .collect();
    let mut before = rows(&v5);
    drop(v5);

    let conn = open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let (columns_after, indexes_after) = shape(&conn);
    let mut columns_expected = columns_before.clone();
    columns_expected.push("published_ms INTEGER 0 None 0".into());
    columns_expected.push("builder TEXT 0 None 0".into());
    columns_expected.push("push_ms INTEGER 0 None 0".into());
    columns_expected.push("daemon_ms INTEGER 0 None 0".into());
    assert_eq!(
        columns_after, columns_expected,
        "every column, as it was, and migration 8's and 13's"
    );
    assert_eq!(indexes_after, indexes_before, "every index, as it was");
    assert_eq!(indexes_after.len(), 8, "{indexes_after:?}"); // 7 + the primary key's
    // The old stops are `stopped`, their reason kept; nothing else changed in any row.
    assert_eq!(status_of(&conn, "closed"), "stopped");
    assert_eq!(status_of(&conn, "taken"), "stopped");
    assert_eq!(
        status_of(&conn, "broken"),
        "failed",
        "a real failure stays failed"
    );
    assert_eq!(status_of(&conn, "ok"), "succeeded");
    assert_eq!(status_of(&conn, "ctrl-c"), "cancelled");
    assert_eq!(status_of(&conn, "live"), "running");
    for row in &mut before {
        if row[0].contains("closed") || row[0].contains("taken") {
            row[11] = "Text(\"stopped\")".into();
        }
        // 8: published_ms; 13: builder, push_ms; 15: daemon_ms.
        row.extend([
            "Null".to_string(),
            "Null".to_string(),
            "Null".to_string(),
            "Null".to_string(),
        ]);
    }
    assert_eq!(rows(&conn), before);
    // The new CHECK: `stopped` is allowed, an unknown status still is not.
    conn.execute("UPDATE builds SET status = 'stopped' WHERE id = 'live'", [])
        .unwrap();
    assert!(
        conn.execute("UPDATE builds SET status = 'gone' WHERE id = 'ok'", [])
            .is_err()
    );
    // The partial indexes still serve their queries after the rename.
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT id FROM builds WHERE mesh = 'demo' AND status = 'failed' \
             ORDER BY started_ms DESC, id DESC",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("builds_failed_by_time"), "{plan}");
}

#[test]
fn a_fresh_database_and_a_migrated_one_have_the_same_builds_table() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = open(&dir.path().join("fresh.db")).unwrap();
    drop(v5_database(&dir.path().join("old.db")));
    let migrated = open(&dir.path().join("old.db")).unwrap();
    let sql = |conn: &Connection| -> String {
        conn.query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'builds'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(sql(&fresh), sql(&migrated));
    assert!(sql(&fresh).contains("'stopped'"), "{}", sql(&fresh));
    assert_eq!(shape(&fresh), shape(&migrated));
}

/// A database made by the first nine migrations, as a binary of schema version 9 left it.
fn v9_database(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    for migration in &MIGRATIONS[..9] {
        conn.execute_batch(migration).unwrap();
    }
    conn.pragma_update(None, "user_version", 9).unwrap();
    conn
}

/// Every row of `table`, every column as text, sorted.
fn all_rows(conn: &Connection, table: &str) -> Vec<Vec<String>> {
    let mut st = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
    let names: Vec<String> = st.column_names().iter().map(|n| n.to_string()).collect();
    let mut rows: Vec<Vec<String>> = st
        .query_map([], |r| {
            (0..names.len())
                .map(|i| {
                    let v: rusqlite::types::Value = r.get(i)?;
                    Ok(format!("{}={v:?}", names[i]))
                })
                .collect()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for row in &mut rows {
        row.sort();
    }
    rows.sort();
    rows
}

#[test]
fn migration_10_keys_every_target_apart_and_the_rows_before_are_the_default_targets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let v9 = v9_database(&path);
    v9.execute_batch(
        "INSERT INTO records VALUES ('demo', 'api', 'demo/api:1', 'sha256:1', 10, 'op-1');
         INSERT INTO pins VALUES ('demo', 'api', 'demo/api:2', 'sha256:2', 'demo/api:1', 'sha256:1',
             'op-2', 'host-a', 20, 'own-2', 'own-1');
         INSERT INTO converge_locks VALUES ('demo', 'op-3', 'host-a', 42, 30, 31);
         INSERT INTO record_history (mesh, module, from_ref, from_digest, to_ref, to_digest,
             operation_id, kind, host, pid, at_ms)
             VALUES ('demo', 'api', NULL, NULL, 'demo/api:1', 'sha256:1', 'op-1', 'converge', 'host-a', 42, 10);
         INSERT INTO takeovers VALUES ('op-0', 'demo', 'op-3', 'host-a', 42, 30, 31);
         INSERT INTO operations VALUES ('demo', 1, 'op-1', 'converge', 10);
         INSERT INTO sends (mesh, module, machine, from_digest, to_ref, to_digest, outcome, at_ms, converge_id)
             VALUES ('demo', 'api', 'api-1', 'sha256:0', 'demo/api:1', 'sha256:1', 'moved', 11, 'op-1');",
    )
    .unwrap();
    let before: Vec<(&str, Vec<Vec<String>>)> = [
        "records",
        "pins",
        "converge_locks",
        "record_history",
        "takeovers",
        "operations",
        "sends",
    ]
    .into_iter()
    .map(|table| (table, all_rows(&v9, table)))
    .collect();
    drop(v9);

    let conn = open(&path).unwrap();
    for (table, rows) in before {
        // Every row and column as it was (named as migration 11 names it), plus its target:
        // `default` (and no promote's source).
        let mut expected: Vec<Vec<String>> = rows
            .iter()
            .map(|row| row.iter().map(|cell| as_11_names(cell)).collect())
            .collect();
        for row in &mut expected {
            row.push("target=Text(\"default\")".into());
            if table == "record_history" {
                row.push("from_target=Null".into());
            }
            if table == "records" {
                row.push("manifest=Null".into());
                row.push("signed_by=Null".into());
            }
            row.sort();
        }
        expected.sort();
        assert_eq!(all_rows(&conn, &as_11_names(table)), expected, "{table}");
    }
    // A second target of the same mesh keeps its own record, pins and lock beside them.
    conn.execute_batch(
        "INSERT INTO records (mesh, target, module, ref, digest, stamped_ms, operation_id)
             VALUES ('demo', 'prod', 'api', 'demo/api:0', 'sha256:0', 40, 'op-4');
         INSERT INTO pins (mesh, target, module, from_ref, from_digest, to_ref, to_digest,
             operation_id, host, at_ms) VALUES ('demo', 'prod', 'api', 'a', 'b', 'c', 'd', 'op-5', 'h', 1);
         INSERT INTO operation_locks VALUES ('demo', 'prod', 'op-6', 'host-b', 7, 50, 51);",
    )
    .unwrap();
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM records WHERE mesh = 'demo'"), 2);
    assert_eq!(
        count("SELECT count(*) FROM operation_locks WHERE mesh = 'demo'"),
        2
    );
    // …but the same target's key is still one row.
    assert!(
        conn.execute(
            "INSERT INTO records (mesh, target, module, ref, digest, stamped_ms, operation_id) \
             VALUES ('demo', 'default', 'api', 'x', 'y', 1, 'op')",
            []
        )
        .is_err()
    );
}

/// A database made by the first ten migrations, as a binary of schema version 10 left it.
fn v10_database(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    for migration in &MIGRATIONS[..10] {
        conn.execute_batch(migration).unwrap();
    }
    conn.pragma_update(None, "user_version", 10).unwrap();
    conn
}

/// Every table of the database (SQLite's own left out), by name.
fn tables(conn: &Connection) -> Vec<String> {
    let mut st = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             ORDER BY name",
        )
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The SQL of every index, by name.
fn index_sql(conn: &Connection) -> Vec<(String, String)> {
    let mut st = conn
        .prepare(
            "SELECT name, coalesce(sql, '') FROM sqlite_master WHERE type = 'index' ORDER BY name",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn migration_11_names_operations_and_keeps_every_row_of_a_version_10_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let v10 = v10_database(&path);
    insert(&v10, "b-1", "running", None);
    v10.execute_batch(
        "INSERT INTO records VALUES ('demo', 'prod', 'api', 'demo/api:1', 'sha256:1', 10, 'op-1');
         INSERT INTO pins VALUES ('demo', 'prod', 'api', 'demo/api:2', 'sha256:2', 'demo/api:1',
             'sha256:1', 'op-2', 'host-a', 20, 'own-2', 'own-1');
         INSERT INTO converge_locks VALUES ('demo', 'prod', 'op-3', 'host-a', 42, 30, 31);
         INSERT INTO record_history (mesh, module, from_ref, from_digest, to_ref, to_digest,
             operation_id, kind, host, pid, at_ms, target, from_target)
             VALUES ('demo', 'api', NULL, NULL, 'demo/api:1', 'sha256:1', 'op-1', 'promote',
             'host-a', 42, 10, 'prod', 'staging');
         INSERT INTO takeovers VALUES ('op-0', 'demo', 'op-3', 'host-a', 42, 30, 31, 'prod');
         INSERT INTO operations VALUES ('demo', 1, 'op-1', 'converge', 10, 'prod');
         INSERT INTO events (at_ms, mesh, converge_id, kind, module, text)
             VALUES (12, 'demo', 'op-1', 'built', 'api', 'built api');
         INSERT INTO sends (mesh, module, machine, from_digest, to_ref, to_digest, outcome, at_ms,
             converge_id, target)
             VALUES ('demo', 'api', 'api-1', 'sha256:0', 'demo/api:1', 'sha256:1', 'moved', 11,
             'op-1', 'prod');
         INSERT INTO manifests VALUES ('demo', 'api', 'demo/api:1', '{}', 9);
         INSERT INTO input_stat_sets VALUES ('/ctx', x'00');",
    )
    .unwrap();
    let before: Vec<(String, Vec<Vec<String>>)> = tables(&v10)
        .into_iter()
        .map(|table| {
            let rows = all_rows(&v10, &table);
            (table, rows)
        })
        .collect();
    assert!(
        before.iter().all(|(_, rows)| !rows.is_empty()),
        "every table holds a row before: {before:?}"
    );
    let indexes_before = index_sql(&v10);
    drop(v10);

    let conn = open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // The same tables (one renamed), each with every row and value it held, under the new names.
    let renamed: Vec<String> = before.iter().map(|(table, _)| as_11_names(table)).collect();
    let mut after_tables = tables(&conn);
    after_tables.sort();
    let mut expected_tables = renamed.clone();
    expected_tables.push("verified_pulls".into());
    expected_tables.push("timelines".into());
    expected_tables.push("index_images".into());
    expected_tables.push("upstreams_seen".into());
    expected_tables.sort();
    assert_eq!(after_tables, expected_tables);
    for (table, rows) in &before {
        assert_eq!(
            all_rows(&conn, &as_11_names(table)),
            as_now(table, rows),
            "{table}"
        );
    }
    assert!(
        !format!("{:?}", all_rows(&conn, "takeovers")).contains("converge"),
        "both of a take-over's ids are operations'"
    );
    // Every index kept, the ones naming a renamed column rewritten, and still used.
    let mut expected_indexes: Vec<(String, String)> = indexes_before
        .iter()
        .map(|(name, sql)| (name.clone(), as_11_names(sql)))
        .collect();
    // Migration 16's table: its primary key is its one index.
    expected_indexes.push(("sqlite_autoindex_timelines_1".into(), String::new()));
    expected_indexes.sort();
    assert_eq!(index_sql(&conn), expected_indexes);
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT id FROM builds WHERE mesh = 'demo' AND operation_id = 'op-1' \
             AND status = 'running'",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("builds_running"), "{plan}");
}

#[test]
fn migration_12_keeps_every_row_and_the_steps_before_it_read_without_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let v10 = v10_database(&path);
    insert(&v10, "b-1", "succeeded", None);
    // A converge as a version-10 meshtop wrote it: its words only.
    v10.execute_batch(
        "INSERT INTO records VALUES ('demo', 'default', 'api', 'demo/api:1', 'sha256:1', 10, 'op-1');
         INSERT INTO pins VALUES ('demo', 'default', 'api', 'demo/api:2', 'sha256:2', 'demo/api:1',
             'sha256:1', 'op-2', 'host-a', 20, 'own-2', 'own-1');
         INSERT INTO converge_locks VALUES ('demo', 'prod', 'op-3', 'host-a', 42, 30, 31);
         INSERT INTO record_history (mesh, target, module, from_ref, from_digest, to_ref, to_digest,
             operation_id, kind, host, pid, at_ms, from_target)
             VALUES ('demo', 'default', 'api', NULL, NULL, 'demo/api:1', 'sha256:1', 'op-1',
             'converge', 'host-a', 42, 10, NULL);
         INSERT INTO takeovers VALUES ('op-0', 'demo', 'op-3', 'host-a', 42, 30, 31, 'prod');
         INSERT INTO operations VALUES ('demo', 1, 'op-1', 'converge', 10, 'default');
         INSERT INTO sends (mesh, module, machine, from_digest, to_ref, to_digest, outcome, at_ms,
             converge_id, target)
             VALUES ('demo', 'api', 'api-1', 'sha256:0', 'demo/api:1', 'sha256:1', 'moved', 11, 'op-1', 'default');
         INSERT INTO manifests VALUES ('demo', 'api', 'demo/api:1', '{}', 10);
         INSERT INTO input_stat_sets VALUES ('/src/api', x'00');
         INSERT INTO events (at_ms, mesh, converge_id, kind, module, text) VALUES
             (1, 'demo', 'op-1', 'started', NULL, 'converge of 1 module(s)'),
             (2, 'demo', 'op-1', 'queued', 'api', 'tier 1 of 1'),
             (3, 'demo', 'op-1', 'decided', 'api', 'build demo/api:1 — no record'),
             (4, 'demo', 'op-1', 'build', 'api', 'building demo/api:1 (build b-1)'),
             (5, 'demo', 'op-1', 'built', 'api', 'built demo/api:1 → sha256:1'),
             (6, 'demo', 'op-1', 'finished', NULL, 'converge succeeded');",
    )
    .unwrap();
    let names = tables(&v10);
    let before: Vec<(String, Vec<Vec<String>>)> = names
        .iter()
        .map(|table| (table.clone(), all_rows(&v10, table)))
        .collect();
    // Every table holds a row, so that each is seen kept.
    for (table, rows) in &before {
        assert!(!rows.is_empty(), "{table} holds no row");
    }
    drop(v10);

    let conn = open(&path).unwrap();
    let mut expected_tables: Vec<String> = names.iter().map(|t| as_11_names(t)).collect();
    expected_tables.push("verified_pulls".into());
    expected_tables.push("timelines".into());
    expected_tables.push("index_images".into());
    expected_tables.push("upstreams_seen".into());
    expected_tables.sort();
    assert_eq!(tables(&conn), expected_tables);
    for (table, rows) in before {
        // Every row and column as it was; a step's data is none (NULL).
        assert_eq!(
            all_rows(&conn, &as_11_names(&table)),
            as_now(&table, &rows),
            "{table}"
        );
    }
    drop(conn);
    // Read through the store, the steps before keep their words and carry no data; folded, the
    // converge walked api and ended (never "stopped (process gone)").
    let db = super::super::StateDb::open(&path).unwrap();
    let events = db.events_after("demo", 0, 100).unwrap();
    assert_eq!(events.len(), 6);
    assert!(events.iter().all(|e| e.payload.is_none()), "{events:?}");
    assert_eq!(events[5].text, "converge succeeded");
    let mut live = crate::mesh::live::LiveOperation::new(&events[0]);
    for event in &events {
        live.apply(event);
    }
    assert_eq!(
        live.state(None),
        crate::mesh::live::OperationState::Finished
    );
    assert!(matches!(
        live.modules["api"].run,
        crate::mesh::live::ModuleRun::Built { took_ms: 1 }
    ));
}

#[test]
fn migration_13_keeps_every_row_of_a_version_12_database_and_builds_gain_their_builder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let v12 = {
        let conn = Connection::open(&path).unwrap();
        for migration in &MIGRATIONS[..12] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 12).unwrap();
        conn
    };
    v12.execute_batch(
        "INSERT INTO builds (id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref,
             digest, platforms, status, forced, why, host, started_ms, ended_ms, error, log_tail, published_ref,
             published_digest, operation_id, published_ms)
             VALUES ('b-1', 'demo', 'api', 'demo/api', 'c0ffee', 1, 'base', 'sha256:b', 'demo/api:1-amd64',
             'sha256:d', 'linux/amd64', 'succeeded', 0, 'new module', 'host-a', 1000, 2000, NULL, 'tail',
             'reg/demo/api:1', 'sha256:p', 'op-1', 2500);
         INSERT INTO records VALUES ('demo', 'default', 'api', 'demo/api:1', 'sha256:1', 10, 'op-1');
         INSERT INTO operations VALUES ('demo', 1, 'op-1', 'converge', 10, 'default');
         INSERT INTO events (at_ms, mesh, operation_id, kind, module, text, payload)
             VALUES (4, 'demo', 'op-1', 'build', 'api', 'building demo/api:1 (build b-1)',
             '{\"step\":\"build\",\"reference\":\"demo/api:1\",\"build\":\"b-1\"}');",
    )
    .unwrap();
    let before: Vec<(String, Vec<Vec<String>>)> = tables(&v12)
        .into_iter()
        .map(|table| {
            let rows = all_rows(&v12, &table);
            (table, rows)
        })
        .collect();
    drop(v12);
    let conn = open(&path).unwrap();
    for (table, rows) in &before {
        let mut expected = rows.clone();
        if table == "builds" {
            for row in &mut expected {
                row.push("builder=Null".into());
                row.push("push_ms=Null".into());
                row.push("daemon_ms=Null".into());
                row.sort();
            }
        }
        if table == "records" {
            for row in &mut expected {
                row.push("manifest=Null".into());
                row.push("signed_by=Null".into());
                row.sort();
            }
        }
        assert_eq!(all_rows(&conn, table), expected, "{table}");
    }
    drop(conn);
    // A row from before reads without a builder; a new one keeps its builder and push time.
    let db = super::super::StateDb::open(&path).unwrap();
    let old = db.build("b-1").unwrap().unwrap();
    assert_eq!(
        (old.builder, old.push_ms, old.published_ms),
        (None, None, Some(2500))
    );
    let new = super::super::NewBuild {
        id: "b-2".into(),
        mesh: "demo".into(),
        module: Some("api".into()),
        repository: "demo/api".into(),
        commit: None,
        dirty: false,
        base_module: None,
        base_digest: None,
        reference: Some("demo/api:2".into()),
        platforms: String::new(),
        forced: false,
        why: "new module".into(),
        host: "host-a".into(),
        started_ms: 3000,
        operation_id: Some("op-2".into()),
        builder: Some("farm-1".into()),
    };
    db.start_build(&new).unwrap();
    db.set_push_time("b-2", 420).unwrap();
    let row = db.build("b-2").unwrap().unwrap();
    assert_eq!(row.builder.as_deref(), Some("farm-1"));
    assert_eq!(row.push_ms, Some(420));
    assert_eq!(row.built_by(), "host-a (farm-1)");
    assert!(db.set_push_time("nope", 1).is_err());
    // 15: the daemon's time, and meshtop's own as the rest of the row's span.
    assert_eq!(row.own_ms(), None);
    db.set_daemon_time(&row.id, 250).unwrap();
    let row = db.build(&row.id).unwrap().unwrap();
    assert_eq!(row.daemon_ms, Some(250));
    if let Some(ended) = row.ended_ms {
        assert_eq!(row.own_ms(), Some((ended - row.started_ms - 250).max(0)));
    }
}

#[test]
fn migration_14_keeps_every_record_entry_and_a_stamp_keeps_its_manifest_and_signer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let v13 = {
        let conn = Connection::open(&path).unwrap();
        for migration in &MIGRATIONS[..13] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 13).unwrap();
        conn
    };
    v13.execute_batch(
        "INSERT INTO records VALUES ('demo', 'default', 'api', 'demo/api:1', 'sha256:1', 10, 'op-1');",
    )
    .unwrap();
    drop(v13);
    let db = super::super::StateDb::open(&path).unwrap();
    // The entry from before reads as it was, knowing no manifest.
    let record = db.record("demo", "default").unwrap();
    assert_eq!(
        record["api"],
        crate::mesh::model::RecordEntry::new("demo/api:1".into(), "sha256:1".into())
    );
    // A stamp keeps the manifest the artifact was verified as and who signed it.
    db.lock_mesh("demo", "default", &super::super::Holder::here("op-2"))
        .unwrap()
        .unwrap();
    let entry = crate::mesh::model::RecordEntry::new("demo/api:2".into(), "sha256:2".into())
        .with_manifest(Some("sha256:m2".into()), Some("keys/ci.pub".into()));
    let stamp = crate::mesh::model::Record::from([("api".to_string(), entry.clone())]);
    db.stamp_record("demo", "default", "op-2", &stamp).unwrap();
    assert_eq!(db.record("demo", "default").unwrap()["api"], entry);
    // What this machine pulled after verifying it is kept, per mesh.
    db.note_verified_pull(
        "demo",
        "sha256:2",
        "demo/api:2",
        "sha256:m2",
        Some("keys/ci.pub"),
    )
    .unwrap();
    assert!(
        db.vouched_here("demo")
            .unwrap()
            .contains(&("demo/api:2".to_string(), "sha256:2".to_string()))
    );
}

#[test]
fn migrations_15_and_16_keep_every_row_of_a_version_14_database_and_add_timelines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let v14 = Connection::open(&path).unwrap();
    for migration in &MIGRATIONS[..14] {
        v14.execute_batch(migration).unwrap();
    }
    v14.pragma_update(None, "user_version", 14).unwrap();
    v14.execute_batch(
        "INSERT INTO records (mesh, target, module, ref, digest, stamped_ms, operation_id, manifest, signed_by) \
         VALUES ('demo', 'default', 'api', 'demo/api:1', 'sha256:1', 10, 'op-1', 'sha256:m1', NULL);
         INSERT INTO operations (mesh, number, uuid, kind, started_ms, target) VALUES ('demo', 1, 'op-1', 'converge', 5, 'default');
         INSERT INTO events (at_ms, mesh, operation_id, kind, module, text, payload) \
         VALUES (6, 'demo', 'op-1', 'started', NULL, 'converge of 1 module(s)', '{\"step\":\"started\",\"modules\":1}');",
    )
    .unwrap();
    let tables = ["records", "operations", "events", "builds", "sends"];
    let before: Vec<Vec<Vec<String>>> = tables.iter().map(|t| all_rows(&v14, t)).collect();
    drop(v14);
    let db = super::super::StateDb::open(&path).unwrap();
    drop(db);
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let after: Vec<Vec<Vec<String>>> = tables.iter().map(|t| all_rows(&conn, t)).collect();
    assert_eq!(before, after, "every row of schema 14 kept as it was");
    assert!(all_rows(&conn, "timelines").is_empty());
    drop(conn);
    // The operation from before has no timeline kept; its events still fold into one.
    let db = super::super::StateDb::open(&path).unwrap();
    assert_eq!(db.timeline("op-1").unwrap(), None);
    let events = db.operation_events("op-1").unwrap();
    let timeline = crate::mesh::timeline::Timeline::from_events(&events);
    assert_eq!((timeline.operation, timeline.started_ms), (Some(1), 6));
}
