//! What every Koord-Queue process needs around its own work (after kubert):
//! structured logging in plain or JSON form, an admin server with `/livez`,
//! `/readyz` and `/metrics` on its own port, readiness that turns false the
//! moment shutdown begins, the shutdown signal itself, and Lease-based leader
//! election for deployments where only one replica may write.

mod admin;
mod duration;
mod leader;
mod logging;
mod readiness;
mod shutdown;

pub use admin::{AdminServer, admin_router};
pub use duration::parse_duration;
pub use leader::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, LeaderElector,
    LeaderHandle, Leadership, LeaseConfig, LeaseConfigError,
};
pub use logging::{LogFormat, init_logging};
pub use readiness::Readiness;
pub use shutdown::shutdown_signal;
