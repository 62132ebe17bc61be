//! CRDs of the job frameworks Koord-Queue queues, for clusters in tests.
//!
//! - [`job_framework_crds`]: minimal ones — the real group/version/kind/
//!   plural, a status subresource, the suspend fields typed as the real CRDs
//!   type them, everything else kept as given — for the scheduling suites.
//! - [`upstream_crds`]: the real upstream files in `tests/upstream-crds/`
//!   (byte for byte; `SOURCES.md` says where each comes from), with their
//!   validation, defaults, pruning and `/scale` subresources, for the suites
//!   where exactly that matters (the tenant suite).

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

/// Upstream CRD files of the job kinds the seed queues (tests/upstream-crds).
pub const UPSTREAM_JOB_CRDS: &[&str] = &[
    "kubeflow.org_tfjobs.yaml",
    "kubeflow.org_pytorchjobs.yaml",
    "kubeflow.org_mpijobs.yaml",
    "ray.io_rayjobs.yaml",
    "ray.io_rayclusters.yaml",
    "sparkoperator.k8s.io_sparkapplications.yaml",
    "argoproj.io_workflows.full.yaml",
    "jobset.x-k8s.io_jobsets.yaml",
    "trainer.kubeflow.org_trainjobs.yaml",
    "trainer.kubeflow.org_trainingruntimes.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
];

/// The real upstream CRDs named `files` (in `tests/upstream-crds/`).
pub fn upstream_crds(files: &[&str]) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("upstream-crds");
    let paths: Vec<std::path::PathBuf> = files.iter().map(|f| dir.join(f)).collect();
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    crate::fixtures::read_crds(&refs)
}
