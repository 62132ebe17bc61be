//! The memory of the reviews being decided, bounded in bytes (issue 37).
//!
//! The count limit (`--max-concurrent-reviews`, 512) alone does not bound
//! memory: 512 reviews of a ~1.5 MB object with its old copy (a ~3 MB
//! body) parse to far more than the chart's memory limit (256 MiB). So a
//! review's body is charged to a budget of bytes (`--max-review-bytes`)
//! before it is read, and the charge is given back when the answer has been
//! sent (the body, its parse and the copies the decision makes are gone by
//! then).
//!
//! What a body costs once parsed depends on its shape, not only on its
//! length: a long string parses to about its length, a list of small maps to
//! many times it (a `serde_json` map is a B-tree whose first node alone is
//! ~600 bytes). A body is therefore charged its length, or — when its shape
//! would take more than [`PARSE_OVERHEAD`] bytes of memory per byte — the
//! memory estimated from its shape divided by that factor. Either way the
//! budget × [`PARSE_OVERHEAD`] bounds the memory of the reviews in flight,
//! whatever they contain. With the defaults: 8 MiB × 16 = 128 MiB, half of
//! the chart's 256 MiB limit; the rest is the process at rest (caches,
//! runtime, TLS; ~40 MiB measured) and the connections.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of memory a review may take per byte of budget. Measured (mimalloc,
/// `serde_json::Value`, the hold's copy of the job): a Job of ~1.5 MB whose
/// size is in strings (a script, a configuration) takes ~3× its body to
/// decide, one with thousands of env entries of ~100 bytes ~10×; only
/// shapes made mostly of tiny values (a list of 8-byte maps: ~60×) are
/// charged more than their length.
pub const PARSE_OVERHEAD: usize = 16;

/// Default budget (`--max-review-bytes`): 8 MiB × [`PARSE_OVERHEAD`] =
/// 128 MiB, half of the chart's 256 MiB memory limit. At least
/// `--max-body-bytes` (6 MiB), so the largest body accepted can be decided.
pub const DEFAULT_MAX_REVIEW_BYTES: usize = 8 << 20;

/// Memory estimate of parsing, per JSON object that is not empty: the first
/// B-tree node of a `serde_json::Map<String, Value>` (11 keys of 24 bytes and
/// 11 values of 32, ~630 bytes), a little less since the node's empty slots
/// are never touched.
const PER_OBJECT: usize = 576;
/// Per value in an array or a map: its 32-byte `Value`, with room for a
/// vector's growth and half-full B-tree nodes.
const PER_ITEM: usize = 48;
/// Per string (keys too): the allocator's rounding of its heap buffer.
const PER_STRING: usize = 8;

/// Why a body cannot be decided now or at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The budget is taken by other reviews; retrying later helps.
    Busy,
    /// The body would need more than the whole budget: it can never be
    /// decided (`needed` bytes of budget, of `budget`).
    TooLarge { needed: usize, budget: usize },
}

/// The budget of bytes shared by all reviews.
#[derive(Debug, Clone)]
pub struct ReviewBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    in_flight: Gauge,
}

/// A review's share of the budget; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    permit: OwnedSemaphorePermit,
    in_flight: Gauge,
}

impl Charge {
    /// Bytes of budget held.
    pub fn bytes(&self) -> usize {
        self.permit.num_permits()
    }

    fn add(&mut self, permit: OwnedSemaphorePermit) {
        self.in_flight.inc_by(as_i64(permit.num_permits()));
        self.permit.merge(permit);
    }

    /// Gives back all but `keep` bytes.
    fn shrink_to(&mut self, keep: usize) {
        let excess = self.bytes().saturating_sub(keep);
        if let Some(given_back) = self.permit.split(excess) {
            self.in_flight.dec_by(as_i64(given_back.num_permits()));
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.in_flight.dec_by(as_i64(self.permit.num_permits()));
    }
}

fn as_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl ReviewBudget {
    /// A budget of `total` bytes; `in_flight` reports the bytes held.
    /// `Err` for a budget the semaphore cannot hold.
    pub fn new(total: usize, in_flight: Gauge) -> Result<Self, String> {
        if total == 0 || total > Semaphore::MAX_PERMITS {
            return Err(format!(
                "--max-review-bytes must be between 1 and {}, not {total}",
                Semaphore::MAX_PERMITS
            ));
        }
        Ok(Self {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            in_flight,
        })
    }

    /// A budget of `total` bytes, or the nearest a semaphore can hold.
    pub fn clamped(total: usize, in_flight: Gauge) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            in_flight,
        }
    }

    /// Total bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Waits until `bytes` are free or `deadline` passes (`Busy`). Bodies
    /// are served in arrival order (the semaphore is fair), so a large
    /// body is not starved by small ones.
    pub async fn acquire(&self, bytes: usize, deadline: Instant) -> Result<Charge, Refusal> {
        let n = self.permits(bytes)?;
        let permit =
            tokio::time::timeout_at(deadline.into(), self.bytes.clone().acquire_many_owned(n))
                .await
                .map_err(|_| Refusal::Busy)?
                .map_err(|_| Refusal::Busy)?;
        self.in_flight.inc_by(as_i64(permit.num_permits()));
        Ok(Charge {
            permit,
            in_flight: self.in_flight.clone(),
        })
    }

    /// Sets `charge` to what the read `body` costs ([`charge_for`]): the
    /// excess of a charge made for an unknown length is given back; a body
    /// that costs more than its length takes the difference if it is free
    /// now. It does not wait for it: reviews that hold their bodies'
    /// bytes and wait for more could hold the whole budget and wait for
    /// each other until they time out.
    pub fn charge_shape(&self, charge: &mut Charge, body: &[u8]) -> Result<(), Refusal> {
        let cost = charge_for(body);
        let held = charge.bytes();
        if cost <= held {
            charge.shrink_to(cost);
            return Ok(());
        }
        if cost > self.total {
            return Err(Refusal::TooLarge {
                needed: cost,
                budget: self.total,
            });
        }
        let more = self.permits(cost - held)?;
        let extra = self
            .bytes
            .clone()
            .try_acquire_many_owned(more)
            .map_err(|_| Refusal::Busy)?;
        charge.add(extra);
        Ok(())
    }

    fn permits(&self, bytes: usize) -> Result<u32, Refusal> {
        let too_large = || Refusal::TooLarge {
            needed: bytes,
            budget: self.total,
        };
        if bytes > self.total {
            return Err(too_large());
        }
        // A review charges at least one byte, so an empty body is counted too.
        u32::try_from(bytes.max(1)).map_err(|_| too_large())
    }
}

/// Bytes of budget a body is charged: its length, or its estimated memory
/// ([`estimated_memory`]) divided by [`PARSE_OVERHEAD`] when that is more.
pub fn charge_for(body: &[u8]) -> usize {
    body.len()
        .max(estimated_memory(body).div_ceil(PARSE_OVERHEAD))
        .max(1)
}

/// Memory deciding a review of `body` takes at most, estimated (high) from
/// its shape without parsing it: the body itself, its parse
/// ([`parsed_size`]) and a copy of it (the hold edits a copy of the job).
pub fn estimated_memory(body: &[u8]) -> usize {
    body.len()
        .saturating_add(parsed_size(body).saturating_mul(2))
}

/// Bytes `body` takes once parsed into a `serde_json::Value`, estimated
/// (high) by one pass over its bytes: its strings, and per object, per
/// value and per string what the parse allocates besides. Measured against
/// `serde_json` with mimalloc, the estimate is 1–1.6× the real figure for
/// Kubernetes objects and for lists of tiny values alike.
pub fn parsed_size(body: &[u8]) -> usize {
    let (mut objects, mut items, mut strings) = (0usize, 0usize, 0usize);
    let (mut in_string, mut escaped, mut previous) = (false, false, 0u8);
    for &byte in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
                previous = byte;
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                strings += 1;
            }
            b'{' => {
                objects += 1;
                items += 1;
            }
            // `{}` allocates no node.
            b'}' if previous == b'{' => {
                objects = objects.saturating_sub(1);
                items = items.saturating_sub(1);
            }
            b'[' | b',' => items += 1,
            _ => {}
        }
        if !byte.is_ascii_whitespace() {
            previous = byte;
        }
    }
    body.len()
        .saturating_add(objects.saturating_mul(PER_OBJECT))
        .saturating_add(items.saturating_mul(PER_ITEM))
        .saturating_add(strings.saturating_mul(PER_STRING))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;

    fn budget(total: usize) -> (ReviewBudget, Gauge) {
        let gauge = Gauge::default();
        (ReviewBudget::new(total, gauge.clone()).unwrap(), gauge)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    /// A Job of about `bytes` whose size is in env entries of `value` bytes.
    fn job_with_env(bytes: usize, value: usize) -> Value {
        let entry = |i: usize| json!({ "name": format!("VAR_{i:06}"), "value": "x".repeat(value) });
        let count = bytes / (value + 30);
        json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": "big" },
                "spec": { "template": { "spec": { "containers": [{ "name": "c",
                    "env": (0..count).map(entry).collect::<Vec<_>>() }] } } } })
    }

    #[test]
    fn strings_cost_their_length_small_values_cost_more() {
        let string = json!({ "metadata": { "annotations": { "a": "x".repeat(100_000) } } })
            .to_string()
            .into_bytes();
        assert_eq!(charge_for(&string), string.len());
        let typical = job_with_env(100_000, 100).to_string().into_bytes();
        assert_eq!(
            charge_for(&typical),
            typical.len(),
            "a typical object is charged its length"
        );
        let tiny = Value::Array((0..10_000).map(|_| json!({ "a": 0 })).collect())
            .to_string()
            .into_bytes();
        assert!(
            charge_for(&tiny) > 4 * tiny.len(),
            "{} for {}",
            charge_for(&tiny),
            tiny.len()
        );
    }

    #[test]
    fn the_estimate_is_not_fooled_by_strings_or_empty_maps() {
        // Braces and commas inside strings (escaped quotes too) are text.
        let text = json!({ "a": "{[,{\"}]},{".repeat(1000) })
            .to_string()
            .into_bytes();
        assert_eq!(charge_for(&text), text.len());
        // `{}` allocates no node.
        let empty = Value::Array((0..1000).map(|_| json!({})).collect())
            .to_string()
            .into_bytes();
        let full = Value::Array((0..1000).map(|_| json!({ "": 0 })).collect())
            .to_string()
            .into_bytes();
        assert!(parsed_size(&empty) < parsed_size(&full) / 4);
        // Not JSON at all: still a number, the parse refuses it later.
        assert!(charge_for(b"\"unterminated {{{") >= 17);
        assert_eq!(charge_for(b""), 1);
    }

    #[tokio::test]
    async fn bytes_are_waited_for_and_given_back_when_the_answer_is_dropped() {
        let (budget, gauge) = budget(100);
        let first = budget.acquire(60, soon()).await.unwrap();
        assert_eq!(gauge.get(), 60);
        // 60 + 60 > 100: waits until the deadline.
        assert_eq!(budget.acquire(60, soon()).await.unwrap_err(), Refusal::Busy);
        // Freed while waiting: served.
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move {
                budget
                    .acquire(60, Instant::now() + Duration::from_secs(5))
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        let second = waiting.await.unwrap().unwrap();
        assert_eq!(gauge.get(), 60);
        drop(second);
        assert_eq!(gauge.get(), 0);
        // More than the whole budget can never be had.
        assert_eq!(
            budget.acquire(101, soon()).await.unwrap_err(),
            Refusal::TooLarge {
                needed: 101,
                budget: 100
            }
        );
    }

    #[tokio::test]
    async fn a_body_costlier_than_its_length_takes_more_or_is_refused() {
        let tiny = Value::Array((0..2_000).map(|_| json!({ "a": 0 })).collect())
            .to_string()
            .into_bytes();
        let cost = charge_for(&tiny);
        // Enough budget: the charge grows to the cost.
        let (budget, gauge) = budget(cost + cost / 2);
        let mut charge = budget.acquire(tiny.len(), soon()).await.unwrap();
        budget.charge_shape(&mut charge, &tiny).unwrap();
        assert_eq!((charge.bytes(), gauge.get()), (cost, as_i64(cost)));
        // The rest is taken: the second one is busy, not waiting.
        let mut other = budget.acquire(tiny.len(), soon()).await.unwrap();
        assert_eq!(
            budget.charge_shape(&mut other, &tiny).unwrap_err(),
            Refusal::Busy
        );
        drop((charge, other));
        assert_eq!(gauge.get(), 0);
        // A budget smaller than the cost: refused for good, with the figures.
        let (small, _) = self::budget(cost - 1);
        let mut charge = small.acquire(tiny.len(), soon()).await.unwrap();
        assert_eq!(
            small.charge_shape(&mut charge, &tiny).unwrap_err(),
            Refusal::TooLarge {
                needed: cost,
                budget: cost - 1
            }
        );
    }

    #[tokio::test]
    async fn a_charge_for_an_unknown_length_shrinks_to_the_body() {
        let (budget, gauge) = budget(1000);
        let mut charge = budget.acquire(1000, soon()).await.unwrap();
        budget.charge_shape(&mut charge, b"\"abc\"").unwrap();
        assert_eq!((charge.bytes(), gauge.get()), (5, 5));
        // The rest is free again.
        let _other = budget.acquire(995, soon()).await.unwrap();
    }

    #[test]
    fn a_budget_the_semaphore_cannot_hold_is_refused() {
        let gauge = Gauge::default();
        assert!(ReviewBudget::new(0, gauge.clone()).is_err());
        assert!(ReviewBudget::new(usize::MAX, gauge).is_err());
    }
}
