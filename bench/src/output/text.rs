//! The benchmark's printed report, read from the result's JSON.

use std::fmt::Write as _;

use serde_json::Value;

use crate::phase::{PhaseKind, PhaseResult};
use crate::shape::Shape;

/// The printed report.
pub fn text(shape: &Shape, json: &Value, results: &[PhaseResult]) -> String {
    let mut out = String::new();
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |v| format!("{v:.2}"));
    let _ = writeln!(
        out,
        "\n=== koord-queue end-to-end benchmark: {} jobs, {} leaf quotas in {} parents, root {} CPU ===",
        shape.jobs.len(),
        shape.leaves.len(),
        shape.parents.len(),
        shape.root_cpu
    );
    for r in results {
        let p = &json["phases"][r.kind.name()];
        let _ = writeln!(
            out,
            "\n[{}] wall {} s, {} jobs/s (jobs created over {} s), load at start {:?}",
            r.kind.name(),
            f(&p["wall_seconds"]),
            f(&p["throughput_jobs_per_s"]),
            f(&p["creation_seconds"]),
            r.load_before.unwrap_or_default()
        );
        if r.kind == PhaseKind::Run {
            let _ = writeln!(
                out,
                "  time from create to release (s):   mean      p50      p95      p99      max   (first release mean)"
            );
            for class in shape.classes {
                let d = &p["time_to_release"][class.name];
                let _ = writeln!(
                    out,
                    "    {:<8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}   ({})",
                    class.name,
                    d["count"],
                    f(&d["mean_s"]),
                    f(&d["p50_s"]),
                    f(&d["p95_s"]),
                    f(&d["p99_s"]),
                    f(&d["max_s"]),
                    f(&d["first_release_mean_s"])
                );
            }
            if let Some(by_class) = p["estimate_accuracy"]["by_class"].as_array() {
                let cost = &p["estimate_accuracy"]["reading_cost"];
                let _ = writeln!(
                    out,
                    "  start-time estimates read {} times (every {} s, {} pages; a reading p50 {} s, max {} s, {} failed):",
                    cost["readings"],
                    f(&cost["interval_s"]),
                    cost["requests"],
                    f(&cost["reading"]["p50_s"]),
                    f(&cost["reading"]["max_s"]),
                    cost["failed"]
                );
                for c in by_class {
                    let _ = writeln!(
                        out,
                        "    {:<8} {} of {} released estimated >= 10 s before; median |error| / wait {} (p90 {}), median |error| {} s, signed {} s",
                        c["class"].as_str().unwrap_or_default(),
                        c["estimated_early"],
                        c["released"],
                        f(&c["median_relative_error"]),
                        f(&c["p90_relative_error"]),
                        f(&c["median_absolute_error_s"]),
                        f(&c["median_signed_error_s"])
                    );
                }
            }
            let _ = writeln!(
                out,
                "  CPU usage (time-averaged, % of the leaves' min): held per QueueUnits {} %, used by running jobs {} %; peak held at root {} CPU",
                f(&p["cpu_usage_percent_of_min"]),
                f(&p["cpu_usage_percent_of_min_running_jobs"]),
                f(&p["peak_root_cpu"])
            );
            let per: Vec<f64> = p["per_quota"]
                .as_object()
                .map(|m| {
                    m.values()
                        .filter_map(|v| v["usage_percent_of_min"].as_f64())
                        .collect()
                })
                .unwrap_or_default();
            if !per.is_empty() {
                let min = per.iter().copied().fold(f64::INFINITY, f64::min);
                let max = per.iter().copied().fold(0.0, f64::max);
                let _ = writeln!(
                    out,
                    "  per-leaf usage: min {min:.1} %, max {max:.1} % (each leaf's share in the JSON)"
                );
            }
            let v = &p["quota_violations_by_check"];
            // Kueue's Workloads are not counted for preemptions.
            let preemptions = match &p["preemptions"] {
                Value::Null => String::new(),
                pr => format!(
                    "; preemptions {}, at most {} of one unit",
                    pr["total"], pr["most_of_one_unit"]
                ),
            };
            let _ = writeln!(
                out,
                "  quota violations: {} (running-job check {}, not counting the {} moments jobs whose completion was written still counted; QueueUnit check {}, not counting the {} moments the record still showed CPU of already finished jobs)   units sent back: {} (finished jobs suspended: {}{preemptions})",
                p["quota_violations"],
                v["running_jobs"],
                v["running_jobs_recorded"],
                v["queue_units"],
                v["queue_units_recorded"],
                p["reclaims"]["units_entered_timeout_backoff"],
                p["reclaims"]["finished_jobs_suspended"]
            );
            let idle = &p["idle_while_waiting"];
            for (by, what) in [("by_running_jobs", "ran"), ("by_held_quota", "held")] {
                let i = &idle[by];
                if i.is_null() {
                    continue;
                }
                let room = &idle["with_room_in_its_quotas"][by];
                let _ = writeln!(
                    out,
                    "  root {what} under half its capacity while a job waited over {} s: {} s in {} whole seconds (small {}, medium {}, large {} whole seconds); with room in the job's own quotas {} s in {} whole seconds",
                    idle["grace_s"],
                    f(&i["any_class"]["seconds"]),
                    i["any_class"]["whole_seconds"],
                    i["small"]["whole_seconds"],
                    i["medium"]["whole_seconds"],
                    i["large"]["whole_seconds"],
                    f(&room["any_class"]["seconds"]),
                    room["any_class"]["whole_seconds"],
                );
            }
            let pp = &p["pending_period"];
            let _ = writeln!(
                out,
                "  releases while jobs were pending: {} in {} s = {} /s",
                pp["releases"],
                f(&pp["pending_seconds"]),
                f(&pp["releases_per_s"])
            );
        }
        let res = &p["resources"];
        let _ = writeln!(
            out,
            "  CPU seconds: scheduler {}  webhook {}  runner {}  (process {}, peak RSS {} MiB)   kube-apiserver {}  etcd {}",
            f(&res["scheduler_cpu_seconds"]),
            f(&res["webhook_cpu_seconds"]),
            f(&res["runner_cpu_seconds"]),
            f(&res["process_cpu_seconds"]),
            f(&res["process_peak_rss_mib"]),
            f(&res["kube_apiserver_cpu_seconds"]),
            f(&res["etcd_cpu_seconds"])
        );
        let api = &p["api_requests"];
        let _ = writeln!(
            out,
            "  API requests: apiserver {} ({} per job); by client {}",
            api["apiserver_total"],
            f(&api["apiserver_per_job"]),
            api["by_client_total"]
        );
    }
    let _ = writeln!(out, "\n=== summary ===");
    let kueue = &json["kueue_reference"];
    let _ = writeln!(
        out,
        "  wall {} s, throughput {} jobs/s (Kueue: {} s, {} jobs/s)",
        f(&json["wall_seconds"]),
        f(&json["throughput_jobs_per_s"]),
        f(&kueue["wall_seconds"]),
        f(&kueue["throughput_jobs_per_s"])
    );
    let kueue_means = &kueue["mean_time_to_admission_s"];
    let _ = writeln!(
        out,
        "  mean time to release: small {} s, medium {} s, large {} s (Kueue: {} / {} / {} s)",
        f(&json["time_to_release"]["small"]["mean_s"]),
        f(&json["time_to_release"]["medium"]["mean_s"]),
        f(&json["time_to_release"]["large"]["mean_s"]),
        f(&kueue_means["small"]),
        f(&kueue_means["medium"]),
        f(&kueue_means["large"])
    );
    let _ = writeln!(
        out,
        "  floor: saturated {} jobs/s vs null scheduler {} jobs/s: ratio {} (target >= 0.90)",
        f(&json["saturated_throughput_jobs_per_s"]),
        f(&json["floor_throughput_jobs_per_s"]),
        f(&json["floor_ratio"])
    );
    if let Some(rounds) = json["rounds"].as_array().filter(|r| r.len() > 1) {
        let each: Vec<String> = rounds
            .iter()
            .map(|r| {
                format!(
                    "{}/{} = {}",
                    f(&r["saturated_jobs_per_s"]),
                    f(&r["floor_jobs_per_s"]),
                    f(&r["floor_ratio"])
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "  rounds (saturated/floor jobs/s = ratio): {}; reported: round {} (the median ratio)",
            each.join(", "),
            json["reported_round"]
        );
    }
    let _ = writeln!(out, "  quota violations: {}", json["quota_violations"]);
    out
}
