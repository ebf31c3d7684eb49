//! `meshtop builds`: the build records, newest first.

use std::process::ExitCode;

use crate::backends::state::BuildQuery;
use crate::mesh::builds::{BuildRow, BuildStatus};
use crate::mesh::text::short_id;
use crate::timefmt;

use super::args::{BuildsArgs, BuildsFormat, Global};
use super::setup;
use super::{Failure, Outcome, print_json, print_out};

pub(crate) async fn run(global: &Global, args: BuildsArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    let db = setup::open_state_for_reading(global)?;
    if let Some(module) = &args.module {
        let known = mesh.module(module).is_some()
            || db
                .count_builds(&mesh.name, Some(module))
                .map_err(Failure::failed)?
                > 0;
        if !known {
            let names: Vec<&str> = mesh.modules.iter().map(|m| m.name.as_str()).collect();
            return Err(Failure::input(format!(
                "no module {module:?} in mesh {} and no builds recorded for it; modules: {}",
                mesh.name,
                names.join(", ")
            )));
        }
    }
    let rows = match &args.digest {
        Some(digest) => {
            let found = db
                .build_by_digest(&mesh.name, digest)
                .map_err(Failure::failed)?;
            match found {
                Some(row) => vec![row],
                None if !mesh.signing.trust.is_empty() && mesh.registry.is_some() => {
                    return from_provenance(&mesh, args.module.as_deref(), digest, args.json).await;
                }
                None => {
                    return Err(Failure::failed(format!(
                        "no build of mesh {} made or published {digest}",
                        mesh.name
                    )));
                }
            }
        }
        None => db
            .builds(&BuildQuery {
                mesh: mesh.name.clone(),
                module: args.module.clone(),
                failed_only: args.failed,
                limit: args.limit as usize,
                before: None,
            })
            .map_err(Failure::failed)?,
    };
    if let Some(format) = args.format {
        match format {
            BuildsFormat::Json => print_json(&rows)?,
            BuildsFormat::Csv => print_out(&report_text(&rows, csv_line, false))?,
            BuildsFormat::Markdown => print_out(&report_text(&rows, markdown_line, true))?,
        }
    } else if args.json {
        print_json(&rows)?;
    } else if rows.is_empty() {
        let failed = if args.failed { "failed " } else { "" };
        let of = match &args.module {
            Some(module) => format!(" of {module}"),
            None => String::new(),
        };
        print_out(&format!(
            "no {failed}builds{of} recorded for mesh {} in {}\n",
            mesh.name,
            db.path().display()
        ))?;
    } else {
        print_out(&table_text(&rows))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The STATUS cell: the stored status, or `stopped (process gone)` for a running row whose
/// converge is gone (derived when read; the row is closed by the next take-over).
fn status_cell(row: &BuildRow) -> String {
    let mark = match row.status {
        BuildStatus::Succeeded => "✓ ok",
        BuildStatus::Failed => "✗ failed",
        BuildStatus::Cancelled => "– cancel",
        BuildStatus::Stopped => "■ stopped",
        BuildStatus::Running if row.process_gone => "■ stopped (process gone)",
        BuildStatus::Running => "… running",
    };
    mark.to_string()
}

/// The OP cell: the short id of the operation the build belongs to (`#142`), or `–`.
fn operation_cell(row: &BuildRow) -> String {
    row.operation
        .map(|n| format!("#{n}"))
        .unwrap_or_else(|| "–".into())
}

fn table_text(rows: &[BuildRow]) -> String {
    let mut out = String::new();
    let statuses: Vec<String> = rows.iter().map(status_cell).collect();
    let ops: Vec<String> = rows.iter().map(operation_cell).collect();
    let width = |cells: &[String], header: &str| {
        cells
            .iter()
            .map(|c| c.chars().count())
            .chain([header.len()])
            .max()
            .unwrap_or(0)
    };
    let (sw, ow) = (width(&statuses, "STATUS"), width(&ops, "OP"));
    outln!(
        out,
        "{:<19}  {:<ow$}  {:<sw$}  {:<14}  {:<36}  {:<12}  {:<8}  {:<12}  ERROR",
        "TIME",
        "OP",
        "STATUS",
        "MODULE",
        "REF",
        "DIGEST",
        "COMMIT",
        "HOST"
    );
    for ((row, status), op) in rows.iter().zip(&statuses).zip(&ops) {
        let module = row
            .module
            .clone()
            .unwrap_or_else(|| format!("({})", row.repository));
        let commit = row
            .commit
            .as_deref()
            .map(|c| {
                format!(
                    "{}{}",
                    crate::mesh::text::short_commit(c),
                    if row.dirty { "+" } else { "" }
                )
            })
            .unwrap_or_else(|| "–".into());
        let error = row
            .error
            .as_deref()
            .and_then(|e| e.lines().next())
            .unwrap_or("");
        outln!(
            out,
            "{:<19}  {:<ow$}  {:<sw$}  {:<14}  {:<36}  {:<12}  {:<8}  {:<12}  {}",
            timefmt::local_time(row.started_ms),
            op,
            status,
            module,
            row.reference.as_deref().unwrap_or("–"),
            row.digest.as_deref().map(short_id).unwrap_or("–"),
            commit,
            row.built_by(),
            error
        );
    }
    out
}

/// `operation` last: columns are only ever added at the end, so scripts reading by position keep working.
const REPORT_COLUMNS: [&str; 15] = [
    "id",
    "module",
    "status",
    "ref",
    "digest",
    "commit",
    "dirty",
    "host",
    "started",
    "seconds",
    "forced",
    "error",
    "operation",
    "builder",
    "push_seconds",
];

/// One report line from its cells: `csv_line` or `markdown_line`.
type LineFn = fn(&[String]) -> String;

fn report_text(rows: &[BuildRow], line: LineFn, rule: bool) -> String {
    let mut out = String::new();
    let header: Vec<String> = REPORT_COLUMNS.iter().map(|c| c.to_string()).collect();
    out.push_str(&line(&header));
    if rule {
        out.push_str(&line(&vec!["---".to_string(); REPORT_COLUMNS.len()]));
    }
    for row in rows {
        let cells = vec![
            row.id.clone(),
            row.subject().to_string(),
            row.shown_status().to_string(),
            row.reference.clone().unwrap_or_default(),
            row.digest.clone().unwrap_or_default(),
            row.commit.clone().unwrap_or_default(),
            row.dirty.to_string(),
            row.host.clone(),
            timefmt::local_time(row.started_ms),
            row.ended_ms
                .map(|end| format!("{:.1}", (end - row.started_ms) as f64 / 1000.0))
                .unwrap_or_default(),
            row.forced.to_string(),
            row.error
                .as_deref()
                .and_then(|e| e.lines().next())
                .unwrap_or("")
                .to_string(),
            row.operation.map(|n| format!("#{n}")).unwrap_or_default(),
            row.builder.clone().unwrap_or_default(),
            row.push_ms
                .map(|ms| format!("{:.1}", ms as f64 / 1000.0))
                .unwrap_or_default(),
        ];
        out.push_str(&line(&cells));
    }
    out
}

/// RFC 4180: a cell with a comma, quote or line break is quoted, its quotes doubled.
fn csv_line(cells: &[String]) -> String {
    let quoted: Vec<String> = cells
        .iter()
        .map(|c| {
            if c.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.clone()
            }
        })
        .collect();
    format!("{}\r\n", quoted.join(","))
}

/// A markdown table row; `|` and line breaks in a cell are escaped.
fn markdown_line(cells: &[String]) -> String {
    let escaped: Vec<String> = cells
        .iter()
        .map(|c| c.replace('|', "\\|").replace(['\n', '\r'], " "))
        .collect();
    format!("| {} |\n", escaped.join(" | "))
}

/// `builds --digest` where this machine has no build row: what the signed provenance of manifest
/// `digest` (in the registry, under a module's repository) says of its build.
async fn from_provenance(
    mesh: &crate::mesh::model::Mesh,
    module: Option<&str>,
    digest: &str,
    json: bool,
) -> Outcome {
    let modules: Vec<String> = match module {
        Some(module) => vec![module.to_string()],
        None => mesh.modules.iter().map(|m| m.name.clone()).collect(),
    };
    let read = crate::converge::vouch::provenance_of_manifest(mesh, &modules, digest)
        .await
        .map_err(|e| Failure::failed(format!("the registry could not be asked: {e}")))?;
    let Some(read) = read else {
        return Err(Failure::failed(format!(
            "no build of mesh {} made or published {digest}, and no provenance signed by a key the mesh trusts names it",
            mesh.name
        )));
    };
    if json {
        print_json(&vec![&read])?;
    } else {
        let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".into());
        print_out(&format!(
            "no build row here; from the signed provenance ({}): module {}, host {}, builder {}, commit {}, operation {}, {} → {}\n",
            read.key,
            shown(&read.module),
            shown(&read.host),
            shown(&read.builder_id),
            shown(&read.commit),
            shown(&read.invocation_id),
            shown(&read.started_on),
            shown(&read.finished_on)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_markdown_cells_are_escaped() {
        let cells = vec!["a,b".to_string(), "say \"hi\"".into(), "x|y\nz".into()];
        assert_eq!(
            csv_line(&cells),
            "\"a,b\",\"say \"\"hi\"\"\",\"x|y\nz\"\r\n"
        );
        assert_eq!(markdown_line(&cells), "| a,b | say \"hi\" | x\\|y z |\n");
    }
}
