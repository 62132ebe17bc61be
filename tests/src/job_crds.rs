//! Minimal CRDs of the job frameworks Koord-Queue queues, for clusters in
//! tests: the real group/version/kind/plural, a status subresource, the
//! suspend fields typed as the real CRDs type them (`spec.suspend` or
//! `spec.runPolicy.suspend`), everything else kept as given. The real
//! upstream CRDs are far larger; only these fields matter to Koord-Queue.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Where a framework keeps its native suspend flag.
#[derive(Clone, Copy, Debug)]
enum SuspendField {
    /// `spec.suspend`
    Spec,
    /// `spec.runPolicy.suspend` (Kubeflow training operators)
    RunPolicy,
}

const FRAMEWORKS: &[(&str, &str, &str, &str, SuspendField)] = &[
    (
        "kubeflow.org",
        "v1",
        "TFJob",
        "tfjobs",
        SuspendField::RunPolicy,
    ),
    (
        "kubeflow.org",
        "v1",
        "PyTorchJob",
        "pytorchjobs",
        SuspendField::RunPolicy,
    ),
    (
        "kubeflow.org",
        "v2beta1",
        "MPIJob",
        "mpijobs",
        SuspendField::RunPolicy,
    ),
    ("ray.io", "v1", "RayJob", "rayjobs", SuspendField::Spec),
    (
        "ray.io",
        "v1",
        "RayCluster",
        "rayclusters",
        SuspendField::Spec,
    ),
    (
        "sparkoperator.k8s.io",
        "v1beta2",
        "SparkApplication",
        "sparkapplications",
        SuspendField::Spec,
    ),
    (
        "argoproj.io",
        "v1alpha1",
        "Workflow",
        "workflows",
        SuspendField::Spec,
    ),
];

fn crd(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    suspend: SuspendField,
) -> CustomResourceDefinition {
    let suspend_schema = serde_json::json!({ "type": "boolean" });
    let spec_properties = match suspend {
        SuspendField::Spec => serde_json::json!({ "suspend": suspend_schema }),
        SuspendField::RunPolicy => serde_json::json!({
            "runPolicy": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": { "suspend": suspend_schema },
            }
        }),
    };
    let mut annotations = serde_json::Map::new();
    if group.ends_with(".k8s.io") {
        annotations.insert(
            "api-approved.kubernetes.io".into(),
            "https://github.com/kubeflow/spark-operator/pull/1298".into(),
        );
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}"), "annotations": annotations },
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
            },
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": spec_properties,
                        },
                        "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    },
                }},
            }],
        },
    }))
    .unwrap_or_else(|e| panic!("CRD of {kind} is malformed: {e}"))
}

/// The CRDs of the seven non-core job kinds.
pub fn job_framework_crds() -> Vec<CustomResourceDefinition> {
    FRAMEWORKS
        .iter()
        .map(|(g, v, k, p, s)| crd(g, v, k, p, *s))
        .collect()
}
