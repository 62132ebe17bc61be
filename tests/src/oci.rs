//! OCI images without a container runtime: an OCI archive (`oci-archive`,
//! as `make images` writes it) or an image in a plain-HTTP registry (the
//! in-memory registry of the install guide's test) read through its OCI
//! layout — index, manifest, config, layers — and its layers extracted in
//! order into a root filesystem with the system `tar`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// An unpacked image.
#[derive(Debug)]
pub struct Image {
    /// The image's reference name in the archive's index, if any.
    pub ref_name: Option<String>,
    /// The image manifest.
    pub manifest: Value,
    /// The image configuration (`config.User`, `config.Entrypoint`, …).
    pub config: Value,
    /// The root filesystem: every layer extracted in order.
    pub rootfs: PathBuf,
}

impl Image {
    /// The entrypoint's first element as a path inside [`Image::rootfs`].
    pub fn entrypoint_path(&self) -> Result<PathBuf> {
        let entry = self.config["config"]["Entrypoint"][0]
            .as_str()
            .context("the image has no entrypoint")?;
        Ok(self.rootfs.join(entry.trim_start_matches('/')))
    }

    /// Unpacks the OCI archive `archive` into `dir` (`dir/layout`, `dir/rootfs`).
    pub fn from_archive(archive: &Path, dir: &Path) -> Result<Self> {
        let layout = dir.join("layout");
        std::fs::create_dir_all(&layout)?;
        tar_extract(archive, &layout)?;
        let version = json_file(&layout.join("oci-layout"))?;
        ensure!(
            version["imageLayoutVersion"] == "1.0.0",
            "{}: not an OCI layout: {version}",
            archive.display()
        );
        let index = json_file(&layout.join("index.json"))?;
        let entry = &index["manifests"][0];
        let ref_name = entry["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(str::to_string);
        let blob = |digest: &str| -> Result<PathBuf> {
            let (algorithm, hex) = digest
                .split_once(':')
                .with_context(|| format!("bad digest {digest}"))?;
            Ok(layout.join("blobs").join(algorithm).join(hex))
        };
        let mut manifest = json_file(&blob(digest_of(entry)?)?)?;
        if manifest["mediaType"] == INDEX {
            manifest = json_file(&blob(digest_of(&manifest["manifests"][0])?)?)?;
        }
        let config = json_file(&blob(digest_of(&manifest["config"])?)?)?;
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(&rootfs)?;
        for layer in manifest["layers"].as_array().context("no layers")? {
            tar_extract(&blob(digest_of(layer)?)?, &rootfs)?;
        }
        Ok(Self {
            ref_name,
            manifest,
            config,
            rootfs,
        })
    }

    /// Pulls `repository:tag` from the plain-HTTP registry at `registry`
    /// into `dir` (`dir/blobs`, `dir/rootfs`).
    pub fn pull(registry: SocketAddr, repository: &str, tag: &str, dir: &Path) -> Result<Self> {
        let blobs = dir.join("blobs");
        std::fs::create_dir_all(&blobs)?;
        let accept = format!("{MANIFEST}, {INDEX}");
        let mut manifest: Value = serde_json::from_slice(&http_get(
            registry,
            &format!("/v2/{repository}/manifests/{tag}"),
            &accept,
        )?)
        .context("parsing the manifest")?;
        if manifest["mediaType"] == INDEX {
            let digest = digest_of(&manifest["manifests"][0])?.to_string();
            manifest = serde_json::from_slice(&http_get(
                registry,
                &format!("/v2/{repository}/manifests/{digest}"),
                &accept,
            )?)?;
        }
        let fetch = |digest: &str| -> Result<Vec<u8>> {
            http_get(registry, &format!("/v2/{repository}/blobs/{digest}"), "*/*")
        };
        let config: Value = serde_json::from_slice(&fetch(digest_of(&manifest["config"])?)?)?;
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(&rootfs)?;
        for (i, layer) in manifest["layers"]
            .as_array()
            .context("no layers")?
            .iter()
            .enumerate()
        {
            let path = blobs.join(format!("layer-{i}"));
            std::fs::write(&path, fetch(digest_of(layer)?)?)?;
            tar_extract(&path, &rootfs)?;
        }
        Ok(Self {
            ref_name: Some(format!("{repository}:{tag}")),
            manifest,
            config,
            rootfs,
        })
    }
}

fn digest_of(descriptor: &Value) -> Result<&str> {
    descriptor["digest"]
        .as_str()
        .with_context(|| format!("descriptor without a digest: {descriptor}"))
}

fn json_file(path: &Path) -> Result<Value> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&data).with_context(|| format!("parsing {}", path.display()))
}

/// `tar -xf archive -C dir` (gzip, zstd or plain: tar detects it).
fn tar_extract(archive: &Path, dir: &Path) -> Result<()> {
    let output = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .output()
        .context("running tar")?;
    if !output.status.success() {
        bail!(
            "tar -xf {}: {}",
            archive.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// `GET path` over plain HTTP/1.0 (the server closes after the body),
/// following one redirect; the body of a 200.
fn http_get(addr: SocketAddr, path: &str, accept: &str) -> Result<Vec<u8>> {
    let mut path = path.to_string();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting {addr}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n"
        )?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .context("no HTTP response")?;
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let body = raw[split + 4..].to_vec();
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .context("bad status line")?;
        match status {
            200 => return Ok(body),
            301 | 302 | 303 | 307 | 308 => {
                let location = head
                    .lines()
                    .find_map(|l| {
                        l.split_once(':')
                            .filter(|(k, _)| k.eq_ignore_ascii_case("location"))
                            .map(|(_, v)| v.trim().to_string())
                    })
                    .context("redirect without a location")?;
                path = location;
            }
            _ => bail!(
                "GET {path} on {addr}: {status}: {}",
                String::from_utf8_lossy(&body)
            ),
        }
    }
    bail!("GET {path} on {addr}: too many redirects")
}
