//! A minimal HTTPS/1.1 client with keep-alive, for posting straight to the
//! webhook's port as anyone on the network could (no API server in between).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// One kept-alive TLS connection.
#[allow(missing_debug_implementations)]
pub struct Connection {
    stream: BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>,
}

impl Connection {
    /// Connects to `addr` trusting `ca_pem`, presenting `client` (certificate
    /// and key PEM) when given. A refused handshake is an error.
    pub fn open(addr: SocketAddr, ca_pem: &str, client: Option<(&str, &str)>) -> Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()?;
                builder
                    .with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key.as_bytes())?)?
            }
        };
        let name = ServerName::try_from("127.0.0.1")?;
        let conn = rustls::ClientConnection::new(Arc::new(config), name)?;
        let sock = TcpStream::connect(addr)?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        sock.set_nodelay(true)?;
        let mut stream = rustls::StreamOwned::new(conn, sock);
        // Complete the handshake now, so a refused client fails here.
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .context("TLS handshake")?;
        }
        Ok(Self {
            stream: BufReader::new(stream),
        })
    }

    /// POSTs `body` (JSON) to `path`; the status and the response body.
    pub fn post(&mut self, path: &str, body: &[u8]) -> Result<(u16, String)> {
        self.request("POST", path, &[("Content-Type", "application/json")], body)
    }

    /// GETs `path` with `headers`; the status and the response body.
    pub fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Result<(u16, String)> {
        self.request("GET", path, headers, &[])
    }

    fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, String)> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        // One write: a request split over two small segments waits for the
        // peer's delayed ACK (Nagle), ~40 ms a request.
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let writer = self.stream.get_mut();
        writer.write_all(&request)?;
        writer.flush()?;
        let mut status_line = String::new();
        self.stream.read_line(&mut status_line)?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {status_line:?}"))?;
        let mut length = None;
        loop {
            let mut line = String::new();
            if self.stream.read_line(&mut line)? == 0 {
                bail!("connection closed in the headers");
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length.context("no content-length")?];
        self.stream.read_exact(&mut body)?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}
