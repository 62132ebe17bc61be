//! A TCP proxy in front of the API server, for faults between one client
//! and the API: cut (open connections drop, new ones hang unanswered, as
//! when the API server is unreachable) or slowed (every chunk each way
//! waits, as a stalled client or a congested link). And [`Balancer`], a
//! TCP load balancer over replicas of a component, as a Service over the
//! ready pods of a Deployment.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to traffic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Passes everything at once.
    Open,
    /// Drops open connections; new ones are held unanswered until healed.
    Cut,
    /// Passes everything, each chunk after this delay.
    Delay(Duration),
}

/// A running proxy; stops with the test's runtime.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
}

impl Proxy {
    /// A proxy on a free loopback port to `upstream` (an `https://host:port`
    /// URL or `host:port`).
    pub async fn start(upstream: &str) -> Result<Self> {
        let upstream: SocketAddr = upstream
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .with_context(|| format!("proxy upstream {upstream}"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Open);
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                tokio::spawn(serve(down, upstream, mode_rx.clone()));
            }
        });
        Ok(Self { addr, mode })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://` URL of the proxy.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

async fn serve(mut down: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    if *mode.borrow_and_update() == Mode::Cut {
        // Hold the connection without answering until healed; then drop
        // it (the client retries on a fresh one).
        let _ = mode.wait_for(|m| *m != Mode::Cut).await;
        return;
    }
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut down_r, mut down_w) = down.split();
    let (mut up_r, mut up_w) = up.split();
    let cut = {
        let mut mode = mode.clone();
        async move {
            let _ = mode.wait_for(|m| *m == Mode::Cut).await;
        }
    };
    tokio::select! {
        _ = pump(&mut down_r, &mut up_w, mode.clone()) => {}
        _ = pump(&mut up_r, &mut down_w, mode.clone()) => {}
        _ = cut => {}
    }
}

/// Copies `from` to `to`, each chunk delayed as the mode says.
async fn pump<R, W>(from: &mut R, to: &mut W, mode: watch::Receiver<Mode>)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay = match *mode.borrow() {
            Mode::Delay(d) => Some(d),
            _ => None,
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A backend of a [`Balancer`].
#[derive(Clone, Copy, Debug)]
pub struct Backend {
    /// Where its connections go.
    pub addr: SocketAddr,
    /// Its plain-HTTP admin address: the backend counts as ready while
    /// `GET /readyz` there answers 200. `None`: ready while it accepts
    /// connections.
    pub readyz: Option<SocketAddr>,
}

#[derive(Debug)]
struct BackendState {
    backend: Backend,
    ready: AtomicBool,
    connections: AtomicU64,
    open: AtomicU64,
}

/// A TCP load balancer on a free loopback port: each connection goes, in
/// turn, to a ready backend that accepts it (as a Service routes to the
/// ready endpoints of a Deployment), else to any backend that accepts it;
/// a connection no backend accepts is closed. Readiness is probed every
/// 200 ms. Bytes pass unchanged (TLS ends at the backend). Stops when
/// dropped.
#[derive(Debug)]
pub struct Balancer {
    addr: SocketAddr,
    backends: Arc<Vec<BackendState>>,
    unserved: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long a backend may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

impl Balancer {
    /// Starts balancing over `backends` (all counted ready until probed).
    pub async fn start(backends: &[Backend]) -> Result<Self> {
        anyhow::ensure!(!backends.is_empty(), "a balancer needs a backend");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let states: Arc<Vec<BackendState>> = Arc::new(
            backends
                .iter()
                .map(|b| BackendState {
                    backend: *b,
                    ready: AtomicBool::new(true),
                    connections: AtomicU64::new(0),
                    open: AtomicU64::new(0),
                })
                .collect(),
        );
        let unserved = Arc::new(AtomicU64::new(0));
        let probe = {
            let states = states.clone();
            tokio::spawn(async move {
                loop {
                    for state in states.iter() {
                        let ready = probe_ready(&state.backend).await;
                        state.ready.store(ready, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        };
        let accept = {
            let (states, unserved) = (states.clone(), unserved.clone());
            let next = Arc::new(AtomicUsize::new(0));
            tokio::spawn(async move {
                while let Ok((down, _)) = listener.accept().await {
                    let (states, unserved) = (states.clone(), unserved.clone());
                    let first = next.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(async move {
                        match connect_live(&states, first).await {
                            Some((i, up)) => {
                                states[i].connections.fetch_add(1, Ordering::Relaxed);
                                states[i].open.fetch_add(1, Ordering::Relaxed);
                                relay(down, up).await;
                                states[i].open.fetch_sub(1, Ordering::Relaxed);
                            }
                            None => {
                                unserved.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            })
        };
        Ok(Self {
            addr,
            backends: states,
            unserved,
            tasks: vec![probe, accept],
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://` URL of the balancer.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Connections sent to each backend so far, in the order given.
    pub fn connections(&self) -> Vec<u64> {
        self.backends
            .iter()
            .map(|b| b.connections.load(Ordering::Relaxed))
            .collect()
    }

    /// Connections open now to each backend, in the order given.
    pub fn open(&self) -> Vec<u64> {
        self.backends
            .iter()
            .map(|b| b.open.load(Ordering::Relaxed))
            .collect()
    }

    /// Connections closed because no backend accepted them.
    pub fn unserved(&self) -> u64 {
        self.unserved.load(Ordering::Relaxed)
    }

    /// Whether each backend was ready at its last probe.
    pub fn ready(&self) -> Vec<bool> {
        self.backends
            .iter()
            .map(|b| b.ready.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn probe_ready(backend: &Backend) -> bool {
    let Some(admin) = backend.readyz else {
        return tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(backend.addr))
            .await
            .is_ok_and(|c| c.is_ok());
    };
    let probe = async {
        let mut stream = TcpStream::connect(admin).await.ok()?;
        stream
            .write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await
            .ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.ok()?;
        Some(head.ends_with(b" 200"))
    };
    tokio::time::timeout(CONNECT_TIMEOUT, probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// The first backend from `first` on, ready ones before the others, that
/// accepts a connection.
async fn connect_live(states: &[BackendState], first: usize) -> Option<(usize, TcpStream)> {
    let n = states.len();
    let order = (0..n).map(|k| (first + k) % n);
    let (ready, unready): (Vec<usize>, Vec<usize>) =
        order.partition(|&i| states[i].ready.load(Ordering::Relaxed));
    for i in ready.into_iter().chain(unready) {
        if let Ok(Ok(up)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(states[i].backend.addr)).await
        {
            return Some((i, up));
        }
    }
    None
}

async fn relay(mut down: TcpStream, mut up: TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that answers each connection with its name and closes it.
    async fn named(name: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let _ = c.write_all(name).await;
            }
        });
        (addr, task)
    }

    async fn ask(balancer: &Balancer) -> Vec<u8> {
        let mut c = TcpStream::connect(balancer.addr()).await.unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out).await;
        out
    }

    #[tokio::test]
    async fn connections_go_in_turn_to_the_backends_that_accept_them() {
        let (a, a_task) = named(b"a").await;
        let (b, _b_task) = named(b"b").await;
        let backends = [a, b].map(|addr| Backend { addr, readyz: None });
        let balancer = Balancer::start(&backends).await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(ask(&balancer).await);
        }
        assert!(seen.contains(&b"a".to_vec()) && seen.contains(&b"b".to_vec()));
        // a goes away: every connection reaches b.
        a_task.abort();
        let _ = a_task.await;
        for _ in 0..4 {
            assert_eq!(ask(&balancer).await, b"b");
        }
        assert_eq!(balancer.unserved(), 0);
        assert_eq!(balancer.connections().iter().sum::<u64>(), 8);
    }
}
