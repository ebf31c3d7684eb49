//! The domain, pure: the mesh file, tiers, inputs and refs, the skip decision, behind.
//! Nothing here talks to a daemon, a database or a cluster; `file`, `inputs` and `realpath` read
//! the mesh file and the build contexts only.

pub mod behind;
pub mod decide;
pub mod file;
pub mod ignore;
pub mod inputs;
pub mod model;
pub mod realpath;
pub mod refs;
pub mod tiers;
pub mod why;

pub use model::*;
