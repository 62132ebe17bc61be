//! A TCP proxy in front of the API server, for faults between one client
//! and the API: cut (open connections drop, new ones hang unanswered, as
//! when the API server is unreachable) or slowed (every chunk each way
//! waits, as a stalled client or a congested link).

use std::net::SocketAddr;
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
