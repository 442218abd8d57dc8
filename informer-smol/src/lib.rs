//! # informer-smol
//!
//! The Kubernetes informer on smol, with informer-http's smol transport, and no tokio anywhere:
//! [`informer_runtime`]'s API with the runtime and transport filled in. `informer-tokio` has
//! the same names; a program moves between them by changing its `use` line.
//!
//! ```no_run
//! use std::time::Duration;
//! use informer_smol::{Config, DynamicObject, HandlerFns, Informer, Resource, client};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = client(Config::infer()?)?;
//! let informer = Informer::<DynamicObject>::builder(&client, Resource::CONFIGMAPS)
//!     .namespace("default")
//!     .build()?;
//! informer.add_handler(HandlerFns::new().on_add(|cm: std::sync::Arc<DynamicObject>, _| {
//!     println!("configmap {}", cm.metadata.name)
//! }))?;
//! informer.start()?;
//! informer.wait_for_sync(Some(Duration::from_secs(30))).await?;
//! println!("{} configmaps cached", informer.store().len());
//! informer.shutdown().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

use std::time::Duration;

pub use informer_core as core;
pub use informer_http as http;
pub use informer_runtime::{
    BackoffConfig, CacheSync, Config, DynamicObject, Error, EventHandler, Failure, HandlerFns,
    HandlerId, IndexError, IndexFunc, IndexValues, InformerOptions, Key, Metrics, NAMESPACE_INDEX,
    Notification, Object, ObjectOrTombstone, ReflectorConfig, Resource, Store, Tombstone, index_fn,
};

/// The transport backend this crate uses (HTTP/1.1 over smol's TCP and futures-rustls).
pub type Backend = informer_http::SmolBackend;
/// An API client on this crate's backend.
pub type Client = informer_http::Client<Backend>;
/// An informer on smol.
pub type Informer<K> = informer_runtime::Informer<K, Smol>;
/// An informer builder on smol.
pub type InformerBuilder<K> = informer_runtime::InformerBuilder<K, Smol>;
/// A handler registration on smol.
pub type HandlerRegistration<K> = informer_runtime::HandlerRegistration<K, Smol>;
/// An event stream on smol.
pub type EventStream<K> = informer_runtime::EventStream<K, Smol>;
/// A shared informer factory on smol.
pub type SharedInformerFactory = informer_runtime::SharedInformerFactory<Smol, Backend>;

/// A client for `config` on the smol backend.
pub fn client(config: Config) -> Result<Client, informer_http::ClientError> {
    informer_http::Client::smol(config)
}

/// Runs `future` to completion on the current thread (`smol::block_on`; spawned tasks run on
/// smol's global executor). The same call exists in `informer-tokio`, so examples port by
/// changing imports only. Never fails; the `Result` matches informer-tokio's.
pub fn block_on<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    Ok(smol::block_on(future))
}

/// Sleeps for `duration` (smol's timer).
pub async fn sleep(duration: Duration) {
    smol::Timer::after(duration).await;
}

/// Waits until every one of `items` has synced, at most `timeout` in all.
pub async fn wait_for_cache_sync(
    items: &[&dyn CacheSync],
    timeout: Option<Duration>,
) -> Result<(), Error> {
    informer_runtime::wait_for_cache_sync(&Smol, items, timeout).await
}

/// The smol [`Runtime`](informer_runtime::Runtime): tasks go to smol's global executor
/// (`smol::spawn`, whose threads start on first use; `SMOL_THREADS` sets how many), timers to
/// `async-io`'s reactor. Nothing needs to be running beforehand.
#[derive(Clone, Copy, Debug, Default)]
pub struct Smol;

impl informer_runtime::Runtime for Smol {
    fn spawn(
        &self,
        future: informer_runtime::BoxFuture<'static, ()>,
    ) -> Result<(), informer_runtime::SpawnError> {
        smol::spawn(future).detach();
        Ok(())
    }

    fn sleep(&self, duration: Duration) -> informer_runtime::BoxFuture<'static, ()> {
        Box::pin(async move {
            smol::Timer::after(duration).await;
        })
    }
}
