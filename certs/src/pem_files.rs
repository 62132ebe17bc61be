//! Writing certificate/key pairs the way Kubernetes TLS Secrets name them.

use std::path::Path;

use crate::Error;

/// File name of a certificate, as in a `kubernetes.io/tls` Secret.
pub const CERT_FILE: &str = "tls.crt";
/// File name of a private key, as in a `kubernetes.io/tls` Secret.
pub const KEY_FILE: &str = "tls.key";

/// Writes `tls.crt` and `tls.key` into `dir` (created if missing). The key
/// file is written with mode 0600 on Unix.
pub fn write_pem_pair(dir: &Path, cert_pem: &str, key_pem: &str) -> Result<(), Error> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let cert = dir.join(CERT_FILE);
    std::fs::write(&cert, cert_pem).map_err(io(&cert))?;
    let key = dir.join(KEY_FILE);
    write_private(&key, key_pem).map_err(io(&key))?;
    Ok(())
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)
}
