//! [`KeyRefSet`]: the keys of a list, while a relist's deletes are worked out.

use super::{Key, KeyRef, hash_of};

/// A set of borrowed keys (the keys of a list, while a relist's deletes are worked out),
/// hashed with [`hash_of`]: a [`Key`] is looked up by the hash of its joined text as it is, no
/// split at its `/`, and a key noted once is hashed once.
pub(crate) struct KeyRefSet<'a>(hashbrown::HashTable<KeyRef<'a>>);

impl<'a> KeyRefSet<'a> {
    /// Room for `n` keys.
    pub(crate) fn with_capacity(n: usize) -> Self {
        KeyRefSet(hashbrown::HashTable::with_capacity(n))
    }

    /// Notes `key`, whose hash is `hash`; returns whether it was not noted yet.
    pub(crate) fn insert_hashed(&mut self, hash: u64, key: KeyRef<'a>) -> bool {
        match self.0.entry(hash, |k| *k == key, hash_of) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(key);
                true
            }
        }
    }

    /// Whether `key` was noted.
    pub(crate) fn contains(&self, key: &Key) -> bool {
        use hashbrown::Equivalent;
        self.0.find(hash_of(key), |k| k.equivalent(key)).is_some()
    }
}
