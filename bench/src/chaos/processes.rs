//! The component processes of the chaos run: two webhooks behind the
//! balancer, two schedulers each behind its own proxy, with the flags the
//! in-process components of the other phases get.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use koord_queue_tests::kubeconfig::Credentials;
use koord_queue_tests::proxy::{Backend, Balancer, Proxy};
use koord_queue_tests::webhook::SCHEDULER_USER;
use koord_queue_tests::{ControlPlane, fixtures};

use super::LEASE;
use super::fleet::{self, Member, free_addr, wait_admin};
use crate::components;
use crate::member;
use crate::scheduler_settings::{SchedulerOptions, scheduler_config};
use crate::shape::Shape;

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
        let listen = free_addr()?;
        let member = member::webhook(
            &format!("webhook-{i}"),
            program,
            cp.kubeconfig(),
            cp.dir(),
            listen,
            &tls_dir,
        )?;
        let admin_addr = member.admin;
        members.push(member);
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
    std::fs::write(&config_path, scheduler_config(options.root_cpu))?;
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
        members.push(member::scheduler(
            &format!("scheduler-{i}"),
            program,
            &kubeconfig,
            cp.dir(),
            &config_path,
            options,
            (
                LEASE,
                &format!("bench-scheduler-{i}-{}", fleet::INCARNATION),
            ),
        )?);
        proxies.push(proxy);
    }
    for m in &mut members {
        m.start()?;
    }
    components::wait_leading(&mut members, Duration::from_secs(90)).await?;
    components::wait_for_queues(admin, shape, Duration::from_secs(120)).await?;
    Ok((members, proxies))
}
