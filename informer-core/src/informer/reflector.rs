//! The Reflector: client-go's list-and-watch loop as a pure state machine.
//!
//! The Reflector decides which request to issue next and what to apply to the store; it never
//! performs a request, never reads a clock and never sleeps. Driving it (quinn-proto style):
//!
//! - inputs: [`Reflector::start`], then what the transport observed for the request last handed
//!   out, as one [`Input`] to [`handle_input`](Reflector::handle_input); and the timer:
//!   [`handle_timeout`](Reflector::handle_timeout).
//! - outputs: [`poll`](Reflector::poll) yields [`Output`]s — the next [`Request`] to perform,
//!   a [`StoreOp`] to apply, a [`Failure`] to report to the watch-error handler —, and
//!   [`poll_timeout`](Reflector::poll_timeout) the instant at which `handle_timeout` is due
//!   (the end of a backoff, or the watchdog of an open list or watch).
//!
//! After every input, drain [`poll`](Reflector::poll) until it returns `None`, then wait for
//! the next input or the deadline. The rule is checked: one input produces at most
//! [`MAX_OUTPUTS_PER_INPUT`] outputs, held in a fixed-size queue (`heapless`), and an input fed
//! while outputs are still pending is refused with [`Undrained`] instead of piling up requests
//! the caller has not seen.
//!
//! At most one request is in flight. Each request carries a [`RequestId`]; when the Reflector
//! hands out a new request, the previous one is abandoned (the runtime drops it) and late inputs
//! tagged with an older id are ignored, so a slow transport can never feed stale data.
//!
//! # What the transport feeds back
//!
//! - For a [`Request::List`]: exactly one [`Input::ListPage`] (one page; the Reflector asks for
//!   the next page itself) or [`Input::Failed`].
//! - For a [`Request::Watch`]: any number of [`Input::Event`], then exactly one of
//!   [`Input::StreamEnd`] (the server closed the stream, or the connection ended cleanly — EOF,
//!   reset) or [`Input::Failed`] (the request could not be made, or the stream broke with an
//!   error). A watch `ERROR` event is a [`WatchEvent::Error`]; the Reflector moves on at once,
//!   so whatever follows on that stream is ignored.
//! - A watch line that cannot be decoded must end the watch as a
//!   `WatchEvent::Error(Failure::Decode(..))`, never be skipped: skipping it and applying a
//!   later bookmark would move the informer past a change it never applied.
//! - Map failures to [`Failure`] faithfully: 410 → `Expired`, 429 → `TooManyRequests` (with
//!   `Retry-After`), ECONNREFUSED → `ConnectionRefused`, a rejected `sendInitialEvents` →
//!   `StreamingListUnsupported` (any other error also makes a streaming list fall back).
//!
//! # Rules (client-go `tools/cache/reflector.go`, v1.27+)
//!
//! - The first list asks for resourceVersion `"0"` (served from the watch cache); later relists
//!   ask for the last synced resourceVersion. A list that fails with 410 Expired/Gone or "too
//!   large resource version" is retried at once with resourceVersion `""` (a consistent read).
//! - Lists are paged with `limit` 500 and `continue` tokens, and applied as one
//!   [`StoreOp::Replace`] only once the last page is in. A continue token that expired mid-list
//!   restarts the list, unpaged, at the original resourceVersion (the pager's
//!   `FullListIfExpired`). Paging is off when listing at a specific resourceVersion other than
//!   `"0"` (so the watch cache can serve it), unless a page size was set explicitly or a list at
//!   `"0"` came back paginated (the server honours paging: its watch cache is off).
//! - Watches start at the list's resourceVersion, ask for bookmarks and carry `timeoutSeconds`
//!   drawn uniformly from `[min, 2 × min)`, `min` being `min_watch_timeout` raised to 5 min
//!   when lower (zero included), as in client-go (300–600 s by default). A bookmark
//!   advances the resourceVersion and applies nothing.
//! - A watch that ends normally is resumed from the last resourceVersion without a relist. A
//!   watch that ends within 1 s having delivered no object (bookmarks do not count: a server
//!   that ends every watch after one bookmark must not be re-watched in a hot loop) is a "very
//!   short watch" error. Unlike client-go, a watch that ends within 1 s having delivered objects
//!   is resumed after a delay (no relist, no failure), so a server that keeps closing watches at
//!   once costs a bounded request rate. That delay has its own level: 800 ms doubling per
//!   consecutive quick end (jittered, capped like the backoff), back to 800 ms once a watch
//!   lasts; it never inherits the failures' backoff, which after a fault storm is 30–60 s. A watch
//!   ERROR event (410 Expired among them) or a failed watch request leads, after a backoff, to a
//!   relist. Connection refused and 429 Too Many Requests back off (at least `Retry-After`) and
//!   re-watch without relisting.
//! - Backoff: client-go's `wait.NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`:
//!   800 ms, ×2 per failure, capped at 30 s, each delay stretched by a random factor in
//!   `[1, 2)`; back to 800 ms when the previous backoff began more than 2 min ago. As in
//!   client-go's `BackoffUntil`, every relist after the first goes through the backoff.
//! - Every failure (including the ones retried at once) is reported as a watch error
//!   ([`Output::Runtime`] with [`WatchError`](super::Output::WatchError)).
//! - Unlike client-go, a watch still open [`watch_deadline_grace`](ReflectorConfig::watch_deadline_grace)
//!   after its `timeoutSeconds` is presumed hung (a half-open connection): it is reported,
//!   abandoned (a new request replaces it) and re-opened from the last resourceVersion; a
//!   list call unanswered after [`list_deadline`](ReflectorConfig::list_deadline) fails.
//! - Warm restart ([`Reflector::resume_at`], not in client-go): the store was loaded from a
//!   snapshot, so the first request is a watch from the snapshot's resourceVersion. If that
//!   watch fails with 410 Expired or "too large resource version" before it delivered anything,
//!   the snapshot is older than the watch window: relist at once (no backoff: this is the
//!   expected path, not a failure loop), at the snapshot's resourceVersion like any relist (a
//!   410 on that list retries at once with a consistent read). Any other failure recovers as
//!   usual.
//! - Optional streaming list ([`ReflectorConfig::streaming_list`], client-go's `UseWatchList`):
//!   a watch with `sendInitialEvents=true` and `resourceVersionMatch=NotOlderThan`; its initial
//!   events are collected aside and applied as one [`StoreOp::Replace`] at the bookmark marked
//!   `k8s.io/initial-events-end`, after which the same stream goes on as the watch. A refusal
//!   (or any error other than 410, connection refused and 429) falls back to a paged list.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;

use crate::object::{Key, Object};
use crate::protocol::{
    Failure, Input, ListPage, ListRequest, Request, RequestId, ResourceVersionMatch, Selectors,
    Status, WatchEvent, WatchRequest,
};
use crate::rng::SplitMix64;
use crate::time::Instant;

#[cfg(test)]
mod tests;

/// The most outputs one input ([`Reflector::start`], [`Reflector::handle_input`],
/// [`Reflector::handle_timeout`]) produces: a failure report, a store change and a request at
/// most, with room to spare. The output queue has exactly this capacity.
pub const MAX_OUTPUTS_PER_INPUT: usize = 4;

/// An input was fed to a [`Reflector`] whose outputs from the previous input were not all
/// drained with [`Reflector::poll`]: the input was not applied, and is handed back. Drain, then
/// feed it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Undrained<I = ()> {
    /// The input that was not applied.
    pub input: I,
}

impl<I> core::fmt::Display for Undrained<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("the reflector's outputs were not drained before the next input")
    }
}

impl<I: core::fmt::Debug> core::error::Error for Undrained<I> {}

/// The shortest minimum watch timeout (client-go `defaultMinWatchTimeout`, 5 min): a
/// [`ReflectorConfig::min_watch_timeout`] below it is raised to it.
pub const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// client-go's default page size (`pager.defaultPageSize`).
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// Exponential backoff parameters (client-go `wait.NewExponentialBackoffManager`).
#[derive(Clone, Debug, PartialEq)]
pub struct BackoffConfig {
    /// The first delay (800 ms).
    pub initial: Duration,
    /// The largest un-jittered delay (30 s).
    pub cap: Duration,
    /// When the previous backoff began longer ago than this, start again from `initial` (2 min).
    pub reset_after: Duration,
    /// Growth factor per backoff (2.0).
    pub factor: f64,
    /// Each delay `d` becomes `d + d × jitter × U[0, 1)` (1.0: a random delay in `[d, 2d)`).
    pub jitter: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(800),
            cap: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
            factor: 2.0,
            jitter: 1.0,
        }
    }
}

/// How the Reflector lists and watches.
#[derive(Clone, Debug, PartialEq)]
pub struct ReflectorConfig {
    /// Label and field selectors for every list and watch.
    pub selectors: Selectors,
    /// An explicit page size (client-go `WatchListPageSize`). `None` (or 0): 500, and paging
    /// off for lists at a specific resourceVersion. `Some(n)`: always pages of `n`.
    pub page_size: Option<u32>,
    /// Use a streaming list (a watch with `sendInitialEvents`) instead of a paged list, falling
    /// back to a list when the server refuses (client-go `UseWatchList`).
    pub streaming_list: bool,
    /// Watch timeouts are drawn from `[min, 2 × min)`, where `min` is this value raised to
    /// [`MIN_WATCH_TIMEOUT`] (5 min) when lower, zero included (zero means "the default"), as
    /// client-go's `ReflectorOptions.MinWatchTimeout` is (CONFORMANCE 33). Default 5 min.
    pub min_watch_timeout: Duration,
    /// **For tests only** (not in client-go): when set, watch timeouts are drawn from
    /// `[d, 2 × d)` with this `d` (at least 1 s), bypassing the 5-minute floor of
    /// [`min_watch_timeout`](Self::min_watch_timeout), so a test can have watches end within
    /// seconds. A real informer must leave it `None`: short watches multiply the watch
    /// requests an API server has to serve. Default `None`.
    pub test_min_watch_timeout: Option<Duration>,
    /// A watch that ends sooner than this having delivered nothing is an error (1 s).
    pub very_short_watch: Duration,
    /// A watch still open this long after its `timeoutSeconds` is taken as hung (a half-open
    /// connection the server will never close): it is reported, abandoned and re-opened from
    /// the last resourceVersion. `None` waits forever, as client-go does. Default 60 s.
    pub watch_deadline_grace: Option<Duration>,
    /// A list call (one page) unanswered after this long is taken as failed (reported, then
    /// backoff and relist). kube-apiserver ends non-watch requests after its
    /// `--request-timeout` (60 s by default), so an answer later than that will not come.
    /// `None` waits forever. Default 90 s.
    pub list_deadline: Option<Duration>,
    /// Backoff parameters.
    pub backoff: BackoffConfig,
    /// Seed of the generator behind jitter and watch timeouts.
    pub seed: u64,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            selectors: Selectors::default(),
            page_size: None,
            streaming_list: false,
            min_watch_timeout: MIN_WATCH_TIMEOUT,
            test_min_watch_timeout: None,
            very_short_watch: Duration::from_secs(1),
            watch_deadline_grace: Some(Duration::from_secs(60)),
            list_deadline: Some(Duration::from_secs(90)),
            backoff: BackoffConfig::default(),
            seed: 0,
        }
    }
}

/// A change to apply to the store.
#[derive(Debug)]
pub enum StoreOp<K> {
    /// Replace the whole content (a complete list, all pages in, or the initial events of a
    /// streaming list) — client-go `store.Replace(items, resourceVersion)`.
    Replace {
        /// Every object of the list.
        items: Vec<Arc<K>>,
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// A watch `ADDED` event.
    Added(Arc<K>),
    /// A watch `MODIFIED` event.
    Modified(Arc<K>),
    /// A watch `DELETED` event (the object's last state).
    Deleted(Arc<K>),
}

/// What the Reflector asks of its driver: what the informer itself hands its runtime, as is
/// (a request to perform, a watch error), or a change to apply to the store.
#[derive(Debug)]
pub enum Output<K> {
    /// For the runtime: [`Request`](super::Output::Request) (perform it and feed its results
    /// back tagged with its id; any request handed out earlier is abandoned) or
    /// [`WatchError`](super::Output::WatchError) (a list or watch failed, for the watch-error
    /// handler; the Reflector has already decided how to recover).
    Runtime(super::Output),
    /// Apply this to the store.
    Store(StoreOp<K>),
}

/// What to do when a backoff expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    /// List (or streaming-list) and watch again.
    Sync,
    /// Watch again from the last synced resourceVersion.
    Watch,
}

struct Listing<K> {
    id: RequestId,
    deadline: Option<Instant>,
    /// The resourceVersion the list was started with (`""`: consistent read).
    rv: String,
    limit: Option<u32>,
    items: Vec<Arc<K>>,
    /// The list's resourceVersion, from the first page.
    list_rv: Option<String>,
    /// Whether the next page request uses a continue token (we are past page one).
    continuing: bool,
    paginated: bool,
    /// The pager already fell back to a full list after an expired continue token.
    full_list_done: bool,
    /// Already retried with resourceVersion "" after 410 / too large.
    consistent_retry_done: bool,
}

struct Streaming<K> {
    id: RequestId,
    started: Instant,
    deadline: Option<Instant>,
    events: u64,
    items: BTreeMap<Key, Arc<K>>,
    rv: String,
    /// Asked with resourceVersion "" (a 410 then cannot be fixed by retrying).
    consistent: bool,
}

struct Watching {
    id: RequestId,
    started: Instant,
    deadline: Option<Instant>,
    events: u64,
}

enum Phase<K> {
    Idle,
    Listing(Listing<K>),
    Streaming(Streaming<K>),
    Watching(Watching),
    Waiting { until: Instant, then: After },
    Stopped,
}

/// client-go's `exponentialBackoffManagerImpl` + `wait.Backoff.Step`.
#[derive(Clone, Debug)]
struct Backoff {
    cfg: BackoffConfig,
    current: Duration,
    capped: bool,
    last_start: Option<Instant>,
}

fn mul_duration(d: Duration, f: f64) -> Duration {
    let ns = d.as_nanos() as f64 * f;
    if ns.is_finite() && ns >= 0.0 {
        // `as` saturates at u64::MAX.
        Duration::from_nanos(ns as u64)
    } else {
        d
    }
}

impl Backoff {
    fn new(cfg: BackoffConfig) -> Self {
        Backoff {
            current: cfg.initial,
            cfg,
            capped: false,
            last_start: None,
        }
    }

    fn next(&mut self, now: Instant, rng: &mut SplitMix64) -> Duration {
        let reset = match self.last_start {
            None => true,
            Some(s) => now - s > self.cfg.reset_after,
        };
        if reset {
            self.current = self.cfg.initial;
            self.capped = false;
        }
        self.last_start = Some(now);
        let d = self.current;
        if !self.capped {
            let n = mul_duration(self.current, self.cfg.factor);
            if n > self.cfg.cap {
                self.current = self.cfg.cap;
                self.capped = true;
            } else {
                self.current = n;
            }
        }
        if self.cfg.jitter > 0.0 {
            d.saturating_add(mul_duration(d, self.cfg.jitter * rng.next_f64()))
        } else {
            d
        }
    }
}

fn resource_version_of<K: Object>(obj: &K) -> Option<&str> {
    obj.resource_version().filter(|rv| !rv.is_empty())
}

/// The Reflector state machine. See the [module documentation](self) for the rules.
pub struct Reflector<K> {
    config: ReflectorConfig,
    rng: SplitMix64,
    backoff: Backoff,
    /// The delay before re-watching after a watch that ended quickly having delivered objects
    /// (no failure): its own level, so that it never inherits the failures' level (up to 60 s
    /// after a storm). Back to `initial` once a watch lasts.
    short_watch_backoff: Backoff,
    /// 429s with `Retry-After` retried at the server's word since the last success (client-go's
    /// REST client retries them itself, up to [`MAX_THROTTLED_RETRIES`], before the reflector
    /// sees a failure).
    throttled_retries: u8,
    phase: Phase<K>,
    next_id: u64,
    last_sync_rv: String,
    last_sync_rv_unavailable: bool,
    paginated_result: bool,
    /// Set once a streaming list ended without its initial-events-end bookmark: the server
    /// ignores `sendInitialEvents` (Kubernetes before 1.27 does, silently), so every later sync
    /// lists instead.
    streaming_unsupported: bool,
    /// Resuming from a snapshot: start with a watch, and while that first watch has delivered
    /// nothing, a 410 relists at once (the snapshot is older than the compaction window).
    resuming: bool,
    /// Bounded by the drain rule (see [`MAX_OUTPUTS_PER_INPUT`]).
    outputs: heapless::Deque<Output<K>, MAX_OUTPUTS_PER_INPUT>,
}

impl<K> core::fmt::Debug for Reflector<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let phase = match &self.phase {
            Phase::Idle => "idle",
            Phase::Listing(_) => "listing",
            Phase::Streaming(_) => "streaming",
            Phase::Watching(_) => "watching",
            Phase::Waiting { .. } => "waiting",
            Phase::Stopped => "stopped",
        };
        f.debug_struct("Reflector")
            .field("phase", &phase)
            .field("last_sync_resource_version", &self.last_sync_rv)
            .field("pending_outputs", &self.outputs.len())
            .finish()
    }
}

impl<K: Object> Reflector<K> {
    /// A Reflector that has not started yet.
    pub fn new(config: ReflectorConfig) -> Self {
        Reflector {
            rng: SplitMix64::new(config.seed),
            backoff: Backoff::new(config.backoff.clone()),
            short_watch_backoff: Backoff::new(config.backoff.clone()),
            throttled_retries: 0,
            config,
            phase: Phase::Idle,
            next_id: 0,
            last_sync_rv: String::new(),
            last_sync_rv_unavailable: false,
            streaming_unsupported: false,
            paginated_result: false,
            resuming: false,
            outputs: heapless::Deque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ReflectorConfig {
        &self.config
    }

    /// The resourceVersion of the last list or event applied (client-go
    /// `LastSyncResourceVersion`); empty before the first list.
    pub fn last_sync_resource_version(&self) -> &str {
        &self.last_sync_rv
    }

    /// Whether [`start`](Self::start) was called (and [`stop`](Self::stop) was not).
    pub fn is_running(&self) -> bool {
        !matches!(self.phase, Phase::Idle | Phase::Stopped)
    }

    /// When the backoff in progress ends (the next list or watch is then issued), `None` when
    /// not backing off.
    pub fn backing_off_until(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Waiting { until, .. } => Some(*until),
            _ => None,
        }
    }

    /// Whether a watch is open and nothing else is under way (no list, no backoff): the quiet
    /// moment at which the cache is the state at
    /// [`last_sync_resource_version`](Self::last_sync_resource_version).
    pub fn is_watching(&self) -> bool {
        matches!(self.phase, Phase::Watching(_))
    }

    /// The id of the request in flight, if any.
    pub fn in_flight(&self) -> Option<RequestId> {
        match &self.phase {
            Phase::Listing(l) => Some(l.id),
            Phase::Streaming(s) => Some(s.id),
            Phase::Watching(w) => Some(w.id),
            _ => None,
        }
    }

    /// Starts listing and watching. Does nothing when already started or stopped.
    pub fn start(&mut self, now: Instant) -> Result<(), Undrained> {
        self.check_drained(())?;
        if matches!(self.phase, Phase::Idle) {
            if self.resuming {
                self.begin_watch(now);
            } else {
                self.begin_sync(now);
            }
        }
        Ok(())
    }

    /// Before [`start`](Self::start): the store already holds the state at `resource_version`
    /// (loaded from a snapshot), so start with a watch from there instead of a list. A 410 (or
    /// "too large resource version") on that first watch relists at once, without a backoff. Does nothing once started or when `resource_version` is empty.
    pub fn resume_at(&mut self, resource_version: String) {
        if matches!(self.phase, Phase::Idle) && !resource_version.is_empty() {
            self.last_sync_rv = resource_version;
            self.resuming = true;
        }
    }

    /// Gives up a resume ([`resume_at`](Self::resume_at)) after start: the snapshot turned
    /// out unusable, and with it the resourceVersion it gave. Whatever is in flight is
    /// abandoned and the Reflector lists at once (no backoff, even if one was under way) with
    /// a consistent read (resourceVersion `""`), which asks nothing of that resourceVersion:
    /// [`last_sync_resource_version`](Self::last_sync_resource_version) keeps its value until
    /// the list's replaces it, never going back. Does nothing before start or once stopped.
    pub fn relist_from_scratch(&mut self, now: Instant) -> Result<(), Undrained> {
        self.check_drained(())?;
        if matches!(self.phase, Phase::Idle | Phase::Stopped) {
            return Ok(());
        }
        self.resuming = false;
        self.last_sync_rv_unavailable = true;
        self.begin_sync(now);
        Ok(())
    }

    /// Lists and watches with `selectors` from now on (a label selector or a server-side
    /// shard selector that changes at run time: a sharded member's ranges). Returns whether they
    /// changed. If they did while a list or watch is in flight, it is abandoned and the
    /// Reflector lists at once with the new selectors (at the last synced resourceVersion, as
    /// any relist): the list's replace drops what no longer matches and adds what now does.
    /// During a backoff, or before start, the next request simply carries them.
    pub fn set_selectors(&mut self, selectors: Selectors, now: Instant) -> Result<bool, Undrained> {
        self.check_drained(())?;
        if self.config.selectors == selectors {
            return Ok(false);
        }
        self.config.selectors = selectors;
        if matches!(
            self.phase,
            Phase::Listing(_) | Phase::Streaming(_) | Phase::Watching(_)
        ) {
            self.begin_sync(now);
        }
        Ok(true)
    }

    /// Refuses an input while outputs are pending (the drain rule).
    fn check_drained<I>(&self, input: I) -> Result<I, Undrained<I>> {
        if self.outputs.is_empty() {
            Ok(input)
        } else {
            Err(Undrained { input })
        }
    }

    /// Queues an output. The drain rule and [`MAX_OUTPUTS_PER_INPUT`] make room certain
    /// (checked by the tests and the simulation, where a miss fails loudly).
    fn push(&mut self, output: Output<K>) {
        let full = self.outputs.push_back(output).is_err();
        debug_assert!(
            !full,
            "more than MAX_OUTPUTS_PER_INPUT outputs for one input"
        );
    }

    /// Stops: the request in flight is abandoned and no new one is issued.
    pub fn stop(&mut self) {
        self.phase = Phase::Stopped;
    }

    /// The next output, or `None` when there is nothing to do until the next input.
    #[must_use = "outputs must be drained after every input"]
    pub fn poll(&mut self) -> Option<Output<K>> {
        self.outputs.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: the end of a backoff, or the
    /// watchdog of the list call or watch in flight.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Waiting { until, .. } => Some(*until),
            Phase::Watching(w) => w.deadline,
            Phase::Streaming(s) => s.deadline,
            Phase::Listing(l) => l.deadline,
            _ => None,
        }
    }

    /// The clock reached `now`: a backoff that has expired ends and the next request is issued;
    /// a watch open well past its timeout is abandoned and re-opened.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Undrained> {
        self.check_drained(())?;
        match self.phase {
            Phase::Waiting { until, then } if now >= until => match then {
                After::Sync => self.begin_sync(now),
                After::Watch => self.begin_watch(now),
            },
            Phase::Watching(Watching {
                id,
                deadline: Some(d),
                ..
            })
            | Phase::Streaming(Streaming {
                id,
                deadline: Some(d),
                ..
            }) if now >= d => {
                self.report(Failure::HungWatch);
                // As if the server had closed it.
                self.stream_end(now, id);
            }
            Phase::Listing(Listing {
                deadline: Some(d), ..
            }) if now >= d => self.list_failed(now, Failure::ListTimeout),
            _ => {}
        }
        Ok(())
    }

    /// What the transport observed for request `id`. Inputs for a request that is no longer
    /// the one in flight are ignored.
    pub fn handle_input(
        &mut self,
        now: Instant,
        id: RequestId,
        input: Input<K>,
    ) -> Result<(), Undrained<Input<K>>> {
        match self.check_drained(input)? {
            Input::ListPage(page) => self.list_page(now, id, page),
            Input::Event(event) => self.watch_event(now, id, event),
            Input::StreamEnd => self.stream_end(now, id),
            Input::Failed(failure) => self.failed(now, id, failure),
        }
        Ok(())
    }

    fn list_page(&mut self, now: Instant, id: RequestId, page: ListPage<K>) {
        let Phase::Listing(listing) = &mut self.phase else {
            return;
        };
        if listing.id != id {
            return;
        }
        self.throttled_retries = 0;
        let ListPage {
            items,
            resource_version,
            continue_token,
            ..
        } = page;
        let continue_token = continue_token.filter(|c| !c.is_empty());
        if listing.list_rv.is_none() {
            listing.list_rv = Some(resource_version);
        }
        if continue_token.is_some() {
            listing.paginated = true;
        }
        listing.items.extend(items);
        if let Some(token) = continue_token {
            listing.continuing = true;
            let request = Request::List(ListRequest {
                resource_version: None,
                resource_version_match: None,
                limit: listing.limit,
                continue_token: Some(token),
                selectors: self.config.selectors.clone(),
            });
            let id = self.issue(request);
            let deadline = self.config.list_deadline.map(|d| now + d);
            if let Phase::Listing(listing) = &mut self.phase {
                listing.id = id;
                listing.deadline = deadline;
            }
            return;
        }
        // Last page: the list is complete.
        let Phase::Listing(listing) = core::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        if listing.rv == "0" && listing.paginated {
            self.paginated_result = true;
        }
        let rv = listing.list_rv.unwrap_or_default();
        self.last_sync_rv_unavailable = false;
        self.last_sync_rv = rv.clone();
        self.push(Output::Store(StoreOp::Replace {
            items: listing.items,
            resource_version: rv,
        }));
        self.begin_watch(now);
    }

    fn watch_event(&mut self, now: Instant, id: RequestId, event: WatchEvent<K>) {
        // Only objects count as progress: a watch that delivers nothing but bookmarks and ends
        // at once is a very short watch.
        let object = matches!(
            event,
            WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_)
        );
        let streaming = match &mut self.phase {
            Phase::Watching(w) if w.id == id => {
                w.events = w.events.saturating_add(u64::from(object));
                false
            }
            Phase::Streaming(s) if s.id == id => {
                s.events = s.events.saturating_add(u64::from(object));
                true
            }
            _ => return,
        };
        if streaming {
            self.stream_event(now, event);
            return;
        }
        if !matches!(event, WatchEvent::Error(_)) {
            self.resuming = false;
            self.throttled_retries = 0;
        }
        match event {
            WatchEvent::Added(obj) => {
                self.note_rv(&*obj);
                self.push(Output::Store(StoreOp::Added(obj)));
            }
            WatchEvent::Modified(obj) => {
                self.note_rv(&*obj);
                self.push(Output::Store(StoreOp::Modified(obj)));
            }
            WatchEvent::Deleted(obj) => {
                self.note_rv(&*obj);
                self.push(Output::Store(StoreOp::Deleted(obj)));
            }
            WatchEvent::Bookmark {
                resource_version, ..
            } => {
                if !resource_version.is_empty() {
                    self.last_sync_rv = resource_version;
                }
            }
            WatchEvent::Error(failure) => self.watch_failed(now, failure),
        }
    }

    fn stream_event(&mut self, now: Instant, event: WatchEvent<K>) {
        let Phase::Streaming(s) = &mut self.phase else {
            return;
        };
        match event {
            WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                if let Some(rv) = resource_version_of(&*obj) {
                    s.rv.clear();
                    s.rv.push_str(rv);
                }
                s.items.insert(Key::of(&*obj), obj);
            }
            WatchEvent::Deleted(obj) => {
                if let Some(rv) = resource_version_of(&*obj) {
                    s.rv.clear();
                    s.rv.push_str(rv);
                }
                s.items.remove(&Key::of(&*obj));
            }
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                if !resource_version.is_empty() {
                    s.rv = resource_version;
                }
                if initial_events_end {
                    self.streaming_done();
                }
            }
            WatchEvent::Error(failure) => self.stream_failed(now, failure),
        }
    }

    /// The stream of request `id` ended without an error (the server closed the watch, e.g. at
    /// its timeout, or the connection dropped cleanly).
    fn stream_end(&mut self, now: Instant, id: RequestId) {
        if matches!(&self.phase, Phase::Watching(w) if w.id == id) {
            self.resuming = false;
        }
        let short = |started: Instant| now - started < self.config.very_short_watch;
        match &self.phase {
            Phase::Watching(w) if w.id == id => {
                if short(w.started) && w.events == 0 {
                    self.report(Failure::VeryShortWatch);
                    self.back_off(now, None, After::Sync);
                } else if short(w.started) {
                    // It delivered objects, so the resourceVersion moved on and no relist is
                    // needed; but a server that keeps closing watches at once must not get a
                    // new one per event as fast as it can answer. Not a failure: the delay
                    // grows with consecutive quick ends only, never from the failures' level.
                    let delay = self.short_watch_backoff.next(now, &mut self.rng);
                    self.phase = Phase::Waiting {
                        until: now + delay,
                        then: After::Watch,
                    };
                } else {
                    self.short_watch_backoff = Backoff::new(self.config.backoff.clone());
                    self.begin_watch(now);
                }
            }
            Phase::Streaming(s) if s.id == id => {
                if short(s.started) && s.events == 0 {
                    // Not retriable for a streaming list: fall back to a list.
                    self.report(Failure::VeryShortWatch);
                } else {
                    // The stream ended without the initial-events-end bookmark. client-go
                    // streams again, which loops forever against a server that ignores
                    // `sendInitialEvents` (before 1.27): list instead, from now on.
                    self.report(Failure::StreamingListIgnored);
                    self.streaming_unsupported = true;
                }
                self.begin_list(now);
            }
            Phase::Listing(l) if l.id == id => {
                self.failed(now, id, Failure::other("list response ended early"));
            }
            _ => {}
        }
    }

    /// Request `id` failed (it could not be performed, or its stream broke with an error).
    fn failed(&mut self, now: Instant, id: RequestId, failure: Failure) {
        match &self.phase {
            Phase::Watching(w) if w.id == id => self.watch_failed(now, failure),
            Phase::Streaming(s) if s.id == id => self.stream_failed(now, failure),
            Phase::Listing(l) if l.id == id => self.list_failed(now, failure),
            _ => {}
        }
    }

    // ---- internals ----

    fn note_rv(&mut self, obj: &K) {
        if let Some(rv) = resource_version_of(obj) {
            if rv != self.last_sync_rv {
                // Reuses the buffer: every watch event moves the resourceVersion.
                self.last_sync_rv.clear();
                self.last_sync_rv.push_str(rv);
            }
        }
    }

    fn issue(&mut self, request: Request) -> RequestId {
        self.next_id = self.next_id.wrapping_add(1);
        let id = RequestId(self.next_id);
        self.push(Output::Runtime(super::Output::Request { id, request }));
        id
    }

    fn report(&mut self, failure: Failure) {
        self.push(Output::Runtime(super::Output::WatchError(failure)));
    }

    /// client-go `relistResourceVersion`.
    fn relist_rv(&self) -> String {
        if self.last_sync_rv_unavailable {
            String::new()
        } else if self.last_sync_rv.is_empty() {
            String::from("0")
        } else {
            self.last_sync_rv.clone()
        }
    }

    fn watch_deadline(&self, now: Instant, timeout_seconds: u32) -> Option<Instant> {
        self.config
            .watch_deadline_grace
            .map(|grace| now + Duration::from_secs(u64::from(timeout_seconds)) + grace)
    }

    /// A watch's `timeoutSeconds`: drawn from `[min, 2 × min)` (CONFORMANCE 20, 28).
    fn watch_timeout_seconds(&mut self) -> u32 {
        let min = match self.config.test_min_watch_timeout {
            Some(d) => d.as_secs().max(1),
            None => self
                .config
                .min_watch_timeout
                .max(MIN_WATCH_TIMEOUT)
                .as_secs(),
        };
        let secs = min.saturating_add(self.rng.below(min));
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    fn begin_sync(&mut self, now: Instant) {
        if self.config.streaming_list && !self.streaming_unsupported {
            self.begin_stream(now);
        } else {
            self.begin_list(now);
        }
    }

    fn begin_list(&mut self, now: Instant) {
        let rv = self.relist_rv();
        let limit = match self.config.page_size.filter(|&n| n > 0) {
            Some(n) => Some(n),
            None if self.paginated_result => Some(DEFAULT_PAGE_SIZE),
            None if !rv.is_empty() && rv != "0" => None,
            None => Some(DEFAULT_PAGE_SIZE),
        };
        self.start_pager(now, rv, limit, false, false);
    }

    /// One `pager.List` call: the first page at `rv`.
    fn start_pager(
        &mut self,
        now: Instant,
        rv: String,
        limit: Option<u32>,
        full_list_done: bool,
        retry: bool,
    ) {
        let request = Request::List(ListRequest {
            resource_version: if rv.is_empty() {
                None
            } else {
                Some(rv.clone())
            },
            resource_version_match: None,
            limit,
            continue_token: None,
            selectors: self.config.selectors.clone(),
        });
        let id = self.issue(request);
        self.phase = Phase::Listing(Listing {
            id,
            deadline: self.config.list_deadline.map(|d| now + d),
            rv,
            limit,
            items: Vec::new(),
            list_rv: None,
            continuing: false,
            paginated: false,
            full_list_done,
            consistent_retry_done: retry,
        });
    }

    fn list_failed(&mut self, now: Instant, failure: Failure) {
        let Phase::Listing(listing) = core::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let expired = matches!(failure, Failure::Expired(_));
        let too_large = matches!(failure, Failure::TooLargeResourceVersion(_));
        let retry_after = retry_after(&failure);
        self.report(failure);
        if expired && listing.continuing && !listing.full_list_done {
            // pager FullListIfExpired: the continue token expired; list everything at once at
            // the original resourceVersion.
            self.start_pager(now, listing.rv, None, true, listing.consistent_retry_done);
        } else if (expired || too_large) && !listing.consistent_retry_done {
            self.last_sync_rv_unavailable = true;
            let rv = self.relist_rv();
            self.start_pager(now, rv, listing.limit, false, true);
        } else {
            self.back_off(now, retry_after, After::Sync);
        }
    }

    fn begin_watch(&mut self, now: Instant) {
        let timeout = self.watch_timeout_seconds();
        let request = Request::Watch(WatchRequest {
            resource_version: self.last_sync_rv.clone(),
            resource_version_match: None,
            allow_watch_bookmarks: true,
            send_initial_events: false,
            timeout_seconds: Some(timeout),
            selectors: self.config.selectors.clone(),
        });
        let id = self.issue(request);
        let deadline = self.watch_deadline(now, timeout);
        self.phase = Phase::Watching(Watching {
            id,
            started: now,
            deadline,
            events: 0,
        });
    }

    fn watch_failed(&mut self, now: Instant, failure: Failure) {
        if core::mem::take(&mut self.resuming)
            && matches!(
                failure,
                Failure::Expired(_) | Failure::TooLargeResourceVersion(_)
            )
        {
            // The snapshot is older than the watch window: list now, and let the Replace work
            // out what changed. At the snapshot's resourceVersion (not older than it, so
            // nothing goes back in time; the watch cache serves it), falling back at once to a
            // consistent read if that is gone too (no watch cache, etcd compacted).
            self.report(failure);
            self.begin_sync(now);
            return;
        }
        let then = match &failure {
            Failure::ConnectionRefused(_) | Failure::TooManyRequests(_) => After::Watch,
            _ => After::Sync,
        };
        let retry_after = retry_after(&failure);
        self.report(failure);
        self.back_off(now, retry_after, then);
    }

    /// client-go `rewatchResourceVersion`.
    fn rewatch_rv(&self) -> String {
        if self.last_sync_rv_unavailable {
            String::new()
        } else {
            self.last_sync_rv.clone()
        }
    }

    fn begin_stream(&mut self, now: Instant) {
        let rv = self.rewatch_rv();
        let timeout = self.watch_timeout_seconds();
        let consistent = rv.is_empty();
        let request = Request::Watch(WatchRequest {
            resource_version: rv,
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            allow_watch_bookmarks: true,
            send_initial_events: true,
            timeout_seconds: Some(timeout),
            selectors: self.config.selectors.clone(),
        });
        let id = self.issue(request);
        let deadline = self.watch_deadline(now, timeout);
        self.phase = Phase::Streaming(Streaming {
            id,
            started: now,
            deadline,
            events: 0,
            items: BTreeMap::new(),
            rv: String::new(),
            consistent,
        });
    }

    fn streaming_done(&mut self) {
        let Phase::Streaming(s) = core::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        self.last_sync_rv_unavailable = false;
        self.last_sync_rv = s.rv.clone();
        self.push(Output::Store(StoreOp::Replace {
            items: s.items.into_values().collect(),
            resource_version: s.rv,
        }));
        // The same stream goes on as the watch.
        self.phase = Phase::Watching(Watching {
            id: s.id,
            started: s.started,
            deadline: s.deadline,
            events: s.events,
        });
    }

    fn stream_failed(&mut self, now: Instant, failure: Failure) {
        let consistent = matches!(&self.phase, Phase::Streaming(s) if s.consistent);
        let retry_after = retry_after(&failure);
        match &failure {
            Failure::ConnectionRefused(_) | Failure::TooManyRequests(_) => {
                self.report(failure);
                self.back_off(now, retry_after, After::Sync);
            }
            Failure::Expired(_) | Failure::TooLargeResourceVersion(_) if !consistent => {
                self.report(failure);
                self.last_sync_rv_unavailable = true;
                self.begin_stream(now);
            }
            _ => {
                // Refused (or broken): fall back to list + watch, "because making progress is
                // better than deadlocking".
                self.report(failure);
                self.begin_list(now);
            }
        }
    }

    fn back_off(&mut self, now: Instant, retry_after: Option<Duration>, then: After) {
        let delay = match retry_after {
            // The server said when to come back (a 429 from its max-in-flight or priority and
            // fairness filter says 1 s): come back then, without raising the failures' backoff
            // level, as client-go's REST client does for up to 10 such answers in a row.
            Some(after) if self.throttled_retries < MAX_THROTTLED_RETRIES => {
                self.throttled_retries += 1;
                after
            }
            // Past that, the backoff, and never sooner than the server asked.
            at_least => {
                let delay = self.backoff.next(now, &mut self.rng);
                at_least.map_or(delay, |min| delay.max(min))
            }
        };
        self.phase = Phase::Waiting {
            until: now + delay,
            then,
        };
    }
}

/// How many 429s with `Retry-After` in a row are retried at the server's word (client-go's
/// REST client: `maxRetries` 10) before the backoff applies again.
pub const MAX_THROTTLED_RETRIES: u8 = 10;

fn retry_after(failure: &Failure) -> Option<Duration> {
    match failure {
        Failure::TooManyRequests(Status { retry_after, .. }) => *retry_after,
        _ => None,
    }
}
