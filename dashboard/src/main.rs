//! `koord-queue-dashboard`: everything is in the library's [`koord_queue_dashboard::serve`].

use std::process::ExitCode;

use clap::Parser as _;

#[tokio::main]
async fn main() -> ExitCode {
    let args = koord_queue_dashboard::Args::parse();
    koord_queue_runtime::init_logging(args.log_format, &args.log_filter);
    let served = async {
        let running = koord_queue_dashboard::serve(&args).await?;
        tokio::select! {
            r = running.wait() => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    };
    match served.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "the dashboard stopped");
            eprintln!("koord-queue-dashboard: {e:#}");
            ExitCode::FAILURE
        }
    }
}
