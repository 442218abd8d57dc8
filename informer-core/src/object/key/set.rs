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
        match self.0.entry(hash, |k| same_joined(*k, key), hash_of) {
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

/// Whether `a` and `b` stand for the same key: the same joined text, whatever their split
/// (the store keys by the joined text, so a namespaced `a` / `b/c` and a cluster-scoped
/// `a/b/c`, names Kubernetes never gives, are one key there and must be one here: counted
/// twice, they would hide a stored key the list lacks).
fn same_joined(a: KeyRef<'_>, b: KeyRef<'_>) -> bool {
    if a == b {
        return true;
    }
    fn bytes(k: KeyRef<'_>) -> impl Iterator<Item = u8> + '_ {
        let ns = k.namespace.map(|ns| ns.as_bytes()).unwrap_or_default();
        let slash: &[u8] = if k.namespace.is_some() { b"/" } else { b"" };
        ns.iter().chain(slash).chain(k.name.as_bytes()).copied()
    }
    a.joined_len() == b.joined_len() && bytes(a).eq(bytes(b))
}
