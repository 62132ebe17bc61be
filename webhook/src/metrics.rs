//! Prometheus metrics of the webhook.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a review.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    /// Job kind (`Job`, `TFJob`, …; `unknown` for unreadable reviews).
    pub kind: String,
    /// CREATE, UPDATE, …
    pub operation: String,
    /// allowed, held, denied, error.
    pub verdict: String,
}

impl ReviewLabels {
    /// Labels of a review whose request names `kind` and `operation`: only
    /// known values become label values (`other` for the rest), so forged
    /// reviews cannot grow the number of series.
    pub fn bounded(kind: &str, operation: &str, verdict: &'static str) -> Self {
        let kind = koord_queue_api::jobs::all()
            .iter()
            .map(|a| a.kind().kind)
            .chain(["Scale"])
            .find(|k| *k == kind)
            .unwrap_or("other");
        let operation = ["CREATE", "UPDATE", "DELETE", "CONNECT"]
            .into_iter()
            .find(|o| *o == operation)
            .unwrap_or("other");
        Self {
            kind: kind.to_string(),
            operation: operation.to_string(),
            verdict: verdict.to_string(),
        }
    }
}

/// Labels of a unit the webhook did not create although a review asked.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabels {
    /// job-missing (the job never appeared in the API), job-names-another-unit
    /// (a forged or stale review).
    pub reason: String,
}

/// Labels of a failed QueueUnit create.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreateErrorLabels {
    /// api (the API server refused or failed), conflict (the name is taken
    /// by another job's unit).
    pub reason: String,
}

/// Labels of a job refused because the unit backlog had no room for it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BacklogRefusalLabels {
    /// namespace-share (the job's namespace holds its share of the backlog),
    /// backlog-full (the whole backlog is taken). Not the namespace itself:
    /// forged reviews could name any number of them.
    pub reason: String,
}

/// The webhook's metrics.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Reviews answered.
    pub reviews: Family<ReviewLabels, Counter>,
    /// Time to answer a review, seconds.
    pub review_duration: Family<ReviewLabels, Histogram>,
    /// QueueUnit create attempts that failed. Inside a review the job was
    /// refused; after the answer the create is retried.
    pub unit_create_errors: Family<CreateErrorLabels, Counter>,
    /// QueueUnits whose job has been answered and that are not created yet.
    pub unit_backlog: Gauge,
    /// Units a review asked for and that were not created, by reason.
    pub units_not_created: Family<SkipLabels, Counter>,
    /// Reviews refused with 429 because too many were in flight.
    pub reviews_shed: Counter,
    /// Bytes of the review budget (`--max-review-bytes`) held by reviews
    /// being read or decided.
    pub review_bytes_in_flight: Gauge,
    /// Reviews refused with 429 because their bytes could not be had from
    /// the budget within the review timeout.
    pub reviews_shed_bytes: Counter,
    /// Reviews refused with 413: the body is larger than `--max-body-bytes`,
    /// or would take more than the whole budget to decide.
    pub reviews_too_large: Counter,
    /// Jobs refused because the unit backlog had no room, by reason.
    pub unit_backlog_refusals: Family<BacklogRefusalLabels, Counter>,
    /// Namespaces with QueueUnits in the backlog.
    pub unit_backlog_namespaces: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them under the `koord_queue_webhook` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reviews: Family::default(),
            review_duration: Family::new_with_constructor(|| {
                // 100 µs .. ~13 s
                Histogram::new(exponential_buckets(0.0001, 2.0, 18))
            }),
            unit_create_errors: Family::default(),
            unit_backlog: Gauge::default(),
            units_not_created: Family::default(),
            reviews_shed: Counter::default(),
            review_bytes_in_flight: Gauge::default(),
            reviews_shed_bytes: Counter::default(),
            reviews_too_large: Counter::default(),
            unit_backlog_refusals: Family::default(),
            unit_backlog_namespaces: Gauge::default(),
        };
        let registry = registry.sub_registry_with_prefix("koord_queue_webhook");
        registry.register(
            "reviews",
            "Admission reviews answered",
            metrics.reviews.clone(),
        );
        registry.register(
            "review_duration_seconds",
            "Time to answer an admission review",
            metrics.review_duration.clone(),
        );
        registry.register(
            "queue_unit_create_errors",
            "QueueUnit create attempts that failed (inside a review the job was refused; after the answer they are retried)",
            metrics.unit_create_errors.clone(),
        );
        registry.register(
            "queue_unit_backlog",
            "QueueUnits of answered jobs not created yet",
            metrics.unit_backlog.clone(),
        );
        registry.register(
            "queue_units_not_created",
            "QueueUnits a review asked for that were not created: the job never appeared, or names another unit (forged or stale reviews)",
            metrics.units_not_created.clone(),
        );
        registry.register(
            "reviews_shed",
            "Reviews answered 429 because too many were in flight",
            metrics.reviews_shed.clone(),
        );
        registry.register(
            "review_bytes_in_flight",
            "Bytes of the review budget (--max-review-bytes) held by reviews being read or decided",
            metrics.review_bytes_in_flight.clone(),
        );
        registry.register(
            "reviews_shed_bytes",
            "Reviews answered 429 because their bytes could not be had from the review budget within the review timeout",
            metrics.reviews_shed_bytes.clone(),
        );
        registry.register(
            "reviews_too_large",
            "Reviews answered 413: larger than --max-body-bytes, or needing more than the whole review budget",
            metrics.reviews_too_large.clone(),
        );
        registry.register(
            "unit_backlog_refusals",
            "Jobs refused because the QueueUnit backlog had no room: their namespace held its share (namespace-share) or the backlog was full (backlog-full)",
            metrics.unit_backlog_refusals.clone(),
        );
        registry.register(
            "unit_backlog_namespaces",
            "Namespaces with QueueUnits in the backlog",
            metrics.unit_backlog_namespaces.clone(),
        );
        metrics
    }
}
