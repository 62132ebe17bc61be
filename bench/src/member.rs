//! A component (the webhook, the scheduler) as an OS process of its own
//! built from this workspace, the way a Deployment runs it: the chaos run's
//! replicas, which it kills and starts again, and the Kueue comparison's
//! single webhook and scheduler, whose CPU time and peak RSS are then their
//! own and not the benchmark process's. Each start logs into a file of its
//! own in the control plane's directory.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use koord_queue_tests::process::{Process, free_port};

use crate::scheduler_settings::SchedulerOptions;

/// Replaced in a member's arguments by the number of its start (1 for the
/// first): a Deployment's new pod has a new name, so a restarted scheduler
/// has a new Lease identity.
pub const INCARNATION: &str = "{incarnation}";

/// One replica: how to start it and the process while it runs.
#[derive(Debug)]
pub struct Member {
    /// `scheduler-0`, `webhook-1`, …
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, OsString)>,
    dir: PathBuf,
    /// Its admin endpoint (`/livez`, `/readyz`, `/metrics`).
    pub admin: SocketAddr,
    incarnation: u32,
    process: Option<Process>,
    logs: Vec<PathBuf>,
}

impl Member {
    /// A member that is not started yet.
    pub fn new(
        name: &str,
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(String, OsString)>,
        dir: &Path,
        admin: SocketAddr,
    ) -> Self {
        Self {
            name: name.to_string(),
            program,
            args,
            env,
            dir: dir.to_path_buf(),
            admin,
            incarnation: 0,
            process: None,
            logs: Vec::new(),
        }
    }

    /// Starts a new incarnation, logging into `<name>.<incarnation>.log`.
    pub fn start(&mut self) -> Result<()> {
        if self.process.is_some() {
            bail!("{} is running already", self.name);
        }
        self.incarnation += 1;
        let log = self
            .dir
            .join(format!("{}.{}.log", self.name, self.incarnation));
        let env: Vec<(&str, &std::ffi::OsStr)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_os_str()))
            .collect();
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| a.replace(INCARNATION, &self.incarnation.to_string()))
            .collect();
        let process = Process::start_with_env(&self.name, &self.program, &args, &env, log.clone())?;
        self.process = Some(process);
        self.logs.push(log);
        Ok(())
    }

    /// SIGKILL, as a crash or an OOM kill: no drain, no Lease release.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Which start this is (1 for the first).
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Whether its process runs.
    pub fn running(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|p| p.check_alive().is_ok())
    }

    /// An error with the end of its log if its process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.process.as_mut() {
            Some(p) => p.check_alive(),
            None => bail!("{} is not running", self.name),
        }
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }

    /// Its log files, one per start.
    pub fn logs(&self) -> &[PathBuf] {
        &self.logs
    }
}

/// Polls `GET path` on `addr` every 100 ms until it answers 200.
pub async fn wait_admin(member: &mut Member, path: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        member.check_alive()?;
        if crate::admin_scrape::answers_ok(member.admin, path).await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not answer {path} with 200 within {timeout:?}",
                member.name
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A loopback address on a free port.
pub fn free_addr() -> Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], free_port()?)))
}

/// Where the component binaries are: next to this one (`cargo build
/// --release -p koord-queue-webhook -p koord-queue-scheduler` puts them
/// there), unless `dir` says otherwise.
pub fn binary(dir: Option<&Path>, name: &str) -> Result<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_exe()
            .context("locating this binary")?
            .parent()
            .context("this binary has no directory")?
            .to_path_buf(),
    };
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} not found: build it first (cargo build --release -p {name}), or pass --bin-dir",
            path.display()
        );
    }
    Ok(path)
}

/// Copies every `*.log` of the control plane's directory into `to`
/// (replacing the logs of an earlier run there).
pub fn copy_logs(from: &Path, to: &Path) -> Result<usize> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(to)?.flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let mut n = 0;
    for entry in std::fs::read_dir(from)?.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") {
            std::fs::copy(&path, to.join(entry.file_name()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Log filter of the component processes.
pub const LOG_LEVEL: &str = "info,kube=warn";

fn arg(name: &str, value: impl std::fmt::Display) -> [String; 2] {
    [format!("--{name}"), value.to_string()]
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn env(kubeconfig: &Path) -> Vec<(String, OsString)> {
    vec![
        ("KUBECONFIG".into(), kubeconfig.as_os_str().to_owned()),
        // The component's own filter, whatever this process was given.
        ("RUST_LOG".into(), LOG_LEVEL.into()),
    ]
}

/// A webhook replica serving on `listen` with the certificate in `tls_dir`,
/// with the flags the in-process webhook of the other phases gets (the
/// scheduler's user, cross-namespace quotas), authenticated by `kubeconfig`.
pub fn webhook(
    name: &str,
    program: &Path,
    kubeconfig: &Path,
    dir: &Path,
    listen: SocketAddr,
    tls_dir: &Path,
) -> Result<Member> {
    let admin = free_addr()?;
    let args = [
        arg("listen-addr", listen),
        arg("admin-addr", admin),
        arg("tls-dir", tls_dir.display()),
        arg("cert-reload-interval", "10s"),
        arg("scheduler-user", koord_queue_tests::webhook::SCHEDULER_USER),
        arg("log-level", LOG_LEVEL),
    ]
    .concat()
    .into_iter()
    .chain(["--allow-cross-namespace-quota".to_string()])
    .collect();
    Ok(Member::new(
        name,
        program.to_path_buf(),
        args,
        env(kubeconfig),
        dir,
        admin,
    ))
}

/// A scheduler replica with the benchmark's settings (`options`), the
/// plugin configuration at `config`, the Lease `lease` under the Lease
/// identity `identity` (may hold [`INCARNATION`]), and only the batch/v1
/// Job kind enabled (the benchmark queues nothing else), authenticated by
/// `kubeconfig`.
pub fn scheduler(
    name: &str,
    program: &Path,
    kubeconfig: &Path,
    dir: &Path,
    config: &Path,
    options: &SchedulerOptions,
    (lease, identity): (&str, &str),
) -> Result<Member> {
    let admin = free_addr()?;
    let args = [
        arg("config", config.display()),
        arg("admin-addr", admin),
        arg("enabled-kinds", "batchjob"),
        arg("namespace", koord_queue_api::keys::SYSTEM_NAMESPACE),
        arg("lease-name", lease),
        arg("identity", identity),
        arg("write-concurrency", options.write_concurrency),
        arg("status-interval", millis(options.status_interval)),
        arg("job-events", options.job_events),
        arg("cycle-batch", millis(options.cycle_batch)),
        arg("log-level", LOG_LEVEL),
    ]
    .concat();
    Ok(Member::new(
        name,
        program.to_path_buf(),
        args,
        env(kubeconfig),
        dir,
        admin,
    ))
}
