//! Test helper: starts a tier 2 control plane, keeps it in a static like the
//! shared per-binary control plane, prints the component pids and its working
//! directory as one JSON line, then exits without dropping anything. The
//! teardown test checks that the kernel killed every component anyway.

use std::process::ExitCode;

use koord_queue_tests::{ControlPlane, Nodes, Tier};
use tokio::sync::OnceCell;

static CONTROL_PLANE: OnceCell<ControlPlane> = OnceCell::const_new();

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let nodes = Nodes {
        count: 1,
        ..Nodes::default()
    };
    let cp = match CONTROL_PLANE
        .get_or_try_init(|| ControlPlane::start(Tier::Two(nodes)))
        .await
    {
        Ok(cp) => cp,
        Err(error) => {
            eprintln!("control-plane-exit-probe: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{}",
        serde_json::json!({ "pids": cp.pids(), "dir": cp.dir() })
    );
    // Leave without running destructors, as a test binary does.
    std::process::exit(0)
}
