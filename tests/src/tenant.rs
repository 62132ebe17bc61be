//! A restricted tenant, as a platform team sets one up: a ServiceAccount in
//! an opted-in namespace with every verb on the job kinds (and `/scale`
//! where a CRD has it), read access to pods, events and QueueUnits, nothing
//! else — and a client that authenticates with its TokenRequest token.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use koord_queue_api::keys;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::ControlPlane;

/// Name of the tenant's ServiceAccount in its namespace.
pub const TENANT: &str = "tenant";

/// The rules of the tenant's Role.
fn rules() -> serde_json::Value {
    json!([
        { "apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["*"] },
        { "apiGroups": ["kubeflow.org"],
          "resources": ["tfjobs", "pytorchjobs", "pytorchjobs/scale", "mpijobs"], "verbs": ["*"] },
        { "apiGroups": ["ray.io"], "resources": ["rayjobs", "rayclusters"], "verbs": ["*"] },
        { "apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"], "verbs": ["*"] },
        { "apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["*"] },
        { "apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["*"] },
        { "apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["*"] },
        { "apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"] },
        { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"] },
        { "apiGroups": [keys::GROUP], "resources": ["queueunits"], "verbs": ["get", "list", "watch"] },
    ])
}

/// Creates the opted-in namespace `namespace` (with `default_queue` as its
/// `koord-queue/default-queue` annotation when given), the tenant in it, and
/// returns a client acting as the tenant.
pub async fn tenant_namespace(
    cp: &ControlPlane,
    namespace: &str,
    default_queue: Option<&str>,
) -> Result<kube::Client> {
    let admin = cp.client().await?;
    let mut annotations = serde_json::Map::new();
    if let Some(queue) = default_queue {
        annotations.insert(keys::DEFAULT_QUEUE_ANNOTATION.into(), queue.into());
    }
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": namespace, "annotations": annotations,
                      "labels": { keys::ENABLED_NAMESPACE_LABEL: "true" } },
    }))?;
    // Applied: the namespace may exist already (its quotas live in it).
    Api::<Namespace>::all(admin.clone())
        .patch(
            namespace,
            &PatchParams::apply("koord-queue-tests").force(),
            &Patch::Apply(&ns),
        )
        .await
        .with_context(|| format!("opting namespace {namespace} in"))?;
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": TENANT },
    }))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &sa)
        .await?;
    grant(&admin, namespace, TENANT, rules()).await?;
    let kubeconfig = crate::install::service_account_kubeconfig(
        cp,
        namespace,
        TENANT,
        Duration::from_secs(3600),
    )
    .await?;
    crate::kubeconfig::client_from_file(&kubeconfig).await
}

/// Gives the tenant of `namespace` the rules `rules` through a Role and
/// RoleBinding named `name`.
async fn grant(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
    rules: serde_json::Value,
) -> Result<()> {
    let role: Role = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": { "name": name }, "rules": rules,
    }))?;
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
        "subjects": [{ "kind": "ServiceAccount", "name": TENANT, "namespace": namespace }],
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Labels `namespace` so that it queues its Pods (the label the chart's pod
/// webhooks select).
pub async fn label_queue_pods(admin: &kube::Client, namespace: &str) -> Result<()> {
    Api::<Namespace>::all(admin.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": {
                keys::QUEUE_PODS_NAMESPACE_LABEL: "true" } } })),
        )
        .await
        .with_context(|| format!("letting namespace {namespace} queue pods"))?;
    Ok(())
}

/// Opts the tenant's namespace in to queueing Pods and lets the tenant
/// create, change and delete pods there, as a platform team does for
/// notebooks and launchers.
pub async fn queue_pods(cp: &ControlPlane, namespace: &str) -> Result<()> {
    let admin = cp.client().await?;
    label_queue_pods(&admin, namespace).await?;
    let rules =
        json!([{ "apiGroups": [""], "resources": ["pods", "pods/resize"], "verbs": ["*"] }]);
    grant(&admin, namespace, &format!("{TENANT}-pods"), rules).await
}
