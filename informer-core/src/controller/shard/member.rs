//! One member: its own Lease (leader election's rules, the member its only candidate), what it
//! may start, and its acknowledgements.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;

use super::ring::ShardTable;
use super::{Mode, ShardConfig, ShardError};
use crate::controller::leaderelection::{
    AttemptId, GetOutcome, LeaderElectionConfig, LeaderElector, LeaderEvent, LeaseRequest,
    WriteOutcome,
};
use crate::time::Instant;

/// Where a member is in its life. A member is one incarnation: once it stops it never works
/// again (a process starts a new member, with a new name, to rejoin), so nothing it saw before
/// can mislead it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// Acquiring its Lease.
    Joining,
    /// Holding its Lease: may work on what it owns.
    Working,
    /// Lost its Lease (or left): works no more. In-flight work must be cancelled at once.
    Retired,
}

/// A change in a member's life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// Its Lease is held: start the informers and workers.
    Joined,
    /// It lost its Lease: cancel all in-flight work now and start a new member to rejoin.
    Retired,
}

/// What a member knows of one object when it decides whether to start it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectShard<'a> {
    /// Its hash ([`HashBy::hash`](super::HashBy::hash)).
    pub hash: u64,
    /// Labels mode: the value of its `<ring>/shard` label.
    pub label: Option<&'a str>,
    /// Labels mode: its `<ring>/drain` label is set.
    pub draining: bool,
}

/// Labels mode: remove the `<ring>/shard` and `<ring>/drain` labels of `key`, at
/// `resource_version` (a 409 means it changed: the member acks again when it sees it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelAck {
    /// The object's key.
    pub key: String,
    /// The resourceVersion precondition.
    pub resource_version: String,
}

/// A request on the member's own Lease, with the acknowledgement to write on it (the
/// `<ring>/ack` annotation, filter and server modes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberLeaseRequest {
    /// The attempt.
    pub id: AttemptId,
    /// The request (as leader election makes it).
    pub request: LeaseRequest,
    /// The table version to acknowledge on a write.
    pub ack: Option<u64>,
}

/// One member's decisions (see the [module documentation](super)).
#[derive(Debug)]
pub struct Member {
    cfg: ShardConfig,
    lease: LeaderElector,
    state: MemberState,
    table: Option<ShardTable>,
    /// Keys being worked on, with their hash.
    in_flight: BTreeMap<String, u64>,
    /// Labels mode: draining keys to ack when their work ends (key → resourceVersion).
    to_ack: BTreeMap<String, String>,
    /// Labels mode: acks handed out (key → resourceVersion acked).
    acked_at: BTreeMap<String, String>,
    acks: VecDeque<LabelAck>,
    ack: Option<u64>,
    events: VecDeque<MemberEvent>,
    /// Test hook: acknowledge handovers without waiting for in-flight work. The simulation's
    /// checker must catch it.
    pub(crate) unsafe_ack_early: bool,
}

impl Member {
    /// A member joining the ring; its first Lease attempt is due at once.
    pub fn new(cfg: ShardConfig) -> Result<Self, ShardError> {
        cfg.validate()?;
        let lease = LeaderElector::new(LeaderElectionConfig {
            identity: cfg.member.clone(),
            lease_duration: cfg.lease_duration,
            renew_deadline: cfg.renew_deadline,
            retry_period: cfg.retry_period,
            seed: cfg.seed,
        })
        .map_err(ShardError::Timing)?;
        Ok(Member {
            cfg,
            lease,
            state: MemberState::Joining,
            table: None,
            in_flight: BTreeMap::new(),
            to_ack: BTreeMap::new(),
            acked_at: BTreeMap::new(),
            acks: VecDeque::new(),
            ack: None,
            events: VecDeque::new(),
            unsafe_ack_early: false,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.cfg
    }

    /// Where the member is.
    pub fn state(&self) -> MemberState {
        self.state
    }

    /// The table this member applies (filter and server modes).
    pub fn table(&self) -> Option<&ShardTable> {
        self.table.as_ref()
    }

    /// The keys in flight.
    pub fn in_flight(&self) -> impl Iterator<Item = &str> {
        self.in_flight.keys().map(String::as_str)
    }

    /// The table version acknowledged (written on the next Lease write).
    pub fn ack(&self) -> Option<u64> {
        self.ack
    }

    fn pump(&mut self) {
        while let Some(ev) = self.lease.poll_event() {
            match ev {
                LeaderEvent::StartedLeading if self.state == MemberState::Joining => {
                    self.state = MemberState::Working;
                    self.events.push_back(MemberEvent::Joined);
                }
                LeaderEvent::StoppedLeading => self.retire(),
                _ => {}
            }
        }
    }

    fn retire(&mut self) {
        if self.state != MemberState::Retired {
            self.state = MemberState::Retired;
            // Cancelled by the runtime on this event; nothing of it counts any more.
            self.in_flight.clear();
            self.events.push_back(MemberEvent::Retired);
        }
    }

    /// The clock moved to `now` (the Lease's renewals and deadline).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.lease.handle_timeout(now);
        self.pump();
    }

    /// The next Lease request to perform.
    pub fn poll_lease_request(&mut self) -> Option<MemberLeaseRequest> {
        let (id, request) = self.lease.poll_request()?;
        Some(MemberLeaseRequest {
            id,
            request,
            ack: self.ack,
        })
    }

    /// The outcome of a Lease GET.
    pub fn handle_lease_get(&mut self, id: AttemptId, now: Instant, outcome: GetOutcome) {
        self.lease.handle_get(id, now, outcome);
        self.pump();
    }

    /// The outcome of a Lease CREATE or UPDATE.
    pub fn handle_lease_write(&mut self, id: AttemptId, now: Instant, outcome: WriteOutcome) {
        self.lease.handle_write(id, now, outcome);
        self.pump();
    }

    /// Leaving: stops at once (cancel in-flight work) and asks to write the Lease free.
    pub fn leave(&mut self, now: Instant) {
        self.lease.release(now);
        self.pump();
        self.retire();
    }

    /// The next change in the member's life.
    pub fn poll_event(&mut self) -> Option<MemberEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.lease.poll_timeout()
    }

    /// True when this member owns the object now, by its own view.
    pub fn owns(&self, obj: ObjectShard<'_>) -> bool {
        if self.state != MemberState::Working {
            return false;
        }
        match self.cfg.mode {
            Mode::Labels => obj.label == Some(self.cfg.member.as_str()) && !obj.draining,
            Mode::Filter | Mode::Server | Mode::Buckets => self
                .table
                .as_ref()
                .is_some_and(|t| t.owner(obj.hash) == Some(self.cfg.member.as_str())),
        }
    }

    /// Starts work on `key` if this member owns it and it is not in flight here; true when
    /// started. Every start is followed by one [`finish`](Self::finish) (unless retired).
    pub fn try_start(&mut self, key: &str, obj: ObjectShard<'_>) -> bool {
        if self.in_flight.contains_key(key) || !self.owns(obj) {
            return false;
        }
        self.in_flight.insert(key.into(), obj.hash);
        true
    }

    /// The work on `key` ended.
    pub fn finish(&mut self, key: &str) {
        if self.in_flight.remove(key).is_none() {
            return;
        }
        if let Some(rv) = self.to_ack.remove(key) {
            self.push_ack(key, rv);
        }
        self.recompute_ack();
    }

    fn push_ack(&mut self, key: &str, rv: String) {
        self.acked_at.insert(key.into(), rv.clone());
        self.acks.push_back(LabelAck {
            key: key.into(),
            resource_version: rv,
        });
    }

    /// Labels mode: an object in this member's view (labelled for it) at `resource_version`.
    /// A draining one is acknowledged once its work ends.
    pub fn observe_object(&mut self, key: &str, obj: ObjectShard<'_>, resource_version: &str) {
        if self.cfg.mode != Mode::Labels
            || obj.label != Some(self.cfg.member.as_str())
            || !obj.draining
        {
            self.to_ack.remove(key);
            return;
        }
        if self.acked_at.get(key).map(String::as_str) == Some(resource_version) {
            return;
        }
        if self.in_flight.contains_key(key) && !self.unsafe_ack_early {
            self.to_ack.insert(key.into(), resource_version.into());
        } else {
            self.push_ack(key, resource_version.into());
        }
    }

    /// Labels mode: `key` left this member's view.
    pub fn forget_object(&mut self, key: &str) {
        self.to_ack.remove(key);
        self.acked_at.remove(key);
    }

    /// The next label acknowledgement to write.
    pub fn poll_ack(&mut self) -> Option<LabelAck> {
        self.acks.pop_front()
    }

    /// Filter and server modes: the table read (a newer version replaces the one applied; the
    /// member stops starting what it no longer owns and acknowledges the version once nothing
    /// in flight is outside it).
    pub fn handle_table(&mut self, table: ShardTable) {
        if self
            .table
            .as_ref()
            .is_some_and(|t| t.version >= table.version)
        {
            return;
        }
        self.table = Some(table);
        self.recompute_ack();
    }

    fn recompute_ack(&mut self) {
        let Some(t) = &self.table else { return };
        let me = self.cfg.member.as_str();
        if self.unsafe_ack_early || self.in_flight.values().all(|h| t.owner(*h) == Some(me)) {
            self.ack = Some(t.version);
        }
    }

    /// Server mode: the `shardSelector` for this member's list and watch (`None`: owns
    /// nothing yet). Owned kinds hashed by their owner are filtered in the client instead.
    pub fn selector(&self) -> Option<alloc::string::String> {
        self.table
            .as_ref()
            .and_then(|t| t.selector(&self.cfg.member, self.cfg.hash_by))
    }

    /// Buckets mode: the label selector of the buckets the applied table gives this member
    /// (one that matches nothing before a table, or while it owns none); `None` in the other
    /// modes.
    pub fn label_selector(&self) -> Option<String> {
        if self.cfg.mode != Mode::Buckets {
            return None;
        }
        let buckets = self
            .table
            .as_ref()
            .map(|t| t.buckets_of(&self.cfg.member))
            .unwrap_or_default();
        Some(self.cfg.bucket_selector(&buckets))
    }
}
