//! `meshtop logs MODULE`: what the module's machines say, each line prefixed with its machine's
//! name when there are several (as `docker compose logs` does), stderr marked. Reading changes
//! nothing: it needs no lock and `--readonly` does not forbid it.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use futures_util::future::join_all;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::backends::daemon::LazyDaemon;
use crate::converge::targets::{Connected, Reach};
use crate::mesh::logs::{LogAsk, LogItem, prefix};
use crate::mesh::machine::Machine;

use super::args::{Global, LogsArgs};
use super::setup::{Reading, Stated};
use super::{Failure, Outcome, print_out, setup};

/// How many items wait between a machine's reader and the printer.
const WAITING: usize = 256;

#[derive(Serialize)]
struct JsonItem<'a> {
    machine: &'a str,
    #[serde(flatten)]
    item: &'a LogItem,
}

pub(crate) async fn run(global: &Global, args: LogsArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    super::known_module(&mesh, &args.module)?;
    let Reading {
        mesh,
        db,
        target,
        record,
    } = Stated::open(global, mesh)?
        .read(global)
        .await
        .map_err(|(_, why)| why.naming_target())?;
    let named = |e: &dyn std::fmt::Display| format!("target {}: {e}", target.name());
    let daemon = LazyDaemon::new();
    let reach = Reach {
        daemon: &daemon,
        db: &db,
    };
    let all = target
        .machines(&mesh, &record.record, reach)
        .await
        .map_err(|e| Failure::failed(named(&e)))?;
    let machines = chosen(all, &args)?;
    if machines.is_empty() {
        print_out(&format!(
            "module {} has no machines on target {}\n",
            args.module,
            target.name()
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let ask = LogAsk {
        follow: args.follow,
        previous: args.previous,
        tail: args.tail,
        since_seconds: args.since,
    };
    let failures = read_all(&target, &mesh, &machines, &ask, &daemon, &args).await;
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    Err(Failure::failed(
        failures
            .iter()
            .map(|(machine, why)| named(&format!("machine {machine}: {why}")))
            .collect::<Vec<_>>()
            .join("\nmeshtop: "),
    ))
}

/// The module's machines, or the one `--machine` names (bad input naming the ones there are).
fn chosen(all: Vec<Machine>, args: &LogsArgs) -> Result<Vec<Machine>, Failure> {
    let of_module: Vec<Machine> = all
        .into_iter()
        .filter(|m| m.module == args.module)
        .collect();
    let Some(name) = &args.machine else {
        return Ok(of_module);
    };
    if of_module.iter().any(|m| m.name == *name) {
        return Ok(of_module.into_iter().filter(|m| m.name == *name).collect());
    }
    let names: Vec<&str> = of_module.iter().map(|m| m.name.as_str()).collect();
    Err(Failure::input(format!(
        "module {} has no machine {name:?}; its machines: {}",
        args.module,
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )))
}

/// Read every machine at once; print as lines come (a follow) or each machine's whole at the end
/// (in machine order). The machines that could not be read, and why.
async fn read_all(
    target: &Connected,
    mesh: &crate::mesh::model::Mesh,
    machines: &[Machine],
    ask: &LogAsk,
    daemon: &LazyDaemon,
    args: &LogsArgs,
) -> Vec<(String, String)> {
    let (all_tx, mut all_rx) = mpsc::channel::<(usize, LogItem)>(WAITING);
    let readers = machines.iter().enumerate().map(|(index, machine)| {
        let all_tx = all_tx.clone();
        async move {
            let (tx, mut rx) = mpsc::channel(WAITING);
            let forward = async {
                while let Some(item) = rx.recv().await {
                    if all_tx.send((index, item)).await.is_err() {
                        break;
                    }
                }
            };
            let (read, ()) = tokio::join!(target.logs(mesh, machine, ask, daemon, tx), forward);
            read.err().map(|e| (machine.name.clone(), e.to_string()))
        }
    });
    let readers: Vec<_> = readers.collect();
    drop(all_tx);
    let width = machines
        .iter()
        .map(|m| m.name.chars().count())
        .max()
        .unwrap_or(0);
    let several = machines.len() > 1;
    let printer = async {
        let mut held: BTreeMap<usize, Vec<LogItem>> = BTreeMap::new();
        while let Some((index, item)) = all_rx.recv().await {
            if args.follow {
                let text = line(&machines[index].name, &item, several, width, args);
                if !write_now(&text) {
                    return;
                }
            } else {
                held.entry(index).or_default().push(item);
            }
        }
        let mut text = String::new();
        for (index, items) in held {
            for item in items {
                text.push_str(&line(&machines[index].name, &item, several, width, args));
            }
        }
        let _ = print_out(&text);
    };
    let (failures, ()) = tokio::join!(join_all(readers), printer);
    failures.into_iter().flatten().collect()
}

fn line(machine: &str, item: &LogItem, several: bool, width: usize, args: &LogsArgs) -> String {
    if args.json {
        let json = serde_json::to_string(&JsonItem { machine, item }).unwrap_or_default();
        return format!("{json}\n");
    }
    let body = item.render(args.timestamps);
    if several {
        format!("{}{body}\n", prefix(machine, width))
    } else {
        format!("{body}\n")
    }
}

/// Write one followed line now; false when standard output is gone (`| head`).
fn write_now(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}
