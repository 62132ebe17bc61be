//! The CRD manifests checked into the chart must be exactly what the Rust
//! types generate; run `make crds` after changing the types.

#[test]
fn checked_in_crds_match_the_types() {
    let dir = koord_queue_api::crd::chart_crd_dir();
    let generated = koord_queue_api::crd::generate().expect("CRDs render");
    assert_eq!(generated.len(), 3);
    for crd in &generated {
        let path = dir.join(&crd.file_name);
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); run `make crds`", path.display()));
        assert!(
            on_disk == crd.yaml,
            "{} differs from the types; run `make crds`",
            path.display()
        );
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("CRD directory exists")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    let mut expected: Vec<_> = generated.iter().map(|c| c.file_name.clone()).collect();
    expected.sort();
    assert_eq!(files, expected, "stale CRD files in {}", dir.display());
}
