//! Readiness: a set of named conditions that must all hold, plus a drain flag
//! that makes the process unready as soon as shutdown starts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Shared readiness state; clones observe the same state.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    conditions: BTreeMap<&'static str, bool>,
    /// What works only in part while the process is ready (say, one job
    /// kind whose API fails): reported by `/readyz`, not failing it.
    degraded: BTreeMap<String, String>,
    draining: bool,
}

impl Readiness {
    /// New readiness with the given conditions, all false.
    pub fn new(conditions: &[&'static str]) -> Self {
        let state = State {
            conditions: conditions.iter().map(|c| (*c, false)).collect(),
            degraded: BTreeMap::new(),
            draining: false,
        };
        Self {
            inner: Arc::new(Mutex::new(state)),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sets a condition (adding it if unknown).
    pub fn set(&self, condition: &'static str, ok: bool) {
        self.with(|s| {
            s.conditions.insert(condition, ok);
        });
    }

    /// Records that `part` works only in part, and why (`None`: it works
    /// again). A degraded part does not make the process unready.
    pub fn degrade(&self, part: &str, why: Option<String>) {
        self.with(|s| match why {
            Some(why) => {
                s.degraded.insert(part.to_string(), why);
            }
            None => {
                s.degraded.remove(part);
            }
        });
    }

    /// The degraded parts, one line each (`part: why`).
    pub fn degraded(&self) -> Vec<String> {
        self.with(|s| {
            s.degraded
                .iter()
                .map(|(part, why)| format!("{part}: {why}"))
                .collect()
        })
    }

    /// Marks the process as draining: unready from now on.
    pub fn start_draining(&self) {
        self.with(|s| s.draining = true);
    }

    /// Whether the process is draining.
    pub fn is_draining(&self) -> bool {
        self.with(|s| s.draining)
    }

    /// `Ok(())` when ready, else the reasons it is not.
    pub fn check(&self) -> Result<(), String> {
        self.with(|s| {
            let mut missing: Vec<String> = s
                .conditions
                .iter()
                .filter(|(_, ok)| !**ok)
                .map(|(name, _)| format!("{name}: not yet"))
                .collect();
            if s.draining {
                missing.insert(0, "shutting down".to_string());
            }
            if missing.is_empty() {
                Ok(())
            } else {
                Err(missing.join("\n"))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_all_conditions_hold_and_not_draining() {
        let r = Readiness::new(&["caches", "cert"]);
        assert!(r.check().unwrap_err().contains("caches"));
        r.set("caches", true);
        r.set("cert", true);
        assert!(r.check().is_ok());
        r.start_draining();
        assert_eq!(r.check().unwrap_err(), "shutting down");
    }
}
