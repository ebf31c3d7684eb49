//! `meshtop verify`: on-call's question after an incident: does what the record names, and what
//! each machine runs, carry a signature by a key the mesh trusts? Exit 1 when anything does not.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;

use crate::backends::daemon::LazyDaemon;
use crate::converge::targets::Reach;
use crate::converge::vouch;
use crate::mesh::model::RecordEntry;
use crate::mesh::text::short_id;

use super::args::{Global, VerifyArgs};
use super::setup::{self, Reading};
use super::{Failure, Outcome, print_json, print_out};

/// One artifact checked: the record's, or one a machine runs that the record does not name.
#[derive(Debug, Serialize)]
struct Checked {
    module: String,
    /// `record`, or the machine's name.
    of: String,
    #[serde(rename = "ref")]
    reference: String,
    artifact: String,
    /// The manifest that carries it (None: the registry holds none).
    manifest: Option<String>,
    signed: bool,
    /// Whom it is signed by, or why it is not trusted.
    says: String,
    /// Who built it: this machine's build row, else its signed provenance (`… (from the signed
    /// provenance)`), else `unknown build`.
    built_by: String,
    /// What its signed provenance says, when this machine has no build row of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    provenance: Option<crate::mesh::provenance::ReadProvenance>,
}

pub(crate) async fn run(global: &Global, args: VerifyArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    if mesh.signing.trust.is_empty() {
        return Err(Failure::input(format!(
            "mesh {} trusts no key: nothing can be verified; add trust = [\"keys/ci.pub\"] under [mesh] in {}",
            mesh.name,
            mesh.file.display()
        )));
    }
    let selected = setup::select(&mesh, &args.modules)?;
    let Reading {
        mesh,
        db,
        target,
        record,
    } = Reading::of(global, mesh).await?;
    let daemon = Arc::new(LazyDaemon::new());
    let reach = Reach {
        daemon: &daemon,
        db: &db,
    };
    let machines = target
        .machines(&mesh, &record.record, reach)
        .await
        .map_err(Failure::failed)?;
    let wanted = |module: &str| selected.as_ref().is_none_or(|s| s.contains(module));
    // The record's artifacts, then what machines run beside them (once per artifact).
    let mut asked: Vec<(String, String, RecordEntry)> = record
        .record
        .iter()
        .filter(|(module, _)| wanted(module))
        .map(|(module, entry)| (module.clone(), "record".to_string(), entry.clone()))
        .collect();
    let mut seen = checked_already(target.as_ref(), &mesh, &asked, reach).await?;
    for machine in machines.iter().filter(|m| wanted(&m.module)) {
        for running in &machine.running {
            if seen.insert(running.clone()) {
                let reference = machine.image.split('@').next().unwrap_or_default();
                asked.push((
                    machine.module.clone(),
                    machine.name.clone(),
                    RecordEntry::new(reference.to_string(), running.clone()),
                ));
            }
        }
    }
    let mut checked = Vec::new();
    let now = crate::timefmt::now_ms();
    for (module, of, entry) in asked {
        let build = db
            .lock()
            .map_err(|_| Failure::failed("the state database handle is poisoned"))?
            .build_by_digest(&mesh.name, &entry.digest)
            .map_err(Failure::failed)?;
        let published = build.as_ref().and_then(|b| b.published_digest.clone());
        let (manifest, signed, says) =
            match vouch::artifact_signature(&mesh, &entry, published.as_deref()).await {
                Ok(signature) => (
                    signature.manifest.clone(),
                    signature.trusted(),
                    signature.words(),
                ),
                Err(error) => (None, false, format!("could not be checked: {error}")),
            };
        let (built_by, provenance) =
            who_built(&mesh, build.as_ref(), &entry, manifest.as_deref(), now).await;
        checked.push(Checked {
            module,
            of,
            reference: entry.reference,
            artifact: entry.digest,
            manifest,
            signed,
            says,
            built_by,
            provenance,
        });
    }
    if args.json {
        print_json(&checked)?;
    } else {
        let mut out = String::new();
        for c in &checked {
            out.push_str(&format!(
                "{} {} ({}) {}@{}: {}; built by {}\n",
                if c.signed { "✓" } else { "✗" },
                c.module,
                c.of,
                c.reference,
                short_id(&c.artifact),
                c.says,
                c.built_by
            ));
        }
        if checked.is_empty() {
            out.push_str("nothing recorded or running to verify\n");
        }
        print_out(&out)?;
    }
    Ok(if checked.iter().all(|c| c.signed) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}

/// The digests the record's rows check: each artifact, and what a machine running it reports
/// instead (the image the host runs out of a multi-platform artifact's index).
async fn checked_already(
    target: &dyn crate::converge::targets::Target,
    mesh: &crate::mesh::model::Mesh,
    asked: &[(String, String, RecordEntry)],
    reach: Reach<'_>,
) -> Result<BTreeSet<String>, Failure> {
    let mut seen: BTreeSet<String> = asked.iter().map(|(_, _, e)| e.digest.clone()).collect();
    for (_, _, entry) in asked {
        let also = target
            .runs_as(mesh, entry, reach)
            .await
            .map_err(Failure::failed)?;
        seen.extend(also);
    }
    Ok(seen)
}

/// Who built `entry`'s artifact: this machine's build row, else (without one) the signed
/// provenance of the `manifest` that carries it, else `unknown build`; and that provenance.
async fn who_built(
    mesh: &crate::mesh::model::Mesh,
    build: Option<&crate::mesh::builds::BuildRow>,
    entry: &RecordEntry,
    manifest: Option<&str>,
    now: i64,
) -> (String, Option<crate::mesh::provenance::ReadProvenance>) {
    if let Some(build) = build {
        return (build.made_by(now), None);
    }
    let found = match manifest {
        Some(manifest) => {
            let carried = entry
                .clone()
                .with_manifest(Some(manifest.to_string()), None);
            vouch::artifact_provenance(mesh, &carried)
                .await
                .ok()
                .flatten()
        }
        None => None,
    };
    let said = found.as_ref().and_then(super::provenance::built_by_text);
    (
        said.unwrap_or_else(|| "unknown build".into()),
        found.and_then(|f| f.provenances.into_iter().next()),
    )
}
