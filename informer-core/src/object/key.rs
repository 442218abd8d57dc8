//! How objects are keyed: [`Key`] (`namespace/name`, shared) and [`KeyRef`] (borrowed, not
//! joined), which hash and compare alike so lookups allocate nothing.

use alloc::string::String;
use core::fmt;
use core::hash::{Hash, Hasher};
use smol_str::SmolStr;

use crate::object::Object;

mod key_hash;
mod set;

pub(crate) use key_hash::KeyHashState;
pub(crate) use set::KeyRefSet;

/// The hash of a key (a [`Key`] or a [`KeyRef`]) in the tables hashed with [`KeyHashState`]:
/// the store's, its index buckets', the readers' copies'. One process-wide function, so a hash
/// computed once serves every such table.
#[inline]
pub(crate) fn hash_of<Q: Hash + ?Sized>(key: &Q) -> u64 {
    core::hash::BuildHasher::hash_one(&KeyHashState, key)
}

/// The cache key of an object: `namespace/name`, or `name` for a cluster-scoped object.
///
/// A `Key` is an immutable string of 24 bytes: a key of up to 23 bytes (most: `ns/name` of
/// short names) is held in it, with no allocation at all, and cloning it copies those bytes; a
/// longer key is shared, and cloning it bumps a reference count. Either way the same key can sit
/// in the store, in every index bucket and in every queue without new allocations.
/// Lookups by an object's borrowed [`KeyRef`] need no allocation either: both hash the
/// namespace and name parts the same way (see the `Hash` impls).
#[derive(Clone, Eq, PartialOrd, Ord)]
pub struct Key(SmolStr);

impl PartialEq for Key {
    /// The same text (the parts of a short key compared as words, not through `memcmp`).
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        key_hash::same_bytes(self.0.as_bytes(), other.0.as_bytes())
    }
}

impl Key {
    /// The key for `name` in `namespace` (`None` or `""`: cluster-scoped).
    pub fn new(namespace: Option<&str>, name: &str) -> Key {
        KeyRef::new(namespace, name).to_key()
    }

    /// The key of `obj`.
    pub fn of<K: Object + ?Sized>(obj: &K) -> Key {
        obj.key_ref().to_key()
    }

    /// Parses `namespace/name` or `name`. Kubernetes names and namespaces never contain `/`, so
    /// the first `/` separates them.
    pub fn parse(s: &str) -> Key {
        Key(SmolStr::new(s))
    }

    /// The key as `namespace/name` or `name`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The namespace part, `None` for a cluster-scoped key.
    pub fn namespace(&self) -> Option<&str> {
        self.as_ref_parts().namespace
    }

    /// The name part.
    pub fn name(&self) -> &str {
        self.as_ref_parts().name
    }

    /// This key as a borrowed [`KeyRef`].
    pub fn as_ref_parts(&self) -> KeyRef<'_> {
        match self.0.split_once('/') {
            Some((ns, name)) => KeyRef {
                namespace: Some(ns),
                name,
            },
            None => KeyRef {
                namespace: None,
                name: &self.0,
            },
        }
    }
}

/// A joined key longer than [`INLINE_KEY`] is assembled on the stack, in a buffer of this
/// size (most keys)…
const SHORT_KEY: usize = 64;

/// …or of this size, so that the shared string is its one allocation; a longer one (not a
/// valid Kubernetes name) is joined in a `String` first.
const LONG_KEY: usize = 320;

/// The longest key a [`Key`] holds inline (the inline capacity of `SmolStr`).
const INLINE_KEY: usize = 23;

impl Hash for Key {
    /// One `u64`, a function of the joined text seeded once per process: the same as the
    /// [`KeyRef`] it stands for.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(key_hash::of_joined(self.0.as_bytes()));
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<KeyRef<'_>> for Key {
    fn from(k: KeyRef<'_>) -> Key {
        k.to_key()
    }
}

impl From<&KeyRef<'_>> for Key {
    fn from(k: &KeyRef<'_>) -> Key {
        k.to_key()
    }
}

/// A borrowed key: the namespace and name of an object, not joined.
///
/// Hashes and compares equal to the [`Key`] it stands for, so maps keyed by `Key` can be
/// queried with a `KeyRef` without building the joined string.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KeyRef<'a> {
    /// The namespace, `None` when cluster-scoped (an empty namespace is normalised to `None`).
    pub namespace: Option<&'a str>,
    /// The name.
    pub name: &'a str,
}

impl<'a> KeyRef<'a> {
    /// A borrowed key; an empty namespace means cluster-scoped.
    pub fn new(namespace: Option<&'a str>, name: &'a str) -> Self {
        KeyRef {
            namespace: namespace.filter(|ns| !ns.is_empty()),
            name,
        }
    }

    /// Builds the owned, joined [`Key`] (no allocation up to 23 bytes, one beyond).
    pub fn to_key(self) -> Key {
        if self.joined_len() <= INLINE_KEY {
            // Copied into the inline buffer as they are: no UTF-8 check of the joined bytes
            // (two `str`s and an ASCII byte) and no scan for whitespace, which `SmolStr::new`
            // makes (an add spent ~290 instructions here; through `SmolStrBuilder`, ~180).
            return Key(match self.namespace {
                Some(ns) => SmolStr::from_iter([ns, "/", self.name]),
                None => SmolStr::from_iter([self.name]),
            });
        }
        match self.namespace {
            None => Key(SmolStr::new(self.name)),
            // Joined on the stack so that the shared string is the only allocation.
            Some(_) if self.joined_len() <= SHORT_KEY => {
                let mut buf = [0u8; SHORT_KEY];
                let len = self.join_prefix(&mut buf);
                self.key_from_joined(&buf[..len])
            }
            Some(_) if self.joined_len() <= LONG_KEY => {
                let mut buf = [0u8; LONG_KEY];
                let len = self.join_prefix(&mut buf);
                self.key_from_joined(&buf[..len])
            }
            Some(ns) => {
                let mut s = String::with_capacity(ns.len() + 1 + self.name.len());
                s.push_str(ns);
                s.push('/');
                s.push_str(self.name);
                Key(SmolStr::new(s))
            }
        }
    }
}

impl fmt::Display for KeyRef<'_> {
    /// `namespace/name`, or `name` when cluster-scoped: the same text as the [`Key`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(self.name),
        }
    }
}

impl KeyRef<'_> {
    /// Length of the joined key.
    fn joined_len(&self) -> usize {
        match self.namespace {
            Some(ns) => ns.len() + 1 + self.name.len(),
            None => self.name.len(),
        }
    }

    /// The key whose joined bytes `joined` holds.
    fn key_from_joined(&self, joined: &[u8]) -> Key {
        match core::str::from_utf8(joined) {
            Ok(joined) => Key(SmolStr::new(joined)),
            // Unreachable: the bytes are two `str`s and an ASCII byte.
            Err(_) => Key(SmolStr::new(alloc::format!("{self}"))),
        }
    }

    /// Writes the first `N` bytes of the joined key into `buf`; returns how many.
    fn join_prefix<const N: usize>(&self, buf: &mut [u8; N]) -> usize {
        let mut n = 0;
        let mut put = |bytes: &[u8]| {
            let take = bytes.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&bytes[..take]);
            n += take;
        };
        if let Some(ns) = self.namespace {
            put(ns.as_bytes());
            put(b"/");
        }
        put(self.name.as_bytes());
        n
    }
}

impl Hash for KeyRef<'_> {
    /// One `u64`: the same as the joined [`Key`]'s, whatever the split.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(key_hash::of_parts(self.namespace, self.name));
    }
}

impl hashbrown::Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        // Compare against the joined form without searching for the separator.
        let k = key.as_str().as_bytes();
        match self.namespace {
            None => key_hash::same_bytes(k, self.name.as_bytes()),
            Some(ns) => {
                k.len() == ns.len() + 1 + self.name.len()
                    && k[ns.len()] == b'/'
                    && key_hash::same_bytes(&k[ns.len() + 1..], self.name.as_bytes())
                    && key_hash::same_bytes(&k[..ns.len()], ns.as_bytes())
            }
        }
    }
}

/// Why an object cannot be keyed without ambiguity, if it cannot.
pub(crate) fn invalid_key<K: Object + ?Sized>(obj: &K) -> Option<&'static str> {
    let k = obj.key_ref();
    // `/` is ASCII, whose byte UTF-8 never uses inside another character: a plain byte loop
    // (names are short: `memchr`'s set-up cost more than the search).
    let slash = |s: &str| s.bytes().any(|b| b == b'/');
    if k.name.is_empty() {
        Some("the name is empty")
    } else if slash(k.name) {
        Some("the name contains '/'")
    } else if k.namespace.is_some_and(slash) {
        Some("the namespace contains '/'")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::BuildHasher;

    /// A `KeyRefSet` holds exactly the keys noted (each once), and finds a `Key` by its joined
    /// text whatever the split it was noted with: short and long, namespaced and not.
    #[test]
    fn key_ref_set_finds_exactly_the_noted_keys() {
        let long = "n".repeat(40);
        let long_ns = "a".repeat(30);
        let joined = alloc::format!("{long_ns}/b/c");
        let refs = [
            KeyRef::new(Some("ns"), "a"),
            KeyRef::new(Some("ns"), "b"),
            KeyRef::new(None, "a"),
            KeyRef::new(Some("kube-system"), &long),
            KeyRef::new(None, &long),
        ];
        let mut set = KeyRefSet::with_capacity(1);
        for (i, k) in refs.iter().enumerate() {
            assert!(set.insert_hashed(hash_of(k), *k), "{i} noted first");
            assert!(!set.insert_hashed(hash_of(k), *k), "{i} noted once");
        }
        for k in &refs {
            assert!(set.contains(&k.to_key()), "{k:?}");
        }
        // One key however it is split (names Kubernetes never gives, but the store keys by
        // the joined text): noted once, found either way.
        assert!(set.insert_hashed(
            hash_of(&KeyRef::new(Some(&long_ns), "b/c")),
            KeyRef::new(Some(&long_ns), "b/c")
        ));
        assert!(
            !set.insert_hashed(
                hash_of(&KeyRef::new(None, &joined)),
                KeyRef::new(None, &joined)
            ),
            "the same joined text, split otherwise"
        );
        assert!(set.contains(&Key::new(None, &joined)));
        for (ns, name) in [
            (Some("ns"), "c"),
            (None, "ns"),
            (None, "b"),
            (Some("kube-system"), "n"),
            (Some("other"), "a"),
            (Some("ns"), "a/"),
        ] {
            let other = Key::new(ns, name);
            assert!(!set.contains(&other), "{other:?}");
        }
    }

    #[test]
    fn key_ref_hashes_and_compares_like_key() {
        let s = hashbrown::DefaultHashBuilder::default();
        for (ns, name) in [
            (Some("a"), "b"),
            (None, "b"),
            (Some("ab"), ""),
            (Some(""), "x"),
        ] {
            let r = KeyRef::new(ns, name);
            let k = r.to_key();
            assert_eq!(s.hash_one(&k), s.hash_one(r));
            assert!(hashbrown::Equivalent::equivalent(&r, &k));
        }
        let long_ns = "n".repeat(200);
        let long_name = "x".repeat(300);
        for (ns, name) in [
            (Some(long_ns.as_str()), long_name.as_str()),
            (None, long_name.as_str()),
        ] {
            let r = KeyRef::new(ns, name);
            assert_eq!(s.hash_one(r.to_key()), s.hash_one(r));
        }
        // "a/bc" and "ab/c" must not collide structurally.
        assert!(!hashbrown::Equivalent::equivalent(
            &KeyRef::new(Some("ab"), "c"),
            &Key::parse("a/bc")
        ));
    }

    /// Every namespace/name split, short and long (the stack buffers' sizes), hashes as the
    /// joined `Key`; a trailing zero byte or a moved `/` changes it.
    #[test]
    fn every_split_hashes_as_the_joined_key() {
        let s = hashbrown::DefaultHashBuilder::default();
        let text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ";
        for ns_len in 1..20 {
            for name_len in 0..20 {
                let (ns, name) = (&text[..ns_len], &text[ns_len..ns_len + name_len]);
                let r = KeyRef::new(Some(ns), name);
                let joined = alloc::format!("{ns}/{name}");
                assert_eq!(s.hash_one(Key::parse(&joined)), s.hash_one(r), "{joined}");
                assert_eq!(r.to_key().as_str(), joined);
                let zero = alloc::format!("{joined}\0");
                assert_ne!(s.hash_one(Key::parse(&zero)), s.hash_one(r), "{joined}");
                if name_len > 0 {
                    let moved = KeyRef::new(Some(&text[..ns_len + 1]), &name[1..]);
                    assert_ne!(s.hash_one(moved), s.hash_one(r), "{joined}");
                }
            }
        }
    }

    /// Regression (faults probe): a cluster-scoped name `"x/" + "y" * 400` used to hash as
    /// namespace `x` + name `y…` on the `Key` side and as one name on the `KeyRef` side, so
    /// `get` and `delete` missed it. Every split of an over-long key must hash alike.
    #[test]
    fn over_long_keys_with_a_slash_hash_alike_on_both_sides() {
        let s = hashbrown::DefaultHashBuilder::default();
        let name = alloc::format!("x/{}", "y".repeat(400));
        let r = KeyRef::new(None, &name);
        let k = r.to_key();
        assert_eq!(s.hash_one(&k), s.hash_one(r));
        assert!(hashbrown::Equivalent::equivalent(&r, &k));
        let mut map: crate::hash::HashMap<Key, u32> = Default::default();
        map.insert(k.clone(), 1);
        assert_eq!(map.get(&r), Some(&1));
        assert_eq!(map.remove(&r), Some(1));
        for split in [1, 2, 100, 319, 320, 321, 399] {
            let joined = "z".repeat(402);
            let (ns, name) = joined.split_at(split);
            let r = KeyRef::new(Some(ns), &name[1..]);
            assert_eq!(s.hash_one(r.to_key()), s.hash_one(r), "split at {split}");
        }
    }

    /// A key of up to 23 bytes is held in the `Key` (an add then allocates nothing for it); a
    /// longer one is shared, so that its clones in the queues allocate nothing either.
    #[test]
    fn short_keys_are_inline_and_long_ones_shared() {
        let short = KeyRef::new(Some("ns-99"), "cm-0123456789abcd").to_key();
        assert_eq!(short.as_str().len(), 23);
        assert!(!short.0.is_heap_allocated());
        let long = KeyRef::new(Some("ns-99"), "cm-0123456789abcde").to_key();
        assert!(long.0.is_heap_allocated());
        let copy = long.clone();
        assert_eq!(
            copy.as_str().as_ptr(),
            long.as_str().as_ptr(),
            "a clone shares the string"
        );
        assert_eq!(
            (short.namespace(), short.name()),
            (Some("ns-99"), "cm-0123456789abcd")
        );
    }
}
