//! Event handlers: the trait, closure handlers, and the worker each handler runs on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use informer_core::{HandlerId, Notification, Object, ObjectOrTombstone};

use crate::informer::StateLock;

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
/// # use informer_core::DynamicObject;
/// let h = HandlerFns::<DynamicObject>::new()
///     .on_add(|obj, initial| println!("add {} (initial: {initial})", obj.metadata.name))
///     .on_delete(|gone| println!("delete {}", gone.object().metadata.name));
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

/// Per-handler counters and state shared between the driver, the worker and the registration.
#[derive(Debug, Default)]
pub(crate) struct HandlerStats {
    /// Notifications the handler finished (panicked ones included).
    pub(crate) delivered: AtomicU64,
    /// Notifications that panicked.
    pub(crate) panics: AtomicU64,
    /// Cleared when the handler is removed or the informer shuts down: a notification handed
    /// over but not yet started is then dropped.
    pub(crate) active: AtomicBool,
}

/// Runs one notification on `handler`, catching a panic (returned as its message).
pub(crate) fn run_one<K: 'static>(
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

/// The worker thread of one handler.
///
/// It waits for the notification the driver hands over when the handler is idle, runs it,
/// then steps the core itself under the write lock: `handler_done` and, in the same step,
/// `poll_notification_for` its own next notification, which it runs without a round trip
/// through the driver. That step obeys the core's loop rule: `handler_done` feeds the reflector
/// nothing and only makes this handler idle, so the only output it can make ready is this
/// handler's next notification, which the worker takes at once (everything else was drained by
/// the driver before it released the lock). When the handler has nothing pending, the worker
/// waits for the driver again.
pub(crate) struct Worker<K> {
    pub(crate) informer: String,
    pub(crate) id: HandlerId,
    pub(crate) handler: Box<dyn EventHandler<K>>,
    pub(crate) rx: async_channel::Receiver<Notification<K>>,
    pub(crate) state: Arc<StateLock<K>>,
    pub(crate) changed: Arc<event_listener::Event>,
    pub(crate) stats: Arc<HandlerStats>,
    pub(crate) metrics: Arc<crate::metrics::Counters>,
    /// Dropped when the thread exits.
    pub(crate) exited: async_channel::Sender<()>,
}

pub(crate) fn spawn_worker<K: Object + Send + Sync + 'static>(w: Worker<K>) -> std::io::Result<()> {
    let Worker {
        informer,
        id,
        mut handler,
        rx,
        state,
        changed,
        stats,
        metrics,
        exited,
    } = w;
    std::thread::Builder::new()
        .name(format!("informer-handler-{}", id.0))
        .spawn(move || {
            'idle: while let Ok(mut n) = rx.recv_blocking() {
                loop {
                    if !stats.active.load(Ordering::Acquire) {
                        break 'idle;
                    }
                    if let Err(msg) = run_one(&mut *handler, n) {
                        stats.panics.fetch_add(1, Ordering::Relaxed);
                        metrics.handler_panics.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(
                            informer = %informer,
                            handler = id.0,
                            panic = %msg,
                            "event handler panicked; it goes on with its next notification"
                        );
                    }
                    stats.delivered.fetch_add(1, Ordering::Relaxed);
                    let next = {
                        let mut st = state.write();
                        if !stats.active.load(Ordering::Acquire) {
                            break 'idle;
                        }
                        st.core.handler_done(id);
                        st.core.poll_notification_for(id)
                    };
                    // Per-handler sync may have changed.
                    changed.notify(usize::MAX);
                    match next {
                        Some(m) => n = m,
                        None => continue 'idle,
                    }
                }
            }
            drop(exited);
        })
        .map(drop)
}
