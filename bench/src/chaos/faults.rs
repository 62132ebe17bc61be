//! The faults of the chaos run, injected in turn on a schedule while jobs
//! flow, each healed before the next: the leader scheduler SIGKILLed (and
//! started again), a webhook SIGKILLed (and started again), kube-apiserver
//! SIGKILLed and restarted, etcd compacted and kube-apiserver restarted
//! (watches get 410 Gone and relist), the leader's API traffic slowed
//! through its proxy until it loses its Lease.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use koord_queue_tests::ControlPlane;
use koord_queue_tests::proxy::{Balancer, Mode};
use serde::Serialize;
use tokio::sync::{Mutex as AsyncMutex, watch};

use super::fleet::Fleet;
use super::monitor::{Monitor, current_leader};

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the scheduler that leads; start it again after a pause.
    KillLeader,
    /// SIGKILL one webhook (in turn); start it again after a pause.
    KillWebhook,
    /// SIGKILL kube-apiserver and start it again on the same port.
    RestartApiserver,
    /// Compact etcd to its current revision, then restart kube-apiserver.
    CompactEtcd,
    /// Slow the leader's API traffic (every chunk each way) for a while.
    DelayLeader,
}

impl FaultKind {
    /// Every kind, in the order they rotate.
    pub const ALL: [FaultKind; 5] = [
        Self::KillLeader,
        Self::KillWebhook,
        Self::RestartApiserver,
        Self::CompactEtcd,
        Self::DelayLeader,
    ];

    /// Name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::KillLeader => "kill-leader",
            Self::KillWebhook => "kill-webhook",
            Self::RestartApiserver => "restart-apiserver",
            Self::CompactEtcd => "compact-etcd",
            Self::DelayLeader => "delay-leader",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Result<Self> {
        match Self::ALL.iter().find(|k| k.name() == name.trim()) {
            Some(k) => Ok(*k),
            None => bail!(
                "unknown fault {name:?} ({})",
                Self::ALL.map(|k| k.name()).join(", ")
            ),
        }
    }
}

/// How the faults are injected.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// The kinds, injected in this order, round and round.
    pub kinds: Vec<FaultKind>,
    /// From the start of one fault to the start of the next (but never
    /// less than [`MIN_GAP`] after the previous one healed).
    pub interval: Duration,
    /// How long a killed replica stays down.
    pub restart_after: Duration,
    /// The delay of each chunk while the leader is slowed.
    pub delay_chunk: Duration,
    /// How long the leader is slowed.
    pub delay_for: Duration,
}

/// The least time between a fault healed and the next.
pub const MIN_GAP: Duration = Duration::from_secs(5);

/// One fault as it happened.
#[derive(Clone, Debug, Serialize)]
pub struct FaultRecord {
    /// Which.
    pub kind: FaultKind,
    /// When it was injected (seconds since the start of the run).
    pub at_s: f64,
    /// When it was healed: the replica running again, the API server
    /// serving, the proxy open.
    pub healed_s: f64,
    /// What was done to what.
    pub detail: String,
    /// Whether it was injected as planned (a leader to kill was found, …).
    pub injected: bool,
    /// An error while injecting or healing it (the run fails on one).
    pub error: Option<String>,
}

/// What the fault task needs.
pub struct Target {
    /// The control plane.
    pub cp: Arc<ControlPlane>,
    /// The replicas.
    pub fleet: Arc<AsyncMutex<Fleet>>,
    /// Their metrics (a replica's figures are read just before it is killed).
    pub monitor: Arc<Monitor>,
    /// The webhooks' balancer (the webhook killed is the one serving).
    pub balancer: Arc<Balancer>,
    /// An admin client (kube-apiserver's counters are read before it is
    /// restarted).
    pub admin: kube::Client,
    /// The start of the run.
    pub t0: std::time::Instant,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").finish_non_exhaustive()
    }
}

impl Target {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

/// Injects `plan`'s faults until `stop` turns true (a fault under way is
/// healed first); returns them in order.
pub async fn run(
    target: Target,
    plan: FaultPlan,
    mut stop: watch::Receiver<bool>,
) -> Vec<FaultRecord> {
    let mut records = Vec::new();
    if plan.kinds.is_empty() {
        return records;
    }
    let mut next = tokio::time::Instant::now() + plan.interval;
    let mut webhook_turn = 0usize;
    for k in 0.. {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        if *stop.borrow() {
            break;
        }
        let kind = plan.kinds[k % plan.kinds.len()];
        let started = tokio::time::Instant::now();
        let at_s = target.now();
        eprintln!("[chaos] {at_s:>6.1}s fault {}", kind.name());
        let outcome = match kind {
            FaultKind::KillLeader => kill_leader(&target, &plan).await,
            FaultKind::KillWebhook => {
                webhook_turn += 1;
                kill_webhook(&target, &plan, webhook_turn - 1).await
            }
            FaultKind::RestartApiserver => {
                target.monitor.read_apiserver(&target.admin).await;
                target.cp.restart_apiserver().await.map(|()| {
                    (
                        true,
                        "kube-apiserver SIGKILLed and started again".to_string(),
                    )
                })
            }
            FaultKind::CompactEtcd => compact_and_restart(&target).await,
            FaultKind::DelayLeader => delay_leader(&target, &plan).await,
        };
        let healed_s = target.now();
        let (injected, detail, error) = match outcome {
            Ok((injected, detail)) => (injected, detail, None),
            Err(e) => (false, String::new(), Some(format!("{e:#}"))),
        };
        eprintln!(
            "[chaos] {healed_s:>6.1}s healed {}: {detail}{}",
            kind.name(),
            error
                .as_deref()
                .map(|e| format!(" ERROR {e}"))
                .unwrap_or_default()
        );
        records.push(FaultRecord {
            kind,
            at_s,
            healed_s,
            detail,
            injected,
            error,
        });
        next = (started + plan.interval).max(tokio::time::Instant::now() + MIN_GAP);
    }
    records
}

/// Waits up to 30 s for a scheduler that leads.
async fn find_leader(target: &Target) -> Option<(usize, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = current_leader(&target.fleet).await {
            return Some(found);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn kill_leader(target: &Target, plan: &FaultPlan) -> Result<(bool, String)> {
    let Some((i, text)) = find_leader(target).await else {
        return Ok((false, "no scheduler led for 30 s: nothing killed".into()));
    };
    let name = {
        let mut fleet = target.fleet.lock().await;
        let m = &mut fleet.schedulers[i];
        target.monitor.record(&m.name, m.incarnation(), &text);
        m.kill();
        m.name.clone()
    };
    tokio::time::sleep(plan.restart_after).await;
    restart(target, true, i).await?;
    Ok((
        true,
        format!("SIGKILLed the leader {name}, started it again"),
    ))
}

async fn kill_webhook(target: &Target, plan: &FaultPlan, turn: usize) -> Result<(bool, String)> {
    // The API server keeps one HTTP/2 connection to its webhook: the
    // replica it is open to is the one that serves. On a tie, in turn.
    let open = target.balancer.open();
    let (i, admin) = {
        let fleet = target.fleet.lock().await;
        let n = fleet.webhooks.len().max(1);
        let most = open.iter().copied().max().unwrap_or(0);
        let i = (0..n)
            .map(|k| (turn + k) % n)
            .find(|&k| open.get(k).copied().unwrap_or(0) == most)
            .unwrap_or(turn % n);
        (i, fleet.webhooks[i].admin)
    };
    let text = crate::admin_scrape::scrape(admin).await.ok();
    let name = {
        let mut fleet = target.fleet.lock().await;
        let m = &mut fleet.webhooks[i];
        if let Some(text) = &text {
            target.monitor.record(&m.name, m.incarnation(), text);
        }
        m.kill();
        m.name.clone()
    };
    tokio::time::sleep(plan.restart_after).await;
    restart(target, false, i).await?;
    Ok((
        true,
        format!(
            "SIGKILLed {name} (open connections from the API server per webhook: {open:?}), started it again"
        ),
    ))
}

/// Starts replica `i` again and waits until it answers `/livez` (a
/// standby scheduler or a webhook filling its caches is not ready yet,
/// and need not be).
async fn restart(target: &Target, scheduler: bool, i: usize) -> Result<()> {
    let admin = {
        let mut fleet = target.fleet.lock().await;
        let m = pick(&mut fleet, scheduler, i);
        m.start()?;
        m.admin
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if crate::admin_scrape::answers_ok(admin, "/livez").await {
            return Ok(());
        }
        {
            let mut fleet = target.fleet.lock().await;
            pick(&mut fleet, scheduler, i).check_alive()?;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("replica {i} did not answer /livez within 60 s of its start");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pick(fleet: &mut Fleet, scheduler: bool, i: usize) -> &mut super::fleet::Member {
    if scheduler {
        &mut fleet.schedulers[i]
    } else {
        &mut fleet.webhooks[i]
    }
}

async fn compact_and_restart(target: &Target) -> Result<(bool, String)> {
    target.monitor.read_apiserver(&target.admin).await;
    let revision = target.cp.compact_etcd().await?;
    target.cp.restart_apiserver().await?;
    Ok((
        true,
        format!(
            "etcd compacted to revision {revision}, kube-apiserver SIGKILLed and started again"
        ),
    ))
}

async fn delay_leader(target: &Target, plan: &FaultPlan) -> Result<(bool, String)> {
    let Some((i, _)) = find_leader(target).await else {
        return Ok((false, "no scheduler led for 30 s: nothing slowed".into()));
    };
    let name = {
        let fleet = target.fleet.lock().await;
        fleet.proxies[i].set(Mode::Delay(plan.delay_chunk));
        fleet.schedulers[i].name.clone()
    };
    tokio::time::sleep(plan.delay_for).await;
    target.fleet.lock().await.proxies[i].set(Mode::Open);
    let after = current_leader(&target.fleet)
        .await
        .map(|(j, _)| j)
        .map_or("nobody".to_string(), |j| format!("scheduler-{j}"));
    Ok((
        true,
        format!(
            "slowed the API traffic of the leader {name} ({:?} a chunk) for {:?}; {after} leads after",
            plan.delay_chunk, plan.delay_for
        ),
    ))
}
