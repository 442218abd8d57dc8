//! Cache snapshots for warm restarts: an informer's objects and the resourceVersion they are
//! consistent with, as bytes a new informer resumes from instead of listing the cluster.
//!
//! The core does no file I/O: [`SharedIndexInformer::snapshot`](crate::SharedIndexInformer::snapshot)
//! hands out a [`Snapshot`] (shared objects and the last synced resourceVersion),
//! [`Snapshot::encode`] turns it into bytes, [`Snapshot::decode`] back, and
//! [`SharedIndexInformer::resume`](crate::SharedIndexInformer::resume) takes one in before
//! start. Writing the bytes to a file (atomically) is the runtime's business.
//!
//! # Format (version 3, integers little-endian)
//!
//! ```text
//! magic        8 bytes  "INFRSNAP"
//! version      u32      FORMAT_VERSION
//! header_len   u32      length of the header
//! header       resource (str), label selector (opt str), field selector (opt str),
//!              shard selector (opt str), resourceVersion (str), object count (u64),
//!              codec (str)
//!              str = u32 length + UTF-8; opt str = u8 0 (absent) | u8 1 + str
//! body_len     u64
//! body         one frame per object: u32 length + the object as its codec writes it
//! shared_len   u64
//! shared       the strings objects share: u32 count, then one str each
//! checksum     u64      over every byte before it
//! ```
//!
//! How an object is written is its type's [`SnapshotCodec`]: compact JSON by default, a binary
//! encoding for [`DynamicObject`](crate::object::DynamicObject) and
//! [`PartialObjectMetadata`](crate::object::PartialObjectMetadata) that keeps their raw JSON parts
//! verbatim and stores `apiVersion`, `kind` and namespaces once (in `shared`). The codec's
//! name is in the header: a snapshot written by another codec is refused. Earlier versions
//! (1: every object as JSON, no codec name, a one-lane checksum; 2: no shard selector) are
//! refused as an unknown format: the informer lists once and writes version 3 from then on.
//!
//! The frames make the body splittable without decoding it; the checksum makes corruption
//! detectable. The shared strings and the checksum come after the body, and the header says
//! where the body ends: a reader of a file reads its start and its tail, then decodes the body
//! as it reads it ([`SnapshotStream`]), never holding the whole file.
//!
//! # Decoding is all-or-nothing
//!
//! [`Snapshot::decode`] checks everything — structure, checksum, identity (resource and
//! selectors), every object decodable and keyable, no key twice, the count — before it returns
//! a snapshot; any failure is a [`SnapshotError`] and nothing is loaded.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use crate::hash::HashSet;
use crate::object::Key;
use crate::protocol::Selectors;

mod codec;
mod stream;

pub use codec::{ObjectReader, ObjectWriter, SnapshotCodec};
pub use stream::{FrameDecoder, SnapshotLayout, SnapshotStream};

/// The snapshot format this version writes and reads.
pub const FORMAT_VERSION: u32 = 3;

/// The first bytes of every snapshot.
pub const MAGIC: [u8; 8] = *b"INFRSNAP";

/// What a snapshot is a snapshot of: a resource and the selectors it was listed with. A
/// snapshot is only resumed by an informer with the same identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotIdentity {
    /// The resource, as the caller names it (the runtimes use
    /// `group/version/resource` plus the namespace, e.g. `/v1/configmaps@default`).
    pub resource: String,
    /// The selectors of every list and watch.
    pub selectors: Selectors,
}

/// Why a snapshot could not be encoded or was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The bytes end before the snapshot does (a partly written or cut file).
    Truncated,
    /// The bytes are not a valid snapshot (wrong magic, checksum mismatch, an object that does
    /// not decode, …); the reason says which.
    Corrupt(String),
    /// A snapshot format this version does not know.
    UnknownFormat(u32),
    /// A snapshot of another resource.
    OtherResource {
        /// The resource the informer watches.
        expected: String,
        /// The resource in the snapshot.
        found: String,
    },
    /// A snapshot of the same resource listed with other selectors.
    OtherSelectors,
    /// A snapshot whose objects were written by another [`SnapshotCodec`] (another object
    /// type, or another version of its encoding).
    OtherCodec {
        /// The codec of the informer's object type.
        expected: String,
        /// The codec in the snapshot.
        found: String,
    },
    /// An object could not be serialized.
    Encode(String),
    /// The informer has nothing to snapshot yet (it has not synced).
    NotSynced,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Truncated => f.write_str("snapshot truncated"),
            SnapshotError::Corrupt(why) => write!(f, "snapshot corrupt: {why}"),
            SnapshotError::UnknownFormat(v) => write!(f, "unknown snapshot format version {v}"),
            SnapshotError::OtherResource { expected, found } => {
                write!(f, "snapshot of resource {found:?}, expected {expected:?}")
            }
            SnapshotError::OtherSelectors => f.write_str("snapshot taken with other selectors"),
            SnapshotError::OtherCodec { expected, found } => {
                write!(
                    f,
                    "snapshot objects encoded as {found:?}, expected {expected:?}"
                )
            }
            SnapshotError::Encode(why) => write!(f, "object not serializable: {why}"),
            SnapshotError::NotSynced => f.write_str("the informer has not synced yet"),
        }
    }
}

impl core::error::Error for SnapshotError {}

/// A consistent view of an informer's cache: every object it held and the resourceVersion
/// they are the state at.
pub struct Snapshot<K> {
    /// The last synced resourceVersion; a resumed informer watches from here.
    pub resource_version: String,
    /// The objects (shared with the cache they came from).
    pub items: Vec<Arc<K>>,
}

impl<K> fmt::Debug for Snapshot<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("resource_version", &self.resource_version)
            .field("items", &self.items.len())
            .finish()
    }
}

impl<K: SnapshotCodec> Snapshot<K> {
    /// Appends the encoded snapshot to `out`. On error `out` is left as it was.
    pub fn encode(
        &self,
        identity: &SnapshotIdentity,
        out: &mut Vec<u8>,
    ) -> Result<(), SnapshotError> {
        let start = out.len();
        let r = self.encode_inner(identity, out, start);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    fn encode_inner(
        &self,
        identity: &SnapshotIdentity,
        out: &mut Vec<u8>,
        start: usize,
    ) -> Result<(), SnapshotError> {
        let mut header = Vec::new();
        put_str(&mut header, &identity.resource)?;
        put_opt_str(&mut header, identity.selectors.label.as_deref())?;
        put_opt_str(&mut header, identity.selectors.field.as_deref())?;
        put_opt_str(&mut header, identity.selectors.shard.as_deref())?;
        put_str(&mut header, &self.resource_version)?;
        header.extend_from_slice(&(self.items.len() as u64).to_le_bytes());
        put_str(&mut header, K::CODEC)?;

        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&len_u32(header.len())?.to_le_bytes());
        out.extend_from_slice(&header);
        let body_len_at = out.len();
        out.extend_from_slice(&0u64.to_le_bytes());
        let body_start = out.len();
        let mut shared = codec::SharedStrings::default();
        for obj in &self.items {
            let frame_at = out.len();
            out.extend_from_slice(&0u32.to_le_bytes());
            obj.encode_object(&mut ObjectWriter::new(out, &mut shared))?;
            let n = len_u32(out.len() - frame_at - 4)?;
            out[frame_at..frame_at + 4].copy_from_slice(&n.to_le_bytes());
        }
        let body_len = (out.len() - body_start) as u64;
        out[body_len_at..body_start].copy_from_slice(&body_len.to_le_bytes());
        let mut table = Vec::new();
        table.extend_from_slice(&len_u32(shared.list.len())?.to_le_bytes());
        for s in &shared.list {
            put_str(&mut table, s)?;
        }
        out.extend_from_slice(&(table.len() as u64).to_le_bytes());
        out.extend_from_slice(&table);
        let sum = checksum(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(())
    }

    /// Decodes a snapshot, refusing it unless it is whole, intact, of format
    /// [`FORMAT_VERSION`], written by `K`'s codec and of `expected` (same resource, same
    /// selectors).
    pub fn decode(bytes: &[u8], expected: &SnapshotIdentity) -> Result<Self, SnapshotError> {
        let frames = Frames::parse::<K>(bytes, expected)?;
        let mut decoded = Decoded::with_capacity(frames.count);
        frames.decode_into(frames.body, &mut |o| decoded.push(o))?;
        frames.finish(decoded)
    }

    /// [`decode`](Self::decode) with the objects decoded by `parts` workers at once: `run` is
    /// handed one job per part (each decodes a slice of the frames) and must run them all,
    /// e.g. each on a thread of its own, before it returns. The result is the same as
    /// `decode`'s, errors included.
    pub fn decode_parallel(
        bytes: &[u8],
        expected: &SnapshotIdentity,
        parts: usize,
        run: impl FnOnce(&mut [DecodeJob<'_, K>]),
    ) -> Result<Self, SnapshotError> {
        let frames = Frames::parse::<K>(bytes, expected)?;
        let mut jobs: Vec<DecodeJob<'_, K>> = frames
            .split(parts.max(1))
            .map(|part| DecodeJob {
                frames: &frames,
                part,
                out: None,
            })
            .collect();
        run(&mut jobs);
        let mut decoded = Decoded::with_capacity(frames.count);
        for job in jobs {
            match job.out {
                Some(Ok(part)) => part.into_iter().for_each(|o| decoded.push(o)),
                Some(Err(e)) => return Err(e),
                None => frames.decode_into(job.part, &mut |o| decoded.push(o))?,
            }
        }
        frames.finish(decoded)
    }
}

/// A part of a snapshot's objects to decode (see [`Snapshot::decode_parallel`]).
pub struct DecodeJob<'a, K> {
    frames: &'a Frames<'a>,
    part: &'a [u8],
    out: Option<Result<Vec<Arc<K>>, SnapshotError>>,
}

impl<K: SnapshotCodec> DecodeJob<'_, K> {
    /// Decodes this part (a job not run is decoded by `decode_parallel` itself).
    pub fn run(&mut self) {
        let mut items = Vec::new();
        let r = self.frames.decode_into(self.part, &mut |o| items.push(o));
        self.out = Some(r.map(|()| items));
    }
}

impl<K> fmt::Debug for DecodeJob<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeJob")
            .field("bytes", &self.part.len())
            .finish_non_exhaustive()
    }
}

/// A parsed, checked snapshot whose objects are still to decode.
struct Frames<'a> {
    resource_version: &'a str,
    count: usize,
    body: &'a [u8],
    shared: Vec<&'a str>,
}

impl<'a> Frames<'a> {
    fn parse<K: SnapshotCodec>(
        bytes: &'a [u8],
        expected: &SnapshotIdentity,
    ) -> Result<Self, SnapshotError> {
        let parsed = parse(bytes)?;
        parsed.header.check::<K>(expected)?;
        let count = usize::try_from(parsed.header.count)
            .map_err(|_| SnapshotError::Corrupt("object count too large".into()))?;
        // Every frame takes at least 4 bytes: a count beyond that is a lie, not a reason to
        // reserve memory.
        if count > parsed.body.len() / 4 {
            return Err(corrupt("object count does not match the body"));
        }
        let shared = shared_strings(parsed.shared)?;
        Ok(Frames {
            resource_version: parsed.header.resource_version,
            count,
            body: parsed.body,
            shared,
        })
    }

    /// Up to `parts` runs of whole frames covering the body, of about equal size.
    fn split(&self, parts: usize) -> impl Iterator<Item = &'a [u8]> + '_ {
        let target = self.body.len() / parts + 1;
        let mut rest = self.body;
        core::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let mut at = 0;
            while at < rest.len() && at < target {
                let Some(len) = rest.get(at..at + 4) else {
                    at = rest.len();
                    break;
                };
                let mut w = [0u8; 4];
                w.copy_from_slice(len);
                at = at
                    .saturating_add(4)
                    .saturating_add(u32::from_le_bytes(w) as usize);
            }
            let at = at.min(rest.len());
            let (part, tail) = rest.split_at(at);
            rest = tail;
            Some(part)
        })
    }

    /// Decodes the frames of `part` (whole frames of the body), handing each object to `push`.
    fn decode_into<K: SnapshotCodec>(
        &self,
        part: &[u8],
        push: &mut impl FnMut(Arc<K>),
    ) -> Result<(), SnapshotError> {
        let mut r = Reader(part);
        while !r.0.is_empty() {
            let n = r.u32()? as usize;
            let frame = r.take(n)?;
            push(Self::decode_frame(frame, &self.shared)?);
        }
        Ok(())
    }

    /// Decodes one object from its frame's bytes (the length prefix left out).
    fn decode_frame<K: SnapshotCodec>(
        frame: &[u8],
        shared: &[&str],
    ) -> Result<Arc<K>, SnapshotError> {
        let mut o = ObjectReader::new(frame, shared);
        let obj = K::decode_object(&mut o)?;
        if !o.is_empty() {
            return Err(corrupt("bytes after an object in its frame"));
        }
        if crate::object::key::invalid_key(&obj).is_some() {
            return Err(corrupt("an object cannot be keyed"));
        }
        Ok(Arc::new(obj))
    }

    /// Checks the count and that no key appears twice.
    fn finish<K: SnapshotCodec>(&self, decoded: Decoded<K>) -> Result<Snapshot<K>, SnapshotError> {
        let Decoded {
            items, mut hashes, ..
        } = decoded;
        if items.len() != self.count {
            return Err(corrupt("object count does not match the body"));
        }
        // The keys' hashes, sorted, tell whether any two keys may be equal without touching
        // the objects again; only then are the keys themselves compared.
        hashes.sort_unstable();
        if hashes.windows(2).any(|w| w[0] == w[1]) {
            let mut keys: HashSet<crate::object::KeyRef<'_>> =
                HashSet::with_capacity_and_hasher(items.len(), Default::default());
            for o in &items {
                if !keys.insert(o.key_ref()) {
                    return Err(SnapshotError::Corrupt(alloc::format!(
                        "key {} appears twice",
                        Key::of(&**o)
                    )));
                }
            }
        }
        Ok(Snapshot {
            resource_version: self.resource_version.into(),
            items,
        })
    }
}

/// Decoded objects and the hashes of their keys, taken as each object is decoded (while it is
/// in the cache): the duplicate check then sorts numbers instead of hashing every object again.
pub(crate) struct Decoded<K> {
    items: Vec<Arc<K>>,
    hashes: Vec<u64>,
    hasher: crate::hash::HashState,
}

impl<K> Decoded<K> {
    fn with_capacity(n: usize) -> Self {
        Decoded {
            items: Vec::with_capacity(n),
            hashes: Vec::with_capacity(n),
            hasher: Default::default(),
        }
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

impl<K: crate::object::Object> Decoded<K> {
    fn push(&mut self, obj: Arc<K>) {
        use core::hash::BuildHasher;
        self.hashes.push(self.hasher.hash_one(obj.key_ref()));
        self.items.push(obj);
    }
}

/// Reads the identity of a snapshot without decoding its objects (the checksum is verified).
pub fn peek_identity(bytes: &[u8]) -> Result<(SnapshotIdentity, String), SnapshotError> {
    let p = parse(bytes)?.header;
    Ok((
        SnapshotIdentity {
            resource: p.resource.into(),
            selectors: Selectors {
                label: p.label.map(Into::into),
                field: p.field.map(Into::into),
                shard: p.shard.map(Into::into),
            },
        },
        p.resource_version.into(),
    ))
}

/// A snapshot's header fields.
struct Header<'a> {
    resource: &'a str,
    label: Option<&'a str>,
    field: Option<&'a str>,
    shard: Option<&'a str>,
    resource_version: &'a str,
    count: u64,
    codec: &'a str,
}

impl<'a> Header<'a> {
    /// Reads the fields from the whole header.
    fn read(h: &mut Reader<'a>) -> Result<Self, SnapshotError> {
        let header = Header {
            resource: h.str()?,
            label: h.opt_str()?,
            field: h.opt_str()?,
            shard: h.opt_str()?,
            resource_version: h.str()?,
            count: h.u64()?,
            codec: h.str()?,
        };
        if !h.0.is_empty() {
            return Err(corrupt("header longer than its fields"));
        }
        Ok(header)
    }

    /// Refuses a snapshot of another identity or codec.
    fn check<K: SnapshotCodec>(&self, expected: &SnapshotIdentity) -> Result<(), SnapshotError> {
        if self.resource != expected.resource {
            return Err(SnapshotError::OtherResource {
                expected: expected.resource.clone(),
                found: self.resource.into(),
            });
        }
        if self.label != expected.selectors.label.as_deref()
            || self.field != expected.selectors.field.as_deref()
            || self.shard != expected.selectors.shard.as_deref()
        {
            return Err(SnapshotError::OtherSelectors);
        }
        if self.codec != K::CODEC {
            return Err(SnapshotError::OtherCodec {
                expected: K::CODEC.into(),
                found: self.codec.into(),
            });
        }
        Ok(())
    }
}

/// The table of shared strings.
fn shared_strings(table: &[u8]) -> Result<Vec<&str>, SnapshotError> {
    let mut t = Reader(table);
    let n = t.u32()? as usize;
    if n > table.len() / 4 {
        return Err(corrupt("shared string count does not match the table"));
    }
    let mut shared = Vec::with_capacity(n);
    for _ in 0..n {
        shared.push(t.str()?);
    }
    if !t.0.is_empty() {
        return Err(corrupt("shared string table longer than its strings"));
    }
    Ok(shared)
}

struct Parsed<'a> {
    header: Header<'a>,
    body: &'a [u8],
    shared: &'a [u8],
}

fn corrupt(why: &str) -> SnapshotError {
    SnapshotError::Corrupt(why.into())
}

/// Checks structure, version and checksum; hands out the header fields and the body.
fn parse(bytes: &[u8]) -> Result<Parsed<'_>, SnapshotError> {
    let head = &bytes[..bytes.len().min(MAGIC.len())];
    if head != &MAGIC[..head.len()] {
        return Err(corrupt("not a snapshot (wrong magic)"));
    }
    let mut r = Reader(bytes);
    r.take(MAGIC.len())?;
    let version = r.u32()?;
    if version != FORMAT_VERSION {
        return Err(SnapshotError::UnknownFormat(version));
    }
    let header_len = r.u32()? as usize;
    let header = Header::read(&mut Reader(r.take(header_len)?))?;
    let body_len = usize::try_from(r.u64()?).map_err(|_| SnapshotError::Truncated)?;
    let body = r.take(body_len)?;
    let shared_len = usize::try_from(r.u64()?).map_err(|_| SnapshotError::Truncated)?;
    let shared = r.take(shared_len)?;
    let summed = bytes.len() - r.0.len();
    let sum = r.u64()?;
    if !r.0.is_empty() {
        return Err(corrupt("bytes after the end of the snapshot"));
    }
    if checksum(&bytes[..summed]) != sum {
        return Err(corrupt("checksum mismatch"));
    }
    if header.resource_version.is_empty() {
        return Err(corrupt("empty resourceVersion"));
    }
    Ok(Parsed {
        header,
        body,
        shared,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        if n > self.0.len() {
            return Err(SnapshotError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn str(&mut self) -> Result<&'a str, SnapshotError> {
        let n = self.u32()? as usize;
        core::str::from_utf8(self.take(n)?).map_err(|_| corrupt("a header string is not UTF-8"))
    }
    fn opt_str(&mut self) -> Result<Option<&'a str>, SnapshotError> {
        match self.array::<1>()?[0] {
            0 => Ok(None),
            1 => self.str().map(Some),
            _ => Err(corrupt("bad optional-string tag in the header")),
        }
    }
}

fn len_u32(n: usize) -> Result<u32, SnapshotError> {
    u32::try_from(n).map_err(|_| SnapshotError::Encode("a field longer than 4 GiB".into()))
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), SnapshotError> {
    out.extend_from_slice(&len_u32(s.len())?.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) -> Result<(), SnapshotError> {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_str(out, s)?;
        }
    }
    Ok(())
}

/// A 64-bit checksum, in four lanes of 8 bytes per step (so the steps of the lanes run in
/// parallel), the lanes folded together at the end. Each step is a bijection of its lane for a
/// given word and of the word for a given lane, and so is each fold: a change confined to one
/// 8-byte word is always detected; other damage is missed with probability about 2⁻⁶⁴.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut sum = stream::Checksum::new(bytes.len() as u64);
    sum.update(bytes);
    sum.finish()
}

#[cfg(test)]
mod tests;
