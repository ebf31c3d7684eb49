//! The one-converge-per-mesh lock, with two handles on one file (as two processes would have).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use meshtop::backends::state::{Holder, LOCK_STALE_MS, NewBuild, StateDb, StateError, now_ms};
use meshtop::mesh::builds::BuildStatus;

fn two_handles() -> (tempfile::TempDir, StateDb, StateDb) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let a = StateDb::open(&path).unwrap();
    let b = StateDb::open(&path).unwrap();
    (dir, a, b)
}

/// The pid of a child process that has finished and been reaped: it no longer exists.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_second_holder_is_refused_with_the_holders_info_and_gets_it_after_unlock() {
    let (_dir, a, b) = two_handles();
    let first = Holder::here("c1");
    assert_eq!(a.lock_mesh("demo", "default", &first).unwrap(), Ok(()));
    let refused = b
        .lock_mesh("demo", "default", &Holder::here("c2"))
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.operation_id, "c1");
    assert_eq!(refused.pid, std::process::id());
    assert_eq!(refused.host, first.host);
    assert_eq!(refused.since_ms, first.since_ms);

    // Another mesh is free; the same converge may take its lock again.
    assert_eq!(
        b.lock_mesh("other", "default", &Holder::here("c2"))
            .unwrap(),
        Ok(())
    );
    assert_eq!(a.lock_mesh("demo", "default", &first).unwrap(), Ok(()));

    // Unlocking with the wrong id does nothing; with the right one frees the mesh.
    b.unlock_mesh("demo", "default", "c2").unwrap();
    assert!(
        b.lock_mesh("demo", "default", &Holder::here("c2"))
            .unwrap()
            .is_err()
    );
    a.unlock_mesh("demo", "default", "c1").unwrap();
    assert_eq!(
        b.lock_mesh("demo", "default", &Holder::here("c2")).unwrap(),
        Ok(())
    );
    assert_eq!(
        a.mesh_holder("demo", "default")
            .unwrap()
            .unwrap()
            .operation_id,
        "c2"
    );
}

#[test]
fn a_dead_holder_on_this_host_is_taken_over() {
    let (_dir, a, b) = two_handles();
    let dead = Holder {
        pid: dead_pid(),
        ..Holder::here("dead")
    };
    assert_eq!(a.lock_mesh("demo", "default", &dead).unwrap(), Ok(()));
    let build = NewBuild {
        id: "b1".into(),
        mesh: "demo".into(),
        module: Some("api".into()),
        repository: "/src".into(),
        commit: None,
        dirty: false,
        base_module: None,
        base_digest: None,
        reference: None,
        platforms: String::new(),
        forced: false,
        why: "new module".into(),
        host: dead.host.clone(),
        started_ms: now_ms(),
        operation_id: Some("dead".into()),
        builder: None,
    };
    a.start_build(&build).unwrap();
    assert_eq!(
        b.lock_mesh("demo", "default", &Holder::here("alive"))
            .unwrap(),
        Ok(())
    );
    assert_eq!(
        a.mesh_holder("demo", "default")
            .unwrap()
            .unwrap()
            .operation_id,
        "alive"
    );
    // Its running build will never finish: it is marked stopped, naming the dead converge.
    let row = b.build("b1").unwrap().unwrap();
    assert_eq!(row.status, BuildStatus::Stopped);
    assert!(row.error.unwrap().contains(&format!("pid {}", dead.pid)));
    // The dead converge learns it lost the lock when it next heartbeats.
    assert!(matches!(
        a.heartbeat("demo", "default", "dead"),
        Err(StateError::LockLost { .. })
    ));
    b.heartbeat("demo", "default", "alive").unwrap();
}

#[test]
fn a_holder_on_another_host_is_taken_over_only_when_its_heartbeat_is_stale() {
    let (_dir, a, b) = two_handles();
    let now = now_ms();
    let remote = Holder {
        operation_id: "remote".into(),
        host: "some-other-host.invalid".into(),
        pid: dead_pid(), // a pid on another host says nothing here
        since_ms: now,
        heartbeat_ms: now,
    };
    assert_eq!(a.lock_mesh("demo", "default", &remote).unwrap(), Ok(()));
    assert_eq!(
        b.lock_mesh("demo", "default", &Holder::here("c2"))
            .unwrap()
            .unwrap_err()
            .operation_id,
        "remote"
    );

    let stale = Holder {
        operation_id: "remote-stale".into(),
        heartbeat_ms: now - LOCK_STALE_MS - 1_000,
        since_ms: now - LOCK_STALE_MS - 60_000,
        ..remote
    };
    assert_eq!(a.lock_mesh("other", "default", &stale).unwrap(), Ok(()));
    assert_eq!(
        b.lock_mesh("other", "default", &Holder::here("c3"))
            .unwrap(),
        Ok(())
    );
}

#[test]
fn two_handles_racing_for_a_dead_holders_lock_cannot_both_win() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let setup = StateDb::open(&path).unwrap();
    setup
        .lock_mesh(
            "demo",
            "default",
            &Holder {
                pid: dead_pid(),
                ..Holder::here("dead")
            },
        )
        .unwrap()
        .unwrap();

    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let winners: Vec<bool> = (0..8)
        .map(|i| {
            let path = path.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let h = StateDb::open(&path).unwrap();
                barrier.wait();
                h.lock_mesh("demo", "default", &Holder::here(&format!("racer-{i}")))
                    .unwrap()
                    .is_ok()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert_eq!(winners.iter().filter(|w| **w).count(), 1, "{winners:?}");
}

#[test]
fn finishing_a_converge_writes_its_last_events_and_frees_the_mesh_in_one_go() {
    let (_dir, a, b) = two_handles();
    assert_eq!(
        a.lock_mesh("demo", "default", &Holder::here("c1")).unwrap(),
        Ok(())
    );
    let event = |kind: &str| meshtop::backends::state::NewEvent {
        mesh: "demo".into(),
        operation_id: "c1".into(),
        kind: kind.into(),
        module: None,
        text: format!("{kind} text"),
        payload: None,
    };
    a.finish_operation(
        &[event("stamped"), event("finished")],
        "demo",
        "default",
        "c1",
        None,
    )
    .unwrap();
    assert_eq!(b.mesh_holder("demo", "default").unwrap(), None);
    let kinds: Vec<&str> = b
        .events_after("demo", 0, 10)
        .unwrap()
        .into_iter()
        .map(|e| e.step.as_str())
        .collect();
    assert_eq!(kinds, ["stamped", "finished"]);
    // Another converge's lock is not released by it.
    assert_eq!(
        b.lock_mesh("demo", "default", &Holder::here("c2")).unwrap(),
        Ok(())
    );
    a.finish_operation(&[event("finished")], "demo", "default", "c1", None)
        .unwrap();
    assert_eq!(
        b.mesh_holder("demo", "default")
            .unwrap()
            .map(|h| h.operation_id),
        Some("c2".to_string())
    );
}

#[test]
fn finishing_a_converge_forgets_the_oldest_events_beyond_the_kept_number() {
    use meshtop::backends::state::{KEEP_EVENTS, NewEvent, PRUNE_BATCH};
    let (_dir, a, _b) = two_handles();
    let event = |i: i64| NewEvent {
        mesh: "demo".into(),
        operation_id: format!("old-{}", i / 50),
        kind: "decided".into(),
        module: Some(format!("m{i}")),
        text: "record".into(),
        payload: None,
    };
    let count = |h: &StateDb| h.events_after("demo", 0, usize::MAX).unwrap().len() as i64;
    // Just under the batch: nothing is pruned.
    let below: Vec<NewEvent> = (0..KEEP_EVENTS + PRUNE_BATCH - 2).map(event).collect();
    a.append_events(&below).unwrap();
    assert_eq!(
        a.lock_mesh("demo", "default", &Holder::here("c1")).unwrap(),
        Ok(())
    );
    a.finish_operation(&[event(-1)], "demo", "default", "c1", None)
        .unwrap();
    assert_eq!(count(&a), KEEP_EVENTS + PRUNE_BATCH - 1);
    // One more converge crosses it: the newest KEEP_EVENTS stay, the newest of all among them.
    assert_eq!(
        a.lock_mesh("demo", "default", &Holder::here("c2")).unwrap(),
        Ok(())
    );
    let last = NewEvent {
        operation_id: "c2".into(),
        kind: "finished".into(),
        module: None,
        ..event(0)
    };
    a.finish_operation(&[event(-2), last], "demo", "default", "c2", None)
        .unwrap();
    let kept = a.events_after("demo", 0, usize::MAX).unwrap();
    assert_eq!(kept.len() as i64, KEEP_EVENTS);
    assert_eq!(kept.last().map(|e| e.step.as_str()), Some("finished"));
    assert_eq!(a.latest_operation("demo").unwrap().as_deref(), Some("c2"));
    // A follower starts from the tail: the newest events, oldest first.
    let tail = a.events_tail("demo", 3).unwrap();
    assert_eq!(
        tail.iter().map(|e| e.id).collect::<Vec<_>>(),
        kept[kept.len() - 3..]
            .iter()
            .map(|e| e.id)
            .collect::<Vec<_>>()
    );
    assert!(a.events_tail("other", 3).unwrap().is_empty());
}

#[test]
fn two_targets_of_one_mesh_hold_two_locks_and_keep_two_records() {
    let (_dir, a, b) = two_handles();
    // An operation on staging and one on prod run at once: two locks.
    assert_eq!(
        a.lock_mesh("demo", "staging", &Holder::here("s1")).unwrap(),
        Ok(())
    );
    assert_eq!(
        b.lock_mesh("demo", "prod", &Holder::here("p1")).unwrap(),
        Ok(())
    );
    // The same target is still one at a time.
    let refused = b
        .lock_mesh("demo", "staging", &Holder::here("s2"))
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.operation_id, "s1");
    // Holding one target is not holding the other: its stamp is refused.
    let record = |d: &str| {
        meshtop::mesh::model::Record::from([(
            "api".to_string(),
            meshtop::mesh::model::RecordEntry::new(format!("demo/api:{d}"), format!("sha256:{d}")),
        )])
    };
    assert!(a.stamp_record("demo", "prod", "s1", &record("x")).is_err());
    a.stamp_record("demo", "staging", "s1", &record("1"))
        .unwrap();
    b.stamp_record("demo", "prod", "p1", &record("2")).unwrap();
    assert_eq!(a.record("demo", "staging").unwrap(), record("1"));
    assert_eq!(a.record("demo", "prod").unwrap(), record("2"));
    assert!(a.record("demo", "default").unwrap().is_empty());
    assert_eq!(a.stamps("demo", "prod", "api", 10).unwrap().len(), 1);
    a.unlock_mesh("demo", "staging", "s1").unwrap();
    assert_eq!(
        b.mesh_holder("demo", "prod").unwrap().unwrap().operation_id,
        "p1"
    );
    assert_eq!(b.mesh_holder("demo", "staging").unwrap(), None);
}
