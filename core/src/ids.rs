//! Integer identities for the names the core sees over and over (queues,
//! quotas, resources, namespaces). Hot paths compare and index by these ids
//! instead of hashing or cloning strings; each name is stored once, shared as
//! an `Arc<str>` with whoever needs to print it.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// An integer identity that indexes a dense table.
pub trait Id: Copy + Eq + fmt::Debug {
    /// The id of table slot `index`.
    fn from_index(index: usize) -> Self;
    /// The table slot of this id.
    fn index(self) -> usize;
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u32);

        impl Id for $name {
            fn from_index(index: usize) -> Self {
                // More than 4 billion distinct names cannot fit in memory anyway.
                Self(u32::try_from(index).unwrap_or(u32::MAX))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// A queue, by name.
    QueueId
);
id_type!(
    /// A quota of the tree, by name.
    QuotaId
);
id_type!(
    /// A resource name (`cpu`, `memory`, `nvidia.com/gpu`, …).
    ResId
);
id_type!(
    /// A namespace.
    NsId
);
id_type!(
    /// A slot of the unit table; reused after the unit is removed.
    UnitId
);

/// A hasher for maps and sets keyed by ids: ids are small dense integers,
/// so a multiplication spreads them well enough, far cheaper than SipHash
/// (these maps are read in the cycle's inner loops). Not for untrusted keys.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 =
                (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// Builds [`IdHasher`]s.
pub type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// Maps names to dense ids and back. Ids are never reused, so an id stays
/// valid (and names the same string) for the life of the core.
pub struct Interner<I> {
    ids: HashMap<Arc<str>, I>,
    names: Vec<Arc<str>>,
    _id: PhantomData<I>,
}

impl<I> fmt::Debug for Interner<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interner")
            .field("len", &self.names.len())
            .finish()
    }
}

impl<I> Clone for Interner<I>
where
    I: Clone,
{
    fn clone(&self) -> Self {
        Self {
            ids: self.ids.clone(),
            names: self.names.clone(),
            _id: PhantomData,
        }
    }
}

impl<I> Default for Interner<I> {
    fn default() -> Self {
        Self {
            ids: HashMap::new(),
            names: Vec::new(),
            _id: PhantomData,
        }
    }
}

impl<I: Id> Interner<I> {
    /// The id of `name`, assigning the next one if it is new.
    pub fn intern(&mut self, name: &str) -> I {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = I::from_index(self.names.len());
        let shared: Arc<str> = Arc::from(name);
        self.names.push(Arc::clone(&shared));
        self.ids.insert(shared, id);
        id
    }

    /// The id of `name`, if it was ever interned.
    pub fn get(&self, name: &str) -> Option<I> {
        self.ids.get(name).copied()
    }

    /// The name of `id`.
    ///
    /// Ids only come from this interner, so the lookup cannot miss; an empty
    /// name is returned rather than panicking if it ever did.
    pub fn name(&self, id: I) -> &Arc<str> {
        static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
        self.names
            .get(id.index())
            .unwrap_or_else(|| EMPTY.get_or_init(|| Arc::from("")))
    }

    /// Number of names interned.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no name was interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_reversible() {
        let mut names: Interner<QuotaId> = Interner::default();
        let a = names.intern("team-a");
        let b = names.intern("team-b");
        assert_ne!(a, b);
        assert_eq!(names.intern("team-a"), a);
        assert_eq!(&**names.name(b), "team-b");
        assert_eq!(names.get("team-c"), None);
        assert_eq!(names.len(), 2);
    }
}
