//! [`Placement::Processes`](super::Placement::Processes): one webhook and
//! one scheduler as processes of their own, with the flags the in-process
//! ones get, registered and authenticated the same way.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use koord_queue_tests::ControlPlane;

use super::{Components, SCHEDULER_PROCESS, WEBHOOK_PROCESS, wait_for_queues};
use crate::admin_scrape::{answers_ok, leads, scrape};
use crate::member::{self, Member, free_addr, wait_admin};
use crate::scheduler_settings::SchedulerOptions;
use crate::shape::Shape;

/// Starts the webhook (admin credentials, its serving certificate from the
/// control plane's CA, registered by URL), then the scheduler (the identity
/// the webhook trusts), and waits as the in-process start does.
pub(super) async fn start(
    cp: &ControlPlane,
    shape: &Shape,
    options: &SchedulerOptions,
    dir: Option<&Path>,
) -> Result<Components> {
    if options.visibility {
        bail!("reading the estimates through the visibility API needs --components in-process");
    }
    let webhook_bin = member::binary(dir, WEBHOOK_PROCESS)?;
    let scheduler_bin = member::binary(dir, SCHEDULER_PROCESS)?;
    let admin = cp.client().await?;

    let tls_dir = cp.dir().join("bench-webhook-tls");
    koord_queue_tests::webhook::write_serving_cert(cp, &tls_dir)?;
    let listen = free_addr()?;
    let mut webhook = member::webhook(
        WEBHOOK_PROCESS,
        &webhook_bin,
        cp.kubeconfig(),
        cp.dir(),
        listen,
        &tls_dir,
    )?;
    webhook.start()?;
    wait_admin(&mut webhook, "/readyz", Duration::from_secs(60)).await?;
    super::register_webhook(cp, &admin, &format!("https://{listen}/mutate")).await?;

    let (kubeconfig, config_path) = super::scheduler_files(cp, options)?;
    let mut scheduler = member::scheduler(
        SCHEDULER_PROCESS,
        &scheduler_bin,
        &kubeconfig,
        cp.dir(),
        &config_path,
        options,
        ("bench-scheduler", "bench-scheduler-0"),
    )?;
    scheduler.start()?;
    wait_leading(
        std::slice::from_mut(&mut scheduler),
        Duration::from_secs(60),
    )
    .await?;
    wait_for_queues(&admin, shape, Duration::from_secs(120)).await?;
    Ok(Components {
        webhook_rt: None,
        scheduler_rt: None,
        webhook: None,
        scheduler: None,
        scheduler_admin: scheduler.admin,
        webhook_admin: webhook.admin,
        members: vec![webhook, scheduler],
    })
}

/// Waits until one of the scheduler processes `members` leads and is ready;
/// an error if one exits or none does within `timeout`.
pub async fn wait_leading(members: &mut [Member], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        for m in members.iter_mut() {
            m.check_alive()?;
            if let Ok(text) = scrape(m.admin).await
                && leads(&text)
                && answers_ok(m.admin, "/readyz").await
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("no scheduler process led and was ready within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
