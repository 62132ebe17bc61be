//! The visibility API through the real aggregation layer (issue 39): the
//! control plane's kube-apiserver authenticates each user and proxies to the
//! scheduler, which authorizes each request with a SubjectAccessReview. A
//! tenant (a ServiceAccount token bound to the built-in `view` role, which
//! the chart's aggregated ClusterRole extends) sees its namespace's waiting
//! units in serving order and nothing else; an administrator sees a Queue's
//! backlog; paging, discovery and `kubectl get` work; the answers follow
//! releases and completions. A standby and a leader change:
//! `visibility_failover.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::rbac::v1::RoleBinding;
use koord_queue_api::queue_unit::QueueUnitPhase::{Enqueued, Running, Succeed};
use koord_queue_tests::e2e::{self, job_yaml, kubectl_create_job, wait_phase};
use koord_queue_tests::visibility::{self, get, names, namespace_path, queue_path};
use koord_queue_tests::{ControlPlane, fixtures};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(60);

async fn setup() -> &'static ControlPlane {
    visibility::shared_serving("visibility-scheduler")
        .await
        .unwrap()
}

/// Binds the tenant of `namespace` to the built-in `view` ClusterRole there,
/// as a platform team's namespace setup does.
async fn bind_view(cp: &ControlPlane, namespace: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "tenant-view" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "kind": "ServiceAccount", "name": koord_queue_tests::tenant::TENANT,
                       "namespace": namespace }],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(cp.client().await.unwrap(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// The unit names of jobs `jobs` of `namespace`, in that order.
async fn units_of(client: &kube::Client, namespace: &str, jobs: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for job in jobs {
        let unit = e2e::unit_of_job(client, namespace, job).await.unwrap();
        out.push(unit.expect("a unit").metadata.name.unwrap());
    }
    out
}

/// A tenant's namespace with a 1-CPU quota and four 1-CPU jobs created one
/// after the other: the first runs for `first_runs`, the others wait.
async fn four_jobs(
    cp: &ControlPlane,
    first_runs: &str,
) -> (String, String, kube::Client, Vec<String>) {
    let (quota, ns, tenant) = e2e::tenant_with_quota(cp, "vis", "1").await.unwrap();
    bind_view(cp, &ns).await;
    let admin = cp.client().await.unwrap();
    let jobs = ["j1", "j2", "j3", "j4"];
    for job in jobs {
        let run_for = if job == "j1" { first_runs } else { "1h" };
        kubectl_create_job(cp, &ns, &job_yaml(job, &quota, "1", run_for))
            .await
            .unwrap();
        // Distinct creation seconds: the serving order is the creation order.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    for job in &jobs[1..] {
        wait_phase(&admin, &ns, job, &[Enqueued], LONG)
            .await
            .unwrap();
    }
    let units = units_of(&admin, &ns, &jobs).await;
    (quota, ns, tenant, units)
}

#[tokio::test]
async fn a_tenant_sees_its_namespace_in_serving_order_and_nothing_else() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant, units) = four_jobs(cp, "8s").await;

    // The tenant's namespace: the three waiting units, by position, with why.
    let (code, list) = get(&tenant, &namespace_path(&ns)).await.unwrap();
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "PendingUnitList");
    assert_eq!(names(&list), units[1..]);
    let positions: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["position"])
        .collect();
    assert_eq!(positions, [&json!(1), &json!(2), &json!(3)]);
    let reason = &list["items"][0]["reason"];
    assert_eq!(reason["type"], "QuotaExceeded", "{reason}");
    assert_eq!(reason["quota"], json!(quota));
    assert_eq!(reason["resource"], "cpu");
    assert_eq!(reason["shortBy"], "1");
    assert_eq!(list["items"][0]["job"]["kind"], "Job");
    assert_eq!(list["items"][0]["requests"]["cpu"], "1");

    // Paging, as client-go pages: limit, then continue.
    let (_, first) = get(&tenant, &format!("{}?limit=2", namespace_path(&ns)))
        .await
        .unwrap();
    assert_eq!(names(&first), units[1..3]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let next = first["metadata"]["continue"].as_str().unwrap().to_string();
    let (_, rest) = get(
        &tenant,
        &format!("{}?limit=2&continue={next}", namespace_path(&ns)),
    )
    .await
    .unwrap();
    assert_eq!(names(&rest), units[3..]);

    // Another namespace, a Queue's backlog: refused, the permission named.
    let (other_quota, other, _) = e2e::tenant_with_quota(cp, "vis-other", "1").await.unwrap();
    let (code, refusal) = get(&tenant, &namespace_path(&other)).await.unwrap();
    assert_eq!(code, 403, "{refusal}");
    assert!(refusal.to_string().contains("pendingunits"), "{refusal}");
    let (code, _) = get(&tenant, &queue_path(&quota)).await.unwrap();
    assert_eq!(code, 403);
    let _ = other_quota;

    // The administrator: the Queue's backlog in the same order.
    let (code, backlog) = get(&admin, &queue_path(&quota)).await.unwrap();
    assert_eq!(code, 200, "{backlog}");
    assert_eq!(names(&backlog), units[1..]);
    let (code, _) = get(&admin, &queue_path("no-such-queue")).await.unwrap();
    assert_eq!(code, 404);

    // The quota serving the namespace, its usage as the scheduler counts it.
    let (code, quotas) = get(
        &tenant,
        &format!("/apis/visibility.koord-queue.io/v1alpha1/namespaces/{ns}/quotausages"),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{quotas}");
    let mine = quotas["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["metadata"]["name"] == json!(quota))
        .expect("the namespace's quota");
    assert_eq!(mine["used"]["cpu"], "1", "{mine}");
    assert_eq!(mine["pending"], 3);

    // The first job ends: the next is released, the others move up.
    wait_phase(&admin, &ns, "j2", &[Running], LONG)
        .await
        .unwrap();
    fixtures::eventually(LONG, || {
        let tenant = tenant.clone();
        let path = namespace_path(&ns);
        let expected = units[2..].to_vec();
        async move {
            let (_, list) = get(&tenant, &path).await?;
            Ok(names(&list) == expected && list["items"][0]["position"] == json!(1))
        }
    })
    .await
    .expect("the answers follow the release");
}

#[tokio::test]
async fn discovery_and_kubectl_get_work_through_the_aggregation_layer() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let (code, resources) = get(&admin, "/apis/visibility.koord-queue.io/v1alpha1")
        .await
        .unwrap();
    assert_eq!(code, 200, "{resources}");
    let listed: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        listed,
        [
            "pendingunits",
            "queues/pendingunits",
            "quotausages",
            "histories"
        ]
    );

    let (_, ns, _, units) = four_jobs(cp, "1h").await;
    // kubectl finds the resource by discovery and prints the server's table.
    let table = cp
        .kubectl(&["get", "pendingunits", "-n", &ns])
        .await
        .unwrap();
    assert!(
        table.contains("POSITION") && table.contains("REASON"),
        "{table}"
    );
    for unit in &units[1..] {
        assert!(table.contains(unit.as_str()), "{table}");
    }
    assert!(table.contains("QuotaExceeded"), "{table}");
    let wide = cp
        .kubectl(&["get", "pendingunits", "-A", "-o", "wide"])
        .await
        .unwrap();
    assert!(wide.contains(&ns), "{wide}");
}

#[tokio::test]
async fn a_long_listing_crosses_the_aggregation_layer_gzipped() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, _) = e2e::tenant_with_quota(cp, "vis-gz", "1").await.unwrap();
    // Sixty waiting jobs: their listing is far above the size the API
    // starts to gzip at. One `kubectl create` of them all; their order is
    // not what this test is about.
    const JOBS: usize = 60;
    let yaml: Vec<String> = (0..JOBS)
        .map(|i| job_yaml(&format!("j{i:02}"), &quota, "2", "1h"))
        .collect();
    kubectl_create_job(cp, &ns, &yaml.join("---\n"))
        .await
        .unwrap();
    let path = namespace_path(&ns);
    fixtures::eventually(LONG, || {
        let (admin, path) = (admin.clone(), path.clone());
        async move {
            let (code, list) = get(&admin, &path).await?;
            Ok(code == 200 && names(&list).len() == JOBS)
        }
    })
    .await
    .expect("every unit listed");
    let (_, plain) = get(&admin, &path).await.unwrap();

    // Asked as kubectl asks (Accept-Encoding: gzip): the scheduler's gzip
    // passes through kube-apiserver's proxy to the client untouched.
    let wire = visibility::get_accepting_gzip(&admin, &path).await.unwrap();
    assert_eq!(wire.status, 200, "{}", String::from_utf8_lossy(&wire.body));
    assert_eq!(wire.encoding.as_deref(), Some("gzip"));
    assert!(
        wire.wire_bytes * 4 < wire.body.len(),
        "{} bytes on the wire for {}",
        wire.wire_bytes,
        wire.body.len()
    );
    let gunzipped: Value = serde_json::from_slice(&wire.body).unwrap();
    let mut listed = names(&gunzipped);
    let mut expected = names(&plain);
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
}

/// The RFC 3339 time `field` of item `unit` of `list`, in ms since the epoch.
fn time_of(list: &Value, unit: &str, field: &str) -> Option<i64> {
    let item = list["items"]
        .as_array()?
        .iter()
        .find(|i| i["metadata"]["name"] == json!(unit))?;
    let at: k8s_openapi::jiff::Timestamp = item[field].as_str()?.parse().ok()?;
    Some(at.as_millisecond())
}

/// Issue 40: the scheduler tells each waiting job when it starts. A job of
/// one-CPU quota ends after a few seconds (its queue learns that runtime);
/// the next is bounded to 600 s (`activeDeadlineSeconds`) and runs; the two
/// behind it start at its bound plus its pods' grace period, then after the
/// learned runtime — as the tenant reads it through the visibility API.
#[tokio::test]
async fn a_waiting_job_is_told_when_it_starts_from_the_bound_ahead_and_the_runtime_learned() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant) = e2e::tenant_with_quota(cp, "est", "1").await.unwrap();
    bind_view(cp, &ns).await;
    kubectl_create_job(cp, &ns, &job_yaml("quick", &quota, "1", "2s"))
        .await
        .unwrap();
    wait_phase(&admin, &ns, "quick", &[Succeed], LONG)
        .await
        .unwrap();
    let bounded = e2e::with_deadline(&job_yaml("bounded", &quota, "1", "1h"), 600);
    kubectl_create_job(cp, &ns, &bounded).await.unwrap();
    wait_phase(&admin, &ns, "bounded", &[Running], LONG)
        .await
        .unwrap();
    for job in ["next", "last"] {
        kubectl_create_job(cp, &ns, &job_yaml(job, &quota, "1", "1h"))
            .await
            .unwrap();
        // Distinct creation seconds: the serving order is the creation order.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let units = units_of(&admin, &ns, &["bounded", "next", "last"]).await;
    let released = e2e::unit_of_job(&admin, &ns, "bounded")
        .await
        .unwrap()
        .and_then(|u| u.status?.last_allocate_time)
        .expect("the bounded job's release time")
        .0
        .as_millisecond();
    // 600 s and the default grace period of 30 s, from the release (the
    // status keeps whole seconds).
    let bound_end = released + 630_000;
    let path = namespace_path(&ns);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let told = fixtures::eventually(LONG, || {
        let (tenant, path, units) = (tenant.clone(), path.clone(), units.clone());
        let seen = seen.clone();
        async move {
            let (code, list) = get(&tenant, &path).await?;
            let next = time_of(&list, &units[1], "estimatedStart");
            let last = time_of(&list, &units[2], "estimatedStart");
            *seen.lock().unwrap() = list;
            Ok(code == 200
                && next.is_some_and(|n| (n - bound_end).abs() <= 2_000)
                && last.zip(next).is_some_and(|(l, n)| l > n && l - n < 60_000))
        }
    })
    .await;
    assert!(
        told.is_ok(),
        "the estimates: the next at the bound's end ({bound_end} ms), the last a learned runtime \
         after it: {:#}",
        seen.lock().unwrap()
    );
}
