//! The end-to-end benchmark (`make bench-e2e`, architecture §9): Koord-Queue's
//! webhook and scheduler against a real local control plane in Kueue's
//! scheduler-performance baseline shape, and the API server floor of the
//! same API work measured in the same run. See `docs/performance.md`.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod admin_scrape;
pub mod api_stats;
pub mod chaos;
pub mod checker;
pub mod components;
pub mod dashboard_load;
pub mod estimate_accuracy;
pub mod failover;
pub mod fairness;
pub mod fidelity;
pub mod floor;
pub mod idle;
pub mod kueue;
pub mod member;
pub mod output;
pub mod phase;
pub mod plot;
pub mod quota;
pub mod report;
pub mod rounds;
pub mod runner;
pub mod scheduler_settings;
pub mod shape;
pub mod visibility_listing;
