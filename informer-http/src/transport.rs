//! The seam between this crate and the runtime adapters: [`Transport`], what an informer
//! driver needs from the API server for one resource (list pages and watch streams, in the
//! core's vocabulary), with the objects a relist may reuse ([`KnownObjects`]) and the boxed
//! future and stream types it hands them in.
//!
//! `Api` implements it over any `Backend`; tests and other sources (a recorded stream, another
//! client library) implement it themselves.
//!
//! The ground floor: this module names core types only and nothing else of this crate, so
//! every layer may use it and it could move out whole.
//!
//! Why here, in the provider, and not with its consumer (informer-runtime drives it; quinn
//! keeps its `Runtime` trait with its consumer) or in `informer_core::protocol`:
//! [`KnownObjects`] is part of it and this crate's list decoder takes it, so the vocabulary is
//! needed below the runtime anyway; and the trait hands out `Send` boxed futures and `futures`
//! streams, an async vocabulary (and a dependency) the sans-IO core does without. As nothing
//! here names the rest of this crate, moving [`Transport`] to the runtime later is a cut of
//! this file and of `Api`'s impl.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::Stream;
use informer_core::protocol::{Failure, ListPage, ListRequest, WatchEvent, WatchRequest};

/// A boxed, `Send` future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// A boxed, `Send` stream.
pub type BoxStream<'a, T> = Pin<Box<dyn Stream<Item = T> + Send + 'a>>;

/// What a runtime adapter needs from the API server for one resource: list pages and watch
/// streams, in the core's vocabulary.
///
/// The watch stream ends when the server ends the watch (`timeoutSeconds`, or the connection
/// closing). An `ERROR` event arrives as [`WatchEvent::Error`] (the server closes the stream
/// after it). A line that cannot be decoded (an object that does not fit the type, an unknown
/// event type, an over-long line, ...) arrives as `WatchEvent::Error(Failure::Decode(..))` and
/// ends the stream: skipping it would let a later bookmark move the informer past a change it
/// never applied.
pub trait Transport<K>: Send + Sync {
    /// Fetches one list page.
    fn list<'a>(&'a self, request: &'a ListRequest) -> BoxFuture<'a, Result<ListPage<K>, Failure>>;

    /// Fetches one list page as [`list`](Transport::list) does, but may take from `known` the
    /// objects it holds at the listed resourceVersion instead of building them again (the
    /// runtime passes its cache when it relists). The page must be the one `list` would give,
    /// but for sharing those objects. The default ignores `known`.
    fn list_known<'a>(
        &'a self,
        request: &'a ListRequest,
        known: Arc<dyn KnownObjects<K>>,
    ) -> BoxFuture<'a, Result<ListPage<K>, Failure>> {
        let _ = known;
        self.list(request)
    }

    /// Opens a watch. Fails before the first event when the server refuses the watch (an HTTP
    /// error status, a refused connection, …).
    fn watch<'a>(
        &'a self,
        request: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<K>>, Failure>>;
}

/// The objects an informer already holds, for a list to take instead of decoding its items
/// again (`ListDecoder::with_known`, [`Transport::list_known`]).
///
/// A relist usually returns most objects unchanged: the same key at the same resourceVersion,
/// which Kubernetes gives only to the very same object. An item the informer holds at that
/// version is then the cached `Arc`, not a new copy: nothing is built, held twice during the
/// relist or freed after it, and the relist's diff finds it unchanged at once. (The item is
/// still read whole, its syntax checked, which is most of what decoding a small object costs.)
pub trait KnownObjects<K>: Send + Sync {
    /// The object held under `key` when its resourceVersion is `resource_version`; `None`
    /// otherwise (not held, or at another version). It must have been decoded from the same
    /// resource as the list (as the informer's own cache was).
    fn known(
        &self,
        key: informer_core::object::KeyRef<'_>,
        resource_version: &str,
    ) -> Option<Arc<K>>;

    /// Whether nothing is held (a first list): the decoder then does not look anything up.
    /// Asked when the first item arrives. The default says no.
    fn is_empty(&self) -> bool {
        false
    }
}
