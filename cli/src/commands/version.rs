//! `version`: the client's version and, when it can be read, the
//! scheduler's: the `app.kubernetes.io/version` label and image of the
//! chart's scheduler Deployment in the system namespace.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use serde::{Deserialize, Serialize};

use crate::connect::Cluster;
use crate::error::{Access, CliError};
use crate::render::{Human, Render};

/// The labels the chart puts on the scheduler's Deployment.
const SCHEDULER_SELECTOR: &str =
    "app.kubernetes.io/component=scheduler,app.kubernetes.io/part-of=koord-queue";

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Versions {
    /// This binary's: `<crate version> (git <revision>)`.
    pub client_version: String,
    /// The scheduler's, when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_version: Option<String>,
    /// Why the scheduler's is not shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_unknown: Option<String>,
}

/// The client's version, and the scheduler's when `cluster` can read it.
pub async fn run(cluster: Option<&Cluster>) -> Versions {
    let client_version = env!("KOORD_QUEUE_VERSION").to_string();
    let scheduler = match cluster {
        Some(c) => scheduler_version(c).await,
        None => Err("no cluster configured".to_string()),
    };
    let (scheduler_version, scheduler_unknown) = match scheduler {
        Ok(v) => (Some(v), None),
        Err(why) => (None, Some(why)),
    };
    Versions {
        client_version,
        scheduler_version,
        scheduler_unknown,
    }
}

async fn scheduler_version(cluster: &Cluster) -> Result<String, String> {
    let ns = cluster.system_namespace.as_str();
    let access = Access::new("list", "deployments.apps", Some(ns));
    let list = Api::<Deployment>::namespaced(cluster.client.clone(), ns)
        .list(&ListParams::default().labels(SCHEDULER_SELECTOR))
        .await
        .map_err(|e| {
            let e = CliError::from_kube(&access, e).to_string();
            e.lines().next().unwrap_or_default().to_string()
        })?;
    let Some(d) = list.items.first() else {
        return Err(format!("no scheduler Deployment in namespace {ns}"));
    };
    let label = d
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/version"))
        .cloned();
    let image = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone());
    Ok(match (label, image) {
        (Some(v), Some(i)) => format!("{v} (image {i})"),
        (Some(v), None) => v,
        (None, Some(i)) => format!("image {i}"),
        (None, None) => "unknown".into(),
    })
}

impl Render for Versions {
    fn human(&self, _: &Human) -> String {
        let scheduler = match (&self.scheduler_version, &self.scheduler_unknown) {
            (Some(v), _) => v.clone(),
            (None, Some(why)) => format!("unknown ({why})"),
            (None, None) => "unknown".into(),
        };
        format!(
            "Client Version: {}\nScheduler Version: {scheduler}\n",
            self.client_version
        )
    }

    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}
