//! One-time sign-in links for whoever started the process (`make run`
//! prints one for the demo administrator): a random code that stands for a
//! token for a few minutes and is spent on first use. Codes are made only
//! in-process ([`crate::Running::ticket`]); no request can make one, and
//! the token itself never appears in a URL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a code may wait for its use.
const VALID_FOR: Duration = Duration::from_secs(600);

/// The open codes.
#[derive(Clone, Debug, Default)]
pub struct Tickets {
    inner: Arc<Mutex<HashMap<String, (String, Instant)>>>,
}

impl Tickets {
    /// A new code standing for `token`.
    pub fn issue(&self, token: &str) -> Result<String, getrandom::Error> {
        let mut bytes = [0u8; 24];
        getrandom::fill(&mut bytes)?;
        let code: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        map.retain(|_, (_, until)| *until > now);
        map.insert(code.clone(), (token.to_string(), now + VALID_FOR));
        Ok(code)
    }

    /// The token of `code`, once: the code is spent.
    pub fn redeem(&self, code: &str) -> Option<String> {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (token, until) = map.remove(code)?;
        (until > Instant::now()).then_some(token)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_code_is_spent_on_first_use() {
        let tickets = Tickets::default();
        let code = tickets.issue("secret").unwrap();
        assert!(!code.contains("secret"));
        assert_eq!(tickets.redeem(&code).as_deref(), Some("secret"));
        assert_eq!(tickets.redeem(&code), None);
        assert_eq!(tickets.redeem("made-up"), None);
    }
}
