//! Resource amounts keyed by interned resource ids: a compact sparse vector
//! for what a unit requests or holds, and a dense table for per-quota
//! figures (used, min, max). Both are integers in the units of
//! [`koord_queue_model::Resources`] (cpu millicores, memory bytes, counts).

use koord_queue_model::Resources;
use koord_queue_model::format_quantity;

use super::ids::{Id, Interner, ResId};

/// The limit of a resource that has none (absent from a `max`, or from a
/// limited capacity).
pub const UNLIMITED: i64 = i64::MAX;

/// Requests with up to this many resources are stored inline (no heap
/// allocation, no pointer to chase while a cycle walks the units).
const INLINE: usize = 3;

/// A unit's request or holding: positive amounts sorted by resource id.
///
/// Zero and negative amounts are dropped when it is built: asking for nothing
/// (or less than nothing) of a resource must neither be checked against that
/// resource's limits nor lower anybody's usage.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResVec(Repr);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Repr {
    /// The first `len` items are used; the rest are zero.
    Inline {
        len: u8,
        items: [(ResId, i64); INLINE],
    },
    Heap(Box<[(ResId, i64)]>),
}

impl Default for ResVec {
    fn default() -> Self {
        Self(Repr::Inline {
            len: 0,
            items: [(ResId::from_index(0), 0); INLINE],
        })
    }
}

impl ResVec {
    /// From positive amounts sorted by resource id, without repeats.
    fn from_sorted(items: Vec<(ResId, i64)>) -> Self {
        if items.len() > INLINE {
            return Self(Repr::Heap(items.into_boxed_slice()));
        }
        let mut inline = [(ResId::from_index(0), 0); INLINE];
        inline[..items.len()].copy_from_slice(&items);
        Self(Repr::Inline {
            len: items.len() as u8,
            items: inline,
        })
    }

    fn as_slice(&self) -> &[(ResId, i64)] {
        match &self.0 {
            Repr::Inline { len, items } => &items[..usize::from(*len)],
            Repr::Heap(items) => items,
        }
    }

    /// Interns the names of `resources` and keeps the positive amounts.
    pub fn from_resources(resources: &Resources, names: &mut Interner<ResId>) -> Self {
        let mut items: Vec<(ResId, i64)> = resources
            .iter()
            .filter(|(_, amount)| *amount > 0)
            .map(|(name, amount)| (names.intern(name), amount))
            .collect();
        items.sort_unstable_by_key(|(id, _)| *id);
        Self::from_sorted(items)
    }

    /// Builds from `(resource, amount)` pairs (repeats are added up).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (ResId, i64)>) -> Self {
        let mut items: Vec<(ResId, i64)> = pairs.into_iter().filter(|(_, a)| *a > 0).collect();
        items.sort_unstable_by_key(|(id, _)| *id);
        items.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 = earlier.1.saturating_add(later.1);
                true
            } else {
                false
            }
        });
        Self::from_sorted(items)
    }

    /// `(resource, amount)` pairs, amounts positive.
    pub fn iter(&self) -> impl Iterator<Item = (ResId, i64)> + '_ {
        self.as_slice().iter().copied()
    }

    /// Amount of `resource` (0 when absent).
    pub fn get(&self, resource: ResId) -> i64 {
        self.as_slice()
            .iter()
            .find(|(id, _)| *id == resource)
            .map_or(0, |(_, a)| *a)
    }

    /// Whether nothing is requested.
    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Back to named [`Resources`].
    pub fn to_resources(&self, names: &Interner<ResId>) -> Resources {
        self.as_slice()
            .iter()
            .map(|(id, amount)| (names.name(*id).to_string(), *amount))
            .collect()
    }
}

/// Per-resource figures indexed by resource id, with a default for resources
/// never written (0 for usage and min, [`UNLIMITED`] for max).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dense {
    values: Vec<i64>,
    default: i64,
}

impl Dense {
    /// All zero.
    pub fn zeros() -> Self {
        Self {
            values: Vec::new(),
            default: 0,
        }
    }

    /// All unlimited.
    pub fn unlimited() -> Self {
        Self {
            values: Vec::new(),
            default: UNLIMITED,
        }
    }

    /// A limit table from named resources: named resources get their amount,
    /// every other resource is unlimited.
    pub fn limits_from(resources: &Resources, names: &mut Interner<ResId>) -> Self {
        let mut out = Self::unlimited();
        for (name, amount) in resources.iter() {
            out.set(names.intern(name), amount.max(0));
        }
        out
    }

    /// An amount table from named resources (others 0).
    pub fn amounts_from(resources: &Resources, names: &mut Interner<ResId>) -> Self {
        let mut out = Self::zeros();
        for (name, amount) in resources.iter() {
            out.set(names.intern(name), amount.max(0));
        }
        out
    }

    /// The figure for `resource`.
    pub fn get(&self, resource: ResId) -> i64 {
        self.values
            .get(resource.index())
            .copied()
            .unwrap_or(self.default)
    }

    /// Sets the figure for `resource`.
    pub fn set(&mut self, resource: ResId, value: i64) {
        let index = resource.index();
        if index >= self.values.len() {
            self.values.resize(index + 1, self.default);
        }
        self.values[index] = value;
    }

    /// Adds `delta` to every resource it names (saturating).
    pub fn add(&mut self, delta: &ResVec) {
        for (k, v) in delta.iter() {
            self.set(k, self.get(k).saturating_add(v));
        }
    }

    /// Subtracts `delta` from every resource it names (saturating).
    pub fn sub(&mut self, delta: &ResVec) {
        for (k, v) in delta.iter() {
            self.set(k, self.get(k).saturating_sub(v));
        }
    }

    /// Adds every figure of `other` (saturating).
    pub fn add_dense(&mut self, other: &Dense) {
        for (index, v) in other.values.iter().enumerate() {
            let k = ResId::from_index(index);
            self.set(k, self.get(k).saturating_add(*v));
        }
    }

    /// Resets to the default everywhere.
    pub fn clear(&mut self) {
        self.values.clear();
    }

    /// Resources whose figure differs from the default.
    pub fn iter_set(&self) -> impl Iterator<Item = (ResId, i64)> + '_ {
        let default = self.default;
        self.values
            .iter()
            .enumerate()
            .filter(move |(_, v)| **v != default)
            .map(|(i, v)| (ResId::from_index(i), *v))
    }

    /// Number of resource slots written so far (an upper bound of the ids set).
    pub fn slots(&self) -> usize {
        self.values.len()
    }

    /// Named [`Resources`] of the figures that differ from the default.
    pub fn to_resources(&self, names: &Interner<ResId>) -> Resources {
        self.iter_set()
            .map(|(k, v)| (names.name(k).to_string(), v))
            .collect()
    }
}

/// Whether amounts of `resource` are sizes in bytes (printed with binary suffixes).
fn is_bytes(resource: &str) -> bool {
    matches!(resource, "memory" | "storage" | "ephemeral-storage")
        || resource.starts_with("hugepages-")
}

/// Renders an amount for people: cpu as Kubernetes writes it (`500m`, `3`),
/// byte sizes with the largest exact binary suffix (`2Gi`), counts as is.
pub fn format_amount(resource: &str, amount: i64) -> String {
    if is_bytes(resource) && amount != 0 {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i64 << shift;
            if amount % unit == 0 {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    if amount == UNLIMITED {
        return "unlimited".to_string();
    }
    format_quantity(resource, amount)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_drop_non_positive_amounts_and_sort() {
        let mut names = Interner::default();
        let gpu = names.intern("nvidia.com/gpu");
        let r: Resources = [
            ("memory".to_string(), 0),
            ("cpu".to_string(), 1500),
            ("nvidia.com/gpu".to_string(), -1),
        ]
        .into_iter()
        .collect();
        let v = ResVec::from_resources(&r, &mut names);
        let cpu = names.get("cpu").unwrap();
        assert_eq!(v.iter().collect::<Vec<_>>(), vec![(cpu, 1500)]);
        assert_eq!(v.get(gpu), 0);
        assert_eq!(v.to_resources(&names).get("cpu"), 1500);
        // Larger requests spill to the heap and behave the same.
        let many: Vec<(ResId, i64)> = (0..6)
            .map(|i| (ResId::from_index(i), i as i64 + 1))
            .collect();
        let big = ResVec::from_pairs(many.iter().rev().copied());
        assert_eq!(big.iter().collect::<Vec<_>>(), many);
        assert_eq!(big.get(ResId::from_index(5)), 6);
        assert_eq!(ResVec::from_pairs([(cpu, 1), (cpu, 2)]).get(cpu), 3);
        assert!(ResVec::default().is_empty());
    }

    #[test]
    fn dense_defaults_and_arithmetic() {
        let mut names: Interner<ResId> = Interner::default();
        let cpu = names.intern("cpu");
        let mem = names.intern("memory");
        let mut limits = Dense::unlimited();
        assert_eq!(limits.get(mem), UNLIMITED);
        limits.set(cpu, 10);
        assert_eq!(limits.get(cpu), 10);
        assert_eq!(limits.get(mem), UNLIMITED);
        let mut used = Dense::zeros();
        used.add(&ResVec::from_pairs([(cpu, 3), (mem, 5)]));
        used.sub(&ResVec::from_pairs([(cpu, 1)]));
        assert_eq!((used.get(cpu), used.get(mem)), (2, 5));
    }

    #[test]
    fn amounts_print_for_people() {
        assert_eq!(format_amount("cpu", 9000), "9");
        assert_eq!(format_amount("cpu", 500), "500m");
        assert_eq!(format_amount("memory", 2 << 30), "2Gi");
        assert_eq!(format_amount("memory", 1000), "1000");
        assert_eq!(format_amount("nvidia.com/gpu", 1024), "1024");
    }
}
