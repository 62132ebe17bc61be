//! JobSet (`jobset.x-k8s.io/v1alpha2`): held with its native `spec.suspend`.
//! A JobSet is a list of replicated Jobs; its controller creates, for each
//! `spec.replicatedJobs[i]`, `replicas` batch Jobs named
//! `<jobset>-<replicatedJob>-<index>`, which pass the webhook as its proven
//! children. The same shape is embedded in Kubeflow Trainer's runtimes
//! (`spec.template.spec`), so `replicated_jobs` serves both.

use serde_json::Value;

use super::batch_job::BATCH_JOB_KIND;
use super::json::{
    condition_true, field, get_path, invalid, non_empty, opt_array, opt_count, template,
    template_priority_class,
};
use super::pod_request::template_requests_at;
use super::{AdapterError, FieldPath, JobAdapter, JobKind, JobState, PodSetInfo};
use crate::resources::Resources;

/// The `jobset.x-k8s.io/v1alpha2` JobSet kind.
pub static JOBSET_KIND: JobKind = JobKind {
    group: "jobset.x-k8s.io",
    version: "v1alpha2",
    kind: "JobSet",
    plural: "jobsets",
    extension: "jobset",
};

/// Adapter for JobSets.
#[derive(Debug)]
pub struct JobSetAdapter;

/// One replicated Job of a JobSet spec: `replicas` Jobs of `pods_per_job`
/// pods each, from `template` (a PodTemplateSpec).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReplicatedJob<'a> {
    pub name: &'a str,
    pub replicas: i32,
    /// Pods of one of its Jobs that run at once: `parallelism` (default 1)
    /// capped by `completions`, as the Job controller runs them.
    pub pods_per_job: i32,
    pub template: &'a Value,
    /// Where the Job's pod template is, for error messages.
    pub template_path: String,
}

/// The replicated Jobs of the JobSet spec `spec` (found at `path`).
pub(crate) fn replicated_jobs<'a>(
    spec: &'a Value,
    path: &str,
) -> Result<Vec<ReplicatedJob<'a>>, AdapterError> {
    let list_path = format!("{path}.replicatedJobs");
    opt_array(field(spec, "replicatedJobs"), &list_path)?
        .iter()
        .enumerate()
        .map(|(i, rj)| {
            let at = format!("{list_path}[{i}]");
            let name = field(rj, "name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| invalid(&format!("{at}.name"), "a name is required"))?;
            let replicas =
                opt_count(field(rj, "replicas"), &format!("{at}.replicas"))?.unwrap_or(1);
            let job_spec = get_path(rj, &["template", "spec"]).unwrap_or(&Value::Null);
            let spec_at = format!("{at}.template.spec");
            let parallelism = opt_count(
                field(job_spec, "parallelism"),
                &format!("{spec_at}.parallelism"),
            )?
            .unwrap_or(1);
            let completions = opt_count(
                field(job_spec, "completions"),
                &format!("{spec_at}.completions"),
            )?;
            let template_path = format!("{spec_at}.template");
            Ok(ReplicatedJob {
                name,
                replicas,
                pods_per_job: completions.map_or(parallelism, |c| parallelism.min(c)),
                template: template(field(job_spec, "template"), &template_path)?,
                template_path,
            })
        })
        .collect()
}

/// The pod sets of replicated Jobs: one per replicated Job, all its Jobs'
/// pods at once.
pub(crate) fn pod_sets_of(jobs: &[ReplicatedJob<'_>]) -> Result<Vec<PodSetInfo>, AdapterError> {
    jobs.iter()
        .map(|rj| {
            Ok(PodSetInfo {
                name: rj.name.to_string(),
                count: rj.replicas.saturating_mul(rj.pods_per_job),
                per_pod: template_requests_at(rj.template, &rj.template_path)?,
                template: rj.template.clone(),
            })
        })
        .collect()
}

/// The budget of the batch Job `child_name` a JobSet controller creates for
/// the JobSet named `owner_name` with replicated Jobs `jobs`: the pods of
/// one Job of its replicated Job.
pub(crate) fn child_job_budget(
    owner_name: &str,
    jobs: &[ReplicatedJob<'_>],
    child_name: &str,
) -> Option<Result<Resources, AdapterError>> {
    let rest = child_name.strip_prefix(owner_name)?.strip_prefix('-')?;
    let rj = jobs.iter().find(|rj| {
        rest.strip_prefix(rj.name)
            .and_then(|i| i.strip_prefix('-'))
            .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|i| i.parse::<i32>().ok())
            .is_some_and(|i| (0..rj.replicas).contains(&i))
    })?;
    Some(
        template_requests_at(rj.template, &rj.template_path).map(|per_pod| {
            let mut total = Resources::new();
            for (resource, amount) in per_pod.iter() {
                total.set(resource, amount.saturating_mul(i64::from(rj.pods_per_job)));
            }
            total
        }),
    )
}

/// The state of a job that runs Jobs (a JobSet, a TrainJob): the condition
/// `done` or `Failed` ends it; an active or ready Job in the list at
/// `status.<jobs>` means it runs.
pub(crate) fn jobs_state(job: &Value, done: &str, jobs: &str) -> JobState {
    if condition_true(job, done) {
        return JobState::Succeeded;
    }
    if condition_true(job, "Failed") {
        return JobState::Failed;
    }
    let running = get_path(job, &["status", jobs])
        .and_then(Value::as_array)
        .is_some_and(|all| {
            all.iter().any(|s| {
                ["active", "ready"]
                    .iter()
                    .any(|k| s.get(k).and_then(Value::as_i64).is_some_and(|n| n > 0))
            })
        });
    if running {
        JobState::Running
    } else {
        JobState::Pending
    }
}

impl JobAdapter for JobSetAdapter {
    fn kind(&self) -> &'static JobKind {
        &JOBSET_KIND
    }

    /// One pod set per replicated Job: `replicas` × the pods one of its Jobs
    /// runs at once.
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        let spec = get_path(job, &["spec"]).unwrap_or(&Value::Null);
        pod_sets_of(&replicated_jobs(spec, "spec")?)
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[
            &["status", "conditions"],
            &["status", "replicatedJobsStatus"],
        ]
    }

    /// `Completed`/`Failed` conditions end it; an active or ready Job of any
    /// replicated Job means it runs.
    fn state(&self, job: &Value) -> JobState {
        jobs_state(job, "Completed", "replicatedJobsStatus")
    }

    fn priority_class_name(&self, job: &Value) -> Option<String> {
        get_path(job, &["spec", "replicatedJobs"])
            .and_then(Value::as_array)?
            .iter()
            .find_map(|rj| {
                get_path(rj, &["template", "spec", "template"]).and_then(template_priority_class)
            })
    }

    /// The JobSet controller creates `<jobset>-<replicatedJob>-<index>`
    /// batch Jobs, one per replica of each replicated Job.
    fn child_budget(
        &self,
        owner: &Value,
        child: &'static JobKind,
        child_name: &str,
    ) -> Option<Result<Resources, AdapterError>> {
        if child != &BATCH_JOB_KIND {
            return None;
        }
        let owner_name = non_empty(get_path(owner, &["metadata", "name"]))?;
        let spec = get_path(owner, &["spec"])?;
        match replicated_jobs(spec, "spec") {
            Ok(jobs) => child_job_budget(&owner_name, &jobs, child_name),
            Err(error) => Some(Err(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{GI, assert_hold_release, container, malformed, pod_template};
    use crate::jobs::total_resources;
    use serde_json::json;

    /// A JobSet as its upstream docs show one: a leader and 2 worker Jobs of
    /// 4 pods each (parallelism 4, completions 4).
    pub(crate) fn sample() -> Value {
        json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {
                "replicatedJobs": [
                    {"name": "leader", "replicas": 1, "template": {"spec": {
                        "parallelism": 1, "completions": 1, "backoffLimit": 0,
                        "template": pod_template("high", vec![container("2", "4Gi")])}}},
                    {"name": "workers", "replicas": 2, "template": {"spec": {
                        "parallelism": 4, "completions": 4, "backoffLimit": 0,
                        "template": pod_template("", vec![container("4", "8Gi")])}}},
                ],
            }
        })
    }

    #[test]
    fn hold_and_release_use_spec_suspend() {
        let (held, released) = assert_hold_release(&JobSetAdapter, &sample());
        assert_eq!(held["spec"]["suspend"], json!(true));
        assert_eq!(released["spec"]["suspend"], json!(false));
    }

    #[test]
    fn size_is_replicas_times_the_pods_of_each_job() {
        let sets = JobSetAdapter.pod_sets(&sample()).unwrap();
        let counts: Vec<(&str, i32)> = sets.iter().map(|s| (s.name.as_str(), s.count)).collect();
        assert_eq!(counts, vec![("leader", 1), ("workers", 8)]);
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 2000 + 8 * 4000);
        assert_eq!(total.get("memory"), 4 * GI + 8 * 8 * GI);
        // Defaults: one replica, parallelism 1; completions cap parallelism.
        let mut job = sample();
        job["spec"]["replicatedJobs"][1]["replicas"] = Value::Null;
        job["spec"]["replicatedJobs"][1]["template"]["spec"]["completions"] = json!(2);
        let sets = JobSetAdapter.pod_sets(&job).unwrap();
        assert_eq!(sets[1].count, 2);
    }

    #[test]
    fn malformed_specs_name_their_field() {
        malformed(
            &JobSetAdapter,
            &sample(),
            &["spec"],
            json!({"replicatedJobs": "x"}),
            "spec.replicatedJobs",
        );
        let mut job = sample();
        job["spec"]["replicatedJobs"] = json!([]);
        assert!(JobSetAdapter.pod_sets(&job).is_ok_and(|s| s.is_empty()));
        let mut job = sample();
        job["spec"]["replicatedJobs"][1]["replicas"] = json!(-1);
        let error = JobSetAdapter.pod_sets(&job).unwrap_err().to_string();
        assert!(error.contains("spec.replicatedJobs[1].replicas"), "{error}");
        let mut job = sample();
        job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] = Value::Null;
        let error = JobSetAdapter.pod_sets(&job).unwrap_err().to_string();
        assert!(
            error.contains("spec.replicatedJobs[0].template.spec.template"),
            "{error}"
        );
    }

    #[test]
    fn state_follows_conditions_and_job_status() {
        let with = |status: Value| {
            let mut job = sample();
            job["status"] = status;
            JobSetAdapter.state(&job)
        };
        assert_eq!(with(json!({})), JobState::Pending);
        assert_eq!(
            with(json!({"replicatedJobsStatus": [{"name": "workers", "active": 2, "ready": 0}]})),
            JobState::Running
        );
        assert_eq!(
            with(json!({"conditions": [{"type": "Completed", "status": "True"}]})),
            JobState::Succeeded
        );
        assert_eq!(
            with(json!({"conditions": [{"type": "Failed", "status": "True"}]})),
            JobState::Failed
        );
        assert_eq!(
            JobSetAdapter.priority_class_name(&sample()).as_deref(),
            Some("high")
        );
    }

    #[test]
    fn its_jobs_are_children_with_one_jobs_budget() {
        let budget = |name: &str| {
            JobSetAdapter
                .child_budget(&sample(), &BATCH_JOB_KIND, name)
                .map(|b| b.unwrap().get("cpu"))
        };
        assert_eq!(budget("train-leader-0"), Some(2000));
        assert_eq!(budget("train-workers-0"), Some(16_000));
        assert_eq!(budget("train-workers-1"), Some(16_000));
        // Not a Job its controller creates.
        assert_eq!(budget("train-workers-2"), None);
        assert_eq!(budget("train-other-0"), None);
        assert_eq!(budget("other-workers-0"), None);
        assert_eq!(budget("train-workers-x"), None);
        assert!(
            JobSetAdapter
                .child_budget(&sample(), &JOBSET_KIND, "train-workers-0")
                .is_none()
        );
    }
}
