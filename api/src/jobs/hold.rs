//! How a job kind is held, as data: each adapter names its [`HoldStyle`]
//! and this module is the one implementation of holding, releasing, telling
//! a held job and writing a release or a send-back (architecture §5).

use serde_json::{Value, json};

use super::json::{annotation, get_path, is_true, remove_annotation, set_annotation, set_path};
use crate::keys::SUSPEND_ANNOTATION;

/// A JSON path from an object's root, e.g. `["spec", "suspend"]`.
pub type FieldPath = &'static [&'static str];

/// `spec.suspend`: the native suspend field of most kinds.
pub const SPEC_SUSPEND: FieldPath = &["spec", "suspend"];

/// The suspend annotation, a marker of the kinds whose native suspend field
/// is recent (or read by the operator only with it).
const SUSPEND_ANNOTATION_PATH: FieldPath = &["metadata", "annotations", SUSPEND_ANNOTATION];

/// Where a Pod lists its scheduling gates.
pub const SCHEDULING_GATES: FieldPath = &["spec", "schedulingGates"];

/// What holds a job of a kind: the markers the webhook sets at admission,
/// which the scheduler alone lifts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldStyle {
    /// A native boolean field that holds while `true` (`spec.suspend` of a
    /// batch Job, a JobSet, a TrainJob, a RayCluster, a Workflow).
    SuspendField(FieldPath),
    /// The suspend annotation (`"true"`) and a native boolean field, both
    /// set at admission; removing either lifts the hold.
    AnnotationAndField {
        /// The native field.
        field: FieldPath,
        /// Whether a job without the field is held by the annotation alone.
        /// `true` where a CRD older than the field prunes it (Kubeflow's
        /// `runPolicy.suspend`, Spark's `spec.suspend` before spark-operator
        /// 2.4): the annotation is then the only marker the operator sees,
        /// and the job stays held. `false` where every served version has
        /// the field (RayJob's `spec.suspend`, in every `ray.io/v1` CRD):
        /// an absent field was removed, KubeRay reads only the field and
        /// runs the job, so it is not held.
        absent_field_holds: bool,
    },
    /// A scheduling gate in `spec.schedulingGates` (a Pod, which has no
    /// suspend field): kube-scheduler places no pod while a gate is listed.
    /// Kubernetes lets a gate be removed, never added after creation: the
    /// release removes only this gate (others' stay), and a released pod
    /// cannot be held again — sending it back deletes it.
    SchedulingGate(&'static str),
}

/// A write that lifts or puts back a job's hold without reading the job
/// first (the scheduler's release and send-back).
#[derive(Clone, Debug, PartialEq)]
pub enum HoldWrite {
    /// An RFC 7386 merge patch.
    Merge(Value),
    /// A Kubernetes strategic merge patch (core kinds only).
    Strategic(Value),
    /// The hold cannot be put back (a Pod's scheduling gate): the object is
    /// deleted instead.
    Delete,
}

impl HoldStyle {
    /// The hold of most kinds: `spec.suspend: true`.
    pub const SPEC_SUSPEND: HoldStyle = HoldStyle::SuspendField(SPEC_SUSPEND);

    /// Edits `job` so that it is held. Idempotent.
    pub fn hold(&self, job: &mut Value) {
        match *self {
            HoldStyle::SuspendField(field) => set_path(job, field, json!(true)),
            HoldStyle::AnnotationAndField { field, .. } => {
                set_annotation(job, SUSPEND_ANNOTATION, "true");
                set_path(job, field, json!(true));
            }
            HoldStyle::SchedulingGate(gate) => {
                if gated(job, gate) {
                    return;
                }
                let mut gates = gates(job).to_vec();
                gates.push(json!({ "name": gate }));
                set_path(job, SCHEDULING_GATES, Value::Array(gates));
            }
        }
    }

    /// Edits `job` so that it is released. Idempotent.
    pub fn release(&self, job: &mut Value) {
        match *self {
            HoldStyle::SuspendField(field) => set_path(job, field, json!(false)),
            HoldStyle::AnnotationAndField { field, .. } => {
                remove_annotation(job, SUSPEND_ANNOTATION);
                set_path(job, field, json!(false));
            }
            HoldStyle::SchedulingGate(gate) => {
                if !gated(job, gate) {
                    return;
                }
                let others: Vec<Value> = gates(job)
                    .iter()
                    .filter(|g| !is_gate(g, gate))
                    .cloned()
                    .collect();
                set_path(job, SCHEDULING_GATES, Value::Array(others));
            }
        }
    }

    /// Whether `job` is held: every marker [`HoldStyle::hold`] sets is
    /// present, so removing any one of them (say, the suspend annotation)
    /// counts as lifting the hold — but see `absent_field_holds`.
    pub fn is_held(&self, job: &Value) -> bool {
        match *self {
            HoldStyle::SuspendField(field) => is_true(job, field),
            HoldStyle::AnnotationAndField {
                field,
                absent_field_holds,
            } => {
                let field = get_path(job, field).and_then(Value::as_bool);
                annotation(job, SUSPEND_ANNOTATION) == Some("true")
                    && match field {
                        Some(suspended) => suspended,
                        None => absent_field_holds,
                    }
            }
            HoldStyle::SchedulingGate(gate) => gated(job, gate),
        }
    }

    /// The paths of the markers [`HoldStyle::hold`] sets. Changing any of
    /// them is lifting the hold ([`super::guard::loosens_hold`]), which only
    /// the scheduler may do.
    pub fn markers(&self) -> Vec<FieldPath> {
        match *self {
            HoldStyle::SuspendField(field) => vec![field],
            HoldStyle::AnnotationAndField { field, .. } => vec![SUSPEND_ANNOTATION_PATH, field],
            HoldStyle::SchedulingGate(_) => vec![SCHEDULING_GATES],
        }
    }

    /// The marker outside the annotations, which a watcher keeps of every
    /// job to tell whether it is held ([`super::watched`]).
    pub fn field(&self) -> FieldPath {
        match *self {
            HoldStyle::SuspendField(field) | HoldStyle::AnnotationAndField { field, .. } => field,
            HoldStyle::SchedulingGate(_) => SCHEDULING_GATES,
        }
    }

    /// The write that lifts the hold (the scheduler's release): the merge
    /// patch of the markers from held to released; for a gate, a strategic
    /// merge patch deleting only that gate (a merge patch would replace the
    /// list, and others' gates with it).
    pub fn release_write(&self) -> HoldWrite {
        match *self {
            HoldStyle::SchedulingGate(gate) => {
                HoldWrite::Strategic(json!({ "spec": { "schedulingGates": [
                    { "$patch": "delete", "name": gate }
                ]}}))
            }
            _ => self.marker_patch(true),
        }
    }

    /// The write that puts the hold back on a released job (the
    /// scheduler's send-back): the merge patch of the markers from released
    /// to held; a gate cannot be added to a pod, which is deleted instead.
    pub fn hold_write(&self) -> HoldWrite {
        match *self {
            HoldStyle::SchedulingGate(_) => HoldWrite::Delete,
            _ => self.marker_patch(false),
        }
    }

    /// Why `job` cannot be held this way, if it cannot: a Pod that names its
    /// node bypasses kube-scheduler, and so the gate.
    pub fn cannot_hold(&self, job: &Value) -> Option<String> {
        let HoldStyle::SchedulingGate(_) = self else {
            return None;
        };
        get_path(job, &["spec", "nodeName"])
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(|node| {
                format!(
                    "it names its node ({node}) in spec.nodeName, which bypasses kube-scheduler and so \
                     the queue's scheduling gate; a queued Pod is placed once released: name the node \
                     with a nodeSelector or node affinity instead"
                )
            })
    }

    /// The merge patch turning a held job into a released one (`release`),
    /// or back (`!release`), from the markers alone.
    fn marker_patch(&self, release: bool) -> HoldWrite {
        let mut held = Value::Object(Default::default());
        self.hold(&mut held);
        let mut released = held.clone();
        self.release(&mut released);
        HoldWrite::Merge(if release {
            merge_patch(&held, &released)
        } else {
            merge_patch(&released, &held)
        })
    }
}

/// The scheduling gates `pod` lists.
fn gates(pod: &Value) -> &[Value] {
    get_path(pod, SCHEDULING_GATES)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn is_gate(listed: &Value, gate: &str) -> bool {
    listed.get("name").and_then(Value::as_str) == Some(gate)
}

/// Whether `pod` lists `gate`.
fn gated(pod: &Value, gate: &str) -> bool {
    gates(pod).iter().any(|g| is_gate(g, gate))
}

/// An RFC 7386 merge patch turning `from` into `to` (objects only).
pub fn merge_patch(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in b {
                match a.get(k) {
                    Some(old) if old == v => {}
                    Some(old) if old.is_object() && v.is_object() => {
                        patch.insert(k.clone(), merge_patch(old, v));
                    }
                    _ => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in a.keys() {
                if !b.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        (_, to) => to.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELD: FieldPath = &["spec", "runPolicy", "suspend"];

    fn with(annotation: Option<&str>, field: Option<bool>) -> Value {
        let mut job = json!({"metadata": {"annotations": {}}, "spec": {"runPolicy": {}}});
        if let Some(a) = annotation {
            set_annotation(&mut job, SUSPEND_ANNOTATION, a);
        }
        if let Some(f) = field {
            set_path(&mut job, FIELD, json!(f));
        }
        job
    }

    #[test]
    fn an_absent_field_holds_only_where_older_crds_prune_it() {
        let prunable = HoldStyle::AnnotationAndField {
            field: FIELD,
            absent_field_holds: true,
        };
        let always_served = HoldStyle::AnnotationAndField {
            field: FIELD,
            absent_field_holds: false,
        };
        for style in [prunable, always_served] {
            assert!(style.is_held(&with(Some("true"), Some(true))));
            assert!(!style.is_held(&with(Some("true"), Some(false))));
            assert!(!style.is_held(&with(None, Some(true))));
            assert!(!style.is_held(&with(Some("false"), Some(true))));
        }
        assert!(prunable.is_held(&with(Some("true"), None)));
        assert!(!always_served.is_held(&with(Some("true"), None)));
    }

    #[test]
    fn writes_touch_only_the_markers() {
        assert_eq!(
            HoldStyle::SPEC_SUSPEND.release_write(),
            HoldWrite::Merge(json!({"spec": {"suspend": false}}))
        );
        assert_eq!(
            HoldStyle::SPEC_SUSPEND.hold_write(),
            HoldWrite::Merge(json!({"spec": {"suspend": true}}))
        );
        let both = HoldStyle::AnnotationAndField {
            field: FIELD,
            absent_field_holds: true,
        };
        assert_eq!(
            both.release_write(),
            HoldWrite::Merge(json!({
                "metadata": {"annotations": {SUSPEND_ANNOTATION: null}},
                "spec": {"runPolicy": {"suspend": false}},
            }))
        );
        assert_eq!(both.field(), FIELD);
        assert_eq!(both.markers().len(), 2);
    }
}
