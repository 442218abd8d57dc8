//! The sharding simulation: processes with members, sharders and reconciles against a model
//! API server, with crashes, joins, partitions from the server, slow work and acks, and
//! sharder failovers; a checker at every step.
//!
//! The clock assumption of the checks: every process steps at every tick of one virtual clock
//! (no drift, no pauses), requests are answered at once or fail (a partitioned process's), and
//! a retired member's work is cancelled at once. Under it the checker asserts, at every tick,
//! that no two processes work on one key (safety), and, at the settle bound after the last
//! fault, that every key has exactly one owner among the working members, each by its own
//! view (liveness).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{at, cfg};
use crate::controller::leaderelection::{
    GetOutcome, LeaderElectionConfig, LeaderElector, LeaseRecord, LeaseRequest, WriteOutcome,
};
use crate::controller::shard::*;
use crate::rng::SplitMix64;
use core::time::Duration;

const TICK: u64 = 100;
const KEYS: usize = 24;

#[derive(Clone, Debug, PartialEq)]
struct SObj {
    hash: u64,
    label: Option<String>,
    draining: bool,
    rv: u64,
}

#[derive(Clone, Debug)]
struct SLease {
    record: LeaseRecord,
    rv: u64,
    ack: Option<u64>,
}

#[derive(Default)]
struct Server {
    rv: u64,
    leases: BTreeMap<String, SLease>,
    objects: BTreeMap<String, SObj>,
    table: Option<(ShardTable, u64)>,
}

impl Server {
    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn lease_get(&self, name: &str) -> GetOutcome {
        match self.leases.get(name) {
            None => GetOutcome::NotFound,
            Some(l) => GetOutcome::Found {
                record: l.record.clone(),
                resource_version: format!("{}", l.rv),
            },
        }
    }

    fn lease_write(
        &mut self,
        name: &str,
        req: &LeaseRequest,
        ack: Option<u64>,
        now: u64,
    ) -> WriteOutcome {
        let spec = match req {
            LeaseRequest::Create(spec) => {
                if self.leases.contains_key(name) {
                    return WriteOutcome::Conflict;
                }
                spec
            }
            LeaseRequest::Update {
                spec,
                resource_version,
            } => {
                match self.leases.get(name) {
                    Some(l) if format!("{}", l.rv) == *resource_version => {}
                    _ => return WriteOutcome::Conflict,
                }
                spec
            }
            LeaseRequest::Get => return WriteOutcome::Failed,
        };
        let rv = self.bump();
        let t = format!("{now}");
        let record = LeaseRecord {
            holder_identity: Some(spec.holder_identity.clone()),
            lease_duration_seconds: Some(spec.lease_duration_seconds),
            acquire_time: Some(spec.acquire_time.clone().unwrap_or_else(|| t.clone())),
            renew_time: Some(t),
            lease_transitions: Some(spec.lease_transitions),
        };
        self.leases.insert(
            name.into(),
            SLease {
                record: record.clone(),
                rv,
                ack,
            },
        );
        WriteOutcome::Written {
            record,
            resource_version: format!("{rv}"),
        }
    }

    fn member_leases(&self) -> Vec<MemberLease> {
        self.leases
            .iter()
            .filter_map(|(name, l)| {
                let member = name.strip_prefix("ring-m-")?;
                Some(MemberLease {
                    member: member.into(),
                    resource_version: format!("{}", l.rv),
                    held: l
                        .record
                        .holder_identity
                        .as_deref()
                        .is_some_and(|h| !h.is_empty()),
                    ack: l.ack,
                })
            })
            .collect()
    }

    fn object_write(&mut self, key: &str, rv: &str, f: impl FnOnce(&mut SObj)) -> WriteResult {
        let next = self.rv + 1;
        match self.objects.get_mut(key) {
            Some(o) if format!("{}", o.rv) == rv => {
                f(o);
                o.rv = next;
                self.rv = next;
                WriteResult::Done(format!("{next}"))
            }
            _ => WriteResult::Conflict,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Correct,
    /// The sharder skips the handover: the checker must catch it.
    NoHandover,
    /// Members acknowledge a handover before their in-flight work ends.
    EarlyAck,
}

struct Proc {
    id: usize,
    incarnation: u32,
    crashed: bool,
    partitioned: bool,
    slow: bool,
    member: Member,
    elector: LeaderElector,
    sharder: Sharder,
    view: BTreeMap<String, SObj>,
    view_every: u64,
    next_view: u64,
    next_read: u64,
    work: BTreeMap<String, u64>,
    acks: Vec<(u64, LabelAck)>,
}

struct World {
    rng: SplitMix64,
    mode: Mode,
    variant: Variant,
    now: u64,
    server: Server,
    procs: Vec<Proc>,
    sharder_writes: u64,
}

fn new_member(mode: Mode, id: usize, inc: u32, seed: u64, variant: Variant) -> Member {
    let mut c = cfg(&format!("p{id}-{inc}"), mode);
    c.seed = seed;
    let mut m = Member::new(c).unwrap();
    m.unsafe_ack_early = variant == Variant::EarlyAck;
    m
}

impl World {
    fn spawn(&mut self, slow: bool) {
        let id = self.procs.len();
        let seed = self.rng.next_u64();
        // The sharder's window: a few writes at once, or one, or more than the keys.
        let mut sc = cfg(&format!("p{id}"), self.mode);
        sc.writes_in_flight = [1, 4, 16, 64][self.rng.below(4) as usize];
        let mut sharder = Sharder::new(sc).unwrap();
        sharder.unsafe_skip_handover = self.variant == Variant::NoHandover;
        let c = cfg(&format!("p{id}"), self.mode);
        let view_every = TICK * (1 + self.rng.below(8));
        self.procs.push(Proc {
            id,
            incarnation: 0,
            crashed: false,
            partitioned: false,
            slow,
            member: new_member(self.mode, id, 0, seed, self.variant),
            elector: LeaderElector::new(LeaderElectionConfig {
                identity: c.member.clone(),
                lease_duration: c.lease_duration,
                renew_deadline: c.renew_deadline,
                retry_period: c.retry_period,
                seed,
            })
            .unwrap(),
            sharder,
            view: BTreeMap::new(),
            view_every,
            next_view: self.now,
            next_read: self.now,
            work: BTreeMap::new(),
            acks: Vec::new(),
        });
    }

    /// A crashed process comes back: a new process (new member, new election state).
    fn restart(&mut self, i: usize) {
        let slow = self.procs[i].slow;
        let inc = self.procs[i].incarnation + 1;
        let seed = self.rng.next_u64();
        let mode = self.mode;
        let variant = self.variant;
        let p = &mut self.procs[i];
        p.crashed = false;
        p.partitioned = false;
        p.incarnation = inc;
        p.member = new_member(mode, p.id, inc, seed, variant);
        let c = cfg(&format!("p{}", p.id), mode);
        p.elector = LeaderElector::new(LeaderElectionConfig {
            identity: c.member.clone(),
            lease_duration: c.lease_duration,
            renew_deadline: c.renew_deadline,
            retry_period: c.retry_period,
            seed,
        })
        .unwrap();
        p.sharder = Sharder::new(c).unwrap();
        p.sharder.unsafe_skip_handover = variant == Variant::NoHandover;
        p.view.clear();
        p.work.clear();
        p.acks.clear();
        p.slow = slow;
    }

    fn crash(&mut self, i: usize) {
        let p = &mut self.procs[i];
        p.crashed = true;
        p.work.clear();
    }

    fn step_proc(&mut self, i: usize) {
        let now = self.now;
        let t = at(now);
        let (server, rng) = (&mut self.server, &mut self.rng);
        let p = &mut self.procs[i];
        if p.crashed {
            return;
        }
        // 1. The member's own Lease.
        p.member.handle_timeout(t);
        while let Some(r) = p.member.poll_lease_request() {
            let name = p.member.config().member_lease();
            match &r.request {
                LeaseRequest::Get => {
                    let g = if p.partitioned {
                        GetOutcome::Failed
                    } else {
                        server.lease_get(&name)
                    };
                    p.member.handle_lease_get(r.id, t, g);
                }
                w => {
                    let o = if p.partitioned {
                        WriteOutcome::Failed
                    } else {
                        server.lease_write(&name, w, r.ack, now)
                    };
                    p.member.handle_lease_write(r.id, t, o);
                }
            }
        }
        while let Some(ev) = p.member.poll_event() {
            if ev == MemberEvent::Retired {
                // Cancel in-flight work, rejoin as a new member.
                p.work.clear();
                p.acks.clear();
                p.incarnation += 1;
                p.member = new_member(self.mode, p.id, p.incarnation, rng.next_u64(), self.variant);
                p.member.handle_timeout(t);
            }
        }
        // 2. The sharder's election on the ring's Lease.
        p.elector.handle_timeout(t);
        while let Some((id, req)) = p.elector.poll_request() {
            match req {
                LeaseRequest::Get => {
                    let g = if p.partitioned {
                        GetOutcome::Failed
                    } else {
                        server.lease_get("ring")
                    };
                    p.elector.handle_get(id, t, g);
                }
                w => {
                    let o = if p.partitioned {
                        WriteOutcome::Failed
                    } else {
                        server.lease_write("ring", &w, None, now)
                    };
                    p.elector.handle_write(id, t, o);
                }
            }
        }
        while p.elector.poll_event().is_some() {}
        p.sharder.set_leading(p.elector.is_leader());
        // 3. Reads: the ring's Leases and the table every retry period; the objects at this
        //    process's own pace.
        if now >= p.next_read && !p.partitioned {
            p.next_read = now + 400;
            p.sharder.handle_members(t, server.member_leases());
            if let Some((table, _)) = &server.table {
                p.member.handle_table(table.clone());
            }
        }
        if now >= p.next_view && !p.partitioned {
            p.next_view = now + p.view_every;
            let me = p.member.config().member.clone();
            for (k, o) in &server.objects {
                if p.view.get(k) == Some(o) {
                    continue;
                }
                p.view.insert(k.clone(), o.clone());
                let rv = format!("{}", o.rv);
                p.sharder
                    .handle_object(k, o.hash, o.label.as_deref(), o.draining, &rv);
                if o.label.as_deref() == Some(me.as_str()) {
                    let shard = ObjectShard {
                        hash: o.hash,
                        label: o.label.as_deref(),
                        draining: o.draining,
                    };
                    p.member.observe_object(k, shard, &rv);
                } else {
                    p.member.forget_object(k);
                }
            }
        }
        // 4. The sharder decides; its writes are performed.
        p.sharder.handle_timeout(t);
        while let Some((id, w)) = p.sharder.poll_write() {
            if p.partitioned {
                // A read fails as a write does (left unanswered, the sharder would wait for
                // it until its term ends).
                let _ = w;
                p.sharder.handle_write(id, t, WriteResult::Failed);
                continue;
            }
            match w {
                ShardWrite::ReadTable => {
                    let read = server
                        .table
                        .as_ref()
                        .map(|(tb, rv)| (tb.clone(), format!("{rv}")));
                    p.sharder.handle_table_read(id, read);
                }
                ShardWrite::PublishTable {
                    table,
                    resource_version,
                } => {
                    self.sharder_writes += 1;
                    let cur = server.table.as_ref().map(|(_, rv)| format!("{rv}"));
                    let r = if cur == resource_version {
                        let rv = server.bump();
                        server.table = Some((table, rv));
                        WriteResult::Done(format!("{rv}"))
                    } else {
                        WriteResult::Conflict
                    };
                    p.sharder.handle_write(id, t, r);
                }
                ShardWrite::Label {
                    key,
                    member,
                    resource_version,
                } => {
                    self.sharder_writes += 1;
                    let r = server.object_write(&key, &resource_version, |o| {
                        o.label = member;
                        o.draining = false;
                    });
                    p.sharder.handle_write(id, t, r);
                }
                ShardWrite::Bucket {
                    key,
                    bucket,
                    resource_version,
                } => {
                    self.sharder_writes += 1;
                    let r = server.object_write(&key, &resource_version, |o| {
                        o.label = Some(bucket_label(bucket));
                    });
                    p.sharder.handle_write(id, t, r);
                }
                ShardWrite::Drain {
                    key,
                    resource_version,
                } => {
                    self.sharder_writes += 1;
                    let r = server.object_write(&key, &resource_version, |o| o.draining = true);
                    p.sharder.handle_write(id, t, r);
                }
            }
        }
        // 5. Work: ends, label acks (slow ones late), starts.
        let ended: Vec<String> = p
            .work
            .iter()
            .filter(|(_, end)| **end <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in ended {
            p.work.remove(&k);
            p.member.finish(&k);
        }
        while let Some(a) = p.member.poll_ack() {
            let delay = if p.slow { rng.below(3000) } else { 0 };
            p.acks.push((now + delay, a));
        }
        if !p.partitioned {
            let due: Vec<LabelAck> = p
                .acks
                .iter()
                .filter(|(d, _)| *d <= now)
                .map(|(_, a)| a.clone())
                .collect();
            p.acks.retain(|(d, _)| *d > now);
            for a in due {
                let _ = server.object_write(&a.key, &a.resource_version, |o| {
                    o.label = None;
                    o.draining = false;
                });
            }
        }
        let keys: Vec<String> = p.view.keys().cloned().collect();
        for k in keys {
            if !rng.chance(0.08) {
                continue;
            }
            let o = &p.view[&k];
            if self.mode == Mode::Buckets && !labelled_with_its_bucket(o) {
                // Not in any member's watch until the sharder labels it.
                continue;
            }
            let shard = ObjectShard {
                hash: o.hash,
                label: o.label.as_deref(),
                draining: o.draining,
            };
            if p.member.try_start(&k, shard) {
                let len = if p.slow {
                    500 + rng.below(3500)
                } else {
                    100 + rng.below(900)
                };
                p.work.insert(k, now + len);
            }
        }
    }

    /// Safety: no key in flight in two processes.
    fn check_safety(&self) -> Result<(), String> {
        let mut owner: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &self.procs {
            if p.crashed {
                continue;
            }
            for k in p.work.keys() {
                if let Some(o) = owner.insert(k, p.id) {
                    return Err(format!(
                        "t={} ms: key {k} worked on by p{o} and p{} at once",
                        self.now, p.id
                    ));
                }
            }
        }
        Ok(())
    }

    /// Liveness: every key owned by exactly one working member (by its own view of a
    /// current server state), the one the ring over the working members names: the
    /// assignment is final.
    fn check_settled(&self) -> Result<(), String> {
        let working: Vec<&str> = self
            .procs
            .iter()
            .filter(|p| !p.crashed && p.member.state() == MemberState::Working)
            .map(|p| p.member.config().member.as_str())
            .collect();
        let ring = cfg("x", self.mode).ring_over(&working);
        for (k, o) in &self.server.objects {
            if self.mode == Mode::Buckets && !labelled_with_its_bucket(o) {
                return Err(format!(
                    "t={} ms: key {k} is not labelled with its bucket ({o:?})",
                    self.now
                ));
            }
            let shard = ObjectShard {
                hash: o.hash,
                label: o.label.as_deref(),
                draining: o.draining,
            };
            let owners: Vec<&str> = self
                .procs
                .iter()
                .filter(|p| !p.crashed && p.member.owns(shard))
                .map(|p| p.member.config().member.as_str())
                .collect();
            if owners.len() != 1 || ring.owner(o.hash) != Some(owners[0]) {
                return Err(format!(
                    "t={} ms: key {k} has owners {owners:?}, the ring names {:?} (object {o:?})",
                    self.now,
                    ring.owner(o.hash)
                ));
            }
        }
        Ok(())
    }
}

/// Buckets mode: the object carries its bucket's label (what members' selectors match).
fn labelled_with_its_bucket(o: &SObj) -> bool {
    o.label
        .as_deref()
        .is_some_and(|l| ring::is_bucket_label(l, bucket_of(o.hash)))
}

/// What a run measured.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// Writes the sharders made.
    writes: u64,
    /// From the last change to the final assignment, in ms.
    settled_after: u64,
}

/// One run.
fn run(seed: u64, variant: Variant) -> Result<Outcome, String> {
    let mut rng = SplitMix64::new(seed ^ 0x5eed_5eed);
    let mode = match seed % 4 {
        0 => Mode::Labels,
        1 => Mode::Filter,
        2 => Mode::Server,
        _ => Mode::Buckets,
    };
    let mut w = World {
        rng: rng.fork(),
        mode,
        variant,
        now: 0,
        server: Server::default(),
        procs: Vec::new(),
        sharder_writes: 0,
    };
    // Objects: some owned by a parent (same hash as the parent).
    for i in 0..KEYS {
        let hash = if i > 0 && rng.chance(0.3) {
            let parent = format!("uid-{}", rng.below(i as u64));
            fnv1a64(parent.as_bytes())
        } else {
            fnv1a64(format!("uid-{i}").as_bytes())
        };
        let rv = w.server.bump();
        w.server.objects.insert(
            format!("ns/o{i:02}"),
            SObj {
                hash,
                label: None,
                draining: false,
                rv,
            },
        );
    }
    let initial = 2 + rng.below(2) as usize;
    for _ in 0..initial {
        let slow = rng.chance(0.25);
        w.spawn(slow);
    }
    // Faults at random times within the fault window.
    const FAULTS_END: u64 = 14_000;
    let mut faults: Vec<(u64, u8)> = (0..(2 + rng.below(5)))
        .map(|_| (1000 + rng.below(FAULTS_END - 6000), rng.below(5) as u8))
        .collect();
    faults.sort();
    let mut heal: Vec<(u64, usize)> = Vec::new();
    let mut revive: Vec<(u64, usize)> = Vec::new();
    let c = cfg("x", mode);
    let bound = c.settle_bound(
        Duration::from_millis(800 + 400),
        Duration::from_millis(4000 + 3000),
    ) + c.lease_duration
        + c.retry_period * 3;
    let end = FAULTS_END + 2 * bound.as_millis() as u64;
    let mut last_change = 0;
    let mut settled_since: Option<u64> = None;
    let mut t = 0;
    let mut fi = 0;
    while t <= end {
        w.now = t;
        while fi < faults.len() && faults[fi].0 <= t {
            let kind = faults[fi].1;
            fi += 1;
            let live: Vec<usize> = w
                .procs
                .iter()
                .filter(|p| !p.crashed && !p.partitioned)
                .map(|p| p.id)
                .collect();
            match kind {
                // A member crashes (restarts later).
                0 if live.len() > 1 => {
                    let i = live[w.rng.below(live.len() as u64) as usize];
                    w.crash(i);
                    revive.push((t + 1000 + w.rng.below(4000), i));
                }
                // A member joins.
                1 if w.procs.len() < 6 => {
                    let slow = w.rng.chance(0.25);
                    w.spawn(slow);
                }
                // A partition from the server.
                2 if live.len() > 1 => {
                    let i = live[w.rng.below(live.len() as u64) as usize];
                    w.procs[i].partitioned = true;
                    heal.push((t + 500 + w.rng.below(3500), i));
                }
                // The sharder fails over.
                3 => {
                    if let Some(i) = live
                        .iter()
                        .copied()
                        .find(|i| w.procs[*i].elector.is_leader())
                    {
                        w.crash(i);
                        revive.push((t + 1000 + w.rng.below(4000), i));
                    }
                }
                // A member becomes slow (long work, late acks).
                _ => {
                    if let Some(&i) = live.first() {
                        w.procs[i].slow = true;
                    }
                }
            }
            last_change = t;
        }
        heal.retain(|(when, i)| {
            if *when <= t {
                w.procs[*i].partitioned = false;
                last_change = t;
                false
            } else {
                true
            }
        });
        let due: Vec<usize> = revive
            .iter()
            .filter(|(d, _)| *d <= t)
            .map(|(_, i)| *i)
            .collect();
        revive.retain(|(d, _)| *d > t);
        for i in due {
            w.restart(i);
            last_change = t;
        }
        for i in 0..w.procs.len() {
            w.step_proc(i);
        }
        w.check_safety()
            .map_err(|e| format!("seed {seed} ({mode:?}): safety: {e}"))?;
        let quiet = fi == faults.len() && heal.is_empty() && revive.is_empty();
        if quiet {
            match w.check_settled() {
                Ok(()) => {
                    let since = *settled_since.get_or_insert(t);
                    // Settled, and still so a lease duration later (a fixed point): done.
                    if t >= since + 2000 {
                        return Ok(Outcome {
                            writes: w.sharder_writes,
                            settled_after: since.saturating_sub(last_change),
                        });
                    }
                }
                Err(e) => {
                    settled_since = None;
                    if t >= last_change + bound.as_millis() as u64 {
                        return Err(format!(
                            "seed {seed} ({mode:?}): not settled {} ms after the last change at {last_change} ms: {e}",
                            bound.as_millis()
                        ));
                    }
                }
            }
        }
        t += TICK;
    }
    Err(format!("seed {seed} ({mode:?}): ran out of time"))
}

fn seeds() -> u64 {
    #[cfg(feature = "std")]
    if let Some(n) = std::env::var("INFORMER_SHARD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return n;
    }
    1000
}

#[test]
fn shard_10_sim_many_seeds_no_overlap_and_settled_within_the_bound() {
    let mut writes = 0;
    let mut worst = 0;
    let n = seeds();
    for seed in 0..n {
        match run(seed, Variant::Correct) {
            Ok(o) => {
                writes += o.writes;
                worst = worst.max(o.settled_after);
            }
            Err(e) => panic!("{e}"),
        }
    }
    #[cfg(feature = "std")]
    std::eprintln!(
        "{n} seeds: {writes} sharder writes, settled at worst {worst} ms after the last change"
    );
    // Every run wrote something (labels, drains or tables).
    assert!(writes >= n, "{writes} sharder writes over {n} seeds");
}

#[test]
fn shard_11_sim_checker_catches_a_sharder_that_skips_the_handover() {
    // Seeds cycle through labels, filter, server and buckets modes: each mode must be caught.
    for variant in [Variant::NoHandover, Variant::EarlyAck] {
        let mut caught = [0; 4];
        for seed in 0..120 {
            if run(seed, variant)
                .err()
                .is_some_and(|e| e.contains("safety"))
            {
                caught[(seed % 4) as usize] += 1;
            }
        }
        assert!(
            caught.iter().all(|c| *c > 0),
            "{variant:?}: caught per mode (labels, filter, server, buckets): {caught:?}"
        );
    }
}

#[test]
fn shard_12_sim_is_deterministic() {
    assert_eq!(run(7, Variant::Correct), run(7, Variant::Correct));
    assert_eq!(run(8, Variant::Correct), run(8, Variant::Correct));
}
