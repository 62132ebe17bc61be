//! Koord-Queue's shared model: the `Queue` and `QueueUnit` custom resources,
//! the typed view of Koordinator's `ElasticQuota`, the well-known label and
//! annotation keys, and the generation of the CRD manifests shipped in the chart.

pub mod crd;
mod dynamic_resource;
pub mod elastic_quota;
pub mod jobs;
pub mod kept_meta;
pub mod keys;
pub mod queue;
pub mod queue_unit;
pub mod resources;
pub mod write_ack;

pub use elastic_quota::{ElasticQuota, ElasticQuotaSpec, ElasticQuotaStatus};
pub use queue::{Queue, QueuePolicy, QueueSpec, QueueStatus};
pub use queue_unit::{QueueUnit, QueueUnitPhase, QueueUnitSpec, QueueUnitStatus, WatchedUnit};
pub use resources::{ResourceListExt, Resources};
pub use write_ack::WriteAck;
