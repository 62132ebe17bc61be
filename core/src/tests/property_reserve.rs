//! Randomized check of the reserving head (architecture §4.3) against a
//! small model: one `Priority` queue with a `reserveHead` setting, one quota
//! with a cpu max under a cluster capacity, units of random sizes and
//! priorities arriving, finishing and waiting while time passes.
//!
//! After every cycle:
//! - the quota's max and the capacity hold, recomputed from the held units
//!   (a reservation never lets anything past a limit);
//! - while a unit reserves, nothing ordered behind it that needs cpu is
//!   released (the room freed is kept for it);
//! - a unit that reserved and still waits does not fit (once the running
//!   units that finished leave enough room, it is released in that cycle),
//!   or a unit ahead of it that does not fit took the reservation;
//! - only a unit whose queue's setting says so (waited `afterSeconds`, or
//!   at least `abovePriority`) reserves, and its figures are the model's.
//!
//! After a second, quiet cycle: if the first waiting unit does not fit and
//! may reserve, a unit reserves (so the properties above are not vacuous).

use std::collections::BTreeMap;

use koord_queue_model::{QueuePolicy, Reserve};
use proptest::prelude::*;

use super::quota_core;
use crate::{Core, QueueDef, QuotaDef, UnitDef, WaitReason};

#[derive(Clone, Debug)]
enum Event {
    Submit {
        cores: i64,
        prio: i32,
    },
    Finish(usize),
    /// Time passes, in seconds.
    Advance(i64),
    Cycle,
}

fn event(max_cores: i64) -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (1..=max_cores, 0..3i32).prop_map(|(cores, prio)| Event::Submit { cores, prio }),
        3 => any::<usize>().prop_map(Event::Finish),
        2 => (1..40i64).prop_map(Event::Advance),
        5 => Just(Event::Cycle),
    ]
}

#[derive(Clone, Debug)]
struct Unit {
    cpu: i64,
    prio: i32,
    created: i64,
}

#[derive(Debug)]
struct Model {
    /// The tighter of the quota's max and the capacity, in millicores.
    limit: i64,
    reserve: Reserve,
    now: i64,
    next: usize,
    waiting: BTreeMap<String, Unit>,
    held: BTreeMap<String, Unit>,
}

impl Model {
    fn used(&self) -> i64 {
        self.held.values().map(|u| u.cpu).sum()
    }

    fn fits(&self, u: &Unit) -> bool {
        self.used() + u.cpu <= self.limit
    }

    /// Serving order of the `Priority` policy: priority, then age, then key.
    fn order(key: &str, u: &Unit) -> (i32, i64, String) {
        (-u.prio, u.created, key.to_string())
    }

    /// The waiting unit whose reason says it reserves, if any.
    fn reserving(&self, core: &Core) -> Option<String> {
        self.waiting
            .keys()
            .find(|k| matches!(core.reason(k), Some(WaitReason::Reserving { .. })))
            .cloned()
    }

    fn may_reserve(&self, u: &Unit) -> bool {
        self.reserve
            .from_ms(u.created, u.prio)
            .is_some_and(|from| self.now >= from)
    }

    fn apply(&mut self, core: &mut Core, e: &Event) -> Result<(), TestCaseError> {
        match e {
            Event::Submit { cores, prio } => {
                self.next += 1;
                let name = format!("u{:03}", self.next);
                let unit = Unit {
                    cpu: cores * 1000,
                    prio: *prio,
                    created: self.now,
                };
                core.upsert_unit(
                    &UnitDef::new("ns", &name)
                        .with_quota("q")
                        .with_priority(unit.prio)
                        .created_at(unit.created)
                        .requesting("cpu", unit.cpu),
                )
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
                self.waiting.insert(format!("ns/{name}"), unit);
            }
            Event::Finish(i) => {
                if !self.held.is_empty() {
                    let key = self.held.keys().nth(i % self.held.len()).cloned();
                    if let Some(key) = key {
                        prop_assert!(core.remove_unit(&key));
                        self.held.remove(&key);
                    }
                }
            }
            Event::Advance(s) => {
                self.now += s * 1000;
                core.set_now(self.now);
            }
            Event::Cycle => {
                self.cycle(core)?;
                self.cycle(core)?;
                self.assert_head_reserves(core)?;
            }
        }
        Ok(())
    }

    fn cycle(&mut self, core: &mut Core) -> Result<(), TestCaseError> {
        let head = self.reserving(core);
        let out = core.run_cycle();
        let mut released = Vec::new();
        for d in &out.decisions {
            let key = d.unit.to_string();
            let unit = self.waiting.remove(&key);
            prop_assert!(unit.is_some(), "released {key}, which was not waiting");
            if let Some(unit) = unit {
                released.push((key.clone(), unit.clone()));
                self.held.insert(key, unit);
            }
        }
        prop_assert!(
            self.used() <= self.limit,
            "{} m held over the limit of {} m",
            self.used(),
            self.limit
        );
        let Some(head) = head else {
            return Ok(());
        };
        let Some(h) = self.waiting.get(&head) else {
            // Released: its room had freed.
            return Ok(());
        };
        let at = Self::order(&head, h);
        for (k, u) in &released {
            prop_assert!(
                Self::order(k, u) < at,
                "{k} ({u:?}) was released behind {head} ({h:?}), which reserves"
            );
        }
        // It still reserves and does not fit, or a unit ahead of it that
        // does not fit either reserves now (the first that does not fit
        // does, once its queue's setting says so).
        let now = self.reserving(core);
        match now.as_ref().and_then(|k| Some((k, self.waiting.get(k)?))) {
            Some((k, _)) if *k == head => {}
            Some((k, u)) => prop_assert!(
                Self::order(k, u) < at && !self.fits(u),
                "{k} ({u:?}) took the reservation of {head} ({h:?})"
            ),
            None => prop_assert!(false, "{head} waits but no unit reserves"),
        }
        prop_assert!(
            !self.fits(h) || now.as_ref() != Some(&head),
            "{head} reserves and fits ({} + {} <= {} m) but still waits: {}",
            self.used(),
            h.cpu,
            self.limit,
            super::reason_text(core, &head)
        );
        Ok(())
    }

    /// After a quiet cycle: a unit that reserves was allowed to, with the
    /// model's figures; the first waiting unit reserves if it may.
    fn assert_head_reserves(&self, core: &Core) -> Result<(), TestCaseError> {
        if let Some(key) = self.reserving(core) {
            let u = &self.waiting[&key];
            prop_assert!(self.may_reserve(u), "{key} reserves too early: {u:?}");
            if let Some(s) = core.reason(&key).and_then(WaitReason::shortfall) {
                // (the other figures are those of its last evaluation,
                // which a freed room too small for it does not repeat).
                prop_assert_eq!(s.requested, u.cpu);
                prop_assert!(s.missing() > 0, "{key}: {s:?}");
            }
        }
        let first = self.waiting.iter().min_by_key(|(k, u)| Self::order(k, u));
        if let Some((key, u)) = first
            && !self.fits(u)
            && self.may_reserve(u)
        {
            // It, or a unit behind it that held the reservation before it
            // came (and reserves by now), reserves.
            prop_assert!(
                self.reserving(core).is_some(),
                "{key} is first, does not fit and may reserve, but: {}",
                super::reason_text(core, key)
            );
        }
        Ok(())
    }
}

fn reserve() -> impl Strategy<Value = Reserve> {
    use proptest::option::of;
    (of(0..60i64), of(0..3i32)).prop_map(|(after, above)| Reserve {
        after_ms: after.map(|s| s * 1000),
        above_priority: above,
    })
}

fn run(max: i64, cap: i64, reserve: Reserve, events: &[Event]) -> Result<(), TestCaseError> {
    let mut core = quota_core(cap);
    core.upsert_queue(
        &QueueDef::new("q")
            .with_policy(QueuePolicy::Priority)
            .with_reserve(reserve),
    );
    core.upsert_quota(&QuotaDef::new("q").max("cpu", max * 1000))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut model = Model {
        limit: max.min(cap) * 1000,
        reserve,
        now: 1_000_000,
        next: 0,
        waiting: BTreeMap::new(),
        held: BTreeMap::new(),
    };
    core.set_now(model.now);
    for e in events {
        model.apply(&mut core, e)?;
    }
    // Drain: finishing the running units lets every waiting one through
    // (each asks for no more than the limit).
    for _ in 0..=events.len() {
        let keys: Vec<String> = model.held.keys().cloned().collect();
        for k in keys {
            prop_assert!(core.remove_unit(&k));
            model.held.remove(&k);
        }
        model.cycle(&mut core)?;
        if model.waiting.is_empty() {
            break;
        }
    }
    prop_assert!(
        model.waiting.is_empty(),
        "never released: {:?}",
        model.waiting
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_reserved_head_is_released_once_its_room_frees_and_keeps_every_limit(
        (max, cap, reserve, events) in (2..12i64, 2..16i64, reserve()).prop_flat_map(|(max, cap, r)| {
            let biggest = max.min(cap);
            (Just(max), Just(cap), Just(r), proptest::collection::vec(event(biggest), 1..80))
        })
    ) {
        run(max, cap, reserve, &events)?;
    }
}
