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

use super::{KubeApi, stamp, verbs};

const NS: &str = "bench-converge";

fn meshtop(dir: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env("KUBECONFIG", kubeconfig)
        .arg("--mesh")
        .arg(dir.join("mesh.toml"))
        .arg("--state")
        .arg(dir.join("state.db"))
        .args(args)
        .output()
        .unwrap()
}

/// Every module the plan gives a ref: name → ref.
fn planned_refs(dir: &Path, kubeconfig: &Path) -> Vec<(String, String)> {
    let out = meshtop(dir, kubeconfig, &["plan", "--json"]);
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

fn entry(reference: &str, round: usize) -> RecordEntry {
    let digest = meshtop::backends::cluster::shard_digest(&format!("{reference}{round}"));
    RecordEntry::new(reference.to_string(), digest)
}

pub async fn measure(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let generated = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gen-mesh.sh"))
        .arg(dir.path())
        .env("MODULES", n.to_string())
        .env("KIND", "kubernetes")
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
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
    let cluster = api.cluster(NS);
    // The bases first (their refs need no artifact), then every module on them; ten stamps each
    // (the last the refs the plan computes), as ten converges would have left it.
    let bases: Record = planned_refs(dir.path(), &kubeconfig)
        .iter()
        .map(|(name, reference)| (name.clone(), entry(reference, 9)))
        .collect();
    stamp(&cluster, &bases, "op-bases").await;
    let all = planned_refs(dir.path(), &kubeconfig);
    println!(
        "second converge, {} modules of {n} planned a ref; the record stamped 10 times over",
        all.len()
    );
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
        stamp(&cluster, &record, &format!("op-{round}")).await;
    }
    let read = cluster.read_record().await.unwrap();
    println!(
        "  the record: {:?}, {} objects and {} bytes read whole",
        read.form, read.cost.objects, read.cost.bytes
    );
    for run in 0..3 {
        api.reset_counts();
        let started = Instant::now();
        let out = meshtop(dir.path(), &kubeconfig, &["converge", "--json"]);
        let took = started.elapsed();
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let decisions = summary["modules"].as_array().map_or(0, Vec::len);
        println!(
            "  converge {run}: {:.0} ms, exit {:?}, {decisions} module(s) in the summary, stamped {}, {} requests: {}",
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
