//! meshtop-workspace: what meshtop reads from the disk: the mesh file, each module's inputs
//! (walked, hashed and tarred), `.dockerignore`, the stat cache, the context watcher, and paths
//! resolved below a directory. It fills the domain's types (`crate::mesh`) and may name nothing
//! else of meshtop's: no outside system, no engine, no screen.

// The rooms below, named as the folders they were (`crate::mesh::…`).
use meshtop_mesh as mesh;

pub mod file;
pub mod ignore;
pub mod import;
pub mod inputs;
pub mod lock_file;
pub mod own_files;
mod realpath;
pub mod secrets;
pub mod stat_cache;
pub mod walks;
pub mod watch;
