//! `certs.mode=cert-manager` against the real cert-manager: its CRDs as the
//! module ships them, its controller and CA injector (v1.11.5) running
//! against the local control plane. The chart's Issuer chain issues the
//! webhook's certificate, the CA injector puts its CA into the chart's
//! MutatingWebhookConfiguration, the webhook serves the issued Secret's files
//! and the API server calls it for a kubectl-created Job. A renewal (what
//! `cmctl renew` does) gives a new certificate and key that the webhook
//! serves without a restart, while every admission during the swap succeeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use koord_queue_api::keys;
use koord_queue_tests::cert_manager::{self, CertManager};
use koord_queue_tests::install::{self, chart_dir};
use koord_queue_tests::{fixtures, kubeconfig, process, shared, tenant};
use kube::api::{Api, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

const NS: &str = keys::SYSTEM_NAMESPACE;
const RELEASE: &str = "koord-queue";
const CERTIFICATE: &str = "koord-queue-webhook";
const SECRET: &str = "koord-queue-webhook-tls";
const CONFIGURATION: &str = "koord-queue-webhook";

/// The DER of the leaf certificate `addr` serves, trusting `ca_pem` (a
/// blocking handshake, off the runtime that serves the webhook).
async fn served_cert(addr: SocketAddr, ca_pem: &str) -> Vec<u8> {
    let ca_pem = ca_pem.to_string();
    tokio::task::spawn_blocking(move || served_cert_blocking(addr, &ca_pem))
        .await
        .unwrap()
}

fn served_cert_blocking(addr: SocketAddr, ca_pem: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
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

fn der_of(pem: &[u8]) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem)
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// `tls.crt`, `tls.key`, `ca.crt` of the issued Secret.
async fn secret_files(client: &kube::Client) -> Option<[Vec<u8>; 3]> {
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get_opt(SECRET)
        .await
        .unwrap()?;
    let data = secret.data?;
    let get = |k: &str| data.get(k).map(|b| b.0.clone()).filter(|b| !b.is_empty());
    Some([get("tls.crt")?, get("tls.key")?, get("ca.crt")?])
}

/// The caBundle of every webhook of the chart's configuration (equal, or None).
async fn injected_bundle(client: &kube::Client) -> Option<Vec<u8>> {
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(CONFIGURATION)
        .await
        .unwrap();
    let bundles: Vec<Option<Vec<u8>>> = mwc
        .webhooks
        .unwrap_or_default()
        .iter()
        .map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()))
        .collect();
    // Jobs' and pods' creates and updates (webhook.reviewPods).
    assert_eq!(bundles.len(), 4);
    if bundles.iter().any(|b| *b != bundles[0]) {
        return None;
    }
    bundles[0].clone()
}

/// A dry-run create of a Job without a quota label in `namespace` (whose
/// default queue serves it): Ok only when the webhook held it.
async fn admitted_and_held(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let job: Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "generateName": "swap-" },
        "spec": { "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "c", "image": "busybox" }],
        }}},
    }))?;
    let created = Api::<Job>::namespaced(client.clone(), namespace)
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &job,
        )
        .await?;
    anyhow::ensure!(
        created.spec.and_then(|s| s.suspend) == Some(true),
        "admitted but not held"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_manager_issues_injects_and_renews_the_webhooks_certificate() {
    let cp = shared::tier1().await.unwrap();
    let admin = cp.client().await.unwrap();

    // 1. The real CRDs, controller and CA injector.
    cert_manager::apply_crds(&admin).await.unwrap();
    let mut cm = CertManager::start(cp, NS).unwrap();

    // 2. The chart in cert-manager mode; its webhook is this process,
    // called by URL, so the certificate also names 127.0.0.1.
    let port = process::free_port().unwrap();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let values = serde_json::json!({
        "crds": { "install": false, "installElasticQuota": false },
        "webhook": { "replicas": 0, "url": format!("https://127.0.0.1:{port}/mutate") },
        "scheduler": { "replicas": 0 },
        "certs": { "mode": "cert-manager", "certManager": { "ipAddresses": ["127.0.0.1"] } },
    });
    let values_file = cp.dir().join("cert-manager-values.yaml");
    std::fs::write(&values_file, serde_yaml::to_string(&values).unwrap()).unwrap();
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
            "-f",
            values_file.to_str().unwrap(),
        ],
    )
    .await
    .unwrap();

    // 3. Issued: the Certificate is Ready, its Secret holds the files, and
    // the CA injector put the issuing CA into both webhooks.
    let issued =
        cert_manager::wait_ready(&admin, NS, CERTIFICATE, 1, Duration::from_secs(120)).await;
    cm.check_alive().unwrap();
    let issued = issued.unwrap_or_else(|e| panic!("{e:#}\n{}", cm.log_tails(40)));
    let revision = issued.data["status"]["revision"].as_i64().unwrap();
    let [crt, key, ca] = secret_files(&admin).await.expect("the issued Secret");
    let injected = fixtures::eventually(Duration::from_secs(60), || {
        let admin = admin.clone();
        let ca = ca.clone();
        async move { Ok(injected_bundle(&admin).await == Some(ca)) }
    })
    .await;
    injected.unwrap_or_else(|e| panic!("caBundle not injected: {e:#}\n{}", cm.log_tails(40)));

    // 4. The webhook, with the chart's flags and identity, on the Secret's
    // files as the kubelet mounts them.
    let tls_dir = cp.dir().join("cert-manager-webhook-tls");
    cert_manager::write_like_kubelet(
        &tls_dir,
        &[("tls.crt", &crt), ("tls.key", &key), ("ca.crt", &ca)],
    )
    .unwrap();
    let flags = install::container_args(&admin, NS, "koord-queue-webhook")
        .await
        .unwrap();
    let mut args = install::webhook_args(&flags, listen, &tls_dir).unwrap();
    args.cert_reload_interval = Duration::from_millis(200);
    let webhook_kubeconfig = install::service_account_kubeconfig(
        cp,
        NS,
        "koord-queue-webhook",
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let webhook = koord_queue_webhook::start(
        args,
        kubeconfig::client_from_file(&webhook_kubeconfig)
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let ca_pem = String::from_utf8(ca.clone()).unwrap();
    assert_eq!(served_cert(listen, &ca_pem).await, der_of(&crt));

    // 5. A kubectl-created Job in an opted-in namespace is held through it.
    let ns = fixtures::unique_name("cm");
    tenant::tenant_namespace(cp, &ns, Some("team-cm"))
        .await
        .unwrap();
    koord_queue_tests::e2e::create_quota_in(&admin, &ns, "team-cm", "0", "8")
        .await
        .unwrap();
    install::wait_webhook_effective(&admin, &ns).await.unwrap();
    cp.kubectl(&[
        "-n",
        &ns,
        "create",
        "job",
        "hello",
        "--image=busybox",
        "--",
        "echo",
        "hello",
    ])
    .await
    .unwrap();
    let job = Api::<Job>::namespaced(admin.clone(), &ns)
        .get("hello")
        .await
        .unwrap();
    assert_eq!(job.spec.unwrap().suspend, Some(true), "held at creation");
    assert!(
        job.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(keys::QUEUE_UNIT_ANNOTATION),
        "queued"
    );

    // 6. Renewal while the API server keeps calling the webhook.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let prober = tokio::spawn({
        let (admin, ns, stop, calls) = (admin.clone(), ns.clone(), stop.clone(), calls.clone());
        async move {
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = admitted_and_held(&admin, &ns).await {
                    failures.push(format!("{e:#}"));
                }
                calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            failures
        }
    });
    cert_manager::trigger_renewal(&admin, NS, CERTIFICATE)
        .await
        .unwrap();
    let renewed = cert_manager::wait_ready(
        &admin,
        NS,
        CERTIFICATE,
        revision + 1,
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", cm.log_tails(40)));
    assert_eq!(
        renewed.data["status"]["revision"].as_i64(),
        Some(revision + 1)
    );
    let [new_crt, new_key, new_ca] = secret_files(&admin).await.unwrap();
    assert_ne!(new_crt, crt, "a new certificate");
    assert_ne!(new_key, key, "a new key (rotationPolicy: Always)");
    assert_eq!(
        new_ca, ca,
        "the same CA: the injected bundle still trusts it"
    );
    let before_swap = calls.load(Ordering::Relaxed);
    // The kubelet updates the mounted Secret; the webhook reloads it.
    cert_manager::write_like_kubelet(
        &tls_dir,
        &[
            ("tls.crt", &new_crt),
            ("tls.key", &new_key),
            ("ca.crt", &new_ca),
        ],
    )
    .unwrap();
    fixtures::eventually(Duration::from_secs(10), || {
        let ca_pem = ca_pem.clone();
        let want = der_of(&new_crt);
        async move { Ok(served_cert(listen, &ca_pem).await == want) }
    })
    .await
    .expect("the webhook serves the renewed certificate without a restart");
    // A little more traffic on the new certificate, then stop.
    let swapped = calls.load(Ordering::Relaxed);
    fixtures::eventually(Duration::from_secs(10), || {
        let n = calls.load(Ordering::Relaxed);
        async move { Ok(n >= swapped + 10) }
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    let failures = prober.await.unwrap();
    let total = calls.load(Ordering::Relaxed);
    println!(
        "renewal: {total} admissions through the webhook ({} from the swap on), {} failed",
        total - before_swap,
        failures.len()
    );
    assert!(failures.is_empty(), "failed admissions: {failures:?}");
    assert_eq!(
        injected_bundle(&admin).await,
        Some(ca.clone()),
        "bundle unchanged"
    );
    cp.kubectl(&["-n", &ns, "create", "job", "after", "--image=busybox"])
        .await
        .unwrap();
    let after = Api::<Job>::namespaced(admin.clone(), &ns)
        .get("after")
        .await
        .unwrap();
    assert_eq!(after.spec.unwrap().suspend, Some(true));

    cm.check_alive().unwrap();
    webhook.shutdown().await.unwrap();
}
