//! The command line, declared with clap's derive.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::converge::targets::Overrides;

/// meshtop: build, record and roll out content-addressed container images across a mesh.
///
/// Without a command it opens the dashboard on the mesh.
#[derive(Debug, Parser)]
#[command(
    name = "meshtop",
    version,
    about = "Build, record and roll out content-addressed container images across a mesh of modules.\nWithout a command: the dashboard on the mesh.",
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct Global {
    /// The mesh file (default: ./mesh.toml).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) mesh: Option<PathBuf>,
    /// The state database (default: the data dir's meshtop/state.db).
    #[arg(long, global = true, env = "MESHTOP_STATE", value_name = "PATH")]
    pub(crate) state: Option<PathBuf>,
    /// Where each kind's flags point the target (`--context`, `--namespace`): the seam declares
    /// and reads them.
    #[command(flatten)]
    pub(crate) overrides: Overrides,
    /// The target of the mesh to act on (default: the mesh file's first): each keeps its own
    /// record, lock, history and pins.
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) target: Option<String>,
    /// The dashboard without actions: no converge, force rebuild or send. The dashboard's alone:
    /// not global, so no subcommand's `--help` lists it.
    #[arg(long)]
    pub(crate) readonly: bool,
    /// The dashboard never rings the bell (nor sends a desktop notification) when a followed
    /// converge fails or a long one finishes.
    #[arg(long)]
    pub(crate) no_bell: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Dry run: each module's tier, ref, decision, the record that vouched and why its address moved.
    Plan(PlanArgs),
    /// Plan, build and deliver tier by tier, stamp the record, send what policy rolls out.
    Converge(ConvergeArgs),
    /// The newest build records, of the mesh or one module.
    Builds(BuildsArgs),
    /// Every machine: its module, running digest, state and the build that made what it runs.
    Status(StatusArgs),
    /// Whether each module's recorded artifact, and what each of its machines runs, carries a
    /// signature by a key the mesh trusts (exit 1 when any does not).
    Verify(VerifyArgs),
    /// What the signed provenance of a module's recorded artifact says (builder, inputs, commit,
    /// operation, when) and whether it verifies (exit 1 when no trusted provenance is attached).
    Provenance(ProvenanceArgs),
    /// Move a module's behind machines to the record's artifact.
    Send(SendArgs),
    /// Every stamp of a module's entry in the record: when, by whom, which operation, from → to.
    History(HistoryArgs),
    /// Go back to an earlier artifact without a rebuild, send every machine there, pin the module.
    Rollback(RollbackArgs),
    /// End a module's pin: later converges decide for it as usual again.
    Unpin(UnpinArgs),
    /// Record and send on one target the exact artifacts another target's record names: no build.
    Promote(PromoteArgs),
    /// Remove this mesh's images nothing needs (outside the keep set).
    Gc(GcArgs),
    /// Per module: builds, failures, median build time, decisions, build time the skips saved.
    Stats(StatsArgs),
    /// Where an operation's time went: its timeline as a Chrome trace (Perfetto, chrome://tracing)
    /// or JSON, or what got slower since another operation (`--compare`).
    Trace(TraceArgs),
    /// What a module's machines say: their logs (stdout and stderr), each line named by machine.
    Logs(LogsArgs),
    /// The mesh's builders: endpoint, state and last error, version, platforms, running/cap and
    /// queued builds of a converge that runs (exit 1 when a builder is out).
    Builders(BuildersArgs),
    /// Watch the contexts: after a quiet period following a change, print the plan, then converge
    /// what it would build or deliver. Runs until Ctrl-C.
    Watch(WatchArgs),
    /// Move mesh.lock: resolve each named upstream image again (every locked one when none is
    /// named) and lock what its registry serves now, as `cargo update` does.
    Update(UpdateArgs),
    /// Each locked upstream image against what its registry serves now: which moved, the modules
    /// on it and their machines (exit 1 when any moved). Reads only; `update` moves the lock.
    Outdated(OutdatedArgs),
    /// Write a mesh file from a compose file, a bake file or a skaffold file: one module per
    /// built service or target, the edges between them, compose services as machines, and a
    /// comment for every key it could not carry.
    Init(InitArgs),
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// The file to read: compose.yaml / docker-compose.yml, docker-bake.hcl or skaffold.yaml.
    #[arg(long, value_name = "FILE")]
    pub(crate) from: PathBuf,
    /// Where to write the mesh file (default: mesh.toml beside FILE; a directory: mesh.toml in it).
    #[arg(long, value_name = "PATH")]
    pub(crate) out: Option<PathBuf>,
    /// Overwrite a mesh file that is there already.
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, Args)]
pub(crate) struct OutdatedArgs {
    /// Print one JSON array.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// Upstream images as mesh.lock names them (`python:3.12-slim`); none: every one.
    pub(crate) images: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The module whose machines' logs are shown.
    pub(crate) module: String,
    /// One machine of the module only.
    #[arg(long, value_name = "NAME")]
    pub(crate) machine: Option<String>,
    /// Keep printing lines as they come, across restarts and sends (Ctrl-C stops).
    #[arg(long, short = 'f')]
    pub(crate) follow: bool,
    /// The run before the last restart (Kubernetes: the previous container).
    #[arg(long, short = 'p')]
    pub(crate) previous: bool,
    /// The newest N lines of each machine (default: all there is).
    #[arg(long, value_name = "N")]
    pub(crate) tail: Option<u64>,
    /// Lines of the last DURATION only: `90s`, `30m`, `2h`.
    #[arg(long, value_name = "DURATION", value_parser = crate::mesh::gc::parse_grace)]
    pub(crate) since: Option<i64>,
    /// Print each line's time as the target took it.
    #[arg(long, short = 't')]
    pub(crate) timestamps: bool,
    /// One JSON object per line: machine, kind, stream, time, text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// The operation, by its number (`#142` or `142`; default: the newest).
    #[arg(value_name = "#N")]
    pub(crate) operation: Option<String>,
    /// `chrome`: the Chrome trace event format (a process per builder, a thread per module);
    /// `json`: the timeline and its summary, for scripts.
    #[arg(long, value_enum, default_value_t = TraceFormat::Chrome, value_name = "FORMAT")]
    pub(crate) format: TraceFormat,
    /// Say per module what got slower since this operation, and why (built or skipped, steps).
    #[arg(long, value_name = "#M")]
    pub(crate) compare: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TraceFormat {
    Chrome,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// The module whose stamps are shown.
    pub(crate) module: String,
    /// How many stamps (newest first, at least 1).
    #[arg(long, default_value_t = 50, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// Print a JSON array.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RollbackArgs {
    /// The module to roll back.
    pub(crate) module: String,
    /// The artifact to go back to: a build id or an artifact digest (a prefix will do). Default:
    /// what the record named before the current one.
    #[arg(long, value_name = "BUILD|DIGEST")]
    pub(crate) to: Option<String>,
    /// Do not ask (needed without a terminal).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Print a JSON summary.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    /// The modules to promote (at least one).
    #[arg(required = true)]
    pub(crate) modules: Vec<String>,
    /// The target that takes the artifacts.
    #[arg(long, value_name = "TARGET")]
    pub(crate) to: String,
    /// The target whose record names them (default: the to-target's `promote_from`).
    #[arg(long, value_name = "TARGET")]
    pub(crate) from: Option<String>,
    /// Do not ask (needed without a terminal).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Print a JSON object: the plan and what was done.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct UnpinArgs {
    /// The pinned module.
    pub(crate) module: String,
}

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// List what would be removed and why it is unreachable; remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Each module's newest N successful builds are kept (at least 1).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) keep: u32,
    /// Nothing built or published within this long is taken (a teammate's converge may be about
    /// to stamp it): `0s`, `30m`, `2h`, `1h30m`.
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = crate::mesh::gc::parse_grace)]
    pub(crate) grace: i64,
    /// Do not ask (needed without a terminal).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Print a JSON summary.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Only what happened in this past window: `90s`, `30m`, `12h`, `7d` (default: everything kept).
    #[arg(long, value_name = "DURATION")]
    pub(crate) since: Option<String>,
    /// Print a JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// Decide as `converge --force` would: build whatever any record says.
    #[arg(long)]
    pub(crate) force: bool,
    /// Ask every locked upstream's registry what it serves now (as `meshtop outdated`), keep the
    /// answers for `status` and the dashboard, and say which moved after the plan.
    #[arg(long)]
    pub(crate) refresh: bool,
    /// Only these modules (their bases must have artifacts).
    pub(crate) modules: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ConvergeArgs {
    /// Build and deliver whatever any record says.
    #[arg(long)]
    pub(crate) force: bool,
    /// Builds that run at once, over all builders (default: twice the number of cores, at least 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) jobs: Option<u16>,
    /// Print a JSON summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Wait for another converge of the mesh to finish instead of exiting.
    #[arg(long)]
    pub(crate) wait: bool,
    /// Docker target: push each build to the mesh's registry, for other machines to reuse (CI does;
    /// without it a converge only reads the registry). Also `publish = true` in [mesh].
    #[arg(long, env = "MESHTOP_PUBLISH")]
    pub(crate) publish: bool,
    /// Sign every artifact the converge pushes (--publish, a Kubernetes delivery, a pool's
    /// hand-over) with this ECDSA P-256 private key (PKCS#8 PEM, mode 600), a cosign signature
    /// beside it in the registry; a converge that pushes nothing refuses it. Never named in the
    /// mesh file.
    #[arg(long, value_name = "FILE", env = "MESHTOP_SIGNING_KEY")]
    pub(crate) sign_key: Option<PathBuf>,
    /// Only these modules (their bases must have artifacts, or they are refused).
    pub(crate) modules: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct BuildsArgs {
    /// Only this module's builds (or a repository, for builds that never learned their module).
    pub(crate) module: Option<String>,
    /// Only failed builds.
    #[arg(long)]
    pub(crate) failed: bool,
    /// How many rows (at least 1).
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// The build that made this artifact (image id or published digest).
    #[arg(long, value_name = "sha256:…")]
    pub(crate) digest: Option<String>,
    /// Print a JSON array.
    #[arg(long, conflicts_with = "format")]
    pub(crate) json: bool,
    /// Print the rows for a report: `csv`, `json` or `markdown`.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub(crate) format: Option<BuildsFormat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BuildsFormat {
    Csv,
    Json,
    Markdown,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print a JSON array (with --all-targets: the grid as one object).
    #[arg(long)]
    pub(crate) json: bool,
    /// Every target of the mesh side by side: modules down, targets across, each cell the target's
    /// recorded artifact, its machines, a mark where it differs from its promote_from, its age.
    #[arg(long)]
    pub(crate) all_targets: bool,
    /// Exit 1 when any machine is behind (or held, or paused), a declared machine is missing, or a
    /// workload's module container cannot be told.
    #[arg(long)]
    pub(crate) exit_code: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BuildersArgs {
    /// Print a JSON array: one object per builder.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Only these modules (default: every module the target's record names).
    pub(crate) modules: Vec<String>,
    /// Print a JSON array: one object per artifact checked.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ProvenanceArgs {
    /// The module whose recorded artifact is asked about.
    pub(crate) module: String,
    /// Print JSON: the manifest, each verified provenance, how many envelopes did not verify.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The module whose behind machines move.
    pub(crate) module: String,
    /// Do not ask (needed without a terminal).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Print a JSON summary.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// How long the contexts must stay still after a change before the plan and converge run.
    #[arg(long, default_value_t = 500, value_name = "MS", value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub(crate) quiet_ms: u64,
    /// Builds that run at once, over all builders (default: twice the number of cores, at least 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) jobs: Option<u16>,
    /// Only these modules' contexts are watched and converged.
    pub(crate) modules: Vec<String>,
}
