//! `kubectl-koord_queue`, the kubectl plugin (`kubectl koord-queue …`):
//! everything is in the library's [`koord_queue_cli::run`].

use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr();
    ExitCode::from(koord_queue_cli::run(std::env::args_os(), &mut out, &mut err).await)
}
