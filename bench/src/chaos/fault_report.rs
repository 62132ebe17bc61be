//! The chaos run's JSON, the parts that are not a check: the fault plan,
//! each fault with who led before and after it and how long nobody did.

use serde_json::{Value, json};

use super::faults::{self, FaultKind, FaultPlan, FaultRecord};
use super::monitor::LeaderChange;

/// `v` rounded to `digits` decimals (the JSON's seconds).
pub(super) fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// Seconds without a leader between `from` and `to`, per the leadership
/// changes.
fn leaderless_between(changes: &[LeaderChange], from: f64, to: f64) -> f64 {
    let mut total = 0.0;
    for (k, c) in changes.iter().enumerate() {
        if !c.leaders.is_empty() {
            continue;
        }
        let end = changes.get(k + 1).map_or(to, |n| n.at_s);
        let (a, b) = (c.at_s.max(from), end.min(to));
        if b > a {
            total += b - a;
        }
    }
    total
}

/// Each fault of `records` with who led when it came and before the next
/// one (or `end`), and the leaderless seconds in between.
pub(super) fn fault_list(
    records: &[FaultRecord],
    leadership: &[LeaderChange],
    end: f64,
) -> Vec<Value> {
    records
    .iter()
    .enumerate()
    .map(|(k, f)| {
        let until = records.get(k + 1).map_or(end, |n| n.at_s);
        let before = leadership
            .iter()
            .rev()
            .find(|c| c.at_s <= f.at_s)
            .map(|c| c.leaders.clone())
            .unwrap_or_default();
        let after = leadership
            .iter()
            .rev()
            .find(|c| c.at_s <= until)
            .map(|c| c.leaders.clone())
            .unwrap_or_default();
        json!({
            "kind": f.kind.name(), "at_s": round(f.at_s, 1), "healed_s": round(f.healed_s, 1),
            "injected": f.injected, "detail": f.detail, "error": f.error,
            "leaders_before": before, "leaders_before_next_fault": after,
            "leaderless_s_until_next_fault": round(leaderless_between(leadership, f.at_s, until), 1),
        })
    })
    .collect()
}

/// The fault plan's settings for the JSON.
pub fn plan_json(plan: &FaultPlan) -> Value {
    json!({
        "kinds": plan.kinds.iter().map(|k: &FaultKind| k.name()).collect::<Vec<_>>(),
        "interval": format!("{:?}", plan.interval),
        "min_gap_after_heal": format!("{:?}", faults::MIN_GAP),
        "restart_after": format!("{:?}", plan.restart_after),
        "delay_chunk": format!("{:?}", plan.delay_chunk),
        "delay_for": format!("{:?}", plan.delay_for),
    })
}
