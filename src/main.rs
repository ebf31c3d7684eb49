//! The command line: the dashboard by default, the subcommands beside it.

use std::process::ExitCode;

use clap::Parser;
use meshtop::cli::{self, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.is_none() {
        eprintln!("meshtop: the dashboard is not in this build yet; try `meshtop plan`");
        return ExitCode::from(2);
    }
    cli::run(cli)
}
