//! `make cluster`: a local tier 2 control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok with fake nodes) with
//! Koord-Queue's CRDs applied. Writes the admin kubeconfig to a fixed path and
//! runs until Ctrl-C or SIGTERM, then stops everything.

use std::path::PathBuf;
use std::process::ExitCode;

use koord_queue_tests::{ControlPlane, Nodes, Tier, fixtures};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> ExitCode {
    koord_queue_tests::init_tracing();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("local-cluster: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let kubeconfig_out = std::env::var_os("KUBECONFIG_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".local/kubeconfig"));
    let nodes: usize = std::env::var("NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let mut term = signal(SignalKind::terminate())?;

    let cp = ControlPlane::start(Tier::Two(Nodes {
        count: nodes,
        ..Nodes::default()
    }))
    .await?;
    let client = cp.client().await?;
    fixtures::apply_koord_queue_crds(&client).await?;
    fixtures::ensure_namespace(&client, koord_queue_api::keys::SYSTEM_NAMESPACE).await?;
    if let Some(parent) = kubeconfig_out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(cp.kubeconfig(), &kubeconfig_out)?;
    let path = std::fs::canonicalize(&kubeconfig_out)?;
    println!("Local control plane ready at {}", cp.server());
    println!("  kubeconfig: {}", path.display());
    println!("  nodes:      {}", cp.nodes().join(", "));
    println!("  logs:       {}", cp.dir().display());
    println!();
    println!("  export KUBECONFIG={}", path.display());
    println!("  kubectl get nodes");
    println!("Press Ctrl-C to stop.");

    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("stopping");
    drop(cp);
    let _ = std::fs::remove_file(&kubeconfig_out);
    Ok(())
}
