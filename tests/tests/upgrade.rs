//! `helm upgrade` from the previous chart (`tests/fixtures/chart-cbdbf84`,
//! the chart on `main` before the first release) to this one, with jobs
//! finished, running and waiting (tier 2, kwok nodes): no job is released
//! early, none is lost, units and quotas are unchanged, the CRDs are the new
//! chart's. Then `helm uninstall` leaves a queued job held, as NOTES.txt says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use koord_queue_api::queue_unit::QueueUnitPhase::{self, *};
use koord_queue_api::{ElasticQuota, QueueUnit, keys};
use koord_queue_tests::e2e::{self, UsageMonitor, job_yaml, kubectl_create_job, wait_phase};
use koord_queue_tests::install::{self, ComponentSetup, Components, LocalInstall, chart_dir};
use koord_queue_tests::{ControlPlane, Nodes, Tier, fixtures, process};
use kube::api::{Api, ListParams};
use kube::runtime::wait::{await_condition, conditions};

const NS: &str = keys::SYSTEM_NAMESPACE;
const QUOTA: &str = "upgrade";
const LONG: Duration = Duration::from_secs(90);
const TOKEN_TTL: Duration = Duration::from_secs(3600);

/// The chart of the previous release, kept byte for byte.
fn previous_chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/chart-cbdbf84")
}

async fn crds_established(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in koord_queue_api::crd::all() {
        let name = crd.metadata.name.unwrap();
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not established"))
        .unwrap();
    }
}

/// name → (uid, phase, admissions) of every unit of `namespace`.
async fn units(
    client: &kube::Client,
    namespace: &str,
) -> BTreeMap<String, (String, Option<QueueUnitPhase>, String)> {
    Api::<QueueUnit>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|u| {
            let status = u.status.clone().unwrap_or_default();
            (
                u.metadata.name.clone().unwrap(),
                (
                    u.metadata.uid.clone().unwrap(),
                    status.phase,
                    serde_json::to_string(&status.admissions).unwrap(),
                ),
            )
        })
        .collect()
}

async fn quota_spec(client: &kube::Client, namespace: &str) -> serde_json::Value {
    let quota = Api::<ElasticQuota>::namespaced(client.clone(), namespace)
        .get(QUOTA)
        .await
        .unwrap();
    serde_json::to_value(&quota.spec).unwrap()
}

async fn pods_of(client: &kube::Client, namespace: &str, job: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
        .len()
}

async fn suspended(client: &kube::Client, ns: &str, job: &str) -> bool {
    e2e::job_suspended(client, ns, job).await.unwrap()
}

async fn start_components(
    cp: &ControlPlane,
    install: &LocalInstall,
    listen: SocketAddr,
) -> Components {
    let setup = ComponentSetup::prepare(cp, install, listen, TOKEN_TTL)
        .await
        .unwrap();
    Components::start(setup).await.unwrap()
}

/// Whether every field of `want` is in `have` with the same value (the API
/// server adds defaults to what was applied).
fn contains(have: &serde_json::Value, want: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| contains(hv, v))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| contains(hv, wv))
        }
        _ => have == want,
    }
}

/// The served CRDs' specs, by name.
async fn served_crds(client: &kube::Client) -> BTreeMap<String, serde_json::Value> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = BTreeMap::new();
    for crd in koord_queue_api::crd::all() {
        let name = crd.metadata.name.unwrap();
        let served = api.get(&name).await.unwrap();
        out.insert(name, serde_json::to_value(&served.spec).unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_from_the_previous_chart_releases_and_loses_nothing() {
    koord_queue_tests::init_tracing();
    let cp = ControlPlane::start(Tier::Two(Nodes::default()))
        .await
        .unwrap();
    let client = cp.client().await.unwrap();
    let port = process::free_port().unwrap();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let install = LocalInstall {
        release: install::RELEASE.into(),
        namespace: NS.into(),
        webhook_url: format!("https://127.0.0.1:{port}/mutate"),
        ca_pem: cp.pki().ca.cert_pem().into(),
        install_crds: true,
        visibility_port: None,
    };

    // 1. The previous chart, its components, and jobs in every state: one
    // finished, two running (the quota is full), two waiting.
    // Its values schema knows only its own job kinds.
    let previous_values: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(previous_chart().join("values.yaml")).unwrap(),
    )
    .unwrap();
    let mut values = install.values();
    values["extension"]
        .as_object_mut()
        .unwrap()
        .retain(|kind, _| previous_values["extension"].get(kind).is_some());
    // Nor values it has no section for (the visibility API is newer).
    values
        .as_object_mut()
        .unwrap()
        .retain(|key, _| previous_values.get(key).is_some());
    install
        .helm_release_with(&cp, "install", &previous_chart(), &values)
        .await
        .unwrap();
    crds_established(&client).await;
    let components = start_components(&cp, &install, listen).await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    e2e::create_quota_in(&client, &ns, QUOTA, "0", "4")
        .await
        .unwrap();
    install::wait_webhook_effective(&client, &ns).await.unwrap();
    let monitor = UsageMonitor::start(client.clone(), ns.clone(), vec![QUOTA.into()]);
    kubectl_create_job(&cp, &ns, &job_yaml("done", QUOTA, "1", "0s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "done", &[Succeed], LONG)
        .await
        .unwrap();
    for job in ["run-a", "run-b"] {
        kubectl_create_job(&cp, &ns, &job_yaml(job, QUOTA, "2", "25s"))
            .await
            .unwrap();
        wait_phase(&client, &ns, job, &[Running], LONG)
            .await
            .unwrap();
    }
    for job in ["wait-a", "wait-b"] {
        kubectl_create_job(&cp, &ns, &job_yaml(job, QUOTA, "2", "1s"))
            .await
            .unwrap();
        wait_phase(&client, &ns, job, &[Enqueued], LONG)
            .await
            .unwrap();
        assert!(suspended(&client, &ns, job).await);
    }
    let units_before = units(&client, &ns).await;
    assert_eq!(units_before.len(), 5);
    let quota_before = quota_spec(&client, &ns).await;

    // 2. The upgrade, as a rollout does it: the old components stop, the
    // chart is upgraded, the new components start with the new
    // Deployments' flags and rebuild their state from the API.
    components.stop().await.unwrap();
    let upgraded = install
        .helm_release(&cp, "upgrade", &chart_dir())
        .await
        .unwrap();
    assert!(upgraded.contains("STATUS: deployed"), "{upgraded}");
    assert!(
        upgraded.contains("helm uninstall") && upgraded.contains("stays held"),
        "NOTES say what uninstall leaves: {upgraded}"
    );
    // The CRDs are the new chart's (its templates apply any change).
    let changed: Vec<String> = std::fs::read_dir(chart_dir().join("files/crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| {
            let new = std::fs::read(chart_dir().join("files/crds").join(f)).ok();
            let old = std::fs::read(previous_chart().join("files/crds").join(f)).ok();
            new != old
        })
        .collect();
    println!("CRD files changed since the previous chart: {changed:?}");
    let served = served_crds(&client).await;
    for crd in koord_queue_api::crd::all() {
        let name = crd.metadata.name.clone().unwrap();
        assert!(
            contains(&served[&name], &serde_json::to_value(&crd.spec).unwrap()),
            "CRD {name} after the upgrade is not the new chart's: {}",
            served[&name]
        );
    }
    assert_eq!(units(&client, &ns).await, units_before, "units untouched");
    for job in ["wait-a", "wait-b"] {
        assert!(suspended(&client, &ns, job).await, "{job} still held");
        assert_eq!(pods_of(&client, &ns, job).await, 0, "{job} has no pod");
    }
    let components = start_components(&cp, &install, listen).await;

    // 3. Everything runs to its end, never more at once than the quota.
    for job in ["run-a", "run-b", "wait-a", "wait-b"] {
        if let Err(e) = wait_phase(&client, &ns, job, &[Succeed], LONG).await {
            panic!("{job}: {e:#}\n{}", e2e::describe_units(&client, &ns).await);
        }
    }
    let after = units(&client, &ns).await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        units_before.keys().collect::<Vec<_>>(),
        "no unit lost or added"
    );
    for (name, (uid, phase, _)) in &after {
        assert_eq!(uid, &units_before[name].0, "{name}: the same unit");
        assert_eq!(*phase, Some(Succeed), "{name}");
    }
    assert!(
        monitor.max() <= 4000,
        "at most the quota's 4 CPU held at once, saw {}m",
        monitor.max()
    );
    assert_eq!(
        quota_spec(&client, &ns).await,
        quota_before,
        "quota unchanged"
    );

    // 4. `helm uninstall` leaves a queued job held: nothing releases it.
    kubectl_create_job(&cp, &ns, &job_yaml("blocker", QUOTA, "4", "60s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "blocker", &[Running], LONG)
        .await
        .unwrap();
    kubectl_create_job(&cp, &ns, &job_yaml("queued", QUOTA, "2", "1s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "queued", &[Enqueued], LONG)
        .await
        .unwrap();
    components.stop().await.unwrap();
    install::helm_ok(
        &cp.dir().join("helm"),
        Some(cp.kubeconfig()),
        &["uninstall", install::RELEASE, "-n", NS],
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(suspended(&client, &ns, "queued").await, "still held");
    assert_eq!(pods_of(&client, &ns, "queued").await, 0);
    assert!(
        e2e::unit_of_job(&client, &ns, "queued")
            .await
            .unwrap()
            .is_some(),
        "its unit is kept with the CRDs"
    );
    drop(monitor);
}
