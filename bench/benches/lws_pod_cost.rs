//! What queueing a LeaderWorkerSet's groups costs the API server (issue 20):
//! the same pods — `--replicas` groups of `--size` pods, labelled as the LWS
//! controller labels them — created once in a namespace Koord-Queue does not
//! queue and once in one it does, in the same run, against etcd +
//! kube-apiserver with the webhook and the scheduler in this process.
//! Reported: the API server's requests per pod and per group in both (its
//! own `apiserver_request_total`, by verb and resource, so every caller
//! counts), what the queued path adds, and the pod create latency of both.
//! No kube-scheduler runs: released pods stay unplaced, which leaves out
//! only binding, the same in both.
//!
//!   cargo bench -p koord-queue-bench --bench lws_pod_cost -- [--replicas N] [--size N] [--out /absolute/file.json]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::jobs::pod::SCHEDULING_GATE;
use koord_queue_api::jobs::pod_group::*;
use koord_queue_api::keys;
use koord_queue_bench::api_stats::ServerRequests;
use koord_queue_tests::{ControlPlane, Tier, e2e, fixtures, job_crds, scheduler, webhook};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn out_path() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn template(cpu: &str) -> Value {
    json!({ "spec": { "containers": [{ "name": "main", "image": "vllm",
        "resources": { "requests": { "cpu": cpu, "memory": "1Gi" } } }] } })
}

/// Pod `worker` of replica `group` of LWS `llama`, as its controller makes it.
fn lws_pod(group: usize, worker: usize, size: usize) -> Pod {
    let name = if worker == 0 {
        format!("llama-{group}")
    } else {
        format!("llama-{group}-{worker}")
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name,
            "labels": { keys::QUOTA_NAME_LABEL: "team-a", LWS_NAME_LABEL: "llama",
                LWS_GROUP_INDEX_LABEL: group.to_string(), LWS_WORKER_INDEX_LABEL: worker.to_string() },
            "annotations": { LWS_SIZE_ANNOTATION: size.to_string() } },
        "spec": template("1")["spec"].clone(),
    }))
    .unwrap()
}

async fn create_lws(admin: &kube::Client, ns: &str, replicas: usize, size: usize) {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        "leaderworkersets",
    );
    let lws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": { "name": "llama", "namespace": ns },
        "spec": { "replicas": replicas, "leaderWorkerTemplate": {
            "size": size, "workerTemplate": template("1") } }
    }))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &resource)
        .create(&PostParams::default(), &lws)
        .await
        .unwrap();
}

fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE))
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Creates every pod in `ns` one after the other: the latencies.
async fn create_all(pods: &Api<Pod>, replicas: usize, size: usize) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(replicas * size);
    for group in 0..replicas {
        for worker in 0..size {
            let started = Instant::now();
            pods.create(&PostParams::default(), &lws_pod(group, worker, size))
                .await
                .unwrap();
            latencies.push(started.elapsed());
        }
    }
    latencies
}

/// The requests of a window, less `own_lists` LISTs of pods the benchmark
/// made itself to see the window's end.
fn window(
    before: &ServerRequests,
    after: &ServerRequests,
    own_lists: f64,
) -> BTreeMap<String, f64> {
    let mut by: BTreeMap<String, f64> = after
        .since(before)
        .by_kind
        .into_iter()
        .filter(|(_, n)| *n > 0.0)
        .map(|((verb, resource), n)| (format!("{verb} {resource}"), n))
        .collect();
    if let Some(n) = by.get_mut("list pods") {
        *n -= own_lists;
    }
    by.retain(|_, n| *n > 0.0);
    by
}

#[tokio::main]
async fn main() {
    let replicas = arg("--replicas", 20);
    let size = arg("--size", 4);
    let pods_n = (replicas * size) as f64;
    let cp = ControlPlane::start(Tier::One).await.unwrap();
    let admin = cp.client().await.unwrap();
    let crds =
        job_crds::upstream_crds(&["leaderworkerset.x-k8s.io_leaderworkersets.yaml"]).unwrap();
    fixtures::apply_crds(&admin, &crds).await.unwrap();
    fixtures::apply_koord_queue_crds(&admin).await.unwrap();
    fixtures::ensure_namespace(&admin, keys::SYSTEM_NAMESPACE)
        .await
        .unwrap();
    e2e::create_quota(&admin, "team-a", None, false, "100000", "100000", None)
        .await
        .unwrap();
    webhook::start_and_register(&cp).await.unwrap();
    let _scheduler = scheduler::start_leader(&cp, scheduler::test_args("lws-cost"))
        .await
        .unwrap();
    let plain_ns = fixtures::create_namespace(&admin, false).await.unwrap();
    let queued_ns = fixtures::create_namespace(&admin, true).await.unwrap();
    for ns in [&plain_ns, &queued_ns] {
        // No controller manager here to make it.
        let account: k8s_openapi::api::core::v1::ServiceAccount =
            serde_json::from_value(json!({ "metadata": { "name": "default" } })).unwrap();
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &account)
            .await
            .unwrap();
        create_lws(&admin, ns, replicas, size).await;
    }

    // Without Koord-Queue: the pods' creates alone.
    let plain: Api<Pod> = Api::namespaced(admin.clone(), &plain_ns);
    let before = ServerRequests::scrape(&admin).await.unwrap();
    let mut plain_latency = create_all(&plain, replicas, size).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = ServerRequests::scrape(&admin).await.unwrap();
    let base = window(&before, &after, 0.0);

    // Queued: held, a unit per group, released whole (quota is ample).
    let queued: Api<Pod> = Api::namespaced(admin.clone(), &queued_ns);
    let before = ServerRequests::scrape(&admin).await.unwrap();
    let started = Instant::now();
    let mut queued_latency = create_all(&queued, replicas, size).await;
    let mut own_lists = 0.0;
    loop {
        own_lists += 1.0;
        let listed = queued.list(&ListParams::default()).await.unwrap();
        let released = listed.items.iter().filter(|p| !gated(p)).count();
        if released == replicas * size {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{released} of {pods_n} released"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let released_after = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = ServerRequests::scrape(&admin).await.unwrap();
    let with = window(&before, &after, own_lists);

    let total = |w: &BTreeMap<String, f64>| w.values().sum::<f64>();
    let extra: BTreeMap<String, f64> = with
        .iter()
        .map(|(k, n)| (k.clone(), n - base.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, n)| n.abs() > 0.0)
        .collect();
    let (p, q) = (median(&mut plain_latency), median(&mut queued_latency));
    let result = json!({
        "replicas": replicas, "size": size, "pods": replicas * size,
        "requests_per_pod": { "unqueued": total(&base) / pods_n, "queued": total(&with) / pods_n },
        "extra_requests_per_group": total(&extra) / replicas as f64,
        "extra_requests_per_pod": total(&extra) / pods_n,
        "extra_by_request": extra,
        "unqueued_by_request": base,
        "pod_create_p50_ms": { "unqueued": p.as_secs_f64() * 1e3, "queued": q.as_secs_f64() * 1e3 },
        "pod_create_p50_ratio": q.as_secs_f64() / p.as_secs_f64(),
        "all_released_after_s": released_after.as_secs_f64(),
    });
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
    if let Some(path) = out_path() {
        std::fs::write(&path, serde_json::to_string_pretty(&result).unwrap() + "\n").unwrap();
    }
    cp.stop().await;
}
