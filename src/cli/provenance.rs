//! `meshtop provenance MODULE`: what the signed provenance of the module's recorded artifact (on
//! the target) says — builder, inputs, source commit, operation, when — and whether it verifies.
//! Exit 1 when no provenance a trusted key signed is attached to it.

use std::process::ExitCode;
use std::sync::Mutex;

use serde::Serialize;

use crate::converge::vouch::{self, ArtifactProvenance};
use crate::mesh::provenance::ReadProvenance;
use crate::mesh::text::short_id;

use super::args::{Global, ProvenanceArgs};
use super::{Failure, Outcome, print_json, print_out, setup};

#[derive(Serialize)]
struct Answer {
    module: String,
    target: String,
    #[serde(rename = "ref")]
    reference: String,
    artifact: String,
    /// The manifest it was read for (None: the registry holds no manifest of this artifact).
    manifest: Option<String>,
    /// Whether a trusted key signed a provenance of this manifest.
    verified: bool,
    provenances: Vec<ReadProvenance>,
    unverified: usize,
}

pub(crate) async fn run(global: &Global, args: ProvenanceArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    if mesh.signing.trust.is_empty() {
        return Err(Failure::input(format!(
            "mesh {} trusts no key: no provenance can be verified; add trust = [\"keys/ci.pub\"] under [mesh] in {}",
            mesh.name,
            mesh.file.display()
        )));
    }
    setup::select(&mesh, std::slice::from_ref(&args.module))?;
    let db = Mutex::new(setup::open_state_for_reading(global)?);
    let target = setup::target(global, &mesh).await?;
    let record = target
        .read_record(&mesh, &db)
        .await
        .map_err(Failure::failed)?;
    let Some(entry) = record.record.get(&args.module) else {
        return Err(Failure::input(format!(
            "module {} has no recorded artifact on target {}: converge it first (meshtop converge {})",
            args.module,
            target.name(),
            args.module
        )));
    };
    let found = vouch::artifact_provenance(&mesh, entry)
        .await
        .map_err(|e| Failure::failed(format!("the registry could not be asked: {e}")))?;
    let answer = Answer {
        module: args.module.clone(),
        target: target.name().to_string(),
        reference: entry.reference.clone(),
        artifact: entry.digest.clone(),
        verified: found.as_ref().is_some_and(|f| !f.provenances.is_empty()),
        manifest: found.as_ref().map(|f| f.manifest.clone()),
        unverified: found.as_ref().map_or(0, |f| f.unverified),
        provenances: found.map(|f| f.provenances).unwrap_or_default(),
    };
    if args.json {
        print_json(&answer)?;
    } else {
        print_out(&text(&answer))?;
    }
    Ok(if answer.verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn text(answer: &Answer) -> String {
    let mut out = String::new();
    outln!(
        out,
        "module {} on target {}: {} ({})",
        answer.module,
        answer.target,
        answer.reference,
        short_id(&answer.artifact)
    );
    let Some(manifest) = &answer.manifest else {
        outln!(
            out,
            "✗ no provenance: the registry holds no manifest of this artifact"
        );
        return out;
    };
    outln!(out, "manifest {manifest}");
    if answer.provenances.is_empty() {
        outln!(
            out,
            "✗ no provenance signed by a key the mesh trusts under its .att tag{}",
            match answer.unverified {
                0 => String::new(),
                n => format!(" ({n} envelope(s) there do not verify)"),
            }
        );
    }
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".into());
    for p in &answer.provenances {
        outln!(
            out,
            "✓ provenance signed by {} (SLSA v1, in-toto, DSSE)",
            p.key
        );
        outln!(out, "  builder     {}", shown(&p.builder_id));
        outln!(out, "  build type  {}", shown(&p.build_type));
        outln!(out, "  module      {}", shown(&p.module));
        outln!(out, "  inputs      {}", shown(&p.inputs));
        outln!(
            out,
            "  commit      {}{}",
            shown(&p.commit),
            p.source
                .as_ref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default()
        );
        outln!(out, "  operation   {}", shown(&p.invocation_id));
        outln!(out, "  host        {}", shown(&p.host));
        outln!(
            out,
            "  when        {} → {}",
            shown(&p.started_on),
            shown(&p.finished_on)
        );
    }
    out
}

/// What a provenance says of who built an artifact, for BUILT BY on a machine without its build
/// row: `host @commit (builder id, operation …) (from the signed provenance)`.
pub(crate) fn built_by_text(found: &ArtifactProvenance) -> Option<String> {
    let p = found.provenances.first()?;
    Some(format!(
        "{} @{} {} (builder {}, operation {}, {}) (from the signed provenance)",
        p.host.as_deref().unwrap_or("?"),
        p.commit
            .as_deref()
            .map(crate::mesh::text::short_commit)
            .unwrap_or("–"),
        p.finished_on.as_deref().unwrap_or("?"),
        p.builder_id.as_deref().unwrap_or("?"),
        p.invocation_id.as_deref().unwrap_or("?"),
        p.key
    ))
}
