//! What a confirmation says: exactly what will happen, built from the state (no I/O).

use crate::mesh::decide::Decision;
use crate::mesh::machine::moves_for;
use crate::mesh::model::{Policy, RecordEntry};
use crate::mesh::pin::{RollbackTarget, rollback_target};
use crate::mesh::text::short_id;
use crate::mesh::why::short_digest;

use super::keys::{Action, Mode};
use super::msg::ActionRequest;
use super::state::{AppState, Confirm, ConfirmThen};

/// Why a key's action shows no confirm: what is missing, as the notice says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotAsked {
    #[error("no module selected")]
    NoModule,
    /// `poll`: the key that polls now, as the hint line names it.
    #[error("the plan has not answered yet; wait for it ({poll})")]
    NoPlan { poll: String },
    /// `to`: what there would be nothing to do (`send to`, `roll back`).
    #[error("the record has not answered yet; nothing to {to}")]
    NoRecord { to: &'static str },
    /// `then`: what the person does about it.
    #[error("the record holds nothing for {module}: {then}")]
    NothingRecorded { module: String, then: &'static str },
    #[error("no machine of {module} is behind the record")]
    NoneBehind { module: String },
    /// `poll`: the key that polls now.
    #[error(
        "no upstream of {module} has moved since its registries were last asked ({poll} asks again)"
    )]
    NoUpstreamMoved { module: String, poll: String },
    #[error("the environments view is still reading every target; wait for it")]
    StillReading,
    #[error(
        "target {to} names no promote_from: promote into it with `meshtop promote {module} --to {to} --from TARGET`"
    )]
    NoPromoteFrom { to: String, module: String },
    #[error("{from}'s record names nothing for {module}: nothing to promote into {to}")]
    NothingToPromote {
        from: String,
        module: String,
        to: String,
    },
    /// `short`: the artifact's short digest.
    #[error("{to} already names and runs {from}'s artifact of {module} ({short})")]
    AlreadyThere {
        to: String,
        from: String,
        module: String,
        short: String,
    },
}

fn short(digest: &str) -> String {
    format!("sha256:{}…", short_id(digest))
}

/// `sha256:3f9c2a1b7d4e… (build 7f3e21aa, c0ffee1, 3m ago)`: a digest and the build that made it.
fn made(state: &AppState, digest: &str) -> String {
    match state.build_of(digest) {
        Some(build) => format!(
            "{} (build {}, {}, {} ago)",
            short(digest),
            crate::mesh::text::first_chars(&build.id, 8),
            build
                .commit
                .as_deref()
                .map(crate::mesh::text::short_commit)
                .unwrap_or("no commit"),
            build.age(state.now_ms)
        ),
        None => format!("{} (no build in the history)", short(digest)),
    }
}

/// What a machine runs, with the build that made it: `sha256:… (build …, commit, age)`, `(+1)` for
/// more than one container, or `nothing running`.
fn runs(state: &AppState, running: &[String]) -> String {
    match running {
        [] => "nothing running".to_string(),
        [one] => made(state, one),
        [one, ..] => format!("{} (+{})", made(state, one), running.len() - 1),
    }
}

/// Every module built FROM `module`, directly or not: their addresses move when it rebuilds.
fn dependents(state: &AppState, module: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut frontier = vec![module.to_string()];
    while let Some(base) = frontier.pop() {
        for m in &state.modules {
            if m.builds_on.contains(&base) && !found.contains(&m.name) {
                found.push(m.name.clone());
                frontier.push(m.name.clone());
            }
        }
    }
    found
}

/// What a build of `module` does to machines: rollout ones are recreated, record ones held.
fn machine_consequences(state: &AppState, module: &str, lines: &mut Vec<String>) {
    let names: Vec<&str> = state
        .machines_of(module)
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    let policy = state
        .modules
        .iter()
        .find(|m| m.name == module)
        .map(|m| m.policy);
    match (names.is_empty(), policy) {
        (true, _) => lines.push(format!("no machine runs {module}")),
        (false, Some(Policy::Rollout)) => lines.push(format!(
            "machines recreated on the new artifact (policy rollout): {}",
            names.join(", ")
        )),
        (false, _) => lines.push(format!(
            "machines held on their artifact (policy record) until someone sends: {}",
            names.join(", ")
        )),
    }
    let logs = super::logs::hint(state);
    if !names.is_empty() && !logs.is_empty() {
        lines.push(format!("({logs} on the module: what its machines say)"));
    }
}

/// `c`: converge the selected module. Asks first when it would build, deliver or send; a
/// module the record already vouches for with no machine behind converges at once (None).
pub(crate) fn converge_module(state: &AppState) -> Result<Option<Confirm>, NotAsked> {
    let module = state.selected_module().ok_or(NotAsked::NoModule)?;
    let planned = state.planned(&module.name);
    let decision = planned.map(|p| p.decision);
    let behind = !state.behind_machines(&module.name).is_empty();
    if decision == Some(Decision::Record) && !(behind && module.policy == Policy::Rollout) {
        return Ok(None);
    }
    let reference = planned
        .and_then(|p| p.reference.clone())
        .unwrap_or_else(|| "(ref pending)".into());
    let mut lines = vec![match decision {
        Some(Decision::Host) => format!("deliver {reference} (the host holds it: no build)"),
        Some(Decision::Registry) => {
            format!("pull {reference} from the registry (it holds it: no build)")
        }
        Some(Decision::Record) => format!("{reference}: the record vouches, no build"),
        Some(Decision::Refused) => format!(
            "refused: {}",
            planned.map(|p| p.reason.as_str()).unwrap_or("")
        ),
        _ => format!("build and deliver {reference}, then stamp the record"),
    }];
    if matches!(decision, Some(Decision::Build | Decision::Forced) | None) {
        let moved = dependents(state, &module.name);
        if !moved.is_empty() {
            lines.push(format!(
                "then {} module(s) are out of date (their addresses move): {}",
                moved.len(),
                moved.join(", ")
            ));
        }
    }
    machine_consequences(state, &module.name, &mut lines);
    Ok(Some(Confirm {
        title: format!("Converge {}?", module.name),
        lines,
        verb: "Converge".into(),
        then: ConfirmThen::Start(ActionRequest::Converge {
            modules: Some(vec![module.name.clone()]),
            force: false,
        }),
        go: false,
    }))
}

/// `C`: converge the whole mesh; one line per module with what the plan says it will do.
pub(crate) fn converge_mesh(state: &AppState) -> Result<Confirm, NotAsked> {
    let mut lines = vec![format!(
        "converge mesh {}: tier by tier, then stamp the record",
        state.context.mesh
    )];
    let Some(plan) = &state.plan else {
        let poll = state.keys.hint_line(Mode::Normal, &[Action::Poll]);
        return Err(NotAsked::NoPlan { poll });
    };
    for module in &plan.modules {
        let what = match module.decision {
            Decision::Record => "skip (record names its ref)".to_string(),
            Decision::Host => "skip the build (host holds it), deliver".to_string(),
            Decision::Registry => "skip the build (registry holds it), pull".to_string(),
            Decision::Build | Decision::Forced => "build, deliver".to_string(),
            Decision::Refused => format!("refused: {}", module.reason),
            Decision::Pinned => format!("keep ({})", module.reason),
        };
        let reference = module
            .reference
            .clone()
            .unwrap_or_else(|| match &module.base {
                Some(base) => format!("pending ({base})"),
                None => "–".into(),
            });
        lines.push(format!(
            "  tier {} {} {} — {}",
            module.tier, module.name, reference, what
        ));
    }
    let rollout: Vec<&str> = state
        .modules
        .iter()
        .filter(|m| m.policy == Policy::Rollout)
        .map(|m| m.name.as_str())
        .collect();
    if !rollout.is_empty() {
        lines.push(format!(
            "then send machines of policy rollout: {}",
            rollout.join(", ")
        ));
    }
    Ok(Confirm {
        title: format!("Converge mesh {}?", state.context.mesh),
        lines,
        verb: "Converge".into(),
        then: ConfirmThen::Start(ActionRequest::Converge {
            modules: None,
            force: false,
        }),
        go: false,
    })
}

/// `f`: force-rebuild the selected module.
pub(crate) fn force_rebuild(state: &AppState) -> Result<Confirm, NotAsked> {
    let module = state.selected_module().ok_or(NotAsked::NoModule)?;
    let planned = state.planned(&module.name);
    let reference = planned.and_then(|p| p.reference.clone());
    let mut lines = vec![match &reference {
        Some(reference) => format!("build {reference} whatever any record says"),
        None => format!(
            "build {} whatever any record says (its ref is known once its base resolves)",
            module.name
        ),
    }];
    if let Some(base) = &module.base {
        lines.push(format!("FROM base {base} as the mesh holds it"));
    }
    lines.push("deliver it to the target and stamp the record".into());
    let moved = dependents(state, &module.name);
    if !moved.is_empty() {
        lines.push(format!(
            "if its artifact changes, {} module(s) are out of date (their addresses move): {}",
            moved.len(),
            moved.join(", ")
        ));
    }
    machine_consequences(state, &module.name, &mut lines);
    Ok(Confirm {
        title: format!("Force-rebuild {}?", module.name),
        lines,
        verb: "Rebuild".into(),
        then: ConfirmThen::Start(ActionRequest::Converge {
            modules: Some(vec![module.name.clone()]),
            force: true,
        }),
        go: false,
    })
}

/// `u`: move the selected module's moved upstreams in `mesh.lock` to what their registries serve,
/// then converge every module whose Dockerfile names them (their addresses move).
pub(crate) fn update_upstreams(state: &AppState) -> Result<Confirm, NotAsked> {
    let module = state.selected_module().ok_or(NotAsked::NoModule)?;
    let moved = state.moved_upstreams(&module.name);
    if moved.is_empty() {
        return Err(NotAsked::NoUpstreamMoved {
            module: module.name.clone(),
            poll: state.keys.hint_line(Mode::Normal, &[Action::Poll]),
        });
    }
    let mut lines = Vec::new();
    let mut modules: Vec<String> = Vec::new();
    for upstream in &moved {
        lines.push(format!(
            "move {} in mesh.lock: {} → {}",
            upstream.image,
            short_digest(&upstream.locked),
            upstream
                .current
                .as_deref()
                .map_or_else(String::new, short_digest)
        ));
        for name in &upstream.modules {
            if !modules.contains(name) {
                modules.push(name.clone());
            }
        }
    }
    lines.push(format!(
        "then converge {} (their addresses move)",
        modules.join(", ")
    ));
    for name in &modules {
        machine_consequences(state, name, &mut lines);
    }
    Ok(Confirm {
        title: format!("Update {}'s upstreams?", module.name),
        lines,
        verb: "Update".into(),
        then: ConfirmThen::Start(ActionRequest::UpdateUpstreams {
            images: moved.iter().map(|u| u.image.clone()).collect(),
            modules,
        }),
        go: false,
    })
}

/// `s`: send the selected module's behind machines — each `from digest → to ref@digest`.
pub(crate) fn send(state: &AppState) -> Result<Confirm, NotAsked> {
    let module = state.selected_module().ok_or(NotAsked::NoModule)?;
    // The record the machines were judged against, so that "behind" and "to where" are one answer.
    let record = state
        .machines_record
        .as_ref()
        .or(state.record.as_ref())
        .ok_or(NotAsked::NoRecord { to: "send to" })?;
    let entry = record
        .get(&module.name)
        .ok_or_else(|| NotAsked::NothingRecorded {
            module: module.name.clone(),
            then: "converge it first",
        })?;
    let behind = state.behind_machines(&module.name);
    let moves = moves_for(record, &state.machines, &module.name);
    if behind.is_empty() || moves.is_empty() {
        return Err(NotAsked::NoneBehind {
            module: module.name.clone(),
        });
    }
    let mut lines = vec![format!(
        "send {} machine(s) of {} to the record's artifact:",
        behind.len(),
        module.name
    )];
    for machine in &behind {
        let from = runs(state, &machine.running);
        lines.push(format!("  {}  {from}", machine.name));
        lines.push(format!(
            "    → {} @{}",
            entry.reference,
            made(state, &entry.digest)
        ));
        let note = moves
            .iter()
            .find(|m| m.machine == machine.name)
            .and_then(|m| m.before_send.as_ref());
        lines.extend(note.map(|note| format!("    {note}")));
    }
    lines.push(state.target.send_does.clone());
    let logs = super::logs::hint(state);
    if !logs.is_empty() {
        lines.push(format!(
            "a machine that fails or is held after it: {logs} shows what it says"
        ));
    }
    Ok(Confirm {
        title: format!("Send {}?", module.name),
        lines,
        verb: "Send".into(),
        then: ConfirmThen::Start(ActionRequest::Send {
            module: module.name.clone(),
            moves,
        }),
        go: false,
    })
}

/// `R`: roll the selected module back to the artifact the record named before its current one.
/// The state database knows which that is: the confirm names the current artifact, and the
/// rollback refuses when the record moved since.
pub(crate) fn rollback(state: &AppState) -> Result<Confirm, NotAsked> {
    let module = state.selected_module().ok_or(NotAsked::NoModule)?;
    let record = state
        .record
        .as_ref()
        .ok_or(NotAsked::NoRecord { to: "roll back" })?;
    let entry = record
        .get(&module.name)
        .ok_or_else(|| NotAsked::NothingRecorded {
            module: module.name.clone(),
            then: "there is nothing to roll back",
        })?;
    let target = state
        .views
        .stamps_of(&module.name)
        .map(|stamps| rollback_target(stamps, entry));
    let mut lines = vec![format!(
        "roll {} back from {}@{}",
        module.name,
        entry.reference,
        made(state, &entry.digest)
    )];
    match &target {
        Some(RollbackTarget::To(RecordEntry {
            reference, digest, ..
        })) => {
            lines.push(format!("  to {reference}@{}", made(state, digest)));
            lines.push("send every machine of the module there (whatever its policy):".into());
            let machines = state.machines_of(&module.name);
            if machines.is_empty() {
                lines.push("  no machine runs this module".into());
            }
            for machine in machines {
                let from = match machine.running.first() {
                    Some(one) if one == digest => format!("{} (already there)", short(one)),
                    _ => runs(state, &machine.running),
                };
                lines.push(format!("  {}  {from} → @{}", machine.name, short(digest)));
            }
            lines.push(state.target.send_does.clone());
        }
        // Not known here: the rollback itself finds where to go back to, or says why it cannot.
        Some(RollbackTarget::NothingBefore | RollbackTarget::Unknown) | None => lines.push(
            "to the artifact the record named before (its record history is being read), sending every machine of the module there:".into(),
        ),
    }
    lines.push(format!(
        "and pin it: converges keep it {}",
        crate::mesh::pin::ends_when(&module.name)
    ));
    Ok(Confirm {
        title: format!("Roll back {}?", module.name),
        lines,
        verb: "Roll back".into(),
        then: ConfirmThen::Start(ActionRequest::Rollback {
            module: module.name.clone(),
            from: entry.clone(),
        }),
        go: false,
    })
}
