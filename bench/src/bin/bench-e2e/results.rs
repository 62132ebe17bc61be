//! What every mode does around its run: what it records first, how it
//! writes its result and how it says whether it passed.

use std::fmt::Display;
use std::path::Path;

use anyhow::{Context, Result};
use koord_queue_bench::shape::Shape;
use koord_queue_tests::proc_stats;
use serde_json::{Value, json};

use super::Cli;

/// What every mode records before its first phase: the command line, the
/// source revision (taken now: the tree may move on during a long run) and
/// the load average; the output directory exists and TLS is set up.
pub(super) struct Start {
    pub command: String,
    pub source: Value,
    load: Option<[f64; 3]>,
}

impl Start {
    pub fn take(cli: &Cli) -> Result<Self> {
        std::fs::create_dir_all(&cli.out_dir)
            .with_context(|| format!("creating {}", cli.out_dir.display()))?;
        koord_queue_certs::install_crypto_provider();
        Ok(Self {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            source: source_revision(),
            load: proc_stats::load_average(),
        })
    }

    /// Says on stderr what `mode` (`bench-e2e …`) is about to run, and the
    /// load average.
    pub fn announce(&self, mode: &str, what: impl Display) {
        eprintln!(
            "{mode}: {what}; load average {:?}",
            self.load.unwrap_or_default()
        );
    }

    /// The machine's part of every result: what the figures were measured on.
    pub fn machine(&self) -> Value {
        json!({
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "load_average_at_start": self.load,
        })
    }
}

/// The commit the benchmark was built from and whether the tree had changes.
fn source_revision() -> Value {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let changed =
        git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| s.lines().count());
    json!({ "commit": git(&["rev-parse", "HEAD"]), "modified_files": changed })
}

/// The shape in a line: jobs, leaf quotas, parents.
pub(super) fn shape_line(shape: &Shape) -> String {
    format!(
        "{} jobs, {} leaf quotas, {} parents",
        shape.jobs.len(),
        shape.leaves.len(),
        shape.parents.len()
    )
}

/// Writes `<dir>/<stem>.json` (pretty, with a final newline) and, if there
/// is one, the plot `<dir>/<stem>.svg`, and says where they are.
pub(super) fn write_result(
    dir: &Path,
    stem: &str,
    json: &Value,
    svg: Option<String>,
) -> Result<()> {
    let json_path = dir.join(format!("{stem}.json"));
    write_file(&json_path, serde_json::to_string_pretty(json)? + "\n")?;
    match svg {
        Some(svg) => {
            let svg_path = dir.join(format!("{stem}.svg"));
            write_file(&svg_path, svg)?;
            println!(
                "  results: {}  plot: {}",
                json_path.display(),
                svg_path.display()
            );
        }
        None => println!("  results: {}", json_path.display()),
    }
    Ok(())
}

fn write_file(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

/// Whether `mode` (`bench-e2e …`) passed: it did without failures; each
/// one is said on stderr.
pub(super) fn passed(mode: &str, failures: &[impl Display]) -> bool {
    for f in failures {
        eprintln!("{mode}: FAILED: {f}");
    }
    failures.is_empty()
}
