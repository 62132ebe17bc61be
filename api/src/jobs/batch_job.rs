//! `batch/v1` Job: held with its native `spec.suspend`.

use serde_json::Value;

use super::json::{condition_true, field, get_path, opt_count, template};
use super::pod_request::template_requests_at;
use super::{AdapterError, FieldPath, JobAdapter, JobKind, JobState, PodSetInfo};

/// The `batch/v1` Job kind.
pub static BATCH_JOB_KIND: JobKind = JobKind {
    group: "batch",
    version: "v1",
    kind: "Job",
    plural: "jobs",
    extension: "batchjob",
};

/// Adapter for `batch/v1` Jobs.
#[derive(Debug)]
pub struct BatchJobAdapter;

impl JobAdapter for BatchJobAdapter {
    fn kind(&self) -> &'static JobKind {
        &BATCH_JOB_KIND
    }

    /// One pod set `main`: the pods that run at once, `parallelism` (default 1)
    /// capped by `completions` when that is set.
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        let spec = get_path(job, &["spec"]).unwrap_or(&Value::Null);
        let parallelism = opt_count(field(spec, "parallelism"), "spec.parallelism")?.unwrap_or(1);
        let completions = opt_count(field(spec, "completions"), "spec.completions")?;
        let count = completions.map_or(parallelism, |c| parallelism.min(c));
        let template = template(field(spec, "template"), "spec.template")?;
        Ok(vec![PodSetInfo {
            name: "main".to_string(),
            count,
            per_pod: template_requests_at(template, "spec.template")?,
            template: template.clone(),
        }])
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[
            &["status", "conditions"],
            &["status", "ready"],
            &["status", "active"],
        ]
    }

    /// `Complete`/`Failed` conditions end the job; active or ready pods mean it runs.
    fn state(&self, job: &Value) -> JobState {
        if condition_true(job, "Complete") {
            JobState::Succeeded
        } else if condition_true(job, "Failed") {
            JobState::Failed
        } else if Self::pods_running(job) {
            JobState::Running
        } else {
            JobState::Pending
        }
    }

    /// `spec.activeDeadlineSeconds`: the Job controller fails the job then.
    fn max_run_seconds(&self, job: &Value) -> Option<i64> {
        super::deadline_seconds(job, &["spec", "activeDeadlineSeconds"])
    }

    fn priority_class_name(&self, job: &Value) -> Option<String> {
        get_path(job, &["spec", "template"]).and_then(super::json::template_priority_class)
    }
}

impl BatchJobAdapter {
    /// Whether the job's pods run: `status.ready` (pods Ready) where the
    /// cluster reports it — `active` also counts pods still pending, e.g.
    /// unschedulable ones — else `status.active`.
    fn pods_running(job: &Value) -> bool {
        let count = |k: &str| get_path(job, &["status", k]).and_then(Value::as_i64);
        match count("ready") {
            Some(ready) => ready > 0,
            None => count("active").is_some_and(|n| n > 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{GI, assert_hold_release, container, malformed, pod_template};
    use crate::jobs::total_resources;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "pi", "namespace": "team-a", "labels": {"quota.scheduling.koordinator.sh/name": "team-a"}},
            "spec": {
                "parallelism": 4,
                "completions": 10,
                "backoffLimit": 4,
                "template": pod_template("high", vec![container("2", "4Gi")]),
            }
        })
    }

    #[test]
    fn hold_and_release_use_spec_suspend() {
        let job = sample();
        let (held, released) = assert_hold_release(&BatchJobAdapter, &job);
        assert_eq!(held["spec"]["suspend"], json!(true));
        assert_eq!(released["spec"]["suspend"], json!(false));
        // Nothing but spec.suspend changes.
        let mut expected = job.clone();
        expected["spec"]["suspend"] = json!(true);
        assert_eq!(held, expected);
    }

    #[test]
    fn its_deadline_bounds_its_run() {
        let mut job = sample();
        assert_eq!(BatchJobAdapter.max_run_seconds(&job), None);
        job["spec"]["activeDeadlineSeconds"] = json!(600);
        assert_eq!(BatchJobAdapter.max_run_seconds(&job), Some(600));
        job["spec"]["activeDeadlineSeconds"] = json!(0);
        assert_eq!(BatchJobAdapter.max_run_seconds(&job), None);
        job["spec"]["activeDeadlineSeconds"] = json!("600");
        assert_eq!(BatchJobAdapter.max_run_seconds(&job), None);
    }

    #[test]
    fn pod_set_counts_running_pods() {
        let sets = BatchJobAdapter.pod_sets(&sample()).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].name, "main");
        assert_eq!(sets[0].count, 4);
        assert_eq!(sets[0].template, sample()["spec"]["template"]);
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 8000);
        assert_eq!(total.get("memory"), 16 * GI);

        let count = |spec_patch: Value| {
            let mut job = sample();
            for (k, v) in spec_patch.as_object().unwrap() {
                job["spec"][k] = v.clone();
            }
            BatchJobAdapter.pod_sets(&job).unwrap()[0].count
        };
        assert_eq!(count(json!({"parallelism": 4, "completions": 2})), 2);
        assert_eq!(count(json!({"parallelism": null, "completions": null})), 1);
        assert_eq!(count(json!({"parallelism": null, "completions": 3})), 1);
        assert_eq!(count(json!({"parallelism": 0})), 0);
        assert_eq!(count(json!({"parallelism": 5, "completions": null})), 5);
    }

    #[test]
    fn malformed_jobs_are_refused() {
        for (patch, path) in [
            (json!({"parallelism": -1}), "spec.parallelism"),
            (json!({"parallelism": "3"}), "spec.parallelism"),
            (json!({"completions": 1.5}), "spec.completions"),
            (json!({"template": "x"}), "spec.template"),
            (json!({"template": null}), "spec.template"),
        ] {
            malformed(&BatchJobAdapter, &sample(), &["spec"], patch, path);
        }
    }

    #[test]
    fn state_follows_conditions_and_pods() {
        let with_status = |status: Value| {
            let mut job = sample();
            job["status"] = status;
            BatchJobAdapter.state(&job)
        };
        assert_eq!(BatchJobAdapter.state(&sample()), JobState::Pending);
        assert_eq!(with_status(json!({"active": 0})), JobState::Pending);
        assert_eq!(with_status(json!({"active": 2})), JobState::Running);
        assert_eq!(with_status(json!({"ready": 1})), JobState::Running);
        // Pods created but not ready (e.g. unschedulable): not running yet.
        assert_eq!(
            with_status(json!({"active": 2, "ready": 0})),
            JobState::Pending
        );
        assert_eq!(
            with_status(json!({"conditions": [{"type": "Complete", "status": "True"}]})),
            JobState::Succeeded
        );
        assert_eq!(
            with_status(json!({"active": 1, "conditions": [{"type": "Failed", "status": "True"}]})),
            JobState::Failed
        );
        assert_eq!(
            with_status(
                json!({"active": 1, "ready": 1, "conditions": [{"type": "Complete", "status": "False"}]})
            ),
            JobState::Running
        );
    }

    #[test]
    fn priority_class_comes_from_the_template() {
        assert_eq!(
            BatchJobAdapter.priority_class_name(&sample()).as_deref(),
            Some("high")
        );
        let mut job = sample();
        job["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("priorityClassName");
        assert_eq!(BatchJobAdapter.priority_class_name(&job), None);
    }
}
