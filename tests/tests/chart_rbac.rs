//! The components run with exactly the RBAC the chart grants: the chart is
//! installed into the tier 2 control plane (Deployments at 0 replicas: no
//! image can be built here), the webhook and the scheduler run in this
//! process with the flags of the chart's Deployments and with tokens of the
//! chart's ServiceAccounts (TokenRequest), and the end-to-end flow passes —
//! kubectl-created jobs are held, queued, released, run on kwok nodes and
//! complete. `kubectl auth can-i` shows each identity cannot do what it does
//! not need.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_api::{Queue, QueueUnit, keys};
use koord_queue_tests::e2e::{self, create_quota_pair, job_yaml, kubectl_create_job, wait_phase};
use koord_queue_tests::install::{self, ComponentSetup, Components, LocalInstall, RELEASE};
use koord_queue_tests::{ControlPlane, background, fixtures, job_crds, metrics, process, shared};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(90);
const NS: &str = keys::SYSTEM_NAMESPACE;

/// The chart's release and the admin addresses of the components.
#[derive(Debug)]
struct Deployed {
    install: LocalInstall,
    webhook_admin: SocketAddr,
    scheduler_admin: SocketAddr,
}

/// The chart installed and both components running with its identities, for
/// the rest of the test binary.
async fn setup() -> (&'static ControlPlane, &'static Deployed) {
    static DEPLOYED: OnceCell<Deployed> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    let deployed = DEPLOYED
        .get_or_init(|| async {
            let client = cp.client().await.unwrap();
            // Every kind's CRD, so the scheduler's watches of all of them run
            // under the chart's RBAC too.
            fixtures::apply_crds(&client, &job_crds::job_framework_crds())
                .await
                .unwrap();
            let port = process::free_port().unwrap();
            let visibility_port = process::free_port().unwrap();
            let install = LocalInstall {
                release: RELEASE.into(),
                namespace: NS.into(),
                webhook_url: format!("https://127.0.0.1:{port}/mutate"),
                ca_pem: cp.pki().ca.cert_pem().into(),
                // The shared control plane has them already.
                install_crds: false,
                visibility_port: Some(visibility_port),
            };
            install.install(cp).await.unwrap();
            let listen = SocketAddr::from(([127, 0, 0, 1], port));
            let setup = ComponentSetup::prepare(cp, &install, listen, Duration::from_secs(3600))
                .await
                .unwrap();
            assert!(
                setup
                    .scheduler_kubeconfig
                    .to_string_lossy()
                    .contains("koord-queue-scheduler")
            );
            let (webhook_admin, scheduler_admin) = background::run(async move {
                let components = Components::start(setup).await?;
                let addrs = (
                    components.webhook.admin_addr,
                    components.scheduler.admin_addr,
                );
                // They serve the rest of the binary.
                std::mem::forget(components);
                anyhow::Ok(addrs)
            })
            .await
            .unwrap()
            .unwrap();
            Deployed {
                install,
                webhook_admin,
                scheduler_admin,
            }
        })
        .await;
    (cp, deployed)
}

#[tokio::test]
async fn components_with_the_chart_identities_run_the_end_to_end_flow() {
    let (cp, deployed) = setup().await;
    let install = &deployed.install;
    let client = cp.client().await.unwrap();
    create_quota_pair(&client, "rbac", "rbac-q", "8")
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    e2e::serve_namespaces(&client, "rbac-q", &[&ns])
        .await
        .unwrap();
    install::wait_webhook_effective(&client, &ns).await.unwrap();

    // Held on creation (the webhook, as its ServiceAccount, created the unit).
    kubectl_create_job(cp, &ns, &job_yaml("first", "rbac-q", "6", "4s"))
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = jobs.get("first").await.unwrap();
    assert!(
        job.metadata
            .annotations
            .unwrap()
            .contains_key(keys::QUEUE_UNIT_ANNOTATION)
    );
    wait_phase(&client, &ns, "first", &[Running, Succeed], LONG)
        .await
        .unwrap();
    // The second does not fit beside the first: it waits, then runs.
    kubectl_create_job(cp, &ns, &job_yaml("second", "rbac-q", "4", "1s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "first", &[Succeed], LONG)
        .await
        .unwrap();
    wait_phase(&client, &ns, "second", &[Succeed], LONG)
        .await
        .unwrap();
    for name in ["first", "second"] {
        let status = jobs.get(name).await.unwrap().status.unwrap();
        assert!(
            status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True"),
            "{name} completed on a kwok node"
        );
        let unit = e2e::unit_of_job(&client, &ns, name).await.unwrap().unwrap();
        assert!(
            unit.metadata.owner_references.is_some(),
            "{name}: adopted by the scheduler"
        );
        assert!(unit.status.unwrap().admissions.is_empty());
    }

    // What the scheduler wrote with its identity: its Queue (Role in the
    // system namespace), Events on the job (events.k8s.io), its Lease.
    let queue = Api::<Queue>::namespaced(client.clone(), NS)
        .get_opt("rbac-q")
        .await
        .unwrap();
    assert!(queue.is_some(), "the scheduler keeps a Queue per quota");
    fixtures::eventually(Duration::from_secs(20), || async {
        let events = Api::<Event>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await?;
        Ok(events.items.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("first")
                && e.reporting_controller.as_deref() == Some("koord-queue.x-k8s.io/scheduler")
        }))
    })
    .await
    .expect("the scheduler records Events on jobs");
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get(&format!("{RELEASE}-scheduler"))
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some(format!("{}-local-0", install.component("scheduler")).as_str()),
        "the Lease named after the release, held with the pod-name identity"
    );
    // Nothing the components did was refused.
    let scheduler = metrics::scrape(deployed.scheduler_admin).await.unwrap();
    assert_eq!(
        metrics::sum_of(&scheduler, "koord_queue_scheduler_api_write_errors_total"),
        0.0,
        "{scheduler}"
    );
    let webhook = metrics::scrape(deployed.webhook_admin).await.unwrap();
    assert_eq!(
        metrics::sum_of(
            &webhook,
            "koord_queue_webhook_queue_unit_create_errors_total"
        ),
        0.0,
        "{webhook}"
    );
    assert!(
        metrics::sum_of(&webhook, "koord_queue_webhook_reviews_total") >= 2.0,
        "{webhook}"
    );
}

#[tokio::test]
async fn a_framework_job_is_released_with_the_chart_rbac() {
    let (cp, _) = setup().await;
    let client = cp.client().await.unwrap();
    create_quota_pair(&client, "rbac-tf", "rbac-tf-q", "8")
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    e2e::serve_namespaces(&client, "rbac-tf-q", &[&ns])
        .await
        .unwrap();
    install::wait_webhook_effective(&client, &ns).await.unwrap();
    let gvk = GroupVersionKind::gvk("kubeflow.org", "v1", "TFJob");
    let tfjobs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&gvk, "tfjobs"),
    );
    let tfjob: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": { "name": "tf", "labels": { keys::QUOTA_NAME_LABEL: "rbac-tf-q" } },
        "spec": { "tfReplicaSpecs": { "Worker": { "replicas": 2, "template": { "spec": {
            "containers": [{ "name": "tf", "image": "tf",
                "resources": { "requests": { "cpu": "1" } } }] } } } } },
    }))
    .unwrap();
    tfjobs.create(&PostParams::default(), &tfjob).await.unwrap();
    let unit_name = tfjobs
        .get("tf")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()[keys::QUEUE_UNIT_ANNOTATION]
        .clone();
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);
    fixtures::eventually(LONG, || async {
        let phase = units
            .get_opt(&unit_name)
            .await?
            .and_then(|u| u.status)
            .and_then(|s| s.phase);
        Ok(phase == Some(Dequeued))
    })
    .await
    .expect("the scheduler releases the TFJob (patch tfjobs)");
    // The unit's status is written first, then the job's hold is lifted.
    fixtures::eventually(LONG, || async {
        let released = serde_json::to_value(tfjobs.get("tf").await?)?;
        Ok(released["spec"]["runPolicy"]["suspend"] == serde_json::json!(false))
    })
    .await
    .expect("the TFJob is released: runPolicy.suspend false");
    tfjobs
        .patch_status(
            "tf",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "conditions": [
                { "type": "Succeeded", "status": "True", "reason": "Done", "message": "done" }
            ] } })),
        )
        .await
        .unwrap();
    fixtures::eventually(Duration::from_secs(30), || async {
        let status = units.get(&unit_name).await?.status.unwrap_or_default();
        Ok(status.phase == Some(Succeed))
    })
    .await
    .expect("the unit follows the TFJob to Succeed");
}

#[tokio::test]
async fn each_identity_cannot_do_what_it_does_not_need() {
    let (cp, deployed) = setup().await;
    let install = &deployed.install;
    let webhook = install.user("webhook");
    let scheduler = install.user("scheduler");
    let lease = format!("lease/{RELEASE}-scheduler");
    let cases: Vec<(&str, Vec<&str>, bool)> = vec![
        // The webhook: create (and re-read) units, read its caches; nothing else.
        (
            &webhook,
            vec!["create", "queueunits.scheduling.x-k8s.io", "-n", "team"],
            true,
        ),
        (
            &webhook,
            vec!["get", "queueunits.scheduling.x-k8s.io", "-n", "team"],
            true,
        ),
        (&webhook, vec!["watch", "namespaces"], true),
        (
            &webhook,
            vec!["list", "elasticquotas.scheduling.sigs.k8s.io", "-A"],
            true,
        ),
        (
            &webhook,
            vec!["list", "priorityclasses.scheduling.k8s.io"],
            true,
        ),
        // It reads jobs back (a review alone proves nothing), never writes them.
        (&webhook, vec!["get", "jobs.batch", "-n", "team"], true),
        (&webhook, vec!["list", "jobs.batch", "-n", "team"], false),
        (&webhook, vec!["patch", "jobs.batch", "-n", "team"], false),
        (&webhook, vec!["update", "jobs.batch", "-n", "team"], false),
        (
            &webhook,
            vec!["patch", "tfjobs.kubeflow.org", "-n", "team"],
            false,
        ),
        (
            &webhook,
            vec!["patch", "queueunits.scheduling.x-k8s.io", "-n", "team"],
            false,
        ),
        (
            &webhook,
            vec!["delete", "queueunits.scheduling.x-k8s.io", "-n", "team"],
            false,
        ),
        (
            &webhook,
            vec![
                "patch",
                "queueunits.scheduling.x-k8s.io",
                "--subresource=status",
                "-n",
                "team",
            ],
            false,
        ),
        (&webhook, vec!["create", "pods", "-n", "team"], false),
        (&webhook, vec!["list", "secrets", "-A"], false),
        (&webhook, vec!["get", "secrets", "-n", NS], false),
        (
            &webhook,
            vec!["create", "queues.scheduling.x-k8s.io", "-n", NS],
            false,
        ),
        // The scheduler: follow and release jobs, write units, its queues, its lease.
        (&scheduler, vec!["patch", "jobs.batch", "-n", "team"], true),
        (
            &scheduler,
            vec!["patch", "rayclusters.ray.io", "-n", "team"],
            true,
        ),
        (
            &scheduler,
            vec!["watch", "workflows.argoproj.io", "-A"],
            true,
        ),
        (
            &scheduler,
            vec![
                "patch",
                "queueunits.scheduling.x-k8s.io",
                "--subresource=status",
                "-n",
                "team",
            ],
            true,
        ),
        (
            &scheduler,
            vec!["delete", "queueunits.scheduling.x-k8s.io", "-n", "team"],
            true,
        ),
        (
            &scheduler,
            vec!["create", "events.events.k8s.io", "-n", "team"],
            true,
        ),
        (
            &scheduler,
            vec!["create", "queues.scheduling.x-k8s.io", "-n", NS],
            true,
        ),
        (&scheduler, vec!["update", &lease, "-n", NS], true),
        (&scheduler, vec!["list", "pods", "-A"], true),
        (&scheduler, vec!["list", "secrets", "-A"], false),
        (&scheduler, vec!["get", "secrets", "-n", NS], false),
        // Units of held jobs whose unit never appeared.
        (
            &scheduler,
            vec!["create", "queueunits.scheduling.x-k8s.io", "-n", "team"],
            true,
        ),
        (&scheduler, vec!["get", "priorityclasses"], true),
        (&scheduler, vec!["delete", "priorityclasses"], false),
        (
            &scheduler,
            vec!["delete", "jobs.batch", "-n", "team"],
            false,
        ),
        (
            &scheduler,
            vec!["create", "jobs.batch", "-n", "team"],
            false,
        ),
        (&scheduler, vec!["create", "pods", "-n", "team"], false),
        (&scheduler, vec!["patch", "nodes"], false),
        (
            &scheduler,
            vec!["create", "queues.scheduling.x-k8s.io", "-n", "team"],
            false,
        ),
        (&scheduler, vec!["update", "lease/other", "-n", NS], false),
        (
            &scheduler,
            vec!["update", &lease, "-n", "kube-system"],
            false,
        ),
        (
            &scheduler,
            vec!["patch", "elasticquotas.scheduling.sigs.k8s.io", "-n", NS],
            false,
        ),
        (
            &scheduler,
            vec!["patch", "mutatingwebhookconfigurations"],
            false,
        ),
    ];
    let mut wrong = Vec::new();
    for (user, args, allowed) in &cases {
        if install::can_i(cp, user, args).await.unwrap() != *allowed {
            wrong.push(format!("{user} {args:?}: expected allowed={allowed}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The scheduler, as the chart's ServiceAccount, serves the visibility API
/// through the chart's APIService: the chart's RBAC lets it read the front
/// proxy's CA (extension-apiserver-authentication) and ask
/// SubjectAccessReviews (system:auth-delegator).
#[tokio::test]
async fn the_visibility_api_is_served_under_the_chart_identity() {
    let (cp, _) = setup().await;
    let client = cp.client().await.unwrap();
    let api: Api<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService> =
        Api::all(client.clone());
    fixtures::eventually(LONG, || {
        let api = api.clone();
        async move {
            let s = api.get(koord_queue_tests::visibility::API_SERVICE).await?;
            Ok(s.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True"))
        }
    })
    .await
    .expect("the chart's APIService becomes available");
    let (code, list) = koord_queue_tests::visibility::get(
        &client,
        "/apis/visibility.koord-queue.io/v1alpha1/pendingunits",
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "PendingUnitList");
}
