//! What every Koord-Queue process needs around its own work (after kubert):
//! structured logging in plain or JSON form, an admin server with `/livez`,
//! `/readyz` and `/metrics` on its own port, readiness that turns false the
//! moment shutdown begins, and the shutdown signal itself.

mod admin;
mod duration;
mod logging;
mod readiness;
mod shutdown;

pub use admin::{AdminServer, admin_router};
pub use duration::parse_duration;
pub use logging::{LogFormat, init_logging};
pub use readiness::Readiness;
pub use shutdown::shutdown_signal;
