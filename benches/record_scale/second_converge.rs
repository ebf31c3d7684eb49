//! A real second converge on the API test server: the binary, a generated mesh of `n` modules
//! (`scripts/gen-mesh.sh`, `KIND=kubernetes`, 100 bases, policy `record`), and a record that
//! answers for every module (the refs `meshtop plan` computes, each stamped ten times so that
//! every module has a full history). What it costs: wall time, the API server's requests by verb,
//! and the bytes of the record it reads.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use meshtop::mesh::model::{Record, RecordEntry};
use serde_json::Value;

use meshtop::backends::state::{Holder, StateDb};

use super::common::daemon_proxy::{DOCKER_SOCKET, DaemonProxy};
use super::{KubeApi, stamp, verbs};

const NS: &str = "bench-converge";

/// The binary on the mesh in `dir`, with `env` (`KUBECONFIG`, or `DOCKER_HOST`).
fn meshtop(dir: &Path, env: &(&str, String), args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env(env.0, &env.1)
        .arg("--mesh")
        .arg(dir.join("mesh.toml"))
        .arg("--state")
        .arg(dir.join("state.db"))
        .args(args)
        .output()
        .unwrap()
}

/// Every module the plan gives a ref: name → ref.
pub(super) fn planned_refs(dir: &Path, env: &(&str, String)) -> Vec<(String, String)> {
    let out = meshtop(dir, env, &["plan", "--json"]);
    let plan: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("plan --json: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| {
            Some((
                m["name"].as_str()?.to_string(),
                m["ref"].as_str()?.to_string(),
            ))
        })
        .collect()
}

pub(super) fn entry(reference: &str, round: usize) -> RecordEntry {
    let digest = meshtop::backends::cluster::shard_digest(&format!("{reference}{round}"));
    RecordEntry::new(reference.to_string(), digest)
}

/// `scripts/gen-mesh.sh` in `dir`: `n` modules, `bases` of them bases (0: every module `FROM
/// scratch` on its own), for a target of `kind`.
pub(super) fn generate(dir: &Path, n: usize, bases: usize, kind: &str) {
    let generated = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gen-mesh.sh"))
        .arg(dir)
        .env("MODULES", n.to_string())
        .env("BASES", bases.to_string())
        .env("KIND", kind)
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
}

/// The summary's modules the record answered (`"decision": "record"`).
fn answered(out: &Output) -> usize {
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    summary["modules"].as_array().map_or(0, |modules| {
        modules.iter().filter(|m| m["decision"] == "record").count()
    })
}

/// The same on Docker: the record is the state database's (stamped here under the mesh's lock,
/// as a converge stamps it), and the daemon is reached through a proxy that notes every request.
/// `bases`: 0 for modules `FROM scratch` on their own, whose refs need no build (nothing is built:
/// the record is stamped as a first converge would leave it); else the bases are built for real.
pub(super) async fn measure_docker(n: usize, bases: usize) {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), n, bases, "docker");
    let proxy = DaemonProxy::start(&dir.path().join("docker.sock"), Path::new(DOCKER_SOCKET));
    let env = ("DOCKER_HOST", proxy.docker_host());
    let state = dir.path().join("state.db");
    let stamp_state = |refs: &[(String, String)]| {
        let record: Record = refs
            .iter()
            .map(|(name, reference)| (name.clone(), entry(reference, 9)))
            .collect();
        let db = StateDb::open(&state).unwrap();
        // Entries the record holds already (the bases built) stay as they are.
        let held = db.record("scale", "default").unwrap();
        let record: Record = record
            .into_iter()
            .filter(|(name, _)| !held.contains_key(name))
            .collect();
        let op = format!("bench-{}", record.len());
        db.lock_mesh("scale", "default", &Holder::here(&op))
            .unwrap()
            .unwrap();
        db.stamp_record("scale", "default", &op, &record).unwrap();
        db.unlock_mesh("scale", "default", &op).unwrap();
    };
    // The bases are built for real (the dependents' refs name their artifacts, which the host
    // must hold for the plan to give those refs); the rest is stamped.
    if bases > 0 {
        let bases: Vec<String> = planned_refs(dir.path(), &env)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let mut args = vec!["converge", "--json"];
        args.extend(bases.iter().map(String::as_str));
        let built = meshtop(dir.path(), &env, &args);
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    let all = planned_refs(dir.path(), &env);
    // `RECORD_SCALE_DOCKER_FIRST=converge`: a real first converge builds every module (each
    // `FROM scratch`: cheap, but one build each) instead of the stamp.
    let first = std::env::var("RECORD_SCALE_DOCKER_FIRST").unwrap_or_default() == "converge";
    if first {
        let started = Instant::now();
        let built = meshtop(dir.path(), &env, &["converge", "--json"]);
        println!(
            "first converge on Docker, {n} modules built: {:.0} s, exit {:?}, {} daemon request(s)",
            started.elapsed().as_secs_f64(),
            built.status.code(),
            proxy.lines().len()
        );
    } else {
        stamp_state(&all);
    }
    println!(
        "second converge on Docker, {} modules of {n} planned a ref ({})",
        all.len(),
        if first {
            "after a real first converge"
        } else {
            "the record stamped as a first converge leaves it"
        }
    );
    for run in 0..3 {
        let before = proxy.lines().len();
        let started = Instant::now();
        let out = meshtop(dir.path(), &env, &["converge", "--json"]);
        let took = started.elapsed();
        let lines = proxy.lines();
        let asked = &lines[before..];
        let mut by_path = std::collections::BTreeMap::<&str, usize>::new();
        for line in asked {
            *by_path.entry(line.as_str()).or_default() += 1;
        }
        println!(
            "  converge {run}: {:.0} ms, exit {:?}, {} module(s) the record answered, {} daemon request(s): {by_path:?}",
            took.as_secs_f64() * 1e3,
            out.status.code(),
            answered(&out),
            asked.len()
        );
        if !out.status.success() {
            println!("    {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    if first {
        remove_images(&all);
    }
}

/// Remove the images a real first converge built (their refs: the generated mesh's own), so that
/// the daemon is left as it was found.
fn remove_images(built: &[(String, String)]) {
    for refs in built.chunks(200) {
        let removed = Command::new("docker")
            .args(["image", "rm", "--force"])
            .args(refs.iter().map(|(_, reference)| reference.as_str()))
            .output();
        if let Ok(out) = removed
            && !out.status.success()
        {
            println!("    {}", String::from_utf8_lossy(&out.stderr).trim());
        }
    }
}

/// Ten stamps of every module in `all` (module, ref), the last the refs given, as ten converges
/// would have left the record.
pub(super) async fn stamp_ten_times(
    cluster: &meshtop::backends::cluster::Cluster,
    all: &[(String, String)],
) {
    for round in 0..10 {
        let record: Record = all
            .iter()
            .map(|(name, reference)| {
                let reference = if round == 9 {
                    reference.clone()
                } else {
                    format!("{reference}-r{round}")
                };
                (name.clone(), entry(&reference, round))
            })
            .collect();
        stamp(cluster, &record, &format!("op-{round}")).await;
    }
}

pub(super) async fn measure(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    generate(dir.path(), n, 100, "kubernetes");
    let file = dir.path().join("mesh.toml");
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "kind = \"kubernetes\"\n",
        &format!("kind = \"kubernetes\"\nnamespace = \"{NS}\"\n"),
    );
    std::fs::write(&file, text).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: bench\nclusters:\n- name: test\n  cluster:\n    server: http://{}\n\
contexts:\n- name: bench\n  context:\n    cluster: test\n    user: test\nusers:\n- name: test\n  user: {{}}\n",
            api.addr
        ),
    )
    .unwrap();
    let env = ("KUBECONFIG", kubeconfig.display().to_string());
    let cluster = api.cluster(NS);
    // The bases first (their refs need no artifact), then every module on them; ten stamps each
    // (the last the refs the plan computes), as ten converges would have left it.
    let bases: Record = planned_refs(dir.path(), &env)
        .iter()
        .map(|(name, reference)| (name.clone(), entry(reference, 9)))
        .collect();
    stamp(&cluster, &bases, "op-bases").await;
    let all = planned_refs(dir.path(), &env);
    println!(
        "second converge, {} modules of {n} planned a ref; the record stamped 10 times over",
        all.len()
    );
    stamp_ten_times(&cluster, &all).await;
    let read = cluster.read_record().await.unwrap();
    println!(
        "  the record: {:?}, {} objects and {} bytes read whole",
        read.form, read.cost.objects, read.cost.bytes
    );
    let entries = cluster.read_entries().await.unwrap();
    println!(
        "  what the converge reads of it (the entries and pins): {} objects, {} bytes",
        entries.cost.objects, entries.cost.bytes
    );
    for run in 0..3 {
        api.reset_counts();
        let started = Instant::now();
        let out = meshtop(dir.path(), &env, &["converge", "--json"]);
        let took = started.elapsed();
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let answered = answered(&out);
        println!(
            "  converge {run}: {:.0} ms, exit {:?}, {answered} module(s) the record answered, stamped {}, {} requests: {}",
            took.as_secs_f64() * 1e3,
            out.status.code(),
            summary["stamped"],
            api.total_requests(),
            verbs(&api)
        );
        if !out.status.success() {
            println!("    {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}
