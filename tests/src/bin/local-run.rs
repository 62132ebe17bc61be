//! `make run`: Koord-Queue on a local control plane, in one command.
//!
//! Starts the tier 2 control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok with fake nodes), installs
//! the Helm chart into it (CRDs, RBAC, the webhook configuration for every
//! job kind but LeaderWorkerSet (`install::ALL_KINDS`), flow control, the
//! visibility API's APIService pointing at this process; its Deployments at 0 replicas since no
//! image is built here), and runs the webhook and the scheduler in this
//! process with the flags of the chart's Deployments and the identities of
//! its ServiceAccounts (TokenRequest tokens, not admin). Creates a demo
//! namespace (opted in, default queue `team-a`) and two ElasticQuotas, writes
//! the admin kubeconfig to `.local/kubeconfig` and prints how to use it. Runs
//! until Ctrl-C or SIGTERM, then stops everything (no process left behind).
//! Serves the dashboard on 127.0.0.1 and prints a one-time link that signs
//! in as the demo administrator (a ServiceAccount bound to `cluster-admin`;
//! its token is also written beside the kubeconfig, `dashboard-token`).
//!
//! Environment: `KUBECONFIG_OUT` (default `<repo>/.local/kubeconfig`),
//! `NODES` (default 3), `RUST_LOG` (default: the components' info logs).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use koord_queue_api::keys;
use koord_queue_tests::install::{self, ComponentSetup, Components, LocalInstall, RELEASE};
use koord_queue_tests::{ControlPlane, Nodes, Tier, e2e, process};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use tokio::signal::unix::{SignalKind, signal};

/// The demo namespace.
const DEMO_NAMESPACE: &str = "demo";
/// How long the components' ServiceAccount tokens are valid (the local
/// cluster rarely lives that long).
const TOKEN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(
                    "warn,koord_queue_webhook=info,koord_queue_scheduler=info,kube_client=off",
                )
            }),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("local-run: cannot start a runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run());
    // Leftover tasks (watches) must not hold the exit up.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("local-run: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn kubeconfig_out() -> PathBuf {
    std::env::var_os("KUBECONFIG_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(".local")
                .join("kubeconfig")
        })
}

async fn run() -> Result<()> {
    // Signals first: a Ctrl-C during start-up must stop cleanly too.
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        }
    };
    tokio::pin!(stop);
    let nodes: usize = std::env::var("NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let out = kubeconfig_out();

    eprintln!("starting the local control plane ({nodes} kwok nodes)…");
    // Dropping the start future (on a signal) drops the processes it started.
    let cp = tokio::select! {
        cp = ControlPlane::start(Tier::Two(Nodes { count: nodes, ..Nodes::default() })) => cp?,
        signal = &mut stop => {
            println!("stopping ({signal})");
            return Ok(());
        }
    };
    let up = tokio::select! {
        up = bring_up(&cp, &out) => Some(up),
        signal = &mut stop => {
            println!("stopping ({signal})");
            None
        }
    };
    let (components, dashboard) = match up {
        Some(Ok(up)) => up,
        // Stopped during start-up, or it failed: the control plane goes
        // with `cp`.
        Some(Err(error)) => {
            drop(cp);
            let _ = std::fs::remove_file(&out);
            return Err(error);
        }
        None => {
            drop(cp);
            let _ = std::fs::remove_file(&out);
            return Ok(());
        }
    };

    let signal = stop.await;
    println!("stopping ({signal})");
    dashboard.stop();
    // The scheduler gives its Lease up, the webhook drains; then the control
    // plane's processes are stopped and its directory removed.
    if tokio::time::timeout(Duration::from_secs(20), components.stop())
        .await
        .is_err()
    {
        eprintln!("the components did not stop within 20s; stopping the control plane anyway");
    }
    drop(cp);
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(token_path(&out));
    println!("stopped");
    Ok(())
}

/// Where the demo administrator's dashboard token goes: beside the kubeconfig.
fn token_path(kubeconfig: &Path) -> PathBuf {
    kubeconfig.with_file_name("dashboard-token")
}

/// Installs the chart, starts both components with its identities, creates
/// the demo objects, writes the kubeconfig and serves the dashboard.
async fn bring_up(
    cp: &ControlPlane,
    out: &Path,
) -> Result<(Components, koord_queue_dashboard::Running)> {
    let client = cp.client().await?;
    let port = process::free_port()?;
    let visibility_port = process::free_port()?;
    let install = LocalInstall {
        release: RELEASE.into(),
        namespace: keys::SYSTEM_NAMESPACE.into(),
        webhook_url: format!("https://127.0.0.1:{port}/mutate"),
        ca_pem: cp.pki().ca.cert_pem().into(),
        install_crds: true,
        visibility_port: Some(visibility_port),
    };
    eprintln!("installing the chart (release {RELEASE})…");
    install.install(cp).await?;
    wait_crds_established(&client).await?;

    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let setup = ComponentSetup::prepare(cp, &install, listen, TOKEN_TTL).await?;
    eprintln!("starting the webhook and the scheduler…");
    let components = Components::start(setup).await?;

    create_demo(&client).await?;
    install::wait_webhook_effective(&client, DEMO_NAMESPACE).await?;

    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::copy(cp.kubeconfig(), out).with_context(|| format!("writing {}", out.display()))?;
    restrict(out)?;
    let path = std::fs::canonicalize(out)?;

    let dashboard = koord_queue_tests::dashboard::args(cp, Duration::from_secs(3))?;
    let dashboard = koord_queue_dashboard::serve(&dashboard).await?;
    let token = koord_queue_tests::dashboard::admin_token(cp, TOKEN_TTL).await?;
    let token_file = token_path(&path);
    std::fs::write(&token_file, &token)
        .with_context(|| format!("writing {}", token_file.display()))?;
    restrict(&token_file)?;
    let link = dashboard.ticket(&token)?;
    print_banner(cp, &install, &components, &path);
    println!("Dashboard:     {link}");
    println!(
        "  (signs in once as the demo administrator; later sign in at http://{}/signin with the token in {})",
        dashboard.addr,
        token_file.display()
    );
    println!();
    println!("Press Ctrl-C to stop.");
    Ok((components, dashboard))
}

/// The chart's CRDs must be served before quotas can be created.
async fn wait_crds_established(client: &kube::Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [
        "queues.scheduling.x-k8s.io",
        "queueunits.scheduling.x-k8s.io",
        "elasticquotas.scheduling.sigs.k8s.io",
    ] {
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api.clone(), name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {name} not established after 30s"))??;
    }
    Ok(())
}

/// Namespace `demo` (opted in; jobs without a quota label go to `team-a`)
/// and the quotas `team-a` and `team-b` (min 8, max 48 CPU each, under the
/// root whose capacity is the nodes').
async fn create_demo(client: &kube::Client) -> Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": DEMO_NAMESPACE,
            "labels": { keys::ENABLED_NAMESPACE_LABEL: "true" },
            "annotations": { keys::DEFAULT_QUEUE_ANNOTATION: "team-a" },
        },
    }))?;
    Api::<Namespace>::all(client.clone())
        .patch(
            DEMO_NAMESPACE,
            &PatchParams::apply("koord-queue-local-run").force(),
            &Patch::Apply(&ns),
        )
        .await
        .context("creating the demo namespace")?;
    for quota in ["team-a", "team-b"] {
        e2e::create_quota_serving(
            client,
            quota,
            None,
            false,
            ("8", "48"),
            None,
            &[DEMO_NAMESPACE],
        )
        .await?;
    }
    Ok(())
}

/// The kubeconfig holds the admin's key: owner-only.
fn restrict(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

fn print_banner(
    cp: &ControlPlane,
    install: &LocalInstall,
    components: &Components,
    kubeconfig: &Path,
) {
    let k = kubeconfig.display();
    println!();
    println!("Koord-Queue is running on a local control plane.");
    println!("  API server:  {}", cp.server());
    println!("  nodes:       {} (kwok)", cp.nodes().join(", "));
    println!(
        "  webhook:     {} as {} (admin http://{})",
        install.webhook_url,
        install.user("webhook"),
        components.webhook.admin_addr
    );
    println!(
        "  scheduler:   leader of Lease {}/{RELEASE}-scheduler as {} (admin http://{})",
        install.namespace,
        install.user("scheduler"),
        components.scheduler.admin_addr
    );
    println!(
        "  demo:        namespace {DEMO_NAMESPACE} (opted in, default queue team-a); ElasticQuotas team-a, team-b in {}",
        install.namespace
    );
    println!("  logs:        {}", cp.dir().display());
    println!("  kubeconfig:  {k}");
    println!();
    println!("Try:");
    println!("  export KUBECONFIG={k}");
    println!("  kubectl -n {DEMO_NAMESPACE} create job hello --image=busybox -- echo hello");
    println!("  kubectl -n {DEMO_NAMESPACE} get queueunits");
    println!(
        "  kubectl -n {DEMO_NAMESPACE} get pendingunits   # the visibility API: place and reason of each waiting job"
    );
    println!("  kubectl get quotausages -A");
    println!("  kubectl -n {DEMO_NAMESPACE} describe job hello");
    println!("  kubectl -n {DEMO_NAMESPACE} get jobs,pods");
    println!(
        "  kubectl -n koord-queue get queues,elasticquotas   # team-b: label a job quota.scheduling.koordinator.sh/name=team-b"
    );
    println!();
}
