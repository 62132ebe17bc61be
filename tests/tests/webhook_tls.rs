//! The webhook's serving certificate: TLS 1.2+ with a real client, and a
//! rotation by the kubelet's `..data` symlink swap picked up without restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use koord_queue_certs::{Authority, ServingNames};
use koord_queue_tests::{fixtures, shared, webhook};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Lays out `dir` as the kubelet mounts a Secret: the files live in a
/// timestamped directory, `..data` points at it, `tls.crt`/`tls.key` point
/// through `..data`. Swapping `..data` atomically switches both files.
fn kubelet_write(dir: &Path, generation: &str, cert: &str, key: &str) {
    let data = dir.join(format!("..{generation}"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tls.crt"), cert).unwrap();
    std::fs::write(data.join("tls.key"), key).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..{generation}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        let link = dir.join(file);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{file}"), &link).unwrap();
        }
    }
}

/// Connects with TLS trusting `ca_pem`; returns the server's leaf
/// certificate's CN and the response to `request`.
fn tls_call(addr: SocketAddr, ca_pem: &str, request: &[u8]) -> (String, String) {
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
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(request).unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response);
    let leaf = tls.conn.peer_certificates().unwrap()[0].clone();
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(leaf.as_ref())
        }
    );
    let cn = koord_queue_certs::inspect::summarize(&pem)
        .unwrap()
        .common_name;
    (cn, String::from_utf8_lossy(&response).into_owned())
}

const BAD_REQUEST: &[u8] =
    b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";

#[tokio::test]
async fn serving_certificate_rotation_by_symlink_swap() {
    let cp = shared::tier1().await.unwrap();
    let dir = cp.dir().join("rotating-tls");
    std::fs::create_dir_all(&dir).unwrap();
    let ca = Authority::generate("rotation-ca", Duration::from_secs(3600)).unwrap();
    let first = ca
        .issue_serving(
            "first",
            &ServingNames::loopback(),
            Duration::from_secs(3600),
        )
        .unwrap();
    kubelet_write(&dir, "2026_11_29_a", &first.cert_pem, &first.key_pem);

    let running = webhook::start(cp, webhook::test_args(&dir)).await.unwrap();
    let addr = running.listen_addr;
    let ca_pem = ca.cert_pem().to_string();
    let call = move || {
        let ca_pem = ca_pem.clone();
        async move {
            tokio::task::spawn_blocking(move || tls_call(addr, &ca_pem, BAD_REQUEST))
                .await
                .unwrap()
        }
    };
    let (cn, response) = call().await;
    assert_eq!(cn, "first");
    assert!(
        response.starts_with("HTTP/1.1 400"),
        "not JSON ⇒ 400: {response}"
    );
    assert!(response.contains("not JSON"), "{response}");

    let second = ca
        .issue_serving(
            "second",
            &ServingNames::loopback(),
            Duration::from_secs(3600),
        )
        .unwrap();
    kubelet_write(&dir, "2026_11_29_b", &second.cert_pem, &second.key_pem);
    fixtures::eventually(Duration::from_secs(10), || {
        let call = call.clone();
        async move { Ok(call().await.0 == "second") }
    })
    .await
    .expect("the rotated certificate is served without a restart");

    // A broken update keeps the current certificate.
    kubelet_write(&dir, "2026_11_29_c", "not a certificate", "nor a key");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(call().await.0, "second");
}

#[tokio::test]
async fn a_bad_certificate_stops_the_webhook_at_start() {
    let cp = shared::tier1().await.unwrap();
    let dir = cp.dir().join("bad-tls");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), "garbage").unwrap();
    std::fs::write(dir.join("tls.key"), "garbage").unwrap();
    let err = webhook::start(cp, webhook::test_args(&dir))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot load the serving certificate"),
        "{err:#}"
    );
}
