//! How an object is stored in a snapshot: [`SnapshotCodec`], the per-object encoding, with a
//! serde-JSON default and a binary encoding for [`DynamicObject`] and
//! [`PartialObjectMetadata`].
//!
//! Every object encoding of the crate is in this file, so a change to how these types hold
//! their fields is adapted here only. The encodings go through the types' public fields and
//! constructors ([`RawFields::from_json`] and its variant for checksummed text; an
//! [`ObjectMeta`]'s one block written straight from the snapshot's strings).
//!
//! # The binary encoding of `DynamicObject` (codec `dynamic/1`)
//!
//! ```text
//! apiVersion, kind     shared (index into the snapshot's table of shared strings)
//! name                 str
//! namespace            shared
//! uid, resourceVersion opt str
//! labels, annotations  varint count, then key str, value str per entry
//! metadata.other       str (raw JSON object text, kept verbatim; empty = no members)
//! fields               str (the same, for spec, data, status, ...)
//!
//! varint = unsigned LEB128; str = varint length + UTF-8;
//! opt str = varint 0 (absent) | varint length + 1 + UTF-8; shared = varint 0 (absent) | index + 1
//! ```
//!
//! The raw JSON is kept as the very text the server sent: nothing is re-serialized, and the
//! object decodes equal to the one encoded. A `PartialObjectMetadata` (codec `metadata/1`) is
//! the same without `fields`.
//!
//! On load the raw JSON is not parsed again, only its framing (`{` … `}`) is checked: the
//! text was checked when its `RawFields` was built (from the server's answer), this crate
//! wrote it verbatim, and the snapshot's checksum covers every byte, so an accidental change
//! (a bad disk, a truncated copy) is refused before any object is read. Re-parsing would only
//! stop a deliberately forged file, and a forger can write valid JSON as easily: it would
//! cost a third of the decode for no protection. Should such text get in anyway, `RawFields`
//! reads it lazily and what it cannot parse reads as absent (no panic); strings are still
//! checked to be UTF-8.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::SnapshotError;
use crate::hash::HashMap;
use crate::object::metadata::PartialObjectMetadata;
use crate::object::raw::{RawFields, RawFieldsRef};
use crate::object::string_map::{StringMapRef, sort_dedup};
use crate::object::{
    CompactObject, DynamicObject, MapSource, MetaStrings, Object, ObjectMeta, OtherSource,
};
use smallvec::SmallVec;

/// How objects of a type are stored in a snapshot.
///
/// The default methods store an object as its compact JSON (serde), which round-trips every
/// type whose `Serialize` writes back what `Deserialize` read: implement it with
/// `impl SnapshotCodec for MyType {}`. [`DynamicObject`] and [`PartialObjectMetadata`] have a
/// binary encoding that keeps their raw JSON parts verbatim (no re-parse), smaller and several
/// times faster to load.
///
/// A snapshot records the [`CODEC`](Self::CODEC) it was written with and is refused
/// ([`SnapshotError::OtherCodec`]) by a type with another one: change the name whenever the
/// encoding changes.
pub trait SnapshotCodec: Object + Serialize + DeserializeOwned {
    /// The name of the encoding, stored in the snapshot's header (`json` for the default).
    const CODEC: &'static str = "json";

    /// Writes one object.
    fn encode_object(&self, w: &mut ObjectWriter<'_>) -> Result<(), SnapshotError> {
        w.json(self)
    }

    /// Reads one object back; it must consume the reader exactly (what is left is an error).
    fn decode_object(r: &mut ObjectReader<'_>) -> Result<Self, SnapshotError> {
        r.json()
    }
}

/// Strings many objects share (`apiVersion`, `kind`, namespaces), stored once per snapshot.
#[derive(Default)]
pub(super) struct SharedStrings {
    index: HashMap<String, u32>,
    pub(super) list: Vec<String>,
}

/// Where an object is encoded: the snapshot being written and its table of shared strings.
pub struct ObjectWriter<'a> {
    out: &'a mut Vec<u8>,
    shared: &'a mut SharedStrings,
}

impl<'a> ObjectWriter<'a> {
    pub(super) fn new(out: &'a mut Vec<u8>, shared: &'a mut SharedStrings) -> Self {
        ObjectWriter { out, shared }
    }

    /// Appends raw bytes (the reader gets them back with [`ObjectReader::bytes`] or
    /// [`ObjectReader::rest`]).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// An unsigned integer (LEB128).
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    /// A string.
    pub fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.raw(s.as_bytes());
    }

    /// An optional string.
    pub fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.varint(0),
            Some(s) => {
                self.varint(s.len() as u64 + 1);
                self.raw(s.as_bytes());
            }
        }
    }

    /// An optional string many objects share (`apiVersion`, `kind`, a namespace): stored
    /// once per snapshot, an index here.
    pub fn shared(&mut self, s: Option<&str>) {
        let Some(s) = s else {
            self.varint(0);
            return;
        };
        let i = match self.shared.index.get(s) {
            Some(&i) => i,
            None => {
                let i = self.shared.list.len() as u32;
                self.shared.index.insert(s.into(), i);
                self.shared.list.push(s.into());
                i
            }
        };
        self.varint(u64::from(i) + 1);
    }

    /// The object as compact JSON, up to the end of its frame.
    pub fn json<T: Serialize + ?Sized>(&mut self, obj: &T) -> Result<(), SnapshotError> {
        let json = serde_json::to_vec(obj).map_err(|e| SnapshotError::Encode(e.to_string()))?;
        self.raw(&json);
        Ok(())
    }
}

/// One object's bytes in a snapshot being decoded, and the snapshot's shared strings.
pub struct ObjectReader<'a> {
    bytes: &'a [u8],
    shared: &'a [&'a str],
}

fn corrupt(why: &str) -> SnapshotError {
    SnapshotError::Corrupt(why.into())
}

impl<'a> ObjectReader<'a> {
    pub(super) fn new(bytes: &'a [u8], shared: &'a [&'a str]) -> Self {
        ObjectReader { bytes, shared }
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        if n > self.bytes.len() {
            return Err(corrupt("an object field runs past its frame"));
        }
        let (a, b) = self.bytes.split_at(n);
        self.bytes = b;
        Ok(a)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.bytes)
    }

    /// An unsigned integer (LEB128).
    pub fn varint(&mut self) -> Result<u64, SnapshotError> {
        let mut v: u64 = 0;
        for (i, &b) in self.bytes.iter().enumerate().take(10) {
            let part = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(corrupt("a varint overflows 64 bits"));
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return Ok(v);
            }
        }
        Err(corrupt("a varint runs past its frame"))
    }

    fn len(&mut self) -> Result<usize, SnapshotError> {
        let n = self.varint()?;
        usize::try_from(n).map_err(|_| corrupt("a length does not fit in memory"))
    }

    /// The next `n` bytes as a string. Most of a snapshot's bytes are strings (raw JSON
    /// above all), all checked here: with SIMD where the CPU has it (`simdutf8`; the same
    /// verdict as `core::str::from_utf8`).
    fn utf8(&mut self, n: usize) -> Result<&'a str, SnapshotError> {
        simdutf8::basic::from_utf8(self.bytes(n)?).map_err(|_| corrupt("a string is not UTF-8"))
    }

    /// A string.
    pub fn str(&mut self) -> Result<&'a str, SnapshotError> {
        let n = self.len()?;
        self.utf8(n)
    }

    /// An optional string.
    pub fn opt_str(&mut self) -> Result<Option<&'a str>, SnapshotError> {
        match self.len()? {
            0 => Ok(None),
            n => self.utf8(n - 1).map(Some),
        }
    }

    /// A shared string (see [`ObjectWriter::shared`]).
    pub fn shared(&mut self) -> Result<Option<&'a str>, SnapshotError> {
        match self.len()? {
            0 => Ok(None),
            i => self
                .shared
                .get(i - 1)
                .copied()
                .map(Some)
                .ok_or_else(|| corrupt("a shared string index out of range")),
        }
    }

    /// The rest of the frame as JSON.
    pub fn json<T: DeserializeOwned>(&mut self) -> Result<T, SnapshotError> {
        serde_json::from_slice(self.rest()).map_err(|e| SnapshotError::Corrupt(e.to_string()))
    }
}

fn put_map(w: &mut ObjectWriter<'_>, m: StringMapRef<'_>) {
    w.varint(m.len() as u64);
    for (k, v) in m.iter() {
        w.str(k);
        w.str(v);
    }
}

/// A map's entries, borrowed from the snapshot, sorted and without duplicates.
fn get_map<'a>(
    r: &mut ObjectReader<'a>,
) -> Result<SmallVec<[(&'a str, &'a str); 8]>, SnapshotError> {
    let n = r.len()?;
    // Every entry takes at least two bytes: a larger count is a lie, not a reason to reserve.
    if n > r.bytes.len() / 2 {
        return Err(corrupt("a map count runs past its frame"));
    }
    let mut pairs: SmallVec<[(&'a str, &'a str); 8]> = SmallVec::with_capacity(n);
    for _ in 0..n {
        pairs.push((r.str()?, r.str()?));
    }
    // Written from a map, so sorted already (the check is a pass over it).
    if !pairs.windows(2).all(|w| w[0].0 < w[1].0) {
        let kept = sort_dedup(&mut pairs);
        pairs.truncate(kept);
    }
    Ok(pairs)
}

fn put_raw(w: &mut ObjectWriter<'_>, f: RawFieldsRef<'_>) {
    w.str(if f.is_empty() { "" } else { f.as_json() });
}

/// The raw JSON is trusted behind the snapshot's checksum (see the module docs): only its
/// framing is checked, not its grammar.
fn get_raw<'a>(r: &mut ObjectReader<'a>) -> Result<&'a str, SnapshotError> {
    match r.str()? {
        "" | "{}" => Ok(""),
        text if text.len() >= 2 && text.starts_with('{') && text.ends_with('}') => Ok(text),
        _ => Err(corrupt("raw fields are not framed as one JSON object")),
    }
}

fn put_meta(w: &mut ObjectWriter<'_>, m: &ObjectMeta) {
    w.str(m.name());
    w.shared(m.namespace_as_sent());
    w.opt_str(m.uid());
    w.opt_str(m.resource_version());
    put_map(w, m.labels());
    put_map(w, m.annotations());
    put_raw(w, m.other());
}

/// The metadata in one exact-size block, its strings copied once from the snapshot.
fn get_meta(r: &mut ObjectReader<'_>) -> Result<ObjectMeta, SnapshotError> {
    let name = r.str()?;
    let namespace = r.shared()?;
    let uid = r.opt_str()?;
    let resource_version = r.opt_str()?;
    let labels = get_map(r)?;
    let annotations = get_map(r)?;
    let other = get_raw(r)?;
    Ok(MetaStrings {
        other: OtherSource::Text(other),
        name,
        namespace,
        uid,
        resource_version,
        labels: MapSource::Sorted(&labels),
        annotations: MapSource::Sorted(&annotations),
    }
    .build())
}

impl SnapshotCodec for DynamicObject {
    const CODEC: &'static str = "dynamic/1";

    fn encode_object(&self, w: &mut ObjectWriter<'_>) -> Result<(), SnapshotError> {
        w.shared(self.api_version.as_deref());
        w.shared(self.kind.as_deref());
        put_meta(w, &self.metadata);
        put_raw(w, self.fields.as_ref());
        Ok(())
    }

    fn decode_object(r: &mut ObjectReader<'_>) -> Result<Self, SnapshotError> {
        Ok(DynamicObject {
            api_version: r.shared()?.map(Into::into),
            kind: r.shared()?.map(Into::into),
            metadata: get_meta(r)?,
            fields: match get_raw(r)? {
                "" => RawFields::new(),
                text => RawFields::from_checksummed_json(text)
                    .ok_or_else(|| corrupt("raw fields are not framed as one JSON object"))?,
            },
        })
    }
}

/// Stored as the [`DynamicObject`] it is (that codec's encoding), compacted again when read.
impl SnapshotCodec for CompactObject {
    const CODEC: &'static str = "compact/1";

    fn encode_object(&self, w: &mut ObjectWriter<'_>) -> Result<(), SnapshotError> {
        self.to_dynamic().encode_object(w)
    }

    fn decode_object(r: &mut ObjectReader<'_>) -> Result<Self, SnapshotError> {
        DynamicObject::decode_object(r).map(CompactObject::from_dynamic)
    }
}

impl SnapshotCodec for PartialObjectMetadata {
    const CODEC: &'static str = "metadata/1";

    fn encode_object(&self, w: &mut ObjectWriter<'_>) -> Result<(), SnapshotError> {
        w.shared(self.api_version.as_deref());
        w.shared(self.kind.as_deref());
        put_meta(w, &self.metadata);
        Ok(())
    }

    fn decode_object(r: &mut ObjectReader<'_>) -> Result<Self, SnapshotError> {
        Ok(PartialObjectMetadata {
            api_version: r.shared()?.map(Into::into),
            kind: r.shared()?.map(Into::into),
            metadata: get_meta(r)?,
        })
    }
}
