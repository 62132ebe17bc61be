//! Answers kept as the bytes sent, for as long as the state they were read
//! from stands.
//!
//! Working out a 10,000-unit backlog takes the scheduler's controller
//! ~20 ms — time its decision loop does not decide — and serializing it
//! another ~6 ms. Dashboards and `kubectl get -w` ask the same questions
//! again and again, mostly while nothing changed. The controller stamps each
//! answer with the generation of its state (bumped by every input, write
//! result, cycle and leadership change); the API keeps the serialized answer
//! under that stamp and, next time, asks "anything new since generation
//! g?" ([`crate::Query::known`]): while g stands the controller replies
//! `Unchanged` without rendering anything, and the kept bytes are sent.
//!
//! Authorization is not cached: it is done for every request before the
//! cache is looked at, and an answer depends only on what is asked (not on
//! who asks), so one user's answer is the next one's.
//!
//! An answer is kept as sent — gzipped for a client that accepts gzip, so
//! the 4.7 MB of a 10,000-unit backlog is not compressed again for every
//! request. Bounded by bytes; the least recently used answer goes first.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Bytes;

use crate::queries::{Ask, Page};

/// What an answer is kept under: the question, the page, the format.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// What was asked.
    pub ask: Ask,
    /// Which page.
    pub page: Page,
    /// As a `kubectl get` table (else the list object).
    pub table: bool,
    /// For a client that accepts gzip.
    pub gzip: bool,
}

/// An answer as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The body.
    pub body: Bytes,
    /// Whether `body` is gzipped.
    pub gzipped: bool,
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    kept: Kept,
    last_used: u64,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<CacheKey, Entry>,
    bytes: usize,
    /// Counts uses, to find the least recently used entry.
    clock: u64,
}

/// The kept answers, at most `max_bytes` of them.
#[derive(Debug)]
pub struct AnswerCache {
    entries: Mutex<Entries>,
    max_bytes: usize,
}

/// What the API keeps by default: a 10,000-unit backlog is ~4.7 MB whole
/// and as much again in `kubectl`'s pages of 500.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

impl AnswerCache {
    /// An empty cache of at most `max_bytes` (0: keeps nothing).
    pub fn new(max_bytes: usize) -> Self {
        Self {
            entries: Mutex::new(Entries::default()),
            max_bytes,
        }
    }

    /// The generation the answer to `key` is kept at, if one is.
    pub fn generation(&self, key: &CacheKey) -> Option<u64> {
        let entries = self.entries.lock().ok()?;
        entries.by_key.get(key).map(|e| e.generation)
    }

    /// The answer to `key` kept at `generation` (not at another one: a
    /// newer answer may have replaced the one the owner said still stands).
    pub fn get(&self, key: &CacheKey, generation: u64) -> Option<Kept> {
        let mut entries = self.entries.lock().ok()?;
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries
            .by_key
            .get_mut(key)
            .filter(|e| e.generation == generation)?;
        entry.last_used = now;
        Some(entry.kept.clone())
    }

    /// Keeps `kept` as the answer to `key` at `generation`, evicting the
    /// least recently used answers to stay within the bound. An answer read
    /// at an older generation than the one kept does not replace it.
    pub fn put(&self, key: CacheKey, generation: u64, kept: Kept) {
        let size = kept.body.len();
        if size > self.max_bytes {
            return;
        }
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        let entries = &mut *entries;
        if entries
            .by_key
            .get(&key)
            .is_some_and(|e| e.generation > generation)
        {
            return;
        }
        if let Some(old) = entries.by_key.remove(&key) {
            entries.bytes -= old.kept.body.len();
        }
        while entries.bytes + size > self.max_bytes {
            let Some(oldest) = entries
                .by_key
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(gone) = entries.by_key.remove(&oldest) {
                entries.bytes -= gone.kept.body.len();
            }
        }
        entries.clock += 1;
        entries.bytes += size;
        let last_used = entries.clock;
        entries.by_key.insert(
            key,
            Entry {
                generation,
                kept,
                last_used,
            },
        );
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.entries.lock().map(|e| e.bytes).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(queue: &str) -> CacheKey {
        CacheKey {
            ask: Ask::Queue(queue.into()),
            page: Page::default(),
            table: false,
            gzip: false,
        }
    }

    fn body(len: usize) -> Kept {
        Kept {
            body: Bytes::from(vec![b'x'; len]),
            gzipped: false,
        }
    }

    #[test]
    fn an_answer_is_given_back_only_at_its_generation() {
        let cache = AnswerCache::new(1000);
        assert_eq!(cache.generation(&key("a")), None);
        cache.put(key("a"), 7, body(10));
        assert_eq!(cache.generation(&key("a")), Some(7));
        assert_eq!(cache.get(&key("a"), 7), Some(body(10)));
        assert_eq!(cache.get(&key("a"), 8), None);
        assert_eq!(cache.get(&key("b"), 7), None);
        // A table of the same question is another answer, and so is its
        // gzipped form.
        let table = CacheKey {
            table: true,
            ..key("a")
        };
        assert_eq!(cache.get(&table, 7), None);
        let gzip = CacheKey {
            gzip: true,
            ..key("a")
        };
        assert_eq!(cache.get(&gzip, 7), None);
    }

    #[test]
    fn a_newer_answer_replaces_an_older_one_and_never_the_reverse() {
        let cache = AnswerCache::new(1000);
        cache.put(key("a"), 7, body(10));
        cache.put(key("a"), 9, body(20));
        assert_eq!(cache.get(&key("a"), 9), Some(body(20)));
        cache.put(key("a"), 8, body(30));
        assert_eq!(cache.generation(&key("a")), Some(9));
        assert_eq!(cache.bytes(), 20);
    }

    #[test]
    fn the_least_recently_used_answers_go_first_within_the_bound() {
        let cache = AnswerCache::new(100);
        cache.put(key("a"), 1, body(40));
        cache.put(key("b"), 1, body(40));
        // `a` is used again: `b` is now the least recently used.
        assert!(cache.get(&key("a"), 1).is_some());
        cache.put(key("c"), 1, body(40));
        assert_eq!(cache.generation(&key("b")), None);
        assert_eq!(cache.generation(&key("a")), Some(1));
        assert_eq!(cache.generation(&key("c")), Some(1));
        assert_eq!(cache.bytes(), 80);
        // Larger than the whole bound: not kept, nothing evicted for it.
        cache.put(key("d"), 1, body(101));
        assert_eq!(cache.generation(&key("d")), None);
        assert_eq!(cache.bytes(), 80);
    }
}
