//! The worked example of docs/simulate.md: the same trace under two
//! configurations that differ in one fair-sharing weight. The page shows
//! this run's output; this test keeps its claims true.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use koord_queue_sim::cluster::Cluster;
use koord_queue_sim::engine::Settings;
use koord_queue_sim::report::compare::compare;
use koord_queue_sim::simulate;
use koord_queue_sim::trace::read_trace;

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_heavier_weight_shortens_that_teams_waits() {
    let trace = read_trace(example("fair-trace.jsonl").as_bytes()).unwrap();
    let run = |objects: &str| {
        let cluster = Cluster::from_yaml(&[example(objects)]).unwrap();
        simulate(&cluster, &trace, Settings::default()).unwrap()
    };
    let (equal, weighted) = (run("fair-equal.yaml"), run("fair-weighted.yaml"));
    let mean = |r: &koord_queue_sim::report::Report, q: &str| {
        let g = r.by_quota.iter().find(|g| g.name == q).unwrap();
        g.time_to_release.mean
    };
    // Equal weights: equal waits.
    assert_eq!(mean(&equal, "team-a"), mean(&equal, "team-b"));
    // team-b weighing 3: it waits seconds, team-a minutes.
    assert!(
        mean(&weighted, "team-b") < 10.0,
        "{}",
        mean(&weighted, "team-b")
    );
    assert!(mean(&weighted, "team-a") > mean(&equal, "team-a"));
    // While both borrow, team-b holds about three quarters of what they borrow.
    let b = &weighted.fair_shares[0].children[1];
    assert_eq!(b.quota, "team-b");
    assert_eq!(b.target_contended["cpu"], 0.75);
    assert!((0.6..=0.8).contains(&b.actual["cpu"]), "{:?}", b.actual);
    let c = compare("fair-equal.yaml", equal, "fair-weighted.yaml", weighted);
    assert!(
        c.differences
            .iter()
            .any(|d| d.notable && d.name == "team-b")
    );
}
