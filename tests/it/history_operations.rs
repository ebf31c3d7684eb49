//! Operation short ids: unique within a mesh, said aloud (`#142`), the uuid kept beside them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::history::temp_db;
use meshtop::backends::state::{NewEvent, StateDb};
use meshtop::mesh::operation::OperationKind;

#[test]
fn short_ids_count_per_mesh_and_never_collide() {
    let (_dir, path) = temp_db();
    let history = StateDb::open(&path).unwrap();
    // Three v7 uuids sharing their first eight characters: the old short form collided.
    let a = history
        .begin_operation("demo", "default", OperationKind::Converge, "01a22df9-0001")
        .unwrap();
    let b = history
        .begin_operation("demo", "default", OperationKind::Send, "01a22df9-0002")
        .unwrap();
    let other = history
        .begin_operation("other", "default", OperationKind::Converge, "01a22df9-0003")
        .unwrap();
    let c = history
        .begin_operation("demo", "default", OperationKind::Force, "01a22df9-0004")
        .unwrap();
    assert_eq!((a.number, b.number, c.number), (1, 2, 3));
    assert_eq!(other.number, 1, "numbers count within a mesh");
    assert_eq!(b.to_string(), "#2");
    assert_eq!(
        (b.uuid.as_str(), b.kind.as_str()),
        ("01a22df9-0002", "send")
    );
    // Idempotent on the uuid.
    let again = history
        .begin_operation("demo", "default", OperationKind::Converge, "01a22df9-0001")
        .unwrap();
    assert_eq!(again, a);
    // Another handle (another process) continues the count.
    let second = StateDb::open(&path).unwrap();
    let d = second
        .begin_operation("demo", "default", OperationKind::Converge, "01a22df9-0005")
        .unwrap();
    assert_eq!(d.number, 4);
    assert_eq!(history.operation("01a22df9-0005").unwrap(), Some(d));
    assert_eq!(history.operation("nope").unwrap(), None);
}

#[test]
fn events_carry_their_operation_short_id() {
    let (_dir, path) = temp_db();
    let history = StateDb::open(&path).unwrap();
    history
        .begin_operation("demo", "default", OperationKind::Converge, "01a22df9-0001")
        .unwrap();
    history
        .begin_operation("demo", "default", OperationKind::Converge, "01a22df9-0002")
        .unwrap();
    for (uuid, text) in [("01a22df9-0002", "numbered"), ("no-operation", "older")] {
        history
            .append_event(&NewEvent {
                mesh: "demo".into(),
                operation_id: uuid.into(),
                kind: "started".into(),
                module: None,
                text: text.into(),
                payload: None,
            })
            .unwrap();
    }
    let events = history.events_after("demo", 0, 10).unwrap();
    assert_eq!(events[0].operation, Some(2));
    assert_eq!(events[1].operation, None);
    let tail = history.events_tail("demo", 10).unwrap();
    assert_eq!(tail, events);
}

/// A kind this meshtop does not know (a newer one wrote it) is refused naming the word, never read
/// as another kind.
#[test]
fn an_operation_kind_this_meshtop_does_not_know_is_named() {
    let (_dir, path) = temp_db();
    let history = StateDb::open(&path).unwrap();
    history
        .begin_operation("demo", "default", OperationKind::Gc, "01a22df9-0009")
        .unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        raw.query_row(
            "SELECT kind FROM operations WHERE uuid = '01a22df9-0009'",
            [],
            |r| r.get::<_, String>(0)
        )
        .unwrap(),
        "gc",
        "stored as the word it always was"
    );
    raw.execute(
        "UPDATE operations SET kind = 'deploy' WHERE uuid = '01a22df9-0009'",
        [],
    )
    .unwrap();
    let error = history.operation("01a22df9-0009").unwrap_err().to_string();
    assert!(
        error.contains("\"deploy\"") && error.contains("newer meshtop"),
        "{error}"
    );
}
