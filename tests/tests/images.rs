//! The images `make images` builds (`images/build.sh`): four OCI archives,
//! each unpacked here by reading its OCI layout (index.json → manifest →
//! config and layers) and extracting its layers into a root filesystem
//! (`koord_queue_tests::oci`).
//! The entrypoint binary runs from that root filesystem alone (chrooted
//! into it as user 65532 when the test runs as root) and answers
//! `--version`; the image runs as 65532, its entrypoint is the binary, its
//! labels name the version, the revision and the source, and it holds
//! nothing but the binary.
//!
//! The first run builds the static binaries in release mode (minutes); the
//! script installs buildah with apt-get when no builder works. Only when no
//! builder works and none can be installed is the test skipped, saying why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use koord_queue_tests::oci::Image;

const COMPONENTS: [&str; 4] = ["webhook", "scheduler", "certs", "dashboard"];
/// The size goal of each image, packed and unpacked (issue 21).
const MAX_BYTES: u64 = 25 * 1024 * 1024;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{command:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// Whether an ELF file has no program interpreter (PT_INTERP): static.
fn is_static_elf(path: &Path) -> bool {
    let data = std::fs::read(path).unwrap();
    assert_eq!(&data[..4], b"\x7fELF", "{} is not ELF", path.display());
    assert_eq!(data[4], 2, "64-bit ELF");
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let p_type = u32::from_le_bytes(
            data[phoff + i * phentsize..phoff + i * phentsize + 4]
                .try_into()
                .unwrap(),
        );
        p_type != 3
    })
}

/// The files (not directories) under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// `name` found on this process's PATH (the children run with an empty
/// environment, so they cannot look it up themselves).
fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}

fn is_root() -> bool {
    run(Command::new("id").arg("-u")).trim() == "0"
}

#[test]
fn make_images_builds_four_static_images_that_run_as_65532() {
    // `make images` is this script; it prints `<component> <archive> <bytes>`.
    let started = std::time::Instant::now();
    let output = Command::new(root().join("images/build.sh"))
        .current_dir(root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(3) {
        println!("SKIPPED: no image builder works here and none can be installed:\n{stderr}");
        return;
    }
    assert!(output.status.success(), "images/build.sh failed:\n{stderr}");
    println!(
        "images/build.sh took {:.0?}; its log:\n{stderr}",
        started.elapsed()
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let built: Vec<(&str, &str, u64)> = stdout
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            (
                f.next().unwrap(),
                f.next().unwrap(),
                f.next().unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        built.iter().map(|b| b.0).collect::<Vec<_>>(),
        COMPONENTS,
        "{stdout}"
    );

    let version = env!("CARGO_PKG_VERSION");
    let cargo_toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let repository = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("repository = "))
        .unwrap()
        .trim_matches('"');
    let head = Command::new("git")
        .args([
            "-C",
            root().to_str().unwrap(),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());

    for (component, archive, size) in built {
        let binary = format!("koord-queue-{component}");
        println!(
            "{binary}: {archive} {size} bytes ({:.1} MiB)",
            size as f64 / 1048576.0
        );
        assert!(size < MAX_BYTES, "{binary}: {size} bytes, over 25 MiB");

        // The OCI layout, and the root filesystem of its layers.
        let dir = tempfile::tempdir().unwrap();
        let image = Image::from_archive(Path::new(archive), dir.path()).unwrap();
        assert!(
            image
                .ref_name
                .as_deref()
                .is_some_and(|r| r.ends_with(version)),
            "{binary}: tagged with the version: {:?}",
            image.ref_name
        );
        let config = &image.config;
        assert_eq!(config["os"], "linux");
        let c = &config["config"];
        assert!(
            c["User"] == "65532:65532" || c["User"] == "65532",
            "{binary}: user {}",
            c["User"]
        );
        let entrypoint = format!("/usr/local/bin/{binary}");
        assert_eq!(c["Entrypoint"], serde_json::json!([entrypoint]), "{binary}");
        let labels = &c["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], version);
        assert_eq!(labels["org.opencontainers.image.source"], repository);
        assert_eq!(labels["org.opencontainers.image.title"], binary.as_str());
        let revision = labels["org.opencontainers.image.revision"]
            .as_str()
            .unwrap()
            .to_string();
        if let Some(head) = &head {
            assert_eq!(&revision, head, "{binary}: the checkout's revision");
        }

        // Nothing but the binary.
        let rootfs = &image.rootfs;
        assert_eq!(
            files_under(rootfs),
            [entrypoint.trim_start_matches('/')],
            "{binary}: the image holds only its binary"
        );
        let exe = rootfs.join(entrypoint.trim_start_matches('/'));
        assert!(is_static_elf(&exe), "{binary} is statically linked");
        let unpacked = std::fs::metadata(&exe).unwrap().len();
        println!("{binary}: {unpacked} bytes unpacked");
        assert!(
            unpacked < MAX_BYTES,
            "{binary}: {unpacked} bytes unpacked, over 25 MiB"
        );

        // It runs from that root filesystem alone, as 65532 when we can
        // chroot (root), else directly.
        let text = if is_root() {
            run(Command::new(which("chroot"))
                .arg("--userspec=65532:65532")
                .arg(rootfs)
                .arg(&entrypoint)
                .arg("--version")
                .env_clear())
        } else {
            run(Command::new(&exe).arg("--version").env_clear())
        };
        assert_eq!(
            text.trim(),
            format!("{binary} {version} (git {revision})"),
            "{binary} --version"
        );
    }
}
