//! `kubectl koord-queue` (issue 41) against the real API server with the
//! aggregation layer on, as a tenant (a ServiceAccount token bound to the
//! built-in `view` role, which the chart's aggregated reader extends) and as
//! the administrator: `why` on a job waiting for quota, behind a Block head,
//! in backoff and released; `pending` in the scheduler's order; `stop`
//! holding a queue (and `--drain` sending its running job back) and
//! `resume` releasing it; `-o json` parsing back into the API's types; a
//! tenant refused another namespace and a Queue with the permission named.
//!
//! The CLI runs in-process through `koord_queue_cli::run`, the function the
//! binary's `main` calls. With `KOORD_QUEUE_CLI_TRANSCRIPT=<file>` every run
//! is appended to the file (docs/cli.md's output comes from there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::rbac::v1::RoleBinding;
use koord_queue_api::queue_unit::QueueUnitPhase::{Enqueued, Running, TimeoutBackoff};
use koord_queue_api::{Queue, keys};
use koord_queue_cli::{QueueSummaryList, Why};
use koord_queue_tests::e2e::{self, job_yaml, kubectl_create_job, wait_phase};
use koord_queue_tests::visibility::{self, get, names, namespace_path, queue_path};
use koord_queue_tests::{ControlPlane, fixtures, install, tenant};
use koord_queue_visibility::types::{PendingUnitList, WaitType};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(60);

async fn setup() -> &'static ControlPlane {
    visibility::shared_serving("cli-scheduler").await.unwrap()
}

/// A tenant's namespace with a quota of `cpu` (policy `policy`), the tenant
/// bound to `view` there; returns the quota, the namespace and the tenant's
/// kubeconfig.
async fn tenant(
    cp: &ControlPlane,
    prefix: &str,
    cpu: &str,
    policy: Option<&str>,
) -> (String, String, PathBuf) {
    tenant_under(cp, prefix, cpu, policy, None).await
}

/// A parent quota (min 2, max 4 cpu) to put tenants' quotas under.
async fn parent_quota(cp: &ControlPlane, prefix: &str) -> String {
    let parent = fixtures::unique_name(&format!("{prefix}p"));
    e2e::create_quota(
        &cp.client().await.unwrap(),
        &parent,
        None,
        true,
        "2",
        "4",
        None,
    )
    .await
    .unwrap();
    parent
}

/// [`tenant`] whose quota is a child of `parent`.
async fn tenant_under(
    cp: &ControlPlane,
    prefix: &str,
    cpu: &str,
    policy: Option<&str>,
    parent: Option<&str>,
) -> (String, String, PathBuf) {
    let quota = fixtures::unique_name(&format!("{prefix}q"));
    e2e::create_quota(
        &cp.client().await.unwrap(),
        &quota,
        parent,
        false,
        cpu,
        cpu,
        policy,
    )
    .await
    .unwrap();
    let ns = fixtures::unique_name(prefix);
    tenant::tenant_namespace(cp, &ns, None).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "tenant-view" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view" },
        "subjects": [{ "kind": "ServiceAccount", "name": tenant::TENANT, "namespace": ns }],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(cp.client().await.unwrap(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let kubeconfig =
        install::service_account_kubeconfig(cp, &ns, tenant::TENANT, Duration::from_secs(3600))
            .await
            .unwrap();
    // A tenant's context names its namespace, as a platform team hands it out.
    let mut config: Value = serde_yaml::from_slice(&std::fs::read(&kubeconfig).unwrap()).unwrap();
    for context in config["contexts"].as_array_mut().unwrap() {
        context["context"]["namespace"] = json!(ns);
    }
    std::fs::write(&kubeconfig, serde_yaml::to_string(&config).unwrap()).unwrap();
    wait_queue(cp, &quota).await;
    (quota, ns, kubeconfig)
}

/// Waits until the scheduler has made the Queue of quota `quota` — before
/// it, a job of the quota waits as Misconfigured ("queue does not exist").
async fn wait_queue(cp: &ControlPlane, quota: &str) {
    let queues = Api::<Queue>::namespaced(cp.client().await.unwrap(), keys::SYSTEM_NAMESPACE);
    fixtures::eventually(LONG, || {
        let queues = queues.clone();
        async move { Ok(queues.get_opt(quota).await?.is_some()) }
    })
    .await
    .unwrap_or_else(|e| panic!("no Queue for quota {quota}: {e}"));
}

/// Creates jobs `(name, cpu, run_for)` in `ns` charged to `quota`, in
/// that serving order: units of one priority are served by their creation
/// time, which has whole seconds, and the webhook stores a job's unit after
/// the job — so each next job is created only once the unit before it is
/// stored, and a second later.
async fn jobs(cp: &ControlPlane, ns: &str, quota: &str, jobs: &[(&str, &str, &str)]) {
    for (name, cpu, run_for) in jobs {
        kubectl_create_job(cp, ns, &job_yaml(name, quota, cpu, run_for))
            .await
            .unwrap();
        wait_unit(cp, ns, name).await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
}

/// Waits until job `job`'s unit is stored; its name.
async fn wait_unit(cp: &ControlPlane, ns: &str, job: &str) -> String {
    let admin = cp.client().await.unwrap();
    fixtures::eventually(LONG, || {
        let admin = admin.clone();
        async move { Ok(e2e::unit_of_job(&admin, ns, job).await?.is_some()) }
    })
    .await
    .unwrap_or_else(|e| panic!("job {ns}/{job} has no QueueUnit: {e}"));
    e2e::unit_of_job(&admin, ns, job)
        .await
        .unwrap()
        .and_then(|u| u.metadata.name)
        .unwrap()
}

/// Waits until Queue `queue`'s `Stopped` condition has reason `policy`
/// (`None`: until it has none) — the scheduler writes it from the Queue it
/// holds, so then it honours the policy.
async fn wait_stopped(cp: &ControlPlane, queue: &str, policy: Option<&str>) {
    let queues = Api::<Queue>::namespaced(cp.client().await.unwrap(), keys::SYSTEM_NAMESPACE);
    fixtures::eventually(LONG, || {
        let queues = queues.clone();
        async move {
            let q = queues.get(queue).await?;
            let reason = q
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Stopped" && c.status == "True")
                .map(|c| c.reason);
            Ok(reason.as_deref() == policy)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("queue {queue}: Stopped condition not {policy:?}: {e}"));
}

/// One run of the CLI.
#[derive(Debug)]
struct Run {
    code: u8,
    out: String,
    err: String,
}

/// Runs `kubectl koord-queue <args>` with `kubeconfig`.
async fn cli(kubeconfig: &Path, args: &[&str]) -> Run {
    let mut argv = vec!["kubectl-koord_queue".to_string(), "--kubeconfig".into()];
    argv.push(kubeconfig.display().to_string());
    argv.extend(args.iter().map(|a| a.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = koord_queue_cli::run(argv, &mut out, &mut err).await;
    let run = Run {
        code,
        out: String::from_utf8(out).unwrap(),
        err: String::from_utf8(err).unwrap(),
    };
    if let Ok(path) = std::env::var("KOORD_QUEUE_CLI_TRANSCRIPT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        let text = format!(
            "$ kubectl koord-queue {}\n{}{}(exit {})\n\n",
            args.join(" "),
            run.out,
            run.err,
            run.code
        );
        f.write_all(text.as_bytes()).unwrap();
    }
    run
}

/// [`cli`] that must succeed.
async fn ok(kubeconfig: &Path, args: &[&str]) -> Run {
    let run = cli(kubeconfig, args).await;
    assert_eq!(run.code, 0, "{args:?}: {run:?}");
    run
}

/// Runs the CLI until its output passes `check` (what it shows follows the
/// scheduler, which decides in its own time); panics with `what` after
/// [`LONG`].
async fn until_output(
    kubeconfig: &Path,
    args: &[&str],
    check: impl Fn(&str) -> anyhow::Result<bool>,
    what: &str,
) {
    let check = &check;
    fixtures::eventually(
        LONG,
        || async move { check(&cli(kubeconfig, args).await.out) },
    )
    .await
    .unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[tokio::test]
async fn why_a_job_waits_for_quota_and_why_a_released_one_does_not() {
    let cp = setup().await;
    let admin_cfg = cp.kubeconfig();
    let admin = cp.client().await.unwrap();
    let parent = parent_quota(cp, "cliq").await;
    let (quota, ns, tenant_cfg) = tenant_under(cp, "cliq", "1", None, Some(&parent)).await;
    jobs(
        cp,
        &ns,
        &quota,
        &[("j1", "1", "1h"), ("j2", "1", "1h"), ("j3", "1", "1h")],
    )
    .await;
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    for j in ["j2", "j3"] {
        wait_phase(&admin, &ns, j, &[Enqueued], LONG).await.unwrap();
    }
    let j2 = wait_unit(cp, &ns, "j2").await;

    // The tenant: the reason with its figures, the quota that stops it,
    // its place, what is ahead (from its own namespace, said so).
    let run = ok(&tenant_cfg, &["why", "job/j3", "-n", &ns]).await;
    let text = &run.out;
    assert!(text.contains("Reason:    QuotaExceeded"), "{text}");
    assert!(
        text.contains(&format!("short of cpu by 1 on quota {quota}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("Position:  2 in queue {quota} (1 ahead)")),
        "{text}"
    );
    let marked: Vec<&str> = text.lines().filter(|l| l.contains("◀ stops it")).collect();
    assert!(
        marked.len() == 1 && marked[0].trim_start().starts_with(&format!("{quota} ")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with(&format!("{parent} "))),
        "the parent quota is listed: {text}"
    );
    assert!(text.contains(&j2), "the unit ahead is listed: {text}");
    assert!(
        text.contains("only your namespace's units ahead are listed"),
        "{text}"
    );
    assert!(text.contains("Last events on the job:"), "{text}");

    // The administrator reads the Queue's backlog: no such note.
    let run = ok(admin_cfg, &["why", "job/j3", "-n", &ns]).await;
    assert!(
        run.out.contains(&j2) && !run.out.contains("only your namespace"),
        "{}",
        run.out
    );

    // -o json parses back, and says what the visibility API says.
    let run = ok(&tenant_cfg, &["why", "job/j3", "-n", &ns, "-o", "json"]).await;
    let why: Why = serde_json::from_str(&run.out).unwrap();
    let (_, list) = get(&admin, &namespace_path(&ns)).await.unwrap();
    let entry = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == json!(why.unit.name))
        .unwrap();
    let pending = why.pending.as_ref().expect("it waits");
    assert_eq!(json!(pending.position), entry["position"]);
    assert_eq!(json!(pending.reason.kind), entry["reason"]["type"]);
    let path: Vec<&str> = why
        .quota_path
        .iter()
        .map(|q| q.metadata.name.as_str())
        .collect();
    assert_eq!(path, [quota.as_str(), parent.as_str()]);

    // Released: its phase, no reason.
    let run = ok(&tenant_cfg, &["why", "job/j1", "-n", &ns]).await;
    assert!(
        run.out.contains("Phase:     Running: not waiting"),
        "{}",
        run.out
    );
    assert!(!run.out.contains("Reason:"), "{}", run.out);
    // The unit itself may be named too.
    let run = ok(&tenant_cfg, &["why", &format!("qu/{j2}"), "-n", &ns]).await;
    assert!(run.out.contains("Position:  1 in queue"), "{}", run.out);
}

#[tokio::test]
async fn why_a_job_waits_behind_a_block_head() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant_cfg) = tenant(cp, "clib", "2", Some("Block")).await;
    // j1 holds 1 of 2; j2 (2) does not fit and stops the queue; j3 (1)
    // would fit but waits behind it.
    jobs(
        cp,
        &ns,
        &quota,
        &[("j1", "1", "1h"), ("j2", "2", "1h"), ("j3", "1", "1h")],
    )
    .await;
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    let head = wait_unit(cp, &ns, "j2").await;
    let behind = format!("waiting behind {ns}/{head}");
    until_output(
        &tenant_cfg,
        &["why", "job/j3", "-n", &ns],
        |out| Ok(out.contains("Reason:    BehindHead") && out.contains(&behind)),
        "j3 waits behind the Block head",
    )
    .await;
}

#[tokio::test]
async fn pending_lists_in_the_schedulers_order_and_json_round_trips() {
    let cp = setup().await;
    let admin_cfg = cp.kubeconfig();
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant_cfg) = tenant(cp, "clip", "1", None).await;
    jobs(
        cp,
        &ns,
        &quota,
        &[
            ("j1", "1", "1h"),
            ("j2", "1", "1h"),
            ("j3", "1", "1h"),
            ("j4", "1", "1h"),
        ],
    )
    .await;
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    for j in ["j2", "j3", "j4"] {
        wait_phase(&admin, &ns, j, &[Enqueued], LONG).await.unwrap();
    }
    // The tenant's namespace, as JSON: the visibility API's list itself.
    let run = ok(&tenant_cfg, &["pending", "-n", &ns, "-o", "json"]).await;
    let mine: PendingUnitList = serde_json::from_str(&run.out).unwrap();
    let (_, api) = get(&admin, &namespace_path(&ns)).await.unwrap();
    let api: PendingUnitList = serde_json::from_value(api).unwrap();
    assert_eq!(mine.items, api.items);
    let order: Vec<String> = mine.items.iter().map(|p| p.metadata.name.clone()).collect();
    let positions: Vec<Option<u64>> = mine.items.iter().map(|p| p.position).collect();
    assert_eq!(positions, [Some(1), Some(2), Some(3)]);
    // The table lists them in that order.
    let table = ok(&tenant_cfg, &["pending", "-n", &ns]).await.out;
    let at: Vec<usize> = order
        .iter()
        .map(|n| table.find(n.as_str()).expect(n))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{table}");
    assert!(
        table.starts_with("NAME ") && table.contains("QuotaExceeded"),
        "{table}"
    );
    // The administrator: the Queue's backlog, as the API serves it.
    let run = ok(admin_cfg, &["pending", "--queue", &quota, "-o", "json"]).await;
    let backlog: PendingUnitList = serde_json::from_str(&run.out).unwrap();
    let (_, api) = get(&admin, &queue_path(&quota)).await.unwrap();
    assert_eq!(
        backlog
            .items
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>(),
        names(&api)
    );
    let run = ok(admin_cfg, &["pending", "--queue", &quota, "-o", "name"]).await;
    let want: Vec<String> = order
        .iter()
        .map(|n| format!("queueunit.scheduling.x-k8s.io/{n}"))
        .collect();
    assert_eq!(run.out.lines().collect::<Vec<_>>(), want, "{}", run.out);
    // An empty namespace: nothing on stdout, a sentence on stderr.
    let (_, empty_ns, empty_cfg) = tenant(cp, "clie", "1", None).await;
    let run = ok(&empty_cfg, &["pending", "-n", &empty_ns]).await;
    assert_eq!(run.out, "");
    assert!(run.err.contains("No pending units"), "{}", run.err);
}

#[tokio::test]
async fn a_tenant_is_refused_another_namespace_and_a_queue_with_the_permission_named() {
    let cp = setup().await;
    let (quota, _ns, tenant_cfg) = tenant(cp, "clir", "1", None).await;
    let (_, other, _) = tenant(cp, "clio", "1", None).await;
    let run = cli(&tenant_cfg, &["pending", "-n", &other]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.out, "");
    assert!(
        run.err.contains(&format!(
            "forbidden: you need permission to list pendingunits.visibility.koord-queue.io in namespace {other}"
        )),
        "{}",
        run.err
    );
    assert!(
        run.err.contains(&format!(
            "kubectl auth can-i list pendingunits.visibility.koord-queue.io -n {other}"
        )),
        "{}",
        run.err
    );
    let run = cli(&tenant_cfg, &["pending", "--queue", &quota]).await;
    assert_eq!(run.code, 1);
    assert!(
        run.err.contains(&format!(
            "get queues/pendingunits.visibility.koord-queue.io named {quota}"
        )),
        "{}",
        run.err
    );
    let run = cli(&tenant_cfg, &["stop", &quota]).await;
    assert_eq!(run.code, 1);
    assert!(
        run.err.contains(&format!(
            "patch queues.scheduling.x-k8s.io named {quota} in namespace koord-queue"
        )),
        "{}",
        run.err
    );
    // A bad command line is exit code 2, and says what is wrong.
    let run = cli(&tenant_cfg, &["why", "nokind/x"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.err.contains("nokind"), "{run:?}");
}

#[tokio::test]
async fn stop_holds_a_queue_others_are_released_and_resume_releases_it() {
    let cp = setup().await;
    let admin_cfg = cp.kubeconfig();
    let admin = cp.client().await.unwrap();
    let (held_q, ns, tenant_cfg) = tenant(cp, "clis", "2", None).await;
    let other_q = fixtures::unique_name("clisq-other");
    e2e::create_quota(&admin, &other_q, None, false, "2", "2", None)
        .await
        .unwrap();
    wait_queue(cp, &other_q).await;
    let run = ok(admin_cfg, &["stop", &held_q]).await;
    assert!(
        run.out.contains("stopped (Hold: releases nothing"),
        "{}",
        run.out
    );
    // The scheduler has seen it once the Queue says so (its condition).
    wait_stopped(cp, &held_q, Some("Hold")).await;
    let run = ok(admin_cfg, &["queues", "-o", "json"]).await;
    let queues: QueueSummaryList = serde_json::from_str(&run.out).unwrap();
    let mine = queues.items.iter().find(|q| q.name == held_q).unwrap();
    assert_eq!(mine.stop_policy.as_deref(), Some("Hold"));
    let table = ok(admin_cfg, &["queues"]).await.out;
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("{held_q} ")))
        .unwrap();
    assert!(row.ends_with("Hold"), "{table}");

    // A job behind the stopped queue waits; one of another queue is released.
    jobs(cp, &ns, &held_q, &[("held", "1", "1h")]).await;
    jobs(cp, &ns, &other_q, &[("free", "1", "1h")]).await;
    wait_phase(&admin, &ns, "free", &[Running], LONG)
        .await
        .unwrap();
    until_output(
        &tenant_cfg,
        &["why", "job/held", "-n", &ns],
        |out| Ok(out.contains("Reason:    QueueStopped")),
        "the held job says its queue is stopped",
    )
    .await;
    // Its quota has room: it is not the quota that stops it.
    let run = ok(&tenant_cfg, &["why", "job/held", "-n", &ns]).await;
    assert!(
        run.out
            .contains(&format!("queue {held_q} is stopped: it releases nothing")),
        "{}",
        run.out
    );
    assert!(!run.out.contains("◀"), "{}", run.out);
    // It stays held: a few more cycles release nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        e2e::phase_of(&admin, &ns, "held").await.unwrap(),
        Some(Enqueued)
    );
    assert!(e2e::job_suspended(&admin, &ns, "held").await.unwrap());

    // Resumed: released.
    let run = ok(admin_cfg, &["resume", &held_q]).await;
    assert!(run.out.contains("resumed"), "{}", run.out);
    wait_stopped(cp, &held_q, None).await;
    wait_phase(&admin, &ns, "held", &[Running], LONG)
        .await
        .unwrap();
    let run = ok(admin_cfg, &["queues", "-o", "json"]).await;
    let queues: QueueSummaryList = serde_json::from_str(&run.out).unwrap();
    assert_eq!(
        queues
            .items
            .iter()
            .find(|q| q.name == held_q)
            .unwrap()
            .stop_policy,
        None
    );
}

#[tokio::test]
async fn drain_sends_a_running_job_back_into_backoff_and_resume_releases_it() {
    let cp = setup().await;
    let admin_cfg = cp.kubeconfig();
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant_cfg) = tenant(cp, "clid", "1", None).await;
    jobs(cp, &ns, &quota, &[("j1", "1", "1h")]).await;
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    let run = ok(admin_cfg, &["stop", &quota, "--drain"]).await;
    assert!(run.out.contains("HoldAndDrain"), "{}", run.out);
    wait_stopped(cp, &quota, Some("HoldAndDrain")).await;
    wait_phase(&admin, &ns, "j1", &[TimeoutBackoff], LONG)
        .await
        .unwrap();
    // The unit is sent back first, then its job suspended (apply.rs: from
    // the moment the unit reads TimeoutBackoff the webhook refuses an
    // unsuspend).
    fixtures::eventually(LONG, || {
        let admin = admin.clone();
        let ns = ns.clone();
        async move { e2e::job_suspended(&admin, &ns, "j1").await }
    })
    .await
    .expect("the drained job is suspended again");
    // In backoff: why says so, with when it is back in line.
    let run = ok(&tenant_cfg, &["why", "job/j1", "-n", &ns]).await;
    assert!(run.out.contains("Reason:    Backoff"), "{}", run.out);
    assert!(
        run.out.contains("Estimate:  back in line at"),
        "{}",
        run.out
    );
    let run = ok(&tenant_cfg, &["why", "job/j1", "-n", &ns, "-o", "json"]).await;
    let why: Why = serde_json::from_str(&run.out).unwrap();
    assert!(why.estimated_start.is_some(), "{why:?}");
    assert_eq!(
        why.pending.as_ref().map(|p| p.reason.kind),
        Some(WaitType::Backoff),
        "{why:?}"
    );
    assert!(
        why.message
            .as_deref()
            .unwrap_or_default()
            .contains(&format!(
                "queue {quota} was stopped and drained (HoldAndDrain)"
            )),
        "{why:?}"
    );
    // The job heard why (an Event written after the unit's status).
    until_output(
        &tenant_cfg,
        &["why", "job/j1", "-n", &ns, "-o", "json"],
        |out| {
            let why: Why = serde_json::from_str(out)?;
            Ok(why
                .events
                .iter()
                .any(|e| e.reason == "QueueDrained" && e.kind == "Warning"))
        },
        "the job's Event says its queue was drained",
    )
    .await;
    // Back from its backoff, it waits in the stopped queue; resumed, it runs.
    wait_phase(&admin, &ns, "j1", &[Enqueued], LONG)
        .await
        .unwrap();
    until_output(
        &tenant_cfg,
        &["why", "job/j1", "-n", &ns],
        |out| Ok(out.contains("Reason:    QueueStopped")),
        "back from its backoff, it waits in the stopped queue",
    )
    .await;
    assert!(e2e::job_suspended(&admin, &ns, "j1").await.unwrap());
    ok(admin_cfg, &["resume", &quota]).await;
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
}

#[tokio::test]
async fn quotas_queues_and_version_read_as_each_may() {
    let cp = setup().await;
    let admin_cfg = cp.kubeconfig();
    let parent = parent_quota(cp, "cliv").await;
    let (quota, ns, tenant_cfg) = tenant_under(cp, "cliv", "2", None, Some(&parent)).await;
    jobs(cp, &ns, &quota, &[("j1", "1", "1h")]).await;
    wait_phase(&cp.client().await.unwrap(), &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    // The tenant may not list every quota: the ones serving its namespace,
    // with their ancestors, as a tree; used counts the subtree.
    let run = ok(&tenant_cfg, &["quotas", "-n", &ns, "-o", "wide"]).await;
    let lines: Vec<&str> = run.out.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.out);
    assert!(lines[1].starts_with(&format!("{parent} ")), "{}", run.out);
    assert!(lines[2].starts_with(&format!("└─ {quota} ")), "{}", run.out);
    for row in &lines[1..] {
        assert!(row.contains("cpu=1,"), "used: {}", run.out);
    }
    let run = ok(&tenant_cfg, &["quotas"]).await;
    assert!(
        run.err.contains(&format!(
            "showing the quotas serving namespace {ns} (every quota needs list on quotausages"
        )),
        "{run:?}"
    );
    let child: Vec<&str> = run
        .out
        .lines()
        .find(|l| l.starts_with("└─ "))
        .expect("its quota under its parent")
        .split_whitespace()
        .collect();
    // └─, NAME, MIN, MAX, USED: the table shows --resource cpu alone.
    assert_eq!(child[1..5], [quota.as_str(), "2", "2", "1"], "{}", run.out);
    // The administrator sees them all; JSON is the API's list.
    let run = ok(admin_cfg, &["quotas", "-o", "json"]).await;
    let list: koord_queue_visibility::types::QuotaUsageList =
        serde_json::from_str(&run.out).unwrap();
    let mine = list
        .items
        .iter()
        .find(|q| q.metadata.name == quota)
        .unwrap();
    assert_eq!(mine.used.get("cpu").map(String::as_str), Some("1"));
    let run = ok(admin_cfg, &["queues"]).await;
    assert!(
        run.out.starts_with("NAME ") && run.out.contains(&quota),
        "{}",
        run.out
    );
    // The client's version; no scheduler Deployment here.
    let run = ok(&tenant_cfg, &["version"]).await;
    assert!(run.out.starts_with("Client Version: 0."), "{}", run.out);
    assert!(
        run.out.contains("Scheduler Version: unknown"),
        "{}",
        run.out
    );
}
