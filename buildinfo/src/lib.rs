//! The git revision a binary is built from, found by its build script.
//!
//! Every shipped binary (`koord-queue-webhook`, `koord-queue-scheduler`,
//! `koord-queue-certs`) has a `build.rs` that calls [`emit`]; the crate then
//! reads `env!("KOORD_QUEUE_VERSION")` — `<crate version> (git <revision>)` —
//! for its `--version`, and `env!("KOORD_QUEUE_GIT_REVISION")` alone.
//!
//! The revision is, in order:
//! 1. `$KOORD_QUEUE_GIT_REVISION` when set and not empty (a build from a
//!    source archive, or an image build that copies no `.git`);
//! 2. `git rev-parse HEAD` of the repository whose top level is the
//!    workspace root (a clone, a worktree) — never that of a repository the
//!    sources merely sit in;
//! 3. `unknown` (no `.git`, no `git` installed).
//!
//! The build script reruns when the revision can change: the variable, the
//! repository's `HEAD`, the branch it points to and `packed-refs`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable naming the checkout being built (set by the
/// Makefile): a build script reruns when it changes.
pub const SOURCE_DIR_ENV: &str = "KOORD_QUEUE_SOURCE_DIR";

/// Environment variable that overrides the revision found by git.
pub const REVISION_ENV: &str = "KOORD_QUEUE_GIT_REVISION";

/// What a binary reports when its revision cannot be known.
pub const UNKNOWN: &str = "unknown";

/// Where a revision comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `$KOORD_QUEUE_GIT_REVISION`.
    Env,
    /// `git rev-parse HEAD` of the workspace's repository.
    Git,
    /// Neither.
    Unknown,
}

impl Source {
    /// Lower-case name (`env`, `git`, `unknown`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Env => "env",
            Self::Git => "git",
            Self::Unknown => "unknown",
        }
    }
}

/// The revision of the sources at `workspace_root`, and the files whose
/// change may change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    /// A commit id (12 hex digits), the override, or [`UNKNOWN`].
    pub id: String,
    /// Where `id` comes from.
    pub source: Source,
    /// Files a build script should rerun on.
    pub watch: Vec<PathBuf>,
}

/// Runs `git -C dir args…`; its trimmed stdout when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn absolute(dir: &Path, path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    if path.is_absolute() {
        path
    } else {
        dir.join(path)
    }
}

/// The revision of the repository whose top level is `workspace_root`,
/// ignoring `override_id` when it is `None` or empty.
pub fn revision(workspace_root: &Path, override_id: Option<&str>) -> Revision {
    if let Some(id) = override_id.map(str::trim).filter(|id| !id.is_empty()) {
        return Revision {
            id: id.to_string(),
            source: Source::Env,
            watch: Vec::new(),
        };
    }
    from_git(workspace_root).unwrap_or_else(|| Revision {
        id: UNKNOWN.to_string(),
        source: Source::Unknown,
        watch: Vec::new(),
    })
}

fn from_git(root: &Path) -> Option<Revision> {
    // Sources unpacked inside another repository are not its commits.
    let top = git(root, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), root) {
        return None;
    }
    let id = git(root, &["rev-parse", "--short=12", "HEAD"])?;
    let git_dir = absolute(root, &git(root, &["rev-parse", "--git-dir"])?);
    let common_dir = absolute(root, &git(root, &["rev-parse", "--git-common-dir"])?);
    let mut watch = vec![git_dir.join("HEAD"), common_dir.join("packed-refs")];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(common_dir.join(branch));
    }
    // A missing file would make cargo rerun the script on every build.
    watch.retain(|p| p.exists());
    Some(Revision {
        id,
        source: Source::Git,
        watch,
    })
}

/// The `--version` text: `<version> (git <revision>)`.
pub fn version_text(version: &str, revision: &str) -> String {
    format!("{version} (git {revision})")
}

/// For a build script: sets `KOORD_QUEUE_GIT_REVISION`,
/// `KOORD_QUEUE_GIT_REVISION_SOURCE` ([`Source::name`]) and
/// `KOORD_QUEUE_VERSION` for the crate being built, and the rerun triggers.
/// The workspace root is the parent of the crate's directory (every crate of
/// the workspace is one level below it).
pub fn emit() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_default();
    let root = manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_else(|_| UNKNOWN.into());
    let override_id = std::env::var(REVISION_ENV).ok();
    let revision = revision(&root, override_id.as_deref());
    println!("cargo:rerun-if-env-changed={REVISION_ENV}");
    // Two checkouts sharing one target directory (CI's cache) build the
    // same units, and the files watched below are the other checkout's:
    // the Makefile names the checkout, so a build from another one reruns.
    println!("cargo:rerun-if-env-changed={SOURCE_DIR_ENV}");
    println!("cargo:rerun-if-changed=build.rs");
    for path in &revision.watch {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rustc-env={REVISION_ENV}={}", revision.id);
    println!(
        "cargo:rustc-env=KOORD_QUEUE_GIT_REVISION_SOURCE={}",
        revision.source.name()
    );
    println!(
        "cargo:rustc-env=KOORD_QUEUE_VERSION={}",
        version_text(&version, &revision.id)
    );
}

/// The test every binary of the workspace has: `<binary> --version` prints
/// `<binary> <crate version> (git <revision>)`, and, when the revision came
/// from git, it is the HEAD of the checkout it was built from. One line in a
/// `tests/version.rs` of the binary's crate (`CARGO_BIN_EXE_*` is known only
/// there):
///
/// ```ignore
/// koord_queue_buildinfo::version_test!("koord-queue-webhook");
/// ```
#[macro_export]
macro_rules! version_test {
    ($binary:literal) => {
        #[test]
        fn version_names_the_crate_version_and_the_git_revision() {
            $crate::assert_version_output(
                env!(concat!("CARGO_BIN_EXE_", $binary)),
                $binary,
                env!("CARGO_PKG_VERSION"),
                env!("KOORD_QUEUE_GIT_REVISION"),
                env!("KOORD_QUEUE_GIT_REVISION_SOURCE"),
                concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
            );
        }
    };
}

/// What [`version_test!`] checks: runs `binary --version` and checks that it
/// prints `<name> <version> (git <revision>)`, and, when the revision came
/// from git (`source` is `"git"`), that it is the HEAD of `workspace_root`.
/// Panics with the output when it does not.
pub fn assert_version_output(
    binary: &str,
    name: &str,
    version: &str,
    revision: &str,
    source: &str,
    workspace_root: &str,
) {
    use std::process::Command;
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("running {binary}: {e}"));
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.trim(), format!("{name} {version} (git {revision})"));
    if source == "git" {
        let head = Command::new("git")
            .args(["-C", workspace_root, "rev-parse", "--short=12", "HEAD"])
            .output()
            .unwrap_or_else(|e| panic!("running git: {e}"));
        assert_eq!(revision, String::from_utf8_lossy(&head.stdout).trim());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn run(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    fn has_git() -> bool {
        Command::new("git").arg("--version").output().is_ok()
    }

    #[test]
    fn without_a_repository_the_revision_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let rev = revision(dir.path(), None);
        assert_eq!(rev.id, UNKNOWN);
        assert_eq!(rev.source, Source::Unknown);
        assert!(rev.watch.is_empty());
    }

    #[test]
    fn the_override_wins_and_an_empty_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(revision(dir.path(), Some("abc123")).id, "abc123");
        assert_eq!(revision(dir.path(), Some("  ")).id, UNKNOWN);
    }

    #[test]
    fn a_clone_reports_its_commit_and_watches_its_branch() {
        if !has_git() {
            eprintln!("skipped: git is not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        run(&root, &["init", "-q", "-b", "trunk"]);
        std::fs::write(root.join("f"), "x").unwrap();
        run(&root, &["add", "f"]);
        run(&root, &["commit", "-q", "-m", "one"]);
        let head = git(&root, &["rev-parse", "HEAD"]).unwrap();
        let rev = revision(&root, None);
        assert_eq!(rev.id, head[..12]);
        assert_eq!(rev.source, Source::Git);
        let git_dir = root.join(".git");
        assert!(rev.watch.contains(&git_dir.join("HEAD")), "{rev:?}");
        assert!(
            rev.watch.contains(&git_dir.join("refs/heads/trunk")),
            "{rev:?}"
        );

        // A source tree inside that repository (an unpacked archive, say) is
        // not the repository's commit.
        let inner = root.join("unpacked");
        std::fs::create_dir(&inner).unwrap();
        assert_eq!(revision(&inner, None).id, UNKNOWN);
    }

    #[test]
    fn the_version_text_names_both() {
        assert_eq!(version_text("0.1.0", "abc"), "0.1.0 (git abc)");
    }
}
