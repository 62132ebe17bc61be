//! Hand-made cases whose release times are known: cycles batched 20 ms
//! after a change, jobs holding their quota from release to end, reclaim
//! with the controller's backoff, a run started from a given state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use koord_queue_scheduler::controller::{backoff_delay, jitter_seed};
use koord_queue_sim::cluster::Cluster;
use koord_queue_sim::engine::{self, Settings};
use koord_queue_sim::job::JobBuilder;
use koord_queue_sim::trace::{Quantity, TraceJob, TracePodSet};
use koord_queue_sim::{prepare, simulate};

/// Two leaf quotas `a` and `b` (min 2, max `max` cpu each) in a cluster of
/// 4 cpu; `extra` is added to each quota's spec.
fn two_quotas(max: &str) -> Cluster {
    let yaml = format!(
        r#"
plugins:
- name: Priority
- name: ElasticQuota
  args: {{ rootCapacity: {{ cpu: "4" }} }}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {{ name: a, namespace: ns }}
spec: {{ min: {{ cpu: "2" }}, max: {{ cpu: "{max}" }} }}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {{ name: b, namespace: ns }}
spec: {{ min: {{ cpu: "2" }}, max: {{ cpu: "{max}" }} }}
"#
    );
    Cluster::from_yaml(&[yaml]).unwrap()
}

fn job(name: &str, quota: &str, cpu: i64, submit_ms: i64, runtime_ms: i64) -> TraceJob {
    TraceJob {
        name: Some(name.into()),
        namespace: "ns".into(),
        quota: Some(quota.into()),
        submit_ms,
        runtime_ms,
        pod_sets: vec![TracePodSet {
            count: cpu,
            requests: [("cpu".to_string(), Quantity("1".into()))].into(),
            ..TracePodSet::default()
        }],
        ..TraceJob::default()
    }
}

/// Each job's outcome, the trace run to its end with `settings`.
fn run_with(cluster: &Cluster, trace: &[TraceJob], settings: Settings) -> Vec<engine::UnitOutcome> {
    let mut sim = prepare(cluster, trace.iter().cloned().map(Ok), settings).unwrap();
    sim.run(None);
    sim.outcomes().to_vec()
}

fn releases(cluster: &Cluster, trace: &[TraceJob]) -> Vec<Option<i64>> {
    run_with(cluster, trace, Settings::default())
        .iter()
        .map(|o| o.first_release_ms)
        .collect()
}

#[test]
fn a_full_quota_releases_one_job_after_another() {
    let cluster = two_quotas("2");
    let trace = [
        job("a0", "a", 2, 0, 10_000),
        job("a1", "a", 2, 0, 10_000),
        job("b0", "b", 2, 0, 10_000),
        job("a2", "a", 2, 0, 10_000),
    ];
    // A cycle 20 ms after the submissions; each end frees the quota and
    // the next cycle, 20 ms later, releases the next job.
    assert_eq!(
        releases(&cluster, &trace),
        [Some(20), Some(10_040), Some(20), Some(20_060)]
    );
}

#[test]
fn priority_orders_the_waiting_jobs() {
    let cluster = two_quotas("2");
    let mut high = job("high", "a", 2, 1_000, 1_000);
    high.priority = Some(10);
    let trace = [
        job("first", "a", 2, 0, 5_000),
        job("low", "a", 2, 500, 1_000),
        high,
    ];
    assert_eq!(
        releases(&cluster, &trace),
        [Some(20), Some(6_060), Some(5_040)]
    );
}

#[test]
fn a_guaranteed_job_reclaims_what_another_quota_borrows() {
    // a may borrow up to 4 cpu; b's job within its min takes 2 back.
    let cluster = two_quotas("4");
    let trace = [
        job("big", "a", 4, 0, 60_000),
        job("mine", "b", 2, 1_000, 5_000),
    ];
    let outcomes = run_with(&cluster, &trace, Settings::default());
    let (big, mine) = (&outcomes[0], &outcomes[1]);
    assert_eq!(big.reclaimed, 1);
    // b's cycle at 1,020 ms reclaims; the freed quota is released to b's
    // job in the next cycle.
    assert_eq!(mine.first_release_ms, Some(1_040));
    assert_eq!(mine.end_ms, Some(6_040));
    // The victim's backoff guards against thrash, not against an idle
    // cluster (issue 44): once b's job ended (6,040 ms) its room is free
    // and the root idle, so the housekeeping tick after (6,500 ms) ends
    // the backoff early, and the cycle after releases it — well before its
    // backoff would have ended.
    let delay = backoff_delay(1, jitter_seed(0, "ns/big", 1)).as_millis() as i64;
    assert!(1_020 + delay > 6_520, "the backoff alone would end later");
    assert_eq!(big.last_release_ms, Some(6_520));
    assert_eq!(big.releases, 2);
    // Its job started over: it ends a full runtime after its new release.
    assert_eq!(big.end_ms, Some(6_520 + 60_000));
}

#[test]
fn a_run_starts_from_a_given_state() {
    // What the scheduler's estimate does: a job running until 5 s, one
    // waiting since before the start — it is released when the first ends.
    let cluster = two_quotas("2");
    let mut sim = engine::simulation(&cluster, Settings::default()).unwrap();
    sim.start_at(1_000);
    let mut jobs = JobBuilder::default();
    let running = jobs.build(&job("r", "a", 2, 0, 0), 0).unwrap();
    let waiting = jobs.build(&job("w", "a", 2, 500, 3_000), 1).unwrap();
    let later = jobs.build(&job("l", "a", 1, 2_000, 3_000), 2).unwrap();
    sim.add_running(running, 100, 5_000);
    let w = sim.add_job(waiting);
    let l = sim.add_job(later);
    // An estimate stops once every waiting job is released.
    let run = sim.run_to_releases(None);
    assert_eq!(run.end_ms, 8_040);
    assert_eq!(sim.outcomes()[w].end_ms, Some(8_020));
    assert_eq!(sim.outcomes()[w].first_release_ms, Some(5_020));
    // Submitted later, it waits behind `w` for the quota (Priority policy
    // would pass it, but `w` holds all 2 cpu until 8,020).
    assert_eq!(sim.outcomes()[l].first_release_ms, Some(8_040));
    // Its end is past where the estimate stopped.
    assert_eq!(sim.outcomes()[l].end_ms, None);
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let cluster = two_quotas("4");
    let trace: Vec<TraceJob> = (0..300)
        .map(|i| {
            // a's jobs take the whole cluster, borrowing b's min; b's
            // come now and then and take it back.
            let (quota, cpu) = if i % 5 == 0 { ("b", 2) } else { ("a", 4) };
            job(
                &format!("j{i}"),
                quota,
                cpu,
                i * 997,
                1_000 + (i * 7919) % 20_000,
            )
        })
        .collect();
    let settings = |seed| Settings {
        seed,
        ..Settings::default()
    };
    let one = serde_json::to_string(&simulate(&cluster, &trace, settings(7)).unwrap()).unwrap();
    let two = serde_json::to_string(&simulate(&cluster, &trace, settings(7)).unwrap()).unwrap();
    assert_eq!(one, two);
    let report = simulate(&cluster, &trace, settings(7)).unwrap();
    assert_eq!(report.summary.jobs, 300);
    assert_eq!(report.summary.never_released, 0);
    assert!(report.summary.reclaimed > 0, "{:?}", report.summary);
}

#[test]
fn a_name_in_use_is_refused_and_free_again_once_its_job_is_gone() {
    let cluster = two_quotas("2");
    let trace = [
        job("x", "a", 2, 0, 1_000),
        job("x", "a", 2, 500, 1_000),
        job("x", "a", 2, 2_000, 1_000),
    ];
    let mut sim = prepare(&cluster, trace.iter().cloned().map(Ok), Settings::default()).unwrap();
    let run = sim.run(None);
    assert_eq!(run.refused, 1);
    let releases: Vec<_> = sim.outcomes().iter().map(|o| o.first_release_ms).collect();
    assert_eq!(releases, [Some(20), None, Some(2_020)]);
}

#[test]
fn a_higher_priority_job_preempts_within_its_quota_after_the_minimum_run_time() {
    // Quota a (max 2 cpu) whose Queue preempts lower priorities once they
    // have run 5 s.
    let yaml = r#"
plugins:
- name: Priority
- name: ElasticQuota
  args: { rootCapacity: { cpu: "4" } }
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: { name: a, namespace: ns }
spec: { min: { cpu: "2" }, max: { cpu: "2" } }
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: Queue
metadata: { name: a, namespace: koord-queue }
spec: { queuePolicy: Priority, preemption: { withinQuota: LowerPriority, minRunSeconds: 5 } }
"#;
    let cluster = Cluster::from_yaml(&[yaml]).unwrap();
    let mut urgent = job("urgent", "a", 2, 1_000, 1_000);
    urgent.priority = Some(10);
    let trace = [job("low", "a", 2, 0, 60_000), urgent];
    let outcomes = run_with(&cluster, &trace, Settings::default());
    let (low, urgent) = (&outcomes[0], &outcomes[1]);
    assert_eq!(low.preempted, 1);
    // `low` was released at 20 ms and may be preempted from 5,020 ms: the
    // housekeeping tick at 5,500 ms starts a cycle 20 ms later, which
    // preempts; the next one releases `urgent`.
    assert_eq!(urgent.first_release_ms, Some(5_540));
    assert_eq!(urgent.end_ms, Some(6_540));
}

#[test]
fn a_reserving_head_keeps_smaller_jobs_from_passing_it() {
    let cluster = |reserve: &str| {
        let yaml = format!(
            r#"
plugins:
- name: Priority
- name: ElasticQuota
  args: {{ rootCapacity: {{ cpu: "4" }} }}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {{ name: a, namespace: ns }}
spec: {{ min: {{ cpu: "4" }}, max: {{ cpu: "4" }} }}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: Queue
metadata: {{ name: a, namespace: koord-queue }}
spec: {{ queuePolicy: Priority {reserve} }}
"#
        );
        Cluster::from_yaml(&[yaml]).unwrap()
    };
    let trace = [
        job("running", "a", 2, 0, 10_000),
        job("big", "a", 4, 500, 5_000),
        job("small", "a", 1, 1_000, 1_000),
    ];
    // Without a reserving head the small job passes the big one at once.
    assert_eq!(
        releases(&cluster(""), &trace),
        [Some(20), Some(10_040), Some(1_020)]
    );
    // Reserving from the start, the big head goes first when the running
    // job ends; the small one (unbounded: it cannot be backfilled) after it.
    assert_eq!(
        releases(&cluster(", reserveHead: { afterSeconds: 0 }"), &trace),
        [Some(20), Some(10_040), Some(15_060)]
    );
}

/// `--latency-spread`: a start latency of 5 s and a spread of `spread_ms`
/// drawn from `seed`; cycles 1 ms after a change, so that only ends in the
/// same millisecond free their room together.
fn spread_settings(spread_ms: i64, seed: u64) -> Settings {
    Settings {
        seed,
        cycle_batch_ms: 1,
        latency: engine::Latency {
            start_ms: 5_000,
            spread_ms,
            ..engine::Latency::default()
        },
        ..Settings::default()
    }
}

#[test]
fn a_spread_moves_each_admission_and_hold_within_its_bounds_and_repeats_with_its_seed() {
    let cluster = two_quotas("4");
    let trace: Vec<TraceJob> = (0..4)
        .map(|i| job(&format!("j{i}"), "a", 1, 0, 10_000))
        .collect();
    // No spread: admitted together, released by one cycle, ended together
    // (release + 5 s start latency + 10 s).
    let flat = run_with(&cluster, &trace, spread_settings(0, 0));
    for o in &flat {
        assert_eq!((o.first_release_ms, o.end_ms), (Some(1), Some(15_001)));
    }
    let spread = run_with(&cluster, &trace, spread_settings(8_000, 0));
    for o in &spread {
        // Admitted up to 4 s after the submission (never before it), a
        // cycle 1 ms after.
        let released = o.first_release_ms.unwrap();
        assert!((1..=4_001).contains(&released), "{o:?}");
        // Started 1 to 9 s after the release, then 10 s.
        let end = o.end_ms.unwrap();
        assert!(
            (released + 11_000..released + 19_000).contains(&end),
            "{o:?}"
        );
    }
    let mut ends: Vec<_> = spread.iter().map(|o| o.end_ms).collect();
    ends.sort();
    ends.dedup();
    assert_eq!(ends.len(), 4, "the jobs end apart: {spread:?}");
    assert_eq!(
        spread,
        run_with(&cluster, &trace, spread_settings(8_000, 0))
    );
    assert_ne!(
        spread,
        run_with(&cluster, &trace, spread_settings(8_000, 1))
    );
}

/// Why the spread matters (docs/simulate.md "Latency and its spread"): four
/// one-core jobs fill a 4-core quota; a two-core job of higher priority
/// comes next, then one-core jobs behind it. Ending together, the four free
/// room for the wide job at once; ending apart, each freed core goes to a
/// one-core job behind the wide head (`Priority` passes a head that does
/// not fit), and the wide job waits for the one-core jobs to run out.
#[test]
fn with_a_spread_single_freed_cores_go_to_narrow_jobs_behind_a_wide_head() {
    let cluster = two_quotas("4");
    let mut trace: Vec<TraceJob> = (0..4)
        .map(|i| job(&format!("first{i}"), "a", 1, 0, 10_000))
        .collect();
    let mut wide = job("wide", "a", 2, 5_000, 10_000);
    wide.priority = Some(10);
    trace.push(wide);
    trace.extend((0..8).map(|i| job(&format!("next{i}"), "a", 1, 6_000, 10_000)));
    let wide_release = |settings| run_with(&cluster, &trace, settings)[4].first_release_ms;
    let flat = wide_release(spread_settings(0, 0)).unwrap();
    assert_eq!(
        flat, 15_002,
        "released in the cycle after the four end together"
    );
    for seed in 0..5 {
        let spread = wide_release(spread_settings(8_000, seed)).unwrap();
        assert!(
            spread > flat + 10_000,
            "seed {seed}: released at {spread}, behind one-core jobs that took each freed core"
        );
    }
}

/// A latency profile: each step takes its moment's figure, else the fixed
/// median. One full quota, three jobs in line: the first is released in
/// the profile's first bucket (start 1 s) and its pods end in the second
/// (free 2 s); the second is released in the second (start 3 s) and ends
/// after the profile (the fixed free of 100 ms); the third is released
/// after it (the fixed start of 0).
#[test]
fn a_latency_profile_gives_each_step_the_latency_of_its_moment() {
    use std::sync::Arc;
    let cluster = two_quotas("2");
    let trace = [
        job("a0", "a", 2, 0, 10_000),
        job("a1", "a", 2, 0, 10_000),
        job("a2", "a", 2, 0, 10_000),
    ];
    let profile = engine::LatencyProfile {
        start_ms: 0,
        bucket_ms: 10_000,
        buckets: vec![
            engine::LatencyBucket {
                start_ms: Some(1_000),
                free_ms: Some(500),
                ..Default::default()
            },
            engine::LatencyBucket {
                start_ms: Some(3_000),
                free_ms: Some(2_000),
                ..Default::default()
            },
        ],
    };
    let settings = Settings {
        latency: engine::Latency {
            free_ms: 100,
            profile: Some(Arc::new(profile)),
            ..engine::Latency::default()
        },
        ..Settings::default()
    };
    let outcomes = run_with(&cluster, &trace, settings);
    let releases: Vec<_> = outcomes.iter().map(|o| o.first_release_ms).collect();
    let ends: Vec<_> = outcomes.iter().map(|o| o.end_ms).collect();
    // a0: released at 20, pods 1,020-11,020, free at 13,020; a1: released
    // at 13,040, pods 16,040-26,040, free at 26,140; a2: released at
    // 26,160, pods until 36,160.
    assert_eq!(releases, [Some(20), Some(13_040), Some(26_160)]);
    assert_eq!(ends, [Some(11_020), Some(26_040), Some(36_160)]);
}

/// `--seeds`: runs with consecutive seeds, the report of the first and the
/// fidelity of all. The same seeds give the same report; one seed is
/// `simulate`'s report; with a spread, other seeds move the releases, and
/// each class's range holds its mean.
#[test]
fn runs_over_seeds_repeat_and_bracket_the_class_means() {
    use koord_queue_sim::simulate_seeds;
    use koord_queue_sim::trace::Observed;
    let cluster = two_quotas("4");
    let trace: Vec<TraceJob> = (0..200)
        .map(|i| {
            let (quota, cpu) = if i % 3 == 0 { ("b", 2) } else { ("a", 1) };
            let mut j = job(
                &format!("j{i}"),
                quota,
                cpu,
                i * 300,
                1_000 + (i * 7919) % 4_000,
            );
            // A class for the report, its priority given (no PriorityClass).
            j.priority_class = Some(quota.into());
            j.priority = Some(0);
            j.observed = Some(Observed {
                release_ms: Some(i * 300 + 2_000),
                ..Observed::default()
            });
            j
        })
        .collect();
    let seeds = |n: u64, seed: u64| {
        let stream = || Ok(trace.iter().cloned().map(Ok).collect::<Vec<_>>());
        simulate_seeds(&cluster, stream, spread_settings(2_000, seed), n).unwrap()
    };
    let json = |r: &koord_queue_sim::report::Report| serde_json::to_string(r).unwrap();
    assert_eq!(json(&seeds(4, 3)), json(&seeds(4, 3)));
    assert_eq!(
        json(&seeds(1, 3)),
        json(&simulate(&cluster, &trace, spread_settings(2_000, 3)).unwrap())
    );
    let four = seeds(4, 3).fidelity.unwrap();
    assert_eq!((four.runs, four.jobs_compared), (4, 200));
    // The report itself is the first run's.
    assert_eq!(
        json(&{
            let mut r = seeds(4, 3);
            r.fidelity = None;
            r
        }),
        json(&{
            let mut r = seeds(1, 3);
            r.fidelity = None;
            r
        })
    );
    let mut moved = false;
    for class in &four.by_class {
        let [low, high] = class.simulated_range_s.unwrap();
        assert!(
            low <= class.simulated_mean_s && class.simulated_mean_s <= high,
            "{class:?}"
        );
        moved |= high > low;
    }
    assert!(moved, "{:?}", four.by_class);
}

/// `--admit-observed`: a job whose trace says when its unit was seen
/// arrives then (never before its submission); one without arrives the
/// admission latency after its submission, as without the flag.
#[test]
fn observed_admissions_are_replayed_where_the_trace_has_them() {
    use koord_queue_sim::trace::Observed;
    let cluster = two_quotas("4");
    let seen = |mut j: TraceJob, admitted: i64| {
        j.observed = Some(Observed {
            admitted_ms: Some(admitted),
            ..Observed::default()
        });
        j
    };
    let trace = [
        seen(job("late", "a", 1, 0, 1_000), 3_000),
        job("plain", "a", 1, 0, 1_000),
        // Seen "before" it was sent (clocks of two watchers): at submission.
        seen(job("early", "b", 1, 1_000, 1_000), 900),
    ];
    let settings = |admit_observed| Settings {
        latency: engine::Latency {
            admit_ms: 500,
            admit_observed,
            ..engine::Latency::default()
        },
        ..Settings::default()
    };
    let releases = |flag| -> Vec<Option<i64>> {
        run_with(&cluster, &trace, settings(flag))
            .iter()
            .map(|o| o.first_release_ms)
            .collect()
    };
    assert_eq!(releases(true), [Some(3_020), Some(520), Some(1_020)]);
    assert_eq!(releases(false), [Some(520), Some(520), Some(1_520)]);
}
