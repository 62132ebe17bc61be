//! A runtime that lives as long as the test binary, for components shared by
//! its tests (webhook, scheduler). Each `#[tokio::test]` has its own runtime
//! that ends with the test; tasks and clients of a shared component must not
//! die with the first test that started them.

use std::future::Future;
use std::sync::OnceLock;

use anyhow::{Context, Result};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("shared-components")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build the shared runtime: {e}"))
    })
}

/// Runs `future` on the binary-long runtime and waits for its result from
/// any runtime.
pub async fn run<F, T>(future: F) -> Result<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    runtime()
        .spawn(future)
        .await
        .context("task on the shared runtime failed")
}
