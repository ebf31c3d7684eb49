//! The command line: the dashboard by default, the subcommands beside it.

use std::process::ExitCode;

use clap::Parser;
use meshtop::cli::{self, Cli};

fn main() -> ExitCode {
    cli::run(Cli::parse())
}
