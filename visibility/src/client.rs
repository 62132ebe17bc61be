//! Reading the API as kubectl does: through kube-apiserver, asking for gzip
//! (client-go's default). A 10,000-unit backlog is ~4.7 MB of JSON and
//! ~320 KB gzipped. kube-rs asks for gzip only with a crate feature that
//! would turn it on for every client built with it in this workspace (the
//! scheduler's and the webhook's too), so the CLI and the tests ask here.

use http_body_util::BodyExt as _;
use kube::core::Status;
use serde::de::DeserializeOwned;

/// An answer as it came over the wire.
#[derive(Debug)]
pub struct Wire {
    /// Its status code.
    pub status: u16,
    /// Its `Content-Encoding`, if any.
    pub encoding: Option<String>,
    /// The bytes that crossed the wire.
    pub wire_bytes: usize,
    /// The body, gunzipped when it came gzipped.
    pub body: Vec<u8>,
}

/// GETs `path` as `client`'s user with `Accept-Encoding: gzip`, and gunzips
/// a gzipped answer, whatever its status.
pub async fn get_wire(client: &kube::Client, path: &str) -> Result<Wire, kube::Error> {
    use std::io::Read as _;
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::ACCEPT_ENCODING, "gzip")
        .body(kube::client::Body::empty())
        .map_err(kube::Error::HttpError)?;
    let response = client.send(request).await?;
    let status = response.status().as_u16();
    let encoding = response
        .headers()
        .get(http::header::CONTENT_ENCODING)
        .and_then(|e| e.to_str().ok())
        .map(str::to_string);
    let wire = response
        .into_body()
        .collect()
        .await
        .map_err(|e| kube::Error::Service(Box::new(e)))?
        .to_bytes();
    let body = if encoding
        .as_deref()
        .is_some_and(|e| e.eq_ignore_ascii_case("gzip"))
    {
        let mut plain = Vec::with_capacity(wire.len().saturating_mul(8));
        flate2::read::GzDecoder::new(&wire[..])
            .read_to_end(&mut plain)
            .map_err(|e| kube::Error::Service(Box::new(e)))?;
        plain
    } else {
        wire.to_vec()
    };
    Ok(Wire {
        status,
        encoding,
        wire_bytes: wire.len(),
        body,
    })
}

/// GETs `path` as JSON, asking for gzip: the parsed answer, or the API's
/// refusal as kube-rs gives it (`kube::Error::Api`), so callers tell a 403
/// or a 404 apart as they do for any request.
pub async fn get_json<T: DeserializeOwned>(
    client: &kube::Client,
    path: &str,
) -> Result<T, kube::Error> {
    let wire = get_wire(client, path).await?;
    if !(200..300).contains(&wire.status) {
        let status = serde_json::from_slice::<Status>(&wire.body)
            .ok()
            .filter(|s| s.code == wire.status)
            .unwrap_or_else(|| {
                Status::failure(&String::from_utf8_lossy(&wire.body), "Unknown")
                    .with_code(wire.status)
            });
        return Err(kube::Error::Api(status.boxed()));
    }
    serde_json::from_slice(&wire.body).map_err(kube::Error::SerdeError)
}
