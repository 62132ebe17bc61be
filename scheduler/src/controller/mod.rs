//! The controller around the pure core (architecture §4.3–4.7): it keeps the core
//! in step with the API (watches → records → core calls), runs event-driven
//! cycles with short batching, applies decisions through asynchronous writes,
//! follows each job through Running to Succeed/Failed, adopts and collects
//! units, keeps one Queue per ElasticQuota and publishes positions and
//! reasons. Only the Lease holder writes; standbys keep the same state warm.

mod clock;
pub mod estimate;
mod job_ref;
pub mod metrics;
mod quota_names;
pub mod records;
pub mod sources;
mod state;
mod unit_repair;
pub mod writes;

pub use state::{CACHES_SYNCED, Controller, FIRST_CYCLE, Settings, backoff_delay, jitter_seed};
