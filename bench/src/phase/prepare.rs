//! What a phase's control plane holds before the measured window: the
//! PriorityClasses, the job creator's RBAC, the quota tree and the leaf
//! namespaces as the phase's spec says; and the clients of the job creator,
//! the job runtime and the floor's null scheduler.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_queue_api::keys;
use koord_queue_tests::kubeconfig::Credentials;
use koord_queue_tests::webhook::SCHEDULER_USER;
use koord_queue_tests::{ControlPlane, e2e, fixtures};
use kube::api::{Api, PostParams};
use serde_json::json;

use super::spec::PhaseSpec;
use crate::api_stats::{self, ApiStats, Component};
use crate::floor::FloorClients;
use crate::shape::{LEAF_MAX_CPU, LEAF_MIN_CPU, Shape};

async fn create_ignoring_conflict<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates the PriorityClasses, the creators' RBAC, the quota tree and the
/// namespaces.
pub async fn prepare(
    admin: &kube::Client,
    shape: &Shape,
    spec: &PhaseSpec,
    queue_spec: Option<&serde_json::Value>,
) -> Result<()> {
    if spec.koord_queue_api() {
        fixtures::apply_koord_queue_crds(admin).await?;
        fixtures::ensure_namespace(admin, keys::SYSTEM_NAMESPACE).await?;
    }
    let classes: Api<PriorityClass> = Api::all(admin.clone());
    for class in &shape.classes {
        let pc: PriorityClass = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": { "name": class.name }, "value": class.priority,
            "description": "koord-queue benchmark class",
        }))?;
        create_ignoring_conflict(&classes, &pc).await?;
    }
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "bench-jobs" },
        "rules": [{ "apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list"] }],
    }))?;
    create_ignoring_conflict(&Api::all(admin.clone()), &role).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "bench-user-jobs" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-jobs" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": BENCH_USER }],
    }))?;
    create_ignoring_conflict(&Api::all(admin.clone()), &binding).await?;

    // Kueue's queues are created once its webhooks serve (Kueue::start).
    if spec.elastic_quotas() {
        // Limits that do not bind: the same tree, maxima never reached.
        let unbound = "1000000";
        for parent in &shape.parents {
            let cpu = parent.cpu.to_string();
            let max = if spec.limits_bind() {
                cpu.as_str()
            } else {
                unbound
            };
            e2e::create_quota(admin, &parent.name, None, true, &cpu, max, None).await?;
        }
        let (min, max) = (LEAF_MIN_CPU.to_string(), LEAF_MAX_CPU.to_string());
        for leaf in &shape.leaves {
            let max = if spec.limits_bind() {
                max.as_str()
            } else {
                unbound
            };
            let parent = &shape.parents[leaf.parent].name;
            e2e::create_quota_serving(
                admin,
                &leaf.name,
                Some(parent),
                false,
                (&min, max),
                None,
                &[&leaf.namespace],
            )
            .await?;
        }
        if let Some(extra) = queue_spec {
            create_leaf_queues(admin, shape, extra).await?;
        }
    }
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for leaf in &shape.leaves {
        let labels = if spec.namespaces_opted_in() {
            json!({ keys::ENABLED_NAMESPACE_LABEL: "true" })
        } else {
            json!({})
        };
        let ns: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": leaf.namespace, "labels": labels },
        }))?;
        create_ignoring_conflict(&namespaces, &ns).await?;
    }
    Ok(())
}

/// Creates each leaf's Queue (the scheduler would create it with the
/// default spec; one that exists and that it did not create is left as it
/// is), its spec `Priority` merged with `extra`.
async fn create_leaf_queues(
    admin: &kube::Client,
    shape: &Shape,
    extra: &serde_json::Value,
) -> Result<()> {
    let queues: Api<koord_queue_api::Queue> =
        Api::namespaced(admin.clone(), keys::SYSTEM_NAMESPACE);
    for leaf in &shape.leaves {
        let mut spec = json!({ "queuePolicy": "Priority" });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let queue = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
            "metadata": { "name": leaf.name, "namespace": keys::SYSTEM_NAMESPACE },
            "spec": spec,
        }))
        .with_context(|| format!("--queue-spec does not make a Queue spec: {extra}"))?;
        create_ignoring_conflict(&queues, &queue).await?;
    }
    Ok(())
}

/// The clients of the job creator (the ordinary user [`BENCH_USER`]) and of
/// the job runtime (admin), both counted in `stats`.
pub async fn job_clients(
    cp: &ControlPlane,
    admin_path: &Path,
    stats: &Arc<ApiStats>,
) -> Result<(kube::Client, kube::Client)> {
    let user = cp.pki().client_cert(BENCH_USER, &[])?;
    let user_path = cp.write_kubeconfig(
        "bench-user",
        BENCH_USER,
        &Credentials::Certificate {
            cert_pem: user.cert_pem,
            key_pem: user.key_pem,
        },
    )?;
    let creator = api_stats::client(&user_path, stats.clone(), Component::Creator).await?;
    let runner = api_stats::client(admin_path, stats.clone(), Component::Runner).await?;
    Ok((creator, runner))
}

/// The ordinary user that creates the jobs.
pub const BENCH_USER: &str = "bench-user";

/// The null scheduler of the floor: its identity (the one the webhook
/// trusts, with the scheduler's rights), also creating the units.
pub(super) async fn null_scheduler_clients(
    cp: &ControlPlane,
    creator: &kube::Client,
    stats: &Arc<ApiStats>,
) -> Result<FloorClients> {
    let cert = cp.pki().client_cert(SCHEDULER_USER, &["system:masters"])?;
    let path = cp.write_kubeconfig(
        "bench-null-scheduler",
        SCHEDULER_USER,
        &Credentials::Certificate {
            cert_pem: cert.cert_pem,
            key_pem: cert.key_pem,
        },
    )?;
    let null_scheduler = api_stats::client(&path, stats.clone(), Component::NullScheduler).await?;
    Ok(FloorClients {
        creator: creator.clone(),
        unit_creator: null_scheduler.clone(),
        null_scheduler,
    })
}
