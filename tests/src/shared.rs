//! One control plane per test binary, started by the first test that asks.
//!
//! Kept in a static (never dropped): its processes are killed by the kernel
//! when the test binary exits (see [`crate::process`]) and its directory is
//! swept by the next run.

use anyhow::Result;
use tokio::sync::OnceCell;

use crate::control_plane::{ControlPlane, Nodes, Tier};

/// The binary's shared tier 1 control plane, with Koord-Queue's CRDs applied.
pub async fn tier1() -> Result<&'static ControlPlane> {
    static CP: OnceCell<ControlPlane> = OnceCell::const_new();
    CP.get_or_try_init(|| start(Tier::One)).await
}

/// The binary's shared tier 2 control plane (3 fake nodes of 32 CPU, 256 GiB),
/// with Koord-Queue's CRDs applied.
pub async fn tier2() -> Result<&'static ControlPlane> {
    static CP: OnceCell<ControlPlane> = OnceCell::const_new();
    CP.get_or_try_init(|| start(Tier::Two(Nodes::default())))
        .await
}

/// A control plane of the test's own (with Koord-Queue's CRDs applied), for
/// a test that breaks it: restarts its API server, compacts its etcd.
pub async fn own(tier: Tier) -> Result<ControlPlane> {
    start(tier).await
}

async fn start(tier: Tier) -> Result<ControlPlane> {
    crate::init_tracing();
    let cp = ControlPlane::start(tier).await?;
    let client = cp.client().await?;
    crate::fixtures::apply_koord_queue_crds(&client).await?;
    crate::fixtures::ensure_namespace(&client, koord_queue_api::keys::SYSTEM_NAMESPACE).await?;
    Ok(cp)
}
