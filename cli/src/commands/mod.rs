//! The commands: each reads what it shows (`run`), into a typed answer
//! that renders itself (`Render`); this file connects and dispatches.

pub mod pending;
pub mod queues;
pub mod quotas;
pub mod stop;
pub mod version;
pub mod why;

use std::io::{IsTerminal, Write};

use clap::CommandFactory;
use k8s_openapi::jiff::Timestamp;
use koord_queue_api::queue::StopPolicy;

use crate::args::{Cli, Command, Output, Shell};
use crate::connect::connect;
use crate::error::CliError;
use crate::read::Scope;
use crate::render::{Human, print};

/// Runs `cli`, printing the answer to `out` and notes to `err`.
pub async fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<(), CliError> {
    let g = &cli.global;
    let mut how = Human {
        wide: g.output == Output::Wide,
        now: Timestamp::now(),
        bars: false,
        namespaces: g.all_namespaces,
    };
    match &cli.command {
        Command::Completion { shell } => return completion(*shell, out),
        // A target that names no queued kind is a usage error, found before
        // any connection is made.
        Command::Why { target } => {
            why::resolve(target)?;
        }
        Command::Version => {
            // The client's version needs no cluster.
            let cluster = connect(g).await.ok();
            let v = version::run(cluster.as_ref()).await;
            return print(&v, g.output, &how, out, err);
        }
        _ => {}
    }
    let cluster = connect(g).await?;
    let note = |err: &mut dyn Write, note: Option<String>| -> Result<(), CliError> {
        if let Some(n) = note {
            writeln!(err, "{n}")?;
        }
        Ok(())
    };
    match cli.command {
        Command::Why { target } => {
            let why = why::run(&cluster, &target).await?;
            print(&why, g.output, &how, out, err)
        }
        Command::Pending { queue } => {
            let scope = match (queue, g.all_namespaces) {
                (Some(q), _) => Scope::Queue(q),
                (None, true) => Scope::All,
                (None, false) => Scope::Namespace(cluster.namespace.clone()),
            };
            how.namespaces = scope != Scope::Namespace(cluster.namespace.clone());
            let (pending, n) = pending::run(&cluster, scope).await?;
            note(err, n)?;
            print(&pending, g.output, &how, out, err)
        }
        Command::Quotas { resource, no_bars } => {
            how.bars = !no_bars
                && std::io::stdout().is_terminal()
                && matches!(g.output, Output::Table | Output::Wide);
            let ns = g.namespace.as_deref().filter(|_| !g.all_namespaces);
            let (quotas, n) = quotas::run(&cluster, ns, resource).await?;
            note(err, n)?;
            print(&quotas, g.output, &how, out, err)
        }
        Command::Queues => {
            let (queues, n) = queues::run(&cluster).await?;
            note(err, n)?;
            print(&queues, g.output, &how, out, err)
        }
        Command::Stop { queue, drain } => {
            let policy = if drain {
                StopPolicy::HoldAndDrain
            } else {
                StopPolicy::Hold
            };
            let stopped = stop::run(&cluster, &queue, policy).await?;
            print(&stopped, g.output, &how, out, err)
        }
        Command::Resume { queue } => {
            let resumed = stop::run(&cluster, &queue, StopPolicy::None).await?;
            print(&resumed, g.output, &how, out, err)
        }
        Command::Version | Command::Completion { .. } => Ok(()),
    }
}

/// Writes the completion script of `shell` for the binary's name (kubectl
/// completes a plugin's arguments through `kubectl_complete-koord_queue`,
/// see docs/cli.md).
fn completion(shell: Shell, out: &mut dyn Write) -> Result<(), CliError> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut command = Cli::command();
    // Into a buffer first: clap_complete panics on a failed write (a
    // closed pipe); ours reports it.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "kubectl-koord_queue", &mut script);
    out.write_all(&script)?;
    Ok(())
}
