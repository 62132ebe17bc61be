//! A headless browser for end-to-end tests of web pages: Debian's chromium
//! driven over WebDriver by its chromedriver (both provisioned by
//! `tests/provision/provision.sh`, linked into the tools' bin directory),
//! through the `fantoccini` client. Each [`Browser`] is its own chromedriver
//! process and browser profile; the process dies with the value.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fantoccini::{Client, ClientBuilder};
use serde_json::json;

use crate::process::{Process, free_port};

/// A browser session.
#[derive(Debug)]
pub struct Browser {
    client: Client,
    _driver: Process,
    _profile: tempfile::TempDir,
}

/// The tool at `name` in the tools' bin directory, else on `PATH`.
fn tool(name: &str) -> Result<PathBuf> {
    let provisioned = crate::tools::bin_dir().join(name);
    if provisioned.exists() {
        return Ok(provisioned);
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let candidate = dir.join(name);
        if candidate.exists() {
            return Ok(candidate);
        }
    }
    bail!(
        "{name} is not installed: run `make provision` (it installs chromium and chromium-driver)"
    )
}

impl Browser {
    /// Starts chromedriver and a headless chromium with a window of
    /// `width`×`height`, logging into `log_dir`.
    pub async fn start(log_dir: &Path, width: u32, height: u32) -> Result<Self> {
        let chromium = tool("chromium")?;
        let driver_path = tool("chromedriver")?;
        let port = free_port()?;
        let name = crate::fixtures::unique_name("chromedriver");
        let driver = Process::start(
            &name,
            &driver_path,
            &[format!("--port={port}"), "--allowed-ips=127.0.0.1".into()],
            log_dir.join(format!("{name}.log")),
        )?;
        let profile = tempfile::tempdir()?;
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--disable-background-networking",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let mut last = None;
        // chromedriver takes a moment to listen.
        for _ in 0..100 {
            match ClientBuilder::new(connector.clone())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Ok(Self {
                        client,
                        _driver: driver,
                        _profile: profile,
                    });
                }
                Err(e) => {
                    last = Some(e.to_string());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        bail!(
            "chromedriver at {url} gave no session: {}",
            last.unwrap_or_default()
        )
    }

    /// The WebDriver client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) -> Result<()> {
        self.client
            .goto(url)
            .await
            .with_context(|| format!("opening {url}"))
    }

    /// The text of the first element matching CSS `selector` (read in one
    /// script: a live page may redraw between two WebDriver calls).
    pub async fn text(&self, selector: &str) -> Result<String> {
        let texts = self.texts(selector).await?;
        texts
            .into_iter()
            .next()
            .with_context(|| format!("no element {selector}"))
    }

    /// The texts of every element matching CSS `selector`, in page order.
    pub async fn texts(&self, selector: &str) -> Result<Vec<String>> {
        let script = format!(
            "return [...document.querySelectorAll({})].map(e => e.innerText.trim())",
            serde_json::to_string(selector)?
        );
        Ok(serde_json::from_value(self.eval(&script).await?)?)
    }

    /// Attribute `attribute` of every element matching `selector` that has it.
    pub async fn attributes(&self, selector: &str, attribute: &str) -> Result<Vec<String>> {
        let script = format!(
            "return [...document.querySelectorAll({})].map(e => e.getAttribute({})).filter(a => a !== null)",
            serde_json::to_string(selector)?,
            serde_json::to_string(attribute)?
        );
        Ok(serde_json::from_value(self.eval(&script).await?)?)
    }

    /// Runs `script` in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Result<serde_json::Value> {
        Ok(self.client.execute(script, Vec::new()).await?)
    }

    /// Waits up to `timeout` until `check` (run against the page) is true.
    pub async fn until<F, Fut>(&self, timeout: Duration, what: &str, mut check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = String::new();
        loop {
            match check().await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => last = format!(" (last error: {e:#})"),
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the page did not show {what} within {timeout:?}{last}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Writes a PNG screenshot of the window to `path`.
    pub async fn screenshot(&self, path: &Path) -> Result<()> {
        let png = self.client.screenshot().await?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Ends the session (the driver dies with the value).
    pub async fn close(self) -> Result<()> {
        self.client.close().await?;
        Ok(())
    }
}
