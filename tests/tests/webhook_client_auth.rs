//! The API server authenticates itself to the webhook (docs/security.md):
//! kube-apiserver started with an AdmissionConfiguration whose
//! `kubeConfigFile` gives it a client certificate, the webhook started with
//! `--client-ca-file`. Jobs are held through it; a connection without that
//! certificate — anyone posting forged reviews — fails the TLS handshake.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::keys;
use koord_queue_certs::Authority;
use koord_queue_tests::https::Connection;
use koord_queue_tests::{ControlPlane, Tier, e2e, fixtures, webhook};
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test]
async fn only_the_api_server_reaches_the_webhook() {
    koord_queue_tests::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let day = Duration::from_secs(24 * 3600);
    let client_ca = Authority::generate("kube-apiserver-client-ca", day).unwrap();
    let apiserver = client_ca.issue_client("kube-apiserver", &[], day).unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // The API server's credentials for calling webhooks: "*" matches any host.
    let kubeconfig = dir.path().join("admission-kubeconfig.yaml");
    std::fs::write(
        &kubeconfig,
        serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "Config",
            "users": [{ "name": "*", "user": {
                "client-certificate-data": b64(&apiserver.cert_pem),
                "client-key-data": b64(&apiserver.key_pem) } }],
        }))
        .unwrap(),
    )
    .unwrap();
    let admission = dir.path().join("admission.yaml");
    std::fs::write(
        &admission,
        serde_json::to_string(&json!({
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{ "name": "MutatingAdmissionWebhook", "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
                "kubeConfigFile": kubeconfig.display().to_string() } }],
        }))
        .unwrap(),
    )
    .unwrap();
    let cp = ControlPlane::start_with(
        Tier::One,
        &[(
            "admission-control-config-file",
            admission.display().to_string(),
        )],
    )
    .await
    .unwrap();
    let admin = cp.client().await.unwrap();
    fixtures::apply_koord_queue_crds(&admin).await.unwrap();
    fixtures::ensure_namespace(&admin, keys::SYSTEM_NAMESPACE)
        .await
        .unwrap();
    e2e::create_quota_pair(&admin, "auth-org", "auth-q", "10")
        .await
        .unwrap();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, client_ca.cert_pem()).unwrap();

    // Registration waits until the API server's calls are answered, which
    // needs its client certificate to be accepted.
    let hook = webhook::start_and_register_with(&cp, |args| {
        args.client_ca_file = Some(ca_file.clone());
    })
    .await
    .unwrap();
    let ns = fixtures::create_namespace(&admin, true).await.unwrap();
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "through-the-api", "labels": { keys::QUOTA_NAME_LABEL: "auth-q" } },
        "spec": { "template": { "spec": { "restartPolicy": "Never",
            "containers": [{ "name": "c", "image": "busybox" }] } } },
    }))
    .unwrap();
    let created = Api::<Job>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    assert_eq!(
        created.spec.unwrap().suspend,
        Some(true),
        "held through the webhook"
    );

    let server_ca = cp.pki().ca.cert_pem().to_string();
    // Anyone else: no certificate, or one of another CA.
    assert!(
        Connection::open(hook.listen_addr, &server_ca, None)
            .and_then(|mut c| c.post("/mutate", b"{}"))
            .is_err(),
        "a client without a certificate is refused"
    );
    let other = Authority::generate("other", day).unwrap();
    let forger = other.issue_client("kube-apiserver", &[], day).unwrap();
    assert!(
        Connection::open(
            hook.listen_addr,
            &server_ca,
            Some((&forger.cert_pem, &forger.key_pem))
        )
        .and_then(|mut c| c.post("/mutate", b"{}"))
        .is_err(),
        "a certificate of another CA is refused"
    );
    // The API server's own certificate is accepted.
    let (status, _) = Connection::open(
        hook.listen_addr,
        &server_ca,
        Some((&apiserver.cert_pem, &apiserver.key_pem)),
    )
    .unwrap()
    .post("/mutate", b"{}")
    .unwrap();
    assert_eq!(status, 400, "not a review, but heard");
}
