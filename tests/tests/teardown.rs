//! No etcd, kube-* or kwok process outlives its owner: neither a dropped
//! control plane nor a test binary that exits with one in a static.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_tests::process::is_running;
use koord_queue_tests::{ControlPlane, Nodes, Tier, fixtures};

async fn all_gone(pids: &[u32]) -> bool {
    fixtures::eventually(Duration::from_secs(15), || async {
        Ok(pids.iter().all(|pid| !is_running(*pid)))
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn dropping_a_control_plane_stops_every_process_and_removes_its_directory() {
    let cp = ControlPlane::start(Tier::Two(Nodes {
        count: 1,
        ..Nodes::default()
    }))
    .await
    .unwrap();
    let pids = cp.pids().to_vec();
    assert_eq!(
        pids.len(),
        5,
        "etcd, apiserver, controller-manager, scheduler, kwok"
    );
    assert!(pids.iter().all(|pid| is_running(*pid)));
    let dir = cp.dir().to_path_buf();
    drop(cp);
    assert!(all_gone(&pids).await, "processes left behind: {pids:?}");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[tokio::test]
async fn a_test_binary_that_exits_leaves_no_process_behind() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_control-plane-exit-probe"))
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let pids: Vec<u32> = serde_json::from_value(report["pids"].clone()).unwrap();
    assert_eq!(pids.len(), 5);
    assert!(
        all_gone(&pids).await,
        "processes outlived the probe: {pids:?}"
    );
    // Its directory is swept by the next control plane started here.
    let dir = std::path::PathBuf::from(report["dir"].as_str().unwrap());
    let cp = ControlPlane::start(Tier::One).await.unwrap();
    assert!(!dir.exists(), "stale directory {} not swept", dir.display());
    drop(cp);
}
