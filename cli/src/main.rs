//! `kubectl-koord_queue`, the kubectl plugin (`kubectl koord-queue …`):
//! parse the command line, run the command, print errors on stderr with
//! kubectl's exit codes. Everything else is in the library modules.

mod args;
mod commands;
mod connect;
mod error;
mod read;
mod render;
mod tree;

#[cfg(test)]
mod golden_tests;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr();
    match commands::run(cli, &mut out, &mut err).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
