//! The byte budget of the reviews in flight (`--max-review-bytes`, issue
//! 37), driven in-process: a review waits for its body's bytes and is
//! answered 429 with "retry" when they are not free within the review
//! timeout; an oversize body, and one that would take more than the whole
//! budget to decide, are refused precisely; the budget is given back with
//! every answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use futures::SinkExt;
use http_body_util::BodyExt;
use koord_queue_webhook::{Limits, Webhook, router_with_limits};
use serde_json::{Value, json};
use support::*;
use tower::ServiceExt;

const MIB: usize = 1 << 20;

fn router(webhook: &Arc<Webhook>, max_body_bytes: usize, max_review_bytes: usize) -> axum::Router {
    router_with_limits(
        webhook.clone(),
        Limits {
            max_body_bytes,
            max_concurrent: 64,
            max_review_bytes,
        },
    )
    .unwrap()
}

/// Status, `Retry-After` and JSON body of the answer to `request`.
async fn send(
    router: &axum::Router,
    request: Request<Body>,
) -> (StatusCode, Option<String>, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        retry_after,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn post(body: impl Into<Body>) -> Request<Body> {
    Request::post("/mutate")
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

/// A request whose body arrives in chunks sent through the returned
/// sender, of no declared length.
fn streamed() -> (
    Request<Body>,
    futures::channel::mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let (tx, rx) = futures::channel::mpsc::channel(4);
    (post(Body::from_stream(rx)), tx)
}

fn create_review(name: &str) -> Vec<u8> {
    review("CREATE", job(name, Some("team-a")), None, "alice")
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn an_oversize_body_is_refused_precisely_declared_or_not() {
    let webhook = webhook(standard_view(), Arc::new(MemoryApi::default()));
    let router = router(&webhook, 1000, MIB);
    let (status, _, body) = send(&router, post(vec![b' '; 1500])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        body["error"], "request body of 1500 bytes exceeds 1000 bytes",
        "{body}"
    );
    // No length declared: refused once the limit is passed.
    let (request, mut tx) = streamed();
    let answer = tokio::spawn({
        let router = router.clone();
        async move { send(&router, request).await }
    });
    for _ in 0..3 {
        if tx.send(Ok(Bytes::from(vec![b' '; 600]))).await.is_err() {
            break;
        }
    }
    drop(tx);
    let (status, _, body) = answer.await.unwrap();
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["error"], "request body exceeds 1000 bytes", "{body}");
    assert_eq!(webhook.metrics.reviews_too_large.get(), 2);
    assert_eq!(webhook.metrics.review_bytes_in_flight.get(), 0);
}

#[tokio::test]
async fn a_review_waits_for_its_bytes_and_is_told_to_retry_when_none_free_in_time() {
    let webhook = webhook(standard_view(), Arc::new(MemoryApi::default()));
    let router = router(&webhook, MIB, MIB);
    // A review whose body is all but ~200 bytes of the budget (one string:
    // charged its length). Its answer is not read: the bytes stay taken
    // until it is sent.
    let mut object = job("large", Some("team-a"));
    let base = review("CREATE", object.clone(), None, "alice")
        .to_string()
        .len();
    object["metadata"]["annotations"] = json!({ "note": "x".repeat(MIB - base - 220) });
    let large = review("CREATE", object, None, "alice")
        .to_string()
        .into_bytes();
    let held = router.clone().oneshot(post(large)).await.unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    // Held until sent, yet of known length: the API server gets a
    // Content-Length as before.
    assert!(held.headers().get(header::CONTENT_LENGTH).is_some());
    let taken = webhook.metrics.review_bytes_in_flight.get();
    assert!(taken > (MIB - 300) as i64, "{taken}");

    // Nothing frees within the review timeout (5 s): 429, retry.
    let (status, retry_after, body) = send(&router, post(create_review("waits-too-long"))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    let message = body["error"].as_str().unwrap();
    assert!(message.ends_with("; retry"), "{message}");
    assert!(message.contains("within 5s"), "{message}");
    assert_eq!(webhook.metrics.reviews_shed_bytes.get(), 1);

    // A review that waits while the answer is sent is decided.
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { send(&router, post(create_review("waits"))).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    // Read and dropped, as hyper does once it has written the answer.
    let answer: Value = {
        let bytes = held.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    };
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let (status, _, body) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(body["response"]["patch"].is_string(), "held: {body}");
    assert_eq!(webhook.metrics.review_bytes_in_flight.get(), 0);
}

#[tokio::test]
async fn a_body_of_tiny_values_that_would_not_fit_the_budget_is_refused_precisely() {
    let webhook = webhook(standard_view(), Arc::new(MemoryApi::default()));
    let router = router(&webhook, MIB, MIB);
    // ~0.8 MB of `{"a":0}` parses to ~50 MB: more than 1 MiB × 16.
    let mut object = job("tiny-values", Some("team-a"));
    object["metadata"]["annotations"] = json!({});
    object["spec"]["template"]["metadata"] = json!({ "x": vec![json!({ "a": 0 }); 100_000] });
    let body = review("CREATE", object, None, "alice")
        .to_string()
        .into_bytes();
    let length = body.len();
    assert!(length < MIB);
    let (status, _, answer) = send(&router, post(body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    let message = answer["error"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("request body of {length} bytes would take about ")),
        "{message}"
    );
    assert!(message.contains("many small JSON values"), "{message}");
    assert_eq!(webhook.metrics.review_bytes_in_flight.get(), 0);

    // The same number of bytes in one string is decided.
    let mut object = job("one-string", Some("team-a"));
    object["metadata"]["annotations"] = json!({ "note": "x".repeat(length - 1000) });
    let (status, _, answer) = send(
        &router,
        post(review("CREATE", object, None, "alice").to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
}

#[test]
fn a_budget_smaller_than_the_largest_body_is_refused() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let webhook = webhook(standard_view(), Arc::new(MemoryApi::default()));
    let error = router_with_limits(
        webhook,
        Limits {
            max_body_bytes: 2 * MIB,
            max_concurrent: 1,
            max_review_bytes: MIB,
        },
    )
    .unwrap_err();
    assert!(error.contains("--max-review-bytes"), "{error}");
}
