//! `meshtop plan`: the dry run.

use std::process::ExitCode;

use crate::converge::plan::{self, Plan, PlanContext, StateManifests};
use std::sync::Arc;

use crate::backends::daemon::LazyDaemon;

use super::args::{Global, PlanArgs};
use super::setup::{self, Reading};
use super::{Failure, Outcome, print_json, print_out};

pub(crate) async fn run(global: &Global, args: PlanArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    let selected = setup::select(&mesh, &args.modules)?;
    let Reading {
        mesh,
        db,
        target,
        record,
    } = Reading::of(global, mesh).await?;
    let refreshed = match args.refresh {
        true => Some(
            plan::refresh_upstreams(&mesh, &db)
                .await
                .map_err(Failure::input)?,
        ),
        false => None,
    };
    let daemon = Arc::new(LazyDaemon::new());
    let ctx = PlanContext::new(&mesh, target.as_ref(), &record, selected, args.force);
    let manifests = StateManifests {
        db: &db,
        mesh: &mesh.name,
        target: target.name(),
    };
    let plan = plan::dry_run(ctx, daemon, &manifests)
        .await
        .map_err(Failure::failed)?;
    if let Some(warning) = &record.warning {
        eprintln!("meshtop: warning: {warning}");
    }
    if let Some(why) = refreshed.as_ref().and_then(|r| r.unnoted.as_ref()) {
        eprintln!(
            "meshtop: warning: the upstreams' answers could not be kept for status and the dashboard: {why}"
        );
    }
    match (args.json, refreshed) {
        (true, None) => print_json(&plan)?,
        (true, Some(refreshed)) => {
            let mut json = serde_json::to_value(&plan).map_err(Failure::failed)?;
            json["upstreams"] =
                serde_json::to_value(&refreshed.answers).map_err(Failure::failed)?;
            print_json(&json)?;
        }
        (false, refreshed) => {
            let mut out = plan_text(&plan);
            if let Some(refreshed) = refreshed {
                out.push_str(&refresh_text(&refreshed.answers));
            }
            print_out(&out)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `--refresh` asked: every locked upstream, then what to do about those that moved.
fn refresh_text(answers: &[plan::UpstreamNow]) -> String {
    let mut out = String::from("upstreams, asked now:\n");
    if answers.is_empty() {
        outln!(out, "  mesh.lock holds no upstream image");
    }
    for line in super::update::upstream_lines(answers).lines() {
        outln!(out, "  {line}");
    }
    let moved: Vec<&str> = answers
        .iter()
        .filter(|a| a.moved())
        .map(|a| a.image.as_str())
        .collect();
    if !moved.is_empty() {
        outln!(
            out,
            "{} upstream(s) moved: `meshtop update {}` moves the lock, then converge builds on them",
            moved.len(),
            moved.join(" ")
        );
    }
    out
}

pub(crate) fn plan_text(plan: &Plan) -> String {
    let mut out = String::new();
    outln!(
        out,
        "mesh {} · target {} ({})",
        plan.mesh,
        plan.target,
        plan.target_kind
    );
    if let Some(error) = &plan.host_error {
        outln!(
            out,
            "host: could not answer ({error}); read as holding nothing"
        );
    }
    if let Some(warning) = &plan.registry_error {
        outln!(out, "warning: {warning}");
    }
    for locked in &plan.upstreams_locked {
        outln!(out, "{locked}");
    }
    let width = plan
        .modules
        .iter()
        .map(|m| m.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let ref_width = plan
        .modules
        .iter()
        .filter_map(|m| m.reference.as_ref().map(String::len))
        .max()
        .unwrap_or(3)
        .max(3);
    outln!(
        out,
        "{:<2} {:<width$}  {:<ref_width$}  {:<8}  REASON",
        "T",
        "MODULE",
        "REF",
        "DECISION"
    );
    for module in &plan.modules {
        let reference = match (&module.reference, module.builds_on.first()) {
            (Some(reference), _) => reference.clone(),
            (None, Some(base)) if module.decision != crate::mesh::decide::Decision::Refused => {
                format!("pending ({base})")
            }
            (None, _) => "–".to_string(),
        };
        outln!(
            out,
            "{:<2} {:<width$}  {:<ref_width$}  {:<8}  {}",
            module.tier,
            module.name,
            reference,
            module.decision,
            module.reason
        );
        outln!(out, "{:<2} {:<width$}  why: {}", "", "", module.why);
    }
    out
}
