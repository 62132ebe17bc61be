//! The on-demand visibility API, `visibility.koord-queue.io/v1alpha1`: where
//! every job waits, why, and since when, read when asked instead of written
//! into every unit's status (architecture §4.8).
//!
//! An aggregated API: kube-apiserver authenticates the user and proxies the
//! request here (`authn.rs` believes its headers only from the front proxy's
//! certificate); each request is authorized by the API server through a
//! SubjectAccessReview (`authz.rs`), so RBAC decides who sees what. The
//! scheduler serves it: the answers come from the state it decides on,
//! asked through a channel (`queries.rs`). `types.rs` is what it answers,
//! `history.rs` the scheduler's bounded history, `routes.rs` the paths,
//! `cache.rs` the answers kept while the state stands, `client.rs` reading
//! it as kubectl does (gzip), `discovery.rs`
//! discovery and OpenAPI, `table.rs` what `kubectl get` prints, `serve.rs`
//! TLS.

pub mod authn;
pub mod authz;
pub mod cache;
pub mod client;
pub mod discovery;
pub mod history;
pub mod queries;
pub mod routes;
pub mod serve;
pub mod table;
pub mod types;

pub use cache::{AnswerCache, DEFAULT_CACHE_BYTES};
pub use queries::{Answer, Ask, Page, Queries, Query, Reply};
pub use routes::{ApiState, router};
pub use types::{
    API_VERSION, GROUP, ItemMeta, JobOf, PendingUnit, PendingUnitList, QuotaUsage, QuotaUsageList,
    VERSION, WaitReasonView, WaitType,
};
