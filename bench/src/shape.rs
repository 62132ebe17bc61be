//! The benchmark's shape (Kueue's baseline and large scale mapped onto
//! ElasticQuotas, and the list of jobs) is defined in the simulator's crate
//! (`koord-queue-sim`, `sim/src/shape.rs`), so that the benchmark and the
//! simulator replay the same stream; the benchmark uses it from there.

pub use koord_queue_sim::shape::{
    CLASS_LABEL, CLASSES, Class, LARGE_SCALE_CLASSES, LARGE_SCALE_QUEUES, LEAF_MAX_CPU,
    LEAF_MIN_CPU, Leaf, ONE_LARGE_CPU, ONE_LARGE_RUNTIME, ONE_LARGE_SMALL_RUNTIME, Parent,
    PlannedJob, QueueLabels, SHAPES, Shape, named, parse_scale, parse_slow_down,
};
