//! A [`Draft`] written as a mesh file: the keys it carries, and a `#` comment for each it could
//! not and why, beside the module or machine it belongs to.

use std::fmt::Write as _;
use std::path::Path;

use super::{Draft, DraftMachine, DraftModule, Kind, paths};

/// A TOML string, quoted and escaped.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// The mesh file for `draft`, read from `from` (as the person gave it), to be written in `out_dir`.
pub fn render(draft: &Draft, kind: Kind, from: &Path, out_dir: &Path) -> String {
    let mut out = String::new();
    let from = from.display();
    let _ = writeln!(
        out,
        "# Written by `meshtop init --from {from}` (a {}): check it, then run `meshtop plan`.",
        kind.word()
    );
    if matches!(kind, Kind::Bake) {
        let _ = writeln!(out, "# Variables were read at their defaults.");
    }
    if !draft.notes.is_empty() {
        let _ = writeln!(out, "# Not carried from {from}:");
        for note in &draft.notes {
            let _ = writeln!(out, "#   {note}");
        }
    }
    let _ = writeln!(out, "\n[mesh]\nname = {}", quoted(&draft.mesh));
    for module in &draft.modules {
        out.push('\n');
        write_module(&mut out, module, out_dir);
    }
    for machine in &draft.machines {
        out.push('\n');
        write_machine(&mut out, machine);
    }
    out
}

fn write_module(out: &mut String, module: &DraftModule, out_dir: &Path) {
    let mut keys = String::new();
    let _ = writeln!(keys, "[[module]]\nname = {}", quoted(&module.name));
    let context = paths::relative(out_dir, &module.context);
    let _ = writeln!(keys, "context = {}", quoted(&context));
    if let Some(dockerfile) = &module.dockerfile {
        let _ = writeln!(keys, "dockerfile = {}", quoted(dockerfile));
    }
    if let Some(target) = &module.target {
        let _ = writeln!(keys, "target = {}", quoted(target));
    }
    if let Some(base) = &module.base {
        let _ = writeln!(keys, "base = {}", quoted(base));
    }
    if !module.contexts.is_empty() {
        let contexts: Vec<String> = module
            .contexts
            .iter()
            .map(|(name, module)| format!("{} = {}", quoted(name), quoted(module)))
            .collect();
        let _ = writeln!(keys, "contexts = {{ {} }}", contexts.join(", "));
    }
    if !module.args.is_empty() {
        let args: Vec<String> = module
            .args
            .iter()
            .map(|(k, v)| format!("{k} = {}", quoted(v)))
            .collect();
        let _ = writeln!(keys, "args = {{ {} }}", args.join(", "));
    }
    match &module.skipped {
        Some(why) => {
            let _ = writeln!(out, "# {} is not a module: {why}", module.source);
            for line in keys.lines() {
                let _ = writeln!(out, "# {line}");
            }
        }
        None => out.push_str(&keys),
    }
    for note in &module.notes {
        let _ = writeln!(out, "# {note}");
    }
}

fn write_machine(out: &mut String, machine: &DraftMachine) {
    match &machine.module {
        Some(module) => {
            let _ = writeln!(
                out,
                "[[machine]]\nname = {}\nmodule = {}\ncompose = {{ project = {}, service = {} }}",
                quoted(&machine.service),
                quoted(module),
                quoted(&machine.project),
                quoted(&machine.service)
            );
        }
        None => {
            let runs = machine
                .image
                .as_deref()
                .map_or("no image meshtop builds".to_string(), |i| {
                    format!("image {i}")
                });
            let _ = writeln!(
                out,
                "# service {} runs {runs}, which no module builds: no machine of the mesh",
                machine.service
            );
        }
    }
    for note in &machine.notes {
        let _ = writeln!(out, "# {note}");
    }
}
