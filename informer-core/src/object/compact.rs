//! [`CompactObject`]: an object of any kind held in less memory than its JSON.
//!
//! A [`DynamicObject`] keeps its raw parts as their JSON text, so a cached object takes about
//! its JSON's size (a realistic Pod: 1.01x). Most of a big cluster's objects are alike: the
//! Pods of one ReplicaSet share their spec, their labels' keys, their owner reference and
//! the field sets of their `managedFields`; only names, uids, IPs, timestamps and container
//! ids differ. `cargo xtask bench pod-heap` measured three ways of sharing that (figures in
//! docs/BENCHMARKS.md): interning JSON subtrees met twice (0.49x the JSON, 5x the decode
//! time), and compressing with LZ4 against a dictionary learned from the resource's own first
//! objects (0.19x; 0.28x without `managedFields`, where the metadata a read needs, left
//! uncompressed, is most of what remains). The last is what this type does:
//!
//! - the typed metadata (name, namespace, uid, resourceVersion, labels, annotations) and the
//!   members the [`Object`] reads parse (`generation`, `deletionTimestamp`, `finalizers`)
//!   stay in an [`ObjectMeta`] block, so they read as they do from a `DynamicObject`;
//! - `ownerReferences` is kept as JSON text shared (`Arc<str>`) by every object with the same
//!   owners (a ReplicaSet's Pods), still read without decompressing anything;
//! - everything else (`managedFields`, `creationTimestamp`, `spec`, `status`, …) is one LZ4
//!   block compressed against the dictionary of the object's `apiVersion` and `kind`.
//!
//! A dictionary is learned once per `apiVersion`/`kind` in the process, from the first objects
//! decoded (one per distinct owner, up to 16 KB), then frozen and shared by all objects of
//! that kind as an `Arc`; objects without a kind (a list's items: kube-apiserver leaves it to
//! the list) share one of their own, so a list is compressed item by item as it is read, not
//! once it is whole. The objects decoded while a dictionary is learned (at most
//! [`LEARN_OBJECTS`] per dictionary) are kept uncompressed: every read works the same on
//! both. Reading a raw part decompresses the block (a few microseconds for
//! a Pod); keys, labels, owners and the other metadata reads cost what they cost on a
//! `DynamicObject`.
//!
//! The objects stay immutable and shared as `Arc`s by the cache, the readers' copies and the
//! handlers, as any object; a snapshot stores them as `DynamicObject`s (its `SnapshotCodec`
//! is in `snapshot::codec`).

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, Deserialize, Deserializer};
use serde::{Serialize, Serializer};
use smallvec::SmallVec;

use crate::object::meta_fields::{
    self, Finalizers, MetaMap, MetadataError, OwnerReferences, Timestamp,
};
use crate::object::raw::{RawFields, RawFieldsRef, members_len, write_members};
use crate::object::{DynamicObject, JsonStartReader, Object, ObjectMeta, OtherSource};

/// Metadata members kept in the metadata block: what [`Object`]'s reads parse.
const KEPT: [&str; 3] = ["generation", "deletionTimestamp", "finalizers"];
/// The member kept apart, shared between objects with the same owners.
const OWNERS: &str = "ownerReferences";
/// Bytes of a learned dictionary. LZ4 looks back 64 KB, but its compressor hashes the whole
/// dictionary on every call: 16 KB compressed realistic Pods as well as 60 KB for half the
/// time (`bench pod-heap`).
const DICT_BYTES: usize = 16 * 1024;
/// Objects of a kind looked at before its dictionary is frozen (however little it holds).
pub const LEARN_OBJECTS: usize = 64;
/// Distinct owner-reference texts shared at most; the table starts over when full, so a
/// churning cluster does not grow it without bound.
const OWNER_TABLE: usize = 4096;

/// An object of any kind kept compact: metadata as in a [`DynamicObject`], the rest
/// compressed (see the [module](self) documentation).
///
/// Use it as an informer's object type where a `DynamicObject` would be
/// (`Informer::<CompactObject>::builder_for(&client, resource)`); read the rest with
/// [`fields`](Self::fields), [`field`](Self::field) or [`to_dynamic`](Self::to_dynamic).
///
/// ```
/// use informer_core::object::{CompactObject, Object};
///
/// let text = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns",
///     "ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"u"}]},"data":{"k":"v"}}"#;
/// let (obj, _) = CompactObject::from_json_start(text).unwrap();
/// assert_eq!((obj.namespace(), obj.name()), (Some("ns"), "a"));
/// assert_eq!(obj.owner_references().unwrap()[0].name, "o");
/// let data: serde_json::Value = obj.field("data").unwrap().unwrap();
/// assert_eq!(data["k"], "v");
/// assert_eq!(
///     serde_json::to_value(&obj).unwrap(),
///     serde_json::from_str::<serde_json::Value>(text).unwrap()
/// );
/// ```
#[derive(Clone)]
pub struct CompactObject {
    /// The typed metadata and the [`KEPT`] members.
    meta: ObjectMeta,
    /// `{"ownerReferences":[…]}`, shared.
    owners: Option<Arc<str>>,
    /// `apiVersion` and `kind`, shared by the objects of a kind.
    type_meta: Option<Arc<TypeMeta>>,
    rest: Rest,
}

/// `apiVersion` and `kind`.
#[derive(Debug, PartialEq, Eq)]
struct TypeMeta {
    api_version: Option<Box<str>>,
    kind: Option<Box<str>>,
}

/// The other metadata members as a JSON object text (or empty), then the top-level fields as
/// a JSON object text (or empty), split at `split`.
#[derive(Clone)]
enum Rest {
    Plain {
        text: Box<str>,
        split: u32,
    },
    Packed {
        bytes: Box<[u8]>,
        len: u32,
        split: u32,
        dict: Arc<[u8]>,
    },
}

impl Rest {
    fn split(&self) -> usize {
        match self {
            Rest::Plain { split, .. } | Rest::Packed { split, .. } => *split as usize,
        }
    }

    fn text(&self) -> Cow<'_, str> {
        match self {
            Rest::Plain { text, .. } => Cow::Borrowed(text),
            Rest::Packed {
                bytes, len, dict, ..
            } => {
                // The block was compressed in this process from text: it decompresses to it.
                let text = lz4_flex::block::decompress_with_dict(bytes, *len as usize, dict)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok());
                debug_assert!(text.is_some(), "a compressed block decompresses");
                Cow::Owned(text.unwrap_or_default())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The process's dictionaries (one per apiVersion and kind) and shared owner references.

/// One kind's dictionary, learned or being learned.
struct Kind {
    type_meta: Arc<TypeMeta>,
    dict: Option<Arc<[u8]>>,
    learning: Vec<u8>,
    owners_seen: Vec<u64>,
    looked_at: usize,
}

static KINDS: spin::RwLock<Vec<Kind>> = spin::RwLock::new(Vec::new());
static SHARED_OWNERS: spin::RwLock<Option<crate::hash::HashSet<Arc<str>>>> =
    spin::RwLock::new(None);

fn same_type(t: &TypeMeta, api_version: Option<&str>, kind: Option<&str>) -> bool {
    t.api_version.as_deref() == api_version && t.kind.as_deref() == kind
}

/// The shared `apiVersion`/`kind` of a kind, and its dictionary if learned; `sample` (the
/// text an object of the kind compresses) teaches the dictionary while it is learned.
fn kind_of(
    api_version: Option<&str>,
    kind: Option<&str>,
    sample: Option<(&str, u64)>,
) -> (Arc<TypeMeta>, Option<Arc<[u8]>>) {
    {
        let kinds = KINDS.read();
        if let Some(k) = kinds
            .iter()
            .find(|k| same_type(&k.type_meta, api_version, kind))
        {
            if k.dict.is_some() || sample.is_none() {
                return (k.type_meta.clone(), k.dict.clone());
            }
        }
    }
    let mut kinds = KINDS.write();
    let i = match kinds
        .iter()
        .position(|k| same_type(&k.type_meta, api_version, kind))
    {
        Some(i) => i,
        None => {
            kinds.push(Kind {
                type_meta: Arc::new(TypeMeta {
                    api_version: api_version.map(Into::into),
                    kind: kind.map(Into::into),
                }),
                dict: None,
                learning: Vec::new(),
                owners_seen: Vec::new(),
                looked_at: 0,
            });
            kinds.len() - 1
        }
    };
    let k = &mut kinds[i];
    if let (None, Some((text, owner))) = (&k.dict, sample) {
        k.looked_at += 1;
        // One sample per owner: a ReplicaSet's Pods teach little more than one of them.
        if !k.owners_seen.contains(&owner) {
            k.owners_seen.push(owner);
            k.learning.extend_from_slice(text.as_bytes());
        }
        if k.learning.len() >= DICT_BYTES || k.looked_at >= LEARN_OBJECTS {
            // The latest samples last: LZ4 finds near matches first.
            let start = k.learning.len().saturating_sub(DICT_BYTES);
            k.dict = Some(k.learning[start..].into());
            k.learning = Vec::new();
            k.owners_seen = Vec::new();
        }
    }
    (k.type_meta.clone(), k.dict.clone())
}

/// `text` shared with the other objects that have the same, when the table has it.
fn shared_owners(text: &str) -> Arc<str> {
    if let Some(found) = SHARED_OWNERS.read().as_ref().and_then(|t| t.get(text)) {
        return found.clone();
    }
    let mut table = SHARED_OWNERS.write();
    let table = table.get_or_insert_with(Default::default);
    if let Some(found) = table.get(text) {
        return found.clone();
    }
    if table.len() >= OWNER_TABLE {
        table.clear();
    }
    let shared: Arc<str> = text.into();
    table.insert(shared.clone());
    shared
}

fn hash_of(text: &str) -> u64 {
    use core::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x6b75_6265).hash_one(text)
}

// ---------------------------------------------------------------------------------------

impl CompactObject {
    /// Decodes the JSON object that starts `text` (at its `{`), as
    /// [`DynamicObject::from_json_start`] does (the same object, the bytes it takes, and
    /// `None` when it leaves the text to serde_json), then compacts it.
    pub fn from_json_start(text: &str) -> Option<(CompactObject, usize)> {
        let (obj, len) = DynamicObject::from_json_start(text)?;
        Some((CompactObject::from_dynamic(obj), len))
    }

    /// The object compacted: compressed once its kind's dictionary is learned (objects
    /// without `apiVersion` and `kind`, a list's items, share one).
    pub fn from_dynamic(obj: DynamicObject) -> CompactObject {
        let DynamicObject {
            api_version,
            kind,
            metadata,
            fields,
        } = obj;
        let members = metadata.other().members();
        let mut kept: SmallVec<[(Cow<'_, str>, Cow<'_, str>); 4]> = SmallVec::new();
        let mut moved: SmallVec<[(Cow<'_, str>, Cow<'_, str>); 4]> = SmallVec::new();
        let mut owners = None;
        for (k, v) in members {
            if KEPT.contains(&&*k) {
                kept.push((k, v));
            } else if k == OWNERS {
                let mut text = String::with_capacity(v.len() + OWNERS.len() + 5);
                write_members(&mut text, &[(k, v)]);
                owners = Some(shared_owners(&text));
            } else {
                moved.push((k, v));
            }
        }
        let fields_text = fields.as_ref().text();
        let mut rest = String::with_capacity(members_len(&moved) + fields_text.len());
        write_members(&mut rest, &moved);
        let split = rest.len() as u32;
        rest.push_str(fields_text);
        let mut strings = metadata.strings();
        strings.other = OtherSource::Members(&kept);
        let meta = strings.build();
        let type_meta = (api_version.is_some() || kind.is_some())
            .then(|| kind_of(api_version.as_deref(), kind.as_deref(), None).0);
        let mut obj = CompactObject {
            meta,
            owners,
            type_meta,
            rest: Rest::Plain {
                text: rest.into_boxed_str(),
                split,
            },
        };
        obj.compress();
        obj
    }

    /// Compresses the rest when its kind's dictionary is learned (teaching it otherwise).
    fn compress(&mut self) {
        let Rest::Plain { text, split } = &self.rest else {
            return;
        };
        if text.is_empty() {
            return;
        }
        let owner = hash_of(self.owners.as_deref().unwrap_or(""));
        // Objects without a kind (a list's items, until the list decoder fills it in) have a
        // dictionary of their own, learned from the first of them: in an informer's process
        // they are its lists' items. Compressing them at once keeps a list of 100k Pods from
        // being held whole before it is compressed.
        let type_meta = self.type_meta.as_deref();
        let (_, dict) = kind_of(
            type_meta.and_then(|t| t.api_version.as_deref()),
            type_meta.and_then(|t| t.kind.as_deref()),
            Some((text, owner)),
        );
        let Some(dict) = dict else {
            return;
        };
        let bytes = lz4_flex::block::compress_with_dict(text.as_bytes(), &dict);
        if bytes.len() < text.len() {
            self.rest = Rest::Packed {
                bytes: bytes.into_boxed_slice(),
                len: text.len() as u32,
                split: *split,
                dict,
            };
        }
    }

    /// The whole object, as a [`DynamicObject`] (the other metadata members in another order
    /// than sent: the members [`Object`] reads, the owner references, then the rest).
    pub fn to_dynamic(&self) -> DynamicObject {
        let rest = self.rest.text();
        let (moved, fields) = rest.split_at(self.rest.split().min(rest.len()));
        let mut members = self.meta.other().members();
        if let Some(owners) = &self.owners {
            members.extend(RawFieldsRef::new(owners).members());
        }
        members.extend(RawFieldsRef::new(moved).members());
        let mut strings = self.meta.strings();
        strings.other = OtherSource::Members(&members);
        DynamicObject {
            api_version: self.api_version().map(Into::into),
            kind: Object::kind(self).map(Into::into),
            metadata: strings.build(),
            fields: RawFieldsRef::new(fields).to_owned(),
        }
    }

    /// The top-level fields other than `apiVersion`, `kind` and `metadata` (`spec`,
    /// `status`, `data`, …), decompressed.
    pub fn fields(&self) -> RawFields {
        let rest = self.rest.text();
        RawFieldsRef::new(rest.get(self.rest.split()..).unwrap_or("")).to_owned()
    }

    /// Top-level field `name` decoded as `T`; `None` when absent.
    pub fn field<T: de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<Result<T, serde_json::Error>> {
        self.with_fields(|fields| fields.field(name))
    }

    /// Calls `read` with the top-level fields borrowed from their decompressed text (no copy
    /// of them, as [`fields`](Self::fields) makes): `obj.with_fields(|f|
    /// f.get("status").map(|s| s.get().len()))`.
    pub fn with_fields<R>(&self, read: impl FnOnce(RawFieldsRef<'_>) -> R) -> R {
        let rest = self.rest.text();
        read(RawFieldsRef::new(
            rest.get(self.rest.split()..).unwrap_or(""),
        ))
    }

    /// A label value.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.meta.labels().get(name)
    }

    /// Whether the rest is held compressed (not for the objects decoded while their
    /// dictionary was learned).
    pub fn is_compressed(&self) -> bool {
        matches!(self.rest, Rest::Packed { .. })
    }

    /// Heap bytes of this object's own blocks (not of what it shares: owner references,
    /// `apiVersion` and `kind`, the dictionary).
    pub fn heap_size(&self) -> usize {
        self.meta.heap_size()
            + match &self.rest {
                Rest::Plain { text, .. } => text.len(),
                Rest::Packed { bytes, .. } => bytes.len(),
            }
    }
}

impl From<DynamicObject> for CompactObject {
    fn from(obj: DynamicObject) -> Self {
        CompactObject::from_dynamic(obj)
    }
}

impl From<&CompactObject> for DynamicObject {
    fn from(obj: &CompactObject) -> Self {
        obj.to_dynamic()
    }
}

impl PartialEq for CompactObject {
    fn eq(&self, other: &Self) -> bool {
        self.meta == other.meta
            && self.owners == other.owners
            && self.type_meta == other.type_meta
            && self.rest.split() == other.rest.split()
            && self.rest.text() == other.rest.text()
    }
}

impl fmt::Debug for CompactObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactObject")
            .field("api_version", &self.api_version())
            .field("kind", &Object::kind(self))
            .field("metadata", &self.meta)
            .field("owners", &self.owners)
            .field("compressed", &self.is_compressed())
            .field(
                "rest_bytes",
                &self.heap_size().saturating_sub(self.meta.heap_size()),
            )
            .finish()
    }
}

impl<'de> Deserialize<'de> for CompactObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DynamicObject::deserialize(d).map(CompactObject::from_dynamic)
    }
}

impl Serialize for CompactObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_dynamic().serialize(s)
    }
}

impl Object for CompactObject {
    fn name(&self) -> &str {
        self.meta.name()
    }
    fn namespace(&self) -> Option<&str> {
        self.meta.namespace()
    }
    fn resource_version(&self) -> Option<&str> {
        self.meta.resource_version()
    }
    fn uid(&self) -> Option<&str> {
        self.meta.uid()
    }
    fn labels(&self) -> MetaMap<'_> {
        self.meta.labels().into()
    }
    fn annotations(&self) -> MetaMap<'_> {
        self.meta.annotations().into()
    }
    fn generation(&self) -> Result<Option<i64>, MetadataError> {
        Object::generation(&self.meta)
    }
    fn deletion_timestamp(&self) -> Result<Option<Timestamp>, MetadataError> {
        Object::deletion_timestamp(&self.meta)
    }
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        Object::finalizers(&self.meta)
    }
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        meta_fields::raw_owner_references(RawFieldsRef::new(self.owners.as_deref().unwrap_or("")))
    }
    fn api_version(&self) -> Option<&str> {
        self.type_meta.as_ref()?.api_version.as_deref()
    }
    fn kind(&self) -> Option<&str> {
        self.type_meta.as_ref()?.kind.as_deref()
    }
    #[inline]
    fn json_start_reader() -> Option<JsonStartReader<Self>> {
        Some(CompactObject::from_json_start)
    }
    #[inline]
    fn type_meta_filler() -> Option<fn(&mut Self, api_version: &str, kind: &str)> {
        // A list's items come without their kind: they are compressed once it is filled in.
        Some(|obj, api_version, kind| {
            let current = obj.type_meta.as_deref();
            let api_version = current
                .and_then(|t| t.api_version.as_deref())
                .unwrap_or(api_version);
            let kind = current.and_then(|t| t.kind.as_deref()).unwrap_or(kind);
            let (type_meta, _) = kind_of(Some(api_version), Some(kind), None);
            obj.type_meta = Some(type_meta);
            obj.compress();
        })
    }
}
