//! `argoproj.io/v1alpha1` Workflow. A workflow's pods are created step by step
//! from its templates, so its needs cannot be read from a pod template: the
//! user states them in the annotation `koord-queue/min-resources`.

use serde_json::{Value, json};

use super::json::{annotation, get_path, invalid, non_empty};
use super::pod_request::resource_list;
use super::{AdapterError, FieldPath, JobAdapter, JobKind, JobState, PodSetInfo};
use crate::keys::MIN_RESOURCES_ANNOTATION;
use crate::resources::Resources;

/// The `argoproj.io/v1alpha1` Workflow kind.
pub static WORKFLOW_KIND: JobKind = JobKind {
    group: "argoproj.io",
    version: "v1alpha1",
    kind: "Workflow",
    plural: "workflows",
    extension: "argo",
};

/// Adapter for Argo Workflows: held with `spec.suspend`.
#[derive(Debug)]
pub struct WorkflowAdapter;

impl JobAdapter for WorkflowAdapter {
    fn kind(&self) -> &'static JobKind {
        &WORKFLOW_KIND
    }

    /// One pod set `workflow` of one "pod" holding the annotated resources.
    /// The annotation is required: without it the workflow's size would be
    /// zero and it would run outside any quota.
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        Ok(vec![PodSetInfo {
            name: "workflow".to_string(),
            count: 1,
            template: json!({}),
            per_pod: min_resources(job)?,
        }])
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[&["status", "phase"]]
    }

    /// From `status.phase`: `Succeeded`, `Failed`/`Error`, `Running`.
    fn state(&self, job: &Value) -> JobState {
        match get_path(job, &["status", "phase"]).and_then(Value::as_str) {
            Some("Succeeded") => JobState::Succeeded,
            Some("Failed" | "Error") => JobState::Failed,
            Some("Running") => JobState::Running,
            _ => JobState::Pending,
        }
    }

    /// `spec.podPriorityClassName`, the class of the workflow's pods.
    fn priority_class_name(&self, job: &Value) -> Option<String> {
        non_empty(get_path(job, &["spec", "podPriorityClassName"]))
    }
}

/// The resources of the annotation `koord-queue/min-resources`, a ResourceList
/// as JSON (`{"cpu":"2","memory":"4Gi"}`).
fn min_resources(job: &Value) -> Result<Resources, AdapterError> {
    let path = format!("metadata.annotations[{MIN_RESOURCES_ANNOTATION}]");
    if let Some(raw) = get_path(job, &["metadata", "annotations", MIN_RESOURCES_ANNOTATION])
        && !raw.is_string()
    {
        return Err(invalid(&path, "annotation values must be strings"));
    }
    let Some(text) = annotation(job, MIN_RESOURCES_ANNOTATION) else {
        return Err(invalid(
            &path,
            "required: a Workflow creates its pods step by step, so Koord-Queue sizes it by this \
             annotation, the most it runs at once, e.g. {\"cpu\":\"4\",\"memory\":\"8Gi\"}",
        ));
    };
    let list: Value = serde_json::from_str(text).map_err(|e| {
        invalid(
            &path,
            format!("expected a ResourceList JSON object such as {{\"cpu\":\"2\",\"memory\":\"4Gi\"}}: {e}"),
        )
    })?;
    if !list.is_object() {
        return Err(invalid(
            &path,
            "expected a ResourceList JSON object such as {\"cpu\":\"2\",\"memory\":\"4Gi\"}",
        ));
    }
    resource_list(Some(&list), &path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{GI, assert_hold_release};
    use crate::jobs::total_resources;

    fn workflow(min_resources: Option<&str>) -> Value {
        let mut wf = json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "hello-", "namespace": "team-a"},
            "spec": {
                "entrypoint": "main",
                "podPriorityClassName": "wf-prio",
                "templates": [{"name": "main", "container": {"image": "busybox", "command": ["echo", "hi"]}}],
            }
        });
        if let Some(text) = min_resources {
            wf["metadata"]["annotations"] = json!({MIN_RESOURCES_ANNOTATION: text});
        }
        wf
    }

    #[test]
    fn hold_uses_spec_suspend() {
        let job = workflow(None);
        let (held, released) = assert_hold_release(&WorkflowAdapter, &job);
        let mut expected = job.clone();
        expected["spec"]["suspend"] = json!(true);
        assert_eq!(held, expected);
        assert_eq!(released["spec"]["suspend"], json!(false));
    }

    #[test]
    fn resources_from_the_annotation() {
        let sets = WorkflowAdapter
            .pod_sets(&workflow(Some(
                r#"{"cpu":"2","memory":"4Gi","nvidia.com/gpu":1}"#,
            )))
            .unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!((sets[0].name.as_str(), sets[0].count), ("workflow", 1));
        assert_eq!(sets[0].template, json!({}));
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 2000);
        assert_eq!(total.get("memory"), 4 * GI);
        assert_eq!(total.get("nvidia.com/gpu"), 1);

        // Without the annotation it cannot be sized: refused, not counted as zero.
        match WorkflowAdapter.pod_sets(&workflow(None)) {
            Err(AdapterError::Invalid { reason, .. }) => assert!(reason.starts_with("required")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_annotation_is_refused() {
        let want = "metadata.annotations[koord-queue/min-resources]";
        for text in [
            "cpu=2",
            "[\"cpu\"]",
            "{\"cpu\": \"two\"}",
            "{\"cpu\": \"-2\"}",
            "{\"cpu\": {}}",
            "",
        ] {
            match WorkflowAdapter.pod_sets(&workflow(Some(text))) {
                Err(AdapterError::Invalid { path, .. }) => {
                    assert!(path.starts_with(want), "{text}: {path}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let mut wf = workflow(None);
        wf["metadata"]["annotations"] = json!({MIN_RESOURCES_ANNOTATION: {"cpu": "2"}});
        assert!(matches!(
            WorkflowAdapter.pod_sets(&wf),
            Err(AdapterError::Invalid { path, .. }) if path == want
        ));
    }

    #[test]
    fn state_from_phase() {
        let with = |phase: &str| {
            let mut wf = workflow(None);
            wf["status"] = json!({"phase": phase});
            WorkflowAdapter.state(&wf)
        };
        assert_eq!(WorkflowAdapter.state(&workflow(None)), JobState::Pending);
        assert_eq!(with("Pending"), JobState::Pending);
        assert_eq!(with("Running"), JobState::Running);
        assert_eq!(with("Succeeded"), JobState::Succeeded);
        assert_eq!(with("Failed"), JobState::Failed);
        assert_eq!(with("Error"), JobState::Failed);
    }

    #[test]
    fn priority_class_of_the_pods() {
        assert_eq!(
            WorkflowAdapter
                .priority_class_name(&workflow(None))
                .as_deref(),
            Some("wf-prio")
        );
    }
}
