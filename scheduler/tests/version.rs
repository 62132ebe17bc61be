//! `koord-queue-scheduler --version` names the crate version and the git revision it was
//! built from (the checkout's HEAD; `unknown` without `.git`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn version_names_the_crate_version_and_the_git_revision() {
    let output = Command::new(env!("CARGO_BIN_EXE_koord-queue-scheduler"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let revision = env!("KOORD_QUEUE_GIT_REVISION");
    assert_eq!(
        text.trim(),
        format!(
            "koord-queue-scheduler {} (git {revision})",
            env!("CARGO_PKG_VERSION")
        )
    );
    // Built from a checkout: its HEAD.
    if env!("KOORD_QUEUE_GIT_REVISION_SOURCE") == "git" {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let head = Command::new("git")
            .args(["-C", root, "rev-parse", "--short=12", "HEAD"])
            .output()
            .unwrap();
        assert_eq!(revision, String::from_utf8_lossy(&head.stdout).trim());
    }
}
