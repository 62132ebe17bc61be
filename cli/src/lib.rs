//! `kubectl koord-queue`: the questions a tenant and an administrator ask
//! about the queue, one command each (docs/cli.md). The binary's `main` only
//! calls [`run`]; so does the integration suite (`tests/tests/cli.rs`), so
//! that what it checks is what a person runs, against a real API server.

mod args;
mod commands;
mod connect;
mod error;
mod read;
mod render;
mod tree;

#[cfg(test)]
mod golden_tests;

use std::ffi::OsString;
use std::io::Write;

use clap::Parser;

pub use args::Cli;
pub use commands::pending::Pending;
pub use commands::queues::{QueueSummary, QueueSummaryList};
pub use commands::stop::Stopped;
pub use commands::version::Versions;
pub use commands::why::{EventLine, Why};

/// Runs the command line `args` (the program's name first) as the binary
/// does: the answer on `out`, notes and errors on `err`. Returns the exit
/// code: 0, 1 for an error, 2 for a command line that cannot be parsed.
pub async fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" that print to stdout, exit 0.
            let _ = if e.use_stderr() {
                write!(err, "{e}")
            } else {
                write!(out, "{e}")
            };
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    match commands::run(cli, out, err).await {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            e.exit_code()
        }
    }
}
