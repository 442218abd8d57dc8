//! The Indexer: a key → object store plus named secondary indices (client-go `cache.Indexer`).

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use crate::hash::{HashMap, HashSet};
use crate::object::key::{KeyHashState, hash_of};
use hashbrown::hash_map::RawEntryMut;
use smallvec::SmallVec;

use crate::object::selector::{Labels, Selector};
use crate::object::{Key, KeyRef, Object, same_state};

mod read_copy;
#[cfg(any(test, feature = "spin"))]
pub(crate) use read_copy::ChangeRef;
pub use read_copy::ReadCopy;
#[cfg(test)]
pub(crate) use read_copy::tests as read_copy_tests;

/// One value an index function gives an object: borrowed from the object (no allocation),
/// or owned — a `String`, or a [`Key`] kept as it is (a short key lives inside it, so
/// returning an owner's `Key::new(ns, name)` allocates nothing).
///
/// Made with `.into()` from `&str`, `&String`, `String`, `Cow<str>`, `Key`, `&Key` and
/// `KeyRef`; reads as `&str`.
#[derive(Clone)]
pub struct IndexValue<'a>(ValueRepr<'a>);

#[derive(Clone)]
enum ValueRepr<'a> {
    Borrowed(&'a str),
    Owned(String),
    Key(Key),
}

impl<'a> IndexValue<'a> {
    /// The value.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            ValueRepr::Borrowed(s) => s,
            ValueRepr::Owned(s) => s,
            ValueRepr::Key(k) => k.as_str(),
        }
    }
}

impl core::ops::Deref for IndexValue<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for IndexValue<'_> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl core::borrow::Borrow<str> for IndexValue<'_> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for IndexValue<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for IndexValue<'_> {}

impl PartialEq<str> for IndexValue<'_> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for IndexValue<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for IndexValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for IndexValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'a> From<&'a str> for IndexValue<'a> {
    fn from(s: &'a str) -> Self {
        IndexValue(ValueRepr::Borrowed(s))
    }
}

impl<'a> From<&'a String> for IndexValue<'a> {
    fn from(s: &'a String) -> Self {
        IndexValue(ValueRepr::Borrowed(s))
    }
}

impl From<String> for IndexValue<'_> {
    fn from(s: String) -> Self {
        IndexValue(ValueRepr::Owned(s))
    }
}

impl<'a> From<Cow<'a, str>> for IndexValue<'a> {
    fn from(s: Cow<'a, str>) -> Self {
        match s {
            Cow::Borrowed(s) => IndexValue(ValueRepr::Borrowed(s)),
            Cow::Owned(s) => IndexValue(ValueRepr::Owned(s)),
        }
    }
}

impl From<Key> for IndexValue<'_> {
    fn from(k: Key) -> Self {
        IndexValue(ValueRepr::Key(k))
    }
}

impl<'a> From<&'a Key> for IndexValue<'a> {
    fn from(k: &'a Key) -> Self {
        IndexValue(ValueRepr::Borrowed(k.as_str()))
    }
}

impl From<KeyRef<'_>> for IndexValue<'_> {
    fn from(k: KeyRef<'_>) -> Self {
        IndexValue(ValueRepr::Key(k.to_key()))
    }
}

/// The values an index function returns for one object. Up to two values are stored inline,
/// and values borrowed from the object cost no allocation.
///
/// Build it from anything that is an [`IndexValue`] — a borrowed `&str`, a `String`, a
/// [`Key`] — by collecting (`o.label("app").into_iter().collect()`,
/// `owners.map(|o| Key::new(ns, o)).collect()`), with [`one`](Self::one), or with
/// [`push`](Self::push) / [`with`](Self::with). Reads as a slice of [`IndexValue`]s.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct IndexValues<'a>(SmallVec<[IndexValue<'a>; 2]>);

impl<'a> IndexValues<'a> {
    /// No values.
    pub fn new() -> Self {
        IndexValues(SmallVec::new())
    }

    /// One value.
    pub fn one(value: impl Into<IndexValue<'a>>) -> Self {
        let mut values = IndexValues::new();
        values.push(value);
        values
    }

    /// Adds a value.
    pub fn push(&mut self, value: impl Into<IndexValue<'a>>) {
        self.0.push(value.into());
    }

    /// These values and `value`.
    pub fn with(mut self, value: impl Into<IndexValue<'a>>) -> Self {
        self.push(value);
        self
    }
}

impl<'a> core::ops::Deref for IndexValues<'a> {
    type Target = [IndexValue<'a>];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl fmt::Debug for IndexValues<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl<'a, V: Into<IndexValue<'a>>> FromIterator<V> for IndexValues<'a> {
    fn from_iter<I: IntoIterator<Item = V>>(iter: I) -> Self {
        IndexValues(iter.into_iter().map(Into::into).collect())
    }
}

impl<'a, V: Into<IndexValue<'a>>> Extend<V> for IndexValues<'a> {
    fn extend<I: IntoIterator<Item = V>>(&mut self, iter: I) {
        self.0.extend(iter.into_iter().map(Into::into));
    }
}

impl<'a> IntoIterator for IndexValues<'a> {
    type Item = IndexValue<'a>;
    type IntoIter = smallvec::IntoIter<[IndexValue<'a>; 2]>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'s, 'a> IntoIterator for &'s IndexValues<'a> {
    type Item = &'s IndexValue<'a>;
    type IntoIter = core::slice::Iter<'s, IndexValue<'a>>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A named index function: maps an object to zero or more index values.
///
/// Any `Fn(&K) -> IndexValues<'_>` closure is one; pass closures through [`index_fn`] so the
/// compiler infers the borrowed-return signature.
pub trait IndexFunc<K>: Send + Sync {
    /// The index values of `obj`.
    fn index_values<'a>(&self, obj: &'a K) -> IndexValues<'a>;

    /// `Some(key)` when this function is exactly "the value of label `key`, none when the
    /// label is absent", as [`LabelIndex`] is. [`Indexer::select`] then answers `key=v` and
    /// `key in (…)` terms from this index instead of scanning. `None` (the default) for any
    /// other function: the indexer never guesses what a function computes.
    fn label_key(&self) -> Option<&str> {
        None
    }

    /// Whether `old` and `new` have the same index values (an update that keeps the object in
    /// its buckets, the common case). The default computes and compares both; a function that
    /// can tell more cheaply overrides it, as [`LabelIndex`] does.
    fn same_values(&self, old: &K, new: &K) -> bool {
        self.index_values(old) == self.index_values(new)
    }

    /// For a function that gives every object at most one value: `Some(value)` (`Some(None)`:
    /// no value), so that the indexer updates the index without building [`IndexValues`].
    /// `None` (the default): the function may give several values; [`index_values`] is used.
    ///
    /// [`index_values`]: Self::index_values
    fn single_value<'a>(&self, obj: &'a K) -> Option<Option<&'a str>> {
        let _ = obj;
        None
    }
}

impl<K, F> IndexFunc<K> for F
where
    F: for<'a> Fn(&'a K) -> IndexValues<'a> + Send + Sync,
{
    fn index_values<'a>(&self, obj: &'a K) -> IndexValues<'a> {
        self(obj)
    }
}

/// Helps closure type inference for index functions that borrow from the object:
///
/// ```
/// use informer_core::object::{DynamicObject, Key, Object};
/// use informer_core::cache::indexer::{index_fn, IndexValues};
///
/// // A value borrowed from the object: no allocation.
/// let by_app = index_fn(|o: &DynamicObject| o.label("app").into_iter().collect());
/// // Keys (here: of the object's owners), owned values: no `Cow` to spell out.
/// let by_owner = index_fn(|o: &DynamicObject| {
///     let owners = o.owner_references().unwrap_or_default();
///     owners.iter().map(|r| Key::new(o.namespace(), &r.name)).collect()
/// });
/// // A fixed value, and one built for the object.
/// let tagged = index_fn(|o: &DynamicObject| {
///     IndexValues::one("all").with(format!("len-{}", o.name().len()))
/// });
/// # let _ = (by_app, by_owner, tagged);
/// ```
pub fn index_fn<K, F>(f: F) -> F
where
    F: for<'a> Fn(&'a K) -> IndexValues<'a> + Send + Sync,
{
    f
}

/// The index function "the value of one label": one index value, the label's, or none when
/// the label is absent. Indices built with it (see [`Indexer::add_label_index`]) let
/// [`Indexer::select`] look up equality terms instead of scanning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelIndex {
    key: Box<str>,
}

impl LabelIndex {
    /// The index of label `key`.
    pub fn new(key: &str) -> Self {
        LabelIndex { key: key.into() }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl<K: Labels> IndexFunc<K> for LabelIndex {
    fn index_values<'a>(&self, obj: &'a K) -> IndexValues<'a> {
        obj.label(&self.key).into_iter().collect()
    }

    fn label_key(&self) -> Option<&str> {
        Some(&self.key)
    }

    fn same_values(&self, old: &K, new: &K) -> bool {
        // Most updates change no label: one comparison of the whole label maps, when the
        // type can make it cheaply, spares looking the label up in both.
        old.same_labels(new) || old.label(&self.key) == new.label(&self.key)
    }

    fn single_value<'a>(&self, obj: &'a K) -> Option<Option<&'a str>> {
        Some(obj.label(&self.key))
    }
}

/// The name [`Indexer::add_label_index`] gives the index of label `key`: `label:<key>`.
pub fn label_index_name(key: &str) -> String {
    alloc::format!("label:{key}")
}

/// The name of the built-in namespace index (client-go `cache.NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// The namespace index function: the object's namespace, none for cluster-scoped objects.
pub fn namespace_index_values<K: Object>(obj: &K) -> IndexValues<'_> {
    obj.namespace().into_iter().collect()
}

/// The built-in namespace index's function: [`namespace_index_values`], with its one value.
struct NamespaceIndex;

impl<K: Object> IndexFunc<K> for NamespaceIndex {
    fn index_values<'a>(&self, obj: &'a K) -> IndexValues<'a> {
        namespace_index_values(obj)
    }

    fn single_value<'a>(&self, obj: &'a K) -> Option<Option<&'a str>> {
        Some(obj.namespace())
    }
}

/// An Indexer error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexError {
    /// No index of that name exists.
    UnknownIndex {
        /// The name asked for.
        name: String,
    },
    /// An index of that name already exists.
    IndexExists {
        /// The name given.
        name: String,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::UnknownIndex { name } => write!(f, "index {name:?} does not exist"),
            IndexError::IndexExists { name } => write!(f, "index {name:?} already exists"),
        }
    }
}

impl core::error::Error for IndexError {}

/// An index function shared by several indexers (the copies a runtime keeps for its readers,
/// `shared::Views`, feature `spin`): cloning it clones an `Arc`.
pub struct SharedIndexFunc<K>(pub Arc<dyn IndexFunc<K>>);

impl<K> Clone for SharedIndexFunc<K> {
    fn clone(&self) -> Self {
        SharedIndexFunc(self.0.clone())
    }
}

impl<K> fmt::Debug for SharedIndexFunc<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexFunc")
            .field("label_key", &self.0.label_key())
            .finish_non_exhaustive()
    }
}

impl<K> IndexFunc<K> for SharedIndexFunc<K> {
    fn index_values<'a>(&self, obj: &'a K) -> IndexValues<'a> {
        self.0.index_values(obj)
    }

    fn same_values(&self, old: &K, new: &K) -> bool {
        self.0.same_values(old, new)
    }

    fn single_value<'a>(&self, obj: &'a K) -> Option<Option<&'a str>> {
        self.0.single_value(obj)
    }

    // Forwarded so that the selector planner recognises a shared label index.
    fn label_key(&self) -> Option<&str> {
        self.0.label_key()
    }
}

/// One change applied to an [`Indexer`], as recorded by
/// [`record_changes`](Indexer::record_changes): replaying the changes in order on another
/// indexer ([`Indexer::apply`]) brings it to the same content. Keys and objects are shared
/// (`Arc`), so a change costs two reference counts, never a copy.
#[non_exhaustive]
pub enum Change<K> {
    /// `obj` was stored under `key` (added or replacing what was there).
    Upsert {
        /// The object's key.
        key: Key,
        /// The object now stored.
        obj: Arc<K>,
    },
    /// The object under `key` was removed.
    Delete {
        /// The removed object's key.
        key: Key,
    },
    /// Everything was removed (the start of an [`Indexer::replace`]).
    Clear,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Upsert { key, obj } => Change::Upsert {
                key: key.clone(),
                obj: obj.clone(),
            },
            Change::Delete { key } => Change::Delete { key: key.clone() },
            Change::Clear => Change::Clear,
        }
    }
}

impl<K> fmt::Debug for Change<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Upsert { key, .. } => f.debug_struct("Upsert").field("key", key).finish(),
            Change::Delete { key } => f.debug_struct("Delete").field("key", key).finish(),
            Change::Clear => f.write_str("Clear"),
        }
    }
}

/// The journal capacity kept between steps (a watch step records at most a few hundred
/// changes; a relist's hundred thousand are given back once taken).
pub const JOURNAL_KEEP: usize = 1024;

/// The keys of one bucket, hashed by [`hash_of`] as the store is: a change hashes its key once
/// for the store and every index.
type KeySet = hashbrown::HashTable<Key>;

/// Value → keys of the objects having that value. Empty buckets are removed.
type Buckets = HashMap<Box<str>, KeySet>;

/// The store: objects by key, hashed by the key's own hash (see `KeyHashState`).
type Items<K> = hashbrown::HashMap<Key, Arc<K>, KeyHashState>;

/// A key with its hash ([`hash_of`]), for the index buckets.
#[derive(Clone, Copy)]
struct Hashed<'a> {
    key: &'a Key,
    hash: u64,
}

struct Index<K> {
    /// The built-in namespace index: an object's key contains its namespace, so an update
    /// (same key) can never move it between buckets.
    is_namespace: bool,
    /// The label this index holds the values of ([`IndexFunc::label_key`]).
    label_key: Option<Box<str>>,
    name: Box<str>,
    func: Box<dyn IndexFunc<K>>,
    buckets: Buckets,
}

impl<K> Index<K> {
    fn insert(&mut self, value: &str, k: Hashed<'_>) {
        let set = match self.buckets.get_mut(value) {
            Some(set) => set,
            None => self
                .buckets
                .entry(Box::from(value))
                .or_insert_with(|| KeySet::with_capacity(1)),
        };
        // One probe, whether or not the key is there (it never is while the buckets agree
        // with the store).
        if let hashbrown::hash_table::Entry::Vacant(v) = set.entry(k.hash, |x| x == k.key, hash_of)
        {
            v.insert(k.key.clone());
        }
    }

    fn remove(&mut self, value: &str, k: Hashed<'_>) {
        if let Some(set) = self.buckets.get_mut(value) {
            if let Ok(e) = set.find_entry(k.hash, |x| x == k.key) {
                e.remove();
            }
            if set.is_empty() {
                self.buckets.remove(value);
            }
        }
    }

    /// Puts `key` into the buckets of `new`, an object new to the store.
    fn added(&mut self, key: Hashed<'_>, new: &K) {
        match self.func.single_value(new) {
            Some(Some(v)) => self.insert(v, key),
            Some(None) => {}
            None => self.update_values(key, None, Some(new)),
        }
    }

    /// Takes `key` out of the buckets of `old`, an object leaving the store.
    fn removed(&mut self, key: Hashed<'_>, old: &K) {
        match self.func.single_value(old) {
            Some(Some(v)) => self.remove(v, key),
            Some(None) => {}
            None => self.update_values(key, Some(old), None),
        }
    }

    /// Moves `key` between buckets for a stored object going from `old` to `new`.
    fn update(&mut self, key: Hashed<'_>, old: &K, new: &K) {
        if self.func.same_values(old, new) {
            return;
        }
        // A function with one value per object (a label, the namespace): no IndexValues.
        let func = &*self.func;
        if let (Some(old_one), Some(new_one)) = (func.single_value(old), func.single_value(new)) {
            if old_one != new_one {
                if let Some(v) = old_one {
                    self.remove(v, key);
                }
                if let Some(v) = new_one {
                    self.insert(v, key);
                }
            }
            return;
        }
        self.update_values(key, Some(old), Some(new));
    }

    /// [`added`](Self::added), [`removed`](Self::removed) and [`update`](Self::update) for an
    /// index function with several values per object, through [`IndexValues`].
    fn update_values(&mut self, key: Hashed<'_>, old: Option<&K>, new: Option<&K>) {
        let old_vals = old.map(|o| self.func.index_values(o)).unwrap_or_default();
        let new_vals = new.map(|o| self.func.index_values(o)).unwrap_or_default();
        if old_vals == new_vals {
            return;
        }
        for v in old_vals.iter().filter(|v| !new_vals.contains(v)) {
            self.remove(v, key);
        }
        for v in new_vals.iter().filter(|v| !old_vals.contains(v)) {
            self.insert(v, key);
        }
    }
}

/// Whether an object given to the store replaces the stored one under its key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stored {
    /// Always (a watch event, a resync).
    Always,
    /// Unless the stored object is the same state of the same object (the same uid and
    /// resourceVersion: every write to an object changes its resourceVersion): an object of a
    /// list (a `Replaced` delta). A relist then changes nothing for the objects that did not
    /// change (no index update, no journal entry for the readers' copies), and the listed
    /// duplicate is freed at once instead of the cached object.
    UnlessSameState,
}

/// A recorded change with its key's hash ([`hash_of`]; 0 for [`Change::Clear`]).
pub(crate) struct Journaled<K> {
    // Read by the readers' copies only (feature `spin`).
    #[cfg_attr(not(any(test, feature = "spin")), allow(dead_code))]
    pub(crate) hash: u64,
    pub(crate) change: Change<K>,
}

/// What an indexer records while [`Indexer::record_changes`] is on.
type Journal<K> = Option<Vec<Journaled<K>>>;

/// Puts `obj` into `slot`, the stored entry of `key`, and updates the indices (the namespace
/// index aside: the key holds the namespace) and the journal, unless it is the very object
/// stored, or `how` keeps the stored one. Returns what was stored and what is stored now.
fn store_over<K: Object>(
    indices: &mut [Index<K>],
    journal: &mut Journal<K>,
    key: Hashed<'_>,
    slot: &mut Arc<K>,
    obj: Arc<K>,
    how: Stored,
) -> (Option<Arc<K>>, Arc<K>) {
    if how == Stored::UnlessSameState && same_state(&**slot, &*obj) {
        return (Some(slot.clone()), slot.clone());
    }
    let old = core::mem::replace(slot, obj);
    let new = &*slot;
    if !Arc::ptr_eq(&old, new) {
        for index in indices.iter_mut().filter(|i| !i.is_namespace) {
            index.update(key, &old, new);
        }
        if let Some(journal) = journal {
            journal.push(Journaled {
                hash: key.hash,
                change: Change::Upsert {
                    key: key.key.clone(),
                    obj: new.clone(),
                },
            });
        }
    }
    (Some(old), new.clone())
}

/// The body of [`Indexer::upsert_with`] and [`Indexer::upsert_hashed`], given the store's
/// `entry` for `kr` (the key of `obj`) and its `hash`: a macro, not a shared function, because
/// one function called by both cost the event path (`upsert_with`) ~46 instructions an event
/// (the compiler stopped inlining it into each watch event's path).
macro_rules! upsert_at {
    ($indexer:ident, $entry:expr, $hash:expr, $kr:expr, $obj:expr, $how:expr) => {
        match $entry {
            RawEntryMut::Occupied(e) => {
                let (stored, slot) = e.into_key_value();
                let key = stored.clone();
                let k = Hashed {
                    key: stored,
                    hash: $hash,
                };
                let (old, now) = store_over(
                    &mut $indexer.indices,
                    &mut $indexer.journal,
                    k,
                    slot,
                    $obj,
                    $how,
                );
                (key, old, now)
            }
            RawEntryMut::Vacant(v) => {
                let key = $kr.to_key();
                let new = New {
                    slot: v,
                    hash: $hash,
                };
                new.store(
                    &mut $indexer.indices,
                    &mut $indexer.journal,
                    key.clone(),
                    &$obj,
                );
                (key, None, $obj)
            }
        }
    };
}

/// The store's entry for `key` and the key's hash, which the index buckets take too.
fn entry_of<'a, K, Q>(
    items: &'a mut Items<K>,
    key: &Q,
) -> (u64, RawEntryMut<'a, Key, Arc<K>, KeyHashState>)
where
    Q: core::hash::Hash + hashbrown::Equivalent<Key> + ?Sized,
{
    let hash = hash_of(key);
    (
        hash,
        items.raw_entry_mut().from_key_hashed_nocheck(hash, key),
    )
}

/// The store's vacant slot for a key not stored yet, found with the key's `hash`.
struct New<'a, K> {
    slot: hashbrown::hash_map::RawVacantEntryMut<'a, Key, Arc<K>, KeyHashState>,
    hash: u64,
}

impl<K> New<'_, K> {
    /// Stores `obj` under `key`: in every index, in the journal, then in the slot.
    fn store(self, indices: &mut [Index<K>], journal: &mut Journal<K>, key: Key, obj: &Arc<K>) {
        let k = Hashed {
            key: &key,
            hash: self.hash,
        };
        for index in indices.iter_mut() {
            index.added(k, obj);
        }
        if let Some(journal) = journal {
            journal.push(Journaled {
                hash: self.hash,
                change: Change::Upsert {
                    key: key.clone(),
                    obj: obj.clone(),
                },
            });
        }
        self.slot.insert_hashed_nocheck(self.hash, key, obj.clone());
    }
}

/// A thread-unsafe store of objects by [`Key`] with named indices, as client-go's
/// `cache.Indexer` (threadSafeMap + indexers) minus the lock: the caller owns it.
///
/// The namespace index ([`NAMESPACE_INDEX`]) is built in. Objects are stored as `Arc<K>` and
/// never copied. Every mutation updates every index before it returns, so a caller that holds
/// `&Indexer` (a reader behind the runtime's lock, say) never sees a half-applied change.
pub struct Indexer<K> {
    items: Items<K>,
    indices: Vec<Index<K>>,
    /// The changes applied since the last [`take_changes`](Indexer::take_changes), when
    /// recording ([`record_changes`](Indexer::record_changes)).
    journal: Journal<K>,
}

impl<K: Object + 'static> Default for Indexer<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for Indexer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Indexer")
            .field("len", &self.items.len())
            .field(
                "indices",
                &self.indices.iter().map(|i| &*i.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<K: Object + 'static> Indexer<K> {
    /// An empty indexer with the namespace index.
    pub fn new() -> Self {
        let mut idx = Indexer {
            items: Items::default(),
            indices: Vec::new(),
            journal: None,
        };
        idx.indices.push(Index {
            is_namespace: true,
            label_key: None,
            name: NAMESPACE_INDEX.into(),
            func: Box::new(NamespaceIndex),
            buckets: HashMap::default(),
        });
        idx
    }

    /// Adds a named index. Objects already stored are indexed at once (CONFORMANCE 3).
    ///
    /// Fails with [`IndexError::IndexExists`] if the name is taken.
    pub fn add_index(
        &mut self,
        name: &str,
        func: impl IndexFunc<K> + 'static,
    ) -> Result<(), IndexError> {
        if self.index_pos(name).is_ok() {
            return Err(IndexError::IndexExists { name: name.into() });
        }
        let mut index = Index {
            is_namespace: false,
            label_key: func.label_key().map(Into::into),
            name: name.into(),
            func: Box::new(func),
            buckets: HashMap::default(),
        };
        for (key, obj) in &self.items {
            let key = Hashed {
                key,
                hash: hash_of(key),
            };
            index.added(key, obj);
        }
        self.indices.push(index);
        Ok(())
    }

    /// Removes the index `name`, the namespace index included (for a cache that no reader
    /// queries by index, such as the core's own cache when readers read copies of it: its
    /// buckets cost memory per object for nothing). Fails with [`IndexError::UnknownIndex`].
    /// [`select`](Self::select) without the namespace index checks each candidate's namespace.
    pub fn remove_index(&mut self, name: &str) -> Result<(), IndexError> {
        let pos = self.index_pos(name)?;
        self.indices.remove(pos);
        Ok(())
    }

    /// The names of the indices, the namespace index first (if not removed).
    pub fn index_names(&self) -> impl Iterator<Item = &str> {
        self.indices.iter().map(|i| &*i.name)
    }

    /// Adds or replaces the object under its key; returns the previous object.
    pub fn add(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        self.upsert(obj).1
    }

    /// Same as [`add`](Self::add) (client-go's `Update`).
    pub fn update(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        self.add(obj)
    }

    /// Stores `obj` under `key` (which must be the object's key), reusing `key`'s allocation.
    /// Returns the previous object.
    pub fn insert(&mut self, key: Key, obj: Arc<K>) -> Option<Arc<K>> {
        self.insert_with(key, obj, Stored::Always).0
    }

    /// [`insert`](Self::insert), keeping the stored object when `how` says so. Returns the
    /// previous object and the object stored now.
    pub(crate) fn insert_with(
        &mut self,
        key: Key,
        obj: Arc<K>,
        how: Stored,
    ) -> (Option<Arc<K>>, Arc<K>) {
        // One hash of the key, for the store and every index.
        let (hash, entry) = entry_of(&mut self.items, &key);
        match entry {
            RawEntryMut::Occupied(e) => {
                let (stored, slot) = e.into_key_value();
                let k = Hashed { key: stored, hash };
                store_over(&mut self.indices, &mut self.journal, k, slot, obj, how)
            }
            RawEntryMut::Vacant(v) => {
                let new = New { slot: v, hash };
                new.store(&mut self.indices, &mut self.journal, key, &obj);
                (None, obj)
            }
        }
    }

    /// Stores `obj` under its own key with one lookup of the key (the driver's straight path,
    /// for an object whose key has nothing queued); returns the stored key and the previous
    /// object. A new key is allocated only for an object not stored yet.
    pub fn upsert(&mut self, obj: Arc<K>) -> (Key, Option<Arc<K>>) {
        let (key, old, _) = self.upsert_with(obj, Stored::Always);
        (key, old)
    }

    /// [`upsert`](Self::upsert), keeping the stored object when `how` says so. Returns the
    /// stored key, the previous object and the object stored now.
    pub(crate) fn upsert_with(
        &mut self,
        obj: Arc<K>,
        how: Stored,
    ) -> (Key, Option<Arc<K>>, Arc<K>) {
        // One hash of the key, for the store and every index; the key is built only for an
        // object not stored yet.
        let kr = obj.key_ref();
        let (hash, entry) = entry_of(&mut self.items, &kr);
        upsert_at!(self, entry, hash, kr, obj, how)
    }

    /// [`upsert_with`](Self::upsert_with) of an object whose key's hash is known already
    /// (`hash`, [`hash_of`] its key), for a relist, which hashed it to find the deletes.
    pub(crate) fn upsert_hashed(
        &mut self,
        hash: u64,
        obj: Arc<K>,
        how: Stored,
    ) -> (Key, Option<Arc<K>>, Arc<K>) {
        let kr = obj.key_ref();
        let entry = self
            .items
            .raw_entry_mut()
            .from_key_hashed_nocheck(hash, &kr);
        upsert_at!(self, entry, hash, kr, obj, how)
    }

    /// The object stored under `key`, whose hash is `hash` ([`hash_of`] it).
    pub(crate) fn get_hashed(&self, hash: u64, key: KeyRef<'_>) -> Option<(&Key, &Arc<K>)> {
        self.items.raw_entry().from_key_hashed_nocheck(hash, &key)
    }

    /// Removes the object stored under `key`; returns the stored key and the object.
    pub fn remove_entry(&mut self, key: KeyRef<'_>) -> Option<(Key, Arc<K>)> {
        let (hash, entry) = entry_of(&mut self.items, &key);
        let RawEntryMut::Occupied(e) = entry else {
            return None;
        };
        let (key, old) = e.remove_entry();
        let k = Hashed { key: &key, hash };
        for index in &mut self.indices {
            index.removed(k, &old);
        }
        if let Some(journal) = &mut self.journal {
            journal.push(Journaled {
                hash,
                change: Change::Delete { key: key.clone() },
            });
        }
        Some((key, old))
    }

    /// Removes the object stored under the key of `obj`; returns it.
    pub fn delete(&mut self, obj: &K) -> Option<Arc<K>> {
        self.delete_key(obj.key_ref())
    }

    /// Removes the object stored under `key`; returns it. Removes it from every index bucket and
    /// drops buckets that become empty.
    pub fn delete_key(&mut self, key: KeyRef<'_>) -> Option<Arc<K>> {
        self.remove_entry(key).map(|(_, old)| old)
    }

    /// The stored object with the same key as `obj`.
    pub fn get(&self, obj: &K) -> Option<&Arc<K>> {
        self.items.get(&obj.key_ref())
    }

    /// The stored object under `key` (`namespace/name` or `name`).
    pub fn get_by_key(&self, key: &str) -> Option<&Arc<K>> {
        let parts = match key.split_once('/') {
            Some((ns, name)) => KeyRef::new(Some(ns), name),
            None => KeyRef::new(None, key),
        };
        self.items.get(&parts)
    }

    /// The stored object and its key under `key`.
    pub fn get_key_value(&self, key: KeyRef<'_>) -> Option<(&Key, &Arc<K>)> {
        self.items.get_key_value(&key)
    }

    /// Whether an object is stored under `key`.
    pub fn contains_key(&self, key: KeyRef<'_>) -> bool {
        self.items.contains_key(&key)
    }

    /// Makes room for `n` more objects, and their entries in the journal when it is on.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.items.reserve(n);
        if let Some(journal) = &mut self.journal {
            journal.reserve(n);
        }
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> impl Iterator<Item = &Arc<K>> {
        self.items.values()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> impl Iterator<Item = &Key> {
        self.items.keys()
    }

    /// Every `(key, object)` pair.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Arc<K>)> {
        self.items.iter()
    }

    /// Replaces the whole content with `objects` and rebuilds every index (CONFORMANCE 4).
    ///
    /// Keys already stored are reused, so a relist of an unchanged set allocates no keys.
    pub fn replace(&mut self, objects: impl IntoIterator<Item = Arc<K>>) {
        let mut old = core::mem::take(&mut self.items);
        for index in &mut self.indices {
            index.buckets.clear();
        }
        if let Some(journal) = &mut self.journal {
            journal.clear();
            journal.push(Journaled {
                hash: 0,
                change: Change::Clear,
            });
        }
        for obj in objects {
            let key = match old.remove_entry(&obj.key_ref()) {
                Some((k, _)) => k,
                None => match self.items.get_key_value(&obj.key_ref()) {
                    Some((k, _)) => k.clone(),
                    None => obj.key_ref().to_key(),
                },
            };
            self.insert(key, obj);
        }
    }

    /// Starts (`true`) or stops recording every change applied from now on, for
    /// [`take_changes`](Self::take_changes). Stopping drops what was recorded. Recording costs
    /// one entry (two reference counts) per change and no allocation once the journal's
    /// buffer has grown to the largest step.
    pub fn record_changes(&mut self, on: bool) {
        match (on, &self.journal) {
            (true, None) => self.journal = Some(Vec::new()),
            (false, Some(_)) => self.journal = None,
            _ => {}
        }
    }

    /// Whether changes were recorded and not yet taken.
    pub fn has_changes(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| !j.is_empty())
    }

    /// Moves the changes recorded since the last call to the end of `into`, in the order they
    /// were applied. The journal keeps its buffer.
    pub fn take_changes(&mut self, into: &mut Vec<Change<K>>) {
        if let Some(journal) = &mut self.journal {
            into.extend(journal.drain(..).map(|j| j.change));
            // A relist grew it to the list's size: give that back once it is taken.
            if journal.capacity() > JOURNAL_KEEP {
                journal.shrink_to(JOURNAL_KEEP);
            }
        }
    }

    /// [`take_changes`](Self::take_changes) with each change's key hash ([`hash_of`]), which
    /// the store computed anyway: the readers' copies take it as it is.
    #[cfg(any(test, feature = "spin"))]
    pub(crate) fn take_journaled(&mut self, into: &mut Vec<Journaled<K>>) {
        if let Some(journal) = &mut self.journal {
            if into.is_empty() && journal.len() > JOURNAL_KEEP {
                // A large step (a list): its buffer changes hands rather than being copied
                // into fresh memory (in a new process, a page fault per 4 KiB of it); the
                // journal goes on in `into`'s former buffer.
                core::mem::swap(into, journal);
            } else {
                into.append(journal);
            }
            if journal.capacity() > JOURNAL_KEEP {
                journal.shrink_to(JOURNAL_KEEP);
            }
        }
    }

    /// Applies one recorded change (from another indexer's
    /// [`take_changes`](Self::take_changes)). Replaying a journal in order on an indexer that
    /// held the same content as the recording one when recording started leaves both equal.
    pub fn apply(&mut self, change: Change<K>) {
        match change {
            Change::Upsert { key, obj } => {
                self.insert(key, obj);
            }
            Change::Delete { key } => {
                self.delete_key(key.as_ref_parts());
            }
            Change::Clear => self.replace(core::iter::empty()),
        }
    }

    fn index_pos(&self, name: &str) -> Result<usize, IndexError> {
        self.indices
            .iter()
            .position(|i| &*i.name == name)
            .ok_or_else(|| IndexError::UnknownIndex { name: name.into() })
    }

    /// The keys of the objects whose `name` index values include `value`.
    pub fn index_keys(
        &self,
        name: &str,
        value: &str,
    ) -> Result<impl Iterator<Item = &Key>, IndexError> {
        let index = &self.indices[self.index_pos(name)?];
        Ok(index.buckets.get(value).into_iter().flatten())
    }

    /// The objects whose `name` index values include `value` (client-go `ByIndex`).
    pub fn by_index(
        &self,
        name: &str,
        value: &str,
    ) -> Result<impl Iterator<Item = &Arc<K>>, IndexError> {
        Ok(self
            .index_keys(name, value)?
            .filter_map(|k| self.items.get(k)))
    }

    /// The objects sharing at least one `name` index value with `obj` (client-go `Index`).
    /// Each object appears once.
    pub fn index(&self, name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        let index = &self.indices[self.index_pos(name)?];
        let values = index.func.index_values(obj);
        let mut seen: HashSet<&Key> = HashSet::default();
        let mut out = Vec::new();
        for v in &values {
            for key in index.buckets.get(&**v).into_iter().flatten() {
                if seen.insert(key) {
                    if let Some(o) = self.items.get(key) {
                        out.push(o.clone());
                    }
                }
            }
        }
        Ok(out)
    }

    /// The values of the `name` index that have at least one object (client-go
    /// `ListIndexFuncValues`).
    pub fn list_index_values(&self, name: &str) -> Result<impl Iterator<Item = &str>, IndexError> {
        let index = &self.indices[self.index_pos(name)?];
        Ok(index.buckets.keys().map(|v| &**v))
    }

    /// Number of objects with value `value` in index `name`.
    pub fn index_len(&self, name: &str, value: &str) -> Result<usize, IndexError> {
        let index = &self.indices[self.index_pos(name)?];
        Ok(index.buckets.get(value).map_or(0, KeySet::len))
    }
}

impl<K: Object + Labels + 'static> Indexer<K> {
    /// Adds the index of label `key` ([`LabelIndex`]) under the name
    /// [`label_index_name(key)`](label_index_name), so that [`select`](Self::select) can use it.
    ///
    /// Fails with [`IndexError::IndexExists`] if that name is taken.
    pub fn add_label_index(&mut self, key: &str) -> Result<(), IndexError> {
        self.add_index(&label_index_name(key), LabelIndex::new(key))
    }

    /// The stored objects whose labels match `selector`, in `namespace` if given (`None`, or
    /// `Some("")` as client-go's `NamespaceAll`: every namespace and cluster-scoped objects).
    ///
    /// Looks at as few objects as it can: when a term `key=v`, `key==v` or `key in (…)` has a
    /// label index ([`IndexFunc::label_key`], e.g. from [`add_label_index`](Self::add_label_index)),
    /// only the objects in that index's buckets are checked (the smallest such candidate set,
    /// or the namespace's bucket if smaller); otherwise the namespace's objects, or every
    /// object. Each match appears once. Allocates nothing.
    pub fn select<'a>(
        &'a self,
        selector: &'a Selector,
        namespace: Option<&'a str>,
    ) -> Select<'a, K> {
        let namespace = namespace.filter(|ns| !ns.is_empty());
        let ns_index = self.indices.iter().find(|i| i.is_namespace);
        let ns_bucket = namespace.and_then(|ns| Some(ns_index?.buckets.get(ns)));
        let plan = plan_selection(
            selector,
            ns_bucket,
            |b| b.len(),
            |key| {
                self.indices
                    .iter()
                    .find(|i| i.label_key.as_deref() == Some(key))
                    .map(|i| &i.buckets)
            },
            KeySet::len,
        );
        let (namespace, source) = match plan {
            Plan::Empty => (namespace, Source::Empty),
            Plan::Labels(buckets, values) => (
                namespace,
                Source::Buckets {
                    buckets,
                    values: values.iter(),
                    keys: None,
                },
            ),
            // The bucket holds only the namespace's objects: no need to check it again.
            Plan::Namespace(bucket) => (None, Source::Bucket(bucket.iter())),
            Plan::All => (namespace, Source::All(self.items.values())),
        };
        Select {
            items: Some(&self.items),
            selector,
            namespace,
            source,
        }
    }
}

/// Where a selection looks, as [`plan_selection`] chose it.
pub(crate) enum Plan<'a, Q, B, N> {
    /// Nothing can match (the namespace has no objects).
    Empty,
    /// The buckets of a label index for these values.
    Labels(&'a HashMap<Q, B>, &'a [Box<str>]),
    /// The namespace's objects.
    Namespace(&'a N),
    /// Every object.
    All,
}

/// How a selection is planned, shared by [`Indexer::select`] and [`ReadCopy::select`]: the
/// cheapest label index ([`cheapest_label_plan`]) unless the namespace's bucket (`namespace`:
/// `None` for every namespace, `Some(None)` for a namespace without objects) holds fewer
/// objects; otherwise the namespace's bucket, or every object.
pub(crate) fn plan_selection<'a, Q, B, N>(
    selector: &'a Selector,
    namespace: Option<Option<&'a N>>,
    namespace_len: impl Fn(&N) -> usize,
    index_of: impl Fn(&str) -> Option<&'a HashMap<Q, B>>,
    len: impl Fn(&B) -> usize,
) -> Plan<'a, Q, B, N>
where
    Q: core::borrow::Borrow<str> + core::hash::Hash + Eq,
{
    let best = cheapest_label_plan(selector, index_of, len);
    match (best, namespace) {
        (_, Some(None)) => Plan::Empty,
        (Some((cost, buckets, values)), ns)
            if ns.flatten().is_none_or(|b| cost <= namespace_len(b)) =>
        {
            Plan::Labels(buckets, values)
        }
        (_, Some(Some(bucket))) => Plan::Namespace(bucket),
        (_, None) => Plan::All,
    }
}

/// A label index chosen for a selection: objects to check, the index's buckets, the values.
pub(crate) type LabelPlan<'a, Q, B> = (usize, &'a HashMap<Q, B>, &'a [Box<str>]);

/// The cheapest label index for a selection, shared by [`Indexer::select`] and
/// [`ReadCopy::select`]: among the selector's `key=v`, `key==v` and `key in (…)` terms whose
/// label has an index (`index_of(key)`), the one whose buckets for the term's values hold the
/// fewest objects (`len` of a bucket), with that count, the buckets and the values.
pub(crate) fn cheapest_label_plan<'a, Q, B>(
    selector: &'a Selector,
    index_of: impl Fn(&str) -> Option<&'a HashMap<Q, B>>,
    len: impl Fn(&B) -> usize,
) -> Option<LabelPlan<'a, Q, B>>
where
    Q: core::borrow::Borrow<str> + core::hash::Hash + Eq,
{
    let mut best: Option<LabelPlan<'a, Q, B>> = None;
    for req in selector.requirements() {
        let Some(values) = req.required_values() else {
            continue;
        };
        let Some(buckets) = index_of(req.key()) else {
            continue;
        };
        let cost = values
            .iter()
            .map(|v| buckets.get(&**v).map_or(0, &len))
            .sum();
        if best.is_none_or(|(c, ..)| cost < c) {
            best = Some((cost, buckets, values));
        }
    }
    best
}

/// The iterator [`Indexer::select`] returns.
pub struct Select<'a, K> {
    /// The map the keys of `Bucket` and `Buckets` are looked up in (`None` for a
    /// [`ReadCopy`], whose buckets hold the objects).
    items: Option<&'a Items<K>>,
    selector: &'a Selector,
    /// The namespace objects must be in, when the source does not guarantee it.
    namespace: Option<&'a str>,
    source: Source<'a, K>,
}

enum Source<'a, K> {
    /// Nothing can match (an empty namespace).
    Empty,
    /// Every object.
    All(hashbrown::hash_map::Values<'a, Key, Arc<K>>),
    /// The keys of one namespace.
    Bucket(hashbrown::hash_table::Iter<'a, Key>),
    /// The keys in a label index's buckets for `values` (disjoint: one value per object).
    Buckets {
        buckets: &'a Buckets,
        values: core::slice::Iter<'a, Box<str>>,
        keys: Option<hashbrown::hash_table::Iter<'a, Key>>,
    },
    /// Every object of a [`ReadCopy`]: `objects` (the cluster-scoped, then each namespace's in
    /// turn) and the namespaces in `rest`.
    Partitions {
        rest: hashbrown::hash_map::Values<'a, compact_str::CompactString, read_copy::Objects<K>>,
        objects: hashbrown::hash_table::Iter<'a, Arc<K>>,
    },
    /// The objects of one namespace, in a [`ReadCopy`].
    ObjectBucket(hashbrown::hash_table::Iter<'a, Arc<K>>),
    /// The objects in a [`ReadCopy`]'s label index's buckets for `values`.
    ObjectBuckets {
        buckets: &'a read_copy::LabelBuckets<K>,
        values: core::slice::Iter<'a, Box<str>>,
        objects: Option<read_copy::BucketIter<'a, K>>,
    },
}

impl<K> fmt::Debug for Select<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match self.source {
            Source::Empty => "empty",
            Source::All(_) | Source::Partitions { .. } => "scan",
            Source::Bucket(_) | Source::ObjectBucket(_) => "namespace index",
            Source::Buckets { .. } | Source::ObjectBuckets { .. } => "label index",
        };
        f.debug_struct("Select")
            .field("selector", self.selector)
            .field("source", &source)
            .finish_non_exhaustive()
    }
}

impl<K> Select<'_, K> {
    /// Whether this query is answered from a label index (rather than by scanning the
    /// namespace or the whole store).
    pub fn uses_label_index(&self) -> bool {
        matches!(
            self.source,
            Source::Buckets { .. } | Source::ObjectBuckets { .. }
        )
    }
}

impl<'a, K: Object + Labels> Iterator for Select<'a, K> {
    type Item = &'a Arc<K>;

    fn next(&mut self) -> Option<&'a Arc<K>> {
        loop {
            let obj = match &mut self.source {
                Source::Empty => return None,
                Source::All(it) => it.next()?,
                Source::ObjectBucket(it) => it.next()?,
                Source::Partitions { rest, objects } => loop {
                    if let Some(o) = objects.next() {
                        break o;
                    }
                    *objects = rest.next()?.iter();
                },
                Source::ObjectBuckets {
                    buckets,
                    values,
                    objects,
                } => loop {
                    if let Some(o) = objects.as_mut().and_then(Iterator::next) {
                        break o;
                    }
                    let v = values.next()?;
                    *objects = buckets.get(&**v).map(read_copy::Bucket::iter);
                },
                Source::Bucket(it) => {
                    let key = it.next()?;
                    match self.items.and_then(|items| items.get(key)) {
                        Some(o) => o,
                        None => continue,
                    }
                }
                Source::Buckets {
                    buckets,
                    values,
                    keys,
                } => {
                    let key = loop {
                        if let Some(k) = keys.as_mut().and_then(Iterator::next) {
                            break k;
                        }
                        let v = values.next()?;
                        *keys = buckets.get(&**v).map(|set| set.iter());
                    };
                    match self.items.and_then(|items| items.get(key)) {
                        Some(o) => o,
                        None => continue,
                    }
                }
            };
            let in_namespace = self.namespace.is_none_or(|ns| obj.namespace() == Some(ns));
            if in_namespace && self.selector.matches(&**obj) {
                return Some(obj);
            }
        }
    }
}

#[cfg(test)]
mod index_value_tests {
    use super::*;
    use crate::object::{DynamicObject, ObjectMetaParts};

    fn obj(ns: &str, name: &str, app: &str, owners: &[&str]) -> Arc<DynamicObject> {
        let refs: Vec<serde_json::Value> = owners
            .iter()
            .map(|o| serde_json::json!({"apiVersion": "v1", "kind": "X", "name": o, "uid": "u"}))
            .collect();
        let mut other = crate::object::RawFields::new();
        other.insert("ownerReferences".into(), serde_json::Value::Array(refs));
        Arc::new(DynamicObject {
            metadata: ObjectMetaParts {
                name: name.into(),
                namespace: Some(ns.into()),
                labels: [("app", app)].into_iter().collect(),
                other,
                ..Default::default()
            }
            .into(),
            ..Default::default()
        })
    }

    /// An index function returns borrowed strs, `String`s, `&'static str`s and `Key`s alike,
    /// with no `Cow` to spell out; a borrowed value or a short key allocates nothing.
    #[test]
    fn index_functions_return_any_kind_of_value() {
        let mut idx = Indexer::<DynamicObject>::new();
        idx.add_index(
            "app",
            index_fn(|o: &DynamicObject| o.label("app").into_iter().collect()),
        )
        .unwrap();
        idx.add_index(
            "owner",
            index_fn(|o: &DynamicObject| {
                let owners = o.owner_references().unwrap_or_default();
                owners
                    .iter()
                    .map(|r| Key::new(o.namespace(), &r.name))
                    .collect()
            }),
        )
        .unwrap();
        idx.add_index(
            "mixed",
            index_fn(|o: &DynamicObject| {
                IndexValues::one("all")
                    .with(alloc::format!("len-{}", o.name().len()))
                    .with(o.key_ref())
            }),
        )
        .unwrap();
        idx.add(obj("ns", "a", "web", &["rs-1", "rs-2"]));
        idx.add(obj("ns", "bb", "db", &["rs-1"]));
        let names = |name: &str, value: &str| {
            let mut v: Vec<String> = idx
                .by_index(name, value)
                .unwrap()
                .map(|o| o.name().into())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names("app", "web"), ["a"]);
        assert_eq!(names("owner", "ns/rs-1"), ["a", "bb"]);
        assert_eq!(names("owner", "ns/rs-2"), ["a"]);
        assert_eq!(names("mixed", "all"), ["a", "bb"]);
        assert_eq!(names("mixed", "len-2"), ["bb"]);
        assert_eq!(names("mixed", "ns/a"), ["a"]);

        // What each value holds.
        let o = obj("ns", "a", "web", &[]);
        let borrowed: IndexValues<'_> = o.label("app").into_iter().collect();
        assert!(matches!(borrowed[0].0, ValueRepr::Borrowed("web")));
        let key = IndexValues::one(Key::new(Some("ns"), "rs-1"));
        assert!(matches!(&key[0].0, ValueRepr::Key(k) if k.as_str() == "ns/rs-1"));
        let cows: IndexValues<'_> = [Cow::Borrowed("x"), Cow::Owned("y".into())]
            .into_iter()
            .collect();
        assert!(matches!(cows[0].0, ValueRepr::Borrowed("x")));
        assert!(matches!(&cows[1].0, ValueRepr::Owned(s) if s == "y"));
        assert_eq!(cows, IndexValues::one("x").with(String::from("y")));
        assert_eq!(cows[1], "y");
        assert_eq!(alloc::format!("{cows:?}"), r#"["x", "y"]"#);
        let mut pushed = IndexValues::new();
        pushed.push(Cow::Owned("x".into()));
        pushed.extend(["y"]);
        assert_eq!(pushed, cows);
        assert_eq!(
            pushed
                .into_iter()
                .map(|v| String::from(v.as_str()))
                .collect::<Vec<_>>(),
            ["x", "y"]
        );
    }
}
