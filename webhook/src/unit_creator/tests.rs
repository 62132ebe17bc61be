//! The unit creator against the webhook tests' shared in-memory API
//! (`tests/support`): creates after the answer, forged reviews, the degraded
//! check, the backlog and its namespace shares, retries and the drain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use koord_queue_api::QueueUnit;
use koord_queue_api::jobs::{self, JobAdapter};
use support::{FixedView, MemoryApi, held_job};
use tokio::sync::Notify;

use super::{CreatorConfig, UnitCreator};
use crate::metrics::{BacklogRefusalLabels, CreateErrorLabels, Metrics, SkipLabels};
use crate::view::ClusterView;

/// The unit a review describes: forged content (no pods, priority 9).
fn unit(name: &str) -> QueueUnit {
    let mut unit = QueueUnit::new(name, Default::default());
    unit.metadata.namespace = Some("ns".into());
    unit.spec.consumer_ref.name = Some(name.into());
    unit.spec.consumer_ref.kind = Some("Job".into());
    unit.spec.priority = Some(9);
    unit
}

fn job_adapter() -> &'static dyn JobAdapter {
    jobs::for_kind("batch", "Job").unwrap()
}

fn creator(api: Arc<MemoryApi>, backlog: usize) -> (UnitCreator, Metrics) {
    let metrics = Metrics::register(&mut Default::default());
    let config = CreatorConfig {
        backlog,
        first_retry: Duration::from_millis(1),
        max_retry: Duration::from_millis(5),
        give_up_after: Duration::from_secs(5),
        job_wait: Duration::from_millis(200),
        ..CreatorConfig::new(4)
    };
    let view: Arc<dyn ClusterView> = Arc::new(FixedView::default());
    (
        UnitCreator::start(api, view, metrics.clone(), config),
        metrics,
    )
}

#[tokio::test]
async fn units_are_created_after_the_answer_from_the_stored_job() {
    let gate = Arc::new(Notify::new());
    let api = Arc::new(MemoryApi {
        gate: Some(gate.clone()),
        ..Default::default()
    });
    let (creator, _) = creator(api.clone(), 16);
    // Answered before the job is even stored.
    creator
        .create(job_adapter(), &unit("a"), "a")
        .await
        .unwrap();
    api.store(&held_job("ns", "a", "a"));
    gate.notify_one();
    creator.idle().await;
    let units = api.units.lock().unwrap();
    let created = &units[&("ns".to_string(), "a".to_string())];
    // The stored job's content, not the review's.
    assert_eq!(created.spec.priority, Some(0));
    assert_eq!(created.spec.resource["cpu"].0, "2");
    assert_eq!(created.spec.queue, "q");
    let owner = &created.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Job", "uid-ns-a")
    );
    assert_eq!(created.spec.consumer_ref.uid.as_deref(), Some("uid-ns-a"));
}

#[tokio::test]
async fn forged_reviews_create_nothing() {
    let api = Arc::new(MemoryApi::default());
    let (creator, metrics) = creator(api.clone(), 16);
    // No such job; and a job that names another unit.
    api.store(&held_job("ns", "real", "real-own-unit"));
    creator
        .create(job_adapter(), &unit("ghost"), "ghost")
        .await
        .unwrap();
    creator
        .create(job_adapter(), &unit("real"), "real")
        .await
        .unwrap();
    creator.idle().await;
    assert!(api.units.lock().unwrap().is_empty());
    let skipped = |reason: &str| {
        metrics
            .units_not_created
            .get_or_create(&SkipLabels {
                reason: reason.into(),
            })
            .get()
    };
    assert_eq!(skipped("job-missing"), 1);
    assert_eq!(skipped("job-names-another-unit"), 1);
}

#[tokio::test]
async fn after_a_failure_reviews_check_the_api_and_refuse_with_its_reason() {
    let api = Arc::new(MemoryApi {
        failing: AtomicU32::new(u32::MAX),
        status: 500,
        ..Default::default()
    });
    api.store(&held_job("ns", "a", "a"));
    let (creator, metrics) = creator(api.clone(), 16);
    // Accepted into the backlog; its first attempt fails: degraded.
    creator
        .create(job_adapter(), &unit("a"), "a")
        .await
        .unwrap();
    while creator.shared.healthy.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Degraded: the review asks the API and is refused with its reason.
    let message = creator
        .create(job_adapter(), &unit("b"), "b")
        .await
        .unwrap_err();
    assert!(message.contains("etcd is down"), "{message}");
    assert!(message.contains("QueueUnit ns/b"), "{message}");
    // The API recovers: the next review's check succeeds, which makes
    // the creator healthy again; the backlog unit is retried.
    api.failing.store(0, Ordering::Release);
    api.store(&held_job("ns", "c", "c"));
    creator
        .create(job_adapter(), &unit("c"), "c")
        .await
        .unwrap();
    assert!(creator.shared.healthy.load(Ordering::Acquire));
    creator.idle().await;
    let units = api.units.lock().unwrap();
    assert_eq!(
        units
            .keys()
            .map(|(_, name)| name.clone())
            .collect::<Vec<_>>(),
        ["a", "c"],
        "the refused job's unit is not created"
    );
    assert!(api.dry_runs.load(Ordering::Acquire) >= 2);
    let failures = metrics
        .unit_create_errors
        .get_or_create(&CreateErrorLabels {
            reason: "api".into(),
        })
        .get();
    assert!(failures >= 2, "{failures}");
}

#[tokio::test]
async fn a_full_backlog_refuses_jobs_until_it_drains() {
    let gate = Arc::new(Notify::new());
    let api = Arc::new(MemoryApi {
        gate: Some(gate.clone()),
        ..Default::default()
    });
    for name in ["a", "b", "c"] {
        api.store(&held_job("ns", name, name));
    }
    let (creator, metrics) = creator(api.clone(), 2);
    creator
        .create(job_adapter(), &unit("a"), "a")
        .await
        .unwrap();
    creator
        .create(job_adapter(), &unit("b"), "b")
        .await
        .unwrap();
    // Both wait at the gate: the backlog counts units being created too,
    // so a flood of answered reviews cannot pile up tasks without end.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let refused = creator
        .create(job_adapter(), &unit("c"), "c")
        .await
        .unwrap_err();
    assert!(refused.contains("busy"), "{refused}");
    for _ in 0..2 {
        gate.notify_one();
    }
    creator.idle().await;
    // Room again.
    creator
        .create(job_adapter(), &unit("c"), "c")
        .await
        .unwrap();
    gate.notify_one();
    creator.idle().await;
    assert_eq!(api.units.lock().unwrap().len(), 3);
    assert_eq!(metrics.unit_backlog.get(), 0);
}

/// The unit of job `name` in namespace `namespace`.
fn unit_in(namespace: &str, name: &str) -> QueueUnit {
    let mut unit = unit(name);
    unit.metadata.namespace = Some(namespace.into());
    unit
}

#[tokio::test]
async fn one_namespace_filling_its_share_does_not_refuse_another() {
    // Creates never finish (until the gate opens): the backlog only fills.
    let gate = Arc::new(Notify::new());
    let api = Arc::new(MemoryApi {
        gate: Some(gate.clone()),
        ..Default::default()
    });
    let metrics = Metrics::register(&mut Default::default());
    let config = CreatorConfig {
        backlog: 10,
        namespace_backlog: 3,
        ..CreatorConfig::new(4)
    };
    let view: Arc<dyn ClusterView> = Arc::new(FixedView::default());
    let creator = UnitCreator::start(api.clone(), view, metrics.clone(), config);
    let create = |namespace: &'static str, name: String| {
        api.store(&held_job(namespace, &name, &name));
        let creator = &creator;
        async move {
            creator
                .create(job_adapter(), &unit_in(namespace, &name), &name)
                .await
        }
    };
    let refusals = |reason: &str| {
        metrics
            .unit_backlog_refusals
            .get_or_create(&BacklogRefusalLabels {
                reason: reason.into(),
            })
            .get()
    };
    for i in 0..3 {
        create("greedy", format!("g{i}")).await.unwrap();
    }
    let refused = create("greedy", "g3".into()).await.unwrap_err();
    assert!(
        refused.contains("namespace greedy") && refused.contains("retry"),
        "{refused}"
    );
    // Every other namespace still gets in, up to its own share.
    for namespace in ["a", "b"] {
        for i in 0..3 {
            create(namespace, format!("{namespace}{i}")).await.unwrap();
        }
    }
    assert_eq!(metrics.unit_backlog_namespaces.get(), 3);
    assert_eq!(metrics.unit_backlog.get(), 9);
    assert_eq!(
        (refusals("namespace-share"), refusals("backlog-full")),
        (1, 0)
    );
    // The whole backlog stays the bound across namespaces.
    create("c", "c0".into()).await.unwrap();
    let full = create("d", "d0".into()).await.unwrap_err();
    assert!(full.contains("busy"), "{full}");
    assert_eq!(refusals("backlog-full"), 1);
    // Once the units are created the shares are free again, and no
    // namespace is remembered.
    while metrics.unit_backlog.get() > 0 {
        gate.notify_waiters();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    creator.idle().await;
    assert_eq!(metrics.unit_backlog_namespaces.get(), 0);
    assert!(creator.shared.shares.counts.lock().unwrap().is_empty());
    gate.notify_one();
    create("greedy", "g3".into()).await.unwrap();
}

#[tokio::test]
async fn refusals_of_the_object_are_not_retried() {
    let api = Arc::new(MemoryApi {
        failing: AtomicU32::new(100),
        status: 422,
        ..Default::default()
    });
    api.store(&held_job("ns", "a", "a"));
    let (creator, _) = creator(api.clone(), 16);
    creator
        .create(job_adapter(), &unit("a"), "a")
        .await
        .unwrap();
    creator.idle().await;
    assert_eq!(api.failing.load(Ordering::Acquire), 99, "one attempt only");
}

#[tokio::test]
async fn drain_creates_the_backlog_then_refuses() {
    let api = Arc::new(MemoryApi::default());
    let (creator, _) = creator(api.clone(), 1000);
    for i in 0..200 {
        let name = format!("u{i}");
        api.store(&held_job("ns", &name, &name));
        creator
            .create(job_adapter(), &unit(&name), &name)
            .await
            .unwrap();
    }
    creator.drain(Duration::from_secs(10)).await;
    assert_eq!(api.units.lock().unwrap().len(), 200);
    // Draining: no unit could be created after the answer any more.
    let refused = creator
        .create(job_adapter(), &unit("late"), "late")
        .await
        .unwrap_err();
    assert!(refused.contains("shutting down"), "{refused}");
}
