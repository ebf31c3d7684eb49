//! `meshtop init --from FILE [--out PATH] [--force]`: a mesh file written from a compose file, a
//! bake file or a skaffold file (`workspace::import`), and what it wrote and could not carry said.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::workspace::file::MESH_FILE_NAME;
use crate::workspace::import::{self, Draft, NotWritten, write::render};

use super::args::InitArgs;
use super::{Failure, Outcome, print_out};

pub(crate) fn run(args: InitArgs) -> Outcome {
    let (kind, draft) = import::read(&args.from).map_err(Failure::input)?;
    let out = out_path(&args.from, args.out.as_deref());
    let out_dir = import::file_dir(&out).map_err(Failure::input)?;
    let text = render(&draft, kind, &args.from, &out_dir);
    import::write_mesh_file(&out, &text, args.force).map_err(|e| match e {
        NotWritten::Exists(_) => Failure::input(e),
        NotWritten::Io(..) => Failure::failed(e),
    })?;
    print_out(&said(&draft, &out))?;
    Ok(ExitCode::SUCCESS)
}

/// `--out` (a directory: mesh.toml in it), else mesh.toml beside the file read.
fn out_path(from: &Path, out: Option<&Path>) -> PathBuf {
    match out {
        Some(out) if out.is_dir() => out.join(MESH_FILE_NAME),
        Some(out) => out.to_path_buf(),
        None => from.parent().unwrap_or(Path::new(".")).join(MESH_FILE_NAME),
    }
}

/// What was written, what was renamed and what could not be carried, one line each.
fn said(draft: &Draft, out: &Path) -> String {
    let mut text = String::new();
    let written: Vec<_> = draft
        .modules
        .iter()
        .filter(|m| m.skipped.is_none())
        .collect();
    let machines = draft.machines.iter().filter(|m| m.module.is_some()).count();
    outln!(
        text,
        "wrote {}: mesh {}, {} module{}, {} machine{}",
        out.display(),
        draft.mesh,
        written.len(),
        if written.len() == 1 { "" } else { "s" },
        machines,
        if machines == 1 { "" } else { "s" }
    );
    for module in &written {
        let mut line = format!("  module {}", module.name);
        if let Some(base) = &module.base {
            line.push_str(&format!("  base {base}"));
        }
        if !module.contexts.is_empty() {
            let names: Vec<&str> = module.contexts.values().map(String::as_str).collect();
            line.push_str(&format!("  contexts {}", names.join(", ")));
        }
        if let Some(target) = &module.target {
            line.push_str(&format!("  target {target}"));
        }
        outln!(text, "{line}");
    }
    for renamed in &draft.renamed {
        outln!(text, "  renamed: {renamed}");
    }
    let mut not_carried: Vec<String> = draft.notes.clone();
    for module in &draft.modules {
        if let Some(why) = &module.skipped {
            not_carried.push(format!("{}: not a module: {why}", module.source));
        }
        not_carried.extend(module.notes.iter().map(|n| format!("{}: {n}", module.name)));
    }
    for machine in draft.machines.iter().filter(|m| m.module.is_none()) {
        let runs = machine.image.as_deref().unwrap_or("no image");
        not_carried.push(format!(
            "service {}: runs {runs}, which no module builds: no machine",
            machine.service
        ));
    }
    if !not_carried.is_empty() {
        outln!(
            text,
            "what it could not carry, and why (each is a comment in the file):"
        );
        for note in not_carried {
            outln!(text, "  {note}");
        }
    }
    text
}
