//! Watches that feed the controller: QueueUnits, Queues (system namespace),
//! ElasticQuotas, Nodes and every enabled job kind. Objects are turned into
//! compact records on arrival. A job kind whose CRD is not installed is
//! reported as absent (with a warning) and picked up once the CRD appears —
//! the watch keeps retrying, less often each time, at least every 30 s.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use koord_queue_api::jobs::JobAdapter;
use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{ElasticQuota, Queue, WatchedUnit};
use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use super::records::{
    JobRecord, NamespaceQuotaRecord, NodeRecord, PodRecord, QueueRecord, QuotaRecord, UnitRecord,
};

/// A change of one watched kind.
#[derive(Debug)]
pub enum Change<T> {
    /// Created or updated (also during the initial list).
    Applied(T),
    /// Deleted: namespace and name.
    Deleted(String, String),
    /// The initial list is complete.
    Synced,
    /// A relist (after a 410 Gone, or any restart of the watch) is
    /// complete: these are the objects it found (namespace, name). Records
    /// of the kind not among them were deleted while the watch was away.
    /// Sent before the relist's [`Change::Synced`].
    Relisted(Listed),
    /// The kind's API is not installed (yet).
    Absent,
    /// Listing or watching the kind fails (`Some`: why, once per streak of
    /// failures), or works again (`None`). The watch keeps retrying.
    Failing(Option<String>),
}

/// Everything the controller reacts to from the API.
#[derive(Debug)]
pub enum Input {
    /// A QueueUnit changed.
    Unit(Change<Box<UnitRecord>>),
    /// A job that names a QueueUnit changed (or a job of the kind was deleted).
    Job(&'static str, Change<Box<JobRecord>>),
    /// An ElasticQuota changed.
    Quota(Change<Box<QuotaRecord>>),
    /// A Queue changed.
    Queue(Change<Box<QueueRecord>>),
    /// A node changed.
    Node(Change<Box<NodeRecord>>),
    /// A namespace ResourceQuota changed (only watched when the
    /// `ResourceQuota` plugin is enabled).
    NamespaceQuota(Change<Box<NamespaceQuotaRecord>>),
    /// A pod with a controller owner changed (for strict dequeue).
    Pod(Change<Box<PodRecord>>),
}

/// A failing watch counts as working again after this long without a new
/// error. kube's default backoff retries at most 30 s apart (and a failing
/// request answers within its 30 s connect timeout), so a watch that still
/// fails reports again well within it; one that resumed on a quiet resource
/// says nothing else, and would otherwise leave `/readyz` degraded until the
/// resource's next change.
const RECOVERED_AFTER: Duration = Duration::from_secs(90);

/// Objects per page of an initial list: bounds what one response holds.
pub const LIST_PAGE_SIZE: u32 = 500;

/// First wait before listing a job kind whose API is not installed again;
/// it doubles up to [`ABSENT_RETRY_MAX`], the longest a newly installed
/// kind waits to be followed.
const ABSENT_RETRY_FIRST: Duration = Duration::from_secs(1);
const ABSENT_RETRY_MAX: Duration = Duration::from_secs(30);

/// The objects a relist found: namespace and name.
pub type Listed = std::collections::HashSet<(String, String)>;

/// Name of a watched source, for sync tracking.
pub type SourceName = &'static str;

/// Starts every watch on the current runtime; inputs go to `tx`. Returns the
/// names of the sources (each reports [`Change::Synced`] or [`Change::Absent`]
/// once).
pub fn start(
    client: &kube::Client,
    system_namespace: &str,
    kinds: &[&'static dyn JobAdapter],
    resource_quotas: bool,
    tx: mpsc::Sender<Input>,
) -> Vec<SourceName> {
    // Initial lists and relists are paginated (most-recent semantic, pages
    // of LIST_PAGE_SIZE). With the "any" semantic (resourceVersion=0) the
    // API server answers from its watch cache and ignores the page size:
    // 100,000 QueueUnits (or Jobs) arrive as one response that the client
    // buffers and decodes whole, several hundred MB at once (architecture §9).
    let config = watcher::Config::default().page_size(LIST_PAGE_SIZE);
    let mut sources = vec!["queueunits", "queues", "elasticquotas", "nodes"];

    spawn(
        // Units and jobs are decoded without what no record keeps (managed
        // fields; of a job, all but its state fields).
        watch(Api::<WatchedUnit>::all(client.clone()), config.clone()),
        tx.clone(),
        |u: WatchedUnit| Box::new(UnitRecord::from_unit(u.0)),
        Input::Unit,
    );
    spawn(
        watch(
            Api::<Queue>::namespaced(client.clone(), system_namespace),
            config.clone(),
        ),
        tx.clone(),
        |q: Queue| Box::new(QueueRecord::from_queue(&q)),
        Input::Queue,
    );
    spawn(
        watch(Api::<ElasticQuota>::all(client.clone()), config.clone()),
        tx.clone(),
        |q: ElasticQuota| Box::new(QuotaRecord::from_quota(&q)),
        Input::Quota,
    );
    spawn(
        watch(Api::<Node>::all(client.clone()), config.clone()),
        tx.clone(),
        |n: Node| Box::new(NodeRecord::from_node(&n)),
        Input::Node,
    );
    // Pods of queued jobs (strict dequeue): only the binding state is kept.
    sources.push("pods");
    let stream = watch(
        Api::<k8s_openapi::api::core::v1::Pod>::all(client.clone()),
        config.clone(),
    );
    let pod_tx = tx.clone();
    tokio::spawn(forward(
        stream,
        pod_tx,
        "pods",
        |p: k8s_openapi::api::core::v1::Pod| PodRecord::from_pod(&p).map(Box::new),
        Input::Pod,
        RECOVERED_AFTER,
    ));
    if resource_quotas {
        sources.push("resourcequotas");
        spawn(
            watch(
                Api::<k8s_openapi::api::core::v1::ResourceQuota>::all(client.clone()),
                config.clone(),
            ),
            tx.clone(),
            |q: k8s_openapi::api::core::v1::ResourceQuota| {
                Box::new(NamespaceQuotaRecord::from_quota(&q))
            },
            Input::NamespaceQuota,
        );
    }
    for adapter in kinds {
        let adapter: &'static dyn JobAdapter = *adapter;
        let kind = adapter.kind();
        let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
        let api = Api::<WatchedJob>::all_with(client.clone(), &resource);
        // Kinds of which a cluster has many more than it queues (Pods) are
        // watched by the label the webhook puts on queued ones.
        let config = if adapter.labels_queued() {
            config
                .clone()
                .labels(&format!("{}=true", koord_queue_api::keys::QUEUED_LABEL))
        } else {
            config.clone()
        };
        let stream = watcher::watcher(api, config).default_backoff();
        let tx = tx.clone();
        let name = kind.kind;
        sources.push(name);
        tokio::spawn(async move {
            forward(
                stream,
                tx,
                name,
                move |obj: WatchedJob| {
                    // Jobs Koord-Queue does not queue are not kept.
                    JobRecord::from_object(adapter, obj).map(Box::new)
                },
                move |change| Input::Job(name, change),
                RECOVERED_AFTER,
            )
            .await;
        });
    }
    sources
}

fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    watcher::watcher(api, config).default_backoff()
}

fn spawn<K, T, S>(
    stream: S,
    tx: mpsc::Sender<Input>,
    convert: fn(K) -> T,
    wrap: fn(Change<T>) -> Input,
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    K: kube::Resource + Send + 'static,
    T: Send + 'static,
{
    let name = std::any::type_name::<K>();
    tokio::spawn(forward(
        stream,
        tx,
        name,
        move |k| Some(convert(k)),
        wrap,
        RECOVERED_AFTER,
    ));
}

/// Forwards a watch's events to the controller as [`Change`]s; a failing
/// watch counts as working again after `recovered_after` without a new
/// error ([`RECOVERED_AFTER`]).
async fn forward<K, T, S, C, W>(
    stream: S,
    tx: mpsc::Sender<Input>,
    name: &'static str,
    convert: C,
    wrap: W,
    recovered_after: Duration,
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    K: kube::Resource,
    C: Fn(K) -> Option<T>,
    W: Fn(Change<T>) -> Input,
{
    futures::pin_mut!(stream);
    let mut absent_reported = false;
    let mut absent_retry = ABSENT_RETRY_FIRST;
    // Whether an initial list has completed: every later list is a relist,
    // whose objects are collected (only while it runs) so that what it no
    // longer finds is dropped.
    let mut listed_once = false;
    let mut relisting: Option<Listed> = None;
    // Whether a failure was reported and not yet followed by success.
    let mut failing = false;
    loop {
        let next = if failing && listed_once {
            // A watch that resumed on a quiet resource says nothing: no new
            // error for longer than the backoff's longest pause is its
            // success. (Its retry is a watch, open while it works. Before
            // a first complete list the retry is a list, which ends with
            // its objects or an error, and a list that hangs must not
            // pass for one that worked: a job kind never listed would
            // make its units look jobless.)
            tokio::time::timeout(recovered_after, stream.next()).await
        } else {
            Ok(stream.next().await)
        };
        let event = match next {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(_quiet) => {
                failing = false;
                if tx.send(wrap(Change::Failing(None))).await.is_err() {
                    return;
                }
                continue;
            }
        };
        let works = match &event {
            Ok(Event::Apply(_) | Event::Delete(_)) => listed_once,
            Ok(Event::InitDone) => true,
            _ => false,
        };
        if failing && works {
            failing = false;
            if tx.send(wrap(Change::Failing(None))).await.is_err() {
                return;
            }
        }
        let change = match event {
            Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
                let (ns, n) = (
                    obj.meta().namespace.clone().unwrap_or_default(),
                    obj.meta().name.clone().unwrap_or_default(),
                );
                match convert(obj) {
                    Some(record) => {
                        if let Some(listed) = relisting.as_mut() {
                            listed.insert((ns, n));
                        }
                        Change::Applied(record)
                    }
                    // Not ours (e.g. a job without the annotation): treat as
                    // gone so a stale record is dropped.
                    None => Change::Deleted(ns, n),
                }
            }
            Ok(Event::Delete(obj)) => Change::Deleted(
                obj.meta().namespace.clone().unwrap_or_default(),
                obj.meta().name.clone().unwrap_or_default(),
            ),
            Ok(Event::Init) => {
                if listed_once {
                    tracing::info!(kind = name, "watch restarted; relisting");
                    relisting = Some(Listed::new());
                }
                continue;
            }
            Ok(Event::InitDone) => {
                absent_reported = false;
                absent_retry = ABSENT_RETRY_FIRST;
                listed_once = true;
                if let Some(listed) = relisting.take()
                    && tx.send(wrap(Change::Relisted(listed))).await.is_err()
                {
                    return;
                }
                Change::Synced
            }
            Err(watcher::Error::InitialListFailed(kube::Error::Api(e))) if e.code == 404 => {
                // The watcher's own backoff starts over at 0.8 s on every
                // attempt (an attempt begins with `Init`, an `Ok` that resets
                // it): an absent kind would be listed about once a second for
                // good. The next attempt waits here, longer each time.
                let pause = absent_retry;
                absent_retry = (absent_retry * 2).min(ABSENT_RETRY_MAX);
                if !absent_reported {
                    absent_reported = true;
                    tracing::warn!(
                        kind = name,
                        "API not installed; jobs of this kind are not followed until its CRD appears"
                    );
                    if tx.send(wrap(Change::Absent)).await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(pause).await;
                continue;
            }
            Err(error) => {
                // Once per backoff: a kind whose API fails (403, 500, a
                // broken conversion webhook) is visible in the log, in
                // `watch_failing` and in `/readyz`, and the others go on.
                tracing::warn!(kind = name, %error, "watch failed; retrying with backoff");
                if failing {
                    continue;
                }
                failing = true;
                Change::Failing(Some(error.to_string()))
            }
        };
        if tx.send(wrap(change)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const QUIET: Duration = Duration::from_secs(90);

    /// Forwards `events` (then nothing, for good) as the node source does,
    /// and returns what the controller receives.
    fn forwarded(events: Vec<Result<Event<Node>, watcher::Error>>) -> mpsc::Receiver<Input> {
        forwarded_from(futures::stream::iter(events))
    }

    /// [`forwarded`], from any stream of events.
    fn forwarded_from(
        events: impl Stream<Item = Result<Event<Node>, watcher::Error>> + Send + 'static,
    ) -> mpsc::Receiver<Input> {
        let (tx, rx) = mpsc::channel(16);
        let stream = events.chain(futures::stream::pending());
        tokio::spawn(forward(
            stream,
            tx,
            "nodes",
            |n: Node| Some(Box::new(NodeRecord::from_node(&n))),
            Input::Node,
            QUIET,
        ));
        rx
    }

    /// The next input; a test whose input never comes fails instead of
    /// waiting for good (the clock is paused: the wait costs nothing).
    async fn next(rx: &mut mpsc::Receiver<Input>) -> Option<Input> {
        tokio::time::timeout(QUIET * 100, rx.recv())
            .await
            .expect("no input within 100 quiet periods")
    }

    /// What one input says of the source's failing state: `Some(true)`
    /// failing, `Some(false)` working again, `None` anything else.
    fn failing(input: &Input) -> Option<bool> {
        match input {
            Input::Node(Change::Failing(why)) => Some(why.is_some()),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_resumed_on_a_quiet_resource_works_again() {
        let started = tokio::time::Instant::now();
        let mut rx = forwarded(vec![
            Ok(Event::Init),
            Ok(Event::InitDone),
            Err(watcher::Error::NoResourceVersion),
        ]);
        assert!(matches!(
            next(&mut rx).await,
            Some(Input::Node(Change::Synced))
        ));
        assert_eq!(next(&mut rx).await.as_ref().and_then(failing), Some(true));
        // No event ever comes: the quiet period says it works.
        assert_eq!(next(&mut rx).await.as_ref().and_then(failing), Some(false));
        assert!(started.elapsed() >= QUIET);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_failing_again_within_the_quiet_period_stays_failing() {
        // Listed, then an error every 30 s (the backoff's longest pause),
        // four times.
        let listed = futures::stream::iter([Ok(Event::Init), Ok(Event::InitDone)]);
        let errors = futures::stream::iter(0..4).then(|i| async move {
            if i > 0 {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Err::<Event<Node>, _>(watcher::Error::NoResourceVersion)
        });
        let started = tokio::time::Instant::now();
        let mut rx = forwarded_from(listed.chain(errors));
        assert!(matches!(
            next(&mut rx).await,
            Some(Input::Node(Change::Synced))
        ));
        assert_eq!(next(&mut rx).await.as_ref().and_then(failing), Some(true));
        // Reported once; working again only a quiet period after the last.
        assert_eq!(next(&mut rx).await.as_ref().and_then(failing), Some(false));
        assert!(started.elapsed() >= Duration::from_secs(90) + QUIET);
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_failing_before_its_first_list_waits_for_the_list() {
        let mut rx = forwarded(vec![Err(watcher::Error::NoResourceVersion)]);
        assert_eq!(next(&mut rx).await.as_ref().and_then(failing), Some(true));
        // However long nothing comes, only a complete list says it works.
        let quiet = tokio::time::timeout(QUIET * 10, rx.recv()).await;
        assert!(quiet.is_err(), "reported working without a list");
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_after_a_failure_says_it_works() {
        let mut rx = forwarded(vec![
            Ok(Event::Init),
            Ok(Event::InitDone),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Init),
            Ok(Event::InitDone),
        ]);
        let mut seen = Vec::new();
        for _ in 0..5 {
            let input = next(&mut rx).await.unwrap();
            seen.push(match &input {
                Input::Node(Change::Synced) => "synced",
                Input::Node(Change::Relisted(_)) => "relisted",
                other => match failing(other) {
                    Some(true) => "failing",
                    Some(false) => "works",
                    None => "other",
                },
            });
        }
        assert_eq!(seen, ["synced", "failing", "works", "relisted", "synced"]);
    }
}
