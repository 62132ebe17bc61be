//! Koord-Queue scheduler.
