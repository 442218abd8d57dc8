//! Cache readers.

use std::fmt;
use std::sync::Arc;

use informer_core::views::{View, Views};

use crate::error::Error;
use crate::resource_version::WaitForResourceVersion;
use informer_core::{
    cache::indexer::IndexError, object::Key, object::KeyRef, object::Object,
    object::selector::Labels, object::selector::Selector,
};

/// A read handle on an informer's cache (client-go `Indexer`/`Lister`): cheap to clone, usable
/// from any task or thread.
///
/// Each call answers from one whole state of the cache: a relist is published as one step,
/// so no answer ever mixes two lists, and an answer is never part of a step.
///
/// **Readers never wait for the informer, and the informer never waits for readers.** The
/// store reads one of two copies of the cache's tables (objects are `Arc`s shared by both
/// and by the informer's own cache; the copies find them by the key each object carries): the informer applies each step (a batch of up
/// to 64 inputs; a relist of 100k objects is one input) to its own cache, then replays the
/// step's changes on the copy readers are not using and switches readers over to it in one
/// atomic store. A reader that is still on the previous copy at the next switch delays that
/// switch (the informer retries shortly, and goes on with its work meanwhile), never the
/// informer. So a call costs what copying out the `Arc`s it returns costs, whatever the
/// informer is doing. A handler told of a change finds it (or a later state) here: the
/// informer hands notifications over only once their step is published.
pub struct Store<K> {
    pub(crate) views: Arc<Views<K>>,
    /// The informer's waits for a resourceVersion.
    pub(crate) waits: Arc<dyn WaitForResourceVersion>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            views: self.views.clone(),
            waits: self.waits.clone(),
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl<K: Object + Labels + 'static> Store<K> {
    /// The cached objects matching `selector` (client-go `Lister.List(selector)`), in every
    /// namespace. A `key=value` or `key in (...)` term uses the label index of `key` when the
    /// informer has one ([`InformerBuilder::label_index`](crate::InformerBuilder::label_index)),
    /// else the cache is scanned.
    pub fn select(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.read(|c| c.indexer().select(selector, None).cloned().collect())
    }

    /// The cached objects in `namespace` matching `selector` (client-go
    /// `Lister.Namespace(ns).List(selector)`), using the namespace index or a label index,
    /// whichever holds fewer objects.
    pub fn select_in(&self, namespace: &str, selector: &Selector) -> Vec<Arc<K>> {
        self.read(|c| {
            c.indexer()
                .select(selector, Some(namespace))
                .cloned()
                .collect()
        })
    }
}

impl<K: Object + 'static> Store<K> {
    fn read<T>(&self, f: impl FnOnce(&View<K>) -> T) -> T {
        self.views.read(f)
    }

    /// The object stored under `key` (`namespace/name`, or `name` when cluster-scoped).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read(|c| c.indexer().get_by_key(key).cloned())
    }

    /// The object `name` in `namespace` (`None`: cluster-scoped).
    pub fn get_by_name(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.get(Key::new(namespace, name).as_str())
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read(|c| c.indexer().list().cloned().collect())
    }

    /// Every cached key.
    pub fn keys(&self) -> Vec<Key> {
        self.read(|c| c.indexer().list_keys().map(KeyRef::to_key).collect())
    }

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.read(|c| c.indexer().len())
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects whose `index` values include `value` (client-go `ByIndex`). The namespace
    /// index ([`NAMESPACE_INDEX`](informer_core::cache::indexer::NAMESPACE_INDEX)) is always there.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.read(|c| {
            c.indexer()
                .by_index(index, value)
                .map(|it| it.cloned().collect())
        })
    }

    /// The keys of the objects whose `index` values include `value` (client-go `IndexKeys`).
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<Key>, IndexError> {
        self.read(|c| {
            c.indexer()
                .index_keys(index, value)
                .map(|it| it.map(KeyRef::to_key).collect())
        })
    }

    /// The values of `index` that have at least one object (client-go
    /// `ListIndexFuncValues`).
    pub fn list_index_values(&self, index: &str) -> Result<Vec<String>, IndexError> {
        self.read(|c| {
            c.indexer()
                .list_index_values(index)
                .map(|it| it.map(str::to_string).collect())
        })
    }

    /// The objects sharing at least one `index` value with `obj` (client-go `Index`).
    pub fn index(&self, index: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        self.read(|c| c.indexer().index(index, obj))
    }

    /// Whether the informer has synced (its first list is applied, in this store, and handed
    /// to handlers).
    pub fn has_synced(&self) -> bool {
        self.read(|c| c.has_synced())
    }

    /// The resourceVersion of the state this store answers from: that of the last list,
    /// event or bookmark applied in the step last published to readers (empty before the
    /// first list).
    pub fn last_sync_resource_version(&self) -> String {
        self.read(|c| c.last_sync_resource_version().to_string())
    }

    /// Waits until this store answers from a state at resourceVersion `resource_version` or
    /// newer (compared as unsigned integers): see
    /// [`Informer::wait_for_resource_version`](crate::Informer::wait_for_resource_version).
    pub async fn wait_for_resource_version(
        &self,
        resource_version: &str,
        deadline: std::time::Instant,
    ) -> Result<(), Error> {
        self.waits
            .wait_for_resource_version(resource_version, deadline)
            .await
    }
}
