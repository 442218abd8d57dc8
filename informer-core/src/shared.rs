//! A cache several cores can read while one of them drives the informer (feature `spin`).
//!
//! [`SharedIndexInformer`] is a plain value: whoever owns it steps it. An embedder on a
//! multi-core target without std (an RTOS, a unikernel, bare metal with an allocator) that
//! wants other cores to answer queries from the cache wraps it in a [`LockedInformer`]: the
//! owner feeds inputs and drains outputs inside [`LockedInformer::with`], and any number of
//! [`CacheReader`]s answer `get` / `list` / `by_index` from other cores.
//!
//! The lock is `spin`'s reader-writer spinlock, because without std there is no OS to park a
//! thread on. The owner holds it for one input and its drain (a list of 100k objects is one
//! such step; a watch event is microseconds), readers only while they copy out `Arc`s: a reader
//! never sees half of an input applied. With std, the runtime crates use std's locks instead;
//! this module is for embedders without them.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use spin::RwLock;

use crate::indexer::IndexError;
use crate::informer::SharedIndexInformer;
use crate::object::Object;

/// A [`SharedIndexInformer`] behind a spinlock, so that [`CacheReader`]s on other cores can
/// query its cache. See the [module documentation](self).
pub struct LockedInformer<K> {
    inner: Arc<RwLock<SharedIndexInformer<K>>>,
}

impl<K> fmt::Debug for LockedInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedInformer").finish_non_exhaustive()
    }
}

impl<K: Object + 'static> LockedInformer<K> {
    /// Wraps `informer`.
    pub fn new(informer: SharedIndexInformer<K>) -> Self {
        LockedInformer {
            inner: Arc::new(RwLock::new(informer)),
        }
    }

    /// Runs `f` with the informer locked for writing: feed one input and drain its outputs in
    /// here (the informer's loop rule), then let go so readers can answer. Do not run handlers
    /// inside: hand their notifications to wherever they run.
    pub fn with<R>(&self, f: impl FnOnce(&mut SharedIndexInformer<K>) -> R) -> R {
        f(&mut self.inner.write())
    }

    /// A read handle on the cache, for another core.
    pub fn reader(&self) -> CacheReader<K> {
        CacheReader {
            inner: self.inner.clone(),
        }
    }
}

/// A read handle on a [`LockedInformer`]'s cache. Cheap to clone; each query takes the read
/// lock only to copy `Arc`s out.
pub struct CacheReader<K> {
    inner: Arc<RwLock<SharedIndexInformer<K>>>,
}

impl<K> Clone for CacheReader<K> {
    fn clone(&self) -> Self {
        CacheReader {
            inner: self.inner.clone(),
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
        self.inner.read().indexer().get_by_key(key).cloned()
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().indexer().list().cloned().collect()
    }

    /// The objects whose `index` values include `value`; an unknown index is an error.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        Ok(self
            .inner
            .read()
            .indexer()
            .by_index(index, value)?
            .cloned()
            .collect())
    }

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.inner.read().indexer().len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first full list has been applied.
    pub fn has_synced(&self) -> bool {
        self.inner.read().has_synced()
    }

    /// The resourceVersion of the last list or event applied.
    pub fn last_sync_resource_version(&self) -> String {
        String::from(self.inner.read().last_sync_resource_version())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::indexer::NAMESPACE_INDEX;
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

    fn drain(inf: &mut SharedIndexInformer<SimObject>) -> Option<crate::reflector::RequestId> {
        let mut last = None;
        while let Some(o) = inf.poll() {
            if let Output::Request { id, .. } = o {
                last = Some(id);
            }
        }
        last
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
            inf.handle_input(
                Instant::ZERO,
                list_id,
                Input::ListPage(ListPage {
                    items,
                    resource_version: "1".into(),
                    continue_token: None,
                    remaining_item_count: None,
                }),
            );
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
}
