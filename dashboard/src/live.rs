//! Live pages: a server-sent event stream per open page. The server
//! re-reads the page's view as the signed-in user every `refresh` and
//! pushes it when it changed, so the browser redraws without reloading and
//! the reads stay the user's own. The stream ends when the session does.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use crate::session::Sessions;
use crate::viewer::Viewer;
use crate::views::{self, ViewError, ViewParams};

/// Whose stream: a session of the store (ended by sign-out or expiry), or a
/// request authenticated by the proxy (ends when the browser leaves).
#[derive(Clone, Debug)]
pub enum Holder {
    /// Session `id` of `sessions`.
    Session(Sessions, String),
    /// A proxied user: nothing to check between reads.
    Proxied,
}

impl Holder {
    fn alive(&self) -> bool {
        match self {
            Self::Session(sessions, id) => sessions.get(id).is_some(),
            Self::Proxied => true,
        }
    }
}

/// What the stream remembers between two reads.
struct Tick {
    viewer: Viewer,
    params: ViewParams,
    holder: Holder,
    refresh: Duration,
    last: Option<String>,
    first: bool,
    ended: bool,
}

/// The event stream of `params`'s view for `viewer`.
pub fn stream(
    viewer: Viewer,
    params: ViewParams,
    holder: Holder,
    refresh: Duration,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let start = Tick {
        viewer,
        params,
        holder,
        refresh,
        last: None,
        first: true,
        ended: false,
    };
    let events = futures::stream::unfold(start, |mut tick| async move {
        loop {
            if tick.ended {
                return None;
            }
            if !tick.first {
                tokio::time::sleep(tick.refresh).await;
            }
            tick.first = false;
            if !tick.holder.alive() {
                tick.ended = true;
                let event = Event::default()
                    .event("signed-out")
                    .data("the session ended");
                return Some((Ok(event), tick));
            }
            let event = match views::build(&tick.viewer, &tick.params).await {
                Ok(view) => {
                    let text = view.to_string();
                    if tick.last.as_deref() == Some(text.as_str()) {
                        continue;
                    }
                    tick.last = Some(text.clone());
                    Event::default().event("view").data(text)
                }
                Err(ViewError::BadRequest(why)) => {
                    tick.ended = true;
                    Event::default().event("problem").data(why)
                }
                // A failed read is told, and tried again next time.
                Err(ViewError::Read(e)) => {
                    tick.last = None;
                    Event::default().event("problem").data(e.to_string())
                }
            };
            return Some((Ok(event), tick));
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
