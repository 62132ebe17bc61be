//! `koord-queue-certs`: mint a CA, serving and client certificates as PEM files
//! (`tls.crt` / `tls.key`, as a Kubernetes TLS Secret names them), and
//! `bootstrap`: keep the webhook's self-signed CA and serving certificate in a
//! Secret and the webhook configuration's caBundle in step (certs/README.md).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use koord_queue_certs::bootstrap::{self, BootstrapConfig, parse_duration};
use koord_queue_certs::{Authority, Error, ServingNames, write_pem_pair};

#[derive(Debug, Parser)]
#[command(
    name = "koord-queue-certs",
    version = env!("KOORD_QUEUE_VERSION"),
    about = "Mint TLS material for Koord-Queue"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Mint a new certificate authority into DIR/tls.crt and DIR/tls.key.
    Ca {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Subject common name.
        #[arg(long, default_value = "koord-queue-ca")]
        common_name: String,
        /// Validity in days.
        #[arg(long, default_value_t = 3650)]
        days: u64,
    },
    /// Issue a serving certificate signed by the CA in --ca.
    Serving {
        /// Directory with the CA's tls.crt and tls.key.
        #[arg(long)]
        ca: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// DNS subject alternative name (repeatable).
        #[arg(long = "dns")]
        dns: Vec<String>,
        /// IP subject alternative name (repeatable).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
        /// Add the in-cluster names of Service NAME in --namespace.
        #[arg(long, requires = "namespace")]
        service: Option<String>,
        /// Namespace of --service.
        #[arg(long)]
        namespace: Option<String>,
        /// Subject common name.
        #[arg(long, default_value = "koord-queue-webhook")]
        common_name: String,
        /// Validity in days.
        #[arg(long, default_value_t = 365)]
        days: u64,
    },
    /// Issue a client certificate for a Kubernetes user and its groups.
    Client {
        /// Directory with the CA's tls.crt and tls.key.
        #[arg(long)]
        ca: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// User name (certificate CN).
        #[arg(long)]
        user: String,
        /// Group (certificate O; repeatable, at most two).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Validity in days.
        #[arg(long, default_value_t = 365)]
        days: u64,
    },
    /// Create or reuse the webhook's CA and serving certificate in a
    /// kubernetes.io/tls Secret, patch the caBundle of the webhook
    /// configuration, and renew both before they expire. Uses in-cluster
    /// credentials or KUBECONFIG. Once by default (an init container or a
    /// Job); with --watch, every --interval until SIGTERM (a sidecar or a
    /// Deployment).
    Bootstrap(BootstrapArgs),
}

#[derive(Debug, clap::Args)]
struct BootstrapArgs {
    /// Namespace of the Secret (and of --service).
    #[arg(long, env = "KQ_CERTS_NAMESPACE")]
    namespace: String,
    /// Name of the kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt, ca.key).
    #[arg(long, env = "KQ_CERTS_SECRET")]
    secret: String,
    /// MutatingWebhookConfiguration whose webhooks get the CA bundle.
    #[arg(long, env = "KQ_CERTS_WEBHOOK_CONFIGURATION")]
    webhook_configuration: Option<String>,
    /// APIService whose caBundle is kept (the visibility API's).
    #[arg(long, env = "KQ_CERTS_API_SERVICE")]
    api_service: Option<String>,
    /// Service whose in-cluster names the certificate covers
    /// (<svc>, <svc>.<ns>, <svc>.<ns>.svc, <svc>.<ns>.svc.cluster.local).
    #[arg(long, env = "KQ_CERTS_SERVICE")]
    service: Option<String>,
    /// Further DNS name (repeatable).
    #[arg(long = "dns")]
    dns: Vec<String>,
    /// IP address (repeatable).
    #[arg(long = "ip")]
    ips: Vec<IpAddr>,
    /// Validity of a new serving certificate (s, m, h or d).
    #[arg(long, default_value = "365d", value_parser = parse_duration)]
    cert_validity: Duration,
    /// Renew the serving certificate this long before it expires.
    #[arg(long, default_value = "30d", value_parser = parse_duration)]
    renew_before: Duration,
    /// Validity of a new CA.
    #[arg(long, default_value = "3650d", value_parser = parse_duration)]
    ca_validity: Duration,
    /// Rotate the CA this long before it expires (the old CA stays in the
    /// bundle until it expires).
    #[arg(long, default_value = "365d", value_parser = parse_duration)]
    ca_renew_before: Duration,
    /// Also write tls.crt, tls.key and ca.crt into this directory (e.g. an
    /// emptyDir shared with the webhook container).
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Keep running: check (and renew, repair) every --interval until SIGTERM.
    #[arg(long)]
    watch: bool,
    /// Interval of --watch.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    interval: Duration,
}

impl BootstrapArgs {
    fn config(&self) -> BootstrapConfig {
        let mut names = match &self.service {
            Some(svc) => ServingNames::for_service(svc, &self.namespace),
            None => ServingNames::default(),
        };
        names.dns.extend(self.dns.iter().cloned());
        names.ips.extend(self.ips.iter().copied());
        let common_name = match &self.service {
            Some(svc) => format!("{svc}.{}.svc", self.namespace),
            None => names
                .dns
                .first()
                .cloned()
                .unwrap_or_else(|| "koord-queue-webhook".into()),
        };
        BootstrapConfig {
            namespace: self.namespace.clone(),
            secret: self.secret.clone(),
            webhook_configuration: self.webhook_configuration.clone(),
            api_service: self.api_service.clone(),
            names,
            common_name,
            cert_validity: self.cert_validity,
            renew_before: self.renew_before,
            ca_validity: self.ca_validity,
            ca_renew_before: self.ca_renew_before,
            out_dir: self.out_dir.clone(),
        }
    }
}

/// Runs `bootstrap` on a runtime of its own (the other commands need none).
fn run_bootstrap(args: &BootstrapArgs) -> Result<(), String> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let config = args.config();
    config.validate().map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(async {
        koord_queue_certs::install_crypto_provider();
        let client = kube::Client::try_default()
            .await
            .map_err(|e| format!("cannot build a Kubernetes client: {e}"))?;
        if args.watch {
            bootstrap::watch(&client, &config, args.interval, stop_signal())
                .await
                .map_err(|e| e.to_string())
        } else {
            let report = bootstrap::reconcile(&client, &config, time::OffsetDateTime::now_utc())
                .await
                .map_err(|e| e.to_string())?;
            bootstrap::log_report(&config, &report);
            println!(
                "{}/{}: {:?}; serving certificate valid until {}, CA until {}",
                config.namespace,
                config.secret,
                report.change,
                report.cert_not_after,
                report.ca_not_after
            );
            Ok(())
        }
    })
}

/// Resolves on SIGTERM or SIGINT (a pod being stopped, Ctrl-C).
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n.saturating_mul(24 * 3600))
}

fn load_ca(dir: &Path) -> Result<Authority, Error> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|source| Error::Io { path, source })
    };
    Authority::from_pem(
        &read(koord_queue_certs::CERT_FILE)?,
        &read(koord_queue_certs::KEY_FILE)?,
    )
}

fn run(command: Command) -> Result<PathBuf, Error> {
    match command {
        Command::Ca {
            out,
            common_name,
            days: d,
        } => {
            let ca = Authority::generate(&common_name, days(d))?;
            write_pem_pair(&out, ca.cert_pem(), &ca.cert().key_pem)?;
            Ok(out)
        }
        Command::Serving {
            ca,
            out,
            dns,
            ips,
            service,
            namespace,
            common_name,
            days: d,
        } => {
            let ca = load_ca(&ca)?;
            let mut names = match (service, namespace) {
                (Some(svc), Some(ns)) => ServingNames::for_service(&svc, &ns),
                _ => ServingNames::default(),
            };
            names.dns.extend(dns);
            names.ips.extend(ips);
            let cert = ca.issue_serving(&common_name, &names, days(d))?;
            write_pem_pair(&out, &cert.cert_pem, &cert.key_pem)?;
            Ok(out)
        }
        Command::Client {
            ca,
            out,
            user,
            groups,
            days: d,
        } => {
            let ca = load_ca(&ca)?;
            let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
            let cert = ca.issue_client(&user, &groups, days(d))?;
            write_pem_pair(&out, &cert.cert_pem, &cert.key_pem)?;
            Ok(out)
        }
        Command::Bootstrap(_) => Err(Error::Invalid("bootstrap runs on its own".into())),
    }
}

fn main() -> ExitCode {
    let Args { command } = Args::parse();
    if let Command::Bootstrap(args) = &command {
        return match run_bootstrap(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("koord-queue-certs bootstrap: {error}");
                ExitCode::FAILURE
            }
        };
    }
    match run(command) {
        Ok(out) => {
            println!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("koord-queue-certs: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_flags_parse_as_the_chart_passes_them() {
        let args = Args::try_parse_from([
            "koord-queue-certs",
            "bootstrap",
            "--namespace=koord-queue",
            "--secret=kq-webhook-tls",
            "--webhook-configuration=kq-webhook",
            "--service=kq-webhook",
            "--cert-validity=8760h",
            "--renew-before=720h",
            "--ca-validity=87600h",
            "--ca-renew-before=8760h",
            "--watch",
            "--interval=10m",
        ])
        .unwrap();
        let Command::Bootstrap(b) = args.command else {
            panic!("not bootstrap");
        };
        let config = b.config();
        config.validate().unwrap();
        assert!(b.watch);
        assert_eq!(b.interval, Duration::from_secs(600));
        assert_eq!(config.common_name, "kq-webhook.koord-queue.svc");
        assert_eq!(
            config.names.dns.last().map(String::as_str),
            Some("kq-webhook.koord-queue.svc.cluster.local")
        );
        assert!(
            Args::try_parse_from([
                "koord-queue-certs",
                "bootstrap",
                "--namespace=x",
                "--secret=y",
                "--renew-before=1y"
            ])
            .is_err()
        );
    }
}
