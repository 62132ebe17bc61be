//! `make run` (the `local-run` binary): it prints the kubeconfig once
//! everything is up; a job created with kubectl through that kubeconfig in
//! the demo namespace is held, queued, released and completes on a kwok
//! node; the printed dashboard link signs in once as the demo
//! administrator; SIGTERM stops everything and leaves no etcd, kube-* or kwok process
//! (nor the kubeconfig) behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use koord_queue_tests::process::is_running;
use koord_queue_tests::tools::{self, Tool};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Processes whose command line mentions `needle` (the control plane's
/// working directory appears in every component's flags).
fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && is_running(pid) {
            found.push((pid, cmdline));
        }
    }
    found
}

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = tokio::process::Command::new(tools::path(Tool::Kubectl).unwrap())
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `GET path` of `addr` over plain HTTP/1.1 with `cookie`: the status line,
/// the headers and the body, as text.
async fn http_get(addr: &str, path: &str, cookie: Option<&str>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn make_run_serves_a_queued_job_and_stops_cleanly_on_sigterm() {
    let scratch = tempfile::tempdir().unwrap();
    let kubeconfig_out = scratch.path().join("kubeconfig");
    let stderr = std::fs::File::create(scratch.path().join("local-run.log")).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_local-run"))
        .env("KUBECONFIG_OUT", &kubeconfig_out)
        .env("NODES", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // If this test fails half-way, the binary (and with it, through
        // its children's parent-death signal, the control plane) goes too.
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();

    // Wait for the banner: the kubeconfig path, the working directory, ready.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut kubeconfig: Option<PathBuf> = None;
    let mut workdir: Option<String> = None;
    let mut dashboard: Option<String> = None;
    let banner = tokio::time::timeout(Duration::from_secs(240), async {
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(path) = line.trim().strip_prefix("kubeconfig:") {
                kubeconfig = Some(PathBuf::from(path.trim()));
            }
            if let Some(link) = line.trim().strip_prefix("Dashboard:") {
                dashboard = Some(link.trim().to_string());
            }
            if let Some(dir) = line.trim().strip_prefix("logs:") {
                workdir = Some(dir.trim().to_string());
            }
            let ready = line.contains("Press Ctrl-C to stop.");
            seen.push(line);
            if ready {
                break;
            }
        }
        seen
    })
    .await;
    let log = || std::fs::read_to_string(scratch.path().join("local-run.log")).unwrap_or_default();
    let banner = banner.unwrap_or_else(|_| panic!("local-run not ready in time:\n{}", log()));
    let kubeconfig = kubeconfig.unwrap_or_else(|| panic!("no kubeconfig in {banner:?}\n{}", log()));
    let workdir = workdir.unwrap();
    assert_eq!(kubeconfig, std::fs::canonicalize(&kubeconfig_out).unwrap());
    assert!(
        banner.iter().any(|l| l.contains("export KUBECONFIG=")),
        "{banner:?}"
    );
    let components = processes_mentioning(&workdir);
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        assert!(
            components
                .iter()
                .any(|(_, cmd)| cmd.contains(&format!("/{name} "))),
            "{name} runs: {components:?}"
        );
    }

    // The dashboard's link: a session of the demo administrator, once.
    let link = dashboard.unwrap_or_else(|| panic!("no dashboard link in {banner:?}"));
    let rest = link.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_at(rest.find('/').unwrap());
    assert!(addr.starts_with("127.0.0.1:"), "{link}");
    let answer = http_get(addr, path, None).await;
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no session cookie: {answer}"))
        .to_string();
    let me = http_get(addr, "/api/me", Some(&cookie)).await;
    assert!(
        me.contains("system:serviceaccount:koord-queue:dashboard-admin"),
        "{me}"
    );
    let again = http_get(addr, path, None).await;
    assert!(
        again.starts_with("HTTP/1.1 401"),
        "a link is spent on first use: {again}"
    );

    // The printed example: a job in the demo namespace, held on creation
    // (the API server's answer already carries the webhook's mutation).
    let suspended = kubectl(
        &kubeconfig,
        &[
            "-n",
            "demo",
            "create",
            "job",
            "hello",
            "--image=busybox",
            "-o",
            "jsonpath={.spec.suspend}",
            "--",
            "echo",
            "hi",
        ],
    )
    .await;
    assert_eq!(suspended, "true", "held by the webhook");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let phase = kubectl(
            &kubeconfig,
            &[
                "-n",
                "demo",
                "get",
                "queueunits",
                "-o",
                "jsonpath={.items[*].status.phase}",
            ],
        )
        .await;
        let complete = kubectl(
            &kubeconfig,
            &[
                "-n",
                "demo",
                "get",
                "job",
                "hello",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Complete\")].status}",
            ],
        )
        .await;
        if phase == "Succeed" && complete == "True" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job not done: unit phase {phase:?}, Complete={complete:?}\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let queue = kubectl(
        &kubeconfig,
        &[
            "-n",
            "demo",
            "get",
            "queueunits",
            "-o",
            "jsonpath={.items[0].spec.queue}",
        ],
    )
    .await;
    assert_eq!(queue, "team-a", "the namespace's default queue");
    // The visibility API is registered: kubectl finds it by discovery.
    let usage = kubectl(
        &kubeconfig,
        &[
            "get",
            "quotausages",
            "-A",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    )
    .await;
    assert!(
        usage.contains("team-a") && usage.contains("team-b"),
        "{usage}\n{}",
        log()
    );

    // SIGTERM: a clean stop, nothing left behind.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap_or_else(|_| panic!("local-run did not stop within 60s of SIGTERM:\n{}", log()))
        .unwrap();
    assert!(exit.success(), "local-run exited with {exit}:\n{}", log());
    let mut rest = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push(line);
    }
    assert!(
        rest.iter().any(|l| l.contains("stopping (SIGTERM)")),
        "{rest:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = processes_mentioning(&workdir);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (pid, _) in &components {
        assert!(!is_running(*pid), "component {pid} still runs");
    }
    assert!(!Path::new(&workdir).exists(), "{workdir} removed");
    assert!(
        !kubeconfig_out.exists(),
        "the kubeconfig is removed on stop"
    );
}
