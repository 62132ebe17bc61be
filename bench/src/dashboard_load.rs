//! How long the dashboard's pages take to load in a real browser (issue 42:
//! the overview and a 10,000-unit queue page in ≤ 1 s, p95, with 100,000
//! units): Debian's headless chromium, signed in as the demo administrator,
//! opens each page afresh (a full navigation from a blank page, so the HTML,
//! the script, the live connection and the first figures are all counted)
//! and the page says when it first drew figures (`data-first-draw-ms`, ms
//! from the navigation's start).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use koord_queue_tests::ControlPlane;
use koord_queue_tests::browser::Browser;

use crate::report::percentile;

/// How long one page may take before the run gives up on it.
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// The load times of one page.
#[derive(Clone, Debug)]
pub struct PageLoads {
    /// What was opened (the part after the dashboard's address).
    pub page: String,
    /// Milliseconds from the navigation's start to the first figures drawn.
    pub millis: Vec<f64>,
}

impl PageLoads {
    /// One line for the report.
    pub fn line(&self) -> String {
        let mut sorted = self.millis.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |p| percentile(&sorted, p);
        format!(
            "dashboard {}: p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms ({} loads in headless chromium)",
            self.page,
            q(0.5),
            q(0.95),
            q(1.0),
            self.millis.len()
        )
    }
}

/// Starts the dashboard on `cp` and a browser, signs in with a demo
/// administrator's token and loads each of `pages` (`/#/queue/leaf-0-0-0`)
/// `loads` times, alternating between them.
pub async fn measure(cp: &ControlPlane, pages: &[String], loads: usize) -> Result<Vec<PageLoads>> {
    let dashboard = koord_queue_tests::dashboard::start(cp, Duration::from_secs(5)).await?;
    let base = format!("http://{}", dashboard.addr);
    let token = koord_queue_tests::dashboard::admin_token(cp, Duration::from_secs(3600)).await?;
    let browser = Browser::start(cp.dir(), 1280, 900).await?;
    let result = measure_with(&browser, &base, &token, pages, loads).await;
    let closed = browser.close().await;
    dashboard.stop();
    let measured = result?;
    closed?;
    Ok(measured)
}

async fn measure_with(
    browser: &Browser,
    base: &str,
    token: &str,
    pages: &[String],
    loads: usize,
) -> Result<Vec<PageLoads>> {
    sign_in(browser, base, token).await?;
    let mut measured: Vec<PageLoads> = pages
        .iter()
        .map(|page| PageLoads {
            page: page.clone(),
            millis: Vec::with_capacity(loads),
        })
        .collect();
    // One unmeasured load of each first: the browser's cache of the
    // script and styles is what a person who keeps the dashboard open has.
    for page in pages {
        load(browser, &format!("{base}{page}")).await?;
    }
    for _ in 0..loads {
        for loads in &mut measured {
            let millis = load(browser, &format!("{base}{}", loads.page)).await?;
            loads.millis.push(millis);
        }
    }
    Ok(measured)
}

/// Signs in through the sign-in page's form.
async fn sign_in(browser: &Browser, base: &str, token: &str) -> Result<()> {
    browser.goto(&format!("{base}/signin")).await?;
    let script = format!(
        "document.querySelector('#token').value = {}; document.querySelector('#signin').click(); return true",
        serde_json::to_string(token)?
    );
    browser.eval(&script).await?;
    first_draw(browser, "the overview after signing in").await?;
    Ok(())
}

/// Opens `url` afresh and returns the ms from the navigation's start to
/// the first figures the page drew.
async fn load(browser: &Browser, url: &str) -> Result<f64> {
    browser.goto("about:blank").await?;
    browser.goto(url).await?;
    first_draw(browser, url).await
}

async fn first_draw(browser: &Browser, what: &str) -> Result<f64> {
    let script = "if (location.pathname === '/signin') return 'signed-out'; \
                  return document.body.dataset.firstDrawMs || null";
    let deadline = tokio::time::Instant::now() + PAGE_TIMEOUT;
    loop {
        // The page may still be navigating (no document yet to run in).
        if let Ok(value) = browser.eval(script).await {
            match value.as_str() {
                Some("signed-out") => bail!("the dashboard sent {what} to the sign-in page"),
                Some(ms) => {
                    return ms
                        .parse()
                        .with_context(|| format!("first-draw time {ms:?} of {what}"));
                }
                None => {}
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{what} drew nothing within {PAGE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
