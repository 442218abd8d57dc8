//! Leader election on a `coordination.k8s.io/v1` Lease: client-go `tools/leaderelection` as a
//! sans-IO state machine.
//!
//! The elector decides; the runtime performs the Lease requests and feeds back what it saw.
//!
//! - [`LeaderElector::handle_timeout`] at [`poll_timeout`](LeaderElector::poll_timeout) (and
//!   after every input), then [`poll_request`](LeaderElector::poll_request): a
//!   [`LeaseRequest`] to perform (GET the Lease; CREATE it; UPDATE it at a resourceVersion),
//!   tagged with an [`AttemptId`]. At most one request is in flight.
//! - [`handle_get`](LeaderElector::handle_get) and [`handle_write`](LeaderElector::handle_write)
//!   feed back its outcome; outcomes of an abandoned attempt are ignored.
//! - [`poll_event`](LeaderElector::poll_event): [`LeaderEvent::StartedLeading`],
//!   [`LeaderEvent::StoppedLeading`], [`LeaderEvent::NewLeader`].
//!
//! # Rules (client-go `leaderelection.go`, `resourcelock/leaselock.go`)
//!
//! - A candidate tries every `retry_period`, jittered by a factor 1.2 (a delay in
//!   `[retry, 2.2 × retry)`). It reads the Lease: absent → it creates it, holding it; held by
//!   another identity whose record this candidate has seen change less than `lease_duration`
//!   ago (by its own clock: the time it first observed that version) → it waits; free (no
//!   holder, after a release) or expired → it takes it over with an UPDATE at the
//!   resourceVersion it read (optimistic concurrency: of two candidates, one gets a 409), with
//!   `leaseTransitions` + 1 and a new `acquireTime`.
//! - The leader renews every `retry_period` (UPDATE at the resourceVersion of its last write,
//!   without a GET; a conflict makes the next attempt read first). A leader that has not
//!   renewed successfully for `renew_deadline`, counted from the start of its last successful
//!   renewal, stops leading at once — even with a request still hanging. Because
//!   `renew_deadline < lease_duration` and the others count `lease_duration` from when they saw
//!   that renewal (after it was sent), the old leader has stopped before anyone can take over.
//! - A request unanswered for `renew_deadline` is abandoned and the next attempt made.
//! - [`release`](LeaderElector::release) (on shutdown): the leader stops leading and writes the
//!   Lease with no holder and a 1 s duration, so a standby takes over at its next try.

use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use core::time::Duration;

use crate::rng::SplitMix64;
use crate::time::Instant;

/// client-go's `JitterFactor` for a candidate's retries.
pub const JITTER_FACTOR: f64 = 1.2;

/// Timing and identity of one candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderElectionConfig {
    /// This candidate's identity (the Lease's `holderIdentity`), unique among candidates.
    pub identity: String,
    /// How long others wait, from when they saw the last renewal, before taking over (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops leading (10 s).
    pub renew_deadline: Duration,
    /// Time between attempts (2 s).
    pub retry_period: Duration,
    /// Seed of the jitter.
    pub seed: u64,
}

impl LeaderElectionConfig {
    /// client-go's usual timings (15 s, 10 s, 2 s) for `identity`.
    pub fn new(identity: impl Into<String>) -> Self {
        LeaderElectionConfig {
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            seed: 0,
        }
    }

    /// Checks client-go's constraints: an identity; `lease_duration > renew_deadline >
    /// 1.2 × retry_period > 0`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.identity.is_empty() {
            return Err(ConfigError::NoIdentity);
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::Timing("retry_period must be positive"));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::Timing(
                "lease_duration must be greater than renew_deadline",
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(ConfigError::Timing(
                "renew_deadline must be greater than 1.2 × retry_period",
            ));
        }
        Ok(())
    }
}

/// An unusable [`LeaderElectionConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The identity is empty.
    NoIdentity,
    /// The timings break a constraint.
    Timing(&'static str),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::NoIdentity => f.write_str("leader election needs an identity"),
            ConfigError::Timing(m) => f.write_str(m),
        }
    }
}

impl core::error::Error for ConfigError {}

/// The Lease's `spec` fields the election reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `holderIdentity` (`None` or empty: free).
    pub holder_identity: Option<String>,
    /// `leaseDurationSeconds`.
    pub lease_duration_seconds: Option<u32>,
    /// `acquireTime` as the server wrote it.
    pub acquire_time: Option<String>,
    /// `renewTime` as the server wrote it.
    pub renew_time: Option<String>,
    /// `leaseTransitions`.
    pub lease_transitions: Option<u32>,
}

impl LeaseRecord {
    fn holder(&self) -> &str {
        self.holder_identity.as_deref().unwrap_or("")
    }
}

/// The spec to write: `renewTime` is the runtime's wall clock now; `acquireTime` is
/// `acquire_time`, or now when `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseWrite {
    /// `holderIdentity` (empty on release).
    pub holder_identity: String,
    /// `leaseDurationSeconds`.
    pub lease_duration_seconds: u32,
    /// `leaseTransitions`.
    pub lease_transitions: u32,
    /// `acquireTime` to keep, `None`: now.
    pub acquire_time: Option<String>,
}

/// A request for the runtime to perform on the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseRequest {
    /// GET the Lease; answer with [`LeaderElector::handle_get`].
    Get,
    /// CREATE the Lease with this spec; answer with [`LeaderElector::handle_write`].
    Create(LeaseWrite),
    /// UPDATE (PUT) the Lease at `resource_version`; answer with
    /// [`LeaderElector::handle_write`].
    Update {
        /// The spec.
        spec: LeaseWrite,
        /// The resourceVersion precondition.
        resource_version: String,
    },
}

/// Identifies one attempt's request; outcomes carry it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttemptId(pub u64);

/// What a GET of the Lease found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetOutcome {
    /// The Lease exists.
    Found {
        /// Its spec.
        record: LeaseRecord,
        /// Its resourceVersion.
        resource_version: String,
    },
    /// 404.
    NotFound,
    /// Any other failure.
    Failed,
}

/// What a CREATE or UPDATE of the Lease did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written; the Lease as the server returned it.
    Written {
        /// Its spec.
        record: LeaseRecord,
        /// Its new resourceVersion.
        resource_version: String,
    },
    /// 409: someone else wrote first (or created it).
    Conflict,
    /// Any other failure.
    Failed,
}

/// A change of leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderEvent {
    /// This candidate is now the leader: start the work.
    StartedLeading,
    /// This candidate is no longer the leader: stop the work at once.
    StoppedLeading,
    /// The Lease's holder is now this identity (possibly this candidate).
    NewLeader(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Get,
    Write,
    Release,
}

/// One candidate's leader election (see the [module documentation](self)).
#[derive(Debug)]
pub struct LeaderElector {
    cfg: LeaderElectionConfig,
    rng: SplitMix64,
    /// The last Lease seen (spec and resourceVersion), and when this candidate first saw that
    /// version.
    observed: Option<(LeaseRecord, String)>,
    observed_at: Instant,
    /// Start of the last successful acquire or renewal, while leading.
    renewed_at: Option<Instant>,
    next_attempt: Instant,
    in_flight: Option<(AttemptId, Step, Instant)>,
    /// The request handed out last, until polled.
    pending: Option<(AttemptId, LeaseRequest)>,
    next_id: u64,
    events: VecDeque<LeaderEvent>,
    last_leader: Option<String>,
    released: bool,
}

impl LeaderElector {
    /// A candidate; its first attempt is due at once.
    pub fn new(cfg: LeaderElectionConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(LeaderElector {
            rng: SplitMix64::new(cfg.seed),
            cfg,
            observed: None,
            observed_at: Instant::ZERO,
            renewed_at: None,
            next_attempt: Instant::ZERO,
            in_flight: None,
            pending: None,
            next_id: 0,
            events: VecDeque::new(),
            last_leader: None,
            released: false,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.cfg
    }

    /// True while this candidate leads (it should be doing the work).
    pub fn is_leader(&self) -> bool {
        self.renewed_at.is_some()
    }

    /// The attempt whose outcome is awaited, if any (an abandoned attempt is no longer it).
    pub fn in_flight(&self) -> Option<AttemptId> {
        self.in_flight.map(|(id, _, _)| id)
    }

    /// The holder of the Lease as last seen.
    pub fn leader(&self) -> Option<&str> {
        self.last_leader.as_deref()
    }

    fn start(&mut self, now: Instant, step: Step, req: LeaseRequest) {
        self.next_id += 1;
        let id = AttemptId(self.next_id);
        self.in_flight = Some((id, step, now));
        self.pending = Some((id, req));
    }

    fn stop_leading(&mut self) {
        if self.renewed_at.take().is_some() {
            self.events.push_back(LeaderEvent::StoppedLeading);
        }
    }

    fn schedule_retry(&mut self, now: Instant) {
        let retry = self.cfg.retry_period;
        self.next_attempt = if self.is_leader() {
            now + retry
        } else {
            let extra = retry.as_secs_f64() * JITTER_FACTOR * self.rng.next_f64();
            now + retry + Duration::from_secs_f64(extra)
        };
    }

    fn observe(&mut self, now: Instant, record: LeaseRecord, rv: String) {
        let changed = self.observed.as_ref().is_none_or(|(_, r)| *r != rv);
        if changed {
            self.observed_at = now;
        }
        let holder = record.holder().to_string();
        if !holder.is_empty() && self.last_leader.as_deref() != Some(holder.as_str()) {
            self.events
                .push_back(LeaderEvent::NewLeader(holder.clone()));
        }
        self.last_leader = (!holder.is_empty()).then_some(holder);
        self.observed = Some((record, rv));
    }

    fn spec_for_me(&self, old: Option<&LeaseRecord>) -> LeaseWrite {
        let d = self.cfg.lease_duration;
        let secs = u32::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0)).unwrap_or(u32::MAX);
        let (transitions, acquire) = match old {
            None => (0, None),
            Some(o) => {
                let t = o.lease_transitions.unwrap_or(0);
                if o.holder() == self.cfg.identity {
                    (t, o.acquire_time.clone())
                } else {
                    (t + 1, None)
                }
            }
        };
        LeaseWrite {
            holder_identity: self.cfg.identity.clone(),
            lease_duration_seconds: secs.max(1),
            lease_transitions: transitions,
            acquire_time: acquire,
        }
    }

    /// The clock moved to `now`: stops leading past the renew deadline, abandons a request
    /// unanswered too long, and starts the next attempt when due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(at) = self.renewed_at {
            if now >= at + self.cfg.renew_deadline {
                self.stop_leading();
            }
        }
        if let Some((_, _, started)) = self.in_flight {
            if now >= started + self.cfg.renew_deadline {
                self.in_flight = None;
                self.pending = None;
                self.schedule_retry(now);
            }
        }
        if self.released || self.in_flight.is_some() || now < self.next_attempt {
            return;
        }
        match (&self.observed, self.is_leader()) {
            (Some((rec, rv)), true) if !rv.is_empty() => {
                let spec = self.spec_for_me(Some(rec));
                let resource_version = rv.clone();
                self.start(
                    now,
                    Step::Write,
                    LeaseRequest::Update {
                        spec,
                        resource_version,
                    },
                );
            }
            _ => self.start(now, Step::Get, LeaseRequest::Get),
        }
    }

    /// The request to perform now, if any.
    pub fn poll_request(&mut self) -> Option<(AttemptId, LeaseRequest)> {
        self.pending.take()
    }

    fn take_attempt(&mut self, id: AttemptId, step: Step) -> Option<Instant> {
        match self.in_flight {
            Some((i, s, started)) if i == id && s == step => {
                self.in_flight = None;
                Some(started)
            }
            _ => None,
        }
    }

    /// The outcome of the GET `id`.
    pub fn handle_get(&mut self, id: AttemptId, now: Instant, outcome: GetOutcome) {
        let Some(started) = self.take_attempt(id, Step::Get) else {
            return;
        };
        match outcome {
            GetOutcome::NotFound => {
                let spec = self.spec_for_me(None);
                self.start(started, Step::Write, LeaseRequest::Create(spec));
            }
            GetOutcome::Failed => self.schedule_retry(now),
            GetOutcome::Found {
                record,
                resource_version,
            } => {
                self.observe(now, record.clone(), resource_version.clone());
                let holder = record.holder();
                let mine = holder == self.cfg.identity;
                let expired = now >= self.observed_at + self.cfg.lease_duration;
                if !holder.is_empty() && !mine && !expired {
                    // Held by another, still valid.
                    self.stop_leading();
                    self.schedule_retry(now);
                    return;
                }
                let spec = self.spec_for_me(Some(&record));
                self.start(
                    started,
                    Step::Write,
                    LeaseRequest::Update {
                        spec,
                        resource_version,
                    },
                );
            }
        }
    }

    /// The outcome of the CREATE or UPDATE `id`.
    pub fn handle_write(&mut self, id: AttemptId, now: Instant, outcome: WriteOutcome) {
        if self.take_attempt(id, Step::Release).is_some() {
            self.observed = None;
            return;
        }
        let Some(started) = self.take_attempt(id, Step::Write) else {
            return;
        };
        match outcome {
            WriteOutcome::Written {
                record,
                resource_version,
            } => {
                self.observe(now, record, resource_version);
                if self.released {
                    return;
                }
                // Counted from when the write was sent: the others saw it later.
                let was_leader = self.is_leader();
                self.renewed_at = Some(started);
                if !was_leader {
                    self.events.push_back(LeaderEvent::StartedLeading);
                }
                self.next_attempt = started + self.cfg.retry_period;
            }
            WriteOutcome::Conflict | WriteOutcome::Failed => {
                // Read before the next write (keeping when this version was first seen).
                if let Some((_, rv)) = &mut self.observed {
                    rv.clear();
                }
                self.schedule_retry(now);
            }
        }
        if let Some(at) = self.renewed_at {
            if now >= at + self.cfg.renew_deadline {
                self.stop_leading();
            }
        }
    }

    /// Shutting down: stops leading now, and (if this candidate holds the Lease as far as it
    /// knows) asks to write it free. No further attempts are made.
    pub fn release(&mut self, now: Instant) {
        let was_leader = self.is_leader();
        self.stop_leading();
        self.released = true;
        self.in_flight = None;
        self.pending = None;
        if !was_leader {
            return;
        }
        if let Some((rec, rv)) = &self.observed {
            if rec.holder() == self.cfg.identity && !rv.is_empty() {
                let spec = LeaseWrite {
                    holder_identity: String::new(),
                    lease_duration_seconds: 1,
                    lease_transitions: rec.lease_transitions.unwrap_or(0),
                    acquire_time: rec.acquire_time.clone(),
                };
                let resource_version = rv.clone();
                self.start(
                    now,
                    Step::Release,
                    LeaseRequest::Update {
                        spec,
                        resource_version,
                    },
                );
            }
        }
    }

    /// The next leadership change to act on.
    pub fn poll_event(&mut self) -> Option<LeaderEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: the next attempt, the renew
    /// deadline while leading, or the abandonment of a request in flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(at) = self.renewed_at {
            consider(at + self.cfg.renew_deadline);
        }
        match self.in_flight {
            Some((_, _, started)) => consider(started + self.cfg.renew_deadline),
            None if !self.released => consider(self.next_attempt),
            None => {}
        }
        t
    }
}

#[cfg(test)]
mod tests;
