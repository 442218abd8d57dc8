//! Cache snapshots for warm restarts: an informer's objects and the resourceVersion they are
//! consistent with, as bytes a new informer resumes from instead of listing the cluster.
//!
//! The core does no file I/O: [`SharedIndexInformer::snapshot`](crate::SharedIndexInformer::snapshot)
//! hands out a [`Snapshot`] (shared objects and the last synced resourceVersion),
//! [`Snapshot::encode`] turns it into bytes, [`Snapshot::decode`] back, and
//! [`SharedIndexInformer::resume`](crate::SharedIndexInformer::resume) takes one in before
//! start. Writing the bytes to a file (atomically) is the runtime's business.
//!
//! # Format (version 1, integers little-endian)
//!
//! ```text
//! magic        8 bytes  "INFRSNAP"
//! version      u32      FORMAT_VERSION
//! header_len   u32      length of the header
//! header       resource (str), label selector (opt str), field selector (opt str),
//!              resourceVersion (str), object count (u64)
//!              str = u32 length + UTF-8; opt str = u8 0 (absent) | u8 1 + str
//! body_len     u64
//! body         one frame per object: u32 length + the object as compact JSON
//! checksum     u64      over every byte before it
//! ```
//!
//! Objects are kept as JSON because that is what every `K` round-trips through (serde, and
//! [`RawFields`](crate::RawFields) holds raw JSON); the frames make the file splittable without
//! parsing and the checksum makes corruption detectable.
//!
//! # Decoding is all-or-nothing
//!
//! [`Snapshot::decode`] checks everything — structure, checksum, identity (resource and
//! selectors), every object decodable and keyable, no key twice, the count — before it returns
//! a snapshot; any failure is a [`SnapshotError`] and nothing is loaded.

use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::hash::HashSet;
use crate::object::{Key, Object};
use crate::protocol::Selectors;

/// The snapshot format this version writes and reads.
pub const FORMAT_VERSION: u32 = 1;

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

impl<K: Serialize> Snapshot<K> {
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
        put_str(&mut header, &self.resource_version)?;
        header.extend_from_slice(&(self.items.len() as u64).to_le_bytes());

        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&len_u32(header.len())?.to_le_bytes());
        out.extend_from_slice(&header);
        let body_len_at = out.len();
        out.extend_from_slice(&0u64.to_le_bytes());
        let body_start = out.len();
        for obj in &self.items {
            let json =
                serde_json::to_vec(&**obj).map_err(|e| SnapshotError::Encode(e.to_string()))?;
            out.extend_from_slice(&len_u32(json.len())?.to_le_bytes());
            out.extend_from_slice(&json);
        }
        let body_len = (out.len() - body_start) as u64;
        out[body_len_at..body_start].copy_from_slice(&body_len.to_le_bytes());
        let sum = checksum(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(())
    }
}

impl<K: DeserializeOwned + Object> Snapshot<K> {
    /// Decodes a snapshot, refusing it unless it is whole, intact, of format
    /// [`FORMAT_VERSION`] and of `expected` (same resource, same selectors).
    pub fn decode(bytes: &[u8], expected: &SnapshotIdentity) -> Result<Self, SnapshotError> {
        let parsed = parse(bytes)?;
        if parsed.resource != expected.resource {
            return Err(SnapshotError::OtherResource {
                expected: expected.resource.clone(),
                found: parsed.resource.into(),
            });
        }
        if parsed.label != expected.selectors.label.as_deref()
            || parsed.field != expected.selectors.field.as_deref()
        {
            return Err(SnapshotError::OtherSelectors);
        }
        let count = usize::try_from(parsed.count)
            .map_err(|_| SnapshotError::Corrupt("object count too large".into()))?;
        // Every frame takes at least 4 bytes: a count beyond that is a lie, not a reason to
        // reserve memory.
        if count > parsed.body.len() / 4 {
            return Err(corrupt("object count does not match the body"));
        }
        let mut items: Vec<Arc<K>> = Vec::with_capacity(count);
        let mut r = Reader(parsed.body);
        while !r.0.is_empty() {
            let n = r.u32()? as usize;
            let frame = r.take(n)?;
            let obj: K = serde_json::from_slice(frame).map_err(|e| {
                SnapshotError::Corrupt(alloc::format!("object {}: {e}", items.len()))
            })?;
            if crate::informer::invalid_key(&obj).is_some() {
                return Err(corrupt("an object cannot be keyed"));
            }
            items.push(Arc::new(obj));
        }
        if items.len() != count {
            return Err(corrupt("object count does not match the body"));
        }
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
        drop(keys);
        Ok(Snapshot {
            resource_version: parsed.resource_version.into(),
            items,
        })
    }
}

/// Reads the identity of a snapshot without decoding its objects (the checksum is verified).
pub fn peek_identity(bytes: &[u8]) -> Result<(SnapshotIdentity, String), SnapshotError> {
    let p = parse(bytes)?;
    Ok((
        SnapshotIdentity {
            resource: p.resource.into(),
            selectors: Selectors {
                label: p.label.map(Into::into),
                field: p.field.map(Into::into),
            },
        },
        p.resource_version.into(),
    ))
}

struct Parsed<'a> {
    resource: &'a str,
    label: Option<&'a str>,
    field: Option<&'a str>,
    resource_version: &'a str,
    count: u64,
    body: &'a [u8],
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
    let mut h = Reader(r.take(header_len)?);
    let resource = h.str()?;
    let label = h.opt_str()?;
    let field = h.opt_str()?;
    let resource_version = h.str()?;
    let count = h.u64()?;
    if !h.0.is_empty() {
        return Err(corrupt("header longer than its fields"));
    }
    let body_len = usize::try_from(r.u64()?).map_err(|_| SnapshotError::Truncated)?;
    let body = r.take(body_len)?;
    let summed = bytes.len() - r.0.len();
    let sum = r.u64()?;
    if !r.0.is_empty() {
        return Err(corrupt("bytes after the end of the snapshot"));
    }
    if checksum(&bytes[..summed]) != sum {
        return Err(corrupt("checksum mismatch"));
    }
    if resource_version.is_empty() {
        return Err(corrupt("empty resourceVersion"));
    }
    Ok(Parsed {
        resource,
        label,
        field,
        resource_version,
        count,
        body,
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

/// A 64-bit checksum, 8 bytes per step. Each step is a bijection of the state for a given
/// word, so a change confined to one 8-byte word is always detected; other damage is missed
/// with probability about 2⁻⁶⁴.
pub fn checksum(bytes: &[u8]) -> u64 {
    const P: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h: u64 = 0xCBF2_9CE4_8422_2325 ^ (bytes.len() as u64);
    let mut chunks = bytes.chunks_exact(8);
    let step = |h: &mut u64, w: u64| {
        *h = (*h ^ w).wrapping_mul(P);
        *h ^= *h >> 29;
    };
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        step(&mut h, u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    let mut w = [0u8; 8];
    w[..rest.len()].copy_from_slice(rest);
    step(&mut h, u64::from_le_bytes(w));
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests;
