//! Event handlers: the trait, closure handlers, the worker thread each handler runs on, and
//! the registration that controls it.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use informer_core::{
    informer::HandlerId, informer::Notification, object::Object, object::ObjectOrTombstone,
};

use crate::delivery::Inbox;
use crate::error::Error;
use crate::metrics::Counters;
use crate::runtime::{BoxFuture, Runtime};
use crate::state::{HandlerStats, Shared};
use crate::sync::CacheSync;

/// Receives an informer's notifications (client-go `ResourceEventHandler`).
///
/// A handler runs on a thread of its own: its methods are called one at a time, in order per
/// object, and may block (a slow handler delays nobody else: its backlog stays in the informer,
/// coalesced per key, so it is bounded by the number of cached objects). A panic is caught and
/// reported, and the handler goes on with its next notification (its own state may then be
/// whatever the panic left).
pub trait EventHandler<K>: Send + 'static {
    /// `obj` is new to this handler. `in_initial_list` is set for the objects of the initial
    /// list and for the replay of the cache a handler added late receives.
    fn on_add(&mut self, obj: Arc<K>, in_initial_list: bool) {
        let _ = (obj, in_initial_list);
    }

    /// The object changed from `old` (what this handler saw last) to `new`. A resync delivers
    /// `old` and `new` with the same resourceVersion.
    fn on_update(&mut self, old: Arc<K>, new: Arc<K>) {
        let _ = (old, new);
    }

    /// The object is gone: its last known state, or a tombstone when the deletion was inferred
    /// from a relist.
    fn on_delete(&mut self, obj: ObjectOrTombstone<K>) {
        let _ = obj;
    }
}

type AddFn<K> = Box<dyn FnMut(Arc<K>, bool) + Send>;
type UpdateFn<K> = Box<dyn FnMut(Arc<K>, Arc<K>) + Send>;
type DeleteFn<K> = Box<dyn FnMut(ObjectOrTombstone<K>) + Send>;

/// A handler made of closures (client-go `ResourceEventHandlerFuncs`); the ones not set do
/// nothing.
///
/// ```
/// # use informer_runtime::HandlerFns;
/// # use informer_core::object::DynamicObject;
/// let h = HandlerFns::<DynamicObject>::new()
///     .on_add(|obj, initial| println!("add {} (initial: {initial})", obj.metadata.name()))
///     .on_delete(|gone| println!("delete {}", gone.object().metadata.name()));
/// # let _ = h;
/// ```
pub struct HandlerFns<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for HandlerFns<K> {
    fn default() -> Self {
        HandlerFns {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> std::fmt::Debug for HandlerFns<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerFns")
            .field("add", &self.add.is_some())
            .field("update", &self.update.is_some())
            .field("delete", &self.delete.is_some())
            .finish()
    }
}

impl<K> HandlerFns<K> {
    /// A handler that does nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets what an add does.
    pub fn on_add(mut self, f: impl FnMut(Arc<K>, bool) + Send + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Sets what an update does.
    pub fn on_update(mut self, f: impl FnMut(Arc<K>, Arc<K>) + Send + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Sets what a delete does.
    pub fn on_delete(mut self, f: impl FnMut(ObjectOrTombstone<K>) + Send + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: 'static> EventHandler<K> for HandlerFns<K> {
    fn on_add(&mut self, obj: Arc<K>, in_initial_list: bool) {
        if let Some(f) = &mut self.add {
            f(obj, in_initial_list)
        }
    }
    fn on_update(&mut self, old: Arc<K>, new: Arc<K>) {
        if let Some(f) = &mut self.update {
            f(old, new)
        }
    }
    fn on_delete(&mut self, obj: ObjectOrTombstone<K>) {
        if let Some(f) = &mut self.delete {
            f(obj)
        }
    }
}

/// Runs one notification on `handler`, catching a panic (returned as its message).
fn run_one<K: 'static>(
    handler: &mut dyn EventHandler<K>,
    n: Notification<K>,
) -> Result<(), String> {
    let r = catch_unwind(AssertUnwindSafe(|| match n {
        Notification::Add {
            obj,
            in_initial_list,
        } => handler.on_add(obj, in_initial_list),
        Notification::Update { old, new } => handler.on_update(old, new),
        Notification::Delete(d) => handler.on_delete(d),
    }));
    r.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_string())
    })
}

/// Starts the worker thread of handler `id`: it runs each notification its inbox gives it,
/// one at a time, catching panics, until the handler is removed or the informer shut down.
/// `exited` is dropped when the thread ends.
pub(crate) fn spawn_worker<K: Object + Send + Sync + 'static>(
    informer: String,
    id: HandlerId,
    mut handler: Box<dyn EventHandler<K>>,
    mut inbox: Inbox<K>,
    stats: Arc<HandlerStats>,
    metrics: Arc<Counters>,
    exited: async_channel::Sender<()>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("informer-handler-{}", id.index()))
        .spawn(move || {
            while let Some(n) = inbox.next_blocking() {
                if let Err(msg) = run_one(&mut *handler, n) {
                    stats.panics.add(1);
                    metrics.handler_panics.add(1);
                    tracing::error!(
                        informer = %informer,
                        handler = id.index(),
                        panic = %msg,
                        "event handler panicked; it goes on with its next notification"
                    );
                }
            }
            drop(exited);
        })
        .map(drop)
}

/// A handler added to an informer (client-go `ResourceEventHandlerRegistration`). Dropping it
/// does not remove the handler: call [`remove`](Self::remove).
pub struct HandlerRegistration<K, R> {
    pub(crate) shared: Arc<Shared<K, R>>,
    pub(crate) id: HandlerId,
    pub(crate) stats: Arc<HandlerStats>,
}

impl<K, R> fmt::Debug for HandlerRegistration<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> HandlerRegistration<K, R> {
    /// The handler's id.
    pub fn id(&self) -> HandlerId {
        self.id
    }

    /// Whether the informer has synced and this handler has finished its initial adds.
    pub fn has_synced(&self) -> bool {
        self.shared.handler_has_synced(self.id)
    }

    /// Waits until [`has_synced`](Self::has_synced); `timeout` `None` waits as long as it
    /// takes. Fails with [`Error::Timeout`] or [`Error::Stopped`].
    pub async fn wait_for_sync(&self, timeout: Option<Duration>) -> Result<(), Error> {
        self.shared.wait_for_handler_sync(self.id, timeout).await
    }

    /// Notifications pending for this handler (at most one per key).
    pub fn pending(&self) -> usize {
        self.shared.pending(self.id)
    }

    /// Notifications this handler has finished.
    pub fn delivered(&self) -> u64 {
        self.stats.delivered.get()
    }

    /// Panics caught in this handler.
    pub fn panics(&self) -> u64 {
        self.stats.panics.get()
    }

    /// Removes the handler: it receives nothing new (a notification it is running finishes).
    /// Returns whether it was still registered.
    pub fn remove(&self) -> bool {
        // Its own informer's id: never foreign.
        self.shared.remove_handler(self.id).unwrap_or(false)
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> CacheSync for HandlerRegistration<K, R> {
    fn is_synced(&self) -> bool {
        self.has_synced()
    }
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.wait_for_sync(None))
    }
    fn last_failure(&self) -> Option<informer_core::protocol::Failure> {
        self.shared.counters.last_failure()
    }
    fn informer_name(&self) -> Option<&str> {
        Some(&self.shared.name)
    }
}
