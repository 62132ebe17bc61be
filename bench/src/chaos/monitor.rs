//! Reading the replicas' `/metrics` from outside while the chaos run goes
//! on: each replica's counters per incarnation (a killed process loses its
//! own, so the last figures read before it died are kept), who leads when,
//! and the leader's view of the quota at the end.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Mutex as AsyncMutex;

use super::fleet::Fleet;
use crate::admin_scrape::{
    Metrics, POLICY_CHECKS, add_by_label, apiserver_metrics, leads, metric_by_label, metric_sum,
    scrape,
};

/// The scheduler's figures the run reports (counters but `leader`,
/// `quota_used`).
pub const SCHEDULER_COUNTERS: [&str; 2] = [
    "koord_queue_scheduler_watch_relists_total",
    "koord_queue_scheduler_relist_dropped_records_total",
];

/// Counters by label the run reports: (metric, label).
pub const LABELLED_COUNTERS: [(&str, &str); 5] = [
    ("koord_queue_scheduler_watch_relists_total", "source"),
    ("koord_queue_scheduler_api_write_errors_total", "operation"),
    ("koord_queue_scheduler_admission_attempts_total", "result"),
    ("koord_queue_webhook_reviews_total", "verdict"),
    (
        "koord_queue_webhook_queue_unit_create_errors_total",
        "reason",
    ),
];

/// A change of who leads, as the replicas' gauges said.
#[derive(Clone, Debug, Serialize)]
pub struct LeaderChange {
    /// Seconds since the start of the run.
    pub at_s: f64,
    /// The replicas whose `leader` gauge read 1 (none: nobody led).
    pub leaders: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    /// (member, incarnation) → its figures last read.
    figures: BTreeMap<(String, u32), BTreeMap<String, f64>>,
    leadership: Vec<LeaderChange>,
    samples: u64,
    two_leaders_samples: u64,
    no_leader_samples: u64,
    /// Policy denials of kube-apiserver's earlier incarnations, and of the
    /// current one as last read.
    denied_before: f64,
    denied_now: f64,
}

/// The figures of one replica's `/metrics` text.
fn figures(text: &str) -> Metrics {
    let mut out = Metrics::new();
    for name in SCHEDULER_COUNTERS {
        if text.contains(name) {
            out.insert(name.to_string(), metric_sum(text, name));
        }
    }
    for (name, label) in LABELLED_COUNTERS {
        add_by_label(&mut out, text, name, label);
    }
    out
}

/// The monitor.
#[derive(Debug)]
pub struct Monitor {
    state: Mutex<State>,
    t0: tokio::time::Instant,
}

impl Monitor {
    /// Reads every running replica every `every` from now on, and
    /// kube-apiserver's policy denials (with `admin`) every fifth time.
    pub fn start(
        fleet: Arc<AsyncMutex<Fleet>>,
        admin: kube::Client,
        t0: std::time::Instant,
        every: Duration,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let monitor = Arc::new(Self {
            state: Mutex::new(State::default()),
            t0: tokio::time::Instant::from_std(t0),
        });
        let this = monitor.clone();
        let task = tokio::spawn(async move {
            for k in 0u64.. {
                this.sample(&fleet).await;
                if k % 5 == 0 {
                    this.read_apiserver(&admin).await;
                }
                tokio::time::sleep(every).await;
            }
        });
        (monitor, task)
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Targets: (member, incarnation, admin address, scheduler?).
    async fn targets(fleet: &AsyncMutex<Fleet>) -> Vec<(String, u32, SocketAddr, bool)> {
        let mut fleet = fleet.lock().await;
        let mut out = Vec::new();
        for m in fleet.schedulers.iter_mut() {
            if m.running() {
                out.push((m.name.clone(), m.incarnation(), m.admin, true));
            }
        }
        for m in fleet.webhooks.iter_mut() {
            if m.running() {
                out.push((m.name.clone(), m.incarnation(), m.admin, false));
            }
        }
        out
    }

    async fn sample(&self, fleet: &AsyncMutex<Fleet>) {
        let mut leaders = Vec::new();
        let mut schedulers_read = 0;
        for (name, incarnation, admin, scheduler) in Self::targets(fleet).await {
            let Ok(text) = scrape(admin).await else {
                continue;
            };
            if scheduler {
                schedulers_read += 1;
                if leads(&text) {
                    leaders.push(name.clone());
                }
            }
            self.record(&name, incarnation, &text);
        }
        let t = self.now();
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if schedulers_read == 0 {
            return;
        }
        st.samples += 1;
        match leaders.len() {
            0 => st.no_leader_samples += 1,
            1 => {}
            _ => st.two_leaders_samples += 1,
        }
        if st.leadership.last().is_none_or(|l| l.leaders != leaders) {
            st.leadership.push(LeaderChange { at_s: t, leaders });
        }
    }

    /// Reads kube-apiserver's policy denials (a count lower than the last
    /// one read means it was restarted: the last one is kept).
    pub async fn read_apiserver(&self, admin: &kube::Client) {
        let Ok(text) = apiserver_metrics(admin).await else {
            return;
        };
        let denied: f64 = metric_by_label(&text, POLICY_CHECKS, "enforcement_action")
            .into_iter()
            .filter(|(action, _)| action == "deny")
            .map(|(_, v)| v)
            .sum();
        if let Ok(mut st) = self.state.lock() {
            if denied < st.denied_now {
                st.denied_before += st.denied_now;
            }
            st.denied_now = denied;
        }
    }

    /// Writes kube-apiserver refused by an admission policy (the fencing
    /// policy is the only one), over all its incarnations.
    pub fn policy_denials(&self) -> f64 {
        self.state
            .lock()
            .map(|s| s.denied_before + s.denied_now)
            .unwrap_or(0.0)
    }

    /// Keeps `text` as the latest figures of `member`'s `incarnation` (say,
    /// read just before it is killed).
    pub fn record(&self, member: &str, incarnation: u32, text: &str) {
        let f = figures(text);
        if let Ok(mut st) = self.state.lock() {
            st.figures.insert((member.to_string(), incarnation), f);
        }
    }

    /// Each figure summed over every incarnation of the replicas whose
    /// name starts with `prefix`.
    pub fn totals(&self, prefix: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        if let Ok(st) = self.state.lock() {
            for ((member, _), f) in &st.figures {
                if !member.starts_with(prefix) {
                    continue;
                }
                for (k, v) in f {
                    *out.entry(k.clone()).or_default() += v;
                }
            }
        }
        out
    }

    /// Per (member, incarnation): its figures.
    pub fn per_incarnation(&self) -> BTreeMap<String, BTreeMap<String, f64>> {
        self.state
            .lock()
            .map(|st| {
                st.figures
                    .iter()
                    .map(|((m, i), f)| (format!("{m}#{i}"), f.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Who led when.
    pub fn leadership(&self) -> Vec<LeaderChange> {
        self.state
            .lock()
            .map(|s| s.leadership.clone())
            .unwrap_or_default()
    }

    /// Samples taken, those in which two replicas said they led, and those
    /// in which none did.
    pub fn leader_samples(&self) -> (u64, u64, u64) {
        self.state
            .lock()
            .map(|s| (s.samples, s.two_leaders_samples, s.no_leader_samples))
            .unwrap_or_default()
    }
}

/// The replica that leads now and its `/metrics` text, if one does.
pub async fn current_leader(fleet: &AsyncMutex<Fleet>) -> Option<(usize, String)> {
    let targets: Vec<(usize, SocketAddr)> = {
        let mut fleet = fleet.lock().await;
        fleet
            .schedulers
            .iter_mut()
            .enumerate()
            .filter_map(|(i, m)| m.running().then_some((i, m.admin)))
            .collect()
    };
    for (i, admin) in targets {
        if let Ok(text) = scrape(admin).await
            && leads(&text)
        {
            return Some((i, text));
        }
    }
    None
}
