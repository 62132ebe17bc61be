//! A leader's loss and a restart with many units cached (issue 43): how
//! long after the leader is SIGKILLed a warm standby makes its first
//! release, how long a cold start takes to its first, and what each writes
//! to QueueUnits meanwhile (it should write only to the units whose state
//! changed, not to every unit it takes over).
//!
//! Each takeover has a release to make: at the moment of the kill, the
//! Job of one unit holding quota in a queue with a backlog is deleted, as
//! if it had finished. Its unit goes and the room goes to the next unit of
//! that queue — which only a leader can do.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::QueueUnit;
use koord_queue_api::keys;
use koord_queue_api::queue_unit::QueueUnitPhase;
use koord_queue_tests::metrics::histogram_quantile;
use koord_queue_tests::process::{Process, free_port};
use kube::api::{Api, DeleteParams, ListParams};

use crate::admin_scrape::{answers_ok, apiserver_writes, leads, metric_by_label, scrape};

/// The scheduler's count of releases it made (its first is the takeover's).
const RELEASES: &str = "koord_queue_scheduler_admission_attempts_total";
/// The scheduler's cycle durations.
const CYCLES: &str = "koord_queue_scheduler_cycle_duration_seconds";
/// How long after its first release a new leader's writes are still counted.
const AFTER_FIRST_RELEASE: Duration = Duration::from_secs(20);
/// How long a takeover may take before the run gives up on it.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(300);

/// How the run starts a scheduler replica: the binary, the arguments every
/// replica shares, and where logs go.
#[derive(Clone, Debug)]
pub struct Launcher {
    pub bin: PathBuf,
    /// Arguments shared by every replica (configuration, certificates,
    /// Lease name and timing, logging).
    pub args: Vec<String>,
    pub kubeconfig: PathBuf,
    pub log_dir: PathBuf,
}

/// A running replica.
#[derive(Debug)]
pub struct Replica {
    pub process: Process,
    pub identity: String,
    pub admin: SocketAddr,
    pub visibility_port: u16,
}

impl Launcher {
    /// The arguments of a replica named `identity` on these ports.
    pub fn args_of(&self, identity: &str, admin: SocketAddr, visibility_port: u16) -> Vec<String> {
        let mut args = self.args.clone();
        args.extend([
            format!("--identity={identity}"),
            format!("--admin-addr={admin}"),
            format!("--visibility-addr=127.0.0.1:{visibility_port}"),
        ]);
        args
    }

    /// Starts a replica named `identity` (its Lease identity; a restarted
    /// container keeps its pod's) on free ports.
    pub fn start(&self, identity: &str) -> Result<Replica> {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let visibility_port = free_port()?;
        // A replica started again under its identity gets a log of its own.
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let name = format!("koord-queue-scheduler-{identity}-{n}");
        let process = Process::start_with_env(
            &name,
            &self.bin,
            &self.args_of(identity, admin, visibility_port),
            &[("KUBECONFIG", self.kubeconfig.as_os_str())],
            self.log_dir.join(format!("{name}.log")),
        )?;
        Ok(Replica {
            process,
            identity: identity.to_string(),
            admin,
            visibility_port,
        })
    }
}

/// What one takeover took and wrote.
#[derive(Clone, Debug)]
pub struct Takeover {
    /// "warm standby" or "cold start".
    pub what: &'static str,
    /// From the kill until the new replica answered `/readyz` (a standby
    /// was ready before the kill: zero).
    pub ready: Duration,
    /// From the kill until the new replica said it leads.
    pub leading: Duration,
    /// From the kill until its first release.
    pub first_release: Duration,
    /// QueueUnit writes that reached the API server from the kill until
    /// [`AFTER_FIRST_RELEASE`] after the first release.
    pub unit_writes: f64,
    /// Releases the new leader made in that time.
    pub releases: f64,
    /// The bound of the bucket of the new leader's longest cycle in that
    /// time (seconds; its first looks at every unit).
    pub longest_cycle: Option<f64>,
    /// The cycles of 50 ms or more the new leader logged, as said in its log
    /// (`ms=… queues=… units=…`): the histogram gives only a bucket.
    pub long_cycles: Vec<String>,
}

impl Takeover {
    /// One line for the report.
    pub fn line(&self) -> String {
        format!(
            "{}: ready {:.1}s, leading {:.1}s, first release {:.1}s after the SIGKILL; \
             then {:.0} QueueUnit writes in all ({:.0} releases) until {}s after that release; \
             longest cycle {}",
            self.what,
            self.ready.as_secs_f64(),
            self.leading.as_secs_f64(),
            self.first_release.as_secs_f64(),
            self.unit_writes,
            self.releases,
            AFTER_FIRST_RELEASE.as_secs(),
            self.longest_cycle
                .map_or("-".to_string(), |s| format!("≤ {:.0} ms", s * 1000.0))
        ) + &match self.long_cycles.as_slice() {
            [] => String::new(),
            cycles => format!("; logged as long: {}", cycles.join(", ")),
        }
    }
}

/// The fields of each "long scheduling cycle" line of a replica's log
/// (plain format, colours or not), in order.
pub fn long_cycles(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("long scheduling cycle"))
        .map(|line| {
            let plain = strip_colours(line);
            plain
                .split_whitespace()
                .filter(|w| w.contains('=') && !w.starts_with("elapsed"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `s` without its ANSI colour sequences (`ESC [ … m`).
fn strip_colours(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Names of `count` Jobs in `namespace` whose units, charged to `quota`,
/// were released and hold it: each takeover deletes one of them.
pub async fn admitted_jobs(
    client: &kube::Client,
    namespace: &str,
    quota: &str,
    count: usize,
) -> Result<Vec<String>> {
    let units = Api::<QueueUnit>::namespaced(client.clone(), namespace);
    let selector = format!("{}={quota}", keys::QUOTA_NAME_LABEL);
    let mut params = ListParams::default().labels(&selector).limit(500);
    let mut jobs = Vec::new();
    loop {
        let page = units.list(&params).await?;
        jobs.extend(
            page.items
                .iter()
                .filter(|u| {
                    u.status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .is_some_and(QueueUnitPhase::is_released)
                })
                .filter_map(|u| u.spec.consumer_ref.name.clone()),
        );
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() && jobs.len() < count => {
                params = params.continue_token(&token);
            }
            _ => break,
        }
    }
    if jobs.len() < count {
        bail!(
            "{} units of {quota} in {namespace} hold quota; the takeovers need {count}",
            jobs.len()
        );
    }
    jobs.truncate(count);
    Ok(jobs)
}

/// Starts a standby beside `leader`, waits until its caches are warm,
/// SIGKILLs the leader and frees the room of job `freed` (in `namespace`);
/// returns the standby, now leading, and what its takeover took.
pub async fn warm_standby(
    client: &kube::Client,
    launcher: &Launcher,
    leader: &mut Replica,
    namespace: &str,
    freed: &str,
) -> Result<(Replica, Takeover)> {
    let mut standby = launcher.start("standby")?;
    let started = Instant::now();
    println!("  standby started (pid {})", standby.process.pid());
    while !answers_ok(standby.admin, "/readyz").await {
        standby.process.check_alive()?;
        if started.elapsed() > TAKEOVER_TIMEOUT {
            bail!("the standby was not ready within {TAKEOVER_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "  standby ready (caches warm) after {:.1?}",
        started.elapsed()
    );
    let killed = kill_and_free(client, leader, namespace, freed).await?;
    let takeover = follow(
        client,
        &mut standby,
        "warm standby",
        &killed,
        Some(Duration::ZERO),
    )
    .await?;
    Ok((standby, takeover))
}

/// SIGKILLs `leader`, frees the room of job `freed` and starts the
/// replica again under the same identity (a restarted container: it may
/// take its own Lease at once), cold; returns it and what it took.
pub async fn cold_restart(
    client: &kube::Client,
    launcher: &Launcher,
    leader: &mut Replica,
    namespace: &str,
    freed: &str,
) -> Result<(Replica, Takeover)> {
    let killed = kill_and_free(client, leader, namespace, freed).await?;
    let mut restarted = launcher.start(&leader.identity)?;
    let takeover = follow(client, &mut restarted, "cold start", &killed, None).await?;
    Ok((restarted, takeover))
}

/// The moment a leader was SIGKILLed, and the QueueUnit writes counted then.
struct Killed {
    at: Instant,
    unit_writes: f64,
}

/// SIGKILLs `leader` and deletes Job `freed`, as if it had finished: the
/// release its room allows is the next leader's to make.
async fn kill_and_free(
    client: &kube::Client,
    leader: &mut Replica,
    namespace: &str,
    freed: &str,
) -> Result<Killed> {
    let unit_writes = unit_writes(client).await?;
    let at = Instant::now();
    leader.process.kill();
    delete_job(client, namespace, freed).await?;
    Ok(Killed { at, unit_writes })
}

/// Follows `replica` from `killed` until its first release and
/// [`AFTER_FIRST_RELEASE`] more.
async fn follow(
    client: &kube::Client,
    replica: &mut Replica,
    what: &'static str,
    killed: &Killed,
    mut ready: Option<Duration>,
) -> Result<Takeover> {
    let mut leading = None;
    let first_release = loop {
        replica.process.check_alive()?;
        if ready.is_none() && answers_ok(replica.admin, "/readyz").await {
            ready = Some(killed.at.elapsed());
        }
        if let Ok(metrics) = scrape(replica.admin).await {
            if leading.is_none() && leads(&metrics) {
                leading = Some(killed.at.elapsed());
            }
            if released(&metrics) > 0.0 {
                break killed.at.elapsed();
            }
        }
        if killed.at.elapsed() > TAKEOVER_TIMEOUT {
            bail!("{what}: no release within {TAKEOVER_TIMEOUT:?} of the SIGKILL");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "  {what}: first release {:.1}s after the SIGKILL",
        first_release.as_secs_f64()
    );
    tokio::time::sleep(AFTER_FIRST_RELEASE).await;
    replica.process.check_alive()?;
    let metrics = scrape(replica.admin).await?;
    let log = std::fs::read_to_string(replica.process.log_path()).unwrap_or_default();
    Ok(Takeover {
        what,
        ready: ready.unwrap_or(first_release),
        leading: leading.unwrap_or(first_release),
        first_release,
        unit_writes: unit_writes(client).await? - killed.unit_writes,
        releases: released(&metrics),
        longest_cycle: histogram_quantile(&metrics, CYCLES, 1.0),
        long_cycles: long_cycles(&log),
    })
}

fn released(metrics: &str) -> f64 {
    metric_by_label(metrics, RELEASES, "result")
        .into_iter()
        .filter(|(result, _)| result == "released")
        .map(|(_, n)| n)
        .sum()
}

async fn unit_writes(client: &kube::Client) -> Result<f64> {
    apiserver_writes(client, &["queueunits"]).await
}

async fn delete_job(client: &kube::Client, namespace: &str, name: &str) -> Result<()> {
    Api::<Job>::namespaced(client.clone(), namespace)
        .delete(name, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting Job {namespace}/{name}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::long_cycles;

    #[test]
    fn long_cycles_are_read_from_plain_logs_with_or_without_colours() {
        let log = "\
2026-12-07T18:00:00.1Z  INFO koord_queue_scheduler::controller: leading: scheduling and writing
\u{1b}[2m2026-12-07T18:00:01.2Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mkoord_queue_scheduler::controller::state::release\u{1b}[0m\u{1b}[2m:\u{1b}[0m long scheduling cycle \u{1b}[3mms\u{1b}[0m\u{1b}[2m=\u{1b}[0m62.0 \u{1b}[3munits\u{1b}[0m\u{1b}[2m=\u{1b}[0m93852
2026-12-07T18:00:02.3Z  INFO koord_queue_scheduler::controller::state::release: long scheduling cycle ms=51.0 queues=3 units=12
";
        assert_eq!(
            long_cycles(log),
            vec!["ms=62.0 units=93852", "ms=51.0 queues=3 units=12"]
        );
        assert!(long_cycles("nothing here\n").is_empty());
    }
}
