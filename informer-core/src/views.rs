//! Copies of the cache that readers on other cores or threads query while one of them steps
//! the informer, without ever waiting for a step (feature `spin`).
//!
//! [`SharedIndexInformer`] is a plain value: whoever owns it steps it, and its own cache
//! ([`SharedIndexInformer::indexer`]) is only whole between two inputs. Readers elsewhere read
//! [`Views`]: two copies of the cache (left-right double buffering). The stepping side records
//! the changes each step applies ([`SharedIndexInformer::record_changes`]) and a [`Publisher`]
//! replays them on the copy no reader is using, then switches readers over to it in one atomic
//! store; the other copy catches up at the next publish. So:
//!
//! - **A reader never waits for a step**: the copy it reads is never written while it is the
//!   current one. A relist of 100k objects is replayed on the other copy while readers go on
//!   with the previous state.
//! - **A reader never sees half a step**: a copy becomes current only once every change of the
//!   steps published with it is in it (a relist is one step: never half of it).
//! - **A reader never stalls the writer**: a reader that still reads the previous copy when the
//!   next publish comes (it was preempted mid-read, say) makes
//!   [`try_publish`](Publisher::try_publish) return `false` instead of waiting; the changes stay
//!   queued for the next attempt.
//!
//! Cost: a second and third set of tables (the copies' maps and index buckets, [`ReadCopy`]:
//! one pointer per entry, the objects themselves are `Arc`s shared by every copy and the keys
//! are read from them), and per change a reference count per copy and bucket plus the index
//! updates of each copy. The change's key is hashed once for both copies; the first copy to
//! apply an update notes the address of the object it replaced, by which the second finds its
//! entry without reading the old object; a replay touches the change a few ahead of the one it
//! applies, so that the cache misses of both are under way at once.
//!
//! [`LockedInformer`] and [`CacheReader`] package this for an embedder without std (an RTOS,
//! a unikernel, bare metal with an allocator): the owner steps the informer inside
//! [`LockedInformer::with`], which publishes the step before it returns, and any number of
//! [`CacheReader`]s answer `get` / `list` / `by_index` from other cores. The locks are `spin`'s,
//! but nobody spins on them in the common case: readers only ever try a lock that no writer
//! holds, and the writer only ever takes the copy no reader is on.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

use spin::RwLock;

use crate::cache::indexer::{
    Change, ChangeRef, IndexError, IndexFunc, JOURNAL_KEEP, Journaled, ReadCopy, SharedIndexFunc,
};
use crate::informer::SharedIndexInformer;
use crate::object::key::hash_of;
use crate::object::{Key, Object};

/// One whole state of the cache as readers see it: the objects and indices, and whether and
/// at which resourceVersion the informer was synced in that state.
pub struct View<K> {
    indexer: ReadCopy<K>,
    has_synced: bool,
    resource_version: String,
}

impl<K> fmt::Debug for View<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("indexer", &self.indexer)
            .field("has_synced", &self.has_synced)
            .field("resource_version", &self.resource_version)
            .finish()
    }
}

impl<K: Object + 'static> View<K> {
    fn new() -> Self {
        View {
            indexer: ReadCopy::new(),
            has_synced: false,
            resource_version: String::new(),
        }
    }

    /// The cache: objects and indices.
    pub fn indexer(&self) -> &ReadCopy<K> {
        &self.indexer
    }

    /// Whether the informer had synced (its first list applied) in this state.
    pub fn has_synced(&self) -> bool {
        self.has_synced
    }

    /// The resourceVersion of this state (empty before the first list).
    pub fn last_sync_resource_version(&self) -> &str {
        &self.resource_version
    }
}

/// The two copies readers switch between; see the [module documentation](self). Shared by
/// the [`Publisher`] and every reader (`Arc<Views<K>>`).
pub struct Views<K> {
    copies: [Padded<RwLock<View<K>>>; 2],
    /// The copy readers use.
    current: Padded<AtomicUsize>,
}

/// A value on cache lines of its own (two, for CPUs that fetch lines in pairs): readers taking
/// one copy's lock never share a line with the writer working on the other copy, nor with the
/// index that says which copy is current.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<K> fmt::Debug for Views<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Views")
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<K: Object + 'static> Views<K> {
    /// Runs `f` on the current copy. Never waits for the writer: the current copy is never
    /// write-locked; a reader that loaded the index just before a switch and finds that copy
    /// locked loads it again and reads the new one.
    pub fn read<T>(&self, f: impl FnOnce(&View<K>) -> T) -> T {
        loop {
            let i = self.current.load(Ordering::Acquire);
            if let Some(view) = self.copies[i].try_read() {
                return f(&view);
            }
            core::hint::spin_loop();
        }
    }
}

/// A change in the [`Publisher`]'s log: its key's hash computed once for both copies (every
/// copy hashes a key alike), and for an upsert only the object (the copies read its key from it)
/// and, once the first copy applied it, the address of the object it replaced there, by which
/// the second copy finds its entry without reading the old object's key.
enum Logged<K> {
    Upsert {
        hash: u64,
        obj: Arc<K>,
        replaces: usize,
    },
    Delete {
        hash: u64,
        key: Key,
    },
    Clear,
}

impl<K: Object> Logged<K> {
    fn new(change: Change<K>) -> Self {
        let hash = match &change {
            Change::Upsert { key, .. } | Change::Delete { key } => hash_of(key),
            Change::Clear => 0,
        };
        Self::journaled(Journaled { hash, change })
    }

    /// A change the store recorded, with the hash it computed for its key.
    fn journaled(j: Journaled<K>) -> Self {
        match j.change {
            Change::Upsert { key, obj } => {
                debug_assert_eq!(j.hash, hash_of(&key), "the journal's hash is the key's");
                Logged::Upsert {
                    hash: j.hash,
                    obj,
                    replaces: 0,
                }
            }
            Change::Delete { key } => {
                debug_assert_eq!(j.hash, hash_of(&key), "the journal's hash is the key's");
                Logged::Delete { hash: j.hash, key }
            }
            Change::Clear => Logged::Clear,
        }
    }

    fn as_ref(&self) -> ChangeRef<'_, K> {
        match self {
            Logged::Upsert {
                hash,
                obj,
                replaces,
            } => ChangeRef::Upsert {
                hash: *hash,
                obj,
                replaces: *replaces,
            },
            Logged::Delete { hash, key } => ChangeRef::Delete {
                hash: *hash,
                key: key.as_ref_parts(),
            },
            Logged::Clear => ChangeRef::Clear,
        }
    }
}

/// The writing side of [`Views`]: takes the changes of each step from the informer and
/// publishes them to readers. One per informer, owned by whoever steps it.
pub struct Publisher<K> {
    views: Arc<Views<K>>,
    /// Changes not yet in the standby copy: `log[..published]` are in the current copy,
    /// `log[published..]` in neither. Each is applied by reference to one copy, then to the
    /// other, and dropped.
    log: Vec<Logged<K>>,
    /// Where the informer's changes are taken to before they are logged (kept empty).
    taken: Vec<Journaled<K>>,
    published: usize,
    has_synced: bool,
    resource_version: String,
    /// Something was staged and not yet published.
    dirty: bool,
    /// A replay panicked (an index function): the standby copy may be half-updated, so no copy
    /// is published again; readers keep the last whole state.
    poisoned: bool,
}

impl<K> fmt::Debug for Publisher<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("queued", &self.log.len())
            .field("published", &self.published)
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

impl<K: Object + 'static> Default for Publisher<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Object + 'static> Publisher<K> {
    /// Two empty copies (the namespace index only).
    pub fn new() -> Self {
        Publisher {
            views: Arc::new(Views {
                copies: [
                    Padded(RwLock::new(View::new())),
                    Padded(RwLock::new(View::new())),
                ],
                current: Padded(AtomicUsize::new(0)),
            }),
            log: Vec::new(),
            taken: Vec::new(),
            published: 0,
            has_synced: false,
            resource_version: String::new(),
            dirty: false,
            poisoned: false,
        }
    }

    /// The copies, for readers.
    pub fn views(&self) -> &Arc<Views<K>> {
        &self.views
    }

    /// Takes the changes `informer` recorded since the last call (it must be recording:
    /// [`SharedIndexInformer::record_changes`]) and its sync state, for the next publish. Call
    /// it between inputs, when the informer's cache is whole.
    pub fn stage(&mut self, informer: &mut SharedIndexInformer<K>) {
        let before = self.log.len();
        informer.take_journaled(&mut self.taken);
        if self.poisoned {
            // Nothing is published again: what is staged would only pile up.
            self.drop_log();
            return;
        }
        if self.log.is_empty() && self.taken.len() > JOURNAL_KEEP {
            // A large step (a first list, a snapshot loaded) and nothing logged before it: the
            // log is made in the taken buffer itself rather than copied into a fresh one (std
            // collects a mapped `Vec` in place when the new elements fit where the old ones
            // were, as a `Logged` does where a `Journaled` was: a test checks that the log
            // keeps the buffer). `taken` starts over empty.
            self.log = core::mem::take(&mut self.taken)
                .into_iter()
                .map(Logged::journaled)
                .collect();
        } else {
            self.log.extend(self.taken.drain(..).map(Logged::journaled));
        }
        // A relist grew it to the list's size: give that back.
        if self.taken.capacity() > JOURNAL_KEEP {
            self.taken.shrink_to(JOURNAL_KEEP);
        }
        let rv = informer.last_sync_resource_version();
        if self.log.len() != before
            || self.has_synced != informer.has_synced()
            || self.resource_version != rv
        {
            self.has_synced = informer.has_synced();
            self.resource_version.clear();
            self.resource_version.push_str(rv);
            self.dirty = true;
        }
    }

    /// Queues `changes` for the next publish, as if an informer had recorded them (e.g. the
    /// content of a cache that was filled before recording started).
    pub fn stage_changes(&mut self, changes: impl IntoIterator<Item = Change<K>>) {
        if self.poisoned {
            self.drop_log();
            return;
        }
        self.log.extend(changes.into_iter().map(Logged::new));
        self.dirty = true;
    }

    /// A poisoned publisher's staged changes (and the objects they hold) are given back:
    /// nothing will be published again (readers keep the last whole state).
    fn drop_log(&mut self) {
        self.taken = Vec::new();
        self.log = Vec::new();
        self.published = 0;
    }

    /// Whether everything staged has been published.
    pub fn is_published(&self) -> bool {
        !self.dirty
    }

    /// How many staged changes readers do not see yet: what the next publish replays (a
    /// first list or a relist stages one per object).
    pub fn staged(&self) -> usize {
        self.log.len() - self.published
    }

    /// Publishes what was staged: replays it on the copy readers are not using and switches
    /// readers to that copy. Returns `false`, changing nothing readers see, when a reader is
    /// still on that copy (it started before the previous publish and has not finished): try
    /// again later. Never waits.
    pub fn try_publish(&mut self) -> bool {
        if !self.dirty {
            return true;
        }
        if self.poisoned {
            return false;
        }
        let views = self.views.clone();
        let standby = 1 - views.current.load(Ordering::Relaxed);
        let Some(mut copy) = views.copies[standby].try_write() else {
            return false;
        };
        self.replay(&mut copy);
        drop(copy);
        self.switch(standby);
        // After a large step (a relist), catch the copy readers just left up at once when no
        // reader is still on it, so that the log (one entry per object) is given back in
        // this publish rather than held until the next one, however far off that is. A small
        // step's log waits for the next publish (it is within the buffer kept anyway), and so
        // does any log while a reader is still on that copy.
        if self.log.len() > JOURNAL_KEEP {
            if let Some(mut left) = views.copies[1 - standby].try_write() {
                if !self.copy_current(&views.copies[standby], &mut left) {
                    self.replay(&mut left);
                }
                drop(left);
                self.trim_log();
            }
        }
        true
    }

    /// Brings `left` (the copy readers just left, lacking exactly the whole log) up to date
    /// by copying the tables of `current` (just published, holding the whole log), when the
    /// log is long against the cache (a relist: one change per object) so that copying costs
    /// less than replaying. Returns whether it did; `false` leaves both and the log as they
    /// were.
    fn copy_current(&mut self, current: &RwLock<View<K>>, left: &mut View<K>) -> bool {
        // Readers only ever hold read locks: taking one on the current copy never waits.
        let Some(current) = current.try_read() else {
            return false;
        };
        if self.log.len() * 4 < current.indexer.len() || !left.indexer.copy_from(&current.indexer) {
            return false;
        }
        left.has_synced = current.has_synced;
        left.resource_version.clear();
        left.resource_version.push_str(&current.resource_version);
        self.log.clear();
        self.published = 0;
        true
    }

    /// [`try_publish`](Self::try_publish), waiting (spinning) for a reader still on the standby
    /// copy to finish. For writers that must not return before readers see the step.
    pub fn publish(&mut self) {
        while !self.try_publish() {
            if self.poisoned {
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// Adds an index to both copies (objects already there are indexed at once). Waits
    /// (spinning) for readers still on the standby copy, then for those on the other once
    /// readers were switched away from it; readers never wait.
    pub fn add_index(
        &mut self,
        name: &str,
        func: impl IndexFunc<K> + 'static,
    ) -> Result<(), IndexError> {
        let func = SharedIndexFunc(Arc::new(func));
        if self
            .views
            .read(|v| v.indexer.index_names().any(|n| n == name))
        {
            return Err(IndexError::IndexExists { name: name.into() });
        }
        for _ in 0..2 {
            if self.poisoned {
                return Ok(());
            }
            let views = self.views.clone();
            let standby = 1 - views.current.load(Ordering::Relaxed);
            let mut copy = views.copies[standby].write();
            self.replay(&mut copy);
            let added = copy.indexer.add_index(name, func.clone());
            drop(copy);
            self.switch(standby);
            added?;
        }
        Ok(())
    }

    /// Brings `copy` (the standby) up to date with everything staged, applying each change by
    /// reference; then drops the changes both copies now have (those the current copy already
    /// had).
    fn replay(&mut self, copy: &mut View<K>) {
        self.poisoned = true;
        let (reserve_at, sizes) = reservation(&self.log, copy.indexer.is_empty());
        let reserve = |at: usize, copy: &mut View<K>| {
            if at == reserve_at {
                for (ns, total) in &sizes {
                    copy.indexer.reserve(ns.as_deref(), *total);
                }
            }
        };
        // Each change is applied while the one `AHEAD` of it is touched, so that their cache
        // misses overlap. The changes the current copy has too (the first `published`) are
        // dropped once applied here; this copy applies the rest first and notes for the other
        // which object each upsert replaced. Every replay is followed by a switch to this copy,
        // so the other copy lacks exactly the rest and applies it next, second, finding each
        // updated entry by the noted address: that copy still holds the object at it, so no
        // other object can have it.
        const AHEAD: usize = 6;
        let len = self.log.len();
        for at in 0..len {
            reserve(at, copy);
            if let Some(ahead) = self.log.get(at + AHEAD) {
                copy.indexer.touch(&ahead.as_ref());
            }
            let change = &mut self.log[at];
            let replaced = copy.indexer.apply_ref(change.as_ref());
            if at >= self.published {
                if let Logged::Upsert { replaces, .. } = change {
                    *replaces = replaced;
                }
            }
        }
        self.log.drain(..self.published);
        self.published = 0;
        copy.has_synced = self.has_synced;
        copy.resource_version.clear();
        copy.resource_version.push_str(&self.resource_version);
        self.poisoned = false;
    }

    /// Makes `standby` (just brought up to date) the current copy.
    fn switch(&mut self, standby: usize) {
        self.views.current.store(standby, Ordering::Release);
        // The copy readers just left lacks exactly what is left in the log.
        self.published = self.log.len();
        self.dirty = false;
        self.trim_log();
    }

    /// Gives back a log buffer a relist grew, once it holds no more than a step's changes.
    fn trim_log(&mut self) {
        if self.log.capacity() > JOURNAL_KEEP && self.log.len() <= JOURNAL_KEEP {
            self.log.shrink_to(JOURNAL_KEEP);
        }
    }
}

/// A [`SharedIndexInformer`] whose cache [`CacheReader`]s on other cores query without waiting
/// for its steps. See the [module documentation](self).
pub struct LockedInformer<K> {
    inner: RwLock<Owner<K>>,
    views: Arc<Views<K>>,
}

struct Owner<K> {
    informer: SharedIndexInformer<K>,
    publisher: Publisher<K>,
}

impl<K> fmt::Debug for LockedInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedInformer").finish_non_exhaustive()
    }
}

impl<K: Object + 'static> LockedInformer<K> {
    /// Wraps `informer`. Objects it already holds are published at once. Indices the readers
    /// use must be added with [`add_index`](Self::add_index) (indices added to `informer`
    /// itself serve only queries made inside [`with`](Self::with)).
    pub fn new(mut informer: SharedIndexInformer<K>) -> Self {
        let mut publisher = Publisher::new();
        let existing: Vec<Change<K>> = informer
            .indexer()
            .iter()
            .map(|(key, obj)| Change::Upsert {
                key: key.clone(),
                obj: obj.clone(),
            })
            .collect();
        publisher.stage_changes(existing);
        informer.record_changes(true);
        publisher.stage(&mut informer);
        publisher.publish();
        LockedInformer {
            views: publisher.views().clone(),
            inner: RwLock::new(Owner {
                informer,
                publisher,
            }),
        }
    }

    /// Runs `f` with the informer: feed one input and drain its outputs in here (the
    /// informer's loop rule). Before it returns, the step is published to the readers (waiting
    /// for a reader still on the copy it writes, if one is; readers never wait for `f`). So a
    /// handler run with a notification drained here finds the change in the readers' cache.
    /// Do not run handlers inside: hand their notifications to wherever they run.
    pub fn with<R>(&self, f: impl FnOnce(&mut SharedIndexInformer<K>) -> R) -> R {
        let mut owner = self.inner.write();
        let owner = &mut *owner;
        let r = f(&mut owner.informer);
        owner.publisher.stage(&mut owner.informer);
        owner.publisher.publish();
        r
    }

    /// Adds a named index to the informer and to the readers' copies; objects already cached
    /// are indexed at once.
    pub fn add_index(
        &self,
        name: &str,
        func: impl IndexFunc<K> + 'static,
    ) -> Result<(), IndexError> {
        let func = SharedIndexFunc(Arc::new(func));
        let mut owner = self.inner.write();
        owner.informer.add_index(name, func.clone())?;
        owner.publisher.add_index(name, func)
    }

    /// A read handle on the cache, for another core.
    pub fn reader(&self) -> CacheReader<K> {
        CacheReader {
            views: self.views.clone(),
        }
    }
}

/// A read handle on a [`LockedInformer`]'s cache. Cheap to clone; each query reads the
/// current copy and never waits for the informer's step.
pub struct CacheReader<K> {
    views: Arc<Views<K>>,
}

impl<K> Clone for CacheReader<K> {
    fn clone(&self) -> Self {
        CacheReader {
            views: self.views.clone(),
        }
    }
}

impl<K> fmt::Debug for CacheReader<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheReader").finish_non_exhaustive()
    }
}

impl<K: Object + 'static> CacheReader<K> {
    /// The object with key `key` (`namespace/name`, or `name` when cluster-scoped).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.views.read(|v| v.indexer().get_by_key(key).cloned())
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.views.read(|v| v.indexer().list().cloned().collect())
    }

    /// The objects whose `index` values include `value`; an unknown index is an error.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.views
            .read(|v| Ok(v.indexer().by_index(index, value)?.cloned().collect()))
    }

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.views.read(|v| v.indexer().len())
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first full list has been applied.
    pub fn has_synced(&self) -> bool {
        self.views.read(|v| v.has_synced())
    }

    /// The resourceVersion of the last list or event applied.
    pub fn last_sync_resource_version(&self) -> String {
        self.views
            .read(|v| String::from(v.last_sync_resource_version()))
    }
}

/// Below this many upserts after the log's last `Clear`, tables grow as they go.
const RESERVE_FROM: usize = 1024;

/// Where in `log` a replay sizes the copy's tables, and to how many objects per namespace:
/// right after its last `Clear` (which drops them), or at its start when the copy is `empty`,
/// for the upserts that follow, when there are many (a relist, an initial population).
/// `usize::MAX`: nowhere (a long log of watch events, after publishes were retried, changes
/// objects mostly in place: counting its namespaces would read every object for nothing).
#[allow(clippy::type_complexity)]
fn reservation<K: Object>(log: &[Logged<K>], empty: bool) -> (usize, Vec<(Option<String>, usize)>) {
    let from = match log.iter().rposition(|c| matches!(c, Logged::Clear)) {
        Some(i) => i + 1,
        None if empty => 0,
        None => return (usize::MAX, Vec::new()),
    };
    if log.len() - from < RESERVE_FROM {
        return (usize::MAX, Vec::new());
    }
    let mut counts: crate::hash::HashMap<Option<&str>, usize> = Default::default();
    for change in &log[from..] {
        if let Logged::Upsert { obj, .. } = change {
            *counts.entry(obj.key_ref().namespace).or_default() += 1;
        }
    }
    let sizes = counts
        .into_iter()
        .map(|(ns, n)| (ns.map(String::from), n))
        .collect();
    (from, sizes)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::cache::indexer::NAMESPACE_INDEX;
    use crate::informer::{InformerConfig, Output};
    use crate::protocol::{Input, ListPage, WatchEvent};
    use crate::sim::SimObject;
    use crate::time::Instant;
    use alloc::string::ToString;
    use core::sync::atomic::{AtomicBool, Ordering};

    fn obj(name: &str, rv: u64) -> Arc<SimObject> {
        Arc::new(SimObject {
            name: name.into(),
            namespace: Some("ns".into()),
            resource_version: rv.to_string(),
            uid: name.into(),
            data: rv,
            noise: 0,
        })
    }

    fn drain(inf: &mut SharedIndexInformer<SimObject>) -> Option<crate::protocol::RequestId> {
        let mut last = None;
        while let Some(o) = inf.poll() {
            if let Output::Request { id, .. } = o {
                last = Some(id);
            }
        }
        last
    }

    /// A large step sizes the copy's tables once: after the log's last `Clear` (which drops
    /// them) or from its start, per namespace; a small step grows them as it goes.
    #[test]
    fn large_steps_size_the_copies_tables_once() {
        let up = |ns: Option<&str>, name: &str| Change::Upsert {
            key: crate::object::KeyRef {
                namespace: ns,
                name,
            }
            .to_key(),
            obj: Arc::new(SimObject {
                namespace: ns.map(Into::into),
                ..(*obj(name, 1)).clone()
            }),
        };
        let mut log: Vec<Change<SimObject>> =
            (0..10).map(|i| up(Some("old"), &i.to_string())).collect();
        log.push(Change::Clear);
        for i in 0..RESERVE_FROM + 5 {
            let ns = [Some("a"), Some("b"), None][i % 3];
            log.push(up(ns, &alloc::format!("o{i}")));
        }
        log.push(Change::Delete {
            key: crate::object::KeyRef {
                namespace: Some("a"),
                name: "o0",
            }
            .to_key(),
        });
        let log: Vec<Logged<SimObject>> = log.into_iter().map(Logged::new).collect();
        let (at, mut sizes) = reservation(&log, false);
        sizes.sort();
        assert_eq!(at, 11);
        let third = (RESERVE_FROM + 5) / 3;
        assert_eq!(
            sizes,
            [
                (None, third),
                (Some("a".into()), third),
                (Some("b".into()), third)
            ]
        );
        assert_eq!(reservation(&log[..RESERVE_FROM], true).0, usize::MAX);
        // Without a `Clear`, only a copy still empty is sized: a long log of watch events on
        // a full copy is not counted.
        let upserts = &log[11..];
        assert_eq!(reservation(upserts, true).0, 0);
        assert_eq!(reservation(upserts, false).0, usize::MAX);
        // Published, both copies hold every object of a large population, whatever the
        // namespace.
        let locked = LockedInformer::new(SharedIndexInformer::new(InformerConfig::default()));
        let list_id = start(&locked);
        let items: Vec<_> = (0..3 * RESERVE_FROM)
            .map(|i| {
                let mut o = (*obj(&alloc::format!("p{i}"), 1)).clone();
                o.namespace = [Some("a".into()), Some("b".into()), None][i % 3].clone();
                Arc::new(o)
            })
            .collect();
        locked.with(|inf| {
            inf.handle_input(Instant::ZERO, list_id, page(items, "1"));
            drain(inf);
        });
        let r = locked.reader();
        assert_eq!(r.len(), 3 * RESERVE_FROM);
        assert_eq!(
            r.by_index(NAMESPACE_INDEX, "a").unwrap().len(),
            RESERVE_FROM
        );
        assert_eq!(r.get("b/p1").unwrap().name, "p1");
        assert_eq!(r.get("p2").unwrap().name, "p2");
    }

    /// Readers on other threads always see a whole step: the list of 1,000 and each event
    /// applied entirely or not at all, never half.
    #[test]
    fn readers_on_other_threads_see_whole_steps() {
        let locked = LockedInformer::new(SharedIndexInformer::new(InformerConfig::default()));
        let list_id = locked.with(|inf| {
            inf.start(Instant::ZERO);
            drain(inf).unwrap()
        });
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let r = locked.reader();
                let done = done.clone();
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !done.load(Ordering::Acquire) {
                        let n = r.len();
                        let in_ns = r.by_index(NAMESPACE_INDEX, "ns").unwrap().len();
                        // Between the two reads a step may land, but each read is whole:
                        // 0 before the list, then 1000, then 1000 + k events.
                        assert!(n == 0 || n >= 1000, "half a list: {n}");
                        assert!(in_ns == 0 || in_ns >= 1000, "half a list: {in_ns}");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let items: Vec<_> = (0..1000).map(|i| obj(&alloc::format!("o{i}"), 1)).collect();
        let watch_id = locked.with(|inf| {
            inf.handle_input(Instant::ZERO, list_id, page(items, "1"));
            drain(inf).unwrap()
        });
        for i in 0..200u64 {
            locked.with(|inf| {
                inf.handle_input(
                    Instant::ZERO,
                    watch_id,
                    Input::Event(WatchEvent::Added(obj(&alloc::format!("n{i}"), 2 + i))),
                );
                drain(inf);
            });
        }
        done.store(true, Ordering::Release);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        let r = locked.reader();
        assert_eq!(r.len(), 1200);
        assert!(r.has_synced());
        assert_eq!(r.last_sync_resource_version(), "201");
        assert_eq!(r.get("ns/n7").unwrap().data, 9);
        assert!(r.by_index("nope", "x").is_err());
        assert_eq!(r.list().len(), 1200);
    }

    fn start(locked: &LockedInformer<SimObject>) -> crate::protocol::RequestId {
        locked.with(|inf| {
            inf.start(Instant::ZERO);
            drain(inf).unwrap()
        })
    }

    fn page(items: Vec<Arc<SimObject>>, rv: &str) -> Input<SimObject> {
        Input::ListPage(ListPage {
            items,
            resource_version: rv.into(),
            continue_token: None,
            remaining_item_count: None,
        })
    }

    /// A reader answers, from the state before the step, while the owner is held inside a
    /// step (a transform blocked on a barrier in the middle of a list): reads never wait for
    /// a step.
    #[test]
    fn a_reader_answers_while_the_owner_is_inside_a_step() {
        use std::sync::{Barrier, mpsc};
        let barrier = Arc::new(Barrier::new(2));
        let mut inf = SharedIndexInformer::new(InformerConfig::default());
        let b = barrier.clone();
        inf.set_transform(alloc::boxed::Box::new(move |o: Arc<SimObject>| {
            if o.name == "o500" {
                b.wait(); // the step is under way
                b.wait(); // the test has read
            }
            o
        }));
        let locked = Arc::new(LockedInformer::new(inf));
        let list_id = start(&locked);
        let owner = {
            let locked = locked.clone();
            std::thread::spawn(move || {
                let items = (0..1000).map(|i| obj(&alloc::format!("o{i}"), 1)).collect();
                locked.with(|inf| {
                    inf.handle_input(Instant::ZERO, list_id, page(items, "1"));
                    drain(inf);
                })
            })
        };
        barrier.wait();
        // The owner is inside `with`, blocked in the transform. Read on another thread so that
        // a read that waited shows as a failure, not as a hung test.
        let (tx, rx) = mpsc::channel();
        let reader = locked.reader();
        std::thread::spawn(move || {
            let _ = tx.send((reader.len(), reader.has_synced()));
        });
        let read = rx.recv_timeout(std::time::Duration::from_secs(60));
        barrier.wait();
        owner.join().unwrap();
        assert_eq!(
            read,
            Ok((0, false)),
            "the read waited for the step or saw part of it"
        );
        let r = locked.reader();
        assert_eq!(r.len(), 1000);
        assert!(r.has_synced());
    }

    /// A reader still on the previous copy makes a publish give up instead of waiting; the
    /// change is published at the next attempt, and readers meanwhile see a whole state.
    #[test]
    fn a_straggling_reader_defers_the_publish_instead_of_stalling_it() {
        let mut inf: SharedIndexInformer<SimObject> =
            SharedIndexInformer::new(InformerConfig::default());
        inf.record_changes(true);
        inf.start(Instant::ZERO);
        let list_id = drain(&mut inf).unwrap();
        let mut publisher = Publisher::new();
        let views = publisher.views().clone();
        views.read(|old| {
            // This reader holds the copy that is current now (empty).
            inf.handle_input(Instant::ZERO, list_id, page(alloc::vec![obj("a", 1)], "1"));
            let watch_id = drain(&mut inf).unwrap();
            publisher.stage(&mut inf);
            assert!(publisher.try_publish(), "the standby copy is free");
            assert_eq!(views.read(|v| v.indexer().len()), 1);
            inf.handle_input(
                Instant::ZERO,
                watch_id,
                Input::Event(WatchEvent::Added(obj("b", 2))),
            );
            drain(&mut inf);
            publisher.stage(&mut inf);
            // The next standby is the copy this reader is still on.
            assert!(!publisher.try_publish(), "published under a reader");
            assert!(!publisher.is_published());
            assert_eq!(old.indexer().len(), 0, "the reader's copy changed under it");
            assert_eq!(views.read(|v| v.indexer().len()), 1);
        });
        assert!(publisher.try_publish());
        assert!(publisher.is_published());
        views.read(|v| {
            assert_eq!(v.indexer().len(), 2);
            assert_eq!(v.last_sync_resource_version(), "2");
            assert!(v.has_synced());
        });
        // Both copies converge: one more change, published, leaves the other copy equal too.
        publisher.stage_changes([Change::Delete {
            key: crate::object::Key::new(Some("ns"), "a"),
        }]);
        assert!(publisher.try_publish());
        assert_eq!(views.read(|v| v.indexer().len()), 1);
        publisher.stage_changes([]);
        assert!(publisher.try_publish());
        assert_eq!(views.read(|v| v.indexer().len()), 1);
        assert!(views.read(|v| v.indexer().get_by_key("ns/b").is_some()));
    }

    /// A recording informer that has applied its first list: `n` objects `o0`, `o1`, … in
    /// namespace `ns`.
    fn listed(n: usize) -> SharedIndexInformer<SimObject> {
        let mut inf: SharedIndexInformer<SimObject> =
            SharedIndexInformer::new(InformerConfig::default());
        inf.record_changes(true);
        inf.start(Instant::ZERO);
        let list_id = drain(&mut inf).unwrap();
        let items = (0..n).map(|i| obj(&alloc::format!("o{i}"), 1)).collect();
        inf.handle_input(Instant::ZERO, list_id, page(items, "1"));
        drain(&mut inf);
        inf
    }

    /// A publisher with [`listed`]'s first list staged, not yet published.
    fn staged_list(n: usize) -> Publisher<SimObject> {
        let mut publisher = Publisher::new();
        publisher.stage(&mut listed(n));
        publisher
    }

    /// A publish of a large step (a relist) with no reader left on the copy readers just left
    /// brings that copy up to date at once: a relist's log is given back in the publish that
    /// applied it, not held (one entry per object) until the next change, and both copies
    /// hold the list.
    #[test]
    fn a_publish_catches_the_other_copy_up_and_gives_the_log_back() {
        let mut publisher = staged_list(5000);
        assert!(publisher.try_publish());
        assert!(
            publisher.log.is_empty(),
            "{} changes held",
            publisher.log.len()
        );
        assert!(publisher.log.capacity() <= JOURNAL_KEEP);
        for copy in &publisher.views().copies {
            let copy = copy.read();
            assert_eq!(copy.indexer().len(), 5000);
            assert_eq!(copy.indexer().index_len(NAMESPACE_INDEX, "ns"), Ok(5000));
            assert!(copy.has_synced());
        }
    }

    /// A large step staged onto an empty log becomes the log in the buffer the informer's
    /// journal filled (handed over, then collected in place: a `Logged` fits where a
    /// `Journaled` was), and both copies still end up with every object.
    #[test]
    fn a_large_steps_journal_becomes_the_log_in_its_own_buffer() {
        use core::mem::{align_of, size_of};
        assert!(size_of::<Logged<SimObject>>() <= size_of::<Journaled<SimObject>>());
        assert_eq!(
            align_of::<Logged<SimObject>>(),
            align_of::<Journaled<SimObject>>()
        );
        type Dynamic = crate::object::DynamicObject;
        assert!(size_of::<Logged<Dynamic>>() <= size_of::<Journaled<Dynamic>>());
        assert_eq!(
            align_of::<Logged<Dynamic>>(),
            align_of::<Journaled<Dynamic>>()
        );

        // The journal taken as `stage` takes it, its buffer noted, then staged.
        let mut inf = listed(3000);
        let mut publisher = Publisher::new();
        inf.take_journaled(&mut publisher.taken);
        let buffer = publisher.taken.as_ptr() as usize;
        publisher.stage(&mut inf);
        assert_eq!(publisher.log.len(), 3000);
        assert_eq!(
            publisher.log.as_ptr() as usize,
            buffer,
            "the log is made in the journal's buffer, not copied"
        );
        assert_eq!(
            publisher.taken.capacity(),
            0,
            "the taken buffer went to the log"
        );
        // The next small step takes its changes through `taken` again.
        publisher.stage_changes([Change::Delete {
            key: crate::object::KeyRef {
                namespace: Some("ns"),
                name: "o0",
            }
            .to_key(),
        }]);
        assert!(publisher.try_publish());
        for copy in &publisher.views().copies {
            let copy = copy.read();
            assert_eq!(copy.indexer().len(), 2999);
            assert!(!copy.indexer().contains_key(crate::object::KeyRef {
                namespace: Some("ns"),
                name: "o0",
            }));
        }
    }

    /// A replay that panics (an index function) poisons the publisher: readers keep the last
    /// whole state, and what is staged afterwards is dropped instead of piling up in a log
    /// nothing drains.
    #[test]
    fn a_poisoned_publisher_keeps_no_log() {
        let mut publisher: Publisher<SimObject> = Publisher::new();
        publisher
            .add_index(
                "boom",
                crate::cache::indexer::index_fn(
                    |o: &SimObject| -> crate::cache::indexer::IndexValues<'_> {
                        assert!(o.data != 13, "index function panics");
                        crate::cache::indexer::IndexValues::new()
                    },
                ),
            )
            .unwrap();
        let up = |name: &str, rv: u64| Change::Upsert {
            key: obj(name, rv).key_ref().to_key(),
            obj: obj(name, rv),
        };
        publisher.stage_changes([up("a", 1)]);
        assert!(publisher.try_publish());
        publisher.stage_changes([up("b", 13)]);
        let panicked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| publisher.try_publish()));
        assert!(panicked.is_err());
        assert!(!publisher.try_publish(), "poisoned: never published again");
        let kept = obj("c", 2);
        publisher.stage_changes((0..1000).map(|i| Change::Upsert {
            key: kept.key_ref().to_key(),
            obj: obj("c", 100 + i),
        }));
        assert_eq!(publisher.log.len(), 0, "nothing piles up");
        assert_eq!(
            publisher.views().read(|v| v.indexer.len()),
            1,
            "readers keep the last whole state"
        );
    }

    /// `copy` holds what `oracle` holds: the same object (by address) under every key, the
    /// same values and buckets in each of `indices`.
    fn assert_answers_as(
        copy: &ReadCopy<SimObject>,
        oracle: &crate::cache::indexer::Indexer<SimObject>,
        indices: &[&str],
        step: u64,
    ) {
        assert_eq!(copy.len(), oracle.len(), "step {step}");
        for (key, o) in oracle.iter() {
            let found = copy.get_by_key(key.as_str()).expect("a key the copy lacks");
            assert!(
                Arc::ptr_eq(found, o),
                "step {step}: an old object under {key}"
            );
        }
        for &index in indices {
            let mut values: Vec<_> = oracle.list_index_values(index).unwrap().collect();
            let mut theirs: Vec<_> = copy.list_index_values(index).unwrap().collect();
            values.sort_unstable();
            theirs.sort_unstable();
            assert_eq!(values, theirs, "step {step}: values of {index}");
            for value in values {
                let mut want: Vec<_> = oracle
                    .by_index(index, value)
                    .unwrap()
                    .map(Arc::as_ptr)
                    .collect();
                let mut got: Vec<_> = copy
                    .by_index(index, value)
                    .unwrap()
                    .map(Arc::as_ptr)
                    .collect();
                want.sort_unstable();
                got.sort_unstable();
                assert_eq!(want, got, "step {step}: bucket {index}={value}");
            }
        }
    }

    /// One of 60 names, in namespace `a`, `b` or none, with `data` below 30.
    fn random_object(step: u64, next: &mut impl FnMut(u64) -> u64) -> SimObject {
        let name = alloc::format!("o{}", next(60));
        let mut o = (*obj(&name, step)).clone();
        o.namespace = [Some("a".into()), Some("b".into()), None][next(3) as usize].clone();
        o.data = next(30);
        o
    }

    /// The parity of `data`, one value per object (the copies' single-value path).
    struct Parity;

    impl IndexFunc<SimObject> for Parity {
        fn index_values<'a>(&self, o: &'a SimObject) -> crate::cache::indexer::IndexValues<'a> {
            self.single_value(o).flatten().into_iter().collect()
        }

        fn single_value<'a>(&self, o: &'a SimObject) -> Option<Option<&'a str>> {
            Some(match o.data % 3 {
                0 => None,
                1 => Some("odd"),
                _ => Some("even"),
            })
        }
    }

    /// Both copies, each the second time it applies a change (found by the address the first
    /// copy noted) and the first (found by key), end up answering as the indexer that
    /// recorded the changes: the same object under every key, the same buckets in a
    /// one-value index (values kept, changed, gained, lost) and in a many-value one, through
    /// updates, deletes, re-adds of the stored object and relists.
    #[test]
    fn both_copies_answer_as_the_recording_indexer_after_every_publish() {
        use crate::cache::indexer::{IndexValues, Indexer};
        let digits = || {
            crate::cache::indexer::index_fn(|o: &SimObject| -> IndexValues<'_> {
                let mut v = IndexValues::new();
                for d in ["d0", "d1", "d2", "d3"] {
                    if o.data % 4 != 3 && d.ends_with(char::from(b'0' + (o.data % 4) as u8)) {
                        v.push(alloc::borrow::Cow::Borrowed(d));
                    }
                }
                if o.data % 5 == 0 {
                    v.push(alloc::borrow::Cow::Borrowed("five"));
                }
                v
            })
        };
        let mut oracle: Indexer<SimObject> = Indexer::new();
        oracle.add_index("parity", Parity).unwrap();
        oracle.add_index("digits", digits()).unwrap();
        oracle.record_changes(true);
        let mut publisher = Publisher::new();
        publisher.add_index("parity", Parity).unwrap();
        publisher.add_index("digits", digits()).unwrap();
        let mut rng = crate::rng::SplitMix64::new(0x2545_f491_4f6c_dd1du64);
        let mut next = |n: u64| rng.below(n);
        let mut changes = Vec::new();
        let mut checked = [0usize; 2];
        for step in 0..3000u64 {
            for _ in 0..1 + next(8) {
                let o = random_object(step, &mut next);
                match next(20) {
                    0..=13 => {
                        oracle.add(Arc::new(o));
                    }
                    14..=17 => {
                        oracle.delete(&o);
                    }
                    18 => {
                        let same = oracle.list().nth(next(5) as usize).cloned();
                        if let Some(same) = same {
                            oracle.add(same);
                        }
                    }
                    _ => {
                        let items: Vec<_> = (0..next(40))
                            .map(|i| {
                                let mut o = (*obj(&alloc::format!("o{i}"), step)).clone();
                                o.data = next(30);
                                Arc::new(o)
                            })
                            .collect();
                        oracle.replace(items);
                    }
                }
            }
            oracle.take_changes(&mut changes);
            publisher.stage_changes(changes.drain(..));
            assert!(publisher.try_publish(), "no reader holds a copy");
            let current = publisher.views().current.load(Ordering::Relaxed);
            let copy = publisher.views().copies[current].read();
            assert_answers_as(
                copy.indexer(),
                &oracle,
                &["parity", "digits", NAMESPACE_INDEX],
                step,
            );
            checked[current] += 1;
        }
        assert!(checked[0] > 1000 && checked[1] > 1000, "{checked:?}");
    }

    /// The differential test above through every path a publish can take: publishes refused
    /// while a reader holds the standby copy (retried with more changes), the copy readers
    /// left caught up at once after a relist longer than the kept journal (by copying or,
    /// with a reader still on it, at the next publish), the copies' tables sized for a large
    /// step, indices added to both copies between publishes, and an index function that
    /// gives some objects one value and others several. After every publish, the current
    /// copy answers as the indexer.
    #[test]
    fn both_copies_answer_as_the_indexer_through_retries_relists_and_added_indices() {
        use crate::cache::indexer::Indexer;
        use crate::cache::indexer::read_copy_tests::Tags;
        let mut oracle: Indexer<SimObject> = Indexer::new();
        oracle.add_index("parity", Parity).unwrap();
        oracle.record_changes(true);
        let mut publisher = Publisher::new();
        publisher.add_index("parity", Parity).unwrap();
        let mut indices = alloc::vec!["parity", NAMESPACE_INDEX];
        let mut rng = crate::rng::SplitMix64::new(0x9e37_79b9_7f4a_7c15u64);
        let mut next = |n: u64| rng.below(n);
        let mut changes = Vec::new();
        let (mut refused, mut published, mut caught_up_later) = (0, 0, 0);
        for step in 0..1500u64 {
            if step == 300 {
                oracle.add_index("tags", Tags).unwrap();
                publisher.add_index("tags", Tags).unwrap();
                indices.push("tags");
            }
            for _ in 0..1 + next(8) {
                let o = random_object(step, &mut next);
                match next(100) {
                    0..=69 => {
                        oracle.add(Arc::new(o));
                    }
                    70..=89 => {
                        oracle.delete(&o);
                    }
                    90..=94 => {
                        let same = oracle.list().nth(next(5) as usize).cloned();
                        if let Some(same) = same {
                            oracle.delete(&same);
                            oracle.add(same);
                        }
                    }
                    95..=97 => {
                        let same = oracle.list().nth(next(5) as usize).cloned();
                        if let Some(same) = same {
                            oracle.add(same);
                        }
                    }
                    _ => {
                        // Now and then a relist longer than the journal kept.
                        let n = if next(3) == 0 {
                            1100 + next(200)
                        } else {
                            next(40)
                        };
                        let items: Vec<_> = (0..n)
                            .map(|i| {
                                let mut o = (*obj(&alloc::format!("o{i}"), step)).clone();
                                o.namespace = [Some("a".into()), None][(i % 2) as usize].clone();
                                o.data = next(30);
                                Arc::new(o)
                            })
                            .collect();
                        oracle.replace(items);
                    }
                }
            }
            oracle.take_changes(&mut changes);
            publisher.stage_changes(changes.drain(..));
            let views = publisher.views().clone();
            let current = views.current.load(Ordering::Relaxed);
            // A reader still on the standby copy: the publish is refused, the changes wait.
            if next(5) == 0 {
                let _reader = views.copies[1 - current].read();
                assert!(!publisher.try_publish());
                refused += 1;
                continue;
            }
            // A reader on the current copy: published, but that copy catches up only later.
            let holding = next(4) == 0;
            let reader = holding.then(|| views.copies[current].read());
            assert!(publisher.try_publish(), "no reader holds the standby copy");
            if holding && publisher.log.len() > JOURNAL_KEEP {
                caught_up_later += 1;
            }
            drop(reader);
            published += 1;
            let current = views.current.load(Ordering::Relaxed);
            let copy = views.copies[current].read();
            assert_answers_as(copy.indexer(), &oracle, &indices, step);
        }
        assert!(
            refused > 100 && published > 1000 && caught_up_later > 0,
            "{refused} {published} {caught_up_later}"
        );
    }

    /// An index added through the locked informer serves readers, on both copies.
    #[test]
    fn indices_added_to_the_locked_informer_serve_readers() {
        let locked = LockedInformer::new(SharedIndexInformer::new(InformerConfig::default()));
        locked
            .add_index(
                "parity",
                crate::cache::indexer::index_fn(|o: &SimObject| {
                    let mut v = crate::cache::indexer::IndexValues::new();
                    v.push(alloc::borrow::Cow::Borrowed(if o.data % 2 == 0 {
                        "even"
                    } else {
                        "odd"
                    }));
                    v
                }),
            )
            .unwrap();
        assert!(matches!(
            locked.add_index(
                NAMESPACE_INDEX,
                crate::cache::indexer::index_fn(|_: &SimObject| {
                    crate::cache::indexer::IndexValues::new()
                })
            ),
            Err(IndexError::IndexExists { .. })
        ));
        let list_id = start(&locked);
        let watch_id = locked.with(|inf| {
            let items = (0..10).map(|i| obj(&alloc::format!("o{i}"), i)).collect();
            inf.handle_input(Instant::ZERO, list_id, page(items, "9"));
            drain(inf).unwrap()
        });
        let r = locked.reader();
        for i in 0..3u64 {
            assert_eq!(r.by_index("parity", "even").unwrap().len(), 5 + i as usize);
            locked.with(|inf| {
                inf.handle_input(
                    Instant::ZERO,
                    watch_id,
                    Input::Event(WatchEvent::Added(obj(&alloc::format!("n{i}"), 20 + 2 * i))),
                );
                drain(inf);
            });
        }
    }
}
