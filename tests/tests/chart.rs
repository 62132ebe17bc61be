//! The Helm chart lints and renders the generated CRDs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use koord_queue_tests::tools::{self, Tool};

fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/koord-queue")
}

fn helm(args: &[&str]) -> (bool, String) {
    let home = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(tools::path(Tool::Helm).unwrap())
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn helm_lint_passes() {
    let chart = chart_dir();
    let (ok, out) = helm(&["lint", "--strict", chart.to_str().unwrap()]);
    assert!(ok, "helm lint failed:\n{out}");
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn helm_template_renders_the_generated_crds() {
    let chart = chart_dir();
    let (ok, out) = helm(&["template", "kq", chart.to_str().unwrap()]);
    assert!(ok, "helm template failed:\n{out}");
    let crds = koord_queue_tests::fixtures::read_crds_from_str(&out).unwrap();
    let names: Vec<_> = crds
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        [
            "queues.scheduling.x-k8s.io",
            "queueunits.scheduling.x-k8s.io",
            "elasticquotas.scheduling.sigs.k8s.io"
        ]
    );
    assert_eq!(
        crds,
        koord_queue_api::crd::all(),
        "rendered CRDs differ from the types"
    );

    let (ok, out) = helm(&[
        "template",
        "kq",
        chart.to_str().unwrap(),
        "--set",
        "crds.installElasticQuota=false",
    ]);
    assert!(ok, "{out}");
    assert!(!out.contains("elasticquotas.scheduling.sigs.k8s.io"));
}
