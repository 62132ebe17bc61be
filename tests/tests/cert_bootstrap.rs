//! Self-signed certificate mode: `koord-queue-certs bootstrap`, running with
//! the chart's certs ServiceAccount, creates the CA and serving certificate
//! in the Secret and patches the caBundle; the API server then calls the
//! webhook (in process, by URL) over TLS trusting that bundle. Renewing the
//! serving certificate and rotating the CA keep it working at every step, and
//! the watch loop repairs a caBundle someone overwrote.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use koord_queue_api::keys;
use koord_queue_certs::ServingNames;
use koord_queue_certs::bootstrap::{self, BootstrapConfig, Change};
use koord_queue_tests::install::{self, chart_dir};
use koord_queue_tests::{fixtures, kubeconfig, process, shared, webhook};
use kube::api::{Api, Patch, PatchParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use time::OffsetDateTime;

const NS: &str = keys::SYSTEM_NAMESPACE;
const RELEASE: &str = "selfsigned";
const FULLNAME: &str = "selfsigned-koord-queue";
const DAY: Duration = Duration::from_secs(24 * 3600);

fn days_later(days: u32) -> OffsetDateTime {
    OffsetDateTime::now_utc() + DAY * days
}

/// The DER of the leaf certificate `addr` serves, trusting `ca_bundle`.
fn served_cert(addr: SocketAddr, ca_bundle: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    conn.peer_certificates().unwrap()[0].to_vec()
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

async fn secret_data(client: &kube::Client, name: &str) -> (String, Secret) {
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap();
    let bundle = String::from_utf8(secret.data.as_ref().unwrap()["ca.crt"].0.clone()).unwrap();
    (bundle, secret)
}

async fn ca_bundle_of(client: &kube::Client, config: &str) -> Option<String> {
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(config)
        .await
        .unwrap();
    // Every webhook of the configuration (creates, updates) gets the bundle.
    let bundles: Vec<Option<String>> = mwc
        .webhooks
        .unwrap()
        .iter()
        .map(|w| {
            w.client_config
                .ca_bundle
                .as_ref()
                .map(|b| String::from_utf8(b.0.clone()).unwrap())
        })
        .collect();
    // Jobs' and pods' creates and updates (webhook.reviewPods).
    assert_eq!(bundles.len(), 4);
    assert!(
        bundles.iter().all(|b| *b == bundles[0]),
        "one bundle for every webhook"
    );
    bundles[0].clone()
}

#[tokio::test]
async fn the_bootstrap_makes_a_working_webhook_and_rotations_keep_it_working() {
    let cp = shared::tier1().await.unwrap();
    let admin = cp.client().await.unwrap();
    let port = process::free_port().unwrap();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let webhook_configuration = format!("{FULLNAME}-webhook");
    let secret = format!("{FULLNAME}-webhook-tls");

    // The chart in self-signed mode (its bootstrap Deployment cannot run
    // here; this test runs the bootstrap with that Deployment's identity).
    let chart = chart_dir();
    install::helm_ok(
        &cp.dir().join("helm"),
        Some(cp.kubeconfig()),
        &[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            NS,
            "--create-namespace",
            "--set",
            "certs.mode=self-signed",
            "--set",
            "crds.install=false",
            "--set",
            "crds.installElasticQuota=false",
            "--set",
            "webhook.replicas=0",
            "--set",
            "scheduler.replicas=0",
            "--set",
            &format!("webhook.url=https://127.0.0.1:{port}/mutate"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(ca_bundle_of(&admin, &webhook_configuration).await, None);
    let certs_kubeconfig = install::service_account_kubeconfig(
        cp,
        NS,
        &format!("{FULLNAME}-certs"),
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let certs = kubeconfig::client_from_file(&certs_kubeconfig)
        .await
        .unwrap();

    let tls_dir = cp.dir().join("selfsigned-webhook-tls");
    let mut names = ServingNames::for_service(&format!("{FULLNAME}-webhook"), NS);
    // The API server calls the in-process webhook at 127.0.0.1.
    names.ips.push([127, 0, 0, 1].into());
    let config = BootstrapConfig {
        namespace: NS.into(),
        secret: secret.clone(),
        webhook_configuration: Some(webhook_configuration.clone()),
        api_service: None,
        names,
        common_name: format!("{FULLNAME}-webhook.{NS}.svc"),
        cert_validity: 365 * DAY,
        renew_before: 30 * DAY,
        ca_validity: 3650 * DAY,
        ca_renew_before: 365 * DAY,
        out_dir: Some(tls_dir.clone()),
    };

    // 1. First run: a CA and a serving certificate; the caBundle is set.
    let report = bootstrap::reconcile(&certs, &config, OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert!(matches!(report.change, Change::Created(_)), "{report:?}");
    assert_eq!(
        report.patched_webhooks, 4,
        "jobs' and pods' creates and updates"
    );
    let (bundle, stored) = secret_data(&admin, &secret).await;
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let keys: Vec<_> = stored.data.as_ref().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    assert_eq!(
        ca_bundle_of(&admin, &webhook_configuration).await,
        Some(bundle.clone())
    );

    // The API server calls the webhook over TLS, trusting the injected bundle.
    let mut args = webhook::test_args(&tls_dir);
    args.listen_addr = listen;
    let running = webhook::start(cp, args).await.unwrap();
    assert_eq!(running.listen_addr, listen);
    let ns = fixtures::create_namespace(&admin, true).await.unwrap();
    install::wait_webhook_effective(&admin, &ns).await.unwrap();

    // 2. Rerun: everything is reused, nothing is written.
    let report = bootstrap::reconcile(&certs, &config, OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert_eq!(report.change, Change::Unchanged);
    assert_eq!(report.patched_webhooks, 0);
    let (_, again) = secret_data(&admin, &secret).await;
    assert_eq!(
        again.metadata.resource_version,
        stored.metadata.resource_version
    );

    // 3. 340 days on the serving certificate is renewed from the same CA;
    // the webhook reloads it and keeps being called.
    let old_cert = read(&tls_dir, "tls.crt");
    let report = bootstrap::reconcile(&certs, &config, days_later(340))
        .await
        .unwrap();
    assert!(
        matches!(report.change, Change::RenewedServing(_)),
        "{report:?}"
    );
    let new_cert = read(&tls_dir, "tls.crt");
    assert_ne!(new_cert, old_cert);
    assert_eq!(secret_data(&admin, &secret).await.0, bundle, "same CA");
    fixtures::eventually(Duration::from_secs(10), || {
        let served = served_cert(listen, &bundle);
        let want = der_of(&new_cert);
        async move { Ok(served == want) }
    })
    .await
    .expect("the webhook serves the renewed certificate");
    install::wait_webhook_effective(&admin, &ns).await.unwrap();

    // 4. Near the CA's end the CA rotates. The bundle trusts the new and the
    // old CA: the webhook still serving the old certificate keeps working
    // until it reloads, and after.
    let staging = cp.dir().join("selfsigned-staging");
    let mut rotating = config.clone();
    rotating.out_dir = Some(staging.clone());
    let report = bootstrap::reconcile(&certs, &rotating, days_later(3300))
        .await
        .unwrap();
    assert!(matches!(report.change, Change::RotatedCa(_)), "{report:?}");
    let (rotated_bundle, _) = secret_data(&admin, &secret).await;
    assert_eq!(rotated_bundle.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(
        rotated_bundle.ends_with(&bundle),
        "the old CA is still trusted"
    );
    assert_eq!(
        ca_bundle_of(&admin, &webhook_configuration).await,
        Some(rotated_bundle.clone())
    );
    assert_eq!(
        served_cert(listen, &bundle),
        der_of(&new_cert),
        "not reloaded yet"
    );
    install::wait_webhook_effective(&admin, &ns).await.unwrap();
    // The kubelet would now update the mounted Secret.
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        std::fs::copy(staging.join(file), tls_dir.join(file)).unwrap();
    }
    let rotated_cert = read(&tls_dir, "tls.crt");
    fixtures::eventually(Duration::from_secs(10), || {
        let served = served_cert(listen, &rotated_bundle);
        let want = der_of(&rotated_cert);
        async move { Ok(served == want) }
    })
    .await
    .expect("the webhook serves the certificate of the new CA");
    install::wait_webhook_effective(&admin, &ns).await.unwrap();

    // 5. Someone overwrites the caBundle (an upgrade with --force, say): the
    // API server stops trusting the webhook, and the watch loop repairs it.
    let foreign = koord_queue_certs::Authority::generate("foreign", DAY).unwrap();
    use base64::Engine;
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .patch(
            &webhook_configuration,
            &PatchParams::default(),
            &Patch::Strategic(serde_json::json!({ "webhooks": [{
                "name": "jobs.koord-queue.x-k8s.io",
                "clientConfig": { "caBundle": base64::engine::general_purpose::STANDARD.encode(foreign.cert_pem()) },
            }]})),
        )
        .await
        .unwrap();
    fixtures::eventually(Duration::from_secs(10), || async {
        Ok(!webhook::probe(&admin, &ns).await?)
    })
    .await
    .expect("a wrong caBundle breaks the call");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn({
        let config = config.clone();
        async move {
            bootstrap::watch(&certs, &config, Duration::from_millis(300), async {
                let _ = stop_rx.await;
            })
            .await
        }
    });
    install::wait_webhook_effective(&admin, &ns).await.unwrap();
    assert_eq!(
        ca_bundle_of(&admin, &webhook_configuration).await,
        Some(rotated_bundle)
    );
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("the watch loop stops when asked")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn the_bootstrap_refuses_a_foreign_secret_and_bad_settings() {
    let cp = shared::tier1().await.unwrap();
    let admin = cp.client().await.unwrap();
    let name = fixtures::unique_name("opaque");
    let opaque: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": name, "namespace": NS },
        "type": "Opaque", "stringData": { "x": "y" },
    }))
    .unwrap();
    Api::<Secret>::namespaced(admin.clone(), NS)
        .create(&Default::default(), &opaque)
        .await
        .unwrap();
    let mut config = BootstrapConfig {
        namespace: NS.into(),
        secret: name,
        webhook_configuration: None,
        api_service: None,
        names: ServingNames::loopback(),
        common_name: "x".into(),
        cert_validity: 10 * DAY,
        renew_before: DAY,
        ca_validity: 100 * DAY,
        ca_renew_before: 10 * DAY,
        out_dir: None,
    };
    let error = bootstrap::reconcile(&admin, &config, OffsetDateTime::now_utc())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("has type Opaque"), "{error}");
    config.renew_before = config.cert_validity;
    let error = bootstrap::reconcile(&admin, &config, OffsetDateTime::now_utc())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("--renew-before"), "{error}");
}

/// With `--api-service`, the bootstrap keeps the visibility API's
/// APIService trusting its CA: the caBundle is set, left alone while right,
/// and repaired when someone changes it.
#[tokio::test]
async fn the_bootstrap_keeps_the_api_services_ca_bundle() {
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    let cp = shared::tier1().await.unwrap();
    let admin = cp.client().await.unwrap();
    let name = "v1alpha1.bootstrap-test.koord-queue.io";
    let api_service: APIService = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": { "name": name },
        "spec": { "group": "bootstrap-test.koord-queue.io", "version": "v1alpha1",
                  "service": { "name": "nothing", "namespace": NS, "port": 443 },
                  "groupPriorityMinimum": 1000, "versionPriority": 15 },
    }))
    .unwrap();
    let apis = Api::<APIService>::all(admin.clone());
    apis.create(&Default::default(), &api_service)
        .await
        .unwrap();
    let config = BootstrapConfig {
        namespace: NS.into(),
        secret: fixtures::unique_name("visibility-tls"),
        webhook_configuration: None,
        api_service: Some(name.into()),
        names: ServingNames::for_service("koord-queue-visibility", NS),
        common_name: "koord-queue-visibility.koord-queue.svc".into(),
        cert_validity: 10 * DAY,
        renew_before: DAY,
        ca_validity: 100 * DAY,
        ca_renew_before: 10 * DAY,
        out_dir: None,
    };
    let bundle_of = || async {
        apis.get(name)
            .await
            .unwrap()
            .spec
            .unwrap()
            .ca_bundle
            .map(|b| String::from_utf8(b.0).unwrap())
    };
    let first = bootstrap::reconcile(&admin, &config, OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert!(first.api_service_found && first.api_service_patched);
    let (ca, _) = secret_data(&admin, &config.secret).await;
    assert_eq!(bundle_of().await.as_deref(), Some(ca.as_str()));
    let again = bootstrap::reconcile(&admin, &config, OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert!(!again.api_service_patched, "nothing to do");
    apis.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": { "caBundle": "Zm9v" } })),
    )
    .await
    .unwrap();
    let repaired = bootstrap::reconcile(&admin, &config, OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert!(repaired.api_service_patched);
    assert_eq!(bundle_of().await.as_deref(), Some(ca.as_str()));
    apis.delete(name, &Default::default()).await.unwrap();
}
