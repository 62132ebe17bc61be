//! The read-only web dashboard (issue 42): the quota tree, the queues,
//! every waiting unit and the scheduler's history, live.
//!
//! It has no rights of its own. A user signs in with a bearer token, which
//! the API server checks (`identity.rs`, a SelfSubjectReview); the server
//! keeps it in a server-side session (`session.rs`) and makes every read
//! with it (`reads.rs`, `viewer.rs`), so RBAC decides what each person
//! sees. Behind an authenticating proxy it takes the forwarded
//! `Authorization` header instead (`--proxy-auth`). `views/` builds each
//! page's data, `live.rs` streams it as server-sent events, `routes.rs` is
//! the HTTP side, `assets.rs` the pages built into the binary.

pub mod amounts;
pub mod assets;
pub mod cluster;
pub mod identity;
pub mod live;
pub mod reads;
pub mod routes;
pub mod session;
pub mod ticket;
pub mod viewer;
pub mod views;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

/// The dashboard's flags.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "koord-queue-dashboard", version = env!("KOORD_QUEUE_VERSION"))]
pub struct Args {
    /// Address to serve on. The chart puts a Service in front; locally keep
    /// it on 127.0.0.1.
    #[arg(
        long,
        env = "KOORD_QUEUE_DASHBOARD_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub addr: SocketAddr,
    /// kube-apiserver's URL (default: the in-cluster service address).
    #[arg(long)]
    pub server: Option<String>,
    /// PEM bundle of the CA the API server's certificate chains to.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Take the user from an `Authorization: Bearer` header forwarded by an
    /// authenticating proxy in front (sign-in still works without one).
    #[arg(long)]
    pub proxy_auth: bool,
    /// How often a live page is re-read for its user.
    #[arg(long, value_parser = koord_queue_model::parse_duration, default_value = "5s")]
    pub refresh: Duration,
    /// How long a session lasts after sign-in.
    #[arg(long, value_parser = koord_queue_model::parse_duration, default_value = "8h")]
    pub session_lifetime: Duration,
    /// Sessions open at most at once.
    #[arg(long, default_value_t = 1000)]
    pub max_sessions: usize,
    /// Mark the session cookie `Secure` (the dashboard is reached over HTTPS).
    #[arg(long)]
    pub secure_cookie: bool,
    /// Log filter (`RUST_LOG` syntax).
    #[arg(long, default_value = "info,kube=warn")]
    pub log_filter: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = koord_queue_runtime::LogFormat::Plain)]
    pub log_format: koord_queue_runtime::LogFormat,
}

/// A serving dashboard.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    tickets: ticket::Tickets,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// A one-time sign-in link for `token` (`/signin/ticket/<code>`, valid
    /// ten minutes): `make run` prints one for the demo administrator.
    pub fn ticket(&self, token: &str) -> anyhow::Result<String> {
        let code = self
            .tickets
            .issue(token)
            .map_err(|e| anyhow::anyhow!("no randomness for a code: {e}"))?;
        Ok(format!("http://{}/signin/ticket/{code}", self.addr))
    }

    /// Waits until the server stops (an error of the listener).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task
            .await
            .context("the server task")?
            .context("serving")
    }

    /// Stops serving.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Binds `args.addr` and serves until stopped.
pub async fn serve(args: &Args) -> anyhow::Result<Running> {
    let cluster = cluster::Cluster::new(args.server.as_deref(), args.ca_file.as_deref())?;
    let state = routes::AppState {
        cluster,
        sessions: session::Sessions::new(args.session_lifetime, args.max_sessions),
        // A forwarded token is reviewed again after a minute, so a revoked
        // one stops working soon without a review per request.
        proxied: args
            .proxy_auth
            .then(|| session::Sessions::new(Duration::from_secs(60), args.max_sessions)),
        refresh: args.refresh,
        secure_cookie: args.secure_cookie,
        tickets: ticket::Tickets::default(),
    };
    let tickets = state.tickets.clone();
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("binding {}", args.addr))?;
    let addr = listener.local_addr()?;
    let app = routes::router(state);
    let task = tokio::spawn(async move { axum::serve(listener, app).await });
    tracing::info!(%addr, "dashboard serving");
    Ok(Running {
        addr,
        tickets,
        task,
    })
}
