//! Hashes a build context as meshtop does and prints the digest, the bytes hashed and the time.
//! Usage: `cargo run --example hash_context -- DIR [DOCKERFILE]` (used by scripts/bench-hash.sh).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use meshtop::mesh::manifest::FileEntry;
use meshtop::workspace::inputs::{InputSpec, hash_inputs};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: hash_context DIR [DOCKERFILE]");
        return ExitCode::from(2);
    };
    let dockerfile = args.next().unwrap_or_else(|| "Dockerfile".into());
    let build_args = BTreeMap::new();
    let spec = InputSpec {
        context: Path::new(&dir),
        dockerfile: &dockerfile,
        build_args: &build_args,
        base_digest: None,
        platforms: &[],
        upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
        contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
        context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
    };
    let start = Instant::now();
    match hash_inputs(&spec) {
        Ok(inputs) => {
            let seconds = start.elapsed().as_secs_f64();
            let files = inputs
                .manifest
                .files
                .values()
                .filter(|e| matches!(e, FileEntry::File { .. }))
                .count();
            println!("digest {}", inputs.digest);
            println!("files {files}");
            println!("seconds {seconds:.4}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
