//! Capacity left idle while work waits (issue 44): the time in which a job
//! class had a job waiting while the root ran under half its capacity.
//!
//! A job waits from its create (or from being sent back) to its release. A
//! release takes a moment even when the room is free, so only the part of a
//! wait beyond [`GRACE_S`] counts: what is left is a job that could have run
//! and did not. The root's use is given as a timeline: what running jobs
//! take (released, not finished, not sent back; the job runtime's account)
//! or what QueueUnits hold (the checker's) — `output.rs` reports both.

use serde::Serialize;

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

/// Spans of idle time kept in a result, to find them in the run.
pub const SPANS_KEPT: usize = 10;

/// Half-open intervals `[start, end)`, seconds.
type Spans = Vec<(f64, f64)>;

/// The idle capacity while each class waited (`(class name, idle)`, in the
/// shape's order) and while any did. `root_timeline` is the root's CPU in
/// use after every change (millicores), `end` the run's end.
pub fn idle_while_waiting(
    shape: &Shape,
    jobs: &[JobTimeline],
    root_timeline: &[(f64, i64)],
    end: f64,
) -> (Vec<(&'static str, IdleWhileWaiting)>, IdleWhileWaiting) {
    let half = i64::from(shape.root_cpu) * 1000 / 2;
    let low = under(root_timeline, half, end);
    let mut all = Spans::new();
    let per_class = shape
        .classes
        .iter()
        .enumerate()
        .map(|(c, class)| {
            let waits: Spans = jobs
                .iter()
                .enumerate()
                .filter(|(i, _)| shape.jobs.get(*i).is_some_and(|p| p.class == c))
                .flat_map(|(_, j)| long_waits(j, end))
                .collect();
            all.extend(&waits);
            (class.name, measure(&intersect(&union(waits), &low)))
        })
        .collect();
    (per_class, measure(&intersect(&union(all), &low)))
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

    /// The baseline shape cut to three jobs of classes small, medium, large.
    fn shape() -> Shape {
        let mut shape = crate::shape::named("baseline", "1k", None, None, None).unwrap();
        let firsts: Vec<_> = (0..3)
            .map(|c| shape.jobs.iter().find(|j| j.class == c).unwrap().clone())
            .collect();
        shape.jobs = firsts;
        shape
    }

    fn figures(i: &IdleWhileWaiting) -> (f64, usize) {
        (i.seconds, i.whole_seconds)
    }

    #[test]
    fn a_wait_counts_only_while_the_root_is_under_half_and_past_the_grace() {
        let shape = shape();
        let half = i64::from(shape.root_cpu) * 500;
        // The root is busy (at half) from 2 s to 10 s, idle before and after.
        let root = [(2.0, half), (10.0, 0)];
        let jobs = [
            // small: waits 0 → 0.5 s, within the grace.
            JobTimeline::seen(0.0, &[0.5], &[], Some(1.0)),
            // medium: waits 0 → 12 s: 1–2 s and 10–12 s count.
            JobTimeline::seen(0.0, &[12.0], &[], Some(13.0)),
            // large: released at 3, sent back at 11, released again at 11.5:
            // 1–2 s counts; the second wait is within the grace.
            JobTimeline::seen(0.0, &[3.0, 11.5], &[11.0], Some(14.0)),
        ];
        let (per_class, any) = idle_while_waiting(&shape, &jobs, &root, 20.0);
        let by_name = |n: &str| per_class.iter().find(|(c, _)| *c == n).unwrap().1.clone();
        assert_eq!(by_name("small"), IdleWhileWaiting::default());
        assert_eq!(by_name("medium").first_spans, [(1.0, 2.0), (10.0, 12.0)]);
        assert_eq!(figures(&by_name("medium")), (3.0, 3));
        assert_eq!(by_name("large").first_spans, [(1.0, 2.0)]);
        assert_eq!(figures(&by_name("large")), (1.0, 1));
        assert_eq!(figures(&any), (3.0, 3));
    }

    #[test]
    fn a_busy_root_leaves_nothing_idle_and_an_unreleased_job_waits_to_the_end() {
        let shape = shape();
        let half = i64::from(shape.root_cpu) * 500;
        let jobs = [
            JobTimeline::seen(0.0, &[], &[], None),
            JobTimeline::seen(0.0, &[], &[], None),
            JobTimeline::seen(0.0, &[], &[], None),
        ];
        let (_, busy) = idle_while_waiting(&shape, &jobs, &[(0.0, half)], 10.0);
        assert_eq!(busy, IdleWhileWaiting::default());
        let (_, idle) = idle_while_waiting(&shape, &jobs, &[(0.0, half - 1)], 10.0);
        assert_eq!(figures(&idle), (9.0, 9));
        assert_eq!(idle.first_spans, [(1.0, 10.0)]);
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
