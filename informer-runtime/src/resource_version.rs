//! Waiting until the readers' copy of the cache holds a resourceVersion (read-your-writes):
//! [`Informer::wait_for_resource_version`](crate::Informer::wait_for_resource_version) and
//! [`Store::wait_for_resource_version`](crate::Store::wait_for_resource_version).
//!
//! resourceVersions are compared as unsigned integers, as client-go 1.36 does (KEP-5647:
//! Kubernetes resourceVersions are decimal integers that grow with every write); one that is
//! not a number is refused with [`Error::ResourceVersionNotNumeric`].
//!
//! Cheap with many waiters: the driver calls [`RvWaiters::published`] once per published step
//! whose resourceVersion moved; with nobody waiting for that resourceVersion or older it costs
//! two atomic operations. Waiters for the same resourceVersion share one [`Event`], kept in a
//! map ordered by resourceVersion, so a publish wakes exactly the waiters it satisfies, once,
//! and none of the others. Nobody polls.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use event_listener::{Event, EventListener};

use crate::error::Error;
use crate::runtime::BoxFuture;

/// What a [`Store`](crate::Store) waits through: the informer's shared state, whatever its
/// runtime.
pub(crate) trait WaitForResourceVersion: Send + Sync {
    /// See [`Store::wait_for_resource_version`](crate::Store::wait_for_resource_version).
    fn wait_for_resource_version<'a>(
        &'a self,
        resource_version: &'a str,
        deadline: std::time::Instant,
    ) -> BoxFuture<'a, Result<(), Error>>;
}

/// What the readers' copy holds.
const NONE: u8 = 0;
const NUMERIC: u8 = 1;
const NOT_NUMERIC: u8 = 2;

/// Parses a resourceVersion as client-go 1.36 compares them: an unsigned decimal integer.
pub(crate) fn parse(rv: &str) -> Option<u64> {
    if rv.is_empty() || !rv.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rv.parse().ok()
}

/// The waiters of one informer and the resourceVersion its readers see.
#[derive(Debug, Default)]
pub(crate) struct RvWaiters {
    /// The numeric resourceVersion of the published copy (meaningful when `kind` is
    /// `NUMERIC`).
    value: AtomicU64,
    kind: AtomicU8,
    /// The smallest resourceVersion waited for (`u64::MAX`: none, or that one): a publish
    /// below it has nobody to wake and takes no lock.
    lowest: AtomicU64,
    waiting: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Per resourceVersion waited for: its event and how many waiters hold it.
    by_rv: BTreeMap<u64, (Event, usize)>,
    stopped: bool,
}

/// What a check of the published copy says.
pub(crate) enum Seen {
    /// It holds the resourceVersion or a newer one.
    Reached,
    /// Not yet.
    Behind,
    /// Its resourceVersion is not a number: it cannot be compared.
    NotNumeric,
    /// The informer stopped.
    Stopped,
}

impl RvWaiters {
    pub(crate) fn new() -> Self {
        RvWaiters {
            lowest: AtomicU64::new(u64::MAX),
            ..RvWaiters::default()
        }
    }

    /// A step was published: readers now see `rv` (`synced`: the informer has synced in that
    /// state; before, the copy's resourceVersion is not a state anyone can wait for). Wakes
    /// every waiter it satisfies, or all of them when `rv` cannot be compared.
    pub(crate) fn published(&self, rv: &str, synced: bool) {
        let (value, kind) = match parse(rv) {
            _ if !synced || rv.is_empty() => (0, NONE),
            Some(v) => (v, NUMERIC),
            None => (0, NOT_NUMERIC),
        };
        // SeqCst pairs with a waiter's store of `lowest` then load of `value`: either this
        // publish sees its lowered `lowest`, or the waiter sees this `value`.
        self.value.store(value, Ordering::SeqCst);
        self.kind.store(kind, Ordering::SeqCst);
        let wake_all = kind == NOT_NUMERIC;
        if kind == NONE || (!wake_all && value < self.lowest.load(Ordering::SeqCst)) {
            return;
        }
        let due = {
            let mut w = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            let due = if wake_all || value == u64::MAX {
                std::mem::take(&mut w.by_rv)
            } else {
                let later = w.by_rv.split_off(&(value + 1));
                std::mem::replace(&mut w.by_rv, later)
            };
            self.set_lowest(&w);
            due
        };
        for (_, (event, _)) in due {
            event.notify(usize::MAX);
        }
    }

    /// The informer stopped: every waiter, now and later, gets [`Seen::Stopped`].
    pub(crate) fn stop(&self) {
        let due = {
            let mut w = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            w.stopped = true;
            let due = std::mem::take(&mut w.by_rv);
            self.set_lowest(&w);
            due
        };
        for (_, (event, _)) in due {
            event.notify(usize::MAX);
        }
    }

    fn set_lowest(&self, w: &Waiting) {
        let lowest = w.by_rv.keys().next().copied().unwrap_or(u64::MAX);
        self.lowest.store(lowest, Ordering::SeqCst);
    }

    /// Where the published copy stands against `target`.
    pub(crate) fn check(&self, target: u64) -> Seen {
        match self.kind.load(Ordering::SeqCst) {
            NUMERIC if self.value.load(Ordering::SeqCst) >= target => Seen::Reached,
            NOT_NUMERIC => Seen::NotNumeric,
            _ => Seen::Behind,
        }
    }

    /// Registers a wait for `target`: `Err` with the answer when there is no need to wait,
    /// else a [`Registered`] wait whose listener fires at the publish that reaches `target`
    /// (or makes it incomparable), or at the stop.
    pub(crate) fn register(&self, target: u64) -> Result<Registered<'_>, Seen> {
        let listener = {
            let mut w = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            if w.stopped {
                return Err(Seen::Stopped);
            }
            let (event, count) = w.by_rv.entry(target).or_insert_with(|| (Event::new(), 0));
            *count += 1;
            let listener = event.listen();
            self.lowest.fetch_min(target, Ordering::SeqCst);
            listener
        };
        let registered = Registered {
            waiters: self,
            target,
            listener: Some(listener),
        };
        // A publish between the first check and the registration may not have seen it.
        match self.check(target) {
            Seen::Behind => Ok(registered),
            seen => Err(seen),
        }
    }
}

/// A registered wait; dropping it (done, timed out or cancelled) gives its place back, so the
/// map holds only resourceVersions someone still waits for.
pub(crate) struct Registered<'a> {
    waiters: &'a RvWaiters,
    target: u64,
    listener: Option<EventListener>,
}

impl Registered<'_> {
    /// Resolves at the publish that concerns this wait (or the stop).
    pub(crate) async fn fired(&mut self) {
        if let Some(listener) = self.listener.take() {
            listener.await;
        }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut w = self
            .waiters
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, count)) = w.by_rv.get_mut(&self.target) {
            *count -= 1;
            if *count == 0 {
                w.by_rv.remove(&self.target);
                self.waiters.set_lowest(&w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_unsigned_decimal_integers_only() {
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("18446744073709551615"), Some(u64::MAX));
        for bad in ["", "-1", "+1", " 1", "1a", "abc", "18446744073709551616"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_publish_wakes_the_waiters_it_satisfies_and_only_those() {
        let w = RvWaiters::new();
        let mut a = w.register(10).ok().unwrap();
        let b = w.register(20).ok().unwrap();
        assert_eq!(w.lowest.load(Ordering::SeqCst), 10);
        w.published("15", true);
        assert!(matches!(w.check(10), Seen::Reached));
        futures_util::FutureExt::now_or_never(a.fired()).expect("woken");
        assert_eq!(w.waiting.lock().unwrap().by_rv.len(), 1);
        assert_eq!(w.lowest.load(Ordering::SeqCst), 20);
        drop(b);
        assert!(w.waiting.lock().unwrap().by_rv.is_empty());
        assert_eq!(w.lowest.load(Ordering::SeqCst), u64::MAX);
        drop(a);
        // Not synced: nothing is reached, whatever the resourceVersion.
        w.published("99", false);
        assert!(matches!(w.check(1), Seen::Behind));
        w.published("abc", true);
        assert!(matches!(w.check(1), Seen::NotNumeric));
        w.stop();
        assert!(matches!(w.register(1), Err(Seen::Stopped)));
    }
}
