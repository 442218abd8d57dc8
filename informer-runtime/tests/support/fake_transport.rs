//! The one in-memory [`Transport`] of the runtime's tests: scripted list answers (pages with
//! their resourceVersion and continue token, failures, hangs), watch streams the test feeds
//! through channels, counted requests, the resourceVersions watches asked for, and per-call
//! hooks. It can also stand in front of a real transport ([`FakeTransport::forwarding`]) and
//! cut it off ([`FakeTransport::cut_off`]), as a network partition would.
//!
//! ```ignore
//! let (fake, tx) = FakeTransport::new().list_always(items, "10").fail_lists(2).watch_channel();
//! let inf = InformerBuilder::from_transport(rt, Arc::new(fake), "fake").build()?;
//! tx.send(WatchEvent::Added(obj)).await?;
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures_util::StreamExt;
use informer_core::protocol::{ListPage, ListRequest, WatchEvent, WatchRequest};
use informer_http::Transport;
use informer_http::transport::{BoxFuture, BoxStream};
use informer_runtime::Failure;

/// The sending end of a scripted watch stream.
pub type WatchSender<K> = async_channel::Sender<WatchEvent<K>>;

type ListFn<K> = Box<dyn Fn(&ListRequest) -> ListPage<K> + Send + Sync>;
type Hook<R> = Box<dyn Fn(&R) + Send + Sync>;

/// What lists answer.
enum Lists<K> {
    /// Never (they hang).
    Hang,
    /// The same page every time.
    Always(Vec<Arc<K>>, String),
    /// These answers in order, then hang.
    Script(VecDeque<Result<ListPage<K>, Failure>>),
    /// Whatever the function builds for each request.
    With(ListFn<K>),
    /// Whatever the wrapped transport answers.
    Forward(Arc<dyn Transport<K>>),
}

/// A `Transport` for tests; see the module docs. Built with the chained methods, then shared
/// (`Arc`) with the informer; the counters and recordings are read through the shared handle.
pub struct FakeTransport<K> {
    lists: Mutex<Lists<K>>,
    /// Lists fail (`ConnectionRefused("scripted")`) while this is above zero, counting down.
    fail_lists: AtomicUsize,
    hang_lists: bool,
    /// Each watch streams the next of these; once they are used up, watches hang.
    watches: Mutex<VecDeque<async_channel::Receiver<WatchEvent<K>>>>,
    forward_watches: Option<Arc<dyn Transport<K>>>,
    list_calls: AtomicUsize,
    watch_calls: AtomicUsize,
    watch_rvs: Mutex<Vec<String>>,
    on_list: Option<Hook<ListRequest>>,
    on_watch: Option<Hook<WatchRequest>>,
    gate: Arc<Gate>,
}

/// One page answering a list: `items` at `resource_version`, no continue token.
pub fn page<K>(items: Vec<Arc<K>>, resource_version: &str) -> ListPage<K> {
    ListPage {
        items,
        resource_version: resource_version.into(),
        continue_token: None,
        remaining_item_count: None,
    }
}

impl<K: Send + Sync + 'static> Default for FakeTransport<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Send + Sync + 'static> FakeTransport<K> {
    /// Lists and watches that never answer.
    pub fn new() -> Self {
        FakeTransport {
            lists: Mutex::new(Lists::Hang),
            fail_lists: AtomicUsize::new(0),
            hang_lists: false,
            watches: Mutex::default(),
            forward_watches: None,
            list_calls: AtomicUsize::new(0),
            watch_calls: AtomicUsize::new(0),
            watch_rvs: Mutex::default(),
            on_list: None,
            on_watch: None,
            gate: Arc::default(),
        }
    }

    /// Lists and watches go to `inner` (see [`cut_off`](Self::cut_off)).
    pub fn forwarding(inner: impl Transport<K> + 'static) -> Self {
        let inner: Arc<dyn Transport<K>> = Arc::new(inner);
        let mut t = Self::new();
        t.lists = Mutex::new(Lists::Forward(inner.clone()));
        t.forward_watches = Some(inner);
        t
    }

    /// Every list answers `items` at `resource_version`.
    pub fn list_always(mut self, items: Vec<Arc<K>>, resource_version: &str) -> Self {
        self.lists = Mutex::new(Lists::Always(items, resource_version.into()));
        self
    }

    /// Lists answer these pages in order (a page with a continue token is followed by the
    /// request for the next), then hang.
    pub fn list_pages(self, pages: impl IntoIterator<Item = ListPage<K>>) -> Self {
        self.list_script(pages.into_iter().map(Ok))
    }

    /// Lists answer these pages or failures in order, then hang.
    pub fn list_script(
        mut self,
        answers: impl IntoIterator<Item = Result<ListPage<K>, Failure>>,
    ) -> Self {
        self.lists = Mutex::new(Lists::Script(answers.into_iter().collect()));
        self
    }

    /// Each list answers what `f` builds for its request (fresh objects each time, say).
    pub fn list_with(
        mut self,
        f: impl Fn(&ListRequest) -> ListPage<K> + Send + Sync + 'static,
    ) -> Self {
        self.lists = Mutex::new(Lists::With(Box::new(f)));
        self
    }

    /// The next `n` lists fail with `Failure::ConnectionRefused("scripted")` before any
    /// answer above is given (`usize::MAX`: every list).
    pub fn fail_lists(self, n: usize) -> Self {
        self.fail_lists.store(n, Ordering::SeqCst);
        self
    }

    /// Lists never answer (checked before the failures).
    pub fn hang_lists(mut self) -> Self {
        self.hang_lists = true;
        self
    }

    /// The next watch not yet scripted streams what is sent through the returned sender
    /// (and ends when it is dropped); watches beyond the scripted ones hang.
    pub fn watch_channel(self) -> (Self, WatchSender<K>) {
        let (tx, rx) = async_channel::unbounded();
        self.watches.lock().unwrap().push_back(rx);
        (self, tx)
    }

    /// `n` scripted watches, in order (see [`watch_channel`](Self::watch_channel)).
    pub fn watch_channels(mut self, n: usize) -> (Self, Vec<WatchSender<K>>) {
        let mut senders = Vec::with_capacity(n);
        for _ in 0..n {
            let (t, tx) = self.watch_channel();
            self = t;
            senders.push(tx);
        }
        (self, senders)
    }

    /// Calls `f` with each list request, when the informer asks (before the answer).
    pub fn on_list(mut self, f: impl Fn(&ListRequest) + Send + Sync + 'static) -> Self {
        self.on_list = Some(Box::new(f));
        self
    }

    /// Calls `f` with each watch request, when the informer asks (before the answer).
    pub fn on_watch(mut self, f: impl Fn(&WatchRequest) + Send + Sync + 'static) -> Self {
        self.on_watch = Some(Box::new(f));
        self
    }

    /// Lists asked for so far.
    pub fn lists(&self) -> usize {
        self.list_calls.load(Ordering::SeqCst)
    }

    /// Watches asked for so far.
    pub fn watches(&self) -> usize {
        self.watch_calls.load(Ordering::SeqCst)
    }

    /// The resourceVersion of each watch asked for, in order.
    pub fn watch_resource_versions(&self) -> Vec<String> {
        self.watch_rvs.lock().unwrap().clone()
    }

    /// Cuts the informer off (`true`): lists and watches wait until it is reconnected, and the
    /// open watch streams end. `false` reconnects.
    pub fn cut_off(&self, cut: bool) {
        self.gate.set(cut);
    }
}

impl<K: Send + Sync + 'static> Transport<K> for FakeTransport<K> {
    fn list<'a>(&'a self, request: &'a ListRequest) -> BoxFuture<'a, Result<ListPage<K>, Failure>> {
        self.list_calls.fetch_add(1, Ordering::SeqCst);
        if let Some(f) = &self.on_list {
            f(request);
        }
        Box::pin(async move {
            self.gate.wait(false).await;
            if self.hang_lists {
                std::future::pending::<()>().await;
            }
            if self
                .fail_lists
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(Failure::ConnectionRefused("scripted".into()));
            }
            // The lock is released before anything is awaited.
            let (answer, forward) = match &mut *self.lists.lock().unwrap() {
                Lists::Hang => (None, None),
                Lists::Always(items, rv) => (Some(Ok(page(items.clone(), rv))), None),
                Lists::Script(answers) => (answers.pop_front(), None),
                Lists::With(f) => (Some(Ok(f(request))), None),
                Lists::Forward(inner) => (None, Some(inner.clone())),
            };
            if let Some(inner) = forward {
                return inner.list(request).await;
            }
            match answer {
                Some(a) => a,
                None => std::future::pending().await,
            }
        })
    }

    fn watch<'a>(
        &'a self,
        request: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<K>>, Failure>> {
        self.watch_calls.fetch_add(1, Ordering::SeqCst);
        self.watch_rvs
            .lock()
            .unwrap()
            .push(request.resource_version.clone());
        if let Some(f) = &self.on_watch {
            f(request);
        }
        Box::pin(async move {
            self.gate.wait(false).await;
            let events: BoxStream<'static, WatchEvent<K>> = match &self.forward_watches {
                Some(inner) => inner.watch(request).await?,
                None => {
                    let rx = self.watches.lock().unwrap().pop_front();
                    match rx {
                        Some(rx) => Box::pin(rx),
                        None => std::future::pending().await,
                    }
                }
            };
            // Cut off: the stream ends.
            let gate = self.gate.clone();
            let cut = async move { gate.wait(true).await };
            Ok(Box::pin(events.take_until(Box::pin(cut))) as BoxStream<'static, _>)
        })
    }
}

/// Whether the transport is cut off, and a wake-up for those waiting on a change.
#[derive(Default)]
struct Gate {
    closed: AtomicBool,
    changed: event_listener::Event,
}

impl Gate {
    fn set(&self, closed: bool) {
        self.closed.store(closed, Ordering::SeqCst);
        self.changed.notify(usize::MAX);
    }

    async fn wait(&self, closed: bool) {
        loop {
            let l = self.changed.listen();
            if self.closed.load(Ordering::SeqCst) == closed {
                return;
            }
            l.await;
        }
    }
}
