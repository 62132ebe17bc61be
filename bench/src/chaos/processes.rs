//! The component processes of the chaos run: two webhooks behind the
//! balancer, two schedulers each behind its own proxy, with the flags the
//! in-process components of the other phases get.

use super::*;

pub(super) fn arg(name: &str, value: impl std::fmt::Display) -> [String; 2] {
    [format!("--{name}"), value.to_string()]
}

pub(super) fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

pub(super) fn env(kubeconfig: &Path) -> Vec<(String, OsString)> {
    vec![
        ("KUBECONFIG".into(), kubeconfig.as_os_str().to_owned()),
        // The component's own filter, whatever this process was given.
        ("RUST_LOG".into(), LOG_LEVEL.into()),
    ]
}

/// Starts both webhooks (flags as the in-process one of the other phases:
/// the scheduler's user, cross-namespace quotas, the serving certificate
/// from one directory; admin credentials), the balancer in front of them,
/// and registers the balancer with the API server.
pub(super) async fn start_webhooks(
    cp: &ControlPlane,
    admin: &kube::Client,
    program: &Path,
) -> Result<(Vec<Member>, Balancer)> {
    let tls_dir = cp.dir().join("bench-webhook-tls");
    koord_queue_tests::webhook::write_serving_cert(cp, &tls_dir)?;
    let mut members = Vec::new();
    let mut backends = Vec::new();
    for i in 0..2 {
        let (listen, admin_addr) = (free_addr()?, free_addr()?);
        let args = [
            arg("listen-addr", listen),
            arg("admin-addr", admin_addr),
            arg("tls-dir", tls_dir.display()),
            arg("cert-reload-interval", "10s"),
            arg("scheduler-user", SCHEDULER_USER),
            arg("log-level", LOG_LEVEL),
        ]
        .concat()
        .into_iter()
        .chain(["--allow-cross-namespace-quota".to_string()])
        .collect();
        members.push(Member::new(
            &format!("webhook-{i}"),
            program.to_path_buf(),
            args,
            env(cp.kubeconfig()),
            cp.dir(),
            admin_addr,
        ));
        backends.push(Backend {
            addr: listen,
            readyz: Some(admin_addr),
        });
    }
    for m in &mut members {
        m.start()?;
    }
    for m in &mut members {
        wait_admin(m, "/readyz", Duration::from_secs(60)).await?;
    }
    let balancer = Balancer::start(&backends).await?;
    let url = format!("{}/mutate", balancer.url());
    let config = koord_queue_tests::webhook::configuration(&url, cp.pki().ca.cert_pem())?;
    let probe_ns = fixtures::create_namespace(admin, true).await?;
    fixtures::register_mutating_webhook(admin, &config, || {
        koord_queue_tests::webhook::probe(admin, &probe_ns)
    })
    .await?;
    Ok((members, balancer))
}

/// Starts both schedulers (flags as the in-process one of the other
/// phases, plus `--enabled-kinds batchjob`; the scheduler identity's
/// certificate; each through its own proxy) and waits until one leads, is
/// ready and has created the Queues.
pub(super) async fn start_schedulers(
    cp: &ControlPlane,
    admin: &kube::Client,
    shape: &Shape,
    options: &SchedulerOptions,
    program: &Path,
) -> Result<(Vec<Member>, Vec<Proxy>)> {
    let config_path = cp.dir().join("bench-scheduler-config.yaml");
    std::fs::write(&config_path, components::scheduler_config(options.root_cpu))?;
    let cert = cp.pki().client_cert(SCHEDULER_USER, &["system:masters"])?;
    let credentials = Credentials::Certificate {
        cert_pem: cert.cert_pem,
        key_pem: cert.key_pem,
    };
    let mut members = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..2 {
        let proxy = Proxy::start(cp.server()).await?;
        let kubeconfig = cp.write_kubeconfig_via(
            &format!("bench-scheduler-{i}"),
            &proxy.url(),
            SCHEDULER_USER,
            &credentials,
        )?;
        let admin_addr = free_addr()?;
        let args = [
            arg("config", config_path.display()),
            arg("admin-addr", admin_addr),
            arg("enabled-kinds", "batchjob"),
            arg("namespace", keys::SYSTEM_NAMESPACE),
            arg("lease-name", LEASE),
            arg(
                "identity",
                format!("bench-scheduler-{i}-{}", fleet::INCARNATION),
            ),
            arg("write-concurrency", options.write_concurrency),
            arg("status-interval", millis(options.status_interval)),
            arg("job-events", options.job_events),
            arg("cycle-batch", millis(options.cycle_batch)),
            arg("log-level", LOG_LEVEL),
        ]
        .concat();
        members.push(Member::new(
            &format!("scheduler-{i}"),
            program.to_path_buf(),
            args,
            env(&kubeconfig),
            cp.dir(),
            admin_addr,
        ));
        proxies.push(proxy);
    }
    for m in &mut members {
        m.start()?;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    'lead: loop {
        for m in &mut members {
            m.check_alive()?;
            if let Ok(text) = components::scrape_admin(m.admin).await
                && components::metric_sum(&text, monitor::LEADER) >= 1.0
                && matches!(
                    koord_queue_tests::admin::get(m.admin, "/readyz").await,
                    Ok((200, _))
                )
            {
                break 'lead;
            }
        }
        if Instant::now() > deadline {
            anyhow::bail!("no scheduler led and was ready within 90 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    components::wait_for_queues(admin, shape, Duration::from_secs(120)).await?;
    Ok((members, proxies))
}
