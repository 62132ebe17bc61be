//! Kubeflow jobs (TFJob, PyTorchJob, MPIJob): a map of replica types to
//! `{replicas, template}` and a shared `spec.runPolicy`. Held with both the
//! suspend annotation (for operators that predate `runPolicy.suspend`) and
//! `spec.runPolicy.suspend`.

use serde_json::Value;

use super::batch_job::BATCH_JOB_KIND;
use super::guard::pod_sets_total;
use super::hold::{FieldPath, HoldStyle};
use super::json::{
    condition_true, get_path, invalid, non_empty, opt_count, opt_object, template,
    template_priority_class,
};
use super::pod_request::template_requests_at;
use super::{AdapterError, JobAdapter, JobKind, JobState, PodSetInfo};
use crate::resources::Resources;

/// The `kubeflow.org/v1` TFJob kind.
pub static TF_JOB_KIND: JobKind = JobKind {
    group: "kubeflow.org",
    version: "v1",
    kind: "TFJob",
    plural: "tfjobs",
    extension: "tf",
};

/// The `kubeflow.org/v1` PyTorchJob kind.
pub static PYTORCH_JOB_KIND: JobKind = JobKind {
    group: "kubeflow.org",
    version: "v1",
    kind: "PyTorchJob",
    plural: "pytorchjobs",
    extension: "pytorch",
};

/// The `kubeflow.org/v2beta1` MPIJob kind.
pub static MPI_JOB_KIND: JobKind = JobKind {
    group: "kubeflow.org",
    version: "v2beta1",
    kind: "MPIJob",
    plural: "mpijobs",
    extension: "mpi",
};

/// Adapter for a Kubeflow job kind whose replica specs live under
/// `spec.<replica_specs>`.
#[derive(Debug)]
pub struct KubeflowJobAdapter {
    kind: &'static JobKind,
    replica_specs: &'static str,
    /// The replica type run by a launcher Job the operator creates, named
    /// `<job>-launcher` (mpi-operator v2); `None` when the operator creates
    /// pods only.
    launcher: Option<&'static str>,
    /// How its jobs are held.
    hold: HoldStyle,
}

/// Adapter for TFJobs (`spec.tfReplicaSpecs`).
pub static TF_JOB: KubeflowJobAdapter = KubeflowJobAdapter {
    kind: &TF_JOB_KIND,
    replica_specs: "tfReplicaSpecs",
    launcher: None,
    hold: KUBEFLOW_HOLD,
};

/// Adapter for PyTorchJobs (`spec.pytorchReplicaSpecs`).
pub static PYTORCH_JOB: KubeflowJobAdapter = KubeflowJobAdapter {
    kind: &PYTORCH_JOB_KIND,
    replica_specs: "pytorchReplicaSpecs",
    launcher: None,
    hold: KUBEFLOW_HOLD,
};

/// Adapter for MPIJobs (`spec.mpiReplicaSpecs`: `Launcher` and `Worker`).
pub static MPI_JOB: KubeflowJobAdapter = KubeflowJobAdapter {
    kind: &MPI_JOB_KIND,
    replica_specs: "mpiReplicaSpecs",
    launcher: Some("Launcher"),
    hold: KUBEFLOW_HOLD,
};

const RUN_POLICY_SUSPEND: FieldPath = &["spec", "runPolicy", "suspend"];

/// The suspend annotation (for operators that predate `runPolicy.suspend`)
/// and `runPolicy.suspend`. A job without the field stays held by the
/// annotation: a CRD older than `runPolicy.suspend` prunes it, leaving the
/// annotation as the only marker the operator reads.
const KUBEFLOW_HOLD: HoldStyle = HoldStyle::AnnotationAndField {
    field: RUN_POLICY_SUSPEND,
    absent_field_holds: true,
};

impl KubeflowJobAdapter {
    /// The replica specs sorted by replica type, each with its JSON path.
    fn replica_specs<'a>(
        &self,
        job: &'a Value,
    ) -> Result<Vec<(&'a str, &'a Value, String)>, AdapterError> {
        let path = format!("spec.{}", self.replica_specs);
        let Some(specs) = opt_object(get_path(job, &["spec", self.replica_specs]), &path)? else {
            return Err(invalid(&path, "at least one replica spec is required"));
        };
        let mut out: Vec<_> = specs
            .iter()
            .map(|(name, spec)| (name.as_str(), spec, format!("{path}.{name}")))
            .collect();
        out.sort_by(|a, b| a.0.cmp(b.0));
        Ok(out)
    }
}

impl JobAdapter for KubeflowJobAdapter {
    fn kind(&self) -> &'static JobKind {
        self.kind
    }

    fn hold_style(&self) -> HoldStyle {
        self.hold
    }

    /// One pod set per replica type (sorted by name), `replicas` pods (default 1).
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        self.replica_specs(job)?
            .into_iter()
            .map(|(name, spec, path)| {
                if opt_object(Some(spec), &path)?.is_none() {
                    return Err(invalid(&path, "expected a replica spec object, found null"));
                }
                let count =
                    opt_count(spec.get("replicas"), &format!("{path}.replicas"))?.unwrap_or(1);
                let template_path = format!("{path}.template");
                let template = template(spec.get("template"), &template_path)?;
                Ok(PodSetInfo {
                    name: name.to_string(),
                    count,
                    per_pod: template_requests_at(template, &template_path)?,
                    template: template.clone(),
                })
            })
            .collect()
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[&["status", "conditions"]]
    }

    /// From the job's conditions: `Succeeded`/`Failed` end it; `Running` (and
    /// `Restarting`, whose pods are being replaced while it keeps its quota)
    /// mean it runs.
    fn state(&self, job: &Value) -> JobState {
        if condition_true(job, "Succeeded") {
            JobState::Succeeded
        } else if condition_true(job, "Failed") {
            JobState::Failed
        } else if condition_true(job, "Running") || condition_true(job, "Restarting") {
            JobState::Running
        } else {
            JobState::Pending
        }
    }

    /// `spec.runPolicy.schedulingPolicy.priorityClass`, else the first replica
    /// template (by replica type) that names one.
    /// `spec.runPolicy.activeDeadlineSeconds`: the operator ends the job then.
    fn max_run_seconds(&self, job: &Value) -> Option<i64> {
        super::deadline_seconds(job, &["spec", "runPolicy", "activeDeadlineSeconds"])
    }

    fn priority_class_name(&self, job: &Value) -> Option<String> {
        non_empty(get_path(
            job,
            &["spec", "runPolicy", "schedulingPolicy", "priorityClass"],
        ))
        .or_else(|| {
            self.replica_specs(job)
                .ok()?
                .into_iter()
                .find_map(|(_, spec, _)| spec.get("template").and_then(template_priority_class))
        })
    }

    /// mpi-operator's launcher Job `<job>-launcher` runs the `Launcher`
    /// replica; the workers are pods.
    fn child_budget(
        &self,
        owner: &Value,
        child: &'static JobKind,
        child_name: &str,
    ) -> Option<Result<Resources, AdapterError>> {
        let launcher = self.launcher?;
        let owner_name = get_path(owner, &["metadata", "name"])?.as_str()?;
        if child != &BATCH_JOB_KIND || child_name != format!("{owner_name}-launcher") {
            return None;
        }
        Some(
            self.pod_sets(owner)
                .map(|sets| pod_sets_total(&sets, &[launcher])),
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::json::{remove_annotation, set_annotation, set_path};
    use crate::jobs::test_support::{
        GI, assert_hold_release, container, gpu_container, malformed, pod_template,
    };
    use crate::jobs::total_resources;
    use crate::keys::SUSPEND_ANNOTATION;

    fn tfjob() -> Value {
        json!({
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": "mnist", "namespace": "team-a"},
            "spec": {
                "runPolicy": {"cleanPodPolicy": "None"},
                "tfReplicaSpecs": {
                    "Worker": {"replicas": 3, "restartPolicy": "OnFailure",
                               "template": pod_template("", vec![gpu_container("4", "8Gi", 1)])},
                    "PS": {"replicas": 2, "restartPolicy": "Never",
                           "template": pod_template("", vec![container("1", "2Gi")])},
                    "Chief": {"template": pod_template("", vec![container("2", "4Gi")])},
                }
            }
        })
    }

    fn pytorchjob() -> Value {
        json!({
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "resnet", "namespace": "team-a", "annotations": {"owner": "ml"}},
            "spec": {
                "runPolicy": {"schedulingPolicy": {"priorityClass": "urgent"}},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": pod_template("normal", vec![container("2", "4Gi")])},
                    "Worker": {"replicas": 4, "template": pod_template("normal", vec![gpu_container("8", "32Gi", 2)])},
                }
            }
        })
    }

    fn mpijob() -> Value {
        json!({
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "allreduce", "namespace": "team-b"},
            "spec": {
                "slotsPerWorker": 1,
                "runPolicy": {"cleanPodPolicy": "Running"},
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "template": pod_template("", vec![container("500m", "512Mi")])},
                    "Worker": {"replicas": 2, "template": pod_template("batch-low", vec![container("4", "8Gi")])},
                }
            }
        })
    }

    #[test]
    fn hold_sets_annotation_and_run_policy() {
        for (adapter, job) in [
            (&TF_JOB, tfjob()),
            (&PYTORCH_JOB, pytorchjob()),
            (&MPI_JOB, mpijob()),
        ] {
            let (held, released) = assert_hold_release(adapter, &job);
            assert_eq!(
                held["metadata"]["annotations"][SUSPEND_ANNOTATION],
                json!("true")
            );
            assert_eq!(held["spec"]["runPolicy"]["suspend"], json!(true));
            // The rest of runPolicy is kept.
            assert_eq!(
                held["spec"]["runPolicy"].as_object().unwrap().len(),
                job["spec"]["runPolicy"].as_object().unwrap().len() + 1
            );
            assert_eq!(released["spec"]["runPolicy"]["suspend"], json!(false));
            assert!(released["metadata"]["annotations"].is_object());
            assert_eq!(
                released["metadata"]["annotations"].get(SUSPEND_ANNOTATION),
                None
            );
        }
        // Existing annotations survive hold and release.
        let (held, released) = assert_hold_release(&PYTORCH_JOB, &pytorchjob());
        assert_eq!(held["metadata"]["annotations"]["owner"], json!("ml"));
        assert_eq!(released["metadata"]["annotations"], json!({"owner": "ml"}));
    }

    #[test]
    fn removing_either_marker_lifts_the_hold() {
        let mut held = tfjob();
        TF_JOB.hold(&mut held);
        let mut no_annotation = held.clone();
        remove_annotation(&mut no_annotation, SUSPEND_ANNOTATION);
        assert!(!TF_JOB.is_held(&no_annotation));
        let mut no_suspend = held.clone();
        set_path(&mut no_suspend, RUN_POLICY_SUSPEND, json!(false));
        assert!(!TF_JOB.is_held(&no_suspend));
        let mut wrong_value = held.clone();
        set_annotation(&mut wrong_value, SUSPEND_ANNOTATION, "false");
        assert!(!TF_JOB.is_held(&wrong_value));
        // A CRD without runPolicy.suspend prunes it: the annotation still holds.
        let mut pruned = held;
        pruned["spec"]["runPolicy"]
            .as_object_mut()
            .unwrap()
            .remove("suspend");
        assert!(TF_JOB.is_held(&pruned));
        // The field alone does not.
        let mut only_field = tfjob();
        set_path(&mut only_field, RUN_POLICY_SUSPEND, json!(true));
        assert!(!TF_JOB.is_held(&only_field));
    }

    #[test]
    fn one_pod_set_per_replica_type() {
        let sets = TF_JOB.pod_sets(&tfjob()).unwrap();
        let names: Vec<_> = sets.iter().map(|s| (s.name.as_str(), s.count)).collect();
        assert_eq!(names, [("Chief", 1), ("PS", 2), ("Worker", 3)]);
        assert_eq!(
            sets[2].template,
            tfjob()["spec"]["tfReplicaSpecs"]["Worker"]["template"]
        );
        assert_eq!(sets[2].per_pod.get("nvidia.com/gpu"), 1);
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 2000 + 2 * 1000 + 3 * 4000);
        assert_eq!(total.get("memory"), (4 + 2 * 2 + 3 * 8) * GI);
        assert_eq!(total.get("nvidia.com/gpu"), 3);

        let total = total_resources(&PYTORCH_JOB.pod_sets(&pytorchjob()).unwrap());
        assert_eq!(total.get("cpu"), 2000 + 4 * 8000);
        assert_eq!(total.get("memory"), (4 + 4 * 32) * GI);
        assert_eq!(total.get("nvidia.com/gpu"), 8);

        let sets = MPI_JOB.pod_sets(&mpijob()).unwrap();
        let names: Vec<_> = sets.iter().map(|s| (s.name.as_str(), s.count)).collect();
        assert_eq!(names, [("Launcher", 1), ("Worker", 2)]);
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 500 + 2 * 4000);
        assert_eq!(total.get("memory"), 512 * (1 << 20) + 16 * GI);
    }

    #[test]
    fn malformed_replica_specs_are_refused() {
        let at = ["spec", "tfReplicaSpecs", "Worker"];
        for (patch, path) in [
            (
                json!({"replicas": "3"}),
                "spec.tfReplicaSpecs.Worker.replicas",
            ),
            (
                json!({"replicas": -2}),
                "spec.tfReplicaSpecs.Worker.replicas",
            ),
            (
                json!({"template": []}),
                "spec.tfReplicaSpecs.Worker.template",
            ),
            (
                json!({"template": null}),
                "spec.tfReplicaSpecs.Worker.template",
            ),
        ] {
            malformed(&TF_JOB, &tfjob(), &at, patch, path);
        }
        malformed(
            &TF_JOB,
            &tfjob(),
            &["spec"],
            json!({"tfReplicaSpecs": null}),
            "spec.tfReplicaSpecs",
        );
        malformed(
            &TF_JOB,
            &tfjob(),
            &["spec"],
            json!({"tfReplicaSpecs": [1]}),
            "spec.tfReplicaSpecs",
        );
        malformed(
            &TF_JOB,
            &tfjob(),
            &["spec", "tfReplicaSpecs"],
            json!({"Worker": 5}),
            "spec.tfReplicaSpecs.Worker",
        );
        malformed(
            &MPI_JOB,
            &mpijob(),
            &[
                "spec",
                "mpiReplicaSpecs",
                "Worker",
                "template",
                "spec",
                "containers",
            ],
            json!({"0": 1}),
            "spec.mpiReplicaSpecs.Worker.template.spec.containers",
        );
    }

    #[test]
    fn state_follows_conditions() {
        let with = |conditions: Value| {
            let mut job = tfjob();
            job["status"] = json!({"conditions": conditions});
            TF_JOB.state(&job)
        };
        assert_eq!(TF_JOB.state(&tfjob()), JobState::Pending);
        assert_eq!(
            with(json!([{"type": "Created", "status": "True"}])),
            JobState::Pending
        );
        assert_eq!(
            with(
                json!([{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}])
            ),
            JobState::Running
        );
        assert_eq!(
            with(json!([{"type": "Restarting", "status": "True"}])),
            JobState::Running
        );
        assert_eq!(
            with(
                json!([{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}])
            ),
            JobState::Succeeded
        );
        assert_eq!(
            with(json!([{"type": "Failed", "status": "True"}])),
            JobState::Failed
        );
        assert_eq!(
            with(json!([{"type": "Suspended", "status": "True"}])),
            JobState::Pending
        );
    }

    #[test]
    fn priority_class_prefers_the_scheduling_policy() {
        assert_eq!(
            PYTORCH_JOB.priority_class_name(&pytorchjob()).as_deref(),
            Some("urgent")
        );
        assert_eq!(
            MPI_JOB.priority_class_name(&mpijob()).as_deref(),
            Some("batch-low")
        );
        assert_eq!(TF_JOB.priority_class_name(&tfjob()), None);
        let mut job = pytorchjob();
        job["spec"]["runPolicy"]["schedulingPolicy"]["priorityClass"] = json!("");
        assert_eq!(
            PYTORCH_JOB.priority_class_name(&job).as_deref(),
            Some("normal")
        );
    }

    #[test]
    fn the_mpi_launcher_job_is_the_only_child() {
        use crate::jobs::batch_job::BATCH_JOB_KIND;
        let mpijob = json!({
            "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi"},
            "spec": {"mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": pod_template("", vec![container("1", "1Gi")])},
                "Worker": {"replicas": 4, "template": pod_template("", vec![container("2", "4Gi")])},
            }}
        });
        let budget = MPI_JOB
            .child_budget(&mpijob, &BATCH_JOB_KIND, "pi-launcher")
            .unwrap()
            .unwrap();
        assert_eq!(budget.get("cpu"), 1000);
        assert_eq!(budget.get("memory"), GI);
        assert!(
            MPI_JOB
                .child_budget(&mpijob, &BATCH_JOB_KIND, "pi")
                .is_none()
        );
        assert!(
            MPI_JOB
                .child_budget(&mpijob, &crate::jobs::ray::RAY_CLUSTER_KIND, "pi-launcher")
                .is_none()
        );
        assert!(
            TF_JOB
                .child_budget(&tfjob(), &BATCH_JOB_KIND, "mnist-launcher")
                .is_none()
        );
    }
}
