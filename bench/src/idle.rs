//! Capacity left idle while work waits (issue 44): the time in which a job
//! class had a job waiting while the root ran under half its capacity.
//!
//! A job waits from its create (or from being sent back) to its release. A
//! release takes a moment even when the room is free, so only the part of a
//! wait beyond [`GRACE_S`] counts: what is left is a job that could have run
//! and did not. The root's use is given as a timeline: what running jobs
//! take (released, not finished, not sent back; the job runtime's account)
//! or what QueueUnits hold (the checker's) — `output/mod.rs` reports both.
//!
//! Two measures. The issue's: any wait while the root runs under half.
//! And the part of it in which the job's own quotas had its room (its leaf
//! and its parent each under their max by at least its request): a wait
//! while its parent is at its max is what the administrator configured —
//! at a run's end the last backlog may sit under one parent while the
//! others are done, and no scheduler may give it their room — so only the
//! second is capacity a scheduler left idle. The room is judged by what
//! QueueUnits hold where that account exists, whichever use measures the
//! root: quota held by a job released and not yet running is room the
//! scheduler gave out, not room it kept back.

use std::collections::HashMap;

use serde::Serialize;

use super::quota::{Limits, Usage};
use super::runner::JobTimeline;
use super::shape::Shape;

/// The part of every wait that does not count: a release's round trip.
pub const GRACE_S: f64 = 1.0;

/// Idle capacity while one class (or any) waited.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IdleWhileWaiting {
    /// Seconds in all (a measure: parts of seconds add up).
    pub seconds: f64,
    /// Whole seconds of the run (`[k, k+1)`) that hold any of it: the
    /// issue's "no second in which a class waits while the root runs under
    /// half its capacity" asks for 0.
    pub whole_seconds: usize,
    /// Where it lies: its first [`SPANS_KEPT`] spans, `(from, to)` seconds.
    pub first_spans: Vec<(f64, f64)>,
}

/// One measure for each class (`(class name, idle)`, in the shape's order)
/// and for any.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IdleByClass {
    pub per_class: Vec<(&'static str, IdleWhileWaiting)>,
    pub any: IdleWhileWaiting,
}

/// Both measures of one run (see the module's comment).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IdleReport {
    /// A job waited while the root ran under half.
    pub root_under_half: IdleByClass,
    /// …and its own quotas had room for it.
    pub with_room_in_its_quotas: IdleByClass,
}

/// Spans of idle time kept in a result, to find them in the run.
pub const SPANS_KEPT: usize = 10;

/// Half-open intervals `[start, end)`, seconds.
type Spans = Vec<(f64, f64)>;

/// The idle capacity while jobs waited, up to `end`, the run's end: the
/// root's use by `usage`, the room in a job's quotas by `room` (each the
/// CPU in use after every change, millicores, at the root and in each
/// quota).
pub fn idle_while_waiting(
    shape: &Shape,
    jobs: &[JobTimeline],
    usage: &Usage,
    room: &Usage,
    end: f64,
) -> IdleReport {
    let half = i64::from(shape.root_cpu) * 1000 / 2;
    let low = under(&usage.root_timeline, half, end);
    let limits = Limits::of(shape);
    // Where a request of `cpu` fits in leaf `l` and its parent: one
    // computation per (leaf, size), not per job.
    let mut fits_in: HashMap<(usize, u32), Spans> = HashMap::new();
    // Per class: every wait, and the part of each with room for the job.
    let mut waits: Vec<(Spans, Spans)> = vec![Default::default(); shape.classes.len()];
    for (job, plan) in jobs.iter().zip(&shape.jobs) {
        let own = union(long_waits(job, end));
        if own.is_empty() {
            continue;
        }
        let fits = fits_in
            .entry((plan.leaf, plan.cpu))
            .or_insert_with(|| room_in_quotas(shape, room, &limits, plan.leaf, plan.cpu, end));
        let Some((all, with_room)) = waits.get_mut(plan.class) else {
            continue;
        };
        with_room.extend(intersect(&own, fits));
        all.extend(own);
    }
    let by_class = |pick: fn(&(Spans, Spans)) -> &Spans| {
        let mut any = Spans::new();
        let per_class = shape
            .classes
            .iter()
            .zip(&waits)
            .map(|(class, w)| {
                let w = union(pick(w).clone());
                any.extend(&w);
                (class.name, measure(&intersect(&w, &low)))
            })
            .collect();
        IdleByClass {
            per_class,
            any: measure(&intersect(&union(any), &low)),
        }
    };
    IdleReport {
        root_under_half: by_class(|w| &w.0),
        with_room_in_its_quotas: by_class(|w| &w.1),
    }
}

/// Where a job of `cpu` CPU would have fitted in leaf `leaf` and in its
/// parent: both under their max by at least the request.
fn room_in_quotas(
    shape: &Shape,
    usage: &Usage,
    limits: &Limits,
    leaf: usize,
    cpu: u32,
    end: f64,
) -> Spans {
    let need = i64::from(cpu) * 1000;
    let fits = |timeline: Option<&Vec<(f64, i64)>>, max: i64| {
        under(timeline.map_or(&[][..], Vec::as_slice), max - need + 1, end)
    };
    let in_leaf = fits(usage.leaf_timelines.get(leaf), limits.leaf);
    let parent = shape.leaves.get(leaf).map(|l| l.parent);
    match parent.and_then(|p| limits.parents.get(p).map(|max| (p, *max))) {
        Some((p, max)) => intersect(&in_leaf, &fits(usage.parent_timelines.get(p), max)),
        None => in_leaf,
    }
}

/// The waits of one job beyond the grace: create → first release, each
/// send-back → the next release (or its finish, or `end`).
fn long_waits(job: &JobTimeline, end: f64) -> Spans {
    let Some(created) = job.created else {
        return Spans::new();
    };
    let starts = std::iter::once(created).chain(job.suspensions.iter().copied());
    starts
        .enumerate()
        .map(|(k, from)| {
            let to = job.releases.get(k).copied().or(job.finished).unwrap_or(end);
            (from + GRACE_S, to.min(end))
        })
        .filter(|(a, b)| b > a)
        .collect()
}

/// Where the level given by `timeline` (a step function from 0 at time 0)
/// is under `limit`, up to `end`.
fn under(timeline: &[(f64, i64)], limit: i64, end: f64) -> Spans {
    let mut out = Spans::new();
    let (mut since, mut level) = (0.0, 0);
    for &(t, value) in timeline.iter().chain(std::iter::once(&(end, 0))) {
        let t = t.min(end);
        if level < limit && t > since {
            out.push((since, t));
        }
        (since, level) = (t.max(since), value);
    }
    union(out)
}

/// The spans merged: sorted, without overlaps.
fn union(mut spans: Spans) -> Spans {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Spans = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Where two merged span lists overlap.
fn intersect(x: &Spans, y: &Spans) -> Spans {
    let (mut i, mut j, mut out) = (0, 0, Spans::new());
    while i < x.len() && j < y.len() {
        let (a, b) = (x[i].0.max(y[j].0), x[i].1.min(y[j].1));
        if b > a {
            out.push((a, b));
        }
        if x[i].1 < y[j].1 { i += 1 } else { j += 1 }
    }
    out
}

/// Their length and the whole seconds they touch.
fn measure(spans: &Spans) -> IdleWhileWaiting {
    let mut touched = std::collections::BTreeSet::new();
    for &(a, b) in spans {
        let (first, last) = (a.floor() as i64, b.ceil() as i64 - 1);
        touched.extend(first..=last.max(first));
    }
    IdleWhileWaiting {
        // `+ 0.0`: an empty sum is -0.0, which a report would print.
        seconds: spans.iter().map(|(a, b)| b - a).sum::<f64>() + 0.0,
        whole_seconds: touched.len(),
        first_spans: spans.iter().take(SPANS_KEPT).copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Six leaves in two parents (60 CPU each, root 120), cut to three
    /// jobs of leaf 0 (parent 0): small, medium, large (1, 5, 20 CPU).
    fn shape() -> Shape {
        let mut shape = Shape::new("t", 60, 6, 2, crate::shape::CLASSES).unwrap();
        let firsts: Vec<_> = (0..3)
            .map(|c| {
                let mut job = shape.jobs.iter().find(|j| j.class == c).unwrap().clone();
                job.leaf = 0;
                job
            })
            .collect();
        shape.jobs = firsts;
        assert_eq!((shape.root_cpu, shape.leaves[0].parent), (120, 0));
        shape
    }

    /// A leaf of the other parent than the jobs'.
    fn elsewhere(shape: &Shape) -> usize {
        shape.leaves.iter().position(|l| l.parent != 0).unwrap()
    }

    fn figures(i: &IdleWhileWaiting) -> (f64, usize) {
        (i.seconds, i.whole_seconds)
    }

    fn class(by: &IdleByClass, name: &str) -> IdleWhileWaiting {
        by.per_class
            .iter()
            .find(|(c, _)| *c == name)
            .unwrap()
            .1
            .clone()
    }

    #[test]
    fn a_wait_counts_only_while_the_root_is_under_half_and_past_the_grace() {
        let shape = shape();
        // The root is busy (at half) from 2 s to 10 s, idle before and
        // after; what runs is under the other parent.
        let mut usage = Usage::new(&shape, None);
        usage.change(elsewhere(&shape), 60_000, 2.0, "x");
        usage.change(elsewhere(&shape), -60_000, 10.0, "x");
        let jobs = [
            // small: waits 0 → 0.5 s, within the grace.
            JobTimeline::seen(0.0, &[0.5], &[], Some(1.0)),
            // medium: waits 0 → 12 s: 1–2 s and 10–12 s count.
            JobTimeline::seen(0.0, &[12.0], &[], Some(13.0)),
            // large: released at 3, sent back at 11, released again at 11.5:
            // 1–2 s counts; the second wait is within the grace.
            JobTimeline::seen(0.0, &[3.0, 11.5], &[11.0], Some(14.0)),
        ];
        let report = idle_while_waiting(&shape, &jobs, &usage, &usage, 20.0);
        let by = &report.root_under_half;
        assert_eq!(class(by, "small"), IdleWhileWaiting::default());
        assert_eq!(class(by, "medium").first_spans, [(1.0, 2.0), (10.0, 12.0)]);
        assert_eq!(figures(&class(by, "medium")), (3.0, 3));
        assert_eq!(class(by, "large").first_spans, [(1.0, 2.0)]);
        assert_eq!(figures(&class(by, "large")), (1.0, 1));
        assert_eq!(figures(&by.any), (3.0, 3));
        // Their own quotas were empty all along: every such second counts.
        assert_eq!(report.with_room_in_its_quotas, report.root_under_half);
    }

    #[test]
    fn a_busy_root_leaves_nothing_idle_and_an_unreleased_job_waits_to_the_end() {
        let shape = shape();
        let jobs = [
            JobTimeline::seen(0.0, &[], &[], None),
            JobTimeline::seen(0.0, &[], &[], None),
            JobTimeline::seen(0.0, &[], &[], None),
        ];
        let mut busy = Usage::new(&shape, None);
        busy.change(elsewhere(&shape), 60_000, 0.0, "x");
        let report = idle_while_waiting(&shape, &jobs, &busy, &busy, 10.0);
        assert_eq!(report.root_under_half.any, IdleWhileWaiting::default());
        let mut idle = Usage::new(&shape, None);
        idle.change(elsewhere(&shape), 59_999, 0.0, "x");
        let report = idle_while_waiting(&shape, &jobs, &idle, &idle, 10.0);
        assert_eq!(figures(&report.root_under_half.any), (9.0, 9));
        assert_eq!(report.root_under_half.any.first_spans, [(1.0, 10.0)]);
    }

    #[test]
    fn a_wait_while_its_parent_is_at_its_max_is_the_configuration_not_idle_room() {
        let shape = shape();
        // The jobs' parent (60 CPU) holds 56 from 0 to 10 s by a sibling
        // leaf: room for the small job (1) all along, for the medium (5)
        // from 4 s, when it drops to 55, for the large (20) from 10 s; the
        // root (120) is under half all along.
        let sibling = shape
            .leaves
            .iter()
            .position(|l| l.parent == 0 && l.name != shape.leaves[0].name)
            .unwrap();
        let mut usage = Usage::new(&shape, None);
        usage.change(sibling, 56_000, 0.0, "x");
        usage.change(sibling, -1_000, 4.0, "x");
        usage.change(sibling, -55_000, 10.0, "x");
        let jobs = [
            JobTimeline::seen(0.0, &[6.0], &[], Some(7.0)),
            JobTimeline::seen(0.0, &[6.0], &[], Some(7.0)),
            JobTimeline::seen(0.0, &[12.0], &[], Some(13.0)),
        ];
        let report = idle_while_waiting(&shape, &jobs, &usage, &usage, 20.0);
        assert_eq!(figures(&report.root_under_half.any), (11.0, 11));
        let room = &report.with_room_in_its_quotas;
        assert_eq!(class(room, "small").first_spans, [(1.0, 6.0)]);
        assert_eq!(class(room, "medium").first_spans, [(4.0, 6.0)]);
        assert_eq!(class(room, "large").first_spans, [(10.0, 12.0)]);
        assert_eq!(room.any.first_spans, [(1.0, 6.0), (10.0, 12.0)]);
        assert_eq!(figures(&room.any), (7.0, 7));
        // The room is judged by the account given for it: the sibling's
        // quota held by jobs not running yet still leaves no room …
        let nothing_runs = Usage::new(&shape, None);
        let by_running = idle_while_waiting(&shape, &jobs, &nothing_runs, &usage, 20.0);
        assert_eq!(
            by_running.with_room_in_its_quotas,
            report.with_room_in_its_quotas
        );
        // … and by an empty account every wait had room.
        let as_if_empty = idle_while_waiting(&shape, &jobs, &usage, &nothing_runs, 20.0);
        assert_eq!(
            as_if_empty.with_room_in_its_quotas,
            as_if_empty.root_under_half
        );
    }

    #[test]
    fn spans_merge_and_intersect() {
        assert_eq!(
            union(vec![(3.0, 4.0), (0.0, 1.0), (0.5, 2.0)]),
            [(0.0, 2.0), (3.0, 4.0)]
        );
        assert_eq!(
            intersect(&vec![(0.0, 2.0), (3.0, 4.0)], &vec![(1.5, 3.5)]),
            [(1.5, 2.0), (3.0, 3.5)]
        );
        assert_eq!(measure(&vec![(0.5, 1.5)]).whole_seconds, 2);
    }
}
