//! Each credential source's state, kept under the source's identity ([`SourceId`]) for as long
//! as a clone of the source lives: the clones of one configuration, and every client and
//! backend built from them, share one cached credential. The configuration itself holds no
//! state, only the identity.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::{SourceId, SourceWatch};

/// The states of one kind of source (exec plugins, OIDC identities), by source identity.
pub(super) struct States<T> {
    by_source: Mutex<Option<BySource<T>>>,
}

/// Each source's state by [`SourceId::key`], with the watch that tells whether the source is
/// still alive.
type BySource<T> = HashMap<usize, (SourceWatch, Arc<T>)>;

impl<T: Default> States<T> {
    /// None yet.
    pub(super) const fn new() -> States<T> {
        States {
            by_source: Mutex::new(None),
        }
    }

    /// The state of `source`: the one its clones use, or a new one. A new one is the moment to
    /// forget the states of sources no clone of which is left.
    pub(super) fn of(&self, source: &SourceId) -> Arc<T> {
        let mut guard = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        let by_source = guard.get_or_insert_with(HashMap::new);
        // An entry's watch keeps its identity's address from being reused, so the same key
        // is the same source.
        if let Some((_, state)) = by_source.get(&source.key()) {
            return state.clone();
        }
        by_source.retain(|_, (watch, _)| watch.is_live());
        let state = Arc::new(T::default());
        by_source.insert(source.key(), (source.watch(), state.clone()));
        state
    }
}
