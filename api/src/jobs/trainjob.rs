//! Kubeflow Trainer v2 TrainJob (`trainer.kubeflow.org/v1alpha1`): held with
//! its native `spec.suspend`. Its size is not in the TrainJob: the Trainer
//! controller builds a JobSet (named as the TrainJob) from the referenced
//! TrainingRuntime or ClusterTrainingRuntime (`spec.template.spec` is a
//! JobSet spec), with the TrainJob's `trainer.numNodes` (else the runtime's
//! `mlPolicy.numNodes`, default 1) as the trainer Job's pods (with an MPI
//! policy: the `node` Job's, less the launcher when it runs as a node) and
//! `trainer.resourcesPerNode` merged into its `node` container's resources.
//! So the caller reads the runtime ([`JobAdapter::size_input`]) and
//! attaches it ([`attach_size_input`](super::attach_size_input)) before
//! asking for pod sets; a TrainJob whose runtime does not exist cannot be queued.

use serde_json::{Value, json};

use super::jobset::{JOBSET_KIND, ReplicatedJob, pod_sets_of, replicated_jobs};
use super::json::{
    field, get_path, invalid, non_empty, opt_count, set_path, template_priority_class,
};
use super::{
    AdapterError, FieldPath, JobAdapter, JobKind, JobState, PodSetInfo, SIZE_INPUT_KEY, SizeInput,
};
use crate::resources::Resources;

/// The `trainer.kubeflow.org/v1alpha1` TrainJob kind.
pub static TRAINJOB_KIND: JobKind = JobKind {
    group: "trainer.kubeflow.org",
    version: "v1alpha1",
    kind: "TrainJob",
    plural: "trainjobs",
    extension: "trainjob",
};

/// A namespaced TrainingRuntime (read, never queued).
pub static TRAINING_RUNTIME_KIND: JobKind = JobKind {
    group: "trainer.kubeflow.org",
    version: "v1alpha1",
    kind: "TrainingRuntime",
    plural: "trainingruntimes",
    extension: "trainjob",
};

/// A cluster-scoped ClusterTrainingRuntime (read, never queued).
pub static CLUSTER_TRAINING_RUNTIME_KIND: JobKind = JobKind {
    group: "trainer.kubeflow.org",
    version: "v1alpha1",
    kind: "ClusterTrainingRuntime",
    plural: "clustertrainingruntimes",
    extension: "trainjob",
};

/// The label with which a runtime marks its trainer Job (and the name the
/// Trainer's own runtimes give it, for runtimes without the label).
const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
const TRAINER_STEP: &str = "trainer";
const TRAINER_JOB: &str = "node";

/// Adapter for TrainJobs.
#[derive(Debug)]
pub struct TrainJobAdapter;

impl TrainJobAdapter {
    /// The runtime attached to `job`, as its controller would use it.
    fn runtime(job: &Value) -> Result<&Value, AdapterError> {
        job.get(SIZE_INPUT_KEY)
            .filter(|r| r.is_object())
            .ok_or_else(|| invalid("spec.runtimeRef", "the referenced runtime was not read"))
    }

    /// The JobSet spec the Trainer controller builds for `job` (the
    /// runtime's, with the TrainJob's overrides applied as Trainer v2.3.0
    /// does: `pkg/runtime/core/trainingruntime.go` and the ML policy
    /// plugins' `EnforceMLPolicy`).
    fn effective_jobset(job: &Value) -> Result<Value, AdapterError> {
        let runtime = Self::runtime(job)?;
        let mut spec = get_path(runtime, &["spec", "template", "spec"])
            .filter(|s| s.is_object())
            .cloned()
            .ok_or_else(|| {
                invalid(
                    "runtime.spec.template.spec",
                    "the runtime has no JobSet spec",
                )
            })?;
        let policy = MlPolicy::read(runtime, job)?;
        let resources = get_path(job, &["spec", "trainer", "resourcesPerNode"]);
        let Some(jobs) = spec.get_mut("replicatedJobs").and_then(Value::as_array_mut) else {
            return Ok(spec);
        };
        for rj in jobs.iter_mut() {
            let trainer = policy.present
                && get_path(rj, &["template", "metadata", "labels", ANCESTOR_LABEL])
                    .and_then(Value::as_str)
                    == Some(TRAINER_STEP);
            let node = field(rj, "name").and_then(Value::as_str) == Some(TRAINER_JOB);
            if let Some(count) = policy.count(trainer, node) {
                for key in ["parallelism", "completions"] {
                    set_path(rj, &["template", "spec", key], json!(count));
                }
            }
            // resourcesPerNode is merged into the trainer's `node` container
            // (and into the `node` Job's when the MPI launcher runs as a node).
            if let Some(resources) = resources
                && (trainer || (node && policy.launcher_as_node))
                && let Some(container) = rj
                    .pointer_mut("/template/spec/template/spec/containers")
                    .and_then(Value::as_array_mut)
                    .and_then(|cs| {
                        cs.iter_mut()
                            .find(|c| field(c, "name").and_then(Value::as_str) == Some(TRAINER_JOB))
                    })
            {
                merge_resources(container, resources);
            }
        }
        Ok(spec)
    }
}

/// What of a runtime's `mlPolicy` and the TrainJob's `trainer` decides the
/// pod counts.
struct MlPolicy {
    /// The runtime has an `mlPolicy` (without one, no Job is the trainer).
    present: bool,
    /// `mlPolicy.numNodes` (default 1): the trainer Job's pods.
    runtime_nodes: i32,
    /// `spec.trainer.numNodes`, when the TrainJob sets it.
    job_nodes: Option<i32>,
    /// An MPI policy: the TrainJob's nodes go to the Job named `node`.
    mpi: bool,
    /// `mpi.runLauncherAsNode`: one of the nodes is the launcher.
    launcher_as_node: bool,
}

impl MlPolicy {
    fn read(runtime: &Value, job: &Value) -> Result<Self, AdapterError> {
        let policy = get_path(runtime, &["spec", "mlPolicy"]).filter(|p| p.is_object());
        let mpi = policy.and_then(|p| p.get("mpi")).filter(|m| m.is_object());
        Ok(Self {
            present: policy.is_some(),
            runtime_nodes: opt_count(
                policy.and_then(|p| p.get("numNodes")),
                "runtime.spec.mlPolicy.numNodes",
            )?
            .unwrap_or(1),
            job_nodes: opt_count(
                get_path(job, &["spec", "trainer", "numNodes"]),
                "spec.trainer.numNodes",
            )?,
            mpi: mpi.is_some(),
            launcher_as_node: mpi
                .and_then(|m| m.get("runLauncherAsNode"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// The pods of a replicated Job (`None`: its template's parallelism),
    /// given whether it is the trainer (by label) and whether it is named
    /// `node`.
    fn count(&self, trainer: bool, node: bool) -> Option<i32> {
        let base = trainer.then_some(self.runtime_nodes);
        let Some(n) = self.job_nodes else {
            return base;
        };
        if self.mpi {
            match (node, self.launcher_as_node) {
                (true, true) => Some((n - 1).max(1)),
                (true, false) => Some(n),
                (false, _) => base,
            }
        } else if trainer {
            Some(n)
        } else {
            base
        }
    }
}

/// `override_` merged into `container.resources` as a strategic merge
/// patch of ResourceRequirements does: its requests and limits replace
/// those of the same names, the others stay.
fn merge_resources(container: &mut Value, override_: &Value) {
    let Some(over) = override_.as_object() else {
        return;
    };
    let base = &mut container["resources"];
    if !base.is_object() {
        *base = json!({});
    }
    for (key, value) in over {
        match (base.get_mut(key), value.as_object()) {
            (Some(Value::Object(into)), Some(from)) => {
                into.extend(from.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => base[key] = value.clone(),
        }
    }
}

impl JobAdapter for TrainJobAdapter {
    fn kind(&self) -> &'static JobKind {
        &TRAINJOB_KIND
    }

    /// The pod sets of the JobSet its controller builds: one per replicated
    /// Job of the runtime (initializers included, as Kueue counts them).
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        let spec = Self::effective_jobset(job)?;
        let jobs: Vec<ReplicatedJob<'_>> = replicated_jobs(&spec, "runtime.spec.template.spec")?;
        pod_sets_of(&jobs)
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[&["status", "conditions"], &["status", "jobsStatus"]]
    }

    /// `Complete`/`Failed` conditions end it; an active or ready Job of its
    /// JobSet (`status.jobsStatus`) means it runs.
    fn state(&self, job: &Value) -> JobState {
        super::jobset::jobs_state(job, "Complete", "jobsStatus")
    }

    fn priority_class_name(&self, job: &Value) -> Option<String> {
        let spec = Self::effective_jobset(job).ok()?;
        spec.get("replicatedJobs")?
            .as_array()?
            .iter()
            .find_map(|rj| {
                get_path(rj, &["template", "spec", "template"]).and_then(template_priority_class)
            })
    }

    /// The runtime named by `spec.runtimeRef` (kind ClusterTrainingRuntime
    /// by default, or TrainingRuntime in the job's namespace).
    fn size_input(&self, job: &Value) -> Option<Result<SizeInput, AdapterError>> {
        let reference = get_path(job, &["spec", "runtimeRef"]);
        let name = reference.and_then(|r| non_empty(field(r, "name")));
        let Some(name) = name else {
            return Some(Err(invalid(
                "spec.runtimeRef.name",
                "a runtime name is required",
            )));
        };
        let group = reference
            .and_then(|r| field(r, "apiGroup"))
            .and_then(Value::as_str)
            .unwrap_or(TRAINJOB_KIND.group);
        let kind = reference
            .and_then(|r| field(r, "kind"))
            .and_then(Value::as_str)
            .unwrap_or(CLUSTER_TRAINING_RUNTIME_KIND.kind);
        Some(match (group, kind) {
            ("trainer.kubeflow.org", "ClusterTrainingRuntime") => Ok(SizeInput {
                kind: &CLUSTER_TRAINING_RUNTIME_KIND,
                namespaced: false,
                name,
                named_by: "spec.runtimeRef",
            }),
            ("trainer.kubeflow.org", "TrainingRuntime") => Ok(SizeInput {
                kind: &TRAINING_RUNTIME_KIND,
                namespaced: true,
                name,
                named_by: "spec.runtimeRef",
            }),
            (group, kind) => Err(invalid(
                "spec.runtimeRef",
                format!("{group}/{kind} is not a Kubeflow Trainer runtime"),
            )),
        })
    }

    /// The Trainer controller creates one JobSet named as the TrainJob.
    fn child_budget(
        &self,
        owner: &Value,
        child: &'static JobKind,
        child_name: &str,
    ) -> Option<Result<Resources, AdapterError>> {
        let owner_name = non_empty(get_path(owner, &["metadata", "name"]))?;
        if child != &JOBSET_KIND || child_name != owner_name {
            return None;
        }
        Some(
            self.pod_sets(owner)
                .map(|sets| super::total_resources(&sets)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{GI, assert_hold_release, container, pod_template};
    use crate::jobs::{attach_size_input, total_resources};

    /// A runtime like Trainer's `torch-distributed`: a dataset initializer
    /// and the trainer Job `node` (1 node by default; 2 by mlPolicy here).
    fn runtime() -> Value {
        let mut node = pod_template("", vec![container("2", "8Gi")]);
        node["spec"]["containers"][0]["name"] = json!("node");
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-distributed"},
            "spec": {
                "mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": "auto"}},
                "template": {"spec": {"replicatedJobs": [
                    {"name": "dataset-initializer", "template": {
                        "metadata": {"labels": {ANCESTOR_LABEL: "dataset-initializer"}},
                        "spec": {"template": pod_template("", vec![container("1", "2Gi")])}}},
                    {"name": "node", "template": {
                        "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                        "spec": {"template": node}}},
                ]}},
            }
        })
    }

    fn trainjob(trainer: Value) -> Value {
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llm", "namespace": "team-a"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer},
        })
    }

    fn attached(trainer: Value) -> Value {
        let mut job = trainjob(trainer);
        attach_size_input(&mut job, runtime());
        job
    }

    #[test]
    fn hold_and_release_use_spec_suspend() {
        let (held, released) = assert_hold_release(&TrainJobAdapter, &attached(json!({})));
        assert_eq!(held["spec"]["suspend"], json!(true));
        assert_eq!(released["spec"]["suspend"], json!(false));
    }

    #[test]
    fn size_is_the_jobset_its_controller_builds() {
        // The runtime's numNodes (2) and resources.
        let sets = TrainJobAdapter.pod_sets(&attached(json!({}))).unwrap();
        let counts: Vec<(&str, i32)> = sets.iter().map(|s| (s.name.as_str(), s.count)).collect();
        assert_eq!(counts, vec![("dataset-initializer", 1), ("node", 2)]);
        assert_eq!(total_resources(&sets).get("cpu"), 1000 + 2 * 2000);
        // The TrainJob's numNodes and resourcesPerNode win.
        let sets = TrainJobAdapter
            .pod_sets(&attached(json!({"numNodes": 4, "resourcesPerNode": {
                "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}}})))
            .unwrap();
        assert_eq!(sets[1].count, 4);
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 1000 + 4 * 8000);
        assert_eq!(total.get("memory"), 2 * GI + 4 * 32 * GI);
        assert_eq!(total.get("nvidia.com/gpu"), 4);
    }

    /// Trainer's `deepspeed-distributed`: an MPI policy whose launcher runs
    /// as one of the nodes; the launcher Job is the trainer.
    fn deepspeed_runtime() -> Value {
        let job = |name: &str, labels: Value| {
            let mut pod = pod_template("", vec![container("4", "16Gi")]);
            pod["spec"]["containers"][0]["name"] = json!("node");
            json!({"name": name, "template": {"metadata": {"labels": labels},
                "spec": {"template": pod}}})
        };
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "deepspeed-distributed"},
            "spec": {
                "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "runLauncherAsNode": true}},
                "template": {"spec": {"replicatedJobs": [
                    job("node", json!({})),
                    job("launcher", json!({ANCESTOR_LABEL: "trainer"})),
                ]}},
            }
        })
    }

    fn counts(sets: &[PodSetInfo]) -> Vec<(&str, i32)> {
        sets.iter().map(|s| (s.name.as_str(), s.count)).collect()
    }

    #[test]
    fn an_mpi_launcher_that_runs_as_a_node_is_one_of_the_nodes() {
        let mut job = trainjob(json!({"numNodes": 4, "resourcesPerNode": {
            "requests": {"nvidia.com/gpu": 2}}}));
        attach_size_input(&mut job, deepspeed_runtime());
        let sets = TrainJobAdapter.pod_sets(&job).unwrap();
        // What the Trainer controller's MPI plugin does: n − 1 nodes and
        // the launcher.
        assert_eq!(counts(&sets), vec![("node", 3), ("launcher", 1)]);
        // resourcesPerNode goes to both (merged: the runtime's cpu stays).
        let total = total_resources(&sets);
        assert_eq!(total.get("nvidia.com/gpu"), 4 * 2);
        assert_eq!(total.get("cpu"), 4 * 4000);
        // One node asked for: still one node besides the launcher.
        let mut job = trainjob(json!({"numNodes": 1}));
        attach_size_input(&mut job, deepspeed_runtime());
        let sets = TrainJobAdapter.pod_sets(&job).unwrap();
        assert_eq!(counts(&sets), vec![("node", 1), ("launcher", 1)]);
        // No numNodes: the runtime's counts as they are.
        let mut job = trainjob(json!({}));
        attach_size_input(&mut job, deepspeed_runtime());
        let sets = TrainJobAdapter.pod_sets(&job).unwrap();
        assert_eq!(counts(&sets), vec![("node", 1), ("launcher", 1)]);
    }

    #[test]
    fn resources_per_node_are_merged_into_the_node_container_only() {
        let mut rt = runtime();
        // A sidecar beside the trainer's `node` container keeps its own.
        rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
            ["containers"]
            .as_array_mut()
            .unwrap()
            .insert(
                0,
                json!({"name": "sidecar", "resources": {"requests": {"cpu": "1"}}}),
            );
        let mut job = trainjob(json!({"resourcesPerNode": {"requests": {"memory": "64Gi"}}}));
        attach_size_input(&mut job, rt);
        let sets = TrainJobAdapter.pod_sets(&job).unwrap();
        assert_eq!(counts(&sets), vec![("dataset-initializer", 1), ("node", 2)]);
        let total = total_resources(&sets);
        // Initializer 1 cpu; per node the sidecar's 1 and node's 2 (kept).
        assert_eq!(total.get("cpu"), 1000 + 2 * (1000 + 2000));
        assert_eq!(total.get("memory"), 2 * GI + 2 * 64 * GI);
    }

    #[test]
    fn without_a_trainer_label_no_job_takes_the_nodes() {
        // As Trainer finds its trainer Job: by the label only.
        let mut rt = runtime();
        rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["metadata"] = json!({});
        let mut job = trainjob(json!({"numNodes": 4}));
        attach_size_input(&mut job, rt);
        let sets = TrainJobAdapter.pod_sets(&job).unwrap();
        assert_eq!(counts(&sets), vec![("dataset-initializer", 1), ("node", 1)]);
    }

    #[test]
    fn without_its_runtime_it_has_no_size() {
        let error = TrainJobAdapter.pod_sets(&trainjob(json!({}))).unwrap_err();
        assert!(error.to_string().contains("spec.runtimeRef"), "{error}");
    }

    #[test]
    fn the_runtime_reference_names_what_to_read() {
        let input = TrainJobAdapter
            .size_input(&trainjob(json!({})))
            .unwrap()
            .unwrap();
        assert_eq!(input.kind.kind, "ClusterTrainingRuntime");
        assert!(!input.namespaced);
        assert_eq!(input.name, "torch-distributed");
        let mut job = trainjob(json!({}));
        job["spec"]["runtimeRef"]["kind"] = json!("TrainingRuntime");
        let input = TrainJobAdapter.size_input(&job).unwrap().unwrap();
        assert!(input.namespaced);
        job["spec"]["runtimeRef"]["kind"] = json!("Deployment");
        assert!(TrainJobAdapter.size_input(&job).unwrap().is_err());
        job["spec"]["runtimeRef"] = json!({});
        assert!(TrainJobAdapter.size_input(&job).unwrap().is_err());
    }

    #[test]
    fn its_jobset_is_its_child_with_its_whole_size() {
        let job = attached(json!({}));
        let budget = TrainJobAdapter
            .child_budget(&job, &JOBSET_KIND, "llm")
            .map(|b| b.unwrap().get("cpu"));
        assert_eq!(budget, Some(5000));
        assert!(
            TrainJobAdapter
                .child_budget(&job, &JOBSET_KIND, "other")
                .is_none()
        );
    }

    #[test]
    fn state_follows_conditions_and_jobs_status() {
        let with = |status: Value| {
            let mut job = trainjob(json!({}));
            job["status"] = status;
            TrainJobAdapter.state(&job)
        };
        assert_eq!(with(json!({})), JobState::Pending);
        assert_eq!(
            with(json!({"jobsStatus": [{"name": "node", "active": 2}]})),
            JobState::Running
        );
        assert_eq!(
            with(json!({"conditions": [{"type": "Complete", "status": "True"}]})),
            JobState::Succeeded
        );
        assert_eq!(
            with(json!({"conditions": [{"type": "Failed", "status": "True"}]})),
            JobState::Failed
        );
    }
}
