//! Reads. Where the visibility API is served its answers are the
//! scheduler's own (positions in serving order, current reasons and
//! usage); where it is not, the CRDs give what they can (no positions, the
//! reason the unit's status last recorded) and the command says so.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_queue_api::{ElasticQuota, QueueUnit, QueueUnitPhase, keys};
use koord_queue_visibility::types::{
    ItemMeta, JobOf, PendingUnit, PendingUnitList, QuotaUsage, QuotaUsageList, WaitReasonView,
    WaitType,
};
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

use crate::connect::Cluster;
use crate::error::{Access, CliError};

/// The visibility API's root path.
pub const VISIBILITY: &str = "/apis/visibility.koord-queue.io/v1alpha1";
/// Its resources as RBAC names them.
pub const PENDING_UNITS: &str = "pendingunits.visibility.koord-queue.io";
/// A Queue's backlog, as RBAC names it.
pub const QUEUE_BACKLOG: &str = "queues/pendingunits.visibility.koord-queue.io";
/// Quota usage, as RBAC names it.
pub const QUOTA_USAGES: &str = "quotausages.visibility.koord-queue.io";
/// Items per page: large enough that most answers take one request.
const PAGE: usize = 500;

/// Whose waiting units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One namespace's.
    Namespace(String),
    /// Every namespace's.
    All,
    /// One Queue's backlog.
    Queue(String),
}

/// GETs `path` as the kubeconfig's user; a refusal names `access`.
pub async fn get<T: DeserializeOwned>(
    client: &kube::Client,
    path: &str,
    access: &Access,
) -> Result<T, CliError> {
    // As kubectl asks: gzipped (a 10,000-unit backlog is ~4.7 MB of JSON).
    koord_queue_visibility::client::get_json(client, path)
        .await
        .map_err(|e| CliError::from_kube(access, e))
}

/// Whether the visibility API is served: its discovery document answers
/// (every authenticated user may read discovery).
pub async fn visibility_served(client: &kube::Client) -> bool {
    let Ok(request) = http::Request::get(VISIBILITY).body(Vec::new()) else {
        return false;
    };
    client.request::<serde_json::Value>(request).await.is_ok()
}

/// Every waiting unit of `scope` through the visibility API, all pages, in
/// the order it answers (serving order).
pub async fn pending(cluster: &Cluster, scope: &Scope) -> Result<PendingUnitList, CliError> {
    let (path, access) = match scope {
        Scope::Namespace(ns) => (
            format!("{VISIBILITY}/namespaces/{ns}/pendingunits"),
            Access::new("list", PENDING_UNITS, Some(ns)),
        ),
        Scope::All => (
            format!("{VISIBILITY}/pendingunits"),
            Access::new("list", PENDING_UNITS, None),
        ),
        Scope::Queue(q) => (
            format!(
                "{VISIBILITY}/namespaces/{}/queues/{q}/pendingunits",
                cluster.system_namespace
            ),
            Access::new("get", QUEUE_BACKLOG, Some(&cluster.system_namespace)).named(q),
        ),
    };
    let mut items = Vec::new();
    loop {
        let page: PendingUnitList = get(
            &cluster.client,
            &format!("{path}?limit={PAGE}&offset={}", items.len()),
            &access,
        )
        .await?;
        let more = page.metadata.remaining_item_count.unwrap_or(0) > 0 && !page.items.is_empty();
        items.extend(page.items);
        if !more {
            return Ok(PendingUnitList::new(items, 0));
        }
    }
}

/// The first `limit` units of Queue `queue`'s backlog.
pub async fn backlog_head(
    cluster: &Cluster,
    queue: &str,
    limit: usize,
) -> Result<Vec<PendingUnit>, CliError> {
    let path = format!(
        "{VISIBILITY}/namespaces/{}/queues/{queue}/pendingunits?limit={limit}",
        cluster.system_namespace
    );
    let access = Access::new("get", QUEUE_BACKLOG, Some(&cluster.system_namespace)).named(queue);
    let page: PendingUnitList = get(&cluster.client, &path, &access).await?;
    Ok(page.items)
}

/// The quotas with their usage: those serving `namespace` (with their
/// ancestors), or every quota.
pub async fn quotas(
    cluster: &Cluster,
    namespace: Option<&str>,
) -> Result<QuotaUsageList, CliError> {
    let (path, access) = match namespace {
        Some(ns) => (
            format!("{VISIBILITY}/namespaces/{ns}/quotausages"),
            Access::new("list", QUOTA_USAGES, Some(ns)),
        ),
        None => (
            format!("{VISIBILITY}/quotausages"),
            Access::new("list", QUOTA_USAGES, None),
        ),
    };
    get(&cluster.client, &path, &access).await
}

/// Waiting units from the QueueUnits themselves (no visibility API): by
/// queue, then priority, then age; no positions; the reason their status
/// last recorded.
pub async fn pending_from_units(
    cluster: &Cluster,
    scope: &Scope,
) -> Result<PendingUnitList, CliError> {
    let units = list_units(cluster, scope).await?;
    let mut items: Vec<PendingUnit> = units
        .iter()
        .filter(|u| waits(u))
        .map(pending_of_unit)
        .filter(|p| match scope {
            Scope::Queue(q) => &p.queue == q,
            _ => true,
        })
        .collect();
    items.sort_by(|a, b| {
        (&a.queue, -i64::from(a.priority), &a.waiting_since).cmp(&(
            &b.queue,
            -i64::from(b.priority),
            &b.waiting_since,
        ))
    });
    Ok(PendingUnitList::new(items, 0))
}

/// The QueueUnits of `scope` (a Queue's: every namespace's).
pub async fn list_units(cluster: &Cluster, scope: &Scope) -> Result<Vec<QueueUnit>, CliError> {
    let resource = format!("queueunits.{}", keys::GROUP);
    let (api, access) = match scope {
        Scope::Namespace(ns) => (
            Api::<QueueUnit>::namespaced(cluster.client.clone(), ns),
            Access::new("list", resource, Some(ns)),
        ),
        Scope::All | Scope::Queue(_) => (
            Api::<QueueUnit>::all(cluster.client.clone()),
            Access::new("list", resource, None),
        ),
    };
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| CliError::from_kube(&access, e))
}

/// Whether a unit waits (not released, not finished).
pub fn waits(unit: &QueueUnit) -> bool {
    let phase = unit.status.as_ref().and_then(|s| s.phase);
    matches!(
        phase,
        None | Some(
            QueueUnitPhase::Enqueued | QueueUnitPhase::TimeoutBackoff | QueueUnitPhase::Reserved
        )
    )
}

/// The queue a unit waits in: its quota's (the label), else the one it names.
pub fn queue_of(unit: &QueueUnit) -> String {
    quota_of(unit).unwrap_or_else(|| unit.spec.queue.clone())
}

/// The quota a unit is charged to (its label).
pub fn quota_of(unit: &QueueUnit) -> Option<String> {
    unit.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::QUOTA_NAME_LABEL))
        .cloned()
}

/// A waiting unit as the API would show it, from its own status.
pub fn pending_of_unit(unit: &QueueUnit) -> PendingUnit {
    let status = unit.status.clone().unwrap_or_default();
    let kind = match status.phase {
        Some(QueueUnitPhase::TimeoutBackoff) => WaitType::Backoff,
        Some(QueueUnitPhase::Reserved) => WaitType::AdmissionChecks,
        None => WaitType::NotYetSeen,
        _ => QueueUnitPhase::waiting_reason(&status.conditions)
            .and_then(WaitType::parse)
            .unwrap_or(WaitType::NotYetSeen),
    };
    let job = &unit.spec.consumer_ref;
    PendingUnit {
        metadata: unit_meta(unit),
        job: job.kind.as_ref().map(|kind| JobOf {
            api_version: job.api_version.clone().unwrap_or_default(),
            kind: kind.clone(),
            name: job.name.clone().unwrap_or_default(),
        }),
        queue: queue_of(unit),
        quota: quota_of(unit),
        position: None,
        priority: unit.spec.priority.unwrap_or(0),
        requests: unit
            .spec
            .resource
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
        reason: WaitReasonView {
            kind,
            message: status.message.unwrap_or_default(),
            quota: None,
            resource: None,
            short_by: None,
            behind: None,
            until: status
                .requeue_state
                .and_then(|r| r.requeue_at)
                .map(|t| t.0.to_string()),
        },
        waiting_since: unit_meta(unit).creation_timestamp,
        estimated_start: None,
    }
}

/// A unit's name, namespace and creation time, as the API lists them.
pub fn unit_meta(unit: &QueueUnit) -> ItemMeta {
    ItemMeta {
        name: unit.metadata.name.clone().unwrap_or_default(),
        namespace: unit.metadata.namespace.clone(),
        creation_timestamp: unit
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
    }
}

/// The quotas from the ElasticQuota objects (no visibility API): min, max
/// and the used amount Koordinator records, parents before children.
pub async fn quotas_from_crds(cluster: &Cluster) -> Result<QuotaUsageList, CliError> {
    let access = Access::new("list", "elasticquotas.scheduling.sigs.k8s.io", None);
    let quotas = Api::<ElasticQuota>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| CliError::from_kube(&access, e))?;
    let list = |l: Option<&BTreeMap<String, Quantity>>| -> BTreeMap<String, String> {
        l.map(|l| l.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .unwrap_or_default()
    };
    let items = quotas
        .items
        .iter()
        .filter(|q| q.metadata.name.as_deref() != Some(keys::ROOT_QUOTA_NAME))
        .map(|q| {
            let min = list(q.spec.min.as_ref());
            QuotaUsage {
                metadata: ItemMeta {
                    name: q.metadata.name.clone().unwrap_or_default(),
                    namespace: q.metadata.namespace.clone(),
                    creation_timestamp: None,
                },
                parent: Some(q.parent_name().to_string()).filter(|p| p != keys::ROOT_QUOTA_NAME),
                is_parent: q.is_parent(),
                effective_min: min.clone(),
                min,
                max: list(q.spec.max.as_ref()),
                used: list(q.status.as_ref().and_then(|s| s.used.as_ref())),
                borrowed: Default::default(),
                lent: Default::default(),
                fair_share_weight: None,
                pending: 0,
                admitted: 0,
            }
        })
        .collect();
    Ok(QuotaUsageList::new(crate::tree::tree_order(items)))
}

/// The last `n` Events about object `kind`/`name` of `namespace`, oldest first.
pub async fn events(
    cluster: &Cluster,
    namespace: &str,
    kind: &str,
    name: &str,
    n: usize,
) -> Result<Vec<Event>, CliError> {
    let access = Access::new("list", "events", Some(namespace));
    let params = ListParams::default().fields(&format!(
        "involvedObject.name={name},involvedObject.kind={kind}"
    ));
    let mut events = Api::<Event>::namespaced(cluster.client.clone(), namespace)
        .list(&params)
        .await
        .map_err(|e| CliError::from_kube(&access, e))?
        .items;
    events.sort_by_key(event_time);
    let skip = events.len().saturating_sub(n);
    Ok(events.into_iter().skip(skip).collect())
}

/// When an Event last happened (RFC 3339), as kubectl sorts them.
pub fn event_time(e: &Event) -> Option<String> {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
}
