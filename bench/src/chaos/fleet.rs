//! The components of the chaos run as separate OS processes ([`Member`]s),
//! each on fixed loopback ports so that a restart comes back where its
//! clients (the balancer, the metrics monitor) look for it: two schedulers
//! (leader and standby on one Lease, each reaching the API server through
//! its own [`Proxy`]) and two webhooks (one serving certificate, behind a
//! [`Balancer`](koord_queue_tests::proxy::Balancer)). A member is killed
//! with SIGKILL and started again as a Deployment's controller would.

use std::path::PathBuf;

use koord_queue_tests::proxy::Proxy;

pub use crate::member::{INCARNATION, Member, binary, free_addr, wait_admin};

/// The replicas and what stands between them and the API.
#[derive(Debug)]
pub struct Fleet {
    /// The two schedulers.
    pub schedulers: Vec<Member>,
    /// Each scheduler's proxy to the API server (same order).
    pub proxies: Vec<Proxy>,
    /// The two webhooks.
    pub webhooks: Vec<Member>,
}

impl Fleet {
    /// Every log file of every member.
    pub fn logs(&self) -> Vec<PathBuf> {
        self.schedulers
            .iter()
            .chain(&self.webhooks)
            .flat_map(|m| m.logs().iter().cloned())
            .collect()
    }

    /// Kills every member.
    pub fn kill_all(&mut self) {
        for m in self.schedulers.iter_mut().chain(self.webhooks.iter_mut()) {
            m.kill();
        }
    }
}
