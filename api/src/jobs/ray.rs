//! KubeRay: RayJob (a job that brings its own cluster) and RayCluster (a
//! long-running cluster). Both describe a cluster as a head group and worker
//! groups; a RayCluster created by a RayJob is not queued again (see
//! the webhook's proven-child rule, `JobAdapter::child_budget`).

use serde_json::{Value, json};

use super::batch_job::BATCH_JOB_KIND;
use super::guard::pod_sets_total;
use super::hold::{FieldPath, HoldStyle, SPEC_SUSPEND};
use super::json::{
    field, get_path, invalid, is_true, opt_array, opt_count, opt_object, opt_str, template,
    template_priority_class,
};
use super::pod_request::template_requests_at;
use super::{AdapterError, JobAdapter, JobKind, JobState, PodSetInfo};
use crate::resources::Resources;

/// The `ray.io/v1` RayJob kind.
pub static RAY_JOB_KIND: JobKind = JobKind {
    group: "ray.io",
    version: "v1",
    kind: "RayJob",
    plural: "rayjobs",
    extension: "ray",
};

/// The `ray.io/v1` RayCluster kind.
pub static RAY_CLUSTER_KIND: JobKind = JobKind {
    group: "ray.io",
    version: "v1",
    kind: "RayCluster",
    plural: "rayclusters",
    extension: "ray",
};

/// Adapter for RayJobs: held with `spec.suspend` and the suspend annotation.
#[derive(Debug)]
pub struct RayJobAdapter;

/// Adapter for RayClusters: held with `spec.suspend`.
#[derive(Debug)]
pub struct RayClusterAdapter;

/// `spec.suspend` and the suspend annotation. Unlike Kubeflow's and Spark's,
/// the field is in every `ray.io/v1` CRD and is what KubeRay reads: a RayJob
/// without it was unsuspended (KubeRay runs it), so it is not held.
const RAY_JOB_HOLD: HoldStyle = HoldStyle::AnnotationAndField {
    field: SPEC_SUSPEND,
    absent_field_holds: false,
};

impl JobAdapter for RayJobAdapter {
    fn kind(&self) -> &'static JobKind {
        &RAY_JOB_KIND
    }

    fn hold_style(&self) -> HoldStyle {
        RAY_JOB_HOLD
    }

    /// The pods of `spec.rayClusterSpec` (a RayJob without one runs on an
    /// existing cluster, `spec.clusterSelector`, and brings none), plus the
    /// submitter: in `K8sJobMode` (the default) KubeRay runs `ray job submit`
    /// in a Job of one pod, from `spec.submitterPodTemplate` or its default
    /// container (requests 500m CPU, 200Mi memory).
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        let mut sets = match get_path(job, &["spec", "rayClusterSpec"]) {
            None => Vec::new(),
            Some(cluster) => cluster_pod_sets(cluster, "spec.rayClusterSpec")?,
        };
        let mode = opt_str(
            get_path(job, &["spec", "submissionMode"]),
            "spec.submissionMode",
        )?;
        if matches!(mode, None | Some("K8sJobMode")) {
            let template = match get_path(job, &["spec", "submitterPodTemplate"]) {
                Some(t) => template(Some(t), "spec.submitterPodTemplate")?.clone(),
                None => default_submitter_template(),
            };
            sets.push(PodSetInfo {
                name: SUBMITTER.to_string(),
                count: 1,
                per_pod: template_requests_at(&template, "spec.submitterPodTemplate")?,
                template,
            });
        }
        Ok(sets)
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[
            &["status", "jobDeploymentStatus"],
            &["status", "jobStatus"],
            &["status", "rayClusterName"],
        ]
    }

    /// The RayCluster's pods (KubeRay labels them `ray.io/cluster`): a
    /// cluster kept after its job succeeded still uses the quota.
    fn pod_group(&self, job: &Value) -> Option<(&'static str, String)> {
        get_path(job, &["status", "rayClusterName"])
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(|n| ("ray.io/cluster", n.to_string()))
    }

    /// From `status.jobDeploymentStatus` (and `status.jobStatus`).
    fn state(&self, job: &Value) -> JobState {
        let status = |key| get_path(job, &["status", key]).and_then(Value::as_str);
        match (status("jobDeploymentStatus"), status("jobStatus")) {
            // Older KubeRay ends a failed Ray job in `Complete` with jobStatus FAILED.
            (Some("Complete"), Some("FAILED")) => JobState::Failed,
            (Some("Complete"), _) | (_, Some("SUCCEEDED")) => JobState::Succeeded,
            (Some("Failed"), _) => JobState::Failed,
            (Some("Running"), _) => JobState::Running,
            _ => JobState::Pending,
        }
    }

    fn priority_class_name(&self, job: &Value) -> Option<String> {
        get_path(job, &["spec", "rayClusterSpec"]).and_then(cluster_priority_class)
    }

    /// KubeRay creates the RayCluster named in `status.rayClusterName` (it
    /// records the name before it creates the cluster) from the cluster's pod
    /// sets, and the submitter Job named as the RayJob.
    fn child_budget(
        &self,
        owner: &Value,
        child: &'static JobKind,
        child_name: &str,
    ) -> Option<Result<Resources, AdapterError>> {
        let named = |path: &[&str]| get_path(owner, path).and_then(Value::as_str);
        let sets = |names: fn(&str) -> bool| {
            self.pod_sets(owner).map(|sets| {
                let chosen: Vec<PodSetInfo> = sets.into_iter().filter(|s| names(&s.name)).collect();
                pod_sets_total(&chosen, &[])
            })
        };
        if child == &RAY_CLUSTER_KIND && named(&["status", "rayClusterName"]) == Some(child_name) {
            return Some(sets(|name| name != SUBMITTER));
        }
        if child == &BATCH_JOB_KIND && named(&["metadata", "name"]) == Some(child_name) {
            return match self.pod_sets(owner) {
                Ok(all) if !all.iter().any(|s| s.name == SUBMITTER) => None,
                _ => Some(sets(|name| name == SUBMITTER)),
            };
        }
        None
    }
}

/// Name of a RayJob's submitter pod set.
const SUBMITTER: &str = "submitter";

/// KubeRay's default submitter pod (`GetDefaultSubmitterTemplate`): one
/// container requesting 500m CPU and 200Mi memory (limits 1 CPU, 1Gi).
fn default_submitter_template() -> Value {
    json!({"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter",
        "resources": {
            "requests": {"cpu": "500m", "memory": "200Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
    }]}})
}

impl JobAdapter for RayClusterAdapter {
    fn kind(&self) -> &'static JobKind {
        &RAY_CLUSTER_KIND
    }

    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        cluster_pod_sets(get_path(job, &["spec"]).unwrap_or(&Value::Null), "spec")
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[&["status", "state"]]
    }

    /// A cluster never finishes: it runs (`status.state: ready`) until deleted.
    fn state(&self, job: &Value) -> JobState {
        match get_path(job, &["status", "state"]).and_then(Value::as_str) {
            Some("ready") => JobState::Running,
            _ => JobState::Pending,
        }
    }

    fn priority_class_name(&self, job: &Value) -> Option<String> {
        get_path(job, &["spec"]).and_then(cluster_priority_class)
    }
}

/// Pod sets of a RayCluster spec at `path`: `head` (one pod) and one per
/// worker group, named by `groupName`.
fn cluster_pod_sets(cluster: &Value, path: &str) -> Result<Vec<PodSetInfo>, AdapterError> {
    if opt_object(Some(cluster), path)?.is_none() {
        return Err(invalid(path, "a cluster spec is required"));
    }
    let head_path = format!("{path}.headGroupSpec");
    if opt_object(field(cluster, "headGroupSpec"), &head_path)?.is_none() {
        return Err(invalid(&head_path, "a head group is required"));
    }
    let head_template_path = format!("{head_path}.template");
    let head_template = template(
        get_path(cluster, &["headGroupSpec", "template"]),
        &head_template_path,
    )?;
    let mut sets = vec![PodSetInfo {
        name: "head".to_string(),
        count: 1,
        per_pod: template_requests_at(head_template, &head_template_path)?,
        template: head_template.clone(),
    }];

    let groups_path = format!("{path}.workerGroupSpecs");
    for (i, group) in opt_array(field(cluster, "workerGroupSpecs"), &groups_path)?
        .iter()
        .enumerate()
    {
        let group_path = format!("{groups_path}[{i}]");
        if opt_object(Some(group), &group_path)?.is_none() {
            return Err(invalid(
                &group_path,
                "expected a worker group object, found null",
            ));
        }
        let name_path = format!("{group_path}.groupName");
        let Some(name) = opt_str(field(group, "groupName"), &name_path)? else {
            return Err(invalid(&name_path, "a group name is required"));
        };
        let template_path = format!("{group_path}.template");
        let template = template(field(group, "template"), &template_path)?;
        sets.push(PodSetInfo {
            name: name.to_string(),
            count: worker_group_pods(group, &group_path)?,
            per_pod: template_requests_at(template, &template_path)?,
            template: template.clone(),
        });
    }
    Ok(sets)
}

/// Pods of one worker group, as KubeRay computes them
/// (`GetWorkerGroupDesiredReplicas`): a suspended group has none; otherwise
/// `replicas` clamped to `[minReplicas, maxReplicas]` (a missing `replicas`
/// means `minReplicas`; `minReplicas > maxReplicas` means `maxReplicas`), times
/// `numOfHosts` (pods per replica of a multi-host group).
fn worker_group_pods(group: &Value, path: &str) -> Result<i32, AdapterError> {
    let count = |key: &str| opt_count(field(group, key), &format!("{path}.{key}"));
    let replicas = count("replicas")?;
    let min = count("minReplicas")?.unwrap_or(0);
    let max = count("maxReplicas")?.unwrap_or(i32::MAX);
    let hosts = count("numOfHosts")?.unwrap_or(1);
    if is_true(group, &["suspend"]) {
        return Ok(0);
    }
    let replicas = if min > max {
        max
    } else {
        replicas.unwrap_or(min).clamp(min, max)
    };
    replicas.checked_mul(hosts).ok_or_else(|| {
        invalid(
            path,
            format!("{replicas} replicas × {hosts} hosts is too many pods"),
        )
    })
}

/// The head template's priority class, else the first worker group's.
fn cluster_priority_class(cluster: &Value) -> Option<String> {
    get_path(cluster, &["headGroupSpec", "template"])
        .and_then(template_priority_class)
        .or_else(|| {
            field(cluster, "workerGroupSpecs")?
                .as_array()?
                .iter()
                .find_map(|g| g.get("template").and_then(template_priority_class))
        })
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_rayjobs_pods_are_its_clusters() {
        let adapter = crate::jobs::for_kind("ray.io", "RayJob").unwrap();
        let job = serde_json::json!({ "status": { "rayClusterName": "rj-raycluster-x" } });
        assert_eq!(
            adapter.pod_group(&job),
            Some(("ray.io/cluster", "rj-raycluster-x".to_string()))
        );
        assert_eq!(adapter.pod_group(&serde_json::json!({})), None);
        assert!(crate::jobs::POD_GROUP_LABELS.contains(&"ray.io/cluster"));
    }

    use super::*;
    use crate::jobs::test_support::{
        GI, assert_hold_release, container, gpu_container, malformed, pod_template,
    };
    use crate::jobs::total_resources;
    use crate::keys::SUSPEND_ANNOTATION;

    fn cluster_spec() -> Value {
        json!({
            "rayVersion": "2.46.0",
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": pod_template("ray-high", vec![container("2", "4Gi")]),
            },
            "workerGroupSpecs": [
                {"groupName": "cpu", "replicas": 3, "minReplicas": 1, "maxReplicas": 5,
                 "rayStartParams": {}, "template": pod_template("", vec![container("4", "8Gi")])},
                {"groupName": "gpu", "replicas": 1, "minReplicas": 0, "maxReplicas": 4, "numOfHosts": 2,
                 "rayStartParams": {}, "template": pod_template("", vec![gpu_container("8", "32Gi", 4)])},
            ],
        })
    }

    fn rayjob() -> Value {
        json!({
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {
                "entrypoint": "python /home/ray/train.py",
                "shutdownAfterJobFinishes": true,
                "rayClusterSpec": cluster_spec(),
            }
        })
    }

    fn raycluster() -> Value {
        json!({
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "shared", "namespace": "team-a"},
            "spec": cluster_spec(),
        })
    }

    #[test]
    fn rayjob_hold_sets_suspend_and_annotation() {
        let (held, released) = assert_hold_release(&RayJobAdapter, &rayjob());
        assert_eq!(held["spec"]["suspend"], json!(true));
        assert_eq!(
            held["metadata"]["annotations"][SUSPEND_ANNOTATION],
            json!("true")
        );
        // The embedded cluster spec is not touched.
        assert_eq!(held["spec"]["rayClusterSpec"], cluster_spec());
        assert_eq!(released["spec"]["suspend"], json!(false));

        let mut only_suspend = rayjob();
        only_suspend["spec"]["suspend"] = json!(true);
        assert!(!RayJobAdapter.is_held(&only_suspend));
    }

    #[test]
    fn raycluster_hold_sets_only_suspend() {
        let (held, released) = assert_hold_release(&RayClusterAdapter, &raycluster());
        let mut expected = raycluster();
        expected["spec"]["suspend"] = json!(true);
        assert_eq!(held, expected);
        assert_eq!(released["spec"]["suspend"], json!(false));
    }

    #[test]
    fn head_and_worker_groups() {
        let mut with_submitter = RayJobAdapter.pod_sets(&rayjob()).unwrap();
        let submitter = with_submitter.pop().unwrap();
        assert_eq!((submitter.name.as_str(), submitter.count), ("submitter", 1));
        assert_eq!(submitter.per_pod.get("cpu"), 500);
        assert_eq!(submitter.per_pod.get("memory"), 200 * (1 << 20));
        for sets in [
            with_submitter,
            RayClusterAdapter.pod_sets(&raycluster()).unwrap(),
        ] {
            let names: Vec<_> = sets.iter().map(|s| (s.name.as_str(), s.count)).collect();
            assert_eq!(names, [("head", 1), ("cpu", 3), ("gpu", 2)]);
            assert_eq!(
                sets[0].template,
                cluster_spec()["headGroupSpec"]["template"]
            );
            let total = total_resources(&sets);
            assert_eq!(total.get("cpu"), 2000 + 3 * 4000 + 2 * 8000);
            assert_eq!(total.get("memory"), (4 + 3 * 8 + 2 * 32) * GI);
            assert_eq!(total.get("nvidia.com/gpu"), 8);
        }
    }

    #[test]
    fn head_of_two_and_three_workers_of_four() {
        let mut job = raycluster();
        job["spec"]["workerGroupSpecs"] = json!([cluster_spec()["workerGroupSpecs"][0]]);
        let total = total_resources(&RayClusterAdapter.pod_sets(&job).unwrap());
        assert_eq!(total.get("cpu"), 14_000);
        assert_eq!(total.get("memory"), 28 * GI);
    }

    #[test]
    fn worker_counts_follow_kuberay() {
        let pods = |group: Value| worker_group_pods(&group, "g").unwrap();
        assert_eq!(pods(json!({"replicas": 3})), 3);
        assert_eq!(pods(json!({"minReplicas": 2})), 2);
        assert_eq!(pods(json!({})), 0);
        assert_eq!(
            pods(json!({"replicas": 1, "minReplicas": 2, "maxReplicas": 5})),
            2
        );
        assert_eq!(
            pods(json!({"replicas": 9, "minReplicas": 2, "maxReplicas": 5})),
            5
        );
        assert_eq!(
            pods(json!({"replicas": 3, "minReplicas": 6, "maxReplicas": 5})),
            5
        );
        assert_eq!(pods(json!({"replicas": 3, "numOfHosts": 4})), 12);
        assert_eq!(pods(json!({"replicas": 3, "suspend": true})), 0);
        assert!(worker_group_pods(&json!({"replicas": i32::MAX, "numOfHosts": 2}), "g").is_err());
    }

    #[test]
    fn rayjob_on_an_existing_cluster_brings_only_its_submitter() {
        let mut job = rayjob();
        let spec = job["spec"].as_object_mut().unwrap();
        spec.remove("rayClusterSpec");
        spec.insert(
            "clusterSelector".into(),
            json!({"ray.io/cluster": "shared"}),
        );
        let names: Vec<_> = RayJobAdapter
            .pod_sets(&job)
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["submitter"]);
        job["spec"]["submissionMode"] = json!("HTTPMode");
        assert_eq!(RayJobAdapter.pod_sets(&job).unwrap(), Vec::new());
    }

    #[test]
    fn malformed_clusters_are_refused() {
        // Worker groups sit in an array: patch them in place.
        let mut job = raycluster();
        job["spec"]["workerGroupSpecs"][0]["replicas"] = json!("3");
        assert!(matches!(
            RayClusterAdapter.pod_sets(&job),
            Err(AdapterError::Invalid { path, .. }) if path == "spec.workerGroupSpecs[0].replicas"
        ));
        for (key, value, path) in [
            ("replicas", json!(-1), "spec.workerGroupSpecs[1].replicas"),
            (
                "numOfHosts",
                json!(1.5),
                "spec.workerGroupSpecs[1].numOfHosts",
            ),
            ("template", json!("t"), "spec.workerGroupSpecs[1].template"),
            ("groupName", json!(7), "spec.workerGroupSpecs[1].groupName"),
        ] {
            let mut job = raycluster();
            job["spec"]["workerGroupSpecs"][1][key] = value;
            match RayClusterAdapter.pod_sets(&job) {
                Err(AdapterError::Invalid { path: p, .. }) => assert_eq!(p, path),
                other => panic!("{key}: {other:?}"),
            }
        }
        malformed(
            &RayClusterAdapter,
            &raycluster(),
            &["spec"],
            json!({"workerGroupSpecs": {}}),
            "spec.workerGroupSpecs",
        );
        malformed(
            &RayClusterAdapter,
            &raycluster(),
            &["spec"],
            json!({"headGroupSpec": 1}),
            "spec.headGroupSpec",
        );
        malformed(
            &RayClusterAdapter,
            &raycluster(),
            &["spec", "headGroupSpec"],
            json!({"template": 1}),
            "spec.headGroupSpec.template",
        );
        malformed(
            &RayJobAdapter,
            &rayjob(),
            &["spec"],
            json!({"rayClusterSpec": "x"}),
            "spec.rayClusterSpec",
        );
    }

    #[test]
    fn rayjob_state() {
        let with = |status: Value| {
            let mut job = rayjob();
            job["status"] = status;
            RayJobAdapter.state(&job)
        };
        assert_eq!(RayJobAdapter.state(&rayjob()), JobState::Pending);
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Initializing"})),
            JobState::Pending
        );
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Suspended"})),
            JobState::Pending
        );
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})),
            JobState::Running
        );
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})),
            JobState::Succeeded
        );
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Complete"})),
            JobState::Succeeded
        );
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Running", "jobStatus": "SUCCEEDED"})),
            JobState::Succeeded
        );
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"})),
            JobState::Failed
        );
        assert_eq!(
            with(json!({"jobDeploymentStatus": "Failed"})),
            JobState::Failed
        );
    }

    #[test]
    fn raycluster_state_never_finishes() {
        let with = |state: &str| {
            let mut job = raycluster();
            job["status"] = json!({"state": state});
            RayClusterAdapter.state(&job)
        };
        assert_eq!(with("ready"), JobState::Running);
        assert_eq!(with("suspended"), JobState::Pending);
        assert_eq!(with("failed"), JobState::Pending);
        assert_eq!(RayClusterAdapter.state(&raycluster()), JobState::Pending);
    }

    #[test]
    fn priority_class_from_head_then_workers() {
        assert_eq!(
            RayJobAdapter.priority_class_name(&rayjob()).as_deref(),
            Some("ray-high")
        );
        let mut job = raycluster();
        job["spec"]["headGroupSpec"]["template"] = pod_template("", vec![container("1", "1Gi")]);
        assert_eq!(RayClusterAdapter.priority_class_name(&job), None);
        job["spec"]["workerGroupSpecs"][1]["template"]["spec"]["priorityClassName"] =
            json!("gpu-prio");
        assert_eq!(
            RayClusterAdapter.priority_class_name(&job).as_deref(),
            Some("gpu-prio")
        );
    }

    #[test]
    fn submitter_follows_the_submission_mode() {
        let names = |job: &Value| -> Vec<String> {
            RayJobAdapter
                .pod_sets(job)
                .unwrap()
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        let mut job = rayjob();
        job["spec"]["submissionMode"] = json!("HTTPMode");
        assert!(!names(&job).contains(&"submitter".to_string()));
        job["spec"]["submissionMode"] = json!("K8sJobMode");
        job["spec"]["submitterPodTemplate"] = pod_template("", vec![container("2", "1Gi")]);
        let sets = RayJobAdapter.pod_sets(&job).unwrap();
        assert_eq!(sets.last().unwrap().per_pod.get("cpu"), 2000);
        job["spec"]["submitterPodTemplate"] = json!("x");
        assert!(RayJobAdapter.pod_sets(&job).is_err());
    }

    #[test]
    fn children_are_the_named_cluster_and_the_submitter() {
        use crate::jobs::batch_job::BATCH_JOB_KIND;
        let mut job = rayjob();
        // No cluster name recorded yet: no RayCluster is a child.
        assert!(
            RayJobAdapter
                .child_budget(&job, &RAY_CLUSTER_KIND, "train-abcde")
                .is_none()
        );
        job["status"] = json!({"rayClusterName": "train-abcde"});
        let cluster = RayJobAdapter
            .child_budget(&job, &RAY_CLUSTER_KIND, "train-abcde")
            .unwrap()
            .unwrap();
        assert_eq!(cluster.get("cpu"), 2000 + 3 * 4000 + 2 * 8000);
        assert!(
            RayJobAdapter
                .child_budget(&job, &RAY_CLUSTER_KIND, "train-other")
                .is_none()
        );
        let submitter = RayJobAdapter
            .child_budget(&job, &BATCH_JOB_KIND, "train")
            .unwrap()
            .unwrap();
        assert_eq!(submitter.get("cpu"), 500);
        assert!(
            RayJobAdapter
                .child_budget(&job, &BATCH_JOB_KIND, "train-x")
                .is_none()
        );
        job["spec"]["submissionMode"] = json!("HTTPMode");
        assert!(
            RayJobAdapter
                .child_budget(&job, &BATCH_JOB_KIND, "train")
                .is_none()
        );
        // A RayCluster makes no job children.
        assert!(
            RayClusterAdapter
                .child_budget(&raycluster(), &BATCH_JOB_KIND, "shared")
                .is_none()
        );
    }
}
