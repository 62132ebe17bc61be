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
    clap_complete::generate(shell, &mut command, BIN, &mut script);
    if shell == clap_complete::Shell::Bash {
        script = fix_bash_states(&script).into_bytes();
    }
    out.write_all(&script)?;
    Ok(())
}

/// The binary's name, which completion scripts complete.
const BIN: &str = "kubectl-koord_queue";

/// clap_complete's bash script spells the state of a subcommand of a
/// binary with a hyphen in its name two ways — `kubectl__koord_queue__subcmd__pending`
/// where it walks the words, `kubectl__subcmd__koord_queue__subcmd__pending`
/// in the case arm that completes its flags — so no flag of a subcommand
/// was ever completed (clap-rs/clap#6421, open). The arms are renamed as
/// the walk spells them.
fn fix_bash_states(script: &[u8]) -> String {
    let text = String::from_utf8_lossy(script);
    let walk = BIN.replace('-', "__");
    let arms = BIN.replace('-', "__subcmd__");
    text.replace(&format!("{arms}__subcmd__"), &format!("{walk}__subcmd__"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(shell: Shell) -> String {
        let mut out = Vec::new();
        let done = completion(shell, &mut out);
        assert!(done.is_ok(), "{done:?}");
        String::from_utf8(out).unwrap_or_default()
    }

    /// What bash completes for the words `words` (the last one being
    /// completed), with the script sourced.
    fn bash_completes(words: &[&str]) -> String {
        let dir = std::env::temp_dir().join(format!("koord-queue-cli-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("completion.bash");
        let written = std::fs::write(&file, script(Shell::Bash));
        assert!(written.is_ok(), "{written:?}");
        let cword = words.len() - 1;
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let program = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _kubectl__koord_queue {BIN} '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display(),
            quoted.join(" "),
            words[cword],
            words[cword - 1],
        );
        let out = std::process::Command::new("bash")
            .args(["--norc", "-c", &program])
            .output();
        let _ = std::fs::remove_dir_all(&dir);
        match out {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
            other => panic!("bash: {other:?}"),
        }
    }

    #[test]
    fn bash_completes_the_commands_and_each_commands_flags() {
        let commands = bash_completes(&[BIN, "pe"]);
        assert_eq!(commands.trim(), "pending", "{commands}");
        let flags = bash_completes(&[BIN, "pending", "--"]);
        for flag in ["--queue", "--namespace", "--all-namespaces", "--output"] {
            assert!(flags.lines().any(|l| l == flag), "{flag}: {flags}");
        }
        let flags = bash_completes(&[BIN, "stop", "--d"]);
        assert_eq!(flags.trim(), "--drain", "{flags}");
        let values = bash_completes(&[BIN, "queues", "-o", "ya"]);
        assert_eq!(values.trim(), "yaml", "{values}");
    }

    #[test]
    fn zsh_and_fish_scripts_name_the_binary_and_its_commands() {
        let zsh = script(Shell::Zsh);
        assert!(zsh.starts_with(&format!("#compdef {BIN}")), "{zsh}");
        assert!(
            zsh.contains("'--drain[") && zsh.contains("'--queue="),
            "{zsh}"
        );
        let fish = script(Shell::Fish);
        assert!(
            fish.contains(&format!(
                "complete -c {BIN} -n \"__fish_kubectl_koord_queue_using_subcommand stop\" -l drain"
            )),
            "{fish}"
        );
    }
}
