//! One copy of each key: the unit's key is held by the map of units, the
//! unit's record and its job's record; the job's key by the map of jobs and
//! the unit's record. At 100,000 units a second copy of each was ~9 MB.

use std::sync::Arc;

use serde_json::json;

use super::Scenario;
use crate::controller::records::JobKey;

/// Whether every holder of the unit's key and of the job's key holds the
/// same copy.
fn shared(s: &Scenario) -> bool {
    let c = &s.controller;
    let (Some((unit_key, st)), Some((job_key, job))) = (
        c.units.get_key_value("ns/u"),
        c.jobs.get_key_value(&JobKey::new("Job", "ns", "j")),
    ) else {
        return false;
    };
    Arc::ptr_eq(unit_key, &st.rec.key())
        && Arc::ptr_eq(unit_key, &job.unit)
        && st.rec.job_key().same_copy(job_key)
}

#[test]
fn a_unit_and_its_job_share_their_keys_whichever_comes_first() {
    // The job first, then the unit, then each again (new records).
    let mut s = Scenario::new(json!({}));
    s.job(true, json!({}));
    s.unit(json!({ "phase": "Enqueued" }), true);
    assert!(shared(&s), "job first");
    s.job(true, json!({}));
    s.unit(json!({ "phase": "Enqueued" }), true);
    assert!(shared(&s), "after updates");

    // The unit first.
    let mut s = Scenario::new(json!({}));
    s.unit(json!({ "phase": "Enqueued" }), true);
    s.job(true, json!({}));
    assert!(shared(&s), "unit first");
    s.unit(json!({ "phase": "Enqueued" }), true);
    s.job(true, json!({}));
    assert!(shared(&s), "after updates");
    assert_eq!(
        s.controller
            .units
            .get("ns/u")
            .map(|st| st.rec.name().to_string()),
        Some("u".into())
    );
    assert_eq!(
        s.controller
            .jobs
            .values()
            .next()
            .map(|j| j.unit_name().to_string()),
        Some("u".into())
    );
}
