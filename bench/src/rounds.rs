//! Rounds of the saturated run and the floor. On two cores shared by the
//! API server, etcd and the benchmark, one floor measurement varies by
//! about ±8 % from run to run (docs/performance.md), more than the margin
//! the floor ratio is judged by. So the pair is measured several times,
//! alternating (each round's floor right after its saturated run, under the
//! same machine conditions), and the round with the median ratio is the
//! one reported.

use serde::Serialize;

use super::phase::PhaseKind;

/// The phases to run: `phases` once, then `rounds - 1` more times only its
/// saturated run and floor, in the same order.
pub fn schedule(phases: &[PhaseKind], rounds: usize) -> Vec<PhaseKind> {
    let mut order = phases.to_vec();
    for _ in 1..rounds {
        order.extend(
            phases
                .iter()
                .filter(|k| matches!(k, PhaseKind::Saturated | PhaseKind::Floor)),
        );
    }
    order
}

/// One round's throughputs (jobs/s) and their ratio.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Round {
    /// The saturated run's throughput, when it ran.
    pub saturated_jobs_per_s: Option<f64>,
    /// The floor's throughput, when it ran.
    pub floor_jobs_per_s: Option<f64>,
    /// Saturated over floor, when both ran.
    pub floor_ratio: Option<f64>,
}

/// The rounds in order: the i-th saturated run with the i-th floor, from
/// the phases' kinds and throughputs in the order they ran.
pub fn rounds(ran: &[(PhaseKind, f64)]) -> Vec<Round> {
    let of = |kind: PhaseKind| -> Vec<f64> {
        ran.iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, t)| *t)
            .collect()
    };
    let (saturated, floor) = (of(PhaseKind::Saturated), of(PhaseKind::Floor));
    (0..saturated.len().max(floor.len()))
        .map(|i| {
            let (s, f) = (saturated.get(i).copied(), floor.get(i).copied());
            Round {
                saturated_jobs_per_s: s,
                floor_jobs_per_s: f,
                floor_ratio: match (s, f) {
                    (Some(s), Some(f)) if f > 0.0 => Some(s / f),
                    _ => None,
                },
            }
        })
        .collect()
}

/// The index of the round to report: the median by ratio (the lower middle
/// one of an even count), or by whichever throughput was measured.
pub fn median(rounds: &[Round]) -> Option<usize> {
    let key = |r: &Round| {
        r.floor_ratio
            .or(r.saturated_jobs_per_s)
            .or(r.floor_jobs_per_s)
            .unwrap_or(0.0)
    };
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    order.sort_by(|a, b| key(&rounds[*a]).total_cmp(&key(&rounds[*b])));
    order.get(rounds.len().saturating_sub(1) / 2).copied()
}

/// What is reported of the phases that ran (`kind` of each): the phases
/// that are not repeated, and the saturated run and floor of `round`.
pub fn reported<T>(ran: Vec<T>, kind: impl Fn(&T) -> PhaseKind, round: Option<usize>) -> Vec<T> {
    let mut seen = [0usize; 2];
    ran.into_iter()
        .filter(|r| {
            let slot = match kind(r) {
                PhaseKind::Saturated => 0,
                PhaseKind::Floor => 1,
                _ => return true,
            };
            seen[slot] += 1;
            Some(seen[slot] - 1) == round
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use PhaseKind::{Floor, Run, Saturated};

    #[test]
    fn later_rounds_repeat_only_the_saturated_run_and_the_floor() {
        assert_eq!(
            schedule(&[Run, Saturated, Floor], 3),
            [Run, Saturated, Floor, Saturated, Floor, Saturated, Floor]
        );
        assert_eq!(
            schedule(&[Run, Saturated, Floor], 1),
            [Run, Saturated, Floor]
        );
        assert_eq!(schedule(&[Run], 3), [Run]);
        assert_eq!(
            schedule(&[Floor, Saturated], 2),
            [Floor, Saturated, Floor, Saturated]
        );
    }

    #[test]
    fn the_reported_round_has_the_median_ratio() {
        let ran = [
            (Run, 60.0),
            (Saturated, 66.0),
            (Floor, 72.0),
            (Saturated, 64.0),
            (Floor, 80.0),
            (Saturated, 65.0),
            (Floor, 70.0),
        ];
        let r = rounds(&ran);
        assert_eq!(r.len(), 3);
        assert_eq!(r[1].saturated_jobs_per_s, Some(64.0));
        assert_eq!(r[1].floor_jobs_per_s, Some(80.0));
        assert_eq!(r[1].floor_ratio, Some(0.8));
        // Ratios 0.917, 0.8, 0.929: the median is round 0, although neither
        // its saturated run nor its floor is a median throughput.
        assert_eq!(median(&r), Some(0));
        // An even count reports the lower middle one.
        assert_eq!(median(&r[..2]), Some(1));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn the_reported_phases_are_the_run_and_one_round() {
        let ran = [Run, Saturated, Floor, Saturated, Floor, Saturated, Floor];
        let indexed: Vec<(usize, PhaseKind)> = ran.into_iter().enumerate().collect();
        let picked: Vec<usize> = reported(indexed.clone(), |r| r.1, Some(1))
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(picked, [0, 3, 4]);
        let picked: Vec<usize> = reported(indexed, |r| r.1, None)
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(picked, [0]);
    }

    #[test]
    fn without_a_floor_the_median_is_by_throughput() {
        let r = rounds(&[(Saturated, 60.0), (Saturated, 50.0), (Saturated, 70.0)]);
        assert!(r.iter().all(|r| r.floor_ratio.is_none()));
        assert_eq!(median(&r), Some(0));
    }
}
