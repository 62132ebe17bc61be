//! In-process admission decision for a Job review: decode → decide → patch →
//! encode, with the QueueUnit create answered in memory. Target (architecture §9):
//! median ≤ 50 µs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use support::*;

fn review_job(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let webhook = webhook(standard_view(), Arc::new(MemoryApi::default()));
    let mut n = 0u64;
    let bodies: Vec<Vec<u8>> = (0..1024)
        .map(|i| {
            let mut r = review(
                "CREATE",
                job(&format!("job-{i}"), Some("team-a")),
                None,
                "alice",
            );
            r["request"]["uid"] =
                serde_json::json!(format!("0000{i:04}-6393-11e8-b7cc-42010a800002"));
            r.to_string().into_bytes()
        })
        .collect();
    c.bench_function("review_job_create", |b| {
        b.iter(|| {
            n += 1;
            let body = &bodies[(n % 1024) as usize];
            let (status, answer) = runtime.block_on(webhook.review(body));
            assert_eq!(status, axum::http::StatusCode::OK);
            std::hint::black_box(answer);
        })
    });
    let update_old = job("train", Some("team-a"));
    let mut update_new = update_old.clone();
    update_new["metadata"]["labels"]["extra"] = serde_json::json!("x");
    let body = review("UPDATE", update_new, Some(update_old), "alice")
        .to_string()
        .into_bytes();
    c.bench_function("review_job_update", |b| {
        b.iter(|| std::hint::black_box(runtime.block_on(webhook.review(&body))))
    });
}

criterion_group!(benches, review_job);
criterion_main!(benches);
