//! The admission router driven in-process (no socket, no API server): the
//! decisions and every malformed-input path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::*;
use tower::ServiceExt;

async fn post(router: &axum::Router, body: Vec<u8>) -> (StatusCode, Value) {
    let response = router
        .clone()
        .oneshot(
            Request::post("/mutate")
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The answer to a well-formed review.
async fn answer(router: &axum::Router, review: Value) -> Value {
    post(router, review.to_string().into_bytes()).await.1
}

fn router(api: Arc<MemoryApi>) -> axum::Router {
    koord_queue_webhook::router(webhook(standard_view(), api), 1024 * 1024, 64)
}

#[tokio::test]
async fn create_holds_the_job_and_creates_its_unit() {
    let api = Arc::new(MemoryApi::default());
    let router = router(api.clone());
    let job = job("train", Some("team-a"));
    let (status, body) = post(
        &router,
        review("CREATE", job.clone(), None, "alice")
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    assert_eq!(body["response"]["allowed"], true);
    let held = patched(&job, &body);
    assert_eq!(held["spec"]["suspend"], true);
    api.store(&held);
    let unit_name = held["metadata"]["annotations"]["koord-queue/queue-unit"]
        .as_str()
        .unwrap();
    let unit = api.created_unit("team-ns", unit_name).await;
    assert_eq!(unit.spec.queue, "team-a");
    assert_eq!(unit.spec.pod_set[0].count, 3);
    assert_eq!(unit.spec.resource["cpu"].0, "1500m");
    assert_eq!(unit.spec.priority, Some(0));
}

#[tokio::test]
async fn a_quota_the_cache_has_not_seen_yet_is_read_directly() {
    let api = Arc::new(MemoryApi::default());
    api.uncached_quotas
        .lock()
        .unwrap()
        .insert("team-new".into(), false);
    let router = router(api.clone());
    let fresh = job("fresh", Some("team-new"));
    let body = answer(&router, review("CREATE", fresh.clone(), None, "alice")).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let held = patched(&fresh, &body);
    api.store(&held);
    let unit_name = held["metadata"]["annotations"]["koord-queue/queue-unit"]
        .as_str()
        .unwrap();
    assert_eq!(
        api.created_unit("team-ns", unit_name).await.spec.queue,
        "team-new"
    );

    // Still refused when the direct read finds nothing, listing the quotas.
    let body = answer(
        &router,
        review("CREATE", job("nope", Some("team-zzz")), None, "alice"),
    )
    .await;
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("does not exist"), "{message}");
}

#[tokio::test]
async fn dry_run_patches_without_creating() {
    let api = Arc::new(MemoryApi::default());
    let router = router(api.clone());
    let mut review = review("CREATE", job("dry", Some("team-a")), None, "alice");
    review["request"]["dryRun"] = json!(true);
    let body = answer(&router, review).await;
    assert_eq!(body["response"]["allowed"], true);
    assert!(body["response"]["patch"].is_string());
    assert_eq!(*api.creates.lock().unwrap(), 0);
}

#[tokio::test]
async fn mapping_refusals_name_the_label_and_the_quotas() {
    let router = router(Arc::new(MemoryApi::default()));
    let body = answer(&router, review("CREATE", job("x", Some("nope")), None, "a")).await;
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert_eq!(body["response"]["allowed"], false);
    assert!(
        message.contains("\"nope\"") && message.contains("team-a, team-b"),
        "{message}"
    );

    let body = answer(&router, review("CREATE", job("x", Some("org")), None, "a")).await;
    assert!(
        body["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("parent quota")
    );

    let body = answer(&router, review("CREATE", job("x", None), None, "a")).await;
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("quota.scheduling.koordinator.sh/name")
            && message.contains("koord-queue/default-queue")
    );

    // The namespace's default queue applies when the job names no quota.
    let mut defaulted = job("x", None);
    defaulted["metadata"]["namespace"] = json!("defaulted");
    let body = answer(&router, review("CREATE", defaulted, None, "a")).await;
    assert_eq!(body["response"]["allowed"], true);
}

#[tokio::test]
async fn unsuspend_is_refused_unless_released_or_by_the_scheduler() {
    let api = Arc::new(MemoryApi::default());
    let router = router(api.clone());
    let job = job("train", Some("team-a"));
    let body = answer(&router, review("CREATE", job.clone(), None, "alice")).await;
    let held = patched(&job, &body);
    api.store(&held);
    let unit_name = held["metadata"]["annotations"]["koord-queue/queue-unit"]
        .as_str()
        .unwrap()
        .to_string();
    api.created_unit("team-ns", &unit_name).await;
    let mut lifted = held.clone();
    lifted["spec"]["suspend"] = json!(false);

    let body = answer(
        &router,
        review("UPDATE", lifted.clone(), Some(held.clone()), "alice"),
    )
    .await;
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("queued in queue team-a"), "{message}");

    let body = answer(
        &router,
        review("UPDATE", lifted.clone(), Some(held.clone()), SCHEDULER),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true);

    // Once the unit is released, anyone may (e.g. the job controller's own updates).
    api.units
        .lock()
        .unwrap()
        .get_mut(&("team-ns".to_string(), unit_name))
        .unwrap()
        .status = Some(koord_queue_api::QueueUnitStatus {
        phase: Some(koord_queue_api::QueueUnitPhase::Dequeued),
        ..Default::default()
    });
    let body = answer(&router, review("UPDATE", lifted, Some(held), "alice")).await;
    assert_eq!(body["response"]["allowed"], true);
}

#[tokio::test]
async fn malformed_requests_get_precise_answers() {
    let router = router(Arc::new(MemoryApi::default()));
    let (status, body) = post(&router, b"not json".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("not JSON"));

    let (status, _) = post(&router, b"{\"kind\":\"AdmissionReview\"}".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A review with a uid but a broken request: allowed false, uid echoed.
    let broken = json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": { "uid": "abc", "operation": 7 } });
    let (status, body) = post(&router, broken.to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["response"]["uid"], "abc");
    assert_eq!(body["response"]["allowed"], false);

    // Unknown kinds are refused with a message.
    let mut unknown = review("CREATE", job("x", Some("team-a")), None, "a");
    unknown["request"]["kind"] = json!({ "group": "apps", "version": "v1", "kind": "Deployment" });
    let body = answer(&router, unknown).await;
    assert_eq!(body["response"]["allowed"], false);
    assert!(
        body["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("not a job kind")
    );

    // Oversize bodies: 413.
    let small = koord_queue_webhook::router(
        webhook(standard_view(), Arc::new(MemoryApi::default())),
        64,
        64,
    );
    let (status, body) = post(&small, vec![b' '; 1000]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"].as_str().unwrap().contains("exceeds 64 bytes"));
}

/// Mutations of a valid review: replace a field with another JSON value,
/// delete it, or truncate the text.
fn mutated_review() -> impl Strategy<Value = Vec<u8>> {
    let base = review("CREATE", job("fuzz", Some("team-a")), None, "alice");
    let paths: Vec<&'static str> = vec![
        "/request",
        "/request/uid",
        "/request/kind",
        "/request/kind/kind",
        "/request/operation",
        "/request/object",
        "/request/object/metadata",
        "/request/object/metadata/labels",
        "/request/object/spec",
        "/request/object/spec/parallelism",
        "/request/object/spec/template",
        "/request/object/spec/template/spec/containers",
        "/request/namespace",
        "/request/userInfo",
        "/request/oldObject",
        "/request/dryRun",
        "/apiVersion",
    ];
    let values = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!({ "a": "x".repeat(300_000) })),
        Just(json!([{"name": 1, "resources": {"requests": {"cpu": "1Qi"}}}])),
        Just(json!(-5)),
    ];
    let edit = (
        proptest::sample::select(paths),
        values,
        0u8..3,
        any::<prop::sample::Index>(),
    );
    proptest::collection::vec(edit, 1..4).prop_map(move |edits| {
        let mut review = base.clone();
        let mut truncate = None;
        for (path, value, op, index) in edits {
            match op {
                0 => {
                    if let Some(slot) = review.pointer_mut(path) {
                        *slot = value;
                    }
                }
                1 => {
                    if let Some((parent, key)) = path.rsplit_once('/')
                        && let Some(Value::Object(map)) = review.pointer_mut(parent)
                    {
                        map.remove(key);
                    }
                }
                _ => truncate = Some(index),
            }
        }
        let mut text = review.to_string().into_bytes();
        if let Some(index) = truncate {
            text.truncate(index.index(text.len() + 1));
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn malformed_reviews_never_panic_and_always_answer(body in mutated_review()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (status, answer) = runtime.block_on(async {
            post(&router(Arc::new(MemoryApi::default())), body.clone()).await
        });
        match status {
            StatusCode::OK => {
                let response = &answer["response"];
                prop_assert!(response["allowed"].is_boolean(), "{answer}");
                let sent: Value = serde_json::from_slice(&body).unwrap();
                prop_assert_eq!(&response["uid"], &sent["request"]["uid"]);
                if response["allowed"] == false {
                    prop_assert!(!response["status"]["message"].as_str().unwrap_or("").is_empty());
                }
            }
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => {
                prop_assert!(answer["error"].is_string(), "{answer}");
            }
            other => prop_assert!(false, "unexpected status {other}: {answer}"),
        }
    }
}

#[tokio::test]
async fn reviews_beyond_the_bound_are_answered_429_at_once() {
    let router = koord_queue_webhook::router(
        webhook(standard_view(), Arc::new(MemoryApi::default())),
        1 << 20,
        1,
    );
    // A review whose body never finishes arriving holds the only slot.
    let (_sender, body) = futures::channel::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let slow = router.clone().oneshot(
        Request::post("/mutate")
            .header("content-type", "application/json")
            .body(Body::from_stream(body))
            .unwrap(),
    );
    let slow = tokio::spawn(slow);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let (status, body) = post(&router, b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body["error"].as_str().unwrap().contains("too many"));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "answered at once"
    );
    slow.abort();
}

/// A Job's `activeDeadlineSeconds` becomes its unit's `maxRunSeconds` (the
/// bound a reserving head's backfill relies on), and a queued job's bound
/// may be lowered but never raised or removed.
#[tokio::test]
async fn a_jobs_run_bound_is_on_its_unit_and_cannot_be_raised() {
    let api = Arc::new(MemoryApi::default());
    let router = router(api.clone());
    let mut job = job("bounded", Some("team-a"));
    job["spec"]["activeDeadlineSeconds"] = json!(600);
    let body = answer(&router, review("CREATE", job.clone(), None, "alice")).await;
    let held = patched(&job, &body);
    api.store(&held);
    let unit_name = held["metadata"]["annotations"]["koord-queue/queue-unit"]
        .as_str()
        .unwrap();
    let unit = api.created_unit("team-ns", unit_name).await;
    assert_eq!(unit.spec.max_run_seconds, Some(600));

    let with = |deadline: Value| {
        let mut new = held.clone();
        new["spec"]["activeDeadlineSeconds"] = deadline;
        review("UPDATE", new, Some(held.clone()), "alice")
    };
    for raised in [json!(601), Value::Null] {
        let body = answer(&router, with(raised.clone())).await;
        assert_eq!(body["response"]["allowed"], false, "{raised}: {body}");
        let message = body["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("run bound"), "{message}");
    }
    let body = answer(&router, with(json!(300))).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}
