//! Server-side sessions: a signed-in user's client (carrying the user's
//! token) kept under a random id that the browser holds in an HttpOnly,
//! SameSite=Strict cookie. The token never goes back to the browser; a
//! session ends at sign-out or after its lifetime, whichever comes first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::identity::User;

/// The cookie's name.
pub const COOKIE: &str = "kq_session";

/// One signed-in user.
#[derive(Clone)]
pub struct Session {
    /// Who.
    pub user: User,
    /// Reads as the user.
    pub client: kube::Client,
    /// The namespaces the user asked to see (besides a ServiceAccount's own):
    /// a tenant may not list namespaces, so it names them at sign-in.
    pub namespaces: Vec<String>,
    /// When it ends.
    pub expires: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("user", &self.user)
            .field("namespaces", &self.namespaces)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// The sessions of this process (a restart signs everybody out, which is
/// what a read-only view can afford).
#[derive(Clone, Debug)]
pub struct Sessions {
    inner: Arc<Mutex<HashMap<String, Session>>>,
    lifetime: Duration,
    limit: usize,
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The operating system gave no random bytes.
    #[error("no randomness for a session id: {0}")]
    Random(String),
    /// Too many sessions at once.
    #[error("too many open sessions; try again later")]
    Full,
}

impl Sessions {
    /// A store whose sessions last `lifetime`, at most `limit` at once.
    pub fn new(lifetime: Duration, limit: usize) -> Self {
        Self {
            inner: Arc::default(),
            lifetime,
            limit,
        }
    }

    /// How long a session lasts.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Opens a session; returns its id.
    pub fn open(
        &self,
        user: User,
        client: kube::Client,
        namespaces: Vec<String>,
    ) -> Result<String, SessionError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| SessionError::Random(e.to_string()))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, s| s.expires > now);
        if map.len() >= self.limit {
            return Err(SessionError::Full);
        }
        map.insert(
            id.clone(),
            Session {
                user,
                client,
                namespaces,
                expires: now + self.lifetime,
            },
        );
        Ok(id)
    }

    /// Keeps `session` under `key` (the proxy mode's cache, keyed by the
    /// forwarded token), replacing what was there.
    pub fn keep(&self, key: &str, user: User, client: kube::Client) {
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, s| s.expires > now);
        if map.len() >= self.limit {
            // A full cache forgets everything: each user is reviewed again.
            map.clear();
        }
        map.insert(
            key.to_string(),
            Session {
                user,
                client,
                namespaces: Vec::new(),
                expires: now + self.lifetime,
            },
        );
    }

    /// The live session `id`, if any (an expired one is dropped).
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.lock();
        match map.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id`.
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// The `Set-Cookie` value for session `id` (an empty id with no lifetime
/// clears it).
pub fn set_cookie(id: &str, lifetime: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        lifetime.as_secs()
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn client() -> kube::Client {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    fn user() -> User {
        User {
            name: "alice".into(),
            groups: vec![],
        }
    }

    #[tokio::test]
    async fn a_session_is_found_by_its_id_until_it_ends_or_expires() {
        let sessions = Sessions::new(Duration::from_millis(200), 10);
        let id = sessions.open(user(), client(), vec![]).unwrap();
        assert_eq!(id.len(), 64);
        assert!(sessions.get(&id).is_some());
        assert!(sessions.get("not-an-id").is_none());
        let other = sessions.open(user(), client(), vec![]).unwrap();
        assert_ne!(id, other, "ids are random");
        sessions.close(&id);
        assert!(sessions.get(&id).is_none());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(sessions.get(&other).is_none(), "expired");
    }

    #[tokio::test]
    async fn the_store_is_bounded() {
        let sessions = Sessions::new(Duration::from_secs(60), 2);
        sessions.open(user(), client(), vec![]).unwrap();
        sessions.open(user(), client(), vec![]).unwrap();
        assert!(matches!(
            sessions.open(user(), client(), vec![]),
            Err(SessionError::Full)
        ));
    }

    #[test]
    fn cookies_are_read_and_written() {
        assert_eq!(
            cookie_value("a=1; kq_session=xyz; b=2", COOKIE),
            Some("xyz")
        );
        assert_eq!(cookie_value("a=1", COOKIE), None);
        let set = set_cookie("xyz", Duration::from_secs(60), false);
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
    }
}
