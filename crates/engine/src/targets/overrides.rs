//! What the command line says about where a target is: each kind's flags, declared in the kind's
//! own folder and flattened here into one value the commands and the dashboard carry without
//! reading it. Only the seam interprets it (`connect`, `describe`); a new kind adds its flags as
//! one more flattened field.

use crate::mesh::model::Mesh;

use super::kubernetes;

/// The flags that point a target elsewhere than the mesh file says, every kind's; the command line
/// fills it (clap flattens it into the global flags), the seam reads it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Overrides {
    #[command(flatten)]
    pub(super) kubernetes: kubernetes::Flags,
}

impl Overrides {
    /// The first flag given, as typed (`--context`), or None when the mesh file is followed.
    pub fn first_given(&self) -> Option<&'static str> {
        self.kubernetes.first_given()
    }

    /// The flags point a single `[target]` only: on a mesh that names its targets (each acts where
    /// it names; `--target` chooses one) any of them is bad input, refused before any call.
    pub fn check_for(&self, mesh: &Mesh) -> Result<(), PointedElsewhere> {
        match self.first_given() {
            Some(flag) if mesh.names_targets() => Err(PointedElsewhere {
                flag,
                mesh: mesh.name.clone(),
                file: mesh.file.display().to_string(),
                names: mesh.target_names().join(", "),
            }),
            _ => Ok(()),
        }
    }
}

/// A flag given for a mesh whose targets are named (the command line's check, before connecting).
#[derive(Debug, thiserror::Error)]
#[error(
    "{flag}: mesh {mesh} names its targets ([[target]] in {file}): each acts on the context and namespace it names, never elsewhere; choose one with --target ({names})"
)]
pub struct PointedElsewhere {
    flag: &'static str,
    mesh: String,
    file: String,
    names: String,
}

/// The flags given for a named target (it acts where it names only): the seam's refusal to connect.
#[derive(Debug, thiserror::Error)]
#[error(
    "target {target:?} of mesh {mesh} acts on the context and namespace {file} names for it: --context and --namespace cannot point it elsewhere"
)]
pub struct NamedElsewhere {
    pub mesh: String,
    pub target: String,
    pub file: String,
}
