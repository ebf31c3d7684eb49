//! `meshtop update [IMAGE…] [--json]`: move mesh.lock to what each upstream's registry serves now.

use std::process::ExitCode;

use crate::backends::daemon::LazyDaemon;
use crate::converge::plan::update_lock;
use crate::mesh::why::upstream_moved_text;

use super::args::{Global, UpdateArgs};
use super::{Failure, Outcome, print_json, print_out, setup};

pub async fn run(global: &Global, args: UpdateArgs) -> Outcome {
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
