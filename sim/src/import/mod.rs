//! Traces from elsewhere: the Parallel Workloads Archive's Standard
//! Workload Format (`swf.rs`), a live cluster (`export.rs`), the
//! benchmark's shapes (`shape.rs`).

pub mod export;
pub mod objects;
pub mod shape;
pub mod swf;
