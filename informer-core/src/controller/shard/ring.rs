//! The hash, the ranges and the ring: KEP-5866-compatible partitioning of the 64-bit hash space.
//!
//! What was matched against KEP-5866 (server-side sharded list and watch, Kubernetes 1.36+, and
//! its `k8s.io/apimachinery/pkg/sharding` package): the hash is 64-bit FNV-1a (offset basis
//! 14695981039346656037, prime 1099511628211) over the bytes of one metadata field,
//! `object.metadata.uid` or `object.metadata.namespace`; a range is
//! `shardRange(<field path>, '<start>', '<end>')` with `start` inclusive and `end` exclusive,
//! both `0x`-prefixed lowercase hex of 16 digits, the upper bound `0x10000000000000000` (2^64)
//! having 17; several ranges are joined with `||`. [`ShardTable::selector`] writes exactly that,
//! so a member's ranges can be sent as a `shardSelector` as they are.
//!
//! One difference is deliberate: an object of the controller's *owned* kinds hashes by its
//! controller owner's uid (so a child lands on its parent's member), which a server cannot
//! evaluate; the server mode therefore scopes the primary kind on the server (a primary object
//! hashes by its own uid, controller owner or not) and filters owned kinds in the client.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// 64-bit FNV-1a of `bytes` (KEP-5866's hash).
pub const fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// Which field an object is hashed by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HashBy {
    /// `metadata.uid`, or the controller owner's uid for an owned object.
    #[default]
    Uid,
    /// `metadata.namespace`: a whole namespace lands on one member.
    Namespace,
}

impl HashBy {
    /// The field path KEP-5866 names (`object.metadata.uid`, `object.metadata.namespace`).
    pub const fn field_path(self) -> &'static str {
        match self {
            HashBy::Uid => "object.metadata.uid",
            HashBy::Namespace => "object.metadata.namespace",
        }
    }

    /// The hash of an object with this `uid`, `namespace` and controller owner's uid.
    pub fn hash(self, uid: &str, namespace: &str, controller_owner_uid: Option<&str>) -> u64 {
        match self {
            HashBy::Uid => fnv1a64(controller_owner_uid.unwrap_or(uid).as_bytes()),
            HashBy::Namespace => fnv1a64(namespace.as_bytes()),
        }
    }
}

/// A range `[start, end)` of the hash space; `end` is at most 2^64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShardRange {
    /// Inclusive lower bound.
    pub start: u64,
    /// Exclusive upper bound (≤ 2^64).
    pub end: u128,
}

impl ShardRange {
    /// True when `hash` is in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }

    /// The range's share of the hash space, in `[0, 1]`.
    pub fn fraction(&self) -> f64 {
        (self.end - u128::from(self.start)) as f64 / 18_446_744_073_709_551_616.0
    }

    /// KEP-5866's `shardRange(<field>, '0x…', '0x…')`.
    pub fn kep(&self, by: HashBy) -> String {
        format!(
            "shardRange({}, '0x{:016x}', '0x{:016x}')",
            by.field_path(),
            self.start,
            self.end
        )
    }
}

/// Index of a member in a [`ShardTable`]'s member list.
pub type MemberIndex = u16;

/// Buckets mode: the hash space is cut into `2^BUCKET_BITS` buckets, by a hash's top bits.
pub const BUCKET_BITS: u32 = 8;

/// Buckets mode: how many buckets (256).
pub const BUCKETS: usize = 1 << BUCKET_BITS;

/// The bucket `hash` falls in: its top [`BUCKET_BITS`] bits.
pub const fn bucket_of(hash: u64) -> u8 {
    (hash >> (64 - BUCKET_BITS)) as u8
}

/// A bucket's label value: two lowercase hex digits (`00` … `ff`).
pub fn bucket_label(bucket: u8) -> String {
    format!("{bucket:02x}")
}

/// Whether `label` is `bucket`'s label value ([`bucket_label`]), without building it.
pub fn is_bucket_label(label: &str, bucket: u8) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    label.as_bytes() == [HEX[usize::from(bucket >> 4)], HEX[usize::from(bucket & 15)]]
}

/// The first hash of `bucket`.
const fn bucket_start(bucket: usize) -> u64 {
    (bucket as u64) << (64 - BUCKET_BITS)
}

/// An assignment of the whole hash space: segments, each owned by one member or by none
/// (a range being handed over). Versioned; the [filter mode](super) publishes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardTable {
    /// Incremented by every change the sharder publishes.
    pub version: u64,
    /// The members, sorted.
    pub members: Vec<String>,
    /// Segment starts (the first is 0, increasing) and owners; a segment ends where the next
    /// starts, the last at 2^64.
    pub segments: Vec<(u64, Option<MemberIndex>)>,
}

/// A ring point's label: `<member>#<i>` for virtual node `i`.
fn point(member: &str, i: u32) -> u64 {
    let mut buf = [0u8; 10];
    let mut n = i;
    let mut len = 0;
    loop {
        buf[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let step = |h: u64, b: u8| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    for &b in member.as_bytes() {
        h = step(h, b);
    }
    h = step(h, b'#');
    for &b in buf[..len].iter().rev() {
        h = step(h, b);
    }
    // FNV-1a of short, similar labels leaves the high bits poorly mixed (the ranges follow
    // the high bits): finish with SplitMix64's mixer so the points spread evenly.
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

impl ShardTable {
    /// The consistent-hash ring over `members` with `vnodes` virtual nodes each: member `m`
    /// has the points `mix(fnv1a64("m#0")) … mix(fnv1a64("m#<vnodes-1>"))` (`mix`:
    /// SplitMix64's finalizer), and a hash belongs to the
    /// first point at or after it (wrapping). Adding or removing a member moves only the ranges
    /// next to its points. Version 0; duplicate names count once.
    pub fn ring(members: &[&str], vnodes: u32) -> ShardTable {
        let mut names: Vec<String> = members.iter().map(|m| String::from(*m)).collect();
        names.sort();
        names.dedup();
        let names: Vec<String> = names
            .into_iter()
            .take(usize::from(MemberIndex::MAX))
            .collect();
        let mut points: Vec<(u64, MemberIndex)> = Vec::new();
        for (i, m) in names.iter().enumerate() {
            for v in 0..vnodes.max(1) {
                points.push((point(m, v), i as MemberIndex));
            }
        }
        points.sort_unstable();
        points.dedup_by_key(|p| p.0);
        let mut segments: Vec<(u64, Option<MemberIndex>)> = Vec::new();
        if let (Some(first), Some(_)) = (points.first(), points.last()) {
            segments.push((0, Some(first.1)));
            for w in points.windows(2) {
                // (w0, w1] belongs to w1.
                if let Some(s) = w[0].0.checked_add(1) {
                    segments.push((s, Some(w[1].1)));
                }
            }
            let last = points[points.len() - 1].0;
            if let Some(s) = last.checked_add(1) {
                segments.push((s, Some(first.1)));
            }
        } else {
            segments.push((0, None));
        }
        let mut t = ShardTable {
            version: 0,
            members: names,
            segments,
        };
        t.merge();
        t
    }

    /// The same assignment in whole buckets (buckets mode): each bucket goes to the owner of
    /// its first hash, so every range starts and ends on a bucket's edge. Versions and
    /// members are kept.
    pub fn bucketed(&self) -> ShardTable {
        let mut segments: Vec<(u64, Option<MemberIndex>)> = (0..BUCKETS)
            .map(|b| {
                let start = bucket_start(b);
                (
                    start,
                    self.segments.get(self.segment_of(start)).and_then(|s| s.1),
                )
            })
            .collect();
        segments.dedup_by(|b, a| a.1 == b.1);
        ShardTable {
            version: self.version,
            members: self.members.clone(),
            segments,
        }
    }

    /// The buckets wholly owned by `member` (buckets mode: a table of whole buckets), in
    /// order.
    pub fn buckets_of(&self, member: &str) -> Vec<u8> {
        (0..BUCKETS)
            .filter(|&b| {
                let last = bucket_start(b) | (u64::MAX >> BUCKET_BITS);
                self.owner(bucket_start(b)) == Some(member) && self.owner(last) == Some(member)
            })
            .map(|b| b as u8)
            .collect()
    }

    /// Joins neighbouring segments with one owner.
    fn merge(&mut self) {
        self.segments.dedup_by(|b, a| a.1 == b.1);
    }

    fn segment_of(&self, hash: u64) -> usize {
        self.segments
            .partition_point(|(s, _)| *s <= hash)
            .saturating_sub(1)
    }

    /// The owner of `hash`, if any.
    pub fn owner(&self, hash: u64) -> Option<&str> {
        let (_, o) = self.segments.get(self.segment_of(hash))?;
        o.and_then(|i| self.members.get(usize::from(i)))
            .map(String::as_str)
    }

    /// True when `member` is in the member list.
    pub fn has_member(&self, member: &str) -> bool {
        self.members
            .binary_search_by(|m| m.as_str().cmp(member))
            .is_ok()
    }

    /// The ranges `member` owns, merged.
    pub fn ranges_of(&self, member: &str) -> Vec<ShardRange> {
        let Ok(idx) = self.members.binary_search_by(|m| m.as_str().cmp(member)) else {
            return Vec::new();
        };
        let mut out: Vec<ShardRange> = Vec::new();
        for (i, (start, o)) in self.segments.iter().enumerate() {
            if *o != Some(idx as MemberIndex) {
                continue;
            }
            let end = self
                .segments
                .get(i + 1)
                .map_or(1u128 << 64, |(s, _)| u128::from(*s));
            match out.last_mut() {
                Some(r) if r.end == u128::from(*start) => r.end = end,
                _ => out.push(ShardRange { start: *start, end }),
            }
        }
        out
    }

    /// True when some segment has no owner (a handover is under way).
    pub fn has_unowned(&self) -> bool {
        self.segments.iter().any(|(_, o)| o.is_none())
    }

    /// Same owners everywhere as `other` (versions aside).
    pub fn same_assignment(&self, other: &ShardTable) -> bool {
        let mut starts: Vec<u64> = self
            .segments
            .iter()
            .chain(other.segments.iter())
            .map(|(s, _)| *s)
            .collect();
        starts.sort_unstable();
        starts.dedup();
        starts.iter().all(|s| self.owner(*s) == other.owner(*s))
    }

    /// KEP-5866's `shardSelector` for `member`'s ranges (`None` when it owns nothing).
    pub fn selector(&self, member: &str, by: HashBy) -> Option<String> {
        let ranges = self.ranges_of(member);
        if ranges.is_empty() {
            return None;
        }
        let parts: Vec<String> = ranges.iter().map(|r| r.kep(by)).collect();
        Some(parts.join(" || "))
    }

    /// The table as text for a Lease annotation:
    /// `v=<version>;m=<member>,…;s=<hex start>:<member index or ->,…`.
    pub fn encode(&self) -> String {
        let mut s = format!("v={};m={};s=", self.version, self.members.join(","));
        for (i, (start, o)) in self.segments.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            match o {
                Some(o) => s.push_str(&format!("{start:x}:{o}")),
                None => s.push_str(&format!("{start:x}:-")),
            }
        }
        s
    }

    /// Parses [`encode`](Self::encode)'s text; anything else is a [`TableError`].
    pub fn decode(text: &str) -> Result<ShardTable, TableError> {
        let mut parts = text.split(';');
        let v = parts
            .next()
            .and_then(|p| p.strip_prefix("v="))
            .ok_or(TableError::Syntax("missing v="))?;
        let version: u64 = v.parse().map_err(|_| TableError::Syntax("bad version"))?;
        let m = parts
            .next()
            .and_then(|p| p.strip_prefix("m="))
            .ok_or(TableError::Syntax("missing m="))?;
        let members: Vec<String> = if m.is_empty() {
            Vec::new()
        } else {
            m.split(',').map(String::from).collect()
        };
        if members.windows(2).any(|w| w[0] >= w[1]) || members.iter().any(String::is_empty) {
            return Err(TableError::Invalid("members not sorted and distinct"));
        }
        if members.len() > usize::from(MemberIndex::MAX) {
            return Err(TableError::Invalid("too many members"));
        }
        let s = parts
            .next()
            .and_then(|p| p.strip_prefix("s="))
            .ok_or(TableError::Syntax("missing s="))?;
        if parts.next().is_some() {
            return Err(TableError::Syntax("trailing fields"));
        }
        let mut segments = Vec::new();
        for seg in s.split(',') {
            let (start, owner) = seg
                .split_once(':')
                .ok_or(TableError::Syntax("segment without ':'"))?;
            let start =
                u64::from_str_radix(start, 16).map_err(|_| TableError::Syntax("bad start"))?;
            let owner = if owner == "-" {
                None
            } else {
                let o: MemberIndex = owner.parse().map_err(|_| TableError::Syntax("bad owner"))?;
                if usize::from(o) >= members.len() {
                    return Err(TableError::Invalid("owner index out of range"));
                }
                Some(o)
            };
            segments.push((start, owner));
        }
        if segments.first().map(|s| s.0) != Some(0) {
            return Err(TableError::Invalid("the first segment must start at 0"));
        }
        if segments.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(TableError::Invalid("segment starts must increase"));
        }
        Ok(ShardTable {
            version,
            members,
            segments,
        })
    }
}

/// A shard table's text that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableError {
    /// Not in the encoded form.
    Syntax(&'static str),
    /// Well-formed but inconsistent.
    Invalid(&'static str),
}

impl core::fmt::Display for TableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TableError::Syntax(m) => write!(f, "shard table: syntax: {m}"),
            TableError::Invalid(m) => write!(f, "shard table: invalid: {m}"),
        }
    }
}

impl core::error::Error for TableError {}
