//! Job create latency through the real API server with the webhook in the
//! path versus without it, measured in the same run (architecture §9 target:
//! ≤ 1.5×), and a burst of concurrent creates that must all be admitted.
//!
//!   cargo bench -p koord-queue-bench --bench job_create_latency -- [--jobs N] [--burst N] [--pause-ms N]
//!
//! The sequential series pause `--pause-ms` (default 20) between creates so
//! that each create meets an API server that has finished the previous one's
//! work, including the webhook's QueueUnit create made right after its
//! answer: that is the latency one user's `kubectl create` sees. With
//! `--pause-ms 0` the loop saturates the API server and measures throughput
//! as much as latency.
//!
//! Jobs are created by an ordinary user (RBAC-bound, subject to API Priority
//! and Fairness), not the cluster admin.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::{ElasticQuota, keys};
use koord_queue_tests::{ControlPlane, Tier, fixtures, webhook};
use kube::api::{Api, PostParams};
use serde_json::json;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: "team-a" } },
        "spec": { "template": { "spec": { "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox",
                "resources": { "requests": { "cpu": "1", "memory": "1Gi" } } }] } } },
    }))
    .unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn summary(name: &str, samples: &mut [Duration]) -> Duration {
    samples.sort();
    let p50 = percentile(samples, 0.5);
    println!(
        "  {name:<16} n={:<5} p50={:>8.2?} p90={:>8.2?} p99={:>8.2?}",
        samples.len(),
        p50,
        percentile(samples, 0.9),
        percentile(samples, 0.99)
    );
    p50
}

async fn grant_job_creation(admin: &kube::Client, user: &str) {
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "bench-user-edit" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-jobs" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    }))
    .unwrap();
    let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "bench-jobs" },
        "rules": [{ "apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list"] }],
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

#[tokio::main]
async fn main() {
    let jobs = arg("--jobs", 400);
    let burst = arg("--burst", 1000);
    let pause = Duration::from_millis(arg("--pause-ms", 20) as u64);
    let cp = ControlPlane::start(Tier::One).await.unwrap();
    let admin = cp.client().await.unwrap();
    fixtures::apply_koord_queue_crds(&admin).await.unwrap();
    fixtures::ensure_namespace(&admin, keys::SYSTEM_NAMESPACE)
        .await
        .unwrap();
    let quota: ElasticQuota = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": { "name": "team-a", "namespace": keys::SYSTEM_NAMESPACE },
        "spec": { "max": { "cpu": "100000" } },
    }))
    .unwrap();
    Api::<ElasticQuota>::namespaced(admin.clone(), keys::SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    webhook::start_and_register(&cp).await.unwrap();
    grant_job_creation(&admin, "bench-user").await;
    let user = cp.client_as("bench-user", &[]).await.unwrap();

    let queued_ns = fixtures::create_namespace(&admin, true).await.unwrap();
    let plain_ns = fixtures::create_namespace(&admin, false).await.unwrap();
    let queued: Api<Job> = Api::namespaced(user.clone(), &queued_ns);
    let plain: Api<Job> = Api::namespaced(user.clone(), &plain_ns);

    // Warm up connections and caches, then alternate so both series see the
    // same API server state.
    for i in 0..50 {
        plain
            .create(&PostParams::default(), &job(&format!("warm-{i}")))
            .await
            .unwrap();
        queued
            .create(&PostParams::default(), &job(&format!("warm-{i}")))
            .await
            .unwrap();
    }
    let (mut with, mut without) = (Vec::with_capacity(jobs), Vec::with_capacity(jobs));
    let mut unit_alone = Vec::with_capacity(jobs);
    let units: Api<koord_queue_api::QueueUnit> = Api::namespaced(admin.clone(), &plain_ns);
    for i in 0..jobs {
        // What the webhook's nested call costs on its own.
        let unit = koord_queue_api::QueueUnit::new(
            &format!("unit-{i}"),
            koord_queue_api::queue_unit::QueueUnitSpec {
                queue: "team-a".into(),
                ..Default::default()
            },
        );
        let started = Instant::now();
        units.create(&PostParams::default(), &unit).await.unwrap();
        unit_alone.push(started.elapsed());
        tokio::time::sleep(pause).await;
        let started = Instant::now();
        plain
            .create(&PostParams::default(), &job(&format!("job-{i}")))
            .await
            .unwrap();
        without.push(started.elapsed());
        tokio::time::sleep(pause).await;
        let started = Instant::now();
        let created = queued
            .create(&PostParams::default(), &job(&format!("job-{i}")))
            .await
            .unwrap();
        with.push(started.elapsed());
        assert_eq!(created.spec.unwrap().suspend, Some(true));
        tokio::time::sleep(pause).await;
    }
    println!(
        "job create latency through kube-apiserver v1.35.4 ({jobs} sequential creates each, {pause:?} apart, same run)"
    );
    let base = summary("without webhook", &mut without);
    let hooked = summary("with webhook", &mut with);
    summary("QueueUnit alone", &mut unit_alone);
    println!(
        "  ratio of medians: {:.2}x (target <= 1.5x)",
        hooked.as_secs_f64() / base.as_secs_f64()
    );

    // Burst: `burst` creates at once, every one must be admitted and held.
    let burst_ns = fixtures::create_namespace(&admin, true).await.unwrap();
    let api: Api<Job> = Api::namespaced(user, &burst_ns);
    let started = Instant::now();
    let results = futures::future::join_all((0..burst).map(|i| {
        let api = api.clone();
        async move {
            let t = Instant::now();
            let r = api
                .create(&PostParams::default(), &job(&format!("burst-{i}")))
                .await;
            (
                r.map(|j| j.spec.and_then(|s| s.suspend) == Some(true)),
                t.elapsed(),
            )
        }
    }))
    .await;
    let wall = started.elapsed();
    let mut latencies: Vec<Duration> = results.iter().map(|(_, d)| *d).collect();
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(r, _)| match r {
            Ok(true) => None,
            Ok(false) => Some("admitted without hold".to_string()),
            Err(e) => Some(e.to_string()),
        })
        .collect();
    println!(
        "burst of {burst} concurrent creates: wall {wall:.2?}, {} failed",
        failures.len()
    );
    summary("burst create", &mut latencies);
    for f in failures.iter().take(5) {
        println!("    failure: {f}");
    }
    assert!(
        failures.is_empty(),
        "every job of the burst must be admitted and held"
    );
}
