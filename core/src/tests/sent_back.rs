//! No churn of one unit (issue 44, `reclaim/sent_back.rs`): a unit sent
//! back twice borrows again only in an idle cluster, with a reason that
//! says so, and reclaim for a guaranteed unit takes others first.

use super::{quota_core, reason_text, released, unit};
use crate::{Core, QueueDef, QuotaDef, WaitReason};

/// `g` (min 4) and `x` (min 0), both max 10, under a capacity of 10.
fn tree() -> Core {
    let mut core = quota_core(10);
    for (q, min) in [("g", 4_000), ("x", 0)] {
        core.upsert_queue(&QueueDef::new(q));
        core.upsert_quota(&QuotaDef::new(q).min("cpu", min).max("cpu", 10_000))
            .unwrap();
    }
    core
}

fn victims(out: &crate::CycleOutput) -> Vec<&str> {
    out.reclaims.iter().map(|r| &*r.victim).collect()
}

/// `g`'s guaranteed unit `name` (4) takes back `w` (the last released),
/// runs and ends; `w` returns from its backoff.
fn reclaim_w(c: &mut Core, name: &str) {
    c.upsert_unit(&unit("ns", name, "g", 4)).unwrap();
    let out = c.run_cycle();
    assert_eq!(victims(&out), ["ns/w"]);
    assert!(c.remove_unit("ns/w"));
    assert_eq!(released(&c.run_cycle()), [format!("ns/{name}")]);
    assert!(c.remove_unit(&format!("ns/{name}")));
    c.upsert_unit(&unit("ns", "w", "x", 3).created_at(1))
        .unwrap();
}

#[test]
fn a_unit_sent_back_twice_borrows_again_only_in_an_idle_cluster_and_is_spared() {
    let mut c = tree();
    c.upsert_unit(&unit("ns", "v", "x", 5).created_at(0))
        .unwrap();
    c.upsert_unit(&unit("ns", "w", "x", 3).created_at(1))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/v", "ns/w"]);
    reclaim_w(&mut c, "g1");
    assert_eq!(released(&c.run_cycle()), ["ns/w"]);
    reclaim_w(&mut c, "g2");
    // Twice sent back; v holds 5 of 10: busy, w waits although it fits.
    assert!(c.run_cycle().decisions.is_empty());
    assert!(matches!(
        c.reason("ns/w"),
        Some(WaitReason::SentBackTooOften { times: 2, .. })
    ));
    let text = reason_text(&c, "ns/w");
    assert!(
        text.starts_with("sent back 2 times already") && text.contains("cpu 5/10 used"),
        "{text}"
    );
    // v2 has not been sent back: it borrows (9 of 10).
    c.upsert_unit(&unit("ns", "v2", "x", 4).created_at(2))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/v2"]);
    // v ends: 4 of 10 held, the cluster is idle, w is released at once.
    assert!(c.remove_unit("ns/v"));
    assert_eq!(released(&c.run_cycle()), ["ns/w"]);
    // A guaranteed unit short of 1: w, the last released, is spared while
    // v2 can make room.
    c.upsert_unit(&unit("ns", "g3", "g", 4)).unwrap();
    assert_eq!(victims(&c.run_cycle()), ["ns/v2"]);
}

#[test]
fn a_third_send_back_only_when_nothing_else_frees_the_min_and_it_says_so() {
    let mut c = tree();
    c.upsert_unit(&unit("ns", "v", "x", 5).created_at(0))
        .unwrap();
    c.upsert_unit(&unit("ns", "w", "x", 3).created_at(1))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/v", "ns/w"]);
    reclaim_w(&mut c, "g1");
    assert_eq!(released(&c.run_cycle()), ["ns/w"]);
    reclaim_w(&mut c, "g2");
    assert!(c.remove_unit("ns/v"));
    assert_eq!(released(&c.run_cycle()), ["ns/w"]);
    // Only w borrows: a guaranteed unit of 10 needs it (the min is a
    // guarantee), and w's message says why it is sent back a third time.
    c.upsert_quota(&QuotaDef::new("g").min("cpu", 10_000).max("cpu", 10_000))
        .unwrap();
    c.upsert_unit(&unit("ns", "big", "g", 10)).unwrap();
    let out = c.run_cycle();
    assert_eq!(victims(&out), ["ns/w"]);
    assert_eq!(out.reclaims[0].times, 3);
    let message = out.reclaims[0].message();
    assert!(message.contains("sent back 3 times now"), "{message}");
}
