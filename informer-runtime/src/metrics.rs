//! Counters a user can read.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use informer_core::protocol::Failure;

/// The live counters of one informer.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) events_applied: AtomicU64,
    pub(crate) lists: AtomicU64,
    pub(crate) relists: AtomicU64,
    pub(crate) watches: AtomicU64,
    pub(crate) watch_restarts: AtomicU64,
    pub(crate) watch_errors: AtomicU64,
    /// Failures are rare: a lock per failure costs nothing on the event path.
    watch_errors_by_kind: Mutex<BTreeMap<&'static str, u64>>,
    /// The last failure, for the cause of a sync timeout.
    last_failure: Mutex<Option<Failure>>,
    pub(crate) backoffs: AtomicU64,
    pub(crate) handler_panics: AtomicU64,
    pub(crate) consistency_checks: AtomicU64,
    pub(crate) divergences: AtomicU64,
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
}

impl Counters {
    /// Counts one failure reported to the watch-error hook.
    pub(crate) fn watch_error(&self, failure: &Failure) {
        self.watch_errors.fetch_add(1, Ordering::Relaxed);
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
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
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
        }
    }
}
