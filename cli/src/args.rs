//! The command line, with kubectl's conventions: `--kubeconfig`,
//! `--context`, `-n/--namespace`, `-A/--all-namespaces` and `-o` on every
//! command, errors on stderr, exit code 1 on an error and 2 on a command
//! line that cannot be parsed.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const EXAMPLES: &str = "\
Examples:
  # Why does my PyTorchJob wait? (any queued kind: Job, PyTorchJob, RayJob, JobSet, TrainJob, pod, ...)
  kubectl koord-queue why pytorchjob/train -n team-a

  # My namespace's waiting jobs in the order they will be served
  kubectl koord-queue pending -n team-a

  # One Queue's backlog (an administrator), as JSON
  kubectl koord-queue pending --queue team-a -o json

  # The quota tree with usage bars, and the queues
  kubectl koord-queue quotas
  kubectl koord-queue queues

  # Stop a queue for maintenance, send its running jobs back, resume it
  kubectl koord-queue stop team-a --drain
  kubectl koord-queue resume team-a

  # Shell completion
  source <(kubectl-koord_queue completion bash)";

/// `kubectl koord-queue`: why a job waits, the backlog in serving order,
/// quotas and queues, and stopping or resuming a queue.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-koord_queue",
    bin_name = "kubectl koord-queue",
    version = env!("KOORD_QUEUE_VERSION"),
    after_help = EXAMPLES,
    propagate_version = true
)]
pub struct Cli {
    /// Flags of every command.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The flags kubectl has on every command.
#[derive(Clone, Debug, Args)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace (default: the context's, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// The namespace Koord-Queue's Queues live in.
    #[arg(
        long,
        global = true,
        env = "KOORD_QUEUE_SYSTEM_NAMESPACE",
        default_value = koord_queue_api::keys::SYSTEM_NAMESPACE
    )]
    pub system_namespace: String,
}

/// Output formats, as kubectl's `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Columns for a person (the default).
    Table,
    /// More columns.
    Wide,
    /// JSON: the objects as read (the visibility API's lists), for tools.
    Json,
    /// YAML of the same.
    Yaml,
    /// `resource/name` per line.
    Name,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Why a job waits: its unit, phase, reason with figures, the quotas up
    /// the tree, its position, what is ahead of it, its last Events.
    #[command(
        after_help = "Examples:\n  kubectl koord-queue why job/train -n team-a\n  kubectl koord-queue why pytorchjob.kubeflow.org/bert -n team-a\n  kubectl koord-queue why queueunit/train-7c1a9f3 -n team-a"
    )]
    Why {
        /// `KIND/NAME`: any queued kind (`job`, `pytorchjob`, `rayjob`,
        /// `jobset`, `trainjob`, `pod`, …, singular, plural or with its
        /// group), or `queueunit/NAME`.
        target: String,
    },
    /// Waiting units in the order they will be served, with position,
    /// reason, waiting time and estimate.
    #[command(
        after_help = "Examples:\n  kubectl koord-queue pending -n team-a\n  kubectl koord-queue pending -A -o wide\n  kubectl koord-queue pending --queue team-a"
    )]
    Pending {
        /// One Queue's backlog instead of a namespace's (needs `get` on
        /// `queues/pendingunits` in the system namespace).
        #[arg(long)]
        queue: Option<String>,
    },
    /// The quota tree: min, max, used, borrowed, lent, fair-share weight,
    /// with usage bars on a terminal.
    #[command(
        after_help = "Examples:\n  kubectl koord-queue quotas\n  kubectl koord-queue quotas --resource memory -o wide"
    )]
    Quotas {
        /// The resource the bars show.
        #[arg(long, default_value = "cpu")]
        resource: String,
        /// No bars, even on a terminal.
        #[arg(long)]
        no_bars: bool,
    },
    /// The Queues: policy, priority, pending, admitted and running units,
    /// stopped or not.
    Queues,
    /// Stop a Queue: it releases nothing until resumed (`spec.stopPolicy:
    /// Hold`); with `--drain` its running jobs are sent back too
    /// (`HoldAndDrain`).
    #[command(
        after_help = "Examples:\n  kubectl koord-queue stop team-a\n  kubectl koord-queue stop team-a --drain"
    )]
    Stop {
        /// The Queue.
        queue: String,
        /// Also send back the units holding quota (jobs suspended again).
        #[arg(long)]
        drain: bool,
    },
    /// Resume a stopped Queue.
    Resume {
        /// The Queue.
        queue: String,
    },
    /// The client's version and, when readable, the scheduler's.
    Version,
    /// A shell completion script.
    #[command(
        after_help = "Examples:\n  source <(kubectl-koord_queue completion bash)\n  kubectl-koord_queue completion zsh > \"${fpath[1]}/_kubectl-koord_queue\"\n  kubectl-koord_queue completion fish > ~/.config/fish/completions/kubectl-koord_queue.fish"
    )]
    Completion {
        /// The shell.
        shell: Shell,
    },
}

/// Shells a completion script is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// bash.
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn kubectl_flags_parse_before_and_after_the_command() {
        let cli = Cli::try_parse_from([
            "kubectl-koord_queue",
            "-n",
            "team-a",
            "pending",
            "-o",
            "json",
            "--context",
            "c",
        ])
        .map_err(|e| e.to_string());
        let Ok(cli) = cli else {
            panic!("{cli:?}");
        };
        assert_eq!(cli.global.namespace.as_deref(), Some("team-a"));
        assert_eq!(cli.global.output, Output::Json);
        assert_eq!(cli.global.context.as_deref(), Some("c"));
    }
}
