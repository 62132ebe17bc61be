//! The router with a fake owner of the state and a fake authorizer: who is
//! let in, what is refused and how, paging, tables. (The real aggregation
//! layer and SubjectAccessReviews: `tests/tests/visibility_api.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, StatusCode};
use koord_queue_visibility::authn::{RequestHeaderConfig, User};
use koord_queue_visibility::authz::{Attributes, Verdict};
use koord_queue_visibility::routes::{ApiState, Authorize, PeerName};
use koord_queue_visibility::{
    Answer, AnswerCache, Ask, DEFAULT_CACHE_BYTES, ItemMeta, PendingUnit, Queries, Reply,
    WaitReasonView, WaitType, router,
};
use serde_json::Value;
use tower::ServiceExt as _;

/// Allows `alice` in `team-a` only, and records what was asked.
#[derive(Debug, Default)]
struct OnlyAliceInTeamA(std::sync::Mutex<Vec<Attributes>>);

impl Authorize for OnlyAliceInTeamA {
    fn authorize<'a>(
        &'a self,
        user: &'a User,
        attrs: &'a Attributes,
    ) -> BoxFuture<'a, Result<Verdict, String>> {
        self.0.lock().unwrap().push(attrs.clone());
        let ok = user.name == "alice" && attrs.namespace.as_deref() == Some("team-a");
        Box::pin(async move {
            Ok(if ok {
                Verdict::Allowed
            } else {
                Verdict::Denied("RBAC: no rule".into())
            })
        })
    }
}

fn unit(ns: &str, name: &str, position: u64) -> PendingUnit {
    PendingUnit {
        metadata: ItemMeta {
            name: name.into(),
            namespace: Some(ns.into()),
            creation_timestamp: None,
        },
        job: None,
        queue: "q".into(),
        quota: Some("q".into()),
        position: Some(position),
        priority: 0,
        requests: BTreeMap::from([("cpu".into(), "1".into())]),
        reason: WaitReasonView {
            kind: WaitType::QuotaExceeded,
            message: "quota q: cpu 4/4 used, needs 1".into(),
            quota: Some("q".into()),
            resource: Some("cpu".into()),
            short_by: Some("1".into()),
            behind: None,
            until: None,
        },
        waiting_since: None,
        estimated_start: None,
    }
}

/// The API over an owner holding five units of `team-a` in one queue `q`.
fn api() -> axum::Router {
    api_with(5)
}

/// The API over an owner holding `count` units of `team-a` in one queue `q`.
fn api_with(count: u64) -> axum::Router {
    api_over(Owner {
        count,
        ..Owner::default()
    })
}

/// A fake owner of the state: `count` units of `team-a` in queue `q`, its
/// state at `generation`, counting the answers it works out in full.
#[derive(Clone, Debug, Default)]
struct Owner {
    count: u64,
    generation: Arc<AtomicU64>,
    rendered: Arc<AtomicUsize>,
}

fn api_over(owner: Owner) -> axum::Router {
    let (queries, mut rx) = Queries::channel(8, Duration::from_secs(2));
    tokio::spawn(async move {
        while let Some(q) = rx.recv().await {
            let generation = owner.generation.load(Ordering::SeqCst);
            if q.known == Some(generation) {
                let _ = q.reply.send(Reply {
                    answer: Answer::Unchanged,
                    generation: Some(generation),
                });
                continue;
            }
            owner.rendered.fetch_add(1, Ordering::SeqCst);
            let units: Vec<PendingUnit> = (1..=owner.count)
                .map(|i| unit("team-a", &format!("u{i}"), i))
                .collect();
            let answer =
                match q.ask {
                    Ask::Queue(name) if name != "q" => Answer::NoSuchQueue,
                    Ask::Quotas(_) => Answer::Quotas(Vec::new()),
                    Ask::History(_) => Answer::History(
                        koord_queue_visibility::history::History::new(60, 3600, Vec::new()),
                    ),
                    _ => {
                        let (items, remaining) = q.page.cut(units.into_iter());
                        Answer::Units { items, remaining }
                    }
                };
            let _ = q.reply.send(Reply {
                answer,
                generation: Some(generation),
            });
        }
    });
    let data: BTreeMap<String, String> = [
        ("requestheader-client-ca-file", "unused here"),
        ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
        ("requestheader-username-headers", r#"["X-Remote-User"]"#),
        ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
        (
            "requestheader-extra-headers-prefix",
            r#"["X-Remote-Extra-"]"#,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    router(ApiState {
        queries,
        authorizer: Arc::new(OnlyAliceInTeamA::default()),
        request_header: Arc::new(RwLock::new(Ok(
            RequestHeaderConfig::from_configmap(&data).unwrap()
        ))),
        system_namespace: "koord-queue".into(),
        cache: Arc::new(AnswerCache::new(DEFAULT_CACHE_BYTES)),
    })
}

async fn get(path: &str, peer: Option<&str>, user: &str, table: bool) -> (StatusCode, Value) {
    let mut request = Request::get(path).header("X-Remote-User", user);
    if table {
        request = request.header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io");
    }
    let mut request = request.body(Body::empty()).unwrap();
    request
        .extensions_mut()
        .insert(PeerName(peer.map(str::to_string)));
    let response = api().oneshot(request).await.unwrap();
    let code = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (code, serde_json::from_slice(&body).unwrap())
}

const NS: &str = "/apis/visibility.koord-queue.io/v1alpha1/namespaces";
const FRONT: Option<&str> = Some("front-proxy-client");

#[tokio::test]
async fn only_the_front_proxy_is_believed() {
    let (code, body) = get(&format!("{NS}/team-a/pendingunits"), None, "alice", false).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["kind"], "Status");
    let (code, _) = get(
        &format!("{NS}/team-a/pendingunits"),
        Some("kubelet"),
        "alice",
        false,
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, _) = get("/apis", None, "alice", false).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "discovery too");
}

#[tokio::test]
async fn a_tenant_pages_its_namespace_and_is_refused_elsewhere() {
    let (code, body) = get(
        &format!("{NS}/team-a/pendingunits?limit=2"),
        FRONT,
        "alice",
        false,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["kind"], "PendingUnitList");
    assert_eq!(body["items"].as_array().unwrap().len(), 2);
    assert_eq!(body["metadata"]["remainingItemCount"], 3);
    assert_eq!(body["metadata"]["continue"], "2");
    let (_, next) = get(
        &format!("{NS}/team-a/pendingunits?limit=2&continue=2"),
        FRONT,
        "alice",
        false,
    )
    .await;
    assert_eq!(next["items"][0]["metadata"]["name"], "u3");
    assert_eq!(next["items"][0]["reason"]["type"], "QuotaExceeded");
    let (_, last) = get(
        &format!("{NS}/team-a/pendingunits?offset=4"),
        FRONT,
        "alice",
        false,
    )
    .await;
    assert_eq!(last["items"].as_array().unwrap().len(), 1);
    assert!(last["metadata"].get("continue").is_none());

    let (code, body) = get(&format!("{NS}/team-b/pendingunits"), FRONT, "alice", false).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("list pendingunits.visibility.koord-queue.io in the namespace \"team-b\""),
        "{message}"
    );
    let (code, _) = get(
        &format!("{NS}/koord-queue/queues/q/pendingunits"),
        FRONT,
        "alice",
        false,
    )
    .await;
    assert_eq!(
        code,
        StatusCode::FORBIDDEN,
        "a Queue's backlog is the administrator's"
    );
}

#[tokio::test]
async fn bad_parameters_and_paths_get_precise_answers() {
    let (code, body) = get(
        &format!("{NS}/team-a/pendingunits?limit=-1"),
        FRONT,
        "alice",
        false,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("limit=\"-1\""),
        "{body}"
    );
    let (code, body) = get(
        &format!("{NS}/team-a/queues/q/pendingunits"),
        FRONT,
        "alice",
        false,
    )
    .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(
        body["message"].as_str().unwrap().contains("koord-queue"),
        "{body}"
    );
    let (code, _) = get(
        "/apis/visibility.koord-queue.io/v1alpha1/nothing",
        FRONT,
        "alice",
        false,
    )
    .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn kubectl_get_receives_a_table() {
    let (code, body) = get(
        &format!("{NS}/team-a/pendingunits?limit=1"),
        FRONT,
        "alice",
        true,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["kind"], "Table");
    let columns: Vec<&str> = body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns[..5],
        ["Name", "Queue", "Position", "Priority", "Reason"]
    );
    assert_eq!(body["rows"][0]["cells"][0], "u1");
    assert_eq!(body["rows"][0]["object"]["metadata"]["namespace"], "team-a");
    assert_eq!(body["metadata"]["continue"], "1");
}

#[tokio::test]
async fn discovery_needs_no_permission_but_a_front_proxy() {
    let (code, body) = get(
        "/apis/visibility.koord-queue.io/v1alpha1",
        FRONT,
        "bob",
        false,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["kind"], "APIResourceList");
    let (code, body) = get("/openapi/v2", FRONT, "bob", false).await;
    assert_eq!(code, StatusCode::OK);
    assert!(body["definitions"].as_object().unwrap().len() > 3);
}

/// The body of `response`, and its `Content-Encoding`.
async fn body_of(response: axum::response::Response) -> (Option<String>, Vec<u8>) {
    let encoding = response
        .headers()
        .get(http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap().to_string());
    let body = axum::body::to_bytes(response.into_body(), 64 << 20)
        .await
        .unwrap();
    (encoding, body.to_vec())
}

fn listing(accept_gzip: bool) -> Request<Body> {
    let mut request =
        Request::get(format!("{NS}/team-a/pendingunits")).header("X-Remote-User", "alice");
    if accept_gzip {
        request = request.header(http::header::ACCEPT_ENCODING, "gzip");
    }
    let mut request = request.body(Body::empty()).unwrap();
    request
        .extensions_mut()
        .insert(PeerName(FRONT.map(str::to_string)));
    request
}

#[tokio::test]
async fn a_long_list_is_gzipped_for_a_client_that_accepts_it() {
    use std::io::Read as _;
    let (encoding, plain) = body_of(api_with(2_000).oneshot(listing(false)).await.unwrap()).await;
    assert_eq!(encoding, None, "not asked for");
    let (encoding, gzipped) = body_of(api_with(2_000).oneshot(listing(true)).await.unwrap()).await;
    assert_eq!(encoding.as_deref(), Some("gzip"));
    assert!(
        gzipped.len() * 10 < plain.len(),
        "{} bytes gzipped of {}",
        gzipped.len(),
        plain.len()
    );
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&gzipped[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, plain);
    let list: Value = serde_json::from_slice(&unzipped).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 2_000);
    // A short answer is not worth it.
    let (encoding, _) = body_of(api_with(5).oneshot(listing(true)).await.unwrap()).await;
    assert_eq!(encoding, None, "five units are sent as they are");
}

#[tokio::test]
async fn a_question_asked_again_while_nothing_changed_is_answered_from_the_kept_bytes() {
    let owner = Owner {
        count: 200,
        ..Owner::default()
    };
    let api = api_over(owner.clone());
    let ask = || async {
        body_of(api.clone().oneshot(listing(false)).await.unwrap())
            .await
            .1
    };
    let first = ask().await;
    let again = ask().await;
    assert_eq!(first, again);
    assert_eq!(
        owner.rendered.load(Ordering::SeqCst),
        1,
        "the second answer is the kept one"
    );
    // The state moves on: the answer is worked out again, then kept anew.
    owner.generation.fetch_add(1, Ordering::SeqCst);
    ask().await;
    ask().await;
    assert_eq!(owner.rendered.load(Ordering::SeqCst), 2);
    // Gzipped for a client that accepts it: kept in that form too, so it
    // is compressed once, not for every request.
    let gzipped = || async { body_of(api.clone().oneshot(listing(true)).await.unwrap()).await };
    let (encoding, first) = gzipped().await;
    assert_eq!(encoding.as_deref(), Some("gzip"));
    assert_eq!(gzipped().await, (Some("gzip".to_string()), first));
    assert_eq!(owner.rendered.load(Ordering::SeqCst), 3);
    // Another user is still authorized on its own: bob is refused what
    // alice was given.
    let mut request = listing(false);
    request
        .headers_mut()
        .insert("X-Remote-User", "bob".parse().unwrap());
    let response = api.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}
