//! Sharding one controller across many replicas through Leases: membership, a consistent-hash
//! ring, assignment and a handover that never lets two members reconcile one key at once.
//!
//! Sans-IO like the [work queue](super::workqueue) and [leader election](super::leaderelection):
//! time is passed in, requests come out to be performed, outcomes go back in.
//!
//! # Parts
//!
//! - [`ring`]: KEP-5866's hash (64-bit FNV-1a of the uid, an owned object's controller
//!   owner's uid, or the namespace) and `shardRange` ranges, the ring with virtual nodes, and the
//!   [`ShardTable`] (the hash space in segments, each owned by one member or
//!   by none while it changes hands).
//! - [`Membership`]: the members' Leases as one observer sees them (a quorum LIST of the
//!   ring's Leases), under leader election's clock rule.
//! - [`Member`]: one replica's member. It holds a Lease of its own (leader election's rules,
//!   itself the only candidate) and works only while it holds it; on losing it, it cancels all
//!   in-flight work at once and is finished: a process rejoins as a *new* member (a new name),
//!   so nothing a member saw before a gap can mislead it.
//! - [`Sharder`]: the member elected on the ring's own Lease decides the assignment.
//!
//! # Modes
//!
//! - **Labels** (any server): the sharder labels each object `<ring>/shard=<member>` (the ring
//!   owner of its hash); each member's informers watch with that label selector, so memory,
//!   decode CPU and watch bandwidth scale as 1/N. Handover between two live members: the sharder
//!   sets `<ring>/drain=true`; the owner stops starting that key, finishes in-flight work and
//!   acknowledges by removing both labels; only an unlabelled object gets its new owner. A
//!   member gone (Lease expired or deleted) has its objects relabelled at once. Every write is
//!   made at the resourceVersion the decision was made on, so a stale view only costs a 409.
//! - **Filter** (no writes to objects): the sharder publishes a versioned
//!   [`ShardTable`]; every member watches everything and keeps only what the
//!   table gives it. A member acknowledges the version it applied (nothing in flight outside
//!   it) on its Lease. The sharder publishes version v+1 only once every live member
//!   acknowledged v, and v+1 gives a range to a member only where no other live member owns it
//!   in v: a range moving between live members first becomes unowned (its owner drains it),
//!   then, after the acknowledgements, owned by the new member. A gone member's ranges move at
//!   once.
//! - **Server** (1.36+): the filter mode's table, with each member's list and watch carrying
//!   its [`selector`](Member::selector) (`shardSelector`); where the server ignores it, the
//!   member filters as in the filter mode. Only the simulation and FakeCluster exercise it
//!   here: no 1.36 server runs on this project's test machine (1.20).
//! - **Buckets** (any server): the filter mode's table and acknowledgements over whole
//!   buckets (the hash space in [`BUCKETS`] slices by its top bits; [`ShardTable::bucketed`]),
//!   and the sharder labels each object once with its bucket (`<ring>/bucket=<2 hex digits>`,
//!   an owned kind's object with its parent's). Each member's informers watch with
//!   [`Member::label_selector`] (`<ring>/bucket in (…)`, the buckets the applied table gives
//!   it), changed as the table changes: memory, decode and watch traffic scale as 1/N as in
//!   the labels mode, but a membership change writes no object (a gone member's buckets move
//!   with one table write), and a new object needs one label write.
//!
//! # Guarantees and their assumption
//!
//! - **Safety**: no two members reconcile one key at once, provided clocks run at rates within
//!   the margin `lease_duration / renew_deadline` of each other (leader election's assumption:
//!   a member stops `renew_deadline` after its last successful renewal began; others count it
//!   gone `lease_duration` after they *saw* that renewal), reads of Leases are quorum reads, and
//!   a member cancels in-flight work when its Lease is lost.
//! - **Liveness**: after the last membership change, every key has exactly one owner within
//!   the bound [`ShardConfig::settle_bound`] (a gone member is seen gone after
//!   `lease_duration`; each handover step needs the views to catch up and in-flight work to end).

pub mod member;
pub mod membership;
pub mod ring;
pub mod sharder;
pub mod view;

#[cfg(test)]
mod tests;

pub use member::{LabelAck, Member, MemberEvent, MemberLeaseRequest, MemberState, ObjectShard};
pub use membership::{MemberLease, Membership};
pub use ring::{
    BUCKET_BITS, BUCKETS, HashBy, ShardRange, ShardTable, TableError, bucket_label, bucket_of,
    fnv1a64,
};
pub use sharder::{ShardWrite, Sharder, WriteId, WriteResult};
pub use view::ShardView;

use alloc::format;
use alloc::string::String;
use core::time::Duration;

use crate::controller::leaderelection::{ConfigError, LeaderElectionConfig};
use crate::object::Object;
use crate::object::meta_fields::MetaMap;

/// How members are scoped to their shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The sharder labels objects; members watch with a label selector.
    #[default]
    Labels,
    /// Members watch all and keep their ranges; acknowledgements on the Leases.
    Filter,
    /// As filter, with a server-side `shardSelector` (Kubernetes 1.36+).
    Server,
    /// The sharder labels each object once with its bucket (a fixed slice of the hash space,
    /// `<ring>/bucket`); members watch with a label selector for the buckets the table gives
    /// them, so memory, decode CPU and watch traffic scale as 1/N as in the labels mode, while
    /// ranges move as in the filter mode: no object is written when members come and go.
    Buckets,
}

/// One member's sharding configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardConfig {
    /// The ring's name: a DNS label of at most 63 characters (label prefix, Lease names).
    pub ring: String,
    /// This member's name, unique per incarnation: lowercase alphanumerics and `-`, at most
    /// 63 characters.
    pub member: String,
    /// The scoping mode.
    pub mode: Mode,
    /// What objects are hashed by.
    pub hash_by: HashBy,
    /// Virtual nodes per member (64: each member's share within about ±15% of 1/N).
    pub vnodes: u32,
    /// A member counts as gone this long after its last renewal was seen (15 s).
    pub lease_duration: Duration,
    /// A member stops this long after its last successful renewal began (10 s).
    pub renew_deadline: Duration,
    /// Renewals and membership reads (2 s).
    pub retry_period: Duration,
    /// Seed of the jitter.
    pub seed: u64,
    /// How many of the sharder's object writes (labels mode: labels, drains, relabels) are
    /// out at once, a sliding window (16; 0 counts as 1): the [`Sharder`] hands out no more
    /// until one is answered, so what it decided and has not written yet stays one dirty key
    /// per object, not a write held in memory. More moves a dead member's objects
    /// faster only while the API server has write throughput to spare: on a 2-core test
    /// machine 16, 32 and 64 all reached its ~550–800 patches/s, 16 with the least load on
    /// the sharder (`cargo xtask bench shard --writes-in-flight N`).
    pub writes_in_flight: usize,
}

impl ShardConfig {
    /// client-go's Lease timings, 64 virtual nodes, labels mode, hashed by uid.
    pub fn new(ring: impl Into<String>, member: impl Into<String>) -> Self {
        ShardConfig {
            ring: ring.into(),
            member: member.into(),
            mode: Mode::Labels,
            hash_by: HashBy::Uid,
            vnodes: 64,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            seed: 0,
            writes_in_flight: 16,
        }
    }

    /// Checks names, virtual nodes and leader election's timing constraints.
    pub fn validate(&self) -> Result<(), ShardError> {
        if !is_dns_label(&self.ring) {
            return Err(ShardError::InvalidRing);
        }
        if !is_dns_label(&self.member) {
            return Err(ShardError::InvalidMember);
        }
        if self.vnodes == 0 || self.vnodes > 1024 {
            return Err(ShardError::VirtualNodes(self.vnodes));
        }
        LeaderElectionConfig {
            identity: self.member.clone(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            seed: self.seed,
        }
        .validate()
        .map_err(ShardError::Timing)
    }

    /// The label naming an object's owner: `<ring>/shard`.
    pub fn shard_label(&self) -> String {
        format!("{}/shard", self.ring)
    }

    /// The label selector of this member's objects (labels mode): `<ring>/shard=<member>`.
    pub fn label_selector(&self) -> String {
        format!("{}/shard={}", self.ring, self.member)
    }

    /// The label naming an object's bucket (buckets mode): `<ring>/bucket`.
    pub fn bucket_label(&self) -> String {
        format!("{}/bucket", self.ring)
    }

    /// The label selector of the objects in `buckets` (buckets mode):
    /// `<ring>/bucket in (00,1f,…)`; with no bucket, one that matches nothing
    /// (`<ring>/bucket in (none)`: a bucket label is hex).
    pub fn bucket_selector(&self, buckets: &[u8]) -> String {
        let mut s = format!("{} in (", self.bucket_label());
        if buckets.is_empty() {
            s.push_str("none");
        }
        for (i, b) in buckets.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&ring::bucket_label(*b));
        }
        s.push(')');
        s
    }

    /// A primary object's hash (an object of the controller's own kind): [`HashBy::hash`] of
    /// its own uid (or its namespace), never its owner's, whether it has a controller owner or
    /// not. That is what KEP-5866's `shardSelector` hashes, so a server-side selection matches
    /// it, and what its children are hashed by ([`owned_hash_of`](Self::owned_hash_of)). An
    /// object without a uid (never one from a server) hashes its key.
    pub fn hash_of<O: Object + ?Sized>(&self, obj: &O) -> u64 {
        self.hash(obj, None)
    }

    /// An owned object's hash (an object of the controller's owned kinds): its controller
    /// owner's uid, so it lands on the member of the primary it belongs to; its own uid when it
    /// has no controller owner. By namespace, as [`hash_of`](Self::hash_of).
    pub fn owned_hash_of<O: Object + ?Sized>(&self, obj: &O) -> u64 {
        let owner = obj.controller_owner().ok().flatten();
        self.hash(obj, owner.as_ref().map(|o| o.uid.as_ref()))
    }

    fn hash<O: Object + ?Sized>(&self, obj: &O, owner_uid: Option<&str>) -> u64 {
        let key;
        let uid = match obj.uid() {
            Some(uid) => uid,
            None => {
                key = alloc::format!("{}", obj.key_ref());
                &key
            }
        };
        self.hash_by
            .hash(uid, obj.namespace().unwrap_or(""), owner_uid)
    }

    /// What a [`Member`] needs of a primary object: its hash ([`hash_of`](Self::hash_of)) and
    /// its shard labels.
    pub fn object_shard<'a, O: Object + ?Sized>(&self, obj: &'a O) -> ObjectShard<'a> {
        self.shard_of(obj, self.hash_of(obj))
    }

    /// What the sharder needs of an owned object: its hash
    /// ([`owned_hash_of`](Self::owned_hash_of)) and its shard labels.
    pub fn owned_object_shard<'a, O: Object + ?Sized>(&self, obj: &'a O) -> ObjectShard<'a> {
        self.shard_of(obj, self.owned_hash_of(obj))
    }

    fn shard_of<'a, O: Object + ?Sized>(&self, obj: &'a O, hash: u64) -> ObjectShard<'a> {
        let labels = obj.labels();
        if self.mode == Mode::Buckets {
            return ObjectShard {
                hash,
                label: self.ring_label(&labels, "bucket"),
                draining: false,
            };
        }
        ObjectShard {
            hash,
            label: self.ring_label(&labels, "shard"),
            draining: self.ring_label(&labels, "drain").is_some(),
        }
    }

    /// The value of the label `<ring>/<name>`, its key built on the stack: this runs for every
    /// object event a member or the sharder sees.
    fn ring_label<'a>(&self, labels: &MetaMap<'a>, name: &str) -> Option<&'a str> {
        let mut buf = [0u8; 96];
        let (ring, name) = (self.ring.as_bytes(), name.as_bytes());
        let len = ring.len() + 1 + name.len();
        let Some(key) = buf.get_mut(..len) else {
            // Never for a valid ring name (a DNS label, at most 63 bytes).
            return labels.get(&format!(
                "{}/{}",
                self.ring,
                core::str::from_utf8(name).ok()?
            ));
        };
        key[..ring.len()].copy_from_slice(ring);
        key[ring.len()] = b'/';
        key[ring.len() + 1..].copy_from_slice(name);
        labels.get(core::str::from_utf8(key).ok()?)
    }

    /// The ring the sharder assigns over `members` (whole buckets in the buckets mode).
    pub fn ring_over(&self, members: &[&str]) -> ShardTable {
        let ring = ShardTable::ring(members, self.vnodes);
        if self.mode == Mode::Buckets {
            ring.bucketed()
        } else {
            ring
        }
    }

    /// The label marking an object being handed over: `<ring>/drain`.
    pub fn drain_label(&self) -> String {
        format!("{}/drain", self.ring)
    }

    /// The annotation carrying a member's acknowledged table version (on its Lease), and the
    /// table (on the table's Lease): `<ring>/ack`, `<ring>/table`.
    pub fn ack_annotation(&self) -> String {
        format!("{}/ack", self.ring)
    }

    /// The annotation carrying the published table: `<ring>/table`.
    pub fn table_annotation(&self) -> String {
        format!("{}/table", self.ring)
    }

    /// The label every member Lease of this ring carries: `informer-rs.io/ring=<ring>`.
    pub const RING_LABEL: &'static str = "informer-rs.io/ring";

    /// This member's Lease: `<ring>-m-<member>`.
    pub fn member_lease(&self) -> String {
        format!("{}-m-{}", self.ring, self.member)
    }

    /// The sharder's election Lease: `<ring>`.
    pub fn election_lease(&self) -> String {
        self.ring.clone()
    }

    /// The Lease whose annotation holds the table (filter and server modes): `<ring>-table`.
    pub fn table_lease(&self) -> String {
        format!("{}-table", self.ring)
    }

    /// The bound within which, after the last membership change (and with the sharder
    /// elected), every key has exactly one owner, given how long views take to catch up
    /// (`view_lag`: a watch's latency, or one read period) and the longest reconcile
    /// (`max_work`): a gone member is seen gone after `lease_duration` + one membership read;
    /// then a handover is at most two steps (drain, assign), each needing a read of the
    /// change, the end of in-flight work, the acknowledgement (a Lease renewal in the filter
    /// mode) and the sharder's read of it. In the labels mode each moved object is a write of
    /// the sharder's ([`writes_in_flight`](Self::writes_in_flight) at once): with many objects,
    /// count them in `view_lag` as moved objects / the API server's write rate.
    pub fn settle_bound(&self, view_lag: Duration, max_work: Duration) -> Duration {
        let step = view_lag + max_work + self.retry_period * 2 + view_lag;
        self.lease_duration + self.retry_period * 2 + step * 3
    }
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// An unusable sharding configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardError {
    /// The ring's name is not a DNS label.
    InvalidRing,
    /// The member's name is not a DNS label.
    InvalidMember,
    /// Virtual nodes must be within 1..=1024.
    VirtualNodes(u32),
    /// The Lease timings break leader election's constraints.
    Timing(ConfigError),
}

impl core::fmt::Display for ShardError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ShardError::InvalidRing => f.write_str("sharding: the ring's name must be a DNS label"),
            ShardError::InvalidMember => {
                f.write_str("sharding: the member's name must be a DNS label")
            }
            ShardError::VirtualNodes(n) => {
                write!(f, "sharding: {n} virtual nodes (1 to 1024 allowed)")
            }
            ShardError::Timing(e) => write!(f, "sharding: {e}"),
        }
    }
}

impl core::error::Error for ShardError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            ShardError::Timing(e) => Some(e),
            _ => None,
        }
    }
}
