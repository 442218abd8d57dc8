//! The driver task: one per informer, the only place the core's outputs are drained and acted
//! upon (requests started, watch errors reported; notifications handed over through
//! [`crate::delivery`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use futures_util::future::{AbortHandle, Abortable, poll_fn};
use futures_util::stream::{Stream, StreamExt};
use informer_core::informer::{Notification, Output};
use informer_core::protocol::RequestId;
use informer_core::protocol::{Failure, Input, Request, WatchEvent};
use informer_core::views::Views;
use informer_core::{object::KeyRef, object::Object, time::Instant};
use informer_http::Transport;
use informer_http::decode::KnownObjects;
use tracing::Instrument;

use crate::delivery::hand_over;
use crate::runtime::{BoxFuture, Runtime};
use crate::state::{Cmd, Shared, State};

/// Called with every list or watch failure (client-go's `WatchErrorHandler`). Recovery is
/// already under way; this is for logging and metrics. It runs on the driver task: keep it
/// quick. A panic in it is caught and logged.
pub type WatchErrorHook = Arc<dyn Fn(&WatchError) + Send + Sync>;

/// A list or watch failure of one informer, as its watch-error hook gets it: the typed
/// [`Failure`] and the [name](crate::Informer::name) of the informer it happened to (client-go
/// hands its handler the reflector, which carries its name). `Display` says which informer.
#[derive(Clone, Debug)]
pub struct WatchError {
    informer: Arc<str>,
    failure: Failure,
}

impl WatchError {
    /// The informer's name.
    pub fn informer(&self) -> &str {
        &self.informer
    }

    /// What failed.
    pub fn failure(&self) -> &Failure {
        &self.failure
    }

    /// The failure, without the name.
    pub fn into_failure(self) -> Failure {
        self.failure
    }
}

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "informer {}: {}", self.informer, self.failure)
    }
}

impl std::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.failure)
    }
}

/// Inputs at most applied in one step (bounds how long handlers' ends and the informer's own
/// calls can wait for the lock, and how late a step's changes reach the store; readers never
/// wait for it).
const BATCH: usize = 64;
/// When a reader still holds the copy of the cache a step must be published to, the driver
/// tries again after this long (it never waits for a reader).
const PUBLISH_RETRY: std::time::Duration = std::time::Duration::from_micros(200);
/// Transport results buffered between a request task and the driver.
const RESULTS_CAPACITY: usize = 256;

/// A step staging at least this many changes is published after the requests it started have
/// gone out (see the driver's loop). Smaller steps publish in microseconds.
const LARGE_STEP: usize = 1024;

/// Completes at its second poll, having woken its task at the first: the task goes to the back
/// of its executor's queue, behind the tasks it has just spawned.
struct YieldNow(bool);

impl std::future::Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// What request tasks report, tagged with the request they answer.
type Replies<K> = async_channel::Receiver<(RequestId, Input<K>)>;

/// What wakes the driver.
enum Wakeup<K> {
    Cmd(Cmd),
    Reply(RequestId, Input<K>),
    Timer,
}

/// What a step leaves for the rest of the turn.
struct Stepped {
    /// When the core's next timeout is due.
    deadline: Option<Instant>,
    /// The end of a backoff under way.
    backoff: Option<Instant>,
    /// Whether the step reached the readers' copies.
    published: bool,
}

/// The driver task's state.
pub(crate) struct Driver<K, R> {
    shared: Arc<Shared<K, R>>,
    transport: Arc<dyn Transport<K>>,
    cmd_rx: Pin<Box<async_channel::Receiver<Cmd>>>,
    reply_tx: async_channel::Sender<(RequestId, Input<K>)>,
    reply_rx: Pin<Box<Replies<K>>>,
    exited_rx: async_channel::Receiver<()>,
    watch_error: Option<WatchErrorHook>,
    inflight: Option<AbortHandle>,
    timer: Option<(Instant, BoxFuture<'static, ()>)>,
    /// Armed while a step is not published yet: a reader held the copy, or the step was
    /// deferred behind the requests it started (`deferred`).
    retry: Option<BoxFuture<'static, ()>>,
    /// The last step's publish was deferred until after a yield (a large step that started a
    /// request); the next step publishes whatever it does.
    deferred: bool,
    backoff_until: Option<Instant>,
    /// Wakeups produced by the driver itself (a request that could not be spawned).
    local: VecDeque<Wakeup<K>>,
    /// Reused across loop turns so that a turn (often one watch event) allocates nothing.
    outs: Vec<Output>,
    /// Reused for the notification taken for an idle handler (see `drain`).
    taken: Vec<Notification<K>>,
    /// The informer's name, shared by the watch errors handed to the hook.
    name: Arc<str>,
    /// The resourceVersion and sync state last published to readers.
    published_rv: String,
    published_synced: bool,
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Driver<K, R> {
    /// A driver for `shared`, fed by `cmd_rx` (commands from the handles) and the requests it
    /// performs through `transport`; `exited_rx` fails once every handler worker has exited.
    pub(crate) fn new(
        shared: Arc<Shared<K, R>>,
        transport: Arc<dyn Transport<K>>,
        cmd_rx: async_channel::Receiver<Cmd>,
        exited_rx: async_channel::Receiver<()>,
        watch_error: Option<WatchErrorHook>,
    ) -> Self {
        let (reply_tx, reply_rx) = async_channel::bounded(RESULTS_CAPACITY);
        let name: Arc<str> = Arc::from(shared.name.as_str());
        Driver {
            shared,
            transport,
            cmd_rx: Box::pin(cmd_rx),
            reply_tx,
            reply_rx: Box::pin(reply_rx),
            exited_rx,
            watch_error,
            inflight: None,
            timer: None,
            retry: None,
            deferred: false,
            backoff_until: None,
            local: VecDeque::new(),
            outs: Vec::new(),
            taken: Vec::with_capacity(1),
            name,
            published_rv: String::new(),
            published_synced: false,
        }
    }

    async fn next_wakeup(&mut self) -> Wakeup<K> {
        if let Some(w) = self.local.pop_front() {
            return w;
        }
        poll_fn(|cx| {
            if let Poll::Ready(Some(c)) = self.cmd_rx.as_mut().poll_next(cx) {
                return Poll::Ready(Wakeup::Cmd(c));
            }
            if let Poll::Ready(Some((id, r))) = self.reply_rx.as_mut().poll_next(cx) {
                return Poll::Ready(Wakeup::Reply(id, r));
            }
            if let Some((_, t)) = &mut self.timer {
                if t.as_mut().poll(cx).is_ready() {
                    self.timer = None;
                    return Poll::Ready(Wakeup::Timer);
                }
            }
            if let Some(r) = &mut self.retry {
                if r.as_mut().poll(cx).is_ready() {
                    self.retry = None;
                    return Poll::Ready(Wakeup::Cmd(Cmd::Wake));
                }
            }
            Poll::Pending
        })
        .await
    }

    fn try_wakeup(&mut self) -> Option<Wakeup<K>> {
        if let Some(w) = self.local.pop_front() {
            return Some(w);
        }
        if let Ok(c) = self.cmd_rx.try_recv() {
            return Some(Wakeup::Cmd(c));
        }
        self.reply_rx
            .try_recv()
            .ok()
            .map(|(id, r)| Wakeup::Reply(id, r))
    }

    /// Runs until the informer stops and every handler worker has exited.
    ///
    /// One turn: wait for a wakeup ([`next_wakeup`](Self::next_wakeup)); apply it and what
    /// else has arrived, under the lock, and publish ([`step`](Self::step)); act on the
    /// outputs outside the lock ([`report`](Self::report)); note a backoff; then either
    /// [`finish`](Self::finish) or re-arm the timer ([`arm_timer`](Self::arm_timer)) and wake
    /// whoever waits for a change.
    pub(crate) async fn run(mut self) {
        tracing::debug!(informer = %self.shared.name, "driver running");
        loop {
            let first = self.next_wakeup().await;
            let mut now = self.shared.now();
            let mut outs = std::mem::take(&mut self.outs);
            let mut stop = false;
            let (deadline, backoff) = match self.step(first, &mut now, &mut outs, &mut stop) {
                Ok(stepped) => {
                    self.schedule_publish(stepped.published);
                    (stepped.deadline, stepped.backoff)
                }
                Err(_) => {
                    self.stop_after_panic(&mut outs);
                    stop = true;
                    (None, None)
                }
            };
            for output in outs.drain(..) {
                match output {
                    // None are left: the step started them (or panicked, and `outs` was cleared).
                    Output::Request { id, request } => self.start_request(id, request),
                    Output::WatchError(f) => self.report(&f),
                }
            }
            self.outs = outs;
            self.note_backoff(backoff, now);
            if stop {
                self.finish().await;
                return;
            }
            self.arm_timer(deadline, now);
            self.shared.changed.notify(usize::MAX);
        }
    }

    /// The locked part of a turn: applies `first` and up to [`BATCH`] inputs that arrive
    /// meanwhile (`now` follows the clock), starts the requests they made, publishes the step
    /// to the readers' copies and hands the held notifications over. Watch errors are left in
    /// `outs` for after the lock.
    ///
    /// User code runs inside this step (transform, index functions). A panic there leaves the
    /// core or the readers' copy being written possibly half-updated: the caller stops the
    /// informer rather than go on with a cache that may be wrong, and says why. Readers keep
    /// the last published state.
    fn step(
        &mut self,
        first: Wakeup<K>,
        now: &mut Instant,
        outs: &mut Vec<Output>,
        stop: &mut bool,
    ) -> std::thread::Result<Stepped> {
        let shared = self.shared.clone();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut state = shared.state.write();
            let state = &mut *state;
            // Up to `BATCH` inputs, taking those that arrive while the step runs too (a
            // watch's 410 read while a loaded snapshot is applied).
            let mut next = Some(first);
            let mut applied = 0;
            while let Some(wakeup) = next {
                self.apply(state, wakeup, *now, stop);
                drain(state, outs, &mut self.taken);
                applied += 1;
                next = if applied < BATCH {
                    self.try_wakeup()
                } else {
                    None
                };
                if next.is_some() {
                    *now = self.shared.now();
                }
            }
            let spawned = self.start_requests(outs);
            let published = self.publish(state, spawned, *stop);
            if *stop {
                state.stop();
            }
            #[cfg(feature = "metrics")]
            for (id, sink) in &state.sinks {
                sink.stats.pending.set(state.core.pending(*id));
            }
            let deadline = state.core.poll_timeout();
            let backoff = state.core.backing_off_until().filter(|t| *t > *now);
            Stepped {
                deadline,
                backoff,
                published,
            }
        }))
    }

    /// Starts the requests among `outs` (removing them) and says whether any was.
    ///
    /// Requests go out before a large step (a first list, a relist) is published: publishing
    /// tens of thousands of objects takes milliseconds that the next list or watch need not
    /// wait for. Spawning the request is not enough, since its task runs only once this one
    /// yields (on tokio it waits in this worker's LIFO slot, which no other worker steals). So
    /// such a step is published at the driver's next turn, after a yield that lets the request
    /// be sent first.
    fn start_requests(&mut self, outs: &mut Vec<Output>) -> bool {
        let mut spawned = false;
        let mut i = 0;
        while i < outs.len() {
            if matches!(outs[i], Output::Request { .. }) {
                if let Output::Request { id, request } = outs.remove(i) {
                    self.start_request(id, request);
                    spawned = true;
                }
            } else {
                i += 1;
            }
        }
        spawned
    }

    /// Publishes the step to the readers' copies (at once when stopping, deferred once after
    /// a large step that started a request, otherwise if no reader holds the copy) and, once
    /// published, hands the held notifications over. Says whether it published.
    fn publish(&mut self, state: &mut State<K>, spawned: bool, stop: bool) -> bool {
        // Readers see the whole batch at once; its notifications go out only then.
        state.publisher.stage(&mut state.core);
        let published = if stop {
            // The last state readers keep: worth waiting for a straggling reader.
            state.publisher.publish();
            true
        } else if spawned && !self.deferred && state.publisher.staged() >= LARGE_STEP {
            // Once: the next turn publishes whatever it spawns.
            self.deferred = true;
            false
        } else {
            self.deferred = false;
            state.publisher.try_publish()
        };
        if published {
            self.note_published(state);
            let held = std::mem::take(&mut state.held);
            for (handler, notification, stamp) in held {
                hand_over(state, handler, notification, stamp);
            }
        }
        published
    }

    /// A step reached the readers: sets the objects gauge and, when their resourceVersion (or
    /// sync) moved, wakes the waits it satisfies and sets the resourceVersion gauge. The
    /// core's values are those just published: the publish staged them from it in this same
    /// step.
    fn note_published(&mut self, state: &State<K>) {
        self.shared
            .counters
            .store_objects
            .set(state.core.indexer().len());
        let rv = state.core.last_sync_resource_version();
        let synced = state.core.has_synced();
        if rv == self.published_rv && synced == self.published_synced {
            return;
        }
        self.published_rv.clear();
        self.published_rv.push_str(rv);
        self.published_synced = synced;
        self.shared.rv_waiters.published(rv, synced);
        if let Some(v) = crate::resource_version::parse(rv) {
            self.shared.counters.resource_version.set_f64(v as f64);
        }
    }

    /// After a step: a step not published (a reader held the copy, or it was deferred behind
    /// its requests) is published at the next turn, after a yield or a short sleep.
    fn schedule_publish(&mut self, published: bool) {
        if published {
            self.retry = None;
        } else if self.deferred {
            // Deferred (see `step`): published right after the yield.
            self.retry = Some(Box::pin(YieldNow(false)));
        } else if self.retry.is_none() {
            self.shared.counters.publish_retries.add(1);
            self.retry = Some(self.shared.rt.sleep(PUBLISH_RETRY));
        }
    }

    /// A transform or index function panicked in a step: the informer stops.
    fn stop_after_panic(&mut self, outs: &mut Vec<Output>) {
        tracing::error!(
            informer = %self.shared.name,
            "a transform or index function panicked: the informer stops"
        );
        outs.clear();
        // The cache may be half-updated: never write it as a snapshot.
        if let Some(file) = &self.shared.snapshot {
            file.poison();
        }
        self.shared.state.write().stop();
    }

    /// Counts and logs a backoff that has just begun.
    fn note_backoff(&mut self, backoff: Option<Instant>, now: Instant) {
        if backoff == self.backoff_until {
            return;
        }
        if let Some(until) = backoff {
            self.shared.counters.backoffs.add(1);
            tracing::info!(
                informer = %self.shared.name,
                delay = ?(until - now),
                "backing off before the next list/watch"
            );
        }
        self.backoff_until = backoff;
    }

    /// The informer stopped: abandons the request in flight and the timers, waits for every
    /// handler worker to exit, then says the informer finished.
    async fn finish(&mut self) {
        if let Some(request) = self.inflight.take() {
            request.abort();
        }
        self.timer = None;
        self.retry = None;
        self.shared.rv_waiters.stop();
        self.shared.changed.notify(usize::MAX);
        // Every worker holds a sender; recv fails once all of them exited.
        let _ = self.exited_rx.recv().await;
        tracing::info!(informer = %self.shared.name, "informer stopped");
        self.shared.finished.store(true, Ordering::Release);
        self.shared.changed.notify(usize::MAX);
    }

    /// The timer for the core's next deadline; kept when the deadline has not moved.
    fn arm_timer(&mut self, deadline: Option<Instant>, now: Instant) {
        match (deadline, &self.timer) {
            (None, _) => self.timer = None,
            (Some(d), Some((t, _))) if *t == d => {}
            (Some(d), _) => {
                let sleep = self.shared.rt.sleep(d - now);
                self.timer = Some((d, sleep));
            }
        }
    }

    fn apply(&mut self, state: &mut State<K>, wakeup: Wakeup<K>, now: Instant, stop: &mut bool) {
        let counters = &self.shared.counters;
        let core = &mut state.core;
        match wakeup {
            Wakeup::Cmd(Cmd::Wake) => {}
            Wakeup::Cmd(Cmd::Stop) => *stop = true,
            Wakeup::Cmd(Cmd::Relist) => {
                // The request in flight (the watch, at a quiet moment) fails as if the server
                // had answered 410: the reflector relists, as after any expired watch.
                if let Some(id) = core.in_flight() {
                    let status = informer_core::protocol::Status {
                        code: 410,
                        reason: "Expired".into(),
                        message: "consistency check: the cache diverged from the server; relisting"
                            .into(),
                        ..Default::default()
                    };
                    core.handle_input(now, id, Input::Failed(Failure::Expired(status)));
                }
            }
            Wakeup::Timer => core.handle_timeout(now),
            Wakeup::Reply(id, input) => {
                let applied = match &input {
                    Input::ListPage(page) => {
                        tracing::debug!(
                            informer = %self.shared.name,
                            items = page.items.len(),
                            resource_version = %page.resource_version,
                            "list page received"
                        );
                        page.items.len() as u64
                    }
                    Input::Event(
                        WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_),
                    ) => 1,
                    _ => 0,
                };
                counters.events_applied.add(applied);
                core.handle_input(now, id, input)
            }
        }
    }

    /// Counts, logs and hands a list/watch failure to the watch-error hook.
    fn report(&self, failure: &Failure) {
        let name = &self.shared.name;
        self.shared.counters.watch_error(failure);
        tracing::warn!(informer = %name, kind = failure.kind(), error = %failure, "list/watch failed");
        if let Some(hook) = &self.watch_error {
            let error = WatchError {
                informer: self.name.clone(),
                failure: failure.clone(),
            };
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&error)));
            if caught.is_err() {
                tracing::error!(informer = %name, "the watch-error hook panicked");
            }
        }
    }

    fn start_request(&mut self, id: RequestId, request: Request) {
        if let Some(previous) = self.inflight.take() {
            previous.abort();
        }
        let counters = &self.shared.counters;
        let name = &self.shared.name;
        match &request {
            Request::List(l) if l.continue_token.is_none() => {
                let earlier = counters.lists.add(1);
                if earlier > 0 {
                    counters.relists.add(1);
                }
                tracing::info!(
                    informer = %name,
                    resource_version = ?l.resource_version,
                    limit = ?l.limit,
                    relist = earlier > 0,
                    "list"
                );
            }
            Request::List(l) => {
                tracing::debug!(informer = %name, limit = ?l.limit, "list: next page")
            }
            Request::Watch(w) => {
                let earlier = counters.watches.add(1);
                if earlier > 0 {
                    counters.watch_restarts.add(1);
                }
                tracing::debug!(
                    informer = %name,
                    resource_version = %w.resource_version,
                    timeout_seconds = ?w.timeout_seconds,
                    "watch"
                );
            }
        }
        let (handle, registration) = AbortHandle::new_pair();
        let task = Abortable::new(
            perform(
                self.transport.clone(),
                self.shared.views.clone(),
                id,
                request,
                self.reply_tx.clone(),
            ),
            registration,
        );
        // Whatever the transport logs carries the informer's name.
        let span = tracing::debug_span!("informer", informer = %name);
        match self.shared.rt.spawn(Box::pin(
            async move {
                let _ = task.await;
            }
            .instrument(span),
        )) {
            Ok(()) => self.inflight = Some(handle),
            Err(e) => {
                tracing::error!(informer = %name, error = %e, "cannot spawn a request task");
                self.local.push_back(Wakeup::Reply(
                    id,
                    Input::Failed(Failure::other(e.to_string())),
                ));
            }
        }
    }
}

/// Drains the core's outputs after an input: requests and watch errors into `outs`, acted
/// upon after the lock is released; and each idle handler's next notification, held until
/// the step is published to the readers' copies (then handed over, under the lock, without
/// blocking). Taken after every input, as the core's loop asks: a handler that keeps up hears
/// of each change on its own, not coalesced with the ones that follow in the same step.
fn drain<K: Object + 'static>(
    state: &mut State<K>,
    outs: &mut Vec<Output>,
    taken: &mut Vec<Notification<K>>,
) {
    while let Some(output) = state.core.poll() {
        outs.push(output);
    }
    let State {
        core, held, sinks, ..
    } = state;
    for (&handler, sink) in sinks.iter_mut() {
        if core.poll_notifications(handler, 1, taken) > 0 {
            let stamp = sink.take_stamp();
            held.extend(taken.drain(..).map(|n| (handler, n, stamp)));
        } else if sink.behind_since.is_none()
            && sink.stats.latency.is_exported()
            && core.pending(handler) > 0
        {
            // Busy: what just arrived waits in the core from now on.
            sink.behind_since = Some(std::time::Instant::now());
        }
    }
}

/// The objects the cache holds, as the readers' copies have them: a lookup is one read of the
/// current copy, which never waits for the driver (nor the driver for it).
struct Cached<K>(Arc<Views<K>>);

impl<K: Object + Send + Sync + 'static> KnownObjects<K> for Cached<K> {
    fn known(&self, key: KeyRef<'_>, resource_version: &str) -> Option<Arc<K>> {
        self.0.read(|v| {
            let obj = v.indexer().get_ref(key)?;
            (obj.resource_version() == Some(resource_version)).then(|| obj.clone())
        })
    }

    fn is_empty(&self) -> bool {
        self.0.read(|v| v.indexer().is_empty())
    }
}

/// Performs one request and feeds its replies to the driver.
///
/// A list takes the objects the cache holds at the listed resourceVersion from the readers'
/// copies instead of decoding them again: most of a relist (or of the list after a warm
/// restart's snapshot was too old) is unchanged. The copies are looked up as the items arrive,
/// so a step not yet published when the list was sent is there by then; into an empty cache
/// (a first list) nothing is looked up.
async fn perform<K: Object + Send + Sync + 'static>(
    transport: Arc<dyn Transport<K>>,
    views: Arc<Views<K>>,
    id: RequestId,
    request: Request,
    tx: async_channel::Sender<(RequestId, Input<K>)>,
) {
    match request {
        Request::List(req) => {
            let r = match transport.list_known(&req, Arc::new(Cached(views))).await {
                Ok(page) => Input::ListPage(page),
                Err(f) => Input::Failed(f),
            };
            let _ = tx.send((id, r)).await;
        }
        Request::Watch(req) => match transport.watch(&req).await {
            Err(f) => {
                let _ = tx.send((id, Input::Failed(f))).await;
            }
            Ok(mut events) => {
                while let Some(e) = events.next().await {
                    if tx.send((id, Input::Event(e))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send((id, Input::StreamEnd)).await;
            }
        },
    }
}
