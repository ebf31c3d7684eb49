//! The commands beside the dashboard. Each returns an exit code or a [`Failure`] that says what is
//! wrong and how to fix it.

/// `writeln!` into a String: output is built whole, then written once with [`print_out`].
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        // Writing to a String cannot fail.
        let _ = writeln!($out, $($arg)*);
    }};
}

mod args;
mod builders;
mod builds;
mod converge;
mod environments;
mod gc;
mod history;
mod init;
mod logs;
mod plan;
mod progress;
mod promote;
mod provenance;
mod rollback;
mod send;
mod setup;
mod stats;
mod status;
mod trace;
mod update;
mod verify;
mod watch;

use std::process::ExitCode;

use crate::mesh::text::short_id;

pub use args::Cli;
use args::Command;

/// A command that could not do its work: the message names what is wrong and how to fix it.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

/// Its message is what a person reads on stderr: any error (or text) says it through `Display`.
impl Failure {
    /// Bad input (mesh file, arguments): exit 2.
    pub(crate) fn input(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }

    /// The work failed (a build, a send, an unreachable source): exit 1.
    pub(crate) fn failed(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }
}

pub(crate) type Outcome = Result<ExitCode, Failure>;

/// Set to `off` to keep no timeline of the operations this process runs.
pub(crate) const TIMELINE_ENV: &str = "MESHTOP_TIMELINE";

/// Open the dashboard on the mesh (no subcommand given).
fn dashboard(global: args::Global) -> ExitCode {
    let opened = (|| {
        let mesh = setup::load_file(&global)?;
        let shown = setup::target_name(&global, &mesh)?;
        let state_path = setup::state_path(&global)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))?;
        let options = crate::tui::DashboardOptions {
            mesh,
            state_path,
            readonly: global.readonly,
            bell: !global.no_bell,
            overrides: global.overrides.clone(),
            target: shown,
        };
        let result = runtime.block_on(crate::tui::run_dashboard(options));
        // Pollers may sit in blocking calls (a slow daemon): do not wait for them on the way out.
        runtime.shutdown_background();
        result.map_err(|e| Failure::failed(format!("the dashboard stopped: {e:#}")))?;
        Ok(ExitCode::SUCCESS)
    })();
    report(opened)
}

/// Run a subcommand on a fresh async runtime.
pub fn run(cli: Cli) -> ExitCode {
    // `MESHTOP_TIMELINE=off`: operations keep no timeline (what its bench measures against).
    if std::env::var(TIMELINE_ENV).is_ok_and(|v| v == "off") {
        crate::converge::progress::record_timelines(false);
    }
    let Some(command) = cli.command else {
        return dashboard(cli.global);
    };
    // One thread: a command's work is mostly waiting on the daemon, and a command the record
    // answers ends in a few milliseconds, which worker threads would only add to.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return report(Err(Failure::failed(format!(
                "cannot start the async runtime: {error}"
            ))));
        }
    };
    let global = cli.global;
    let outcome = runtime.block_on(async move {
        match command {
            Command::Plan(args) => plan::run(&global, args).await,
            Command::Builds(args) => builds::run(&global, args).await,
            Command::Builders(args) => builders::run(&global, args).await,
            Command::Converge(args) => converge::run(&global, args).await,
            Command::Status(args) => status::run(&global, args).await,
            Command::Verify(args) => verify::run(&global, args).await,
            Command::Provenance(args) => provenance::run(&global, args).await,
            Command::Send(args) => send::run(&global, args).await,
            Command::History(args) => history::run(&global, args).await,
            Command::Rollback(args) => rollback::run(&global, args).await,
            Command::Unpin(args) => rollback::unpin(&global, args).await,
            Command::Promote(args) => promote::run(&global, args).await,
            Command::Gc(args) => gc::run(&global, args).await,
            Command::Stats(args) => stats::run(&global, args).await,
            Command::Watch(args) => watch::run(&global, args).await,
            Command::Logs(args) => logs::run(&global, args).await,
            Command::Trace(args) => trace::run(&global, args).await,
            Command::Update(args) => update::run(&global, args).await,
            Command::Outdated(args) => update::outdated(&global, args).await,
            Command::Init(args) => init::run(args),
        }
    });
    report(outcome)
}

fn report(outcome: Outcome) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("meshtop: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

pub(crate) use progress::{spawn_progress_printer, spawn_progress_printer_before_result};

/// The module named on the command line, or bad input naming the mesh's modules.
pub(crate) fn known_module(mesh: &crate::mesh::model::Mesh, module: &str) -> Result<(), Failure> {
    if mesh.module(module).is_some() {
        return Ok(());
    }
    let names: Vec<&str> = mesh.modules.iter().map(|m| m.name.as_str()).collect();
    Err(Failure::input(format!(
        "no module {module:?} in mesh {}; modules: {}",
        mesh.name,
        names.join(", ")
    )))
}

/// Ask y/N on the terminal (stderr); without a terminal, bad input telling to pass --yes.
pub(crate) fn confirm(question: &str, what: &str) -> Result<bool, Failure> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(Failure::input(format!(
            "not a terminal: pass --yes to {what} without asking"
        )));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::failed(format!("cannot read the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Whether to go on with an operation that moves something (a promote, a rollback, a send, a
/// sweep): `--yes`, or `y` at `question`. Declined, it says so (`declined`: `nothing sent`).
pub(crate) fn go_ahead(
    yes: bool,
    question: &str,
    what: &str,
    declined: &str,
) -> Result<bool, Failure> {
    if yes || confirm(question, what)? {
        return Ok(true);
    }
    eprintln!("{declined}");
    Ok(false)
}

/// One machine's move as a confirmation lists it: `  api-1  3f9c2a1b7d4e → demo/api:…@…`.
pub(crate) fn move_line(moved: &crate::mesh::machine::Move) -> String {
    format!(
        "  {}  {} → {}@{}",
        moved.machine,
        short_id(&moved.from),
        moved.to_reference,
        short_id(&moved.to_digest)
    )
}

/// An operation's end as a command says it: `json` (with `--json`) or its headline on stdout,
/// exit 1 unless it did all it was asked.
pub(crate) fn ended<T: serde::Serialize>(json: Option<&T>, headline: &str, ok: bool) -> Outcome {
    match json {
        Some(value) => print_json(value)?,
        None => print_out(&format!("{headline}\n"))?,
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Print JSON to stdout; serialization of our own types cannot fail short of a bug, which still
/// ends in a message, not a panic.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::failed(format!("cannot write JSON: {e}")))?;
    text.push('\n');
    print_out(&text)
}

/// Write `text` to stdout in one go (a summary of many lines is one write, not one per line).
/// A reader that went away (`| head`) is not an error; another failure is reported, not a panic.
pub(crate) fn print_out(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::failed(format!(
            "cannot write to standard output: {e}"
        ))),
    }
}
