//! Counters a user can read ([`Metrics`]), and, with the `metrics` feature, the same counters
//! published through the [`metrics`](https://docs.rs/metrics) facade for whatever exporter the
//! application installed (Prometheus, StatsD, ...):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `informer_events_applied_total` | `informer` | objects fed to the cache (list items and watch events) |
//! | `informer_lists_total` | `informer` | full lists started |
//! | `informer_relists_total` | `informer` | full lists after the first |
//! | `informer_watches_total` | `informer` | watches opened |
//! | `informer_watch_restarts_total` | `informer` | watches after the first |
//! | `informer_watch_errors_total` | `informer`, `kind` | list/watch failures by [`Failure::kind`] |
//! | `informer_backoffs_total` | `informer` | backoffs entered |
//! | `informer_consistency_checks_total` | `informer` | consistency checks run (when switched on) |
//! | `informer_divergences_total` | `informer` | cache/server divergences they found |
//! | `informer_handler_delivered_total` | `informer`, `handler` | notifications a handler finished |
//! | `informer_handler_panics_total` | `informer`, `handler` | panics caught in a handler |
//! | `informer_handler_pending` (gauge) | `informer`, `handler` | notifications pending for it (its queue depth, at most one per key) |
//! | `informer_handler_latency_seconds` (histogram) | `informer`, `handler` | from the event's arrival at the informer to the handler done with it |
//! | `informer_last_sync_resource_version` (gauge) | `informer` | the resourceVersion readers see, when it is a number |
//! | `informer_store_objects` (gauge) | `informer` | objects in the cache readers see (a sharded member's share, say) |
//! | `informer_publish_retries_total` | `informer` | publishes retried because a reader held the copy |
//!
//! `informer` is the informer's [name](crate::Informer::name); `handler` its
//! [`HandlerId::index`](informer_core::informer::HandlerId::index).
//!
//! The handles are registered once per informer and handler, so the event path only bumps an
//! atomic (and the exporter's own counter) and allocates nothing.
//!
//! The latency of a notification is measured from the step that applied the event (its
//! arrival at the informer) to the return of the handler's method (or the event stream's
//! consumer asking for the next). For a handler that keeps up that is exact. For a handler
//! that fell behind, whose pending notifications are coalesced per key, it is measured from
//! the step at which it fell behind (its oldest pending change), so it is an upper bound for
//! the notifications that arrived later. A resourceVersion above 2^53 loses precision in the
//! gauge (a metric is an `f64`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use informer_core::protocol::Failure;

#[cfg(feature = "metrics")]
fn to_labels(labels: &[(&'static str, String)]) -> Vec<metrics::Label> {
    labels
        .iter()
        .map(|(k, v)| metrics::Label::new(*k, v.clone()))
        .collect()
}

/// One counter: an atomic for [`Metrics`] snapshots, plus the exported handle when the
/// `metrics` feature is on.
#[derive(Debug, Default)]
pub(crate) struct Count {
    value: AtomicU64,
    #[cfg(feature = "metrics")]
    export: Option<metrics::Counter>,
}

impl Count {
    /// A counter exported as `name` with `labels`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn exported(name: &'static str, labels: &[(&'static str, String)]) -> Count {
        Count {
            value: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            export: Some(metrics::counter!(name, to_labels(labels))),
        }
    }

    /// Adds `n`; returns the previous value.
    pub(crate) fn add(&self, n: u64) -> u64 {
        #[cfg(feature = "metrics")]
        if let Some(c) = &self.export {
            c.increment(n);
        }
        self.value.fetch_add(n, Ordering::Relaxed)
    }

    /// The current value.
    pub(crate) fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A gauge exported when the `metrics` feature is on (nothing otherwise).
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    #[cfg(feature = "metrics")]
    export: Option<metrics::Gauge>,
}

impl Gauge {
    /// A gauge exported as `name` with `labels`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn exported(name: &'static str, labels: &[(&'static str, String)]) -> Gauge {
        Gauge {
            #[cfg(feature = "metrics")]
            export: Some(metrics::gauge!(name, to_labels(labels))),
        }
    }

    /// Sets the value.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables, dead_code))]
    pub(crate) fn set(&self, value: usize) {
        self.set_f64(value as f64);
    }

    /// Sets the value.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables, dead_code))]
    pub(crate) fn set_f64(&self, value: f64) {
        #[cfg(feature = "metrics")]
        if let Some(g) = &self.export {
            g.set(value);
        }
    }
}

impl Gauge {
    /// Adds `delta` (negative: subtracts).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables, dead_code))]
    pub(crate) fn add(&self, delta: f64) {
        #[cfg(feature = "metrics")]
        if let Some(g) = &self.export {
            g.increment(delta);
        }
    }
}

/// Gauges computed when they are read rather than on the event path (a work queue's
/// `workqueue_unfinished_work_seconds`, ...): each registers a refresh here, and an exporter
/// (the admin server's `/metrics`) calls [`refresh_gauges`] before it renders. A refresh whose
/// owner is gone drops out.
type Refresh = std::sync::Weak<dyn Fn() + Send + Sync>;

static REFRESH: Mutex<Vec<Refresh>> = Mutex::new(Vec::new());

/// Registers `refresh`, called by [`refresh_gauges`] until the `Arc` is dropped.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn on_refresh(refresh: &std::sync::Arc<dyn Fn() + Send + Sync>) {
    let mut all = REFRESH.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|r| r.strong_count() > 0);
    all.push(std::sync::Arc::downgrade(refresh));
}

/// Brings the gauges that are computed on read up to date (the work queues'
/// `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`).
/// The admin server's `/metrics` calls it before rendering; an application with its own
/// exporter calls it before each scrape (or every few seconds).
pub fn refresh_gauges() {
    let live: Vec<_> = {
        let mut all = REFRESH.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|r| r.strong_count() > 0);
        all.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    for r in live {
        r();
    }
}

/// A histogram exported when the `metrics` feature is on (nothing otherwise).
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    #[cfg(feature = "metrics")]
    export: Option<metrics::Histogram>,
}

impl Histogram {
    /// A histogram exported as `name` with `labels`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn exported(name: &'static str, labels: &[(&'static str, String)]) -> Histogram {
        Histogram {
            #[cfg(feature = "metrics")]
            export: Some(metrics::histogram!(name, to_labels(labels))),
        }
    }

    /// Records `value`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn record(&self, value: std::time::Duration) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.export {
            h.record(value.as_secs_f64());
        }
    }

    /// Whether recording goes anywhere (so the clock need not be read otherwise).
    pub(crate) fn is_exported(&self) -> bool {
        #[cfg(feature = "metrics")]
        return self.export.is_some();
        #[cfg(not(feature = "metrics"))]
        false
    }
}

/// The live counters of one informer.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// The informer's name: the `informer` label of exported metrics.
    name: String,
    pub(crate) events_applied: Count,
    pub(crate) lists: Count,
    pub(crate) relists: Count,
    pub(crate) watches: Count,
    pub(crate) watch_restarts: Count,
    pub(crate) watch_errors: Count,
    /// Failures are rare: a lock per failure costs nothing on the event path.
    watch_errors_by_kind: Mutex<BTreeMap<&'static str, u64>>,
    /// The last failure, for the cause of a sync timeout.
    last_failure: Mutex<Option<Failure>>,
    pub(crate) backoffs: Count,
    pub(crate) handler_panics: Count,
    pub(crate) consistency_checks: Count,
    pub(crate) divergences: Count,
    pub(crate) publish_retries: Count,
    /// The resourceVersion readers see, when numeric.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) resource_version: Gauge,
    /// The objects in the cache readers see.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) store_objects: Gauge,
}

/// A snapshot of an informer's counters ([`Informer::metrics`](crate::Informer::metrics)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Objects fed to the cache: every item of a list page plus every ADDED, MODIFIED and
    /// DELETED watch event.
    pub events_applied: u64,
    /// Full lists started (the first one included).
    pub lists: u64,
    /// Full lists started after the first (after a 410, a failed watch, …).
    pub relists: u64,
    /// Watches opened.
    pub watches: u64,
    /// Watches opened after the first (a watch timing out normally is resumed this way too).
    pub watch_restarts: u64,
    /// List or watch failures reported to the watch-error hook.
    pub watch_errors: u64,
    /// The same failures counted by kind ([`Failure::kind`]: `"decode"`, `"expired"`,
    /// `"very_short_watch"`, …).
    pub watch_errors_by_kind: BTreeMap<&'static str, u64>,
    /// Backoffs entered after a failure.
    pub backoffs: u64,
    /// Handler panics caught.
    pub handler_panics: u64,
    /// Consistency checks completed (see
    /// [`InformerBuilder::consistency_check`](crate::InformerBuilder::consistency_check)).
    pub consistency_checks: u64,
    /// Consistency checks that found the cache diverging from the server.
    pub divergences: u64,
    /// Steps whose publication to the [`Store`](crate::Store) had to be retried because a
    /// reader was still on the copy it goes to (the driver never waits for readers; the step
    /// reached the store, and its notifications the handlers, a little later).
    pub publish_retries: u64,
}

impl Counters {
    /// The counters of informer `name`, exported under its name when the `metrics` feature is
    /// on.
    pub(crate) fn new(name: &str) -> Counters {
        let labels = [("informer", name.to_string())];
        let c = |metric| Count::exported(metric, &labels);
        Counters {
            name: name.to_string(),
            events_applied: c("informer_events_applied_total"),
            lists: c("informer_lists_total"),
            relists: c("informer_relists_total"),
            watches: c("informer_watches_total"),
            watch_restarts: c("informer_watch_restarts_total"),
            watch_errors: Count::default(),
            watch_errors_by_kind: Mutex::default(),
            last_failure: Mutex::default(),
            backoffs: c("informer_backoffs_total"),
            // Exported per handler (informer_handler_panics_total{informer, handler}).
            handler_panics: Count::default(),
            consistency_checks: c("informer_consistency_checks_total"),
            divergences: c("informer_divergences_total"),
            publish_retries: c("informer_publish_retries_total"),
            resource_version: Gauge::exported("informer_last_sync_resource_version", &labels),
            store_objects: Gauge::exported("informer_store_objects", &labels),
        }
    }

    /// The counters of one handler of this informer.
    pub(crate) fn handler(&self, id: u64) -> (Count, Count, Gauge, Histogram) {
        let labels = [("informer", self.name.clone()), ("handler", id.to_string())];
        (
            Count::exported("informer_handler_delivered_total", &labels),
            Count::exported("informer_handler_panics_total", &labels),
            Gauge::exported("informer_handler_pending", &labels),
            Histogram::exported("informer_handler_latency_seconds", &labels),
        )
    }

    /// Counts one failure reported to the watch-error hook.
    pub(crate) fn watch_error(&self, failure: &Failure) {
        self.watch_errors.add(1);
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "informer_watch_errors_total",
            "informer" => self.name.clone(),
            "kind" => failure.kind()
        )
        .increment(1);
        let mut by_kind = self
            .watch_errors_by_kind
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *by_kind.entry(failure.kind()).or_insert(0) += 1;
        drop(by_kind);
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(failure.clone());
    }

    /// The last failure reported since the informer started.
    pub(crate) fn last_failure(&self) -> Option<Failure> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn snapshot(&self) -> Metrics {
        let g = |a: &Count| a.get();
        Metrics {
            events_applied: g(&self.events_applied),
            lists: g(&self.lists),
            relists: g(&self.relists),
            watches: g(&self.watches),
            watch_restarts: g(&self.watch_restarts),
            watch_errors: g(&self.watch_errors),
            watch_errors_by_kind: self
                .watch_errors_by_kind
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            backoffs: g(&self.backoffs),
            handler_panics: g(&self.handler_panics),
            consistency_checks: g(&self.consistency_checks),
            divergences: g(&self.divergences),
            publish_retries: g(&self.publish_retries),
        }
    }
}
