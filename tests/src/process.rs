//! Child processes of the harness that never outlive the test binary.
//!
//! Every child is started through `setpriv --pdeathsig KILL`, so the kernel
//! kills it when its parent thread exits. The parent is one dedicated spawner
//! thread that lives as long as the process: a control plane kept in a
//! `static` (shared by the tests of one binary, never dropped) is therefore
//! killed when the test binary exits, however it exits. Processes owned by a
//! value are also killed when the value is dropped (including on panic).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("process-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop (and the thread the
                // children's death signal is tied to) ends only with the process.
                while let Ok((mut command, reply)) = rx.recv() {
                    let _ = reply.send(command.spawn());
                }
                loop {
                    std::thread::park();
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| panic!("cannot start the process spawner thread: {e}"));
        Mutex::new(tx)
    })
}

/// A running child process whose output goes to a log file; killed on drop.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program args…`, logging stdout and stderr to `log`.
    pub fn start(name: &str, program: &Path, args: &[String], log: PathBuf) -> Result<Self> {
        Self::start_with_env(name, program, args, &[], log)
    }

    /// As [`Process::start`], with `env` added to the inherited environment
    /// (e.g. `KUBECONFIG` for a component that has no kubeconfig flag).
    pub fn start_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
        log: PathBuf,
    ) -> Result<Self> {
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new("setpriv");
        command
            .arg("--pdeathsig")
            .arg("KILL")
            .arg("--")
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let (reply_tx, reply_rx) = mpsc::channel();
        spawner()
            .lock()
            .map_err(|_| anyhow!("process spawner lock poisoned"))?
            .send((command, reply_tx))
            .map_err(|_| anyhow!("process spawner thread is gone"))?;
        let child = reply_rx
            .recv()
            .map_err(|_| anyhow!("process spawner thread is gone"))?
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Self {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Name given at start.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log (for error messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// An error if the process has exited, with the end of its log.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(anyhow!(
                "{} exited ({status}); last log lines:\n{}",
                self.name,
                self.log_tail(30)
            )),
        }
    }

    /// Kills the process and waits for it to be reaped.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Stops the process gracefully (SIGTERM), killing it after `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            let deadline = std::time::Instant::now() + grace;
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}
