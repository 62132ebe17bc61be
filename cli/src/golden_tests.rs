//! Golden output of the tables a person reads: column widths, quantities
//! and durations, the namespace column, the tree and its bars, an empty
//! list, and `why`'s screen — each from a fixed answer and a fixed "now".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use koord_queue_visibility::types::{
    ItemMeta, JobOf, PendingUnit, PendingUnitList, QuotaUsage, QuotaUsageList, WaitReasonView,
    WaitType,
};

use crate::args::Output;
use crate::commands::pending::Pending;
use crate::commands::queues::{QueueSummary, QueueSummaryList};
use crate::commands::quotas::Quotas;
use crate::commands::why::{EventLine, Why};
use crate::read::Scope;
use crate::render::{Human, Render, print};

fn now() -> Timestamp {
    "2026-12-05T10:05:00Z".parse().unwrap()
}

fn how() -> Human {
    Human {
        wide: false,
        now: now(),
        bars: false,
        namespaces: false,
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn unit(name: &str, position: Option<u64>, kind: WaitType, since: &str) -> PendingUnit {
    PendingUnit {
        metadata: ItemMeta {
            name: name.into(),
            namespace: Some("team-a".into()),
            creation_timestamp: Some(since.into()),
        },
        job: Some(JobOf {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: name.split('-').next().unwrap().into(),
        }),
        queue: "team-a".into(),
        quota: Some("team-a".into()),
        position,
        priority: 0,
        requests: map(&[("cpu", "1"), ("memory", "512Mi")]),
        reason: WaitReasonView {
            kind,
            message: "quota team-a: cpu 1/1 used, needs 1".into(),
            quota: Some("team-a".into()),
            resource: Some("cpu".into()),
            short_by: Some("1".into()),
            behind: None,
            until: None,
        },
        waiting_since: Some(since.into()),
        estimated_start: None,
    }
}

fn pending() -> Pending {
    let mut backoff = unit(
        "eval-88d2e01",
        None,
        WaitType::Backoff,
        "2026-12-05T09:00:00Z",
    );
    backoff.reason.until = Some("2026-12-05T10:05:08Z".into());
    backoff.reason.quota = None;
    backoff.reason.resource = None;
    backoff.reason.short_by = None;
    backoff.reason.message = "preempted; back in queue team-a at 2026-12-05T10:05:08Z".into();
    Pending {
        list: PendingUnitList::new(
            vec![
                unit(
                    "train-7c1a9f3",
                    Some(1),
                    WaitType::QuotaExceeded,
                    "2026-12-05T10:01:40Z",
                ),
                unit(
                    "sweep-0b2",
                    Some(12),
                    WaitType::BehindHead,
                    "2026-12-05T10:04:55Z",
                ),
                backoff,
            ],
            0,
        ),
        scope: Scope::Namespace("team-a".into()),
    }
}

#[test]
fn pending_table() {
    assert_eq!(
        pending().human(&how()),
        "\
NAME            JOB         QUEUE    POSITION   PRIORITY   REASON          WAITING   ESTIMATE
train-7c1a9f3   Job/train   team-a   1          0          QuotaExceeded   3m20s     -
sweep-0b2       Job/sweep   team-a   12         0          BehindHead      5s        -
eval-88d2e01    Job/eval    team-a   -          0          Backoff         65m       in 8s
"
    );
}

#[test]
fn pending_wide_with_namespaces() {
    let how = Human {
        wide: true,
        namespaces: true,
        ..how()
    };
    let mut p = pending();
    p.list.items.truncate(1);
    assert_eq!(
        p.human(&how),
        "\
NAMESPACE   NAME            JOB         QUEUE    POSITION   PRIORITY   REASON          WAITING   ESTIMATE   QUOTA    SHORT   REQUESTS             MESSAGE
team-a      train-7c1a9f3   Job/train   team-a   1          0          QuotaExceeded   3m20s     -          team-a   cpu 1   cpu=1,memory=512Mi   quota team-a: cpu 1/1 used, needs 1
"
    );
}

#[test]
fn an_empty_list_prints_nothing_and_says_so_on_stderr() {
    let p = Pending {
        list: PendingUnitList::new(Vec::new(), 0),
        scope: Scope::Namespace("team-a".into()),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    print(&p, Output::Table, &how(), &mut out, &mut err).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "");
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "No pending units in namespace team-a.\n"
    );
    // A tool gets an empty list, not a sentence.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    print(&p, Output::Json, &how(), &mut out, &mut err).unwrap();
    let back: PendingUnitList = serde_json::from_slice(&out).unwrap();
    assert!(back.items.is_empty() && err.is_empty());
}

#[test]
fn json_yaml_and_name_outputs_parse_back() {
    let p = pending();
    for format in [Output::Json, Output::Yaml] {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        print(&p, format, &how(), &mut out, &mut err).unwrap();
        let back: PendingUnitList = match format {
            Output::Json => serde_json::from_slice(&out).unwrap(),
            _ => serde_yaml::from_slice(&out).unwrap(),
        };
        assert_eq!(back, p.list);
    }
    let (mut out, mut err) = (Vec::new(), Vec::new());
    print(&p, Output::Name, &how(), &mut out, &mut err).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "queueunit.scheduling.x-k8s.io/train-7c1a9f3\nqueueunit.scheduling.x-k8s.io/sweep-0b2\nqueueunit.scheduling.x-k8s.io/eval-88d2e01\n"
    );
}

fn quota(name: &str, parent: Option<&str>, used: &str, max: &str) -> QuotaUsage {
    QuotaUsage {
        metadata: ItemMeta {
            name: name.into(),
            namespace: Some("koord-queue".into()),
            creation_timestamp: None,
        },
        parent: parent.map(str::to_string),
        is_parent: parent.is_none(),
        min: map(&[("cpu", "4")]),
        effective_min: map(&[("cpu", "4")]),
        max: map(&[("cpu", max), ("memory", "64Gi")]),
        used: map(&[("cpu", used)]),
        borrowed: BTreeMap::new(),
        lent: map(&[("cpu", "1")]),
        fair_share_weight: parent.map(|_| "1".to_string()),
        pending: 2,
        admitted: 3,
    }
}

fn quotas() -> Quotas {
    // Not in tree order: the rendering puts each child under its parent.
    let items = vec![
        quota("team-b", Some("org"), "8", "16"),
        quota("org", None, "11", "32"),
        quota("team-a", Some("org"), "3", "16"),
        quota("lab", Some("team-a"), "500m", "2"),
    ];
    Quotas {
        list: QuotaUsageList::new(items),
        resource: "cpu".into(),
    }
}

#[test]
fn quota_tree_with_bars() {
    let how = Human {
        bars: true,
        ..how()
    };
    assert_eq!(
        quotas().human(&how),
        "\
NAME        MIN(CPU)   MAX(CPU)   USED(CPU)   BORROWED(CPU)   LENT(CPU)   WEIGHT   PENDING   ADMITTED   USAGE(CPU)
org         4          32         11          -               1           -        2         3          ███░░░░░░░ 34%
├─ team-a   4          16         3           -               1           1        2         3          ██░░░░░░░░ 18%
│  └─ lab   4          2          500m        -               1           1        2         3          ███░░░░░░░ 25%
└─ team-b   4          16         8           -               1           1        2         3          █████░░░░░ 50%
"
    );
}

#[test]
fn quota_tree_wide_shows_every_resource_and_no_bars_off_a_terminal() {
    let how = Human {
        wide: true,
        ..how()
    };
    let mut q = quotas();
    q.list.items.truncate(2);
    assert_eq!(
        q.human(&how),
        "\
NAME        MIN     MAX                  USED     BORROWED   LENT    EFFECTIVE MIN   WEIGHT   PENDING   ADMITTED
org         cpu=4   cpu=32,memory=64Gi   cpu=11   -          cpu=1   cpu=4           -        2         3
└─ team-b   cpu=4   cpu=16,memory=64Gi   cpu=8    -          cpu=1   cpu=4           1        2         3
"
    );
}

#[test]
fn queues_table() {
    let list = QueueSummaryList {
        items: vec![
            QueueSummary {
                name: "team-a".into(),
                policy: "Priority".into(),
                priority: 0,
                stop_policy: None,
                pending: Some(3),
                admitted: Some(1),
                running: Some(1),
                admission_checks: Vec::new(),
            },
            QueueSummary {
                name: "maintenance-queue".into(),
                policy: "Block".into(),
                priority: 10,
                stop_policy: Some("HoldAndDrain".into()),
                pending: None,
                admitted: None,
                running: None,
                admission_checks: vec!["provisioning".into()],
            },
        ],
    };
    assert_eq!(
        list.human(&how()),
        "\
NAME                POLICY     PRIORITY   PENDING   ADMITTED   RUNNING   STOPPED
team-a              Priority   0          3         1          1         -
maintenance-queue   Block      10         -         -          -         HoldAndDrain
"
    );
}

#[test]
fn why_a_job_waits_on_one_screen() {
    let mut me = unit(
        "j3-x",
        Some(2),
        WaitType::QuotaExceeded,
        "2026-12-05T10:03:00Z",
    );
    me.reason.message = "quota org: cpu 32/32 used, needs 1".into();
    me.reason.quota = Some("org".into());
    let why = Why {
        job: JobOf {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "j3".into(),
        },
        unit: me.metadata.clone(),
        queue: "team-a".into(),
        quota: Some("team-a".into()),
        phase: Some("Enqueued".into()),
        message: Some(me.reason.message.clone()),
        pending: Some(me),
        ahead: vec![unit(
            "j2-y",
            Some(1),
            WaitType::QuotaExceeded,
            "2026-12-05T10:02:00Z",
        )],
        quota_path: vec![
            quota("team-a", Some("org"), "3", "16"),
            quota("org", None, "32", "32"),
        ],
        estimated_start: Some("2026-12-05T10:12:30Z".into()),
        events: vec![EventLine {
            time: Some("2026-12-05T10:03:01Z".into()),
            kind: "Normal".into(),
            reason: "Waiting".into(),
            message: "QuotaExceeded: quota org: cpu 32/32 used, needs 1".into(),
        }],
        notes: vec!["only your namespace's units ahead are listed (1 ahead in all)".into()],
    };
    assert_eq!(
        why.human(&how()),
        "\
Job:       Job team-a/j3 (batch/v1)
Unit:      j3-x (created 2m ago)
Queue:     team-a, quota team-a
Phase:     Enqueued, waiting for 2m
Reason:    QuotaExceeded: quota org: cpu 32/32 used, needs 1
           short of cpu by 1 on quota org
Position:  2 in queue team-a (1 ahead)
Estimate:  starts at about 2026-12-05T10:12:30Z (in 7m30s)

Quotas, from the job's up:
  QUOTA    MIN     MAX                  USED     BORROWED   LENT
  team-a   cpu=4   cpu=16,memory=64Gi   cpu=3    -          cpu=1
  org      cpu=4   cpu=32,memory=64Gi   cpu=32   -          cpu=1   ◀ stops it

Ahead in queue team-a:
  POSITION   NAMESPACE   NAME   PRIORITY   REASON          REQUESTS
  1          team-a      j2-y   0          QuotaExceeded   cpu=1,memory=512Mi

Last events on the job:
  AGE    TYPE     REASON    MESSAGE
  119s   Normal   Waiting   QuotaExceeded: quota org: cpu 32/32 used, needs 1

Note: only your namespace's units ahead are listed (1 ahead in all)
"
    );
    // `-o json` round-trips.
    let back: Why = serde_json::from_str(&serde_json::to_string(&why).unwrap()).unwrap();
    assert_eq!(back, why);
}

#[test]
fn why_a_job_waits_in_a_stopped_queue_marks_no_quota() {
    let mut me = unit(
        "held-01dac248",
        Some(1),
        WaitType::QueueStopped,
        "2026-12-05T10:04:58Z",
    );
    // As the scheduler says it: the queue in `quota`, no shortfall.
    me.reason.message = "queue team-a is stopped: it releases nothing until it is resumed".into();
    me.reason.resource = None;
    me.reason.short_by = None;
    let why = Why {
        job: JobOf {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "held".into(),
        },
        unit: me.metadata.clone(),
        queue: "team-a".into(),
        quota: Some("team-a".into()),
        phase: Some("Enqueued".into()),
        message: Some(me.reason.message.clone()),
        pending: Some(me),
        ahead: Vec::new(),
        quota_path: vec![quota("team-a", None, "0", "2")],
        estimated_start: None,
        events: Vec::new(),
        notes: Vec::new(),
    };
    assert_eq!(
        why.human(&how()),
        "\
Job:       Job team-a/held (batch/v1)
Unit:      held-01dac248 (created 2s ago)
Queue:     team-a, quota team-a
Phase:     Enqueued, waiting for 2s
Reason:    QueueStopped: queue team-a is stopped: it releases nothing until it is resumed
Position:  1 in queue team-a (first in line)
Estimate:  none yet (a runtime ahead of it is unknown, or it is out of line)

Quotas, from the job's up:
  QUOTA    MIN     MAX                 USED    BORROWED   LENT
  team-a   cpu=4   cpu=2,memory=64Gi   cpu=0   -          cpu=1
"
    );
}

#[test]
fn why_names_the_unit_ahead_once() {
    let mut me = unit(
        "j3-f4a39a1b",
        Some(2),
        WaitType::BehindHead,
        "2026-12-05T10:04:59Z",
    );
    me.reason.resource = None;
    me.reason.short_by = None;
    me.reason.quota = None;
    me.reason.behind = Some("team-a/j2-cd76f72a".into());
    // The scheduler's sentence names it (BlockedBehind)...
    me.reason.message = "waiting behind team-a/j2-cd76f72a (Block policy)".into();
    let mut why = Why {
        job: JobOf {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "j3".into(),
        },
        unit: me.metadata.clone(),
        queue: "team-a".into(),
        quota: Some("team-a".into()),
        phase: Some("Enqueued".into()),
        message: Some(me.reason.message.clone()),
        pending: Some(me),
        ahead: Vec::new(),
        quota_path: Vec::new(),
        estimated_start: None,
        events: Vec::new(),
        notes: Vec::new(),
    };
    let text = why.human(&how());
    assert_eq!(text.matches("team-a/j2-cd76f72a").count(), 1, "{text}");
    // ...one that does not gets its own line.
    if let Some(p) = why.pending.as_mut() {
        p.reason.message = "the reserving head keeps the room".into();
    }
    let text = why.human(&how());
    assert!(
        text.contains("\n           waiting behind team-a/j2-cd76f72a\n"),
        "{text}"
    );
}
