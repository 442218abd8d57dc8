//! The sharder: the member elected on the ring's Lease assigns the hash space to the live
//! members, with a handover that never lets two members own a key at once.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;

use compact_str::CompactString;

use super::membership::{MemberLease, Membership};
use super::ring::{MemberIndex, ShardTable};
use super::{Mode, ShardConfig, ShardError};
use crate::time::Instant;

/// Identifies one write the sharder asked for; its outcome carries it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriteId(pub u64);

/// A write for the runtime to perform for the sharder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardWrite {
    /// Labels mode: set `<ring>/shard=<member>` on `key` and remove `<ring>/drain` (with no
    /// member: remove both), at `resource_version`.
    Label {
        /// The object's key.
        key: String,
        /// The new owner, or none.
        member: Option<String>,
        /// The resourceVersion precondition.
        resource_version: String,
    },
    /// Labels mode: set `<ring>/drain=true` on `key`, at `resource_version`: its owner
    /// finishes and acknowledges by removing both labels.
    Drain {
        /// The object's key.
        key: String,
        /// The resourceVersion precondition.
        resource_version: String,
    },
    /// Buckets mode: set `<ring>/bucket=<bucket>` on `key`, at `resource_version` (an object
    /// not yet labelled with its bucket: once per object).
    Bucket {
        /// The object's key.
        key: String,
        /// Its bucket.
        bucket: u8,
        /// The resourceVersion precondition.
        resource_version: String,
    },
    /// Filter, server and buckets modes: read the published table (answer with
    /// [`Sharder::handle_table_read`]; a read that failed with
    /// [`Sharder::handle_write`] and [`WriteResult::Failed`]: read again after the retry
    /// period).
    ReadTable,
    /// Filter, server and buckets modes: publish `table` (create it when `resource_version` is
    /// `None`, else replace it at that resourceVersion).
    PublishTable {
        /// The next table.
        table: ShardTable,
        /// The resourceVersion precondition.
        resource_version: Option<String>,
    },
}

/// What a write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteResult {
    /// Written; the object's (or table's) new resourceVersion.
    Done(String),
    /// 409 (or 404): the object changed; decide again on its next version.
    Conflict,
    /// Anything else; tried again at the next tick.
    Failed,
}

/// One object as the sharder saw it. Its strings (and the keys of the maps holding it) are
/// inline up to 24 bytes: a resourceVersion, a member's name and most keys take no allocation
/// of their own, so tens of thousands of objects do not scatter as many small blocks over the
/// heap.
#[derive(Clone, Debug)]
struct Obj {
    hash: u64,
    label: Option<CompactString>,
    draining: bool,
    rv: CompactString,
    /// The resourceVersion a write of ours was made at: no decision until a newer one is seen.
    written_at: Option<CompactString>,
    /// An owned kind's object: relabelled without a drain.
    direct: bool,
}

#[derive(Clone, Debug)]
enum Table {
    Unknown,
    Known(ShardTable, Option<String>),
}

/// The sharder's decisions (see the [module documentation](super)). Inert unless
/// [leading](Sharder::set_leading).
#[derive(Debug)]
pub struct Sharder {
    cfg: ShardConfig,
    members: Membership,
    leading: bool,
    objects: BTreeMap<CompactString, Obj>,
    dirty: BTreeSet<CompactString>,
    live: Vec<String>,
    ring: ShardTable,
    table: Table,
    /// Writes out: the object's key and the resourceVersion decided on (none: the table).
    in_flight: BTreeMap<WriteId, Option<(CompactString, CompactString)>>,
    busy: BTreeSet<CompactString>,
    table_busy: bool,
    out: VecDeque<(WriteId, ShardWrite)>,
    next_id: u64,
    next_tick: Instant,
    writes: u64,
    /// Test hook: skip the handover (relabel or reassign at once, no drain, no wait for acks).
    /// The simulation's checker must catch it.
    pub(crate) unsafe_skip_handover: bool,
}

impl Sharder {
    /// A sharder for the ring of `cfg` (its `member` is the candidate's identity).
    pub fn new(cfg: ShardConfig) -> Result<Self, ShardError> {
        cfg.validate()?;
        Ok(Sharder {
            members: Membership::new(cfg.lease_duration),
            ring: cfg.ring_over(&[]),
            cfg,
            leading: false,
            objects: BTreeMap::new(),
            dirty: BTreeSet::new(),
            live: Vec::new(),
            table: Table::Unknown,
            in_flight: BTreeMap::new(),
            busy: BTreeSet::new(),
            table_busy: false,
            out: VecDeque::new(),
            next_id: 0,
            next_tick: Instant::ZERO,
            writes: 0,
            unsafe_skip_handover: false,
        })
    }

    /// The membership as this sharder sees it.
    pub fn membership(&self) -> &Membership {
        &self.members
    }

    /// The table known to be published (filter and server modes).
    pub fn table(&self) -> Option<&ShardTable> {
        match &self.table {
            Table::Known(t, Some(_)) => Some(t),
            _ => None,
        }
    }

    /// Writes handed out so far (labels, drains, tables).
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// True while leading.
    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// Leadership of the ring's Lease changed. A new leader forgets what it wrote before
    /// (outcomes of an earlier term are ignored) and reads the table again.
    pub fn set_leading(&mut self, leading: bool) {
        if leading == self.leading {
            return;
        }
        self.leading = leading;
        self.in_flight.clear();
        self.busy.clear();
        self.table_busy = false;
        self.out.clear();
        self.table = Table::Unknown;
        for o in self.objects.values_mut() {
            o.written_at = None;
        }
        self.dirty.extend(self.objects.keys().cloned());
    }

    /// A quorum read of the ring's member Leases at `now`.
    pub fn handle_members(&mut self, now: Instant, leases: impl IntoIterator<Item = MemberLease>) {
        self.members.observe(now, leases);
        self.refresh_live(now);
    }

    fn refresh_live(&mut self, now: Instant) {
        let live: Vec<String> = self
            .members
            .alive(now)
            .into_iter()
            .map(String::from)
            .collect();
        if live != self.live {
            let names: Vec<&str> = live.iter().map(String::as_str).collect();
            self.ring = self.cfg.ring_over(&names);
            self.live = live;
            self.dirty.extend(self.objects.keys().cloned());
        }
    }

    /// Labels and buckets modes: an object as the sharder's informer (over all objects) sees it.
    pub fn handle_object(
        &mut self,
        key: &str,
        hash: u64,
        label: Option<&str>,
        draining: bool,
        resource_version: &str,
    ) {
        self.handle(key, hash, label, draining, resource_version, false);
    }

    /// Labels mode: an object of an owned kind (not reconciled itself: its label only scopes
    /// the members' caches), relabelled straight to its owner's member without a drain.
    pub fn handle_owned_object(
        &mut self,
        key: &str,
        hash: u64,
        label: Option<&str>,
        resource_version: &str,
    ) {
        self.handle(key, hash, label, false, resource_version, true);
    }

    fn handle(
        &mut self,
        key: &str,
        hash: u64,
        label: Option<&str>,
        draining: bool,
        resource_version: &str,
        direct: bool,
    ) {
        let o = self.objects.entry(key.into()).or_insert_with(|| Obj {
            hash,
            label: None,
            draining: false,
            rv: CompactString::default(),
            written_at: None,
            direct,
        });
        o.direct = direct;
        o.hash = hash;
        o.label = label.map(CompactString::from);
        o.draining = draining;
        o.rv = resource_version.into();
        if o.written_at
            .as_deref()
            .is_some_and(|w| w != resource_version)
        {
            o.written_at = None;
        }
        self.dirty.insert(key.into());
    }

    /// Labels mode: forgets every object (the informer feeding them stopped, at the end of a
    /// term).
    pub fn forget_objects(&mut self) {
        self.objects.clear();
        self.dirty.clear();
    }

    /// The members whose Leases expired `grace` or more ago, by this observer: stopped for
    /// good (names are per incarnation), so their Leases may be deleted.
    pub fn collectable(&self, now: Instant, grace: core::time::Duration) -> Vec<String> {
        self.members
            .expired_for(now, grace)
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// Labels mode: the object was deleted.
    pub fn forget_object(&mut self, key: &str) {
        self.objects.remove(key);
        self.dirty.remove(key);
    }

    /// Filter and server modes: the published table as read (`None`: there is none yet).
    pub fn handle_table_read(&mut self, id: WriteId, read: Option<(ShardTable, String)>) {
        if self.in_flight.remove(&id).is_none() {
            return;
        }
        self.table_busy = false;
        self.table = match read {
            Some((t, rv)) => Table::Known(t, Some(rv)),
            None => Table::Known(ShardTable::default(), None),
        };
    }

    /// The outcome of the write `id` (of a [`ShardWrite::ReadTable`]: only its failure).
    pub fn handle_write(&mut self, id: WriteId, now: Instant, result: WriteResult) {
        let Some(target) = self.in_flight.remove(&id) else {
            return;
        };
        match target {
            Some((key, decided_at)) => {
                self.busy.remove(&key);
                if let Some(o) = self.objects.get_mut(&key) {
                    match &result {
                        // Nothing more for this key until a version newer than the one decided
                        // on is seen; if it was seen already (the write's answer came after the
                        // informer's event, or after a later change), decide again now.
                        WriteResult::Done(_) if o.rv == decided_at => {
                            o.written_at = Some(decided_at)
                        }
                        WriteResult::Done(_) => {
                            o.written_at = None;
                            self.dirty.insert(key);
                        }
                        _ => {
                            o.written_at = None;
                            self.dirty.insert(key);
                        }
                    }
                }
            }
            None => {
                self.table_busy = false;
                let pending = core::mem::replace(&mut self.table, Table::Unknown);
                if let (WriteResult::Done(rv), Table::Known(t, _)) = (&result, pending) {
                    self.table = Table::Known(t, Some(rv.clone()));
                }
                if matches!(result, WriteResult::Failed) {
                    self.next_tick = now + self.cfg.retry_period;
                }
            }
        }
    }

    fn emit(&mut self, key: Option<(CompactString, CompactString)>, w: ShardWrite) {
        self.next_id += 1;
        let id = WriteId(self.next_id);
        if let Some((k, _)) = &key {
            self.busy.insert(k.clone());
        }
        self.in_flight.insert(id, key);
        if !matches!(w, ShardWrite::ReadTable) {
            self.writes += 1;
        }
        self.out.push_back((id, w));
    }

    /// The clock moved to `now`: members expire, and the sharder decides.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.refresh_live(now);
        if !self.leading || !self.members.is_observed() {
            return;
        }
        match self.cfg.mode {
            Mode::Labels => self.decide_objects(),
            Mode::Filter | Mode::Server => {
                if now >= self.next_tick {
                    self.decide_table();
                }
            }
            Mode::Buckets => {
                self.decide_objects();
                if now >= self.next_tick {
                    self.decide_table();
                }
            }
        }
    }

    /// Decides on dirty objects until [`ShardConfig::writes_in_flight`] object writes are
    /// out: the rest stay dirty for a later call (after [`handle_write`](Self::handle_write)
    /// frees a slot), so the writes decided and not yet answered never pile up (a ring
    /// converging over N unlabelled objects would otherwise hand out N writes at once, and
    /// hold each as a write, an in-flight entry and a busy key until it is answered).
    fn decide_objects(&mut self) {
        let window = self.cfg.writes_in_flight.max(1);
        let mut skipped = Vec::new();
        while self.busy.len() < window {
            let Some(key) = self.dirty.pop_first() else {
                break;
            };
            if self.busy.contains(&key) {
                // Decided again once its write is answered.
                skipped.push(key);
                continue;
            }
            let Some(o) = self.objects.get(&key) else {
                continue;
            };
            if o.written_at.is_some() {
                continue;
            }
            let decided_at = o.rv.clone();
            let write = match self.cfg.mode {
                Mode::Buckets => Self::bucket_write(&key, o),
                _ => self.label_write(&key, o),
            };
            if let Some(w) = write {
                self.emit(Some((key, decided_at)), w);
            }
        }
        self.dirty.extend(skipped);
    }

    /// Buckets mode: an object not labelled with its bucket gets it (once: an object's bucket
    /// never changes; members come and go by the table alone).
    fn bucket_write(key: &str, o: &Obj) -> Option<ShardWrite> {
        let bucket = super::ring::bucket_of(o.hash);
        let labelled = o
            .label
            .as_deref()
            .is_some_and(|l| super::ring::is_bucket_label(l, bucket));
        (!labelled).then(|| ShardWrite::Bucket {
            key: key.into(),
            bucket,
            resource_version: String::from(o.rv.as_str()),
        })
    }

    /// Labels mode: label an unlabelled object for its ring owner, drain one moving between
    /// live members, relabel one whose owner is gone (or of an owned kind) at once.
    fn label_write(&self, key: &str, o: &Obj) -> Option<ShardWrite> {
        let target = self.ring.owner(o.hash);
        let rv = String::from(o.rv.as_str());
        match o.label.as_deref() {
            None => target.map(|t| ShardWrite::Label {
                key: key.into(),
                member: Some(t.into()),
                resource_version: rv,
            }),
            Some(cur) if Some(cur) == target && !o.draining => None,
            Some(cur)
                if o.direct || !self.live.iter().any(|m| m == cur) || self.unsafe_skip_handover =>
            {
                // Its owner is gone (it stopped before anyone could see it gone), or it is
                // not reconciled itself: reassign at once.
                Some(ShardWrite::Label {
                    key: key.into(),
                    member: target.map(String::from),
                    resource_version: rv,
                })
            }
            Some(_) if !o.draining => Some(ShardWrite::Drain {
                key: key.into(),
                resource_version: rv,
            }),
            // Draining: its owner acknowledges by removing the labels.
            Some(_) => None,
        }
    }

    fn decide_table(&mut self) {
        if self.table_busy {
            return;
        }
        let (cur, rv) = match &self.table {
            Table::Unknown => {
                self.table_busy = true;
                self.emit(None, ShardWrite::ReadTable);
                return;
            }
            Table::Known(t, rv) => (t, rv.clone()),
        };
        if self.live.is_empty() {
            return;
        }
        // A change only once every live member applied the current table: then no live
        // member works on anything the current table does not give it.
        let all_acked = cur.version == 0
            || self
                .live
                .iter()
                .all(|m| self.members.ack(m).is_some_and(|a| a >= cur.version));
        if !all_acked && !self.unsafe_skip_handover {
            return;
        }
        let next = self.next_table(cur);
        if next.members == cur.members && next.same_assignment(cur) && rv.is_some() {
            return;
        }
        self.table = Table::Known(next.clone(), rv.clone());
        self.table_busy = true;
        self.emit(
            None,
            ShardWrite::PublishTable {
                table: next,
                resource_version: rv,
            },
        );
    }

    /// The next table: a range keeps its owner where the ring agrees, goes to the ring's
    /// owner where it had none or its owner is gone, and has none (its owner drains it) where
    /// it moves between two live members.
    fn next_table(&self, cur: &ShardTable) -> ShardTable {
        let target = &self.ring;
        let mut starts: Vec<u64> = cur
            .segments
            .iter()
            .chain(target.segments.iter())
            .map(|(s, _)| *s)
            .collect();
        starts.sort_unstable();
        starts.dedup();
        let mut segments: Vec<(u64, Option<MemberIndex>)> = Vec::with_capacity(starts.len());
        for s in starts {
            let now_owner = cur.owner(s);
            let to = target.owner(s);
            let owner = if now_owner == to
                || self.unsafe_skip_handover
                || now_owner.is_none_or(|o| !self.live.iter().any(|m| m == o))
            {
                to
            } else {
                None
            };
            let idx = owner.and_then(|o| {
                target
                    .members
                    .binary_search_by(|m| m.as_str().cmp(o))
                    .ok()
                    .map(|i| i as MemberIndex)
            });
            segments.push((s, idx));
        }
        segments.dedup_by(|b, a| a.1 == b.1);
        ShardTable {
            version: cur.version + 1,
            members: target.members.clone(),
            segments,
        }
    }

    /// The next write to perform.
    pub fn poll_write(&mut self) -> Option<(WriteId, ShardWrite)> {
        self.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: a member's expiry, or the
    /// next try after a failed table write.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let mut t = self.members.next_expiry(now);
        if self.leading && self.next_tick > now {
            t = Some(t.map_or(self.next_tick, |x| x.min(self.next_tick)));
        }
        t
    }
}
