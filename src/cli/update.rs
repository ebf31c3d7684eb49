//! `meshtop update [IMAGE…] [--json]`: move mesh.lock to what each upstream's registry serves now;
//! `meshtop outdated [--json]`: say which moved, without moving anything.

use std::process::ExitCode;

use crate::backends::daemon::LazyDaemon;
use crate::converge::plan::{UpstreamNow, refresh_upstreams, update_lock};
use crate::mesh::why::{short_digest, upstream_moved_text};

use super::args::{Global, OutdatedArgs, UpdateArgs};
use super::{Failure, Outcome, print_json, print_out, setup};

pub(crate) async fn run(global: &Global, args: UpdateArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    let daemon = LazyDaemon::new();
    let update = update_lock(&mesh, &args.images, &daemon)
        .await
        .map_err(Failure::input)?;
    if args.json {
        print_json(&update)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    for (image, from, to) in &update.moved {
        outln!(out, "{}", upstream_moved_text(image, Some(from), Some(to)));
    }
    if update.moved.is_empty() {
        outln!(
            out,
            "mesh.lock: every upstream asked is where it was locked"
        );
    } else {
        outln!(
            out,
            "mesh.lock written: the modules on these upstreams have new addresses (meshtop plan says which)"
        );
    }
    for image in &update.unused {
        outln!(
            out,
            "upstream {image} is locked but no Dockerfile of the mesh names it: remove its entry from mesh.lock"
        );
    }
    print_out(&out)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn outdated(global: &Global, args: OutdatedArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    let db = std::sync::Mutex::new(setup::open_state(global)?);
    let refreshed = refresh_upstreams(&mesh, &db)
        .await
        .map_err(Failure::input)?;
    if let Some(why) = &refreshed.unnoted {
        eprintln!(
            "meshtop: warning: the answers could not be kept for status and the dashboard: {why}"
        );
    }
    let answers = refreshed.answers;
    let moved = answers.iter().any(|a| a.moved());
    if args.json {
        print_json(&answers)?;
    } else {
        let mut out = String::new();
        if answers.is_empty() {
            outln!(out, "mesh.lock holds no upstream image");
        }
        out.push_str(&upstream_lines(&answers));
        if moved {
            outln!(
                out,
                "meshtop update moves the lock to what the registries serve now"
            );
        }
        print_out(&out)?;
    }
    Ok(if moved {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One line per locked upstream: locked and current digests, the modules on it and their declared
/// machines (`outdated`, `plan --refresh`).
pub(crate) fn upstream_lines(answers: &[UpstreamNow]) -> String {
    let mut out = String::new();
    for answer in answers {
        let now = match (&answer.current, &answer.error) {
            (Some(current), _) if answer.moved() => {
                format!("moved to {}", short_digest(current))
            }
            (Some(_), _) => "current".to_string(),
            (None, Some(error)) => format!("unknown ({error})"),
            (None, None) => "unknown".to_string(),
        };
        outln!(
            out,
            "{}  locked {}  {now}  modules {}  declared machines {}",
            answer.image,
            short_digest(&answer.locked),
            if answer.modules.is_empty() {
                "-".to_string()
            } else {
                answer.modules.join(",")
            },
            answer.machines
        );
    }
    out
}
