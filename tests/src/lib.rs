//! Test harness of Koord-Queue: a real local Kubernetes control plane (etcd,
//! kube-apiserver and, for end-to-end tests, kube-controller-manager,
//! kube-scheduler and kwok fake nodes) built from source by
//! `tests/provision/provision.sh`, plus helpers the integration suites share.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod admin;
pub mod background;
pub mod browser;
pub mod cert_manager;
pub mod control_plane;
pub mod dashboard;
pub mod e2e;
pub mod fixtures;
pub mod framework;
pub mod https;
pub mod install;
pub mod job_crds;
pub mod kinds;
pub mod kubeconfig;
pub mod load;
pub mod metrics;
pub mod oci;
pub mod pki;
pub mod pods;
pub mod proc_stats;
pub mod process;
pub mod proxy;
pub mod scheduler;
pub mod shared;
pub mod tenant;
pub mod tools;
pub mod visibility;
pub mod webhook;

pub use control_plane::{ControlPlane, Nodes, Tier};

/// Installs a tracing subscriber for test output (once; `RUST_LOG` filters).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The readiness polls of a starting apiserver are logged by
                // kube as errors; they are expected.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_client=off")),
        )
        .with_test_writer()
        .try_init();
}
