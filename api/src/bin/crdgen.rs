//! Writes the CRD manifests generated from the API types into the chart.
//! Usage: `crdgen [DIR]` (default: the chart's `files/crds` in this tree).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(koord_queue_api::crd::chart_crd_dir);
    let crds = match koord_queue_api::crd::generate() {
        Ok(crds) => crds,
        Err(error) => {
            eprintln!("crdgen: cannot render the CRDs: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = std::fs::create_dir_all(&dir) {
        eprintln!("crdgen: cannot create {}: {error}", dir.display());
        return ExitCode::FAILURE;
    }
    for crd in crds {
        let path = dir.join(&crd.file_name);
        if let Err(error) = std::fs::write(&path, crd.yaml) {
            eprintln!("crdgen: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
