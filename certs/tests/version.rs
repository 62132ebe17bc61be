//! `koord-queue-certs --version` names the crate version and the git revision it was
//! built from (the checkout's HEAD; `unknown` without `.git`).

#[test]
fn version_names_the_crate_version_and_the_git_revision() {
    koord_queue_buildinfo::assert_version_output(
        env!("CARGO_BIN_EXE_koord-queue-certs"),
        "koord-queue-certs",
        env!("CARGO_PKG_VERSION"),
        env!("KOORD_QUEUE_GIT_REVISION"),
        env!("KOORD_QUEUE_GIT_REVISION_SOURCE"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
    );
}
