//! Operation short ids: unique within a mesh, said aloud (`#142`), the uuid kept beside them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::history::temp_db;
use meshtop::backends::state::{NewEvent, StateDb};

#[test]
fn short_ids_count_per_mesh_and_never_collide() {
    let (_dir, path) = temp_db();
    let history = StateDb::open(&path).unwrap();
    // Three v7 uuids sharing their first eight characters: the old short form collided.
    let a = history
        .begin_operation(
            "demo",
            "default",
            meshtop::mesh::operation::OperationKind::Converge,
            "01a22df9-0001",
        )
        .unwrap();
    let b = history
        .begin_operation(
            "demo",
            "default",
            meshtop::mesh::operation::OperationKind::Send,
            "01a22df9-0002",
        )
        .unwrap();
    let other = history
        .begin_operation(
            "other",
            "default",
            meshtop::mesh::operation::OperationKind::Converge,
            "01a22df9-0003",
        )
        .unwrap();
    let c = history
        .begin_operation(
            "demo",
            "default",
            meshtop::mesh::operation::OperationKind::Force,
            "01a22df9-0004",
        )
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
        .begin_operation(
            "demo",
            "default",
            meshtop::mesh::operation::OperationKind::Converge,
            "01a22df9-0001",
        )
        .unwrap();
    assert_eq!(again, a);
    // Another handle (another process) continues the count.
    let second = StateDb::open(&path).unwrap();
    let d = second
        .begin_operation(
            "demo",
            "default",
            meshtop::mesh::operation::OperationKind::Converge,
            "01a22df9-0005",
        )
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
        .begin_operation(
            "demo",
            "default",
            meshtop::mesh::operation::OperationKind::Converge,
            "01a22df9-0001",
        )
        .unwrap();
    history
        .begin_operation(
            "demo",
            "default",
            meshtop::mesh::operation::OperationKind::Converge,
            "01a22df9-0002",
        )
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
