//! Koord-Queue webhook.
