//! Reviews per second over TLS on loopback with keep-alive, the QueueUnit
//! create answered in memory. Target (architecture §9): ≥ 10,000 reviews/s on this
//! 2-core machine. Prints a report; `--seconds N --connections N` tune it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use koord_queue_certs::{Authority, ServingNames};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use support::*;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Sends reviews on one keep-alive connection until `deadline`; returns latencies.
fn client(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
    id: u64,
    deadline: Instant,
) -> Vec<Duration> {
    let conn =
        rustls::ClientConnection::new(config, ServerName::try_from("127.0.0.1").unwrap()).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_nodelay(true).unwrap();
    let tls = rustls::StreamOwned::new(conn, sock);
    let mut reader = BufReader::new(tls);
    let mut latencies = Vec::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let mut r = review(
            "CREATE",
            job(&format!("job-{id}-{}", n % 64), Some("team-a")),
            None,
            "alice",
        );
        r["request"]["uid"] = serde_json::json!(format!("{id:04}{n:012}-aaaa-bbbb-cccc"));
        let body = r.to_string();
        let request = format!(
            "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let started = Instant::now();
        reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut length = 0usize;
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        latencies.push(started.elapsed());
    }
    latencies
}

fn main() {
    let seconds = arg("--seconds", 10);
    let connections = arg("--connections", 8);
    let ca = Authority::generate("bench-ca", Duration::from_secs(3600)).unwrap();
    let cert = ca
        .issue_serving(
            "bench",
            &ServingNames::loopback(),
            Duration::from_secs(3600),
        )
        .unwrap();
    let tls = koord_queue_certs::server_config_from_pem(
        cert.cert_pem.as_bytes(),
        cert.key_pem.as_bytes(),
    )
    .unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let app = koord_queue_webhook::router(
        webhook(standard_view(), Arc::new(MemoryApi::default())),
        6 << 20,
        4096,
    );
    let rustls = runtime
        .block_on(async { axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(tls)) });
    runtime.spawn(koord_queue_webhook::serve_tls(
        listener,
        rustls,
        app,
        Duration::from_secs(5),
        handle.clone(),
    ));
    std::thread::sleep(Duration::from_millis(200));

    let config = client_config(ca.cert_pem());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let threads: Vec<_> = (0..connections)
        .map(|id| {
            let config = config.clone();
            std::thread::spawn(move || client(addr, config, id, deadline))
        })
        .collect();
    let mut latencies: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize];
    println!(
        "webhook over TLS (loopback, keep-alive, {connections} connections, {seconds}s, QueueUnit create in memory)"
    );
    println!("  reviews:      {}", latencies.len());
    println!(
        "  throughput:   {:.0} reviews/s",
        latencies.len() as f64 / elapsed
    );
    println!("  latency p50:  {:?}", pct(0.50));
    println!("  latency p99:  {:?}", pct(0.99));
    handle.shutdown();
}
