//! Generation of the CustomResourceDefinition manifests from the Rust types.
//! `cargo run -p koord-queue-api --bin crdgen` writes them into the chart; a
//! test fails when the checked-in files differ from what the types generate.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::{Schema, SchemaGenerator, json_schema};

use crate::{ElasticQuota, Queue, QueueUnit};

/// Schema of an object stored as given: the API server neither validates nor
/// prunes it. Used for embedded pod templates, whose full schema would make
/// every QueueUnit write pay for validating a copy of the job's template.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// One generated manifest.
#[derive(Debug)]
pub struct GeneratedCrd {
    /// File name inside the chart's CRD directory.
    pub file_name: String,
    /// The manifest as YAML.
    pub yaml: String,
}

/// The CRDs Koord-Queue owns (Queue, QueueUnit) and the optional ElasticQuota
/// CRD for clusters without Koordinator.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut elastic_quota = ElasticQuota::crd();
    // `*.k8s.io` groups are protected: the API server requires this annotation,
    // with the same value as the upstream scheduler-plugins/Koordinator CRD.
    elastic_quota.metadata.annotations = Some(
        [(
            "api-approved.kubernetes.io".to_string(),
            "https://github.com/kubernetes-sigs/scheduler-plugins/pull/52".to_string(),
        )]
        .into(),
    );
    vec![Queue::crd(), QueueUnit::crd(), elastic_quota]
}

/// Renders every CRD as a YAML file named `<group>_<plural>.yaml`.
pub fn generate() -> Result<Vec<GeneratedCrd>, serde_yaml::Error> {
    all()
        .into_iter()
        .map(|crd| {
            let file_name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
            let body = serde_yaml::to_string(&crd)?;
            let yaml = format!(
                "# Generated from the Rust types in api/ by `make crds`; do not edit.\n{body}"
            );
            Ok(GeneratedCrd { file_name, yaml })
        })
        .collect()
}

/// Directory of the generated CRDs inside the chart, relative to the repository root.
pub const CHART_CRD_DIR: &str = "charts/koord-queue/files/crds";

/// Absolute path of [`CHART_CRD_DIR`] in this source tree.
pub fn chart_crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(CHART_CRD_DIR)
}
