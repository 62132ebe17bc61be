//! `why KIND/NAME`: one screen that says why a job waits — its unit and
//! phase, the reason with its figures, the quotas from the job's up to the
//! root (the one that stops it marked), its position and what is ahead,
//! an estimate where the scheduler has one, the last Events on the job.
//! Every part it may not read is left out with a note naming the missing
//! permission, so a tenant's token gives all its own namespace allows.

use koord_queue_api::jobs::JobKind;
use koord_queue_api::{QueueUnit, keys};
use koord_queue_visibility::types::{ItemMeta, JobOf, PendingUnit, QuotaUsage, WaitType};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};

use crate::connect::Cluster;
use crate::error::{Access, CliError};
use crate::read::{self, Scope};
use crate::render::table::Table;
use crate::render::text::{age, amounts, countdown};
use crate::render::{Human, Render};

/// Units ahead listed at most.
const AHEAD_SHOWN: usize = 5;
/// Events listed at most.
const EVENTS_SHOWN: usize = 5;

/// What `why` names: a job of a queued kind, or a QueueUnit itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A job of this kind (from the job registry).
    Job(&'static JobKind),
    /// A QueueUnit.
    Unit,
}

/// `KIND/NAME` → what it names: the kind singular, plural or with its
/// group (`job`, `jobs`, `job.batch`, `pytorchjob.kubeflow.org`), `pod`/
/// `po`, or `queueunit`/`qu`.
pub fn resolve(text: &str) -> Result<(Target, String), CliError> {
    let Some((kind, name)) = text
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
    else {
        return Err(CliError::Usage(format!(
            "{text:?}: expected KIND/NAME, such as job/train or pytorchjob/bert"
        )));
    };
    let kind = kind.to_ascii_lowercase();
    let unit_names = [
        "queueunit",
        "queueunits",
        "qu",
        "queueunit.scheduling.x-k8s.io",
        "queueunits.scheduling.x-k8s.io",
    ];
    if unit_names.contains(&kind.as_str()) {
        return Ok((Target::Unit, name.to_string()));
    }
    let found = koord_queue_api::jobs::all()
        .iter()
        .map(|a| a.kind())
        .find(|k| {
            let singular = k.kind.to_ascii_lowercase();
            let mut names = vec![
                singular.clone(),
                k.plural.to_string(),
                format!("{singular}.{}", k.group),
                format!("{}.{}", k.plural, k.group),
            ];
            if k.group.is_empty() && k.kind == "Pod" {
                names.push("po".into());
            }
            names.contains(&kind)
        });
    match found {
        Some(k) => Ok((Target::Job(k), name.to_string())),
        None => {
            let kinds: Vec<String> = koord_queue_api::jobs::all()
                .iter()
                .map(|a| a.kind().kind.to_ascii_lowercase())
                .collect();
            Err(CliError::Usage(format!(
                "{kind:?} is not a queued kind; one of: {}, queueunit",
                kinds.join(", ")
            )))
        }
    }
}

/// An Event on the job, as `why` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    /// When it last happened (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its reason (`Queued`, `Waiting`, `Released`, …).
    pub reason: String,
    /// Its message.
    pub message: String,
}

/// The answer of `why`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Why {
    /// The job.
    pub job: JobOf,
    /// Its QueueUnit.
    pub unit: ItemMeta,
    /// The Queue it waits in.
    pub queue: String,
    /// The quota it is charged to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// The unit's phase (absent before the scheduler adopts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The unit's `status.message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Where and why it waits (the visibility API's entry), while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingUnit>,
    /// The first units of its queue ahead of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<PendingUnit>,
    /// Its quota, then each ancestor up to the top.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quota_path: Vec<QuotaUsage>,
    /// When it is expected to start, RFC 3339: the scheduler's estimate,
    /// or the end of its backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<String>,
    /// The last Events on the job, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventLine>,
    /// What could not be read, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Reads what `why` shows about `target` in the cluster's namespace.
pub async fn run(cluster: &Cluster, target: &str) -> Result<Why, CliError> {
    let (target, name) = resolve(target)?;
    let ns = cluster.namespace.as_str();
    let units = Api::<QueueUnit>::namespaced(cluster.client.clone(), ns);
    let unit_access =
        |n: &str| Access::new("get", format!("queueunits.{}", keys::GROUP), Some(ns)).named(n);
    let unit = match target {
        Target::Unit => units
            .get(&name)
            .await
            .map_err(|e| CliError::from_kube(&unit_access(&name), e))?,
        Target::Job(kind) => {
            let unit_name = unit_name_of_job(cluster, kind, &name).await?;
            units
                .get(&unit_name)
                .await
                .map_err(|e| CliError::from_kube(&unit_access(&unit_name), e))?
        }
    };
    let mut why = from_unit(&unit);
    let waits = read::waits(&unit);
    if waits {
        waiting(cluster, &unit, &mut why).await?;
    }
    match read::quotas(cluster, Some(ns)).await {
        Ok(list) => why.quota_path = quota_path(why.quota.as_deref(), &list.items),
        Err(e) if e.is_forbidden() || matches!(e, CliError::NotFound(_)) => {
            why.notes
                .push(format!("quotas not shown: {}", first_line(&e)));
        }
        Err(e) => return Err(e),
    }
    match read::events(cluster, ns, &why.job.kind, &why.job.name, EVENTS_SHOWN).await {
        Ok(events) => {
            why.events = events
                .iter()
                .map(|e| EventLine {
                    time: read::event_time(e),
                    kind: e.type_.clone().unwrap_or_default(),
                    reason: e.reason.clone().unwrap_or_default(),
                    message: e.message.clone().unwrap_or_default(),
                })
                .collect();
        }
        Err(e) if e.is_forbidden() => why
            .notes
            .push(format!("events not shown: {}", first_line(&e))),
        Err(e) => return Err(e),
    }
    Ok(why)
}

/// The unit a job is queued as: the name its annotation gives, else the
/// unit whose consumer it is (a pod group's member names none).
async fn unit_name_of_job(
    cluster: &Cluster,
    kind: &JobKind,
    name: &str,
) -> Result<String, CliError> {
    let ns = cluster.namespace.as_str();
    let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
    let api: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, kind.plural),
    );
    let resource = if kind.group.is_empty() {
        kind.plural.to_string()
    } else {
        format!("{}.{}", kind.plural, kind.group)
    };
    let job = api
        .get(name)
        .await
        .map_err(|e| CliError::from_kube(&Access::new("get", resource, Some(ns)).named(name), e))?;
    if let Some(unit) = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::QUEUE_UNIT_ANNOTATION))
    {
        return Ok(unit.clone());
    }
    let units = read::list_units(cluster, &Scope::Namespace(ns.to_string())).await?;
    units
        .iter()
        .find(|u| {
            u.spec.consumer_ref.name.as_deref() == Some(name)
                && u.spec.consumer_ref.kind.as_deref() == Some(kind.kind)
        })
        .and_then(|u| u.metadata.name.clone())
        .ok_or_else(|| {
            CliError::NotQueued(format!(
                "{} {ns}/{name} is not queued: it has no {} annotation and no QueueUnit names it (is namespace {ns} opted in with the label {}=true?)",
                kind.kind,
                keys::QUEUE_UNIT_ANNOTATION,
                keys::ENABLED_NAMESPACE_LABEL
            ))
        })
}

/// What the unit itself says.
fn from_unit(unit: &QueueUnit) -> Why {
    let status = unit.status.clone().unwrap_or_default();
    let job = &unit.spec.consumer_ref;
    Why {
        job: JobOf {
            api_version: job.api_version.clone().unwrap_or_default(),
            kind: job.kind.clone().unwrap_or_default(),
            name: job.name.clone().unwrap_or_default(),
        },
        unit: read::unit_meta(unit),
        queue: read::queue_of(unit),
        quota: read::quota_of(unit),
        phase: status.phase.map(|p| p.as_str().to_string()),
        message: status.message,
        pending: None,
        ahead: Vec::new(),
        quota_path: Vec::new(),
        estimated_start: None,
        events: Vec::new(),
        notes: Vec::new(),
    }
}

/// A waiting unit: its entry in the visibility API (else what its status
/// says) and the units ahead of it.
async fn waiting(cluster: &Cluster, unit: &QueueUnit, why: &mut Why) -> Result<(), CliError> {
    let ns = cluster.namespace.clone();
    let mine = if read::visibility_served(&cluster.client).await {
        match read::pending(cluster, &Scope::Namespace(ns.clone())).await {
            Ok(list) => Some(list.items),
            Err(e) if e.is_forbidden() => {
                why.notes
                    .push(format!("position not shown: {}", first_line(&e)));
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        why.notes.push(
            "the visibility API is not served: the reason is the one the unit's status last recorded, no position".into(),
        );
        None
    };
    let entry = mine
        .as_ref()
        .and_then(|items| {
            items
                .iter()
                .find(|p| p.metadata.name == why.unit.name)
                .cloned()
        })
        .unwrap_or_else(|| read::pending_of_unit(unit));
    why.estimated_start = match entry.reason.kind {
        WaitType::Backoff => entry.reason.until.clone(),
        _ => entry.estimated_start.clone(),
    };
    if let Some(position) = entry.position.filter(|p| *p > 1) {
        let limit = usize::try_from(position - 1)
            .unwrap_or(AHEAD_SHOWN)
            .min(AHEAD_SHOWN);
        match read::backlog_head(cluster, &entry.queue, limit).await {
            Ok(items) => why.ahead = items,
            Err(e) if e.is_forbidden() => {
                // A tenant sees the queue only through its namespace.
                why.ahead = mine
                    .iter()
                    .flatten()
                    .filter(|p| p.queue == entry.queue && p.position.is_some_and(|q| q < position))
                    .take(AHEAD_SHOWN)
                    .cloned()
                    .collect();
                why.notes.push(format!(
                    "only your namespace's units ahead are listed ({} ahead in all): {}",
                    position - 1,
                    first_line(&e)
                ));
            }
            Err(e) => return Err(e),
        }
    }
    why.pending = Some(entry);
    Ok(())
}

/// The quota `leaf` and its ancestors, from `quotas`, leaf first.
pub fn quota_path(leaf: Option<&str>, quotas: &[QuotaUsage]) -> Vec<QuotaUsage> {
    let mut out: Vec<QuotaUsage> = Vec::new();
    let mut next = leaf.map(str::to_string);
    while let Some(name) = next {
        if out.iter().any(|q| q.metadata.name == name) {
            break; // a cycle: the scheduler reports it as Misconfigured
        }
        let Some(q) = quotas.iter().find(|q| q.metadata.name == name) else {
            break;
        };
        next = q.parent.clone();
        out.push(q.clone());
    }
    out
}

fn first_line(e: &CliError) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

impl Render for Why {
    fn human(&self, how: &Human) -> String {
        let mut out = String::new();
        let ns = self.unit.namespace.as_deref().unwrap_or_default();
        let line = |out: &mut String, label: &str, text: &str| {
            out.push_str(&format!("{label:<11}{text}\n"));
        };
        line(
            &mut out,
            "Job:",
            &format!(
                "{} {ns}/{} ({})",
                self.job.kind, self.job.name, self.job.api_version
            ),
        );
        line(
            &mut out,
            "Unit:",
            &format!(
                "{} (created {} ago)",
                self.unit.name,
                age(self.unit.creation_timestamp.as_deref(), how.now)
            ),
        );
        let quota = self
            .quota
            .as_deref()
            .map(|q| format!(", quota {q}"))
            .unwrap_or_default();
        line(&mut out, "Queue:", &format!("{}{quota}", self.queue));
        let phase = self.phase.as_deref().unwrap_or("(not adopted yet)");
        match &self.pending {
            Some(p) => {
                line(
                    &mut out,
                    "Phase:",
                    &format!(
                        "{phase}, waiting for {}",
                        age(p.waiting_since.as_deref(), how.now)
                    ),
                );
                line(
                    &mut out,
                    "Reason:",
                    &format!("{}: {}", p.reason.kind, p.reason.message),
                );
                if let (Some(resource), Some(short)) = (&p.reason.resource, &p.reason.short_by) {
                    let on = p
                        .reason
                        .quota
                        .as_deref()
                        .map(|q| format!(" on quota {q}"))
                        .unwrap_or_else(|| " in the cluster".into());
                    line(&mut out, "", &format!("short of {resource} by {short}{on}"));
                }
                // The unit ahead, unless the reason's sentence names it.
                if let Some(behind) = &p.reason.behind
                    && !p.reason.message.contains(behind.as_str())
                {
                    line(&mut out, "", &format!("waiting behind {behind}"));
                }
                let position = match p.position {
                    Some(1) => format!("1 in queue {} (first in line)", p.queue),
                    Some(n) => format!("{n} in queue {} ({} ahead)", p.queue, n - 1),
                    None => "not in line (sent back, checks pending, or not seen yet)".into(),
                };
                line(&mut out, "Position:", &position);
                let estimate = match (&self.estimated_start, p.reason.kind) {
                    (Some(at), WaitType::Backoff) => {
                        format!("back in line at {at} ({})", countdown(Some(at), how.now))
                    }
                    (Some(at), _) => {
                        format!("starts at about {at} ({})", countdown(Some(at), how.now))
                    }
                    (None, _) => {
                        "none yet (a runtime ahead of it is unknown, or it is out of line)".into()
                    }
                };
                line(&mut out, "Estimate:", &estimate);
            }
            None => {
                line(&mut out, "Phase:", &format!("{phase}: not waiting"));
                if let Some(m) = &self.message {
                    line(&mut out, "Message:", m);
                }
            }
        }
        if !self.quota_path.is_empty() {
            // The quota whose limit stops it; a stopped queue names its
            // queue there (the scheduler's Queue of a quota has the quota's
            // name), and the quota has nothing to do with it.
            let stopping = self
                .pending
                .as_ref()
                .filter(|p| p.reason.kind != WaitType::QueueStopped)
                .and_then(|p| p.reason.quota.as_deref());
            let mut t = Table::new(&["quota", "min", "max", "used", "borrowed", "lent", ""]);
            for q in &self.quota_path {
                let mark = if stopping == Some(q.metadata.name.as_str()) {
                    "◀ stops it"
                } else {
                    ""
                };
                t.row(vec![
                    q.metadata.name.clone(),
                    amounts(&q.effective_min),
                    amounts(&q.max),
                    amounts(&q.used),
                    amounts(&q.borrowed),
                    amounts(&q.lent),
                    mark.into(),
                ]);
            }
            out.push_str("\nQuotas, from the job's up:\n");
            out.push_str(&indent(&t.render()));
        }
        if !self.ahead.is_empty() {
            let mut t = Table::new(&[
                "position",
                "namespace",
                "name",
                "priority",
                "reason",
                "requests",
            ]);
            for p in &self.ahead {
                t.row(vec![
                    p.position.map_or("-".into(), |n| n.to_string()),
                    p.metadata.namespace.clone().unwrap_or_default(),
                    p.metadata.name.clone(),
                    p.priority.to_string(),
                    p.reason.kind.to_string(),
                    amounts(&p.requests),
                ]);
            }
            out.push_str(&format!("\nAhead in queue {}:\n", self.queue));
            out.push_str(&indent(&t.render()));
        }
        if !self.events.is_empty() {
            let mut t = Table::new(&["age", "type", "reason", "message"]);
            for e in &self.events {
                t.row(vec![
                    age(e.time.as_deref(), how.now),
                    e.kind.clone(),
                    e.reason.clone(),
                    e.message.clone(),
                ]);
            }
            out.push_str("\nLast events on the job:\n");
            out.push_str(&indent(&t.render()));
        }
        for note in &self.notes {
            out.push_str(&format!("\nNote: {note}\n"));
        }
        out
    }

    fn names(&self) -> Vec<String> {
        vec![format!("queueunit.{}/{}", keys::GROUP, self.unit.name)]
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}
