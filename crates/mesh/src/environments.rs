//! Environments: every target of a mesh seen beside the others, and the promote rule. Pure: the
//! grid `meshtop status --all-targets` prints and the dashboard's environments view draws is made
//! here from what each target answered (modules down, targets across).

use serde::Serialize;

use super::behind::MachineState;
use super::machine::Machine;
use super::model::{Mesh, Record, RecordEntry};
use super::text::short_id;

/// Where a promote into `to` takes its artifacts from: `--from` when it agrees with the chain the
/// mesh file draws (`promote_from`), else the chain's own source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceRefusal {
    #[error("mesh {mesh} names no target {name:?} (its targets: {targets})")]
    NoSuchTarget {
        mesh: String,
        name: String,
        targets: String,
    },
    #[error(
        "target {to} names no promote_from: say where its artifacts come from with --from TARGET (targets: {targets})"
    )]
    NoSource { to: String, targets: String },
    #[error("--from {from} --to {to}: a target is not promoted from itself")]
    Itself { from: String, to: String },
    /// `--from` names another target than the chain's: the artifacts reach `to` through its own
    /// source, one step at a time.
    #[error(
        "{to} is promoted from {source_target}, not {from} (the chain: {chain}): promote to {source_target} first, or promote {to} from {source_target}"
    )]
    OffTheChain {
        from: String,
        to: String,
        source_target: String,
        chain: String,
    },
}

/// The target a promote into `to` takes its artifacts from (see [`SourceRefusal`]).
pub fn promote_source(mesh: &Mesh, to: &str, from: Option<&str>) -> Result<String, SourceRefusal> {
    let names = mesh.target_names();
    let targets = names.join(", ");
    for name in std::iter::once(to).chain(from) {
        if !names.contains(&name) {
            return Err(SourceRefusal::NoSuchTarget {
                mesh: mesh.name.clone(),
                name: name.to_string(),
                targets,
            });
        }
    }
    let chained = mesh.environment(to).and_then(|e| e.promote_from.clone());
    match (from, chained) {
        (Some(from), _) if from == to => Err(SourceRefusal::Itself {
            from: from.to_string(),
            to: to.to_string(),
        }),
        (Some(from), Some(source)) if from != source => {
            let mut chain = mesh.promote_chain(to);
            if !chain.iter().any(|c| c == from) {
                chain.insert(0, format!("{from} ✗"));
            }
            Err(SourceRefusal::OffTheChain {
                from: from.to_string(),
                to: to.to_string(),
                source_target: source,
                chain: chain.join(" → "),
            })
        }
        (Some(from), _) => Ok(from.to_string()),
        (None, Some(source)) => Ok(source),
        (None, None) => Err(SourceRefusal::NoSource {
            to: to.to_string(),
            targets,
        }),
    }
}

/// What one target answered for the grid: its record, its machines, when each module's entry last
/// moved, who holds it now; or why it could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetRead {
    pub name: String,
    /// `docker`, `kubernetes`, and where (`context X, namespace Y`).
    pub kind: String,
    pub place: Option<String>,
    pub record: Record,
    pub machines: Vec<Machine>,
    /// Module → when its record entry last changed (the newest stamp of the target's history).
    pub moved_ms: std::collections::BTreeMap<String, i64>,
    /// The operation holding the target now (`promote #12 by host-a`), if one does.
    pub held_by: Option<String>,
    /// Why the target could not be read (its cells then say nothing).
    pub error: Option<String>,
}

/// How a module's machines on one target stand against that target's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MachineCount {
    pub total: usize,
    pub current: usize,
    pub behind: usize,
    /// Behind, but held by policy (`record`) or paused.
    pub held: usize,
    pub missing: usize,
}

impl MachineCount {
    fn of(machines: &[Machine], module: &str) -> MachineCount {
        let mut count = MachineCount::default();
        for machine in machines.iter().filter(|m| m.module == module) {
            count.total += 1;
            match machine.state {
                MachineState::Current => count.current += 1,
                MachineState::Behind => count.behind += 1,
                MachineState::Held | MachineState::Paused => count.held += 1,
                MachineState::Missing => count.missing += 1,
                MachineState::Unrecorded | MachineState::UnknownContainer => {}
            }
        }
        count
    }

    /// `2/2` when every machine runs the record's artifact; else what is not (`1 behind`,
    /// `1 held`, `missing`); `–` without machines.
    pub fn text(&self) -> String {
        if self.total == 0 {
            return "–".into();
        }
        if self.missing == self.total {
            return "missing".into();
        }
        let off: Vec<String> = [
            (self.behind, "behind"),
            (self.held, "held"),
            (self.missing, "missing"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, word)| format!("{n} {word}"))
        .collect();
        if off.is_empty() {
            format!("{}/{}", self.current, self.total)
        } else {
            off.join(", ")
        }
    }
}

/// One machine of a module on a target, and what it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachineRun {
    pub name: String,
    /// `container`, `Deployment`, …
    pub kind: String,
    /// The artifact it runs (its first), if any.
    pub running: Option<String>,
}

/// One module on one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub target: String,
    /// What the target's record names for the module.
    pub artifact: Option<RecordEntry>,
    pub machines: MachineCount,
    /// Each machine of the module there (a promote into the cell sends those not on its artifact).
    pub runs: Vec<MachineRun>,
    /// The target it is promoted from, and whether this cell's artifact differs from that one's
    /// (None: the target names no source, or the source could not be read).
    pub source: Option<String>,
    pub differs: Option<bool>,
    /// When its record entry last moved.
    pub moved_ms: Option<i64>,
}

impl Cell {
    /// Whether a promote from its source would change something here: the source names an
    /// artifact and this cell names another (or none).
    pub fn promotable(&self) -> bool {
        self.differs == Some(true)
    }

    /// `≠ 3f9c2a1b7d4e 2/2 5m` as a screen or a table writes it (`now_ms` for the age).
    pub fn text(&self, now_ms: i64) -> String {
        let Some(artifact) = &self.artifact else {
            let mark = if self.promotable() { "≠ " } else { "" };
            return format!("{mark}–");
        };
        let mark = if self.promotable() { "≠ " } else { "" };
        let age = self
            .moved_ms
            .map(|at| format!(" {}", crate::timefmt::age_since(at, now_ms)))
            .unwrap_or_default();
        format!(
            "{mark}{} {}{age}",
            short_id(&artifact.digest),
            self.machines.text()
        )
    }
}

/// A target as a column: its name, where it is, its source, and whether it could be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    pub name: String,
    pub kind: String,
    pub place: Option<String>,
    pub promote_from: Option<String>,
    pub held_by: Option<String>,
    pub error: Option<String>,
}

impl Column {
    /// `prod ← staging`, or the name alone.
    pub fn title(&self) -> String {
        match &self.promote_from {
            Some(from) => format!("{} ← {from}", self.name),
            None => self.name.clone(),
        }
    }
}

/// One module across every target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub module: String,
    pub tier: u32,
    pub cells: Vec<Cell>,
}

/// Modules down (by tier, then name), targets across (as the mesh file declares them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Grid {
    pub mesh: String,
    pub targets: Vec<Column>,
    pub rows: Vec<Row>,
}

impl Grid {
    /// The cell of `module` on `target`.
    pub fn cell(&self, module: &str, target: &str) -> Option<&Cell> {
        self.rows
            .iter()
            .find(|r| r.module == module)?
            .cells
            .iter()
            .find(|c| c.target == target)
    }
}

/// The grid of the mesh's modules across its targets, from what each target answered (`reads`, in
/// any order; a target without a read is a column that could not be read).
pub fn grid(mesh: &Mesh, reads: &[TargetRead]) -> Grid {
    let read = |name: &str| reads.iter().find(|r| r.name == name);
    let names = mesh.target_names();
    let targets: Vec<Column> = names
        .iter()
        .map(|name| {
            let answered = read(name);
            Column {
                name: name.to_string(),
                kind: answered.map(|r| r.kind.clone()).unwrap_or_default(),
                place: answered.and_then(|r| r.place.clone()),
                promote_from: mesh.environment(name).and_then(|e| e.promote_from.clone()),
                held_by: answered.and_then(|r| r.held_by.clone()),
                error: match answered {
                    Some(r) => r.error.clone(),
                    None => Some("not read".into()),
                },
            }
        })
        .collect();
    let readable = |name: &str| read(name).filter(|r| r.error.is_none());
    let rows = mesh
        .modules
        .iter()
        .map(|module| {
            let cells = targets
                .iter()
                .map(|column| {
                    let here = readable(&column.name);
                    let artifact = here.and_then(|r| r.record.get(&module.name).cloned());
                    let source = column.promote_from.clone();
                    let differs = source.as_deref().and_then(readable).and_then(|from| {
                        let theirs = from.record.get(&module.name)?;
                        here?;
                        Some(artifact.as_ref().is_none_or(|a| a.digest != theirs.digest))
                    });
                    Cell {
                        target: column.name.clone(),
                        machines: here
                            .map(|r| MachineCount::of(&r.machines, &module.name))
                            .unwrap_or_default(),
                        runs: here
                            .map(|r| {
                                r.machines
                                    .iter()
                                    .filter(|m| m.module == module.name)
                                    .map(|m| MachineRun {
                                        name: m.name.clone(),
                                        kind: m.kind.clone(),
                                        running: m.running.first().cloned(),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        moved_ms: here.and_then(|r| r.moved_ms.get(&module.name).copied()),
                        artifact,
                        source,
                        differs,
                    }
                })
                .collect();
            Row {
                module: module.name.clone(),
                tier: module.tier,
                cells,
            }
        })
        .collect();
    Grid {
        mesh: mesh.name.clone(),
        targets,
        rows,
    }
}

/// The grid as a table (`meshtop status --all-targets`): one column per target, each cell as
/// [`Cell::text`] writes it, and the mark explained.
pub fn grid_text(grid: &Grid, now_ms: i64) -> String {
    let mut table: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["MODULE".to_string()];
    header.extend(grid.targets.iter().map(Column::title));
    table.push(header);
    for row in &grid.rows {
        let mut line = vec![row.module.clone()];
        line.extend(row.cells.iter().map(|c| c.text(now_ms)));
        table.push(line);
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|i| {
            table
                .iter()
                .map(|l| l.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &table {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for column in &grid.targets {
        if let Some(error) = &column.error {
            out.push_str(&format!("{}: cannot be read: {error}\n", column.name));
        }
        if let Some(held) = &column.held_by {
            out.push_str(&format!("{}: held by {held}\n", column.name));
        }
    }
    if grid
        .rows
        .iter()
        .flat_map(|r| &r.cells)
        .any(Cell::promotable)
    {
        out.push_str(
            "≠ differs from the target it is promoted from (meshtop promote MODULE --to TARGET)\n",
        );
    }
    out
}

/// A move across targets in words, for the promote's confirm: `api: staging 3f9c… → prod 0a1b…`.
pub fn artifact_text(entry: Option<&RecordEntry>) -> String {
    match entry {
        Some(entry) => format!("{}@{}", entry.reference, short_id(&entry.digest)),
        None => "nothing".into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::Environment;

    fn mesh(chain: &[(&str, Option<&str>)]) -> Mesh {
        Mesh {
            name: "demo".into(),
            file: "/m/mesh.toml".into(),
            root: "/m".into(),
            registry: None,
            publish: false,
            multi_platform: Default::default(),
            signing: Default::default(),
            // The grid and the promote rule read the environments only, never a target's kind.
            targets: Default::default(),
            environments: chain
                .iter()
                .map(|(n, from)| Environment {
                    name: n.to_string(),
                    promote_from: from.map(str::to_string),
                    named: true,
                    ..Environment::default_one()
                })
                .collect(),
            modules: Vec::new(),
            machines: Vec::new(),
            rollout_deadline: None,
            builders: Vec::new(),
        }
    }

    #[test]
    fn a_promote_follows_the_chain_the_mesh_file_draws() {
        let m = mesh(&[
            ("dev", None),
            ("staging", Some("dev")),
            ("prod", Some("staging")),
        ]);
        assert_eq!(promote_source(&m, "prod", None).unwrap(), "staging");
        assert_eq!(
            promote_source(&m, "prod", Some("staging")).unwrap(),
            "staging"
        );
        assert_eq!(promote_source(&m, "dev", Some("prod")).unwrap(), "prod");
        let off = promote_source(&m, "prod", Some("dev")).unwrap_err();
        assert_eq!(
            off.to_string(),
            "prod is promoted from staging, not dev (the chain: dev → staging → prod): promote to staging first, or promote prod from staging"
        );
        assert!(matches!(
            promote_source(&m, "dev", None),
            Err(SourceRefusal::NoSource { .. })
        ));
        assert!(matches!(
            promote_source(&m, "qa", None),
            Err(SourceRefusal::NoSuchTarget { .. })
        ));
        assert!(matches!(
            promote_source(&m, "prod", Some("prod")),
            Err(SourceRefusal::Itself { .. })
        ));
    }

    #[test]
    fn a_cell_differs_from_its_source_by_artifact() {
        let mut m = mesh(&[("staging", None), ("prod", Some("staging"))]);
        m.modules = vec![crate::model::Module {
            name: "api".into(),
            context: "/m/api".into(),
            dockerfile: "Dockerfile".into(),
            base: None,
            policy: crate::Policy::Rollout,
            platforms: Vec::new(),
            build_args: Default::default(),
            secrets: Vec::new(),
            ssh: false,
            tier: 0,
            line: 1,
            backoff: Default::default(),
            contexts: Default::default(),
        }];
        let entry = |d: &str| {
            RecordEntry::new(
                format!("demo/api:{d}"),
                format!("sha256:{d}{}", "0".repeat(20)),
            )
        };
        let read = |name: &str, digest: Option<&str>| TargetRead {
            name: name.into(),
            kind: "local".into(),
            record: digest
                .map(|d| Record::from([("api".to_string(), entry(d))]))
                .unwrap_or_default(),
            ..TargetRead::default()
        };
        let g = grid(&m, &[read("staging", Some("aa")), read("prod", None)]);
        assert_eq!(g.cell("api", "prod").unwrap().differs, Some(true));
        assert!(g.cell("api", "prod").unwrap().promotable());
        assert_eq!(g.cell("api", "staging").unwrap().differs, None);
        assert_eq!(g.cell("api", "prod").unwrap().text(0), "≠ –");
        let g = grid(&m, &[read("staging", Some("aa")), read("prod", Some("aa"))]);
        assert_eq!(g.cell("api", "prod").unwrap().differs, Some(false));
        let g = grid(&m, &[read("staging", Some("aa")), read("prod", Some("bb"))]);
        assert_eq!(g.cell("api", "prod").unwrap().text(0), "≠ bb0000000000 –");
        // A source that could not be read says nothing of the cells it feeds.
        let mut broken = read("staging", Some("aa"));
        broken.error = Some("unreachable".into());
        let g = grid(&m, &[broken, read("prod", Some("bb"))]);
        assert_eq!(g.cell("api", "prod").unwrap().differs, None);
        assert!(grid_text(&g, 0).contains("staging: cannot be read: unreachable"));
    }

    #[test]
    fn machines_read_as_the_grid_writes_them() {
        let count = |total, current, behind, held, missing| MachineCount {
            total,
            current,
            behind,
            held,
            missing,
        };
        assert_eq!(count(2, 2, 0, 0, 0).text(), "2/2");
        assert_eq!(count(2, 1, 1, 0, 0).text(), "1 behind");
        assert_eq!(count(1, 0, 0, 0, 1).text(), "missing");
        assert_eq!(count(3, 0, 1, 1, 1).text(), "1 behind, 1 held, 1 missing");
        assert_eq!(count(0, 0, 0, 0, 0).text(), "–");
    }
}
