//! Hashing a build context: meshtop's walk + parallel hash vs `sha256sum` over the same files.
//! The context is generated (default 2,000 files, 200 MB; `MESHTOP_BENCH_FILES` / `MESHTOP_BENCH_MB`).
//! Run with `cargo bench --bench hash` (or `--profile dev` to reuse the prebuilt dependencies:
//! sha2 is opt-level 3 in every profile). `scripts/bench-hash.sh` prints the ratio directly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use meshtop::workspace::inputs::{InputSpec, hash_inputs, tar_inputs};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes `files` pseudo-random files totalling `mb` MB under 20 directories; returns their paths.
fn generate(root: &Path, files: usize, mb: usize) -> Vec<PathBuf> {
    std::fs::write(root.join("Dockerfile"), b"FROM scratch\nCOPY . /\n").unwrap();
    let size = mb * 1024 * 1024 / files;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut paths = vec![root.join("Dockerfile")];
    for i in 0..files {
        let dir = root.join(format!("d{}", i % 20));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = Vec::with_capacity(size + 8);
        while bytes.len() < size {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes.extend_from_slice(&state.to_le_bytes());
        }
        bytes.truncate(size);
        let path = dir.join(format!("f{i}.bin"));
        std::fs::write(&path, bytes).unwrap();
        paths.push(path);
    }
    paths
}

fn bench(c: &mut Criterion) {
    let files = env_usize("MESHTOP_BENCH_FILES", 2000);
    let mb = env_usize("MESHTOP_BENCH_MB", 200);
    let dir = tempfile::TempDir::new().unwrap();
    let paths = generate(dir.path(), files, mb);
    let args = BTreeMap::new();
    let spec = InputSpec {
        context: dir.path(),
        dockerfile: "Dockerfile",
        build_args: &args,
        base_digest: None,
        platforms: &[],
        upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
        contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
        context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
    };
    hash_inputs(&spec).unwrap(); // warm the page cache

    let mut group = c.benchmark_group(format!("hash {files} files {mb} MB"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Bytes((mb * 1024 * 1024) as u64));
    group.bench_function("meshtop hash_inputs", |b| {
        b.iter(|| hash_inputs(&spec).unwrap())
    });
    group.bench_function("meshtop tar_inputs", |b| {
        b.iter(|| tar_inputs(&spec, None, std::io::sink()).unwrap())
    });
    if Command::new("sha256sum")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok()
    {
        group.bench_function("sha256sum", |b| {
            b.iter(|| {
                let status = Command::new("sha256sum")
                    .args(&paths)
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success());
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
