//! Log output: human-readable lines or one JSON object per event.

use tracing_subscriber::EnvFilter;

/// How logs are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Plain,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Installs the global subscriber. `filter` uses `RUST_LOG` syntax (e.g.
/// `info,kube=warn`); `RUST_LOG` in the environment wins when set.
pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // A second initialisation (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
}
