//! Forged reviews do nothing (docs/security.md): AdmissionReviews posted
//! straight to the webhook's port, as any pod could without the
//! NetworkPolicy and client authentication, against the real API server.
//! No QueueUnit appears for a job that does not exist, a job keeps its own
//! unit, a forged review never puts its content into a unit, and 10,000
//! forged reviews of random kinds leave memory, the backlog and the number
//! of metric series bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::{QueueUnit, keys};
use koord_queue_tests::https::Connection;
use koord_queue_tests::webhook::RunningWebhook;
use koord_queue_tests::{ControlPlane, e2e, fixtures, metrics, proc_stats, shared, webhook};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// Units a forged flood may park at most (the webhook's --unit-backlog).
const BACKLOG: usize = 200;

async fn setup() -> (&'static ControlPlane, &'static RunningWebhook) {
    static WEBHOOK: OnceCell<RunningWebhook> = OnceCell::const_new();
    let cp = shared::tier1().await.unwrap();
    let hook = WEBHOOK
        .get_or_init(|| async {
            let admin = cp.client().await.unwrap();
            e2e::create_quota_pair(&admin, "forge-org", "forge-q", "100")
                .await
                .unwrap();
            webhook::start_and_register_with(cp, |args| {
                args.unit_backlog = BACKLOG;
                args.job_wait = Duration::from_secs(2);
            })
            .await
            .unwrap()
        })
        .await;
    (cp, hook)
}

fn job(name: &str, cpu: &str) -> Value {
    json!({ "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: "forge-q" } },
            "spec": { "parallelism": 1, "template": { "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "c", "image": "busybox",
                    "resources": { "requests": { "cpu": cpu } } }] } } } })
}

/// A CREATE review of `object` in `namespace` with request uid `uid`, as
/// only the API server should send it.
fn forged_create(namespace: &str, uid: &str, object: Value) -> Value {
    let kind = object["kind"].as_str().unwrap_or("Job").to_string();
    json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": { "uid": uid,
                "kind": { "group": "batch", "version": "v1", "kind": kind },
                "resource": { "group": "batch", "version": "v1", "resource": "jobs" },
                "name": object["metadata"]["name"], "namespace": namespace,
                "operation": "CREATE",
                "userInfo": { "username": "system:serviceaccount:x:forger" },
                "object": object, "dryRun": false } })
}

fn connect(cp: &ControlPlane, hook: &RunningWebhook) -> Connection {
    Connection::open(hook.listen_addr, cp.pki().ca.cert_pem(), None).unwrap()
}

async fn units(cp: &ControlPlane, ns: &str) -> Vec<QueueUnit> {
    Api::<QueueUnit>::namespaced(cp.client().await.unwrap(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn a_forged_create_makes_no_unit_and_never_replaces_a_jobs_own() {
    let (cp, hook) = setup().await;
    let admin = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&admin, true).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns);
    let real: Job = serde_json::from_value(job("real", "1")).unwrap();
    let real = jobs.create(&PostParams::default(), &real).await.unwrap();
    let own = real.metadata.annotations.unwrap()[keys::QUEUE_UNIT_ANNOTATION].clone();
    fixtures::eventually(Duration::from_secs(10), || {
        let (cp, ns) = (cp, ns.clone());
        async move { Ok(units(cp, &ns).await.len() == 1) }
    })
    .await
    .unwrap();

    let mut conn = connect(cp, hook);
    // A job that does not exist, and the real job under another uid.
    for (name, uid) in [("ghost", "a1b2c3d4-0000"), ("real", "ffff0000-1111")] {
        let (status, body) = conn
            .post(
                "/mutate",
                forged_create(&ns, uid, job(name, "64"))
                    .to_string()
                    .as_bytes(),
            )
            .unwrap();
        assert_eq!(status, 200, "{body}");
    }
    // The real job's own unit is deleted; a forged review with the uid
    // fragment the job's annotation shows (the name race) re-creates it —
    // from the stored job, not from the forged content.
    Api::<QueueUnit>::namespaced(admin.clone(), &ns)
        .delete(&own, &Default::default())
        .await
        .unwrap();
    let fragment = own.rsplit('-').next().unwrap();
    let (status, _) = conn
        .post(
            "/mutate",
            forged_create(&ns, &format!("{fragment}-9999"), job("real", "64"))
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    assert_eq!(status, 200);
    // Longer than the webhook waits for a job to appear (--job-wait 2s).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let found = units(cp, &ns).await;
    let names: Vec<_> = found
        .iter()
        .filter_map(|u| u.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        std::slice::from_ref(&own),
        "only the real job's unit"
    );
    let unit = &found[0];
    assert_eq!(
        unit.spec.resource["cpu"].0, "1",
        "the stored job's size, not the forged 64"
    );
    let owner = &unit.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(Some(&owner.uid), real.metadata.uid.as_ref());
}

/// A review of random content: a known or made-up kind and operation.
fn random_review(i: usize, ns: &str) -> Value {
    let kinds = [
        ("batch", "Job"),
        ("kubeflow.org", "TFJob"),
        ("ray.io", "RayJob"),
        ("example.com", "Kind"),
        ("", "Pod"),
    ];
    let ops = ["CREATE", "UPDATE", "DELETE", "PATCH", "EXEC"];
    // A cheap deterministic spread of values.
    let x = i.wrapping_mul(2_654_435_761) % 1_000_003;
    let (group, kind) = kinds[x % kinds.len()];
    let made_up = format!("Kind{x}");
    let kind = if x.is_multiple_of(3) {
        made_up.as_str()
    } else {
        kind
    };
    let op = if x.is_multiple_of(7) {
        format!("OP{x}")
    } else {
        ops[x % ops.len()].to_string()
    };
    let mut object = job(&format!("flood-{i}"), "1");
    object["kind"] = json!(kind);
    json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": { "uid": format!("flood-{i}-{x}"),
                "kind": { "group": group, "version": "v1", "kind": kind },
                "resource": { "group": group, "version": "v1", "resource": "x" },
                "name": format!("flood-{i}"), "namespace": ns, "operation": op,
                "userInfo": { "username": "forger" },
                "object": object, "oldObject": if op == "UPDATE" { object.clone() } else { Value::Null },
                "dryRun": false } })
}

fn review_series(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("koord_queue_webhook_reviews_total{"))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn ten_thousand_forged_reviews_leave_memory_backlog_and_series_bounded() {
    let (cp, hook) = setup().await;
    let admin = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&admin, true).await.unwrap();
    let rss_before = proc_stats::status_kib("self", "VmRSS").unwrap() * 1024;
    let reviews: Vec<Vec<u8>> = (0..10_000)
        .map(|i| random_review(i, &ns).to_string().into_bytes())
        .collect();
    let mut conn = connect(cp, hook);
    let mut max_backlog = 0.0f64;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for (i, body) in reviews.iter().enumerate() {
        let (status, _) = conn.post("/mutate", body).unwrap();
        *statuses.entry(status).or_default() += 1;
        if i.is_multiple_of(500) {
            let text = metrics::scrape(hook.admin_addr).await.unwrap();
            max_backlog = max_backlog.max(metrics::sum_of(
                &text,
                "koord_queue_webhook_queue_unit_backlog",
            ));
        }
    }
    let rss_after = proc_stats::status_kib("self", "VmRSS").unwrap() * 1024;
    let text = metrics::scrape(hook.admin_addr).await.unwrap();
    let series = review_series(&text);
    // Kinds: the 8 job kinds, Scale, other; 5 operation values; 4 verdicts.
    assert!(
        series.len() <= 10 * 5 * 4,
        "{} series: {series:?}",
        series.len()
    );
    assert!(
        series
            .iter()
            .all(|s| !s.contains("Kind") || s.contains("kind=\"other\"")),
        "made-up kinds became label values: {series:?}"
    );
    assert!(series.iter().all(|s| !s.contains("OP")), "{series:?}");
    assert!(max_backlog <= BACKLOG as f64, "backlog {max_backlog}");
    let grown = rss_after.saturating_sub(rss_before);
    // The figures, for the record (docs/security.md).
    println!(
        "forged flood: 10,000 reviews, statuses {statuses:?}, {} review series, backlog at most {max_backlog}, process RSS {} → {} MiB",
        series.len(),
        rss_before >> 20,
        rss_after >> 20
    );
    assert!(grown < 64 << 20, "the process grew by {} MiB", grown >> 20);
    // None of the flood's jobs exist: no unit appears for them.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(units(cp, &ns).await.is_empty());
    assert!(
        statuses.keys().all(|s| [200, 400, 429].contains(s)),
        "{statuses:?}"
    );
}
