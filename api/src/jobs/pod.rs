//! `v1` Pod, queued on its own (a notebook's or a home-made launcher's pod,
//! a pod of a StatefulSet or ReplicaSet in a namespace that queues pods).
//!
//! A Pod has no suspend field. It is held by a scheduling gate the webhook
//! adds at creation: kube-scheduler does not place a pod while any gate is
//! listed. The scheduler releases it by removing that gate (and only that
//! gate: other systems' gates stay, so the release is a strategic merge patch
//! that deletes one list entry). Kubernetes lets a gate be removed from a
//! pod, never added after creation: a released pod cannot be held again, so
//! sending it back (a reclaim, a preemption, a hold after someone else
//! removed the gate) deletes it, as Kueue does with plain pods. Its owner —
//! a user, a StatefulSet — creates it again, and the new pod queues anew.

use serde_json::{Value, json};

use super::hold::{FieldPath, HoldStyle};
use super::json::get_path;
use super::pod_group::{self, GroupSource, Membership, PodGrouping, PodGroups};
use super::pod_request::pod_spec_requests;
use super::{AdapterError, JobAdapter, JobKind, JobState, PodSetInfo, SizeInput};

/// The `v1` Pod kind.
pub static POD_KIND: JobKind = JobKind {
    group: "",
    version: "v1",
    kind: "Pod",
    plural: "pods",
    extension: "pod",
};

/// The scheduling gate that holds a queued pod.
pub const SCHEDULING_GATE: &str = "koord-queue.x-k8s.io/admission";

/// Adapter for Pods.
#[derive(Debug)]
pub struct PodAdapter;

impl JobAdapter for PodAdapter {
    fn kind(&self) -> &'static JobKind {
        &POD_KIND
    }

    /// The gate [`SCHEDULING_GATE`], which the release removes alone.
    fn hold_style(&self) -> HoldStyle {
        HoldStyle::SchedulingGate(SCHEDULING_GATE)
    }

    fn labels_queued(&self) -> bool {
        true
    }

    /// A pod is queued on its own or as a member of a pod group.
    fn grouping(&self) -> Option<&'static dyn PodGrouping> {
        Some(&PodGroups)
    }

    /// One pod set `main` of one pod: what Kubernetes' pod request rule
    /// gives for the spec (containers, init containers, overhead). A member
    /// of a pod group sizes the group's unit
    /// ([`pod_group::unit_pod_sets`]).
    fn pod_sets(&self, pod: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        let spec = match get_path(pod, &["spec"]) {
            Some(spec) if spec.is_object() => spec,
            _ => {
                return Err(AdapterError::Invalid {
                    path: "spec".into(),
                    reason: "a Pod needs a spec object".into(),
                });
            }
        };
        let template = json!({
            "metadata": get_path(pod, &["metadata"]).cloned().unwrap_or(json!({})),
            "spec": spec,
        });
        Ok(vec![PodSetInfo {
            name: "main".to_string(),
            count: 1,
            per_pod: pod_spec_requests(spec)?,
            template,
        }])
    }

    /// A LeaderWorkerSet's pod sizes its group's unit from its
    /// LeaderWorkerSet, read by the caller and attached.
    fn size_input(&self, pod: &Value) -> Option<Result<SizeInput, AdapterError>> {
        match pod_group::membership(pod)? {
            Ok(Membership {
                source: GroupSource::LeaderWorkerSet { set, .. },
                ..
            }) => Some(Ok(SizeInput {
                kind: &pod_group::LWS_KIND,
                namespaced: true,
                name: set,
                named_by: "label leaderworkerset.sigs.k8s.io/name",
            })),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        }
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[&["status", "phase"]]
    }

    fn state(&self, pod: &Value) -> JobState {
        match get_path(pod, &["status", "phase"]).and_then(Value::as_str) {
            Some("Succeeded") => JobState::Succeeded,
            Some("Failed") => JobState::Failed,
            Some("Running") => JobState::Running,
            _ => JobState::Pending,
        }
    }

    /// `spec.activeDeadlineSeconds`: the kubelet fails the pod then.
    fn max_run_seconds(&self, pod: &Value) -> Option<i64> {
        super::deadline_seconds(pod, &["spec", "activeDeadlineSeconds"])
    }

    fn priority_class_name(&self, pod: &Value) -> Option<String> {
        get_path(pod, &["spec", "priorityClassName"])
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::HoldWrite;
    use crate::jobs::pod_group::unit_pod_sets;
    use crate::jobs::test_support::{GI, container};
    use crate::jobs::total_resources;

    fn pod(gates: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "notebook", "namespace": "team-a"},
            "spec": {
                "schedulingGates": gates,
                "priorityClassName": "high",
                "initContainers": [container("4", "1Gi")],
                "containers": [container("1", "2Gi"), container("1", "2Gi")],
                "overhead": {"cpu": "250m"},
            }
        })
    }

    #[test]
    fn the_gate_holds_and_other_gates_stay() {
        let other = json!({"name": "example.com/quota-check"});
        let mut p = pod(json!([other]));
        assert!(!PodAdapter.is_held(&p));
        PodAdapter.hold(&mut p);
        PodAdapter.hold(&mut p);
        assert_eq!(
            p["spec"]["schedulingGates"],
            json!([other, {"name": SCHEDULING_GATE}])
        );
        assert!(PodAdapter.is_held(&p));
        PodAdapter.release(&mut p);
        assert_eq!(p["spec"]["schedulingGates"], json!([other]));
        assert!(!PodAdapter.is_held(&p));
        // A pod without the list is held by one that has only the gate.
        let mut bare = json!({"spec": {"containers": []}});
        PodAdapter.hold(&mut bare);
        assert_eq!(
            bare["spec"]["schedulingGates"],
            json!([{"name": SCHEDULING_GATE}])
        );
    }

    #[test]
    fn removing_another_gate_does_not_lift_the_hold_removing_ours_does() {
        let other = json!({"name": "example.com/quota-check"});
        let mut held = pod(json!([other]));
        PodAdapter.hold(&mut held);
        let mut others_gone = held.clone();
        others_gone["spec"]["schedulingGates"] = json!([{"name": SCHEDULING_GATE}]);
        assert!(!crate::jobs::guard::loosens_hold(
            &PodAdapter,
            &held,
            &others_gone
        ));
        let mut ours_gone = held.clone();
        PodAdapter.release(&mut ours_gone);
        assert!(crate::jobs::guard::loosens_hold(
            &PodAdapter,
            &held,
            &ours_gone
        ));
    }

    #[test]
    fn size_is_one_pod_by_the_pod_request_rule() {
        let sets = PodAdapter.pod_sets(&pod(json!([]))).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].count, 1);
        let total = total_resources(&sets);
        // max(init 4, containers 1 + 1) + overhead 0.25
        assert_eq!(total.get("cpu"), 4_250);
        assert_eq!(total.get("memory"), 4 * GI);
        assert_eq!(
            PodAdapter.priority_class_name(&pod(json!([]))).as_deref(),
            Some("high")
        );
        let err = PodAdapter.pod_sets(&json!({"metadata": {}})).unwrap_err();
        assert!(err.to_string().contains("spec"), "{err}");
    }

    #[test]
    fn a_pod_that_names_its_node_cannot_be_held() {
        let mut p = pod(json!([]));
        assert_eq!(PodAdapter.cannot_hold(&p), None);
        p["spec"]["nodeName"] = json!("node-1");
        let reason = PodAdapter.cannot_hold(&p).unwrap();
        assert!(
            reason.contains("node-1") && reason.contains("nodeSelector"),
            "{reason}"
        );
    }

    #[test]
    fn state_follows_the_phase() {
        let with = |phase: &str| json!({"status": {"phase": phase}});
        assert_eq!(PodAdapter.state(&with("Succeeded")), JobState::Succeeded);
        assert_eq!(PodAdapter.state(&with("Failed")), JobState::Failed);
        assert_eq!(PodAdapter.state(&with("Running")), JobState::Running);
        assert_eq!(PodAdapter.state(&with("Pending")), JobState::Pending);
        assert_eq!(PodAdapter.state(&json!({})), JobState::Pending);
    }

    #[test]
    fn the_release_removes_only_our_gate_and_a_hold_deletes() {
        let HoldWrite::Strategic(patch) = crate::jobs::release_write(&PodAdapter) else {
            panic!("a strategic merge patch")
        };
        assert_eq!(
            patch["spec"]["schedulingGates"][0]["name"],
            json!(SCHEDULING_GATE)
        );
        assert_eq!(crate::jobs::hold_write(&PodAdapter), HoldWrite::Delete);
    }

    fn member(labels: Value, annotations: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "m-0", "namespace": "team-a", "labels": labels, "annotations": annotations},
            "spec": {"containers": [container("2", "1Gi")]},
        })
    }

    #[test]
    fn a_plain_group_is_size_pods_like_its_member_and_its_unit_names_the_group() {
        use crate::jobs::pod_group::{POD_GROUP_LABEL, POD_GROUP_SIZE_ANNOTATION};
        let p = member(
            json!({POD_GROUP_LABEL: "train"}),
            json!({POD_GROUP_SIZE_ANNOTATION: "4"}),
        );
        let sets = unit_pod_sets(&PodAdapter, &p).unwrap();
        assert_eq!((sets.len(), sets[0].count), (1, 4));
        // The pod's own size stays one pod (what an update may not grow).
        assert_eq!(PodAdapter.pod_sets(&p).unwrap()[0].count, 1);
        assert_eq!(total_resources(&sets).get("cpu"), 8000);
        assert!(PodAdapter.size_input(&p).is_none());
        let unit = crate::jobs::queue_unit(
            &PodAdapter,
            &p,
            crate::jobs::UnitPlacement {
                namespace: "team-a".into(),
                job_name: "m-0".into(),
                unit_name: "train-group".into(),
                queue: "q".into(),
                priority_class_name: None,
                priority: 0,
            },
        )
        .unwrap();
        assert_eq!(unit.spec.consumer_ref.kind.as_deref(), Some("PodGroup"));
        assert_eq!(unit.spec.consumer_ref.name.as_deref(), Some("train"));
    }

    #[test]
    fn an_lws_group_is_sized_from_its_leaderworkerset() {
        use crate::jobs::pod_group::*;
        let mut p = member(
            json!({LWS_NAME_LABEL: "llama", LWS_GROUP_INDEX_LABEL: "0", LWS_WORKER_INDEX_LABEL: "1"}),
            json!({LWS_SIZE_ANNOTATION: "3"}),
        );
        let input = PodAdapter.size_input(&p).unwrap().unwrap();
        assert_eq!(
            (input.kind.kind, input.name.as_str()),
            ("LeaderWorkerSet", "llama")
        );
        // Not read yet: no size.
        assert!(unit_pod_sets(&PodAdapter, &p).is_err());
        let template = |cpu: &str| json!({"spec": {"containers": [container(cpu, "1Gi")]}});
        crate::jobs::attach_size_input(
            &mut p,
            json!({"spec": {"leaderWorkerTemplate": {
                "size": 3, "leaderTemplate": template("1"), "workerTemplate": template("4"),
            }}}),
        );
        let sets = unit_pod_sets(&PodAdapter, &p).unwrap();
        let shape: Vec<_> = sets
            .iter()
            .map(|s| (s.name.as_str(), s.count, s.per_pod.get("cpu")))
            .collect();
        assert_eq!(shape, [("leader", 1, 1000), ("worker", 2, 4000)]);
        // Without a leader template the leader is a worker; size 1 is a leader alone.
        crate::jobs::attach_size_input(
            &mut p,
            json!({"spec": {"leaderWorkerTemplate": {"workerTemplate": template("4")}}}),
        );
        let sets = unit_pod_sets(&PodAdapter, &p).unwrap();
        let shape: Vec<_> = sets
            .iter()
            .map(|s| (s.name.as_str(), s.count, s.per_pod.get("cpu")))
            .collect();
        assert_eq!(shape, [("leader", 1, 4000)]);
    }
}
