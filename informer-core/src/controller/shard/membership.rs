//! Who is in the ring: the members' Leases as one observer sees them, under leader election's
//! clock rule.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use crate::time::Instant;

/// One member's Lease as read (by a quorum LIST of the ring's Leases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberLease {
    /// The member (the Lease's `holderIdentity`, and its name after the ring's prefix).
    pub member: String,
    /// The Lease's resourceVersion: any write (a renewal) changes it.
    pub resource_version: String,
    /// False once the member released it (no holder): it has stopped all work.
    pub held: bool,
    /// The shard table version this member acknowledged (filter and server modes).
    pub ack: Option<u64>,
}

#[derive(Clone, Debug)]
struct Seen {
    rv: String,
    since: Instant,
    held: bool,
    ack: Option<u64>,
}

/// The members as one observer sees them.
///
/// A member is alive from when its Lease is first seen until `lease_duration` after this
/// observer first saw its current resourceVersion, unless released or deleted: the rule a
/// leader-election candidate applies to the leader. A member stops all work `renew_deadline`
/// (< `lease_duration`) after the start of its last successful renewal, which was sent before
/// anyone saw it, so (with clocks whose rates differ by less than the margin) a member is
/// stopped before any observer counts it gone.
#[derive(Clone, Debug)]
pub struct Membership {
    lease_duration: Duration,
    seen: BTreeMap<String, Seen>,
    observed: bool,
}

impl Membership {
    /// An observer that has seen nothing yet.
    pub fn new(lease_duration: Duration) -> Self {
        Membership {
            lease_duration,
            seen: BTreeMap::new(),
            observed: false,
        }
    }

    /// A complete read of the ring's Leases at `now`. It must be a quorum read (a LIST without
    /// a resourceVersion): a Lease missing from it is a member gone (released and deleted, or
    /// collected after it expired).
    pub fn observe(&mut self, now: Instant, leases: impl IntoIterator<Item = MemberLease>) {
        let mut next = BTreeMap::new();
        for l in leases {
            let since = match self.seen.get(&l.member) {
                Some(s) if s.rv == l.resource_version => s.since,
                _ => now,
            };
            next.insert(
                l.member,
                Seen {
                    rv: l.resource_version,
                    since,
                    held: l.held,
                    ack: l.ack,
                },
            );
        }
        self.seen = next;
        self.observed = true;
    }

    /// True once one complete read was observed.
    pub fn is_observed(&self) -> bool {
        self.observed
    }

    /// True when `member` counts as alive at `now`.
    pub fn is_alive(&self, member: &str, now: Instant) -> bool {
        self.seen
            .get(member)
            .is_some_and(|s| s.held && now < s.since + self.lease_duration)
    }

    /// The members alive at `now`, sorted.
    pub fn alive(&self, now: Instant) -> Vec<&str> {
        self.seen
            .iter()
            .filter(|(_, s)| s.held && now < s.since + self.lease_duration)
            .map(|(m, _)| m.as_str())
            .collect()
    }

    /// The resourceVersion of `member`'s Lease as last seen.
    pub fn resource_version(&self, member: &str) -> Option<String> {
        self.seen.get(member).map(|s| s.rv.clone())
    }

    /// The table version `member` last acknowledged, as seen.
    pub fn ack(&self, member: &str) -> Option<u64> {
        self.seen.get(member).and_then(|s| s.ack)
    }

    /// The members seen whose Leases expired (candidates for collection).
    pub fn expired(&self, now: Instant) -> Vec<&str> {
        self.expired_for(now, Duration::ZERO)
    }

    /// The members seen whose Leases were released, or expired at least `grace` ago.
    pub fn expired_for(&self, now: Instant, grace: Duration) -> Vec<&str> {
        self.seen
            .iter()
            .filter(|(_, s)| !s.held || now >= s.since + self.lease_duration + grace)
            .map(|(m, _)| m.as_str())
            .collect()
    }

    /// The next instant a member alive at `now` expires.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.seen
            .values()
            .filter(|s| s.held)
            .map(|s| s.since + self.lease_duration)
            .filter(|t| *t > now)
            .min()
    }
}
