//! `koord-queue-certs`: mint a CA, serving and client certificates as PEM files
//! (`tls.crt` / `tls.key`, as a Kubernetes TLS Secret names them).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use koord_queue_certs::{Authority, Error, ServingNames, write_pem_pair};

#[derive(Debug, Parser)]
#[command(
    name = "koord-queue-certs",
    version,
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

fn run(Args { command }: Args) -> Result<PathBuf, Error> {
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
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
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
