//! What each phase is, as data: which queue system holds and releases the
//! jobs, the quota tree it gets, how the jobs arrive and run. The run path
//! (`phase::run`, and the chaos run for what it shares) reads these fields
//! instead of asking which phase it is, so a new phase is a new entry here.

use super::PhaseKind;

/// Which queue system holds and releases the jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueSystem {
    /// None: a null scheduler does the same API work (the floor).
    Null,
    /// Koord-Queue's webhook and scheduler (where `--components` says).
    KoordQueue,
    /// Kueue's manager, as a process (the comparison).
    Kueue,
}

/// The quota tree of Kueue's shape the phase runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quotas {
    /// No quota (the floor: nothing decides).
    None,
    /// The tree with limits that never bind: the scheduler's throughput.
    NeverBinding,
    /// The tree with its real limits (ElasticQuotas, or Kueue's
    /// ClusterQueues): what runs and what is held is checked against them.
    Binding,
}

/// How the jobs arrive and run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    /// Kueue's pacing per queue and class, each job running its class's
    /// runtime.
    Paced,
    /// As fast as the API allows (`--create-concurrency` in flight), each
    /// job completed at once.
    Saturated,
    /// The null scheduler's run: the jobs created suspended and put
    /// through the writes the scheduler would make (the floor).
    NullScheduler,
}

/// A phase, as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseSpec {
    /// Which queue system holds and releases the jobs.
    pub system: QueueSystem,
    /// The quota tree.
    pub quotas: Quotas,
    /// How the jobs arrive and run.
    pub arrivals: Arrivals,
}

impl PhaseSpec {
    /// Kueue's baseline queued by Koord-Queue (also the chaos run's).
    pub const RUN: Self = Self {
        system: QueueSystem::KoordQueue,
        quotas: Quotas::Binding,
        arrivals: Arrivals::Paced,
    };
    /// The scheduler's throughput.
    pub const SATURATED: Self = Self {
        system: QueueSystem::KoordQueue,
        quotas: Quotas::NeverBinding,
        arrivals: Arrivals::Saturated,
    };
    /// What the API server allows.
    pub const FLOOR: Self = Self {
        system: QueueSystem::Null,
        quotas: Quotas::None,
        arrivals: Arrivals::NullScheduler,
    };
    /// Kueue's baseline queued by Kueue.
    pub const KUEUE: Self = Self {
        system: QueueSystem::Kueue,
        quotas: Quotas::Binding,
        arrivals: Arrivals::Paced,
    };

    /// Whether Koord-Queue's CRDs and system namespace are needed: by its
    /// own components, and by the null scheduler, which writes QueueUnits.
    pub fn koord_queue_api(&self) -> bool {
        self.system != QueueSystem::Kueue
    }

    /// Whether the quota tree is created as ElasticQuotas (Kueue creates
    /// its own ClusterQueues once it serves).
    pub fn elastic_quotas(&self) -> bool {
        self.system == QueueSystem::KoordQueue && self.quotas != Quotas::None
    }

    /// Whether the leaf namespaces opt in to Koord-Queue's webhook.
    pub fn namespaces_opted_in(&self) -> bool {
        self.system == QueueSystem::KoordQueue
    }

    /// Whether what runs and what is held is checked against the maxima.
    pub fn limits_bind(&self) -> bool {
        self.quotas == Quotas::Binding
    }

    /// Whether released jobs run their class's runtime (else they complete
    /// at once).
    pub fn class_runtimes(&self) -> bool {
        self.arrivals == Arrivals::Paced
    }

    /// Whether the phase ends only once the queue system has seen every
    /// job succeed (its quota freed), not only when the jobs finished.
    pub fn waits_for_the_queue_system(&self) -> bool {
        self.system != QueueSystem::Null
    }
}

impl PhaseKind {
    /// What this phase is.
    pub fn spec(self) -> PhaseSpec {
        match self {
            Self::Run => PhaseSpec::RUN,
            Self::Saturated => PhaseSpec::SATURATED,
            Self::Floor => PhaseSpec::FLOOR,
            Self::Kueue => PhaseSpec::KUEUE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PhaseKind, PhaseSpec, QueueSystem};

    #[test]
    fn each_phase_reads_as_before() {
        let row = |k: PhaseKind| {
            let s = k.spec();
            (
                s.koord_queue_api(),
                s.elastic_quotas(),
                s.namespaces_opted_in(),
                s.limits_bind(),
                s.class_runtimes(),
                s.waits_for_the_queue_system(),
            )
        };
        // What phase.rs decided by kind before the phases were data.
        assert_eq!(row(PhaseKind::Run), (true, true, true, true, true, true));
        assert_eq!(
            row(PhaseKind::Saturated),
            (true, true, true, false, false, true)
        );
        assert_eq!(
            row(PhaseKind::Floor),
            (true, false, false, false, false, false)
        );
        assert_eq!(
            row(PhaseKind::Kueue),
            (false, false, false, true, true, true)
        );
        assert_eq!(PhaseSpec::RUN.system, QueueSystem::KoordQueue);
    }
}
