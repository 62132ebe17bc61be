//! Well-known labels, annotations and names shared by the webhook, the
//! scheduler and users' manifests (architecture §2). Keep these identical to
//! upstream Koord-Queue so existing manifests keep working.

/// Group of the `Queue` and `QueueUnit` resources.
pub const GROUP: &str = "scheduling.x-k8s.io";
/// Version of the `Queue` and `QueueUnit` resources.
pub const VERSION: &str = "v1alpha1";

/// Namespace that holds every `Queue` (the system namespace).
pub const SYSTEM_NAMESPACE: &str = "koord-queue";

/// Job label naming the ElasticQuota (and therefore the Queue) of the job;
/// copied onto the job's QueueUnit.
pub const QUOTA_NAME_LABEL: &str = "quota.scheduling.koordinator.sh/name";
/// ElasticQuota label naming its parent quota; absent means the root quota.
pub const QUOTA_PARENT_LABEL: &str = "quota.scheduling.koordinator.sh/parent";
/// ElasticQuota label marking an inner node of the tree: no job maps to it.
pub const QUOTA_IS_PARENT_LABEL: &str = "quota.scheduling.koordinator.sh/is-parent";
/// ElasticQuota annotation listing, as a JSON string array, the namespaces
/// besides its own whose jobs may use the quota (Koordinator's convention).
pub const QUOTA_NAMESPACES_ANNOTATION: &str = "quota.scheduling.koordinator.sh/namespaces";
/// Name of Koordinator's root quota; its `max` is the cluster capacity.
pub const ROOT_QUOTA_NAME: &str = koord_queue_model::ROOT_QUOTA_NAME;

/// Job annotation that holds kinds without a native suspend field; `"true"` = held.
pub const SUSPEND_ANNOTATION: &str = "scheduling.x-k8s.io/suspend";
/// Job annotation, set by the webhook, with the name of the job's QueueUnit.
pub const QUEUE_UNIT_ANNOTATION: &str = "koord-queue/queue-unit";
/// Annotation on a queued job: the queue chosen at admission (so the unit
/// can be re-created as admitted if it goes missing).
pub const QUEUE_ANNOTATION: &str = "koord-queue/queue";
/// Namespace label that opts a namespace into queueing.
pub const ENABLED_NAMESPACE_LABEL: &str = "koord-queue/enabled";
/// Namespace annotation naming the queue of jobs that name no quota.
pub const DEFAULT_QUEUE_ANNOTATION: &str = "koord-queue/default-queue";
/// Annotation of a parent ElasticQuota: `"true"` makes its children share
/// what lies above their mins by weight (docs/quota.md, fair sharing).
pub const FAIR_SHARING_ANNOTATION: &str = "koord-queue/fair-sharing";
/// Annotation of an ElasticQuota: its weight among its siblings under a
/// fair-sharing parent, a positive decimal (default 1, up to 3 decimals).
pub const FAIR_SHARE_WEIGHT_ANNOTATION: &str = "koord-queue/fair-share-weight";
/// ElasticQuota label choosing the policy of its auto-created Queue.
pub const QUEUE_POLICY_LABEL: &str = "koord-queue/queue-policy";
/// Namespace label that opts a namespace (already selected by the webhook's
/// namespace selector) in to queueing its Pods: the chart's pod webhooks
/// select it.
pub const QUEUE_PODS_NAMESPACE_LABEL: &str = "koord-queue/queue-pods";
/// Namespace label (the administrator's) letting pods that are no queued
/// job's child run unqueued in an opted-in namespace that does not queue
/// pods (value `allow`). Without it the webhook refuses them there.
pub const UNQUEUED_PODS_NAMESPACE_LABEL: &str = "koord-queue/unqueued-pods";
/// Label the webhook puts on queued objects of kinds the scheduler watches
/// by label (`JobAdapter::labels_queued`: Pods). Set at admission and never
/// changed by anyone else: the scheduler would lose the object.
pub const QUEUED_LABEL: &str = "koord-queue/queued";
/// Label the webhook puts on a proven child pod: the uid of the queued job
/// whose unit pays for it (the first queued ancestor). The pods one unit
/// pays for are counted by it; only the webhook sets it.
pub const CHARGED_TO_LABEL: &str = "koord-queue/charged-to";
/// Annotation the webhook puts on a proven child pod: the uid of the
/// admission request that created it, by which the webhook tells a pod it
/// admitted a moment ago (named by `generateName` after admission) in a list.
pub const ADMISSION_ANNOTATION: &str = "koord-queue/admission";
/// Annotation of a Namespace or an ElasticQuota (the administrator's): the
/// PriorityClasses its jobs may name, comma-separated. Absent: any class but
/// the cluster's own `system-…` ones.
pub const PRIORITY_CLASSES_ANNOTATION: &str = "koord-queue/priority-classes";
/// Finalizer of a QueueUnit while what it paid for may run: the webhook
/// creates every unit with it, and the scheduler takes it off once the unit
/// has ended or is being deleted and no pod it paid for is alive — so that a
/// deleted unit, and the quota it holds, outlive its job's pods, also across
/// a scheduler restart (docs/reliability.md).
pub const QUOTA_FINALIZER: &str = "koord-queue/quota-held";
/// The prefix of Koord-Queue's own labels and annotations. On a managed
/// job's child they are the webhook's alone: a tenant's are removed at
/// creation and cannot be added or changed later.
pub const KEY_PREFIX: &str = "koord-queue/";
/// Workflow annotation with the job's total resources as a ResourceList JSON
/// object (Argo workflows have no pod template to read them from).
pub const MIN_RESOURCES_ANNOTATION: &str = "koord-queue/min-resources";
