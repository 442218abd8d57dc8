//! [`ReadCopy`]: the lean copy of an [`Indexer`] that readers on other threads query
//! (`shared::Views`, feature `spin`).

use hashbrown::HashTable;

use super::{
    Change, IndexError, IndexFunc, IndexValues, NAMESPACE_INDEX, Select, Source,
    namespace_index_values,
};
use crate::hash::{HashMap, HashSet, IDLE_CAPACITY};
use crate::object::key::hash_of;
use crate::object::selector::{Labels, Selector};
use crate::object::{KeyRef, Object};
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use compact_str::CompactString;
use core::fmt;

/// Objects hashed and compared by their own key ([`Object::key_ref`]): one pointer per entry,
/// the key is read from the object.
pub(super) type Objects<K> = HashTable<Arc<K>>;

/// Value → the objects having that value. Empty buckets are removed. A value of up to 24
/// bytes (most label values and namespaces) is stored in the entry itself, so that finding a
/// bucket reads no other cache line than the table's.
pub(super) type ObjectBuckets<K> = HashMap<CompactString, Objects<K>>;

/// The objects having one value of an index other than the namespace index: a list scanned
/// by pointer while it holds at most [`FEW`] (no table: a bucket of ten objects takes 80 to
/// 128 bytes rather than a 160-byte table), a table hashed by key beyond.
pub(super) enum Bucket<K> {
    Few(Vec<Arc<K>>),
    /// Boxed, so that a bucket takes three words in its map.
    Many(Box<Objects<K>>),
}

/// The most objects a [`Bucket`] holds as a list; a table shrinks back to a list at half.
const FEW: usize = 16;

impl<K> Clone for Bucket<K> {
    fn clone(&self) -> Self {
        match self {
            Bucket::Few(list) => Bucket::Few(list.clone()),
            Bucket::Many(table) => Bucket::Many(table.clone()),
        }
    }
}

impl<K: Object> Bucket<K> {
    pub(super) fn len(&self) -> usize {
        match self {
            Bucket::Few(list) => list.len(),
            Bucket::Many(table) => table.len(),
        }
    }

    pub(super) fn iter(&self) -> BucketIter<'_, K> {
        match self {
            Bucket::Few(list) => BucketIter::Few(list.iter()),
            Bucket::Many(table) => BucketIter::Table(table.iter()),
        }
    }

    /// The slot holding the very `Arc` `old`, whose key hashes to `hash`.
    fn find_mut(&mut self, hash: u64, old: &Arc<K>) -> Option<&mut Arc<K>> {
        match self {
            Bucket::Few(list) => list.iter_mut().find(|o| Arc::ptr_eq(o, old)),
            Bucket::Many(table) => table.find_mut(hash, |o| Arc::ptr_eq(o, old)),
        }
    }

    /// Whether it holds the very `Arc` `old` (reads what [`find_mut`](Self::find_mut) reads).
    #[cfg(any(test, feature = "spin"))]
    fn contains(&self, hash: u64, old: &Arc<K>) -> bool {
        match self {
            Bucket::Few(list) => list.iter().any(|o| Arc::ptr_eq(o, old)),
            Bucket::Many(table) => table.find(hash, |o| Arc::ptr_eq(o, old)).is_some(),
        }
    }

    /// Adds `obj` (not in it), whose key hashes to `hash`. A list grows by half (not double),
    /// and turns into a table past [`FEW`].
    fn insert(&mut self, hash: u64, obj: &Arc<K>) {
        match self {
            Bucket::Few(list) if list.len() < FEW => {
                if list.len() == list.capacity() {
                    list.reserve_exact((list.len() / 2).max(2));
                }
                list.push(obj.clone());
            }
            Bucket::Few(list) => {
                let mut table = HashTable::with_capacity(2 * FEW);
                for o in list.drain(..) {
                    let h = hash_of(&o.key_ref());
                    table.insert_unique(h, o, rehash);
                }
                table.insert_unique(hash, obj.clone(), rehash);
                *self = Bucket::Many(Box::new(table));
            }
            Bucket::Many(table) => {
                table.insert_unique(hash, obj.clone(), rehash);
            }
        }
    }

    /// Removes the very `Arc` `old`; a table back at half of [`FEW`] turns into a list.
    fn remove(&mut self, hash: u64, old: &Arc<K>) {
        match self {
            Bucket::Few(list) => {
                if let Some(i) = list.iter().position(|o| Arc::ptr_eq(o, old)) {
                    list.swap_remove(i);
                }
            }
            Bucket::Many(table) => {
                if let Ok(entry) = table.find_entry(hash, |o| Arc::ptr_eq(o, old)) {
                    entry.remove();
                }
                if table.len() <= FEW / 2 {
                    let list: Vec<Arc<K>> = table.drain().collect();
                    *self = Bucket::Few(list);
                } else {
                    trim(table);
                }
            }
        }
    }
}

/// The objects of a bucket, a namespace's or an index value's.
pub(super) enum BucketIter<'a, K> {
    Empty,
    Few(core::slice::Iter<'a, Arc<K>>),
    Table(hashbrown::hash_table::Iter<'a, Arc<K>>),
}

impl<'a, K> Iterator for BucketIter<'a, K> {
    type Item = &'a Arc<K>;

    fn next(&mut self) -> Option<&'a Arc<K>> {
        match self {
            BucketIter::Empty => None,
            BucketIter::Few(it) => it.next(),
            BucketIter::Table(it) => it.next(),
        }
    }
}

/// The buckets of one index of a [`ReadCopy`].
enum Buckets<'a, K> {
    Namespaces(&'a ObjectBuckets<K>),
    Index(&'a LabelBuckets<K>),
}

impl<'a, K: Object> Buckets<'a, K> {
    fn get(&self, value: &str) -> BucketIter<'a, K> {
        let found = match self {
            Buckets::Namespaces(map) => map.get(value).map(|t| BucketIter::Table(t.iter())),
            Buckets::Index(map) => map.get(value).map(Bucket::iter),
        };
        found.unwrap_or(BucketIter::Empty)
    }
}

/// Value → the objects having that value, for an index other than the namespace index. Empty
/// buckets are removed.
pub(super) type LabelBuckets<K> = HashMap<CompactString, Bucket<K>>;

struct CopyIndex<K> {
    label_key: Option<Box<str>>,
    name: Box<str>,
    func: Box<dyn IndexFunc<K>>,
    buckets: LabelBuckets<K>,
    /// [`IndexFunc::single_value`] answered for every object this index was given: an object
    /// it holds has at most the one value that answer gives, so that finding the old object
    /// in the new one's bucket proves its values. A function may answer `None` for some
    /// objects only (several values): from the first such object on, an update reads the old
    /// object's values.
    every_single: bool,
}

fn same_key<K: Object>(key: KeyRef<'_>) -> impl Fn(&Arc<K>) -> bool + '_ {
    move |o| o.key_ref() == key
}

fn rehash<K: Object>(o: &Arc<K>) -> u64 {
    hash_of(&o.key_ref())
}

/// Gives back the memory of a table that has shrunk to a quarter of its capacity (after a
/// burst of deletes), keeping room for twice its content, so that shrinking is amortised.
fn trim<K: Object>(table: &mut Objects<K>) {
    if table.capacity() > IDLE_CAPACITY && table.len() < table.capacity() / 4 {
        table.shrink_to(table.len() * 2, rehash);
    }
}

impl<K: Object> CopyIndex<K> {
    /// Adds `obj`, which is not in the bucket of `value`, to it.
    fn insert(&mut self, value: &str, hash: u64, obj: &Arc<K>) {
        match self.buckets.get_mut(value) {
            Some(bucket) => bucket.insert(hash, obj),
            None => {
                self.buckets.insert(
                    CompactString::new(value),
                    Bucket::Few(alloc::vec![obj.clone()]),
                );
            }
        }
    }

    /// Replaces `old` (the very `Arc`: buckets hold the objects the key → object map holds)
    /// in the bucket of `value` with `new`, or removes it if `new` is `None`.
    fn replace(&mut self, value: &str, hash: u64, old: &Arc<K>, new: Option<&Arc<K>>) {
        let Some(bucket) = self.buckets.get_mut(value) else {
            return;
        };
        match new {
            Some(new) => {
                if let Some(slot) = bucket.find_mut(hash, old) {
                    *slot = new.clone();
                }
            }
            None => {
                bucket.remove(hash, old);
                if bucket.len() == 0 {
                    self.buckets.remove(value);
                }
            }
        }
    }

    /// Puts `new` in place of `old` in the bucket of `value`; returns whether `old` was there.
    fn replace_in(&mut self, value: &str, hash: u64, old: &Arc<K>, new: &Arc<K>) -> bool {
        let Some(bucket) = self.buckets.get_mut(value) else {
            return false;
        };
        match bucket.find_mut(hash, old) {
            Some(slot) => {
                *slot = new.clone();
                true
            }
            None => false,
        }
    }

    /// Updates the buckets for the object whose key hashes to `hash` going from `old` (if
    /// any) to `new` (if any). Buckets hold the objects themselves, so a bucket the object
    /// stays in gets the new object too; objects in a bucket are found by pointer, without
    /// reading them. A function with one value per object (a label) is asked for that value
    /// ([`IndexFunc::single_value`]), without building [`IndexValues`]; and for an update, the
    /// bucket of the new object's value is looked at first: finding the old object there
    /// (the common case, a value that did not change) proves its value, which is then never
    /// read from the old object (a cache line the update need not touch), as long as every
    /// object the index was given had one value at most (`every_single`).
    fn update(&mut self, hash: u64, old: Option<&Arc<K>>, new: Option<&Arc<K>>) {
        fn one<'a, K>(func: &dyn IndexFunc<K>, o: Option<&'a Arc<K>>) -> Option<Option<&'a str>> {
            match o {
                Some(o) => func.single_value(o),
                None => Some(None),
            }
        }
        let is = one(&*self.func, new);
        if is.is_none() {
            self.every_single = false;
        }
        let looked = self.every_single;
        if let (true, Some(old), Some(new), Some(Some(v))) = (looked, old, new, is) {
            if self.replace_in(v, hash, old, new) {
                return;
            }
        }
        if let (Some(was), Some(is)) = (one(&*self.func, old), is) {
            if was != is {
                if let (Some(v), Some(old)) = (was, old) {
                    self.replace(v, hash, old, None);
                }
                if let (Some(v), Some(new)) = (is, new) {
                    self.insert(v, hash, new);
                }
            } else if let (false, Some(v), Some(old), Some(new)) = (looked, is, old, new) {
                // The same value, not looked at above: the new object takes the old's place.
                self.replace_in(v, hash, old, new);
            }
            // (The same value, looked at above and the old object not in its bucket: not in
            // a consistent copy; nothing to do, as the general path below would do.)
            return;
        }
        let old_vals = old.map(|o| self.func.index_values(o)).unwrap_or_default();
        let new_vals = new.map(|o| self.func.index_values(o)).unwrap_or_default();
        if let Some(old) = old {
            for v in &old_vals {
                let stays = new.filter(|_| new_vals.contains(v));
                self.replace(v, hash, old, stays);
            }
        }
        if let Some(new) = new {
            for (i, v) in new_vals.iter().enumerate() {
                // A value the object had is handled above; one listed twice is added once.
                if !old_vals.contains(v) && !new_vals[..i].contains(v) {
                    self.insert(v, hash, new);
                }
            }
        }
    }
}

/// A change as a copy applies it by reference ([`ReadCopy::apply_ref`]): the key's hash comes
/// with it (`key::hash_of`: every copy hashes a key alike), computed once by whoever keeps
/// several copies, and an upsert's key is read from its object.
#[cfg_attr(not(any(test, feature = "spin")), allow(dead_code))]
pub(crate) enum ChangeRef<'a, K> {
    /// [`Change::Upsert`]: `obj` stored under its key, which hashes to `hash`.
    Upsert {
        /// The hash of the object's key.
        hash: u64,
        /// The object now stored.
        obj: &'a Arc<K>,
        /// The address ([`Arc::as_ptr`]) of the object this upsert replaced in another copy
        /// with the same content, which [`apply_ref`](ReadCopy::apply_ref) returned there
        /// (0: unknown). The copy finds that object by its address instead of reading its
        /// key: as long as the copy holds it, no other object has that address.
        replaces: usize,
    },
    /// [`Change::Delete`].
    Delete {
        /// The hash of `key`.
        hash: u64,
        /// The removed object's key.
        key: KeyRef<'a>,
    },
    /// [`Change::Clear`].
    Clear,
}

/// The copy of an [`Indexer`](super::Indexer)'s content that readers query, kept up to date by
/// replaying its journal ([`apply`](Self::apply)). The same read API as the indexer, in less
/// memory: its tables hold only the objects (one pointer per entry), found by the key each
/// object carries (a key is built only when a caller asks for one as a
/// [`Key`](crate::object::Key)), and the key → object map is split by namespace, so that it is
/// the namespace index ([`NAMESPACE_INDEX`]) too: one table entry per object and per other
/// index.
pub struct ReadCopy<K> {
    /// The cluster-scoped objects.
    cluster: Objects<K>,
    /// Namespace → the objects in it. Empty namespaces are removed.
    namespaces: ObjectBuckets<K>,
    len: usize,
    /// The indices other than the namespace index.
    indices: Vec<CopyIndex<K>>,
}

impl<K> fmt::Debug for ReadCopy<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadCopy")
            .field("len", &self.len)
            .field(
                "indices",
                &self.indices.iter().map(|i| &*i.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<K: Object + 'static> Default for ReadCopy<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Object + 'static> ReadCopy<K> {
    /// An empty copy with the namespace index.
    pub fn new() -> Self {
        ReadCopy {
            cluster: HashTable::new(),
            namespaces: HashMap::default(),
            len: 0,
            indices: Vec::new(),
        }
    }

    /// Adds a named index; objects already stored are indexed at once. Fails with
    /// [`IndexError::IndexExists`] if the name is taken.
    pub fn add_index(
        &mut self,
        name: &str,
        func: impl IndexFunc<K> + 'static,
    ) -> Result<(), IndexError> {
        if name == NAMESPACE_INDEX || self.index_pos(name).is_ok() {
            return Err(IndexError::IndexExists { name: name.into() });
        }
        let mut index = CopyIndex {
            label_key: func.label_key().map(Into::into),
            name: name.into(),
            func: Box::new(func),
            buckets: HashMap::default(),
            every_single: true,
        };
        for obj in self.list() {
            let key = obj.key_ref();
            index.update(hash_of(&key), None, Some(obj));
        }
        self.indices.push(index);
        Ok(())
    }

    /// Makes this copy hold exactly what `other` holds (the same objects, shared), by copying
    /// its tables: no hashing, no probing, no growing, which after a relist (a journal as long
    /// as the cache) is much cheaper than replaying the journal change by change (every copy
    /// hashes a key alike). `other` must have the same indices, built
    /// from the same functions (the two copies a [`Publisher`](crate::views::Publisher)
    /// keeps); when the index names differ, nothing changes and `false` is returned.
    #[cfg(any(test, feature = "spin"))]
    pub(crate) fn copy_from(&mut self, other: &ReadCopy<K>) -> bool {
        let same_indices = self.indices.len() == other.indices.len()
            && self
                .indices
                .iter()
                .zip(&other.indices)
                .all(|(a, b)| a.name == b.name);
        if !same_indices {
            return false;
        }
        self.cluster.clone_from(&other.cluster);
        self.namespaces.clone_from(&other.namespaces);
        self.len = other.len;
        for (mine, theirs) in self.indices.iter_mut().zip(&other.indices) {
            mine.buckets.clone_from(&theirs.buckets);
            mine.every_single &= theirs.every_single;
        }
        true
    }

    /// The names of the indices, the namespace index first.
    pub fn index_names(&self) -> impl Iterator<Item = &str> {
        core::iter::once(NAMESPACE_INDEX).chain(self.indices.iter().map(|i| &*i.name))
    }

    /// Makes room for `total` objects in namespace `ns` (`None`: cluster-scoped) at once,
    /// before a large step (an initial population, a relist after a `Clear`) inserts them:
    /// growing step by step would rehash every object's key at each doubling.
    #[cfg(any(test, feature = "spin"))]
    pub(crate) fn reserve(&mut self, ns: Option<&str>, total: usize) {
        let table = match ns {
            None => &mut self.cluster,
            Some(ns) => self.namespaces.entry_ref(ns).or_insert_with(HashTable::new),
        };
        let additional = total.saturating_sub(table.len());
        table.reserve(additional, rehash);
    }

    /// Applies one recorded change ([`Indexer::take_changes`](super::Indexer::take_changes)).
    /// A modify or delete allocates nothing (a table that shrank to a quarter of its capacity
    /// is shrunk, rarely); a [`Change::Clear`] drops the tables, so that the relist which
    /// follows leaves them sized to its content.
    pub fn apply(&mut self, change: Change<K>) {
        match &change {
            Change::Upsert { key, obj } => self.apply_ref(ChangeRef::Upsert {
                hash: hash_of(key),
                obj,
                replaces: 0,
            }),
            Change::Delete { key } => {
                let key = key.as_ref_parts();
                self.apply_ref(ChangeRef::Delete {
                    hash: hash_of(&key),
                    key,
                })
            }
            Change::Clear => self.apply_ref(ChangeRef::Clear),
        };
    }

    /// Reads, changing nothing, what [`apply_ref`](Self::apply_ref) of `change` will read:
    /// the table entry of its key and the index buckets of its object. A replay that touches
    /// the change a few ahead of the one it applies has the cache misses of several changes
    /// under way at once, rather than one after the other.
    #[cfg(any(test, feature = "spin"))]
    pub(crate) fn touch(&self, change: &ChangeRef<'_, K>) {
        let (hash, key, obj, replaces) = match *change {
            ChangeRef::Upsert {
                hash,
                obj,
                replaces,
            } => (hash, obj.key_ref(), Some(obj), replaces),
            ChangeRef::Delete { hash, key } => (hash, key, None, 0),
            ChangeRef::Clear => return,
        };
        let table = match key.namespace {
            None => &self.cluster,
            Some(ns) => match self.namespaces.get(ns) {
                Some(table) => table,
                None => return,
            },
        };
        let old = if replaces != 0 {
            table.find(hash, |o| Arc::as_ptr(o) as usize == replaces)
        } else {
            table.find(hash, same_key(key))
        };
        if let (Some(obj), Some(old)) = (obj, old) {
            for index in &self.indices {
                if let Some(Some(v)) = index.func.single_value(obj) {
                    if let Some(bucket) = index.buckets.get(v) {
                        core::hint::black_box(bucket.contains(hash, old));
                    }
                }
            }
        }
        core::hint::black_box(old);
    }

    /// [`apply`](Self::apply) by reference: stores its own reference to an upserted object
    /// (and one per index bucket it is in) and nothing else; `hash` must be `key::hash_of` of
    /// the change's key. Returns, for an upsert that
    /// replaced an object, that object's address (for another copy's `replaces`); else 0.
    pub(crate) fn apply_ref(&mut self, change: ChangeRef<'_, K>) -> usize {
        match change {
            ChangeRef::Upsert {
                hash,
                obj,
                replaces,
            } => {
                let key = obj.key_ref();
                let table = match key.namespace {
                    None => &mut self.cluster,
                    Some(ns) => self.namespaces.entry_ref(ns).or_insert_with(HashTable::new),
                };
                // Found by the noted address when there is one (0: none; the first copy to
                // apply the change), else, or should it not be found, by key.
                let mut old = None;
                if replaces != 0 {
                    let by_address = |o: &Arc<K>| Arc::as_ptr(o) as usize == replaces;
                    if let Some(slot) = table.find_mut(hash, by_address) {
                        debug_assert!(slot.key_ref() == key, "an address noted for another key");
                        old = Some(core::mem::replace(slot, obj.clone()));
                    }
                }
                if old.is_none() {
                    old = match table.find_mut(hash, same_key(key)) {
                        Some(slot) if Arc::ptr_eq(slot, obj) => return 0,
                        Some(slot) => Some(core::mem::replace(slot, obj.clone())),
                        None => {
                            table.insert_unique(hash, obj.clone(), rehash);
                            self.len += 1;
                            None
                        }
                    };
                }
                for index in &mut self.indices {
                    index.update(hash, old.as_ref(), Some(obj));
                }
                old.as_ref().map_or(0, |o| Arc::as_ptr(o) as usize)
            }
            ChangeRef::Delete { hash, key } => {
                let table = match key.namespace {
                    None => &mut self.cluster,
                    Some(ns) => match self.namespaces.get_mut(ns) {
                        Some(table) => table,
                        None => return 0,
                    },
                };
                let Ok(entry) = table.find_entry(hash, same_key(key)) else {
                    return 0;
                };
                let (old, _) = entry.remove();
                self.len -= 1;
                match key.namespace {
                    Some(ns) if table.is_empty() => {
                        self.namespaces.remove(ns);
                    }
                    _ => trim(table),
                }
                for index in &mut self.indices {
                    index.update(hash, Some(&old), None);
                }
                0
            }
            ChangeRef::Clear => {
                self.cluster = HashTable::new();
                self.namespaces = HashMap::default();
                self.len = 0;
                for index in &mut self.indices {
                    index.buckets = HashMap::default();
                }
                0
            }
        }
    }

    /// The stored object under `key`.
    pub fn get_ref(&self, key: KeyRef<'_>) -> Option<&Arc<K>> {
        let table = match key.namespace {
            None => &self.cluster,
            Some(ns) => self.namespaces.get(ns)?,
        };
        table.find(hash_of(&key), same_key(key))
    }

    /// The stored object with the same key as `obj`.
    pub fn get(&self, obj: &K) -> Option<&Arc<K>> {
        self.get_ref(obj.key_ref())
    }

    /// The stored object under `key` (`namespace/name` or `name`).
    pub fn get_by_key(&self, key: &str) -> Option<&Arc<K>> {
        self.get_ref(match key.split_once('/') {
            Some((ns, name)) => KeyRef::new(Some(ns), name),
            None => KeyRef::new(None, key),
        })
    }

    /// Whether an object is stored under `key`.
    pub fn contains_key(&self, key: KeyRef<'_>) -> bool {
        self.get_ref(key).is_some()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the copy is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> impl Iterator<Item = &Arc<K>> {
        self.cluster
            .iter()
            .chain(self.namespaces.values().flatten())
    }

    /// Every key, in no particular order (borrowed from the objects: [`KeyRef::to_key`] builds
    /// an owned [`Key`](crate::object::Key)).
    pub fn list_keys(&self) -> impl Iterator<Item = KeyRef<'_>> {
        self.list().map(|o| o.key_ref())
    }

    fn index_pos(&self, name: &str) -> Result<usize, IndexError> {
        self.indices
            .iter()
            .position(|i| &*i.name == name)
            .ok_or_else(|| IndexError::UnknownIndex { name: name.into() })
    }

    /// The buckets of index `name`: the namespaces' tables or another index's buckets.
    fn buckets(&self, name: &str) -> Result<Buckets<'_, K>, IndexError> {
        if name == NAMESPACE_INDEX {
            return Ok(Buckets::Namespaces(&self.namespaces));
        }
        Ok(Buckets::Index(&self.indices[self.index_pos(name)?].buckets))
    }

    /// The objects whose `name` index values include `value` (client-go `ByIndex`).
    pub fn by_index(
        &self,
        name: &str,
        value: &str,
    ) -> Result<impl Iterator<Item = &Arc<K>>, IndexError> {
        Ok(self.buckets(name)?.get(value))
    }

    /// The keys of the objects whose `name` index values include `value`.
    pub fn index_keys(
        &self,
        name: &str,
        value: &str,
    ) -> Result<impl Iterator<Item = KeyRef<'_>>, IndexError> {
        Ok(self.by_index(name, value)?.map(|o| o.key_ref()))
    }

    /// The objects sharing at least one `name` index value with `obj` (client-go `Index`).
    /// Each object appears once.
    pub fn index(&self, name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        let buckets = self.buckets(name)?;
        let values: IndexValues<'_> = if name == NAMESPACE_INDEX {
            namespace_index_values(obj)
        } else {
            self.indices[self.index_pos(name)?].func.index_values(obj)
        };
        let mut seen: HashSet<KeyRef<'_>> = HashSet::default();
        let mut out = Vec::new();
        for v in &values {
            for o in buckets.get(v) {
                if seen.insert(o.key_ref()) {
                    out.push(o.clone());
                }
            }
        }
        Ok(out)
    }

    /// The values of the `name` index that have at least one object (client-go
    /// `ListIndexFuncValues`).
    pub fn list_index_values(&self, name: &str) -> Result<impl Iterator<Item = &str>, IndexError> {
        let (namespaces, index) = match self.buckets(name)? {
            Buckets::Namespaces(map) => (Some(map), None),
            Buckets::Index(map) => (None, Some(map)),
        };
        Ok(namespaces
            .into_iter()
            .flat_map(|map| map.keys())
            .chain(index.into_iter().flat_map(|map| map.keys()))
            .map(CompactString::as_str))
    }

    /// Number of objects with value `value` in index `name`.
    pub fn index_len(&self, name: &str, value: &str) -> Result<usize, IndexError> {
        Ok(match self.buckets(name)? {
            Buckets::Namespaces(map) => map.get(value).map_or(0, HashTable::len),
            Buckets::Index(map) => map.get(value).map_or(0, Bucket::len),
        })
    }

    /// The capacity of the tables of the cluster-scoped objects and of each namespace, in
    /// entries, summed (for tests of the shrink policy).
    pub fn capacity(&self) -> usize {
        self.cluster.capacity()
            + self
                .namespaces
                .values()
                .map(HashTable::capacity)
                .sum::<usize>()
    }
}

impl<K: Object + Labels + 'static> ReadCopy<K> {
    /// The stored objects whose labels match `selector`, in `namespace` if given; planned as
    /// [`Indexer::select`](super::Indexer::select) does (a label index's buckets, the
    /// namespace's objects or every object, whichever holds fewest). Allocates nothing.
    pub fn select<'a>(
        &'a self,
        selector: &'a Selector,
        namespace: Option<&'a str>,
    ) -> Select<'a, K> {
        let namespace = namespace.filter(|ns| !ns.is_empty());
        let ns_bucket = namespace.map(|ns| self.namespaces.get(ns));
        let plan = super::plan_selection(
            selector,
            ns_bucket,
            |b| b.len(),
            |key| {
                self.indices
                    .iter()
                    .find(|i| i.label_key.as_deref() == Some(key))
                    .map(|i| &i.buckets)
            },
            Bucket::len,
        );
        let (namespace, source) = match plan {
            super::Plan::Empty => (namespace, Source::Empty),
            super::Plan::Labels(buckets, values) => (
                namespace,
                Source::ObjectBuckets {
                    buckets,
                    values: values.iter(),
                    objects: None,
                },
            ),
            // The table holds only the namespace's objects: no need to check it again.
            super::Plan::Namespace(bucket) => (None, Source::ObjectBucket(bucket.iter())),
            super::Plan::All => (
                namespace,
                Source::Partitions {
                    rest: self.namespaces.values(),
                    objects: self.cluster.iter(),
                },
            ),
        };
        Select {
            items: None,
            selector,
            namespace,
            source,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::indexer::index_fn;
    use crate::object::key::Key;
    use crate::sim::SimObject;
    use alloc::borrow::Cow;
    use alloc::format;
    use alloc::string::ToString;

    fn obj(namespace: Option<&str>, name: &str, data: u64) -> Arc<SimObject> {
        Arc::new(SimObject {
            name: name.into(),
            namespace: namespace.map(Into::into),
            resource_version: data.to_string(),
            uid: name.into(),
            data,
            noise: 0,
        })
    }

    fn upsert(o: &Arc<SimObject>) -> Change<SimObject> {
        Change::Upsert {
            key: Key::new(o.namespace.as_deref(), &o.name),
            obj: o.clone(),
        }
    }

    fn with_parity() -> ReadCopy<SimObject> {
        let mut c = ReadCopy::new();
        c.add_index(
            "parity",
            index_fn(|o: &SimObject| {
                let mut v = IndexValues::new();
                v.push(Cow::Borrowed(if o.data % 2 == 0 { "even" } else { "odd" }));
                v
            }),
        )
        .unwrap();
        c
    }

    /// Both copies answer alike: same objects (the very `Arc`s) under every key, same index
    /// buckets.
    fn assert_same(a: &ReadCopy<SimObject>, b: &ReadCopy<SimObject>) {
        assert_eq!(a.len(), b.len());
        for o in a.list() {
            let key = o.key_ref().to_key();
            let found = b.get_by_key(key.as_str()).expect("a key the copy lost");
            assert!(Arc::ptr_eq(o, found));
        }
        for (index, value) in [
            ("parity", "even"),
            ("parity", "odd"),
            (NAMESPACE_INDEX, "ns0"),
            (NAMESPACE_INDEX, "ns1"),
        ] {
            assert_eq!(a.index_len(index, value), b.index_len(index, value));
        }
    }

    /// One value for `data % 3` of 1 or 2 (`x`, `y`), both for 0: [`IndexFunc::single_value`]
    /// answers for some objects only (a per-object answer the trait allows and the indexer
    /// honours).
    pub(crate) struct Tags;
    impl IndexFunc<SimObject> for Tags {
        fn index_values<'a>(&self, o: &'a SimObject) -> IndexValues<'a> {
            let mut v = IndexValues::new();
            if o.data % 3 != 2 {
                v.push(Cow::Borrowed("x"));
            }
            if o.data % 3 != 1 {
                v.push(Cow::Borrowed("y"));
            }
            v
        }
        fn single_value<'a>(&self, o: &'a SimObject) -> Option<Option<&'a str>> {
            match o.data % 3 {
                0 => None,
                1 => Some(Some("x")),
                _ => Some(Some("y")),
            }
        }
    }

    /// An index function that answers [`IndexFunc::single_value`] for the objects with one
    /// value and `None` for those with several (a per-object answer the trait allows and the
    /// indexer honours): an object going from two values to one of them leaves the other
    /// value's bucket, in the copy as in the indexer.
    #[test]
    fn a_function_single_for_some_objects_only_updates_as_the_indexer() {
        let mut oracle: super::super::Indexer<SimObject> = super::super::Indexer::new();
        oracle.add_index("tags", Tags).unwrap();
        oracle.record_changes(true);
        let mut c = ReadCopy::new();
        c.add_index("tags", Tags).unwrap();
        // Two values, then one of them (x), the same one, two again, the other one (y), two
        // again.
        for data in [0u64, 1, 4, 3, 2, 5, 6] {
            oracle.add(obj(Some("ns0"), "o", data));
            let mut changes = Vec::new();
            oracle.take_changes(&mut changes);
            for change in changes {
                c.apply(change);
            }
            for value in ["x", "y"] {
                let want: Vec<_> = oracle
                    .by_index("tags", value)
                    .unwrap()
                    .map(Arc::as_ptr)
                    .collect();
                let got: Vec<_> = c
                    .by_index("tags", value)
                    .unwrap()
                    .map(Arc::as_ptr)
                    .collect();
                assert_eq!(got, want, "data {data}, {value}");
            }
        }
    }

    /// A bucket is a list up to `FEW` objects and a table beyond, back to a list at half;
    /// whichever it is, it answers alike, and a bucket of ten takes ten pointers.
    #[test]
    fn a_bucket_is_a_list_while_small_and_a_table_while_large() {
        let mut c = with_parity();
        let is_list = |c: &ReadCopy<SimObject>| {
            matches!(c.indices[0].buckets.get("even"), Some(Bucket::Few(_)))
        };
        let objects: Vec<_> = (0..40u64)
            .map(|i| obj(Some("ns0"), &format!("o{i}"), 2 * i))
            .collect();
        for (i, o) in objects.iter().enumerate() {
            c.apply(upsert(o));
            assert_eq!(c.index_len("parity", "even"), Ok(i + 1));
            assert_eq!(is_list(&c), i < FEW, "{} objects", i + 1);
            if i == 9 {
                match c.indices[0].buckets.get("even") {
                    Some(Bucket::Few(list)) => assert_eq!(list.capacity(), 10),
                    _ => panic!("not a list"),
                }
            }
        }
        // Updates in place, then moves to the other bucket, then deletes, through both forms.
        for (i, o) in objects.iter().enumerate() {
            let mut moved = (**o).clone();
            moved.data += if i % 2 == 0 { 2 } else { 1 };
            c.apply(upsert(&Arc::new(moved)));
        }
        assert_eq!(c.index_len("parity", "even"), Ok(20));
        assert_eq!(c.index_len("parity", "odd"), Ok(20));
        assert!(!is_list(&c));
        for o in &objects[..32] {
            c.apply(Change::Delete {
                key: Key::new(o.namespace.as_deref(), &o.name),
            });
        }
        assert!(is_list(&c));
        assert_eq!(c.index_len("parity", "even"), Ok(4));
        let even: Vec<_> = c
            .by_index("parity", "even")
            .unwrap()
            .map(|o| o.data)
            .collect();
        assert_eq!(even.len(), 4);
        assert!(even.iter().all(|d| d % 2 == 0));
        for o in &objects[32..] {
            c.apply(Change::Delete {
                key: Key::new(o.namespace.as_deref(), &o.name),
            });
        }
        assert!(c.indices[0].buckets.is_empty());
        assert_eq!(c.list_index_values("parity").unwrap().count(), 0);
    }

    /// A copy made by copying another's tables finds every object, drops what it held before,
    /// and takes later changes as the original does.
    #[test]
    fn a_copy_of_the_tables_answers_and_changes_like_the_original() {
        let mut a = with_parity();
        let mut b = with_parity();
        b.apply(upsert(&obj(Some("ns0"), "stale", 1)));
        for i in 0..300u64 {
            let ns = [Some("ns0"), Some("ns1"), None][i as usize % 3];
            a.apply(upsert(&obj(ns, &format!("o{i}"), i)));
        }
        assert!(b.copy_from(&a));
        assert_same(&a, &b);
        assert!(b.get_by_key("ns0/stale").is_none());
        assert_eq!(b.index_len("parity", "even"), Ok(150));

        let later = [
            upsert(&obj(Some("ns0"), "o0", 1)),
            Change::Delete {
                key: Key::new(Some("ns1"), "o1"),
            },
            Change::Delete {
                key: Key::new(None, "o2"),
            },
            upsert(&obj(Some("ns1"), "new", 4)),
        ];
        for change in later {
            a.apply(change.clone());
            b.apply(change);
        }
        assert_same(&a, &b);
        assert_eq!(b.len(), 299);
        assert_eq!(b.get_by_key("ns0/o0").unwrap().data, 1);

        // Other indices: refused, nothing changed.
        let mut plain = ReadCopy::new();
        plain.apply(upsert(&obj(None, "kept", 0)));
        assert!(!plain.copy_from(&a));
        assert_eq!(plain.len(), 1);
        assert!(plain.get_by_key("kept").is_some());
    }
}
