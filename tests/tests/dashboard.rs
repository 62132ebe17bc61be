//! The dashboard (issue 42) in a real headless browser (Debian's chromium
//! over WebDriver) against the real control plane: kube-apiserver with the
//! aggregation layer, the scheduler serving the visibility API, the webhook,
//! kwok nodes, real Jobs. Each page shows the figures the API gives; a
//! queue's page follows a release without a reload; a tenant's session
//! shows its namespace's units and quotas and no other's; a bad token is
//! refused at sign-in. Screenshots of each page go to
//! `<target>/tmp/dashboard-screenshots/` (docs/dashboard.md's come from there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::RoleBinding;
use koord_queue_api::queue_unit::QueueUnitPhase::{Enqueued, Running};
use koord_queue_api::{Queue, keys};
use koord_queue_model::parse_quantity;
use koord_queue_tests::browser::Browser;
use koord_queue_tests::e2e::{self, job_yaml, kubectl_create_job, wait_phase};
use koord_queue_tests::visibility::{self, get, names, namespace_path, queue_path};
use koord_queue_tests::{ControlPlane, fixtures, install, tenant};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(90);

/// The shared control plane and one dashboard for this binary (re-reading
/// live pages every second, so a test waits little for a push).
async fn setup() -> (&'static ControlPlane, String) {
    static DASHBOARD: OnceCell<koord_queue_dashboard::Running> = OnceCell::const_new();
    let cp = visibility::shared_serving("dashboard-scheduler")
        .await
        .unwrap();
    let running = DASHBOARD
        .get_or_try_init(|| koord_queue_tests::dashboard::start(cp, Duration::from_secs(1)))
        .await
        .unwrap();
    (cp, format!("http://{}", running.addr))
}

fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("dashboard-screenshots")
        .join(format!("{name}.png"))
}

async fn browser(cp: &ControlPlane) -> Browser {
    Browser::start(cp.dir(), 1280, 900).await.unwrap()
}

/// Signs in with `token` and waits for the overview's first push.
async fn sign_in(b: &Browser, base: &str, token: &str) {
    b.goto(&format!("{base}/signin")).await.unwrap();
    let c = b.client();
    use fantoccini::Locator;
    c.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    c.find(Locator::Css("#signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    ready(b, "overview").await;
}

/// Waits until the page shows view `view` drawn from a push.
async fn ready(b: &Browser, view: &str) {
    let script = format!(
        "return document.body.dataset.view === '{view}' && document.body.dataset.ready === 'true'"
    );
    b.until(LONG, &format!("the {view} page"), || async {
        Ok(b.eval(&script).await? == json!(true))
    })
    .await
    .unwrap();
}

/// Opens `hash` in the page (no reload) and waits for its view.
async fn open(b: &Browser, hash: &str, view: &str) {
    b.eval(&format!("location.hash = {}; return true", json!(hash)))
        .await
        .unwrap();
    ready(b, view).await;
}

/// Binds the tenant of `namespace` to the built-in `view` role, which the
/// chart's aggregated ClusterRole extends to the visibility API.
async fn bind_view(cp: &ControlPlane, namespace: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "tenant-view" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "kind": "ServiceAccount", "name": tenant::TENANT, "namespace": namespace }],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(cp.client().await.unwrap(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// A tenant namespace (`prefix-…`, its tenant bound to `view`) with a quota
/// of 1 CPU under `parent`; the quota, the namespace and the tenant's token.
async fn tenant_quota(
    cp: &ControlPlane,
    prefix: &str,
    parent: Option<&str>,
) -> (String, String, String) {
    let admin = cp.client().await.unwrap();
    let quota = fixtures::unique_name(&format!("{prefix}q"));
    e2e::create_quota(&admin, &quota, parent, false, "1", "1", None)
        .await
        .unwrap();
    let ns = fixtures::unique_name(prefix);
    tenant::tenant_namespace(cp, &ns, None).await.unwrap();
    bind_view(cp, &ns).await;
    let token =
        install::service_account_token(&admin, &ns, tenant::TENANT, Duration::from_secs(3600))
            .await
            .unwrap();
    // A job created before the scheduler made the quota's Queue would wait
    // as Misconfigured for a moment, which nothing here is about.
    let queues = Api::<Queue>::namespaced(admin, keys::SYSTEM_NAMESPACE);
    fixtures::eventually(LONG, || {
        let queues = queues.clone();
        let quota = quota.clone();
        async move { Ok(queues.get_opt(&quota).await?.is_some()) }
    })
    .await
    .unwrap();
    (quota, ns, token)
}

/// Creates the jobs `(name, run_for)` of 1 CPU in `ns` on `quota`, one
/// after the other so that their serving order is their order here (units
/// of one priority are served by creation time, in whole seconds); returns
/// their units' names.
async fn jobs(cp: &ControlPlane, ns: &str, quota: &str, jobs: &[(&str, &str)]) -> Vec<String> {
    let admin = cp.client().await.unwrap();
    let mut units = Vec::new();
    for (name, run_for) in jobs {
        kubectl_create_job(cp, ns, &job_yaml(name, quota, "1", run_for))
            .await
            .unwrap();
        fixtures::eventually(LONG, || {
            let admin = admin.clone();
            async move { Ok(e2e::unit_of_job(&admin, ns, name).await?.is_some()) }
        })
        .await
        .unwrap();
        let unit = e2e::unit_of_job(&admin, ns, name).await.unwrap().unwrap();
        units.push(unit.metadata.name.unwrap());
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    units
}

/// A quantity map of the API (`{"cpu": "1", "memory": "64Mi"}`) as integers.
fn quantities(map: &Value) -> BTreeMap<String, i64> {
    map.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), parse_quantity(k, v.as_str().unwrap()).unwrap()))
        .collect()
}

/// The page's text of a quantity map (`cpu 1, memory 64Mi`) as integers.
fn shown_quantities(text: &str) -> BTreeMap<String, i64> {
    text.split(", ")
        .filter_map(|pair| pair.split_once(' '))
        .map(|(k, v)| (k.to_string(), parse_quantity(k, v).unwrap_or(i64::MIN)))
        .collect()
}

/// How many units wait in `path`'s list, as the API counts them.
fn count(list: &Value) -> u64 {
    list["items"].as_array().map_or(0, |i| i.len() as u64)
        + list["metadata"]["remainingItemCount"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn an_administrator_sees_the_apis_figures_on_every_page_and_a_release_live() {
    let (cp, base) = setup().await;
    let admin = cp.client().await.unwrap();
    let parent = fixtures::unique_name("dashp");
    e2e::create_quota(&admin, &parent, None, true, "2", "4", None)
        .await
        .unwrap();
    let (quota, ns, _) = tenant_quota(cp, "dash", Some(&parent)).await;
    let units = jobs(cp, &ns, &quota, &[("j1", "1h"), ("j2", "1h"), ("j3", "1h")]).await;
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    for job in ["j2", "j3"] {
        wait_phase(&admin, &ns, job, &[Enqueued], LONG)
            .await
            .unwrap();
    }
    let token = koord_queue_tests::dashboard::admin_token(cp, Duration::from_secs(3600))
        .await
        .unwrap();
    let b = browser(cp).await;
    sign_in(&b, &base, &token).await;

    // Overview: the cluster's waiting units as the API counts them (other
    // suites' jobs come and go, so page and API are compared until they
    // agree), the quota tree with the tenant's quota under its parent and
    // its figures as the API gives them.
    b.until(LONG, "the API's count of waiting units", || async {
        let (_, list) = get(
            &admin,
            "/apis/visibility.koord-queue.io/v1alpha1/pendingunits?limit=1",
        )
        .await?;
        Ok(b.text("[data-figure=waiting]").await? == count(&list).to_string())
    })
    .await
    .unwrap();
    let (_, usages) = get(
        &admin,
        "/apis/visibility.koord-queue.io/v1alpha1/quotausages",
    )
    .await
    .unwrap();
    let mine = usages["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["metadata"]["name"] == json!(quota))
        .unwrap();
    assert_eq!(mine["used"]["cpu"], "1", "{mine}");
    assert_eq!(mine["pending"], 2, "{mine}");
    let node = format!("[data-quota='{parent}'] [data-quota='{quota}']");
    let (used, max) = (quantities(&mine["used"]), quantities(&mine["max"]));
    b.until(
        LONG,
        "the quota under its parent with the API's figures",
        || async {
            let shown = (
                shown_quantities(&b.text(&format!("{node} [data-fig=used]")).await?),
                shown_quantities(&b.text(&format!("{node} [data-fig=max]")).await?),
                b.text(&format!("{node} [data-fig=pending]")).await?,
            );
            anyhow::ensure!(
                shown == (used.clone(), max.clone(), "2 waiting".to_string()),
                "shown: {shown:?}, the API: {mine}"
            );
            Ok(true)
        },
    )
    .await
    .unwrap();
    let updates = b
        .eval("return document.body.dataset.updates")
        .await
        .unwrap();
    println!("overview pushes so far: {updates}");
    let busiest = b.attributes("[data-busy]", "data-busy").await.unwrap();
    // The other suites of this binary make quotas with one waiting unit at most.
    assert_eq!(busiest.first(), Some(&quota), "{busiest:?}");
    b.screenshot(&screenshot_path("overview")).await.unwrap();
    // The tree's top items line up, a parent's name with its marker in
    // front of it: a marker drawn outside its summary fell off the tree's
    // left edge and left the parent's name a marker's width to the left.
    let lefts = b
        .eval(
            "const tree = document.querySelector('#quota-tree').getBoundingClientRect().left;
             const at = s => [...document.querySelectorAll(s)]
               .map(e => Math.round(e.getBoundingClientRect().left - tree));
             return [at('#quota-tree > details > summary .qname'),
                     at('#quota-tree > .leaf .qname')];",
        )
        .await
        .unwrap();
    let (parents, leaves): (Vec<i64>, Vec<i64>) = serde_json::from_value(lefts).unwrap();
    assert!(
        !parents.is_empty() && !leaves.is_empty(),
        "top parents {parents:?}, top leaves {leaves:?}"
    );
    assert!(
        parents
            .iter()
            .chain(&leaves)
            .all(|&l| l == leaves[0] && l > 0),
        "the top names' offsets from the tree's left edge: parents {parents:?}, leaves {leaves:?}"
    );
    // Searching the tree leaves the matching quota and its ancestors.
    b.client()
        .find(fantoccini::Locator::Css("#quota-search"))
        .await
        .unwrap()
        .send_keys(&quota)
        .await
        .unwrap();
    let path = vec![parent.clone(), quota.clone()];
    b.until(LONG, "the search's quotas", || async {
        Ok(b.attributes("[data-quota]", "data-quota").await? == path)
    })
    .await
    .unwrap();

    // The Queue's page: its backlog in the API's order, with its reasons;
    // the running unit among the admitted.
    open(&b, &format!("#/queue/{quota}"), "queue").await;
    let (_, backlog) = get(&admin, &queue_path(&quota)).await.unwrap();
    assert_eq!(names(&backlog), units[1..]);
    let rows: Vec<String> = b.attributes("[data-row]", "data-row").await.unwrap();
    let expected: Vec<String> = units[1..].iter().map(|u| format!("{ns}/{u}")).collect();
    assert_eq!(rows, expected);
    assert_eq!(b.texts("[data-position]").await.unwrap(), ["1", "2"]);
    let reasons = b.texts("#backlog [data-reason]").await.unwrap();
    let api_reasons: Vec<String> = backlog["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["reason"]["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons, api_reasons);
    assert_eq!(
        b.attributes("[data-admitted]", "data-admitted")
            .await
            .unwrap(),
        [format!("{ns}/{}", units[0])]
    );
    assert_eq!(
        b.text("#page-info").await.unwrap(),
        "2 waiting · page 1 of 1"
    );
    b.screenshot(&screenshot_path("queue")).await.unwrap();
    // Searching the backlog keeps the units it names, in their places.
    open(&b, &format!("#/queue/{quota}?q={}", units[2]), "queue").await;
    assert_eq!(
        b.attributes("[data-row]", "data-row").await.unwrap(),
        [format!("{ns}/{}", units[2])]
    );
    assert_eq!(b.texts("[data-position]").await.unwrap(), ["2"]);
    assert_eq!(
        b.text("#page-info").await.unwrap(),
        "1 waiting · page 1 of 1"
    );
    open(&b, &format!("#/queue/{quota}"), "queue").await;
    // The page's admitted units are the API server's selection by queue
    // (the CRD's selectable field spec.queue), not a cluster's list.
    let selected = cp
        .kubectl(&[
            "get",
            "queueunits",
            "-A",
            "--field-selector",
            &format!("spec.queue={quota}"),
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await
        .unwrap();
    let mut selected: Vec<&str> = selected.split_whitespace().collect();
    selected.sort();
    let mut all: Vec<&str> = units.iter().map(String::as_str).collect();
    all.sort();
    assert_eq!(selected, all);

    // A unit's page: why it waits as the API says, the quota path up to the
    // parent, a timeline from its creation.
    open(&b, &format!("#/unit/{ns}/{}", units[1]), "unit").await;
    assert_eq!(
        b.text("[data-fact=reason] [data-reason]").await.unwrap(),
        api_reasons[0]
    );
    assert_eq!(b.text("[data-fact=position]").await.unwrap(), "1");
    assert_eq!(
        b.attributes("[data-path]", "data-path").await.unwrap(),
        [quota.clone(), parent.clone()]
    );
    let timeline = b.text("#timeline").await.unwrap();
    assert!(timeline.contains("Created"), "{timeline}");
    b.screenshot(&screenshot_path("unit")).await.unwrap();

    // Live: the first job is deleted, the second is released; the open Queue page
    // follows without a reload (a mark left in the page survives).
    open(&b, &format!("#/queue/{quota}"), "queue").await;
    b.eval("window.kqMark = 'kept'; return true").await.unwrap();
    cp.kubectl(&["delete", "job", "j1", "-n", &ns, "--wait=false"])
        .await
        .unwrap();
    wait_phase(&admin, &ns, "j2", &[Running], LONG)
        .await
        .unwrap();
    let expected = vec![format!("{ns}/{}", units[2])];
    b.until(LONG, "the release of j2", || async {
        Ok(b.attributes("[data-row]", "data-row").await? == expected
            && b.texts("[data-position]").await? == ["1"]
            && b.attributes("[data-admitted]", "data-admitted").await?
                == [format!("{ns}/{}", units[1])])
    })
    .await
    .unwrap();
    assert_eq!(
        b.eval("return window.kqMark").await.unwrap(),
        json!("kept"),
        "the page was reloaded"
    );
    let (_, list) = get(&admin, &namespace_path(&ns)).await.unwrap();
    assert_eq!(names(&list), units[2..]);

    // The history page draws the scheduler's samples: the quota's usage
    // against its min and max as the API gives them, the queues' backlogs.
    let (code, history) = get(&admin, "/apis/visibility.koord-queue.io/v1alpha1/histories")
        .await
        .unwrap();
    assert_eq!(code, 200, "{history}");
    let now = history["items"].as_array().unwrap().last().unwrap();
    let sampled = now["quotas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == json!(quota))
        .unwrap();
    assert_eq!(sampled["used"]["cpu"], 1000, "{sampled}");
    assert_eq!(sampled["max"]["cpu"], 1000, "{sampled}");
    open(&b, "#/history", "history").await;
    b.eval(&format!(
        "const s = document.getElementById('history-quota'); s.value = {}; s.dispatchEvent(new Event('change')); return true",
        json!(quota)
    ))
    .await
    .unwrap();
    assert!(
        b.attributes("#history-quota option", "value")
            .await
            .unwrap()
            .contains(&quota)
    );
    assert_eq!(
        b.attributes("[data-chart=quota] svg path", "d")
            .await
            .unwrap()
            .len(),
        3,
        "used, min and max"
    );
    assert!(
        !b.attributes("[data-chart=pending] svg path", "d")
            .await
            .unwrap()
            .is_empty()
    );
    b.screenshot(&screenshot_path("history")).await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test]
async fn a_tenant_sees_its_namespace_and_not_anothers() {
    let (cp, base) = setup().await;
    let admin = cp.client().await.unwrap();
    let (mine, ns, token) = tenant_quota(cp, "dasht", None).await;
    let (theirs, other, _) = tenant_quota(cp, "dasho", None).await;
    let my_units = jobs(cp, &ns, &mine, &[("run", "1h"), ("wait", "1h")]).await;
    let their_units = jobs(cp, &other, &theirs, &[("run", "1h"), ("wait", "1h")]).await;
    for (n, job) in [(&ns, "wait"), (&other, "wait")] {
        wait_phase(&admin, n, job, &[Enqueued], LONG).await.unwrap();
    }
    let b = browser(cp).await;
    sign_in(&b, &base, &token).await;

    // The overview: the tenant's quota and its waiting unit, as the
    // tenant's own API reads count them; nothing of the other namespace.
    let tenant_client = {
        let kubeconfig =
            install::service_account_kubeconfig(cp, &ns, tenant::TENANT, Duration::from_secs(600))
                .await
                .unwrap();
        koord_queue_tests::kubeconfig::client_from_file(&kubeconfig)
            .await
            .unwrap()
    };
    let (code, list) = get(&tenant_client, &namespace_path(&ns)).await.unwrap();
    assert_eq!(code, 200, "{list}");
    assert_eq!(names(&list), my_units[1..]);
    b.until(LONG, "the tenant's figures", || async {
        Ok(b.text("[data-figure=waiting]").await? == "1"
            && b.attributes("[data-quota]", "data-quota").await? == [mine.clone()])
    })
    .await
    .unwrap();
    assert_eq!(
        b.text("[data-figure=capacity]").await.unwrap(),
        "not visible to you"
    );
    // Its history: its quota's, no other's.
    open(&b, "#/history", "history").await;
    assert_eq!(
        b.attributes("#history-quota option", "value")
            .await
            .unwrap(),
        std::slice::from_ref(&mine)
    );
    open(&b, "#/", "overview").await;
    let source = b.client().source().await.unwrap();
    assert!(
        !source.contains(&theirs) && !source.contains(&other),
        "another tenant's quota or namespace on the overview"
    );
    b.screenshot(&screenshot_path("tenant-overview"))
        .await
        .unwrap();

    // Its queue: its unit; the other's queue: none of the other's units.
    open(&b, &format!("#/queue/{mine}"), "queue").await;
    assert_eq!(
        b.attributes("[data-row]", "data-row").await.unwrap(),
        [format!("{ns}/{}", my_units[1])]
    );
    open(&b, &format!("#/queue/{theirs}"), "queue").await;
    assert!(
        b.attributes("[data-row]", "data-row")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        b.attributes("[data-admitted]", "data-admitted")
            .await
            .unwrap()
            .is_empty()
    );
    let source = b.client().source().await.unwrap();
    for unit in &their_units {
        assert!(
            !source.contains(unit.as_str()),
            "another tenant's unit {unit} shown"
        );
    }
    // Another namespace's unit, asked for by name: refused by the API server.
    b.eval(&format!(
        "location.hash = {}; return true",
        json!(format!("#/unit/{other}/{}", their_units[1]))
    ))
    .await
    .unwrap();
    b.until(LONG, "the refusal", || async {
        Ok(b.text("#problems").await?.contains("not allowed"))
    })
    .await
    .unwrap();
    assert!(
        b.attributes("[data-fact]", "data-fact")
            .await
            .unwrap()
            .is_empty()
    );
    b.close().await.unwrap();
}

#[tokio::test]
async fn a_bad_token_is_refused_at_sign_in() {
    let (cp, base) = setup().await;
    let b = browser(cp).await;
    b.goto(&format!("{base}/")).await.unwrap();
    let url = b.client().current_url().await.unwrap();
    assert_eq!(
        url.path(),
        "/signin",
        "an unsigned visitor is sent to sign in"
    );
    use fantoccini::Locator;
    let c = b.client();
    c.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys("not-a-token")
        .await
        .unwrap();
    c.find(Locator::Css("#signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.until(LONG, "the refusal", || async {
        Ok(b.text("#message")
            .await?
            .contains("did not accept this token"))
    })
    .await
    .unwrap();
    b.screenshot(&screenshot_path("signin-refused"))
        .await
        .unwrap();
    // No session came of it: the pages still send the visitor to sign in.
    b.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(b.client().current_url().await.unwrap().path(), "/signin");
    b.goto(&format!("{base}/api/me")).await.unwrap();
    assert!(b.client().source().await.unwrap().contains("not signed in"));
    b.close().await.unwrap();
}

/// A browser opens at most six connections to one host over HTTP/1.1. A
/// page left behind (kept in the back/forward cache) used to keep its live
/// stream open, so after a few pages the next one waited ~58 s for a slot
/// before it drew anything (the navigation itself waits, so it is the
/// page's own clock that tells); each page now gives its stream up on
/// `pagehide`. Ten full loads in turn must each draw within 20 s of the
/// navigation's start (they take ~0.2 s).
#[tokio::test]
async fn pages_opened_one_after_another_each_draw_without_waiting_for_a_connection() {
    let (cp, base) = setup().await;
    let b = browser(cp).await;
    let token = koord_queue_tests::dashboard::admin_token(cp, Duration::from_secs(3600))
        .await
        .unwrap();
    sign_in(&b, &base, &token).await;
    for n in 0..10 {
        b.goto("about:blank").await.unwrap();
        b.goto(&format!("{base}/#/")).await.unwrap();
        let drawn = "return document.body.dataset.firstDrawMs || null";
        b.until(LONG, &format!("figures on full load {n}"), || async {
            Ok(b.eval(drawn).await? != Value::Null)
        })
        .await
        .unwrap();
        let ms: f64 = b
            .eval(drawn)
            .await
            .unwrap()
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            ms < 20_000.0,
            "full load {n} of the overview drew {ms} ms after the navigation started: \
             it waited for a connection"
        );
    }
    b.close().await.unwrap();
}
