//! Prometheus metrics of the webhook.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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

/// Labels of a failed QueueUnit create.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreateErrorLabels {
    /// timeout, conflict, api.
    pub reason: String,
}

/// The webhook's metrics.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Reviews answered.
    pub reviews: Family<ReviewLabels, Counter>,
    /// Time to answer a review, seconds.
    pub review_duration: Family<ReviewLabels, Histogram>,
    /// QueueUnit creates that failed (the job was refused).
    pub unit_create_errors: Family<CreateErrorLabels, Counter>,
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
            "QueueUnit creates that failed; the job was refused",
            metrics.unit_create_errors.clone(),
        );
        metrics
    }
}
