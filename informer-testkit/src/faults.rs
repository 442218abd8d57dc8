//! Faults by seed: which requests fail, how, and when the server restarts.

use std::time::Duration;

use informer_core::rng::SplitMix64;

/// Which faults a [`FakeCluster`](crate::FakeCluster) injects, each as a fraction of the
/// requests it applies to (0.0 never, 1.0 always). Every decision is drawn from the cluster's
/// seed, the request (method, path and query) and how many times that same request was made
/// before: the same seed and the same requests give the same faults, whatever else runs
/// concurrently.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Faults {
    /// Watches that end early: after a few events or a few virtual seconds, half of them as a
    /// clean end of the stream, half as a connection reset.
    pub drop_watch: f64,
    /// Watches that deliver nothing until they time out (a stalled connection); the events
    /// they held are not lost to a client that resumes from its last resourceVersion.
    pub hang_watch: f64,
    /// Lists and watches answered `410 Gone` (a watch: an `ERROR` event), as after a
    /// compaction: a storm of them when high.
    pub gone: f64,
    /// Requests answered `429 Too Many Requests` with `Retry-After: retry_after`.
    pub too_many_requests: f64,
    /// The `Retry-After` of a 429, in seconds.
    pub retry_after: u32,
    /// Requests answered `500 Internal Server Error`.
    pub server_error: f64,
    /// Whether the 429s and 500s above hit gets and writes too, not only lists and watches
    /// (on by default). An `Api` call retries a 429 (and a 500 where that is safe) after a
    /// wait it measures in real time, on a thread, whatever the clock: a run meant to take
    /// milliseconds turns this off. Off, a restart's refused connections spare them too.
    pub errors_on_writes: bool,
    /// Requests answered only after `slow_by` (virtual time under tokio's paused clock).
    pub slow: f64,
    /// How late a slow answer is.
    pub slow_by: Duration,
    /// Writes (update, patch, delete) refused with `409 Conflict` as if another writer had
    /// just changed the object.
    pub conflict: f64,
    /// The server restarts this often: every watch ends, history is compacted (resuming from
    /// an older resourceVersion is a 410), and connections are refused for `downtime`.
    pub restart_every: Option<Duration>,
    /// How long a restart refuses connections.
    pub downtime: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults::none()
    }
}

impl Faults {
    /// No faults.
    pub fn none() -> Faults {
        Faults {
            drop_watch: 0.0,
            hang_watch: 0.0,
            gone: 0.0,
            too_many_requests: 0.0,
            retry_after: 1,
            server_error: 0.0,
            errors_on_writes: true,
            slow: 0.0,
            slow_by: Duration::from_secs(2),
            conflict: 0.0,
            restart_every: None,
            downtime: Duration::from_secs(5),
        }
    }

    /// A bit of everything: a third of watches dropped, a tenth hung, 10 % of lists and
    /// watches 410, 5 % 429 and 5 % 500, 10 % slow by 2 s, 10 % of writes conflicting, a
    /// restart every 3 minutes down for 5 s.
    pub fn chaos() -> Faults {
        Faults {
            drop_watch: 0.33,
            hang_watch: 0.1,
            gone: 0.1,
            too_many_requests: 0.05,
            server_error: 0.05,
            slow: 0.1,
            conflict: 0.1,
            restart_every: Some(Duration::from_secs(180)),
            ..Faults::none()
        }
    }

    /// Sets [`drop_watch`](Self::drop_watch).
    pub fn drop_watch(mut self, p: f64) -> Self {
        self.drop_watch = p;
        self
    }
    /// Sets [`hang_watch`](Self::hang_watch).
    pub fn hang_watch(mut self, p: f64) -> Self {
        self.hang_watch = p;
        self
    }
    /// Sets [`gone`](Self::gone).
    pub fn gone(mut self, p: f64) -> Self {
        self.gone = p;
        self
    }
    /// Sets [`too_many_requests`](Self::too_many_requests) and its `Retry-After`.
    pub fn too_many_requests(mut self, p: f64, retry_after: u32) -> Self {
        self.too_many_requests = p;
        self.retry_after = retry_after;
        self
    }
    /// Sets [`server_error`](Self::server_error).
    pub fn server_error(mut self, p: f64) -> Self {
        self.server_error = p;
        self
    }
    /// Sets [`errors_on_writes`](Self::errors_on_writes).
    pub fn errors_on_writes(mut self, on: bool) -> Self {
        self.errors_on_writes = on;
        self
    }
    /// Sets [`slow`](Self::slow) and [`slow_by`](Self::slow_by).
    pub fn slow(mut self, p: f64, by: Duration) -> Self {
        self.slow = p;
        self.slow_by = by;
        self
    }
    /// Sets [`conflict`](Self::conflict).
    pub fn conflict(mut self, p: f64) -> Self {
        self.conflict = p;
        self
    }
    /// Sets [`restart_every`](Self::restart_every) and [`downtime`](Self::downtime).
    pub fn restart_every(mut self, every: Duration, downtime: Duration) -> Self {
        self.restart_every = Some(every);
        self.downtime = downtime;
        self
    }
}

/// What one request gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub delay: Option<Duration>,
    pub fail: Option<Injected>,
    pub watch: WatchFault,
}

/// An answer in place of the real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Injected {
    Gone,
    TooMany(u32),
    Server,
    Conflict,
}

/// How a watch misbehaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum WatchFault {
    #[default]
    None,
    /// Ends after this many events or this many seconds, with a reset when `reset`.
    Drop {
        after_events: u32,
        after_secs: u32,
        reset: bool,
    },
    Hang,
}

/// The kind of request, as faults see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Watch,
    Get,
    Create,
    Write,
}

/// Draws the plan of one request from `seed`, its text and its occurrence number.
pub(crate) fn plan(faults: &Faults, seed: u64, request: &str, nth: u64, kind: Kind) -> Plan {
    let mut rng = SplitMix64::new(seed ^ fnv(request) ^ nth.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut hit = |p: f64| p > 0.0 && rng.next_f64() < p;
    let mut plan = Plan::default();
    if hit(faults.slow) {
        plan.delay = Some(faults.slow_by);
    }
    let errors = faults.errors_on_writes || matches!(kind, Kind::List | Kind::Watch);
    plan.fail = if errors && hit(faults.too_many_requests) {
        Some(Injected::TooMany(faults.retry_after))
    } else if errors && hit(faults.server_error) {
        Some(Injected::Server)
    } else if matches!(kind, Kind::List | Kind::Watch) && hit(faults.gone) {
        Some(Injected::Gone)
    } else if kind == Kind::Write && hit(faults.conflict) {
        Some(Injected::Conflict)
    } else {
        None
    };
    if kind == Kind::Watch {
        if hit(faults.drop_watch) {
            plan.watch = WatchFault::Drop {
                after_events: rng.below(8) as u32,
                after_secs: 1 + rng.below(30) as u32,
                reset: rng.next_u64() & 1 == 0,
            };
        } else if hit(faults.hang_watch) {
            plan.watch = WatchFault::Hang;
        }
    }
    plan
}

/// FNV-1a: a stable hash of the request's text (std's hasher is randomly keyed).
pub(crate) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_plan_and_rates_roughly_as_asked() {
        let f = Faults::none().server_error(0.25).drop_watch(0.5);
        let a: Vec<Plan> = (0..400)
            .map(|n| plan(&f, 7, "GET /api/v1/pods?watch=true", n, Kind::Watch))
            .collect();
        let b: Vec<Plan> = (0..400)
            .map(|n| plan(&f, 7, "GET /api/v1/pods?watch=true", n, Kind::Watch))
            .collect();
        assert_eq!(a, b);
        let c: Vec<Plan> = (0..400)
            .map(|n| plan(&f, 8, "GET /api/v1/pods?watch=true", n, Kind::Watch))
            .collect();
        assert_ne!(a, c, "another seed, other faults");
        let errors = a
            .iter()
            .filter(|p| p.fail == Some(Injected::Server))
            .count();
        assert!((60..140).contains(&errors), "{errors} of 400 at 25 %");
        let drops = a
            .iter()
            .filter(|p| matches!(p.watch, WatchFault::Drop { .. }))
            .count();
        assert!((150..250).contains(&drops), "{drops} of 400 at 50 %");
        assert!((0..100).all(|n| plan(&Faults::none(), 7, "x", n, Kind::Write) == Plan::default()));
    }
}
