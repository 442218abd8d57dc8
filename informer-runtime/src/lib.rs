//! # informer-runtime
//!
//! The informer users touch, written once over a small [`Runtime`] trait (spawn, sleep, now):
//! `informer-tokio` and `informer-smol` fill in the runtime and the HTTP transport and
//! re-export this API, so code moves between them by changing its `use` line.
//!
//! - [`InformerBuilder`] → [`Informer`]: one resource (typed or
//!   [`DynamicObject`]), namespace, selectors, resync, indexers,
//!   transform, watch-error hook. [`SharedInformerFactory`] hands out one informer per
//!   resource + namespace + selectors.
//! - Handlers: [`EventHandler`] or [`HandlerFns`] closures, each on its own thread, pulling
//!   its next notification only when done with the previous; or an [`EventStream`].
//! - Readers: [`Store`], cloneable, from any task or thread.
//! - [`Informer::wait_for_sync`], [`wait_for_cache_sync`], [`Informer::shutdown`],
//!   [`Informer::metrics`]; `tracing` events for list, watch, relist, backoff, handler panics.
//! - Controllers: a [`WorkQueue`] (client-go `util/workqueue` rules) fed by handlers
//!   ([`WorkQueue::handler`], [`owner_keys`]), [`Workers`] reconciling its keys (async or
//!   blocking; done, requeue after, or an error requeued with backoff; draining shutdown),
//!   [`Leadership`] on a Lease, [`finalizer`] (add the finalizer, clean up on deletion, remove
//!   it), and the writes of [`informer_http::write`].
//!
//! # Contracts
//!
//! [`Informer`'s consistency contract](Informer#consistency-contract) says what the cache shows
//! (a subsequence of the server's states, each whole, eventually equal to the server's) and
//! what each handler hears (one notification at a time, per object in order ending at the
//! latest state, nothing lost; a handler that falls behind has its backlog coalesced to one
//! entry per object instead of growing without bound, unlike client-go). The behaviours it
//! rests on are listed, each with its named test, in [`conformance`].
//!
//! # How it runs
//!
//! One driver task per informer owns the sans-IO core
//! (`informer_core::SharedIndexInformer`) and obeys its loop: after every
//! input it drains `poll()` until `None`, then waits for the next input or `poll_timeout()`
//! (one timer). The list or watch in flight is a task of its own whose results come back
//! through a bounded channel tagged with their request id; a superseded request's task is
//! aborted and its late results are ignored by the core.
//!
//! Handlers and event streams get their notifications by one protocol (`delivery.rs`): the
//! core gives a handler one notification at a time. The driver hands it over when the handler
//! is idle (a non-blocking channel send); once the handler is done with it (an
//! [`EventHandler`] method returned, or an [`EventStream`]'s consumer asks for the next), the
//! handler's end takes its next one from the core itself, in one short locked step
//! (`handler_done` + `poll_notifications`). So a busy handler costs the driver nothing and
//! its backlog stays in the core's bounded, per-key coalesced queue. A worker thread waits for
//! the driver by blocking, a stream by returning `Pending`; nothing else differs.
//!
//! The core sits behind a `RwLock`. The driver takes the write lock for one step at a time (at
//! most 64 inputs, each followed by draining the outputs; a relist of 100k objects is one
//! input), a handler's end for its one finishing step, never while user code runs. Readers
//! ([`Store`]) never take it: they read one of two copies of the cache's tables (the objects
//! and keys are `Arc`s shared with the core), `informer_core::views::Views`. At the end of a
//! step the driver replays the step's changes on the copy no reader is using and switches
//! readers to it with one atomic store, then hands the step's notifications over, so a handler
//! finds in the store the change it is told about. A full relist is one step, so no reader ever
//! sees half of it; a reader never waits for a step, and a reader still on the old copy at the
//! next switch makes the driver retry shortly (`Metrics::publish_retries`) rather than wait.
//! The price is memory: the two copies' maps and index buckets, on top of the core's map.
#![forbid(unsafe_code)]

// Modules, each importing only those listed before it: `resource_version` (waits for a
// resourceVersion), `state` (the core behind its lock, and
// the publisher of the readers' copies)
// under `delivery` (how notifications reach a handler's end), under `handler`, `stream`,
// `store`, `driver`, then `informer` (the handle), `builder`, `factory`.
mod runtime;

mod error;
mod metrics;
mod sync;

mod resource_version;

mod state;

mod delivery;

mod driver;
mod handler;
mod store;
mod stream;

mod informer;

#[cfg(feature = "admin")]
pub mod admin;
mod builder;
mod consistency;
mod controller;
mod factory;
mod finalizer;
mod leader;
mod reconciler;
mod shard;
mod snapshot;
mod snapshot_file;

/// The behaviour list (`docs/CONFORMANCE.md` in the repository): what the informer does that
/// users rely on, item by item, each a named `conformance_NN_*` test, and where it deliberately
/// differs from client-go.
///
#[doc = include_str!("../../docs/CONFORMANCE.md")]
pub mod conformance {}

pub mod events;

#[cfg(feature = "admin")]
pub use admin::{Admin, AdminError, AdminResponse, AdminServer};
pub use builder::InformerBuilder;
pub use consistency::{ConsistencyCheck, Divergence};
pub use controller::{Action, OwnerReference, WorkQueue, Workers, owner_keys, owner_references};
pub use driver::{WatchError, WatchErrorHook};
pub use error::Error;
pub use events::{EventType, Recorder, Reporter};
pub use factory::{InformerOptions, SharedInformerFactory};
pub use finalizer::{
    FinalizerError, FinalizerEvent, FinalizerNameError, FinalizerPatch, finalizer,
};
pub use handler::{EventHandler, HandlerFns, HandlerRegistration};
pub use informer::Informer;
pub use informer_core::controller::leaderelection::LeaderElectionConfig;
pub use informer_core::controller::shard::{HashBy, Mode as ShardMode, ShardConfig};
pub use informer_core::controller::workqueue::Priority;
pub use informer_core::object::{MetadataError, OwnerReferenceRef, Timestamp, controller_of};
pub use leader::{LeaderElectionError, Leadership};
pub use metrics::{Metrics, refresh_gauges};
pub use reconciler::{Context, Controller, ControllerError, ControllerStats, StatsHandle};
pub use runtime::{BoxFuture, Runtime, SpawnError};
pub use shard::{ShardScope, Sharding, ShardingError, member_name};
pub use snapshot_file::{SnapshotLoad, SnapshotWritten};
pub use store::Store;
pub use stream::EventStream;
pub use sync::{CacheSync, wait_for_cache_sync};

pub use informer_core::cache::indexer::{
    IndexFunc, IndexValues, LabelIndex, NAMESPACE_INDEX, index_fn, label_index_name,
};
pub use informer_core::impl_object;
pub use informer_core::informer::reflector::{BackoffConfig, ReflectorConfig};
/// An object of any kind held in less memory than its JSON (a realistic Pod: about 0.2x; LZ4
/// against a dictionary learned from the resource's own objects): `Informer<CompactObject>`
/// for big clusters, read as a `DynamicObject` is.
pub use informer_core::object::CompactObject;
pub use informer_core::protocol::{Failure, Selectors};
pub use informer_core::{
    cache::indexer::IndexError, informer::DeliveryOrder, informer::HandlerId, informer::InformerId,
    informer::Notification, object::DynamicObject, object::Key, object::KeyRef, object::Object,
    object::ObjectOrTombstone, object::PartialObjectMetadata, object::Tombstone,
    object::selector::Labels, object::selector::Selector, object::selector::SelectorError,
    snapshot::SnapshotCodec,
};
pub use informer_http::{Config, HasResource, Resource};

/// Defines the public API a runtime crate (`informer-tokio`, `informer-smol`) exports on top of
/// this crate: the same re-exports, type aliases and `wait_for_cache_sync` in every runtime
/// crate, so that a program moves between them by changing its `use` line, by construction.
///
/// The runtime crate itself provides what differs: its [`Runtime`] type (`$rt`, constructed by
/// `$make_rt`), `client`, `block_on` and `sleep`.
#[doc(hidden)]
#[macro_export]
macro_rules! runtime_crate_api {
    (runtime: $rt:ty, make_runtime: $make_rt:expr, name: $name:literal, backend: $backend:ty, backend_doc: $backend_doc:literal) => {
        pub use informer_core as core;
        pub use informer_http as http;
        pub use informer_http::ClientError;
        pub use informer_http::{CustomResource, custom_resource};
        /// An object of any kind held in less memory than its JSON (a realistic Pod: about
        /// 0.2x): `Informer<CompactObject>` for big clusters, read as a `DynamicObject` is.
        pub use $crate::CompactObject;
        pub use $crate::{
            BackoffConfig, BoxFuture, CacheSync, Config, ConsistencyCheck, DeliveryOrder,
            Divergence, DynamicObject, Error, EventHandler, Failure, HandlerFns, HandlerId,
            HasResource, IndexError, IndexFunc, IndexValues, InformerId, InformerOptions, Key,
            KeyRef, LabelIndex, Labels, Metrics, NAMESPACE_INDEX, Notification, Object,
            ObjectOrTombstone, PartialObjectMetadata, ReflectorConfig, Resource, Runtime, Selector,
            SelectorError, Selectors, SnapshotCodec, SnapshotLoad, SnapshotWritten, SpawnError,
            Store, Tombstone, WatchError, WatchErrorHook, impl_object, index_fn, label_index_name,
        };

        #[doc = concat!("The transport backend this crate uses (", $backend_doc, ").")]
        pub type Backend = $backend;
        /// An API client on this crate's backend.
        pub type Client = informer_http::Client<Backend>;
        #[doc = concat!("An informer on ", $name, ".")]
        pub type Informer<K> = $crate::Informer<K, $rt>;
        #[doc = concat!("An informer builder on ", $name, ".")]
        pub type InformerBuilder<K> = $crate::InformerBuilder<K, $rt>;
        #[doc = concat!("A handler registration on ", $name, ".")]
        pub type HandlerRegistration<K> = $crate::HandlerRegistration<K, $rt>;
        #[doc = concat!("An event stream on ", $name, ".")]
        pub type EventStream<K> = $crate::EventStream<K, $rt>;
        #[doc = concat!("A shared informer factory on ", $name, ".")]
        pub type SharedInformerFactory = $crate::SharedInformerFactory<$rt, Backend>;
        pub use $crate::{
            Action, EventType, LeaderElectionConfig, LeaderElectionError, Leadership,
            OwnerReference, Recorder, Reporter, WorkQueue, events, owner_keys, owner_references,
        };
        pub use $crate::{
            FinalizerError, FinalizerEvent, FinalizerNameError, FinalizerPatch, finalizer,
        };
        pub use $crate::{MetadataError, OwnerReferenceRef, Priority, Timestamp, controller_of};
        #[doc = concat!("Reconcile workers on ", $name, ".")]
        pub type Workers<K = Key> = $crate::Workers<K, $rt>;
        #[cfg(feature = "admin")]
        pub use $crate::{Admin, AdminError, AdminResponse, AdminServer};
        pub use $crate::{ControllerError, ControllerStats, StatsHandle, refresh_gauges};
        pub use $crate::{
            HashBy, ShardConfig, ShardMode, ShardScope, Sharding, ShardingError, member_name,
        };
        #[doc = concat!("A controller on ", $name, " (see [`informer_runtime::Controller`]).")]
        pub type Controller<K> = $crate::Controller<K, $rt, Backend>;
        /// What a controller's reconcile gets besides the object.
        pub type Context = $crate::Context<Backend>;

        /// Campaigns for the Lease `namespace/name` on this crate's runtime (see
        /// [`Leadership`]).
        pub fn leader_election(
            client: &Client,
            namespace: &str,
            name: &str,
            config: $crate::LeaderElectionConfig,
        ) -> Result<$crate::Leadership, $crate::LeaderElectionError> {
            $crate::Leadership::spawn($make_rt, client, namespace, name, config)
        }

        /// Joins the sharded ring of `config` on this crate's runtime, its Leases in
        /// `namespace`, for a controller of `primary` owning `owned`, over the objects of
        /// `scope` (see [`Sharding`]).
        pub fn sharding(
            client: &Client,
            namespace: &str,
            config: $crate::ShardConfig,
            primary: $crate::Resource,
            owned: Vec<$crate::Resource>,
            scope: $crate::ShardScope,
        ) -> Result<$crate::Sharding, $crate::ShardingError> {
            $crate::Sharding::spawn($make_rt, client, namespace, config, primary, owned, scope)
        }

        /// Runs `future` on this crate's runtime, detached.
        pub fn spawn(
            future: impl std::future::Future<Output = ()> + Send + 'static,
        ) -> Result<(), $crate::SpawnError> {
            <$rt as $crate::Runtime>::spawn(&$make_rt, Box::pin(future))
        }

        /// Waits until every one of `items` has synced, at most `timeout` in all.
        pub async fn wait_for_cache_sync(
            items: &[&dyn CacheSync],
            timeout: Option<std::time::Duration>,
        ) -> Result<(), Error> {
            $crate::wait_for_cache_sync(&$make_rt, items, timeout).await
        }
    };
}
