//! How notifications reach a handler: one protocol, whether a worker thread runs them
//! ([`EventHandler`](crate::EventHandler)) or a consumer pulls them
//! ([`EventStream`](crate::EventStream)).
//!
//! The core hands a handler at most one notification, or one batch of them, at a time and gives
//! it the next only once told the previous is finished (`handler_done`). Two paths lead to the
//! handler's [`Inbox`]:
//!
//! - **The driver hands over** a notification when the core says the handler is idle: it
//!   drains the core's outputs under the write lock, publishes the step's changes to the
//!   readers' copies of the cache, and then sends each notification into its handler's channel
//!   ([`hand_over`]). The channel never holds more than that one notification, so the send
//!   never blocks. (Publishing first is what lets a handler find in the store the change it
//!   is told about.)
//! - **The handler's end takes its next ones itself**: when its consumer is done with what it
//!   was given and asks for more, the inbox steps the core under the write lock,
//!   `handler_done` and, in the same step, `poll_notifications` for this handler: up to [`BATCH`] of
//!   its next notifications, which the consumer then starts one after the other without the
//!   lock or a round trip through the driver (20,000 initial adds take the lock about 160
//!   times, not 20,000). The batch is one hand-over: the core holds the handler busy until the
//!   whole batch is reported done, so there is never more than one batch in flight. That step
//!   obeys the core's loop rule: `handler_done` feeds the reflector nothing and only makes this
//!   handler idle, so the only output it can make ready is this handler's next notifications,
//!   which the inbox takes at once (the driver drained everything else before it released the
//!   lock). It does so only when everything the core applied is published to the readers'
//!   copies (so every notification of the batch finds its change in the store); otherwise (the
//!   driver is retrying a publish a reader held up) it wakes the driver and waits for it to
//!   hand the next notification over after the publish. When the handler has nothing pending,
//!   the inbox waits for the driver again.
//!
//! Why one protocol with two hand-over points, not a single road (both were built and
//! measured; the figures are in docs/BENCHMARKS.md):
//!
//! - **Pull only** (the driver only tells the inbox that something is pending; the inbox takes
//!   it after the publish) changes what a handler hears: the notifications a handler would be
//!   handed right after an input then wait until the whole step is published, and the core
//!   coalesces them with the later inputs of that step (an add and a delete of one key within
//!   a step reach a keeping-up handler as one notification, not two).
//! - **Push only** (the inbox reports a finished batch to the driver, which takes the next)
//!   costs a round trip through the driver's task per batch: a first sync's initial adds
//!   reached the handler markedly later, and a stream of watch events took more CPU.
//!
//! The driver's hand-over is what keeps each change apart for a handler that keeps up; the
//! inbox's own step is what keeps a handler with a backlog off the driver. Both obey the same
//! rule: the core holds the handler busy for one hand-over (one notification or one batch)
//! until it is reported done, and nothing is handed over before its step is published.
//!
//! So a busy handler costs the driver nothing, and its backlog stays in the core's bounded,
//! per-key coalesced queue (a batch, once taken, is no longer coalesced). Removing the handler
//! or shutting the informer down clears its `active` flag and drops the driver's end: a
//! notification handed over or taken in a batch but not yet started is dropped and the inbox
//! reports the end. A handler's sync turns true when the batch holding its last initial add is
//! reported done.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use event_listener::Event;
use futures_util::stream::Stream;
use informer_core::{informer::HandlerId, informer::Notification, object::Object};

use crate::state::{Cmd, HandlerStats, Sink, Stamp, Stamped, State, StateLock};

/// Notifications a handler's end takes from the core at most in one locked step.
pub(crate) const BATCH: usize = 128;

/// The handler's end of its delivery.
pub(crate) struct Inbox<K> {
    id: HandlerId,
    rx: Pin<Box<async_channel::Receiver<Stamped<K>>>>,
    state: Arc<StateLock<K>>,
    changed: Arc<Event>,
    /// Wakes the driver (to hand over a notification the inbox may not take itself).
    wake: async_channel::Sender<Cmd>,
    stats: Arc<HandlerStats>,
    /// The consumer holds a notification it has not finished yet.
    outstanding: bool,
    /// The rest of the batch taken from the core, last first: started one by one, reported
    /// done together once the last is finished.
    batch: Vec<Notification<K>>,
    /// The arrival of the batch's notifications (see [`Stamp`]).
    batch_stamp: Stamp,
    /// The arrival of the outstanding notification: its latency is recorded when it is done.
    started: Stamp,
}

/// Connects handler `id` (just added to the core): its sink goes into `state`, its inbox is
/// returned.
pub(crate) fn connect<K>(
    state: &mut State<K>,
    lock: &Arc<StateLock<K>>,
    changed: &Arc<Event>,
    wake: &async_channel::Sender<Cmd>,
    id: HandlerId,
    stats: Arc<HandlerStats>,
) -> Inbox<K> {
    let (tx, rx) = async_channel::unbounded();
    stats.active.store(true, Ordering::Release);
    state.sinks.insert(
        id,
        Sink {
            tx,
            stats: stats.clone(),
            behind_since: None,
        },
    );
    Inbox {
        id,
        rx: Box::pin(rx),
        state: lock.clone(),
        changed: changed.clone(),
        wake: wake.clone(),
        stats,
        outstanding: false,
        batch: Vec::new(),
        batch_stamp: None,
        started: None,
    }
}

/// The driver's side: hands `notification`, which the core has just given out to idle
/// handler `id`, over to the handler's inbox. If the inbox is gone (a dropped event stream)
/// the handler is removed: nothing would ever finish it.
pub(crate) fn hand_over<K: Object + 'static>(
    state: &mut State<K>,
    id: HandlerId,
    notification: Notification<K>,
    stamp: Stamp,
) {
    let sent = match state.sinks.get(&id) {
        Some(sink) => sink.tx.try_send((notification, stamp)).is_ok(),
        None => false,
    };
    if !sent {
        // The core's own id: never foreign.
        let _ = state.remove_handler(id);
    }
}

impl<K: Object + 'static> Inbox<K> {
    /// The next notification, for a worker thread: finishes the previous one, then takes the
    /// next from the core, or blocks until the driver hands one over. `None`: the handler was
    /// removed or the informer shut down.
    pub(crate) fn next_blocking(&mut self) -> Option<Notification<K>> {
        if let Some(n) = self.finish_previous() {
            return self.start(n);
        }
        let (n, stamp) = self.rx.recv_blocking().ok()?;
        self.started = stamp;
        self.start(n)
    }

    /// [`next_blocking`](Self::next_blocking) for an async consumer.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Notification<K>>> {
        if let Some(n) = self.finish_previous() {
            return Poll::Ready(self.start(n));
        }
        match self.rx.as_mut().poll_next(cx) {
            Poll::Ready(Some((n, stamp))) => {
                self.started = stamp;
                Poll::Ready(self.start(n))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Hands `n` to the consumer, unless the handler has been detached meanwhile.
    fn start(&mut self, n: Notification<K>) -> Option<Notification<K>> {
        if !self.stats.active.load(Ordering::Acquire) {
            return None;
        }
        self.outstanding = true;
        Some(n)
    }

    /// Reports the outstanding notification (if any) finished; returns the next of its batch
    /// or, the batch done, reports it done to the core and, in the same locked step, takes the
    /// handler's next batch.
    fn finish_previous(&mut self) -> Option<Notification<K>> {
        if !std::mem::take(&mut self.outstanding) {
            return None;
        }
        self.stats.delivered.add(1);
        if let Some(arrived) = self.started.take() {
            self.stats.latency.record(arrived.elapsed());
        }
        if let Some(n) = self.batch.pop() {
            self.started = self.batch_stamp;
            return Some(n);
        }
        let synced_now = {
            let mut state = self.state.write();
            if !self.stats.active.load(Ordering::Acquire) {
                return None;
            }
            let was_synced = state.core.handler_has_synced(self.id);
            state.core.handler_done(self.id);
            let synced_now = !was_synced && state.core.handler_has_synced(self.id);
            if state.is_published() {
                let State { core, sinks, .. } = &mut *state;
                if core.poll_notifications(self.id, BATCH, &mut self.batch) > 0 {
                    if let Some(sink) = sinks.get_mut(&self.id) {
                        self.batch_stamp = sink.take_stamp();
                        // What is left arrived after the stamp, before now: the stamp bounds it.
                        if self.batch_stamp.is_some() && core.pending(self.id) > 0 {
                            sink.behind_since = self.batch_stamp;
                        }
                    }
                }
                // The queue depth as this handler's end leaves it (the driver sets it too,
                // after each step).
                #[cfg(feature = "metrics")]
                self.stats.pending.set(core.pending(self.id));
            } else {
                // Their changes may not be in the store yet: the driver hands the next one
                // over once they are.
                let _ = self.wake.try_send(Cmd::Wake);
            }
            synced_now
        };
        // Finishing a batch changes nothing a waiter waits for but the handler's sync: waking
        // them after each batch of an initial population's adds would only slow the handler.
        if synced_now {
            self.changed.notify(usize::MAX);
        }
        self.batch.reverse();
        let next = self.batch.pop();
        if next.is_some() {
            self.started = self.batch_stamp;
        }
        next
    }
}
