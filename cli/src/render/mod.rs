//! How a command's answer is printed: for a person (columns, durations,
//! quantities, bars) or for a tool (`-o json|yaml|name`, the typed objects
//! as they were read, so that they parse back into the same types).

pub mod table;
pub mod text;

use std::io::Write;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::args::Output;
use crate::error::CliError;

/// What a person's rendering depends on besides the answer.
#[derive(Clone, Copy, Debug)]
pub struct Human {
    /// `-o wide`.
    pub wide: bool,
    /// Now, for ages and countdowns (a parameter so that tests are golden).
    pub now: Timestamp,
    /// Draw usage bars (stdout is a terminal, and not `--no-bars`).
    pub bars: bool,
    /// Print a namespace column (`-A`, or a Queue's backlog).
    pub namespaces: bool,
}

/// An answer a command prints.
pub trait Render: Serialize {
    /// The text for a person; empty when there is nothing to list.
    fn human(&self, how: &Human) -> String;
    /// `resource/name` of each object, for `-o name`.
    fn names(&self) -> Vec<String>;
    /// What to say on stderr when there is nothing to list (kubectl's
    /// "No resources found").
    fn empty_note(&self) -> Option<String> {
        None
    }
}

/// Prints `answer` to `out` (and an empty list's note to `err`) as `format` says.
pub fn print<R: Render>(
    answer: &R,
    format: Output,
    how: &Human,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    match format {
        Output::Json => {
            let text = serde_json::to_string_pretty(answer).map_err(|e| CliError::Api {
                what: "writing JSON".into(),
                message: e.to_string(),
            })?;
            writeln!(out, "{text}")?;
        }
        Output::Yaml => {
            let text = serde_yaml::to_string(answer).map_err(|e| CliError::Api {
                what: "writing YAML".into(),
                message: e.to_string(),
            })?;
            write!(out, "{text}")?;
        }
        Output::Name => {
            for name in answer.names() {
                writeln!(out, "{name}")?;
            }
        }
        Output::Table | Output::Wide => {
            let text = answer.human(how);
            if text.is_empty() {
                if let Some(note) = answer.empty_note() {
                    writeln!(err, "{note}")?;
                }
            } else {
                write!(out, "{text}")?;
            }
        }
    }
    Ok(())
}
