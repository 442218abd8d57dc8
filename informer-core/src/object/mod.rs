//! What the informer needs from an object, how objects are keyed, and a dynamic object type.

pub mod compact;
mod impls;
pub(crate) mod json;
pub(crate) mod key;
pub mod meta_fields;
pub mod metadata;
pub mod raw;
pub mod selector;
pub mod string_map;

pub use compact::CompactObject;
pub use meta_fields::{
    Finalizers, MetaMap, MetadataError, OwnerReference, OwnerReferenceRef, OwnerReferences,
    Timestamp, TimestampError, controller_of,
};
pub use metadata::PartialObjectMetadata;
pub use raw::{RawFields, RawFieldsRef};
pub use string_map::{StringMap, StringMapRef};

use alloc::sync::Arc;

pub use compact_str::CompactString;
use core::fmt;

use alloc::borrow::Cow;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::object::key::{Key, KeyRef};
use alloc::boxed::Box;
use alloc::string::String;
use raw::RawFieldsBuilder;
use serde_json::value::RawValue;
use string_map::{Pairs, Str};

/// What the informer reads from a Kubernetes object.
///
/// Objects are immutable once handed to the informer and shared as `Arc<K>`; the informer never
/// deep-copies them.
pub trait Object {
    /// `metadata.name`.
    fn name(&self) -> &str;
    /// `metadata.namespace`, or `None` for a cluster-scoped object. An empty string counts as
    /// cluster-scoped, as in client-go's `MetaNamespaceKeyFunc`.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.resourceVersion`, if set.
    fn resource_version(&self) -> Option<&str>;
    /// `metadata.uid`, if set.
    fn uid(&self) -> Option<&str>;

    /// The Kubernetes `kind` every value of this type has, when the type is tied to one
    /// (k8s-openapi types are: `Pod`, `ConfigMap`, ...). An informer checks it against the
    /// resource it is asked to watch and against the server's answers, so a `Pod` informer
    /// pointed at ConfigMaps fails with a typed error instead of caching empty objects.
    /// `None` (the default) for types that hold any kind, such as [`DynamicObject`].
    fn type_kind() -> Option<&'static str>
    where
        Self: Sized,
    {
        None
    }

    /// The borrowed key of this object (no allocation).
    fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::new(self.namespace(), self.name())
    }

    // The rest of the metadata. Every type of this crate and of informer-http answers these
    // from where it keeps them, as do types made with `impl_object!`; the defaults (nothing)
    // are for a type that keeps no such field. A type implementing `Object` by hand over
    // metadata that has them overrides them.

    /// `metadata.labels`.
    fn labels(&self) -> MetaMap<'_> {
        MetaMap::EMPTY
    }

    /// `metadata.annotations`.
    fn annotations(&self) -> MetaMap<'_> {
        MetaMap::EMPTY
    }

    /// `metadata.generation` (the server raises it on every change of the spec).
    fn generation(&self) -> Result<Option<i64>, MetadataError> {
        Ok(None)
    }

    /// `metadata.deletionTimestamp`: set once the object is being deleted and waits for its
    /// finalizers.
    fn deletion_timestamp(&self) -> Result<Option<Timestamp>, MetadataError> {
        Ok(None)
    }

    /// `metadata.finalizers`.
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        Ok(Finalizers::default())
    }

    /// `metadata.ownerReferences`.
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        Ok(OwnerReferences::default())
    }

    /// The reference to this object's managing controller (`controller: true`), if any.
    fn controller_owner(&self) -> Result<Option<OwnerReferenceRef<'_>>, MetadataError> {
        Ok(self.owner_references()?.controller().cloned())
    }

    /// The object's `apiVersion` (`v1`, `apps/v1`), when known: a type tied to one kind knows
    /// it, a [`DynamicObject`] has it from the server. Used by [`controller_of`].
    fn api_version(&self) -> Option<&str> {
        None
    }

    /// The object's `kind` (`ConfigMap`), when known (see [`api_version`](Self::api_version)).
    fn kind(&self) -> Option<&str> {
        None
    }

    // How values of this type are read from the API server's JSON. A client's decoders ask
    // the type through these instead of comparing type ids; the defaults suit a type that
    // serde alone decodes.

    /// A reader of this type's JSON faster than its `Deserialize`, which decoders then use
    /// first: given text that starts at an object's `{`, the object and the bytes it took, as
    /// `serde_json::Deserializer::from_str(text).into_iter::<Self>().next()` gives them, or
    /// `None` to leave the text to serde_json (which must then give the same object, or the
    /// error). `None` (the default): the type has no such reader. [`DynamicObject`] has one,
    /// [`DynamicObject::from_json_start`].
    fn json_start_reader() -> Option<JsonStartReader<Self>>
    where
        Self: Sized,
    {
        None
    }

    /// Whether this type holds an object's metadata only, as
    /// [`PartialObjectMetadata`] does: a client then asks the
    /// server for that representation instead of whole objects. `false` by default.
    fn metadata_only() -> bool
    where
        Self: Sized,
    {
        false
    }

    /// Sets `apiVersion` and `kind` where a value lacks them. kube-apiserver leaves both out of
    /// a list's items (they are on the list) but puts them on watch events, so a client fills
    /// the items of a list from the resource it listed, and a type that keeps them (such as
    /// [`DynamicObject`]) looks the same whichever way an object arrived. `None` (the
    /// default): the type keeps no such fields, or its values always have them.
    fn type_meta_filler() -> Option<fn(&mut Self, api_version: &str, kind: &str)>
    where
        Self: Sized,
    {
        None
    }
}

/// A reader of JSON text that starts at an object's `{`: the object and the bytes it took, or
/// `None` to leave the text to serde_json ([`Object::json_start_reader`]).
pub type JsonStartReader<K> = fn(&str) -> Option<(K, usize)>;

/// A type the API server's JSON is decoded into, as a watch or list decoder needs it: serde's
/// `Deserialize`, and a reader faster than it where the type has one. Every [`Object`] is one,
/// with the reader its [`Object::json_start_reader`] gives; so is `serde_json::Value`, for any
/// JSON (without a reader).
pub trait FromJson: de::DeserializeOwned {
    /// The type's own reader, if any (see [`Object::json_start_reader`]). A decoder asks it
    /// through this trait, so the choice is made when the decoder is compiled for the type.
    fn fast_reader() -> Option<JsonStartReader<Self>>;
}

impl<T: Object + de::DeserializeOwned> FromJson for T {
    #[inline]
    fn fast_reader() -> Option<JsonStartReader<T>> {
        T::json_start_reader()
    }
}

impl FromJson for serde_json::Value {
    #[inline]
    fn fast_reader() -> Option<JsonStartReader<Self>> {
        None
    }
}

/// Whether `a` and `b` are the same state of one object: the same uid and the same non-empty
/// resourceVersion. The server changes an object's resourceVersion on every write, so two such
/// values have the same content (a listed object that equals the cached one). Without a
/// resourceVersion nothing can be told: false.
pub(crate) fn same_state<K: Object + ?Sized>(a: &K, b: &K) -> bool {
    // The very same object (a relist that took the cached one) is in the same state, given
    // a resourceVersion.
    (core::ptr::eq(a, b) && a.resource_version().is_some_and(|v| !v.is_empty()))
        || matches!(
            (a.resource_version(), b.resource_version()),
            (Some(x), Some(y)) if !x.is_empty() && x == y
        ) && a.uid() == b.uid()
}

impl<T: Object + ?Sized> Object for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn namespace(&self) -> Option<&str> {
        (**self).namespace()
    }
    fn resource_version(&self) -> Option<&str> {
        (**self).resource_version()
    }
    fn uid(&self) -> Option<&str> {
        (**self).uid()
    }
    fn key_ref(&self) -> KeyRef<'_> {
        (**self).key_ref()
    }
    fn labels(&self) -> MetaMap<'_> {
        (**self).labels()
    }
    fn annotations(&self) -> MetaMap<'_> {
        (**self).annotations()
    }
    fn generation(&self) -> Result<Option<i64>, MetadataError> {
        (**self).generation()
    }
    fn deletion_timestamp(&self) -> Result<Option<Timestamp>, MetadataError> {
        (**self).deletion_timestamp()
    }
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        (**self).finalizers()
    }
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        (**self).owner_references()
    }
    fn api_version(&self) -> Option<&str> {
        (**self).api_version()
    }
    fn kind(&self) -> Option<&str> {
        (**self).kind()
    }
}

/// The final state of a deleted object whose deletion was not observed directly.
///
/// client-go's `DeletedFinalStateUnknown`: when a relist no longer contains an object the cache
/// holds, the watch missed its deletion. The object is the last state the informer knew, which
/// may be stale.
#[derive(Debug)]
pub struct Tombstone<K> {
    /// The key the object was stored under.
    pub key: Key,
    /// The last known state of the object.
    pub obj: Arc<K>,
}

impl<K> Clone for Tombstone<K> {
    fn clone(&self) -> Self {
        Tombstone {
            key: self.key.clone(),
            obj: self.obj.clone(),
        }
    }
}

impl<K> PartialEq for Tombstone<K> {
    /// Tombstones are equal when they carry the same key and the very same object.
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && Arc::ptr_eq(&self.obj, &other.obj)
    }
}

/// What a deletion carries: the object's last state as observed, or a [`Tombstone`] when the
/// deletion was inferred from a relist (client-go hands handlers either the object or a
/// `DeletedFinalStateUnknown`).
#[derive(Debug)]
pub enum ObjectOrTombstone<K> {
    /// The object itself.
    Object(Arc<K>),
    /// A tombstone: the deletion was not observed, the object is the last known state.
    Tombstone(Tombstone<K>),
}

impl<K> ObjectOrTombstone<K> {
    /// The object, or the last known state inside the tombstone.
    pub fn object(&self) -> &Arc<K> {
        match self {
            ObjectOrTombstone::Object(o) => o,
            ObjectOrTombstone::Tombstone(t) => &t.obj,
        }
    }

    /// Whether this is a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, ObjectOrTombstone::Tombstone(_))
    }
}

impl<K> Clone for ObjectOrTombstone<K> {
    fn clone(&self) -> Self {
        match self {
            ObjectOrTombstone::Object(o) => ObjectOrTombstone::Object(o.clone()),
            ObjectOrTombstone::Tombstone(t) => ObjectOrTombstone::Tombstone(t.clone()),
        }
    }
}

/// The `metadata` of any Kubernetes object: the fields the informer and indexers read
/// (name, namespace, uid, resourceVersion, labels, annotations), and every other field
/// (`creationTimestamp`, `ownerReferences`, `managedFields`, …) kept as raw JSON
/// ([`other`](Self::other)).
///
/// All of it is kept in **one heap block** (none when empty): a cached object's metadata is one
/// allocation to build and one `free` to drop, wherever its strings came from. Read it through
/// the accessors — [`name`](Self::name), [`namespace`](Self::namespace), [`uid`](Self::uid),
/// [`resource_version`](Self::resource_version), [`labels`](Self::labels) and
/// [`annotations`](Self::annotations) (borrowed maps, [`StringMapRef`]), [`other`](Self::other)
/// (borrowed raw members, [`RawFieldsRef`]). To build or change it, go through its parts
/// ([`ObjectMetaParts`], plain public fields):
///
/// ```
/// use informer_core::{object::ObjectMeta, object::ObjectMetaParts};
///
/// let mut meta: ObjectMeta = ObjectMetaParts {
///     name: "web".into(),
///     namespace: Some("prod".into()),
///     labels: [("app", "web")].into_iter().collect(),
///     ..Default::default()
/// }
/// .into();
/// assert_eq!(meta.labels().get("app"), Some("web"));
/// meta.edit(|m| {
///     m.labels.insert("tier", "front");
///     m.other.remove("managedFields");
/// });
/// assert_eq!(meta.labels().len(), 2);
/// assert_eq!(meta.namespace(), Some("prod"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// `name ‖ namespace ‖ uid ‖ resourceVersion ‖ labels ‖ annotations ‖ other`: the maps
    /// are in [`StringMap`]'s encoding, `other` is a JSON object text or empty. What keys and
    /// indexes read comes first, in the block's first cache line for most objects.
    text: Box<str>,
    /// Where `name`, `namespace`, `uid`, `resourceVersion`, `labels` and `annotations` end.
    ends: [usize; 6],
    /// Number of labels and of annotations.
    counts: [usize; 2],
    /// Which of namespace, uid and resourceVersion are present (bits 0, 1, 2).
    present: u8,
}

const NAME: usize = 0;
const NAMESPACE: usize = 1;
const UID: usize = 2;
const RESOURCE_VERSION: usize = 3;
const LABELS: usize = 4;
const ANNOTATIONS: usize = 5;
const OTHER: usize = 6;

impl ObjectMeta {
    /// Metadata with only a namespace (`None` for a cluster-scoped object) and a name.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        MetaStrings {
            name,
            namespace,
            ..MetaStrings::default()
        }
        .build()
    }

    fn section(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let end = if i < self.ends.len() {
            self.ends[i]
        } else {
            self.text.len()
        };
        self.text.get(start..end).unwrap_or("")
    }

    fn optional(&self, i: usize) -> Option<&str> {
        (self.present & (1 << (i - NAMESPACE)) != 0).then(|| self.section(i))
    }

    /// `metadata.name` (empty when absent).
    pub fn name(&self) -> &str {
        self.section(NAME)
    }

    /// `metadata.namespace`, or `None` for a cluster-scoped object. An empty string counts as
    /// cluster-scoped, as in [`Object::namespace`]; [`to_parts`](Self::to_parts) keeps it as
    /// sent.
    pub fn namespace(&self) -> Option<&str> {
        self.optional(NAMESPACE).filter(|ns| !ns.is_empty())
    }

    /// `metadata.namespace` as sent (an empty string stays one).
    pub(crate) fn namespace_as_sent(&self) -> Option<&str> {
        self.optional(NAMESPACE)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.optional(UID)
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.optional(RESOURCE_VERSION)
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> StringMapRef<'_> {
        StringMapRef::new(self.section(LABELS), self.counts[0])
    }

    /// `metadata.annotations`.
    pub fn annotations(&self) -> StringMapRef<'_> {
        StringMapRef::new(self.section(ANNOTATIONS), self.counts[1])
    }

    /// Every other metadata field, as raw JSON.
    pub fn other(&self) -> RawFieldsRef<'_> {
        RawFieldsRef::new(self.section(OTHER))
    }

    /// Heap bytes of the block.
    pub fn heap_size(&self) -> usize {
        self.text.len()
    }

    /// The metadata as plain owned parts, to change and turn back into metadata
    /// (`.into()`).
    pub fn to_parts(&self) -> ObjectMetaParts {
        ObjectMetaParts {
            name: self.name().into(),
            namespace: self.namespace_as_sent().map(Into::into),
            uid: self.uid().map(Into::into),
            resource_version: self.resource_version().map(Into::into),
            labels: self.labels().to_owned(),
            annotations: self.annotations().to_owned(),
            other: self.other().to_owned(),
        }
    }

    /// Removes other field `name` (`managedFields`, say), rebuilding the block once; returns
    /// its raw JSON if it was present.
    pub fn remove_other(&mut self, name: &str) -> Option<Box<RawValue>> {
        let mut members = self.other().members();
        let i = members.iter().position(|(k, _)| k == name)?;
        let (_, removed) = members.remove(i);
        let removed = RawValue::from_string(String::from(removed)).ok();
        let mut strings = self.strings();
        strings.other = OtherSource::Members(&members);
        let rebuilt = strings.build();
        drop(members);
        *self = rebuilt;
        removed
    }

    /// Changes the metadata through its parts (the block is rebuilt once, after `f`).
    pub fn edit<R>(&mut self, f: impl FnOnce(&mut ObjectMetaParts) -> R) -> R {
        let mut parts = self.to_parts();
        let out = f(&mut parts);
        *self = parts.into();
        out
    }

    pub(crate) fn strings(&self) -> MetaStrings<'_> {
        MetaStrings {
            other: OtherSource::Text(self.other().text()),
            name: self.name(),
            namespace: self.namespace_as_sent(),
            uid: self.uid(),
            resource_version: self.resource_version(),
            labels: MapSource::Encoded(self.labels()),
            annotations: MapSource::Encoded(self.annotations()),
        }
    }
}

/// The parts of an [`ObjectMeta`], owned and editable: build one with `..Default::default()`
/// and turn it into metadata with `.into()`, or get one from [`ObjectMeta::to_parts`] (and
/// [`ObjectMeta::edit`]).
///
/// The strings are [`CompactString`]s (one of up to 24 bytes lives inside the struct); they
/// read as `&str` and are built from `&str` or `String` with `.into()`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMetaParts {
    /// `metadata.name`.
    pub name: CompactString,
    /// `metadata.namespace`.
    pub namespace: Option<CompactString>,
    /// `metadata.uid`.
    pub uid: Option<CompactString>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<CompactString>,
    /// `metadata.labels`.
    pub labels: StringMap,
    /// `metadata.annotations`.
    pub annotations: StringMap,
    /// Every other metadata field, as raw JSON.
    pub other: RawFields,
}

impl From<ObjectMetaParts> for ObjectMeta {
    fn from(p: ObjectMetaParts) -> Self {
        MetaStrings {
            other: OtherSource::Text(p.other.as_ref().text()),
            name: &p.name,
            namespace: p.namespace.as_deref(),
            uid: p.uid.as_deref(),
            resource_version: p.resource_version.as_deref(),
            labels: MapSource::Encoded(p.labels.as_ref()),
            annotations: MapSource::Encoded(p.annotations.as_ref()),
        }
        .build()
    }
}

impl From<&ObjectMeta> for ObjectMetaParts {
    fn from(m: &ObjectMeta) -> Self {
        m.to_parts()
    }
}

/// The typed strings of a metadata block, borrowed.
#[derive(Default)]
pub(crate) struct MetaStrings<'a> {
    pub(crate) other: OtherSource<'a>,
    pub(crate) name: &'a str,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) uid: Option<&'a str>,
    pub(crate) resource_version: Option<&'a str>,
    pub(crate) labels: MapSource<'a>,
    pub(crate) annotations: MapSource<'a>,
}

/// Labels or annotations for a metadata block: already encoded, or sorted distinct pairs.
pub(crate) enum MapSource<'a> {
    /// A [`StringMap`]'s encoding.
    Encoded(StringMapRef<'a>),
    /// Pairs sorted by key, without duplicates.
    Sorted(&'a [(&'a str, &'a str)]),
}

impl Default for MapSource<'_> {
    fn default() -> Self {
        MapSource::Encoded(StringMapRef::default())
    }
}

impl MapSource<'_> {
    /// Number of entries.
    fn count(&self) -> usize {
        match self {
            MapSource::Encoded(m) => m.len(),
            MapSource::Sorted(p) => p.len(),
        }
    }

    /// Bytes of the encoding.
    fn text_len(&self) -> usize {
        match self {
            MapSource::Encoded(m) => m.text().len(),
            MapSource::Sorted(p) => string_map::encoded_len(p.iter().copied()),
        }
    }

    /// Appends the encoding.
    fn write(&self, out: &mut String) {
        match self {
            MapSource::Encoded(m) => out.push_str(m.text()),
            MapSource::Sorted(p) => string_map::encode_into(out, p.iter().copied()),
        }
    }
}

impl MetaStrings<'_> {
    /// Bytes the typed strings take in a block.
    fn len(&self) -> usize {
        self.name.len()
            + [self.namespace, self.uid, self.resource_version]
                .iter()
                .map(|s| s.map_or(0, str::len))
                .sum::<usize>()
            + self.labels.text_len()
            + self.annotations.text_len()
    }

    /// The metadata block: the typed strings, then the other members, in one exact-size
    /// allocation.
    pub(crate) fn build(&self) -> ObjectMeta {
        let mut text = String::with_capacity(self.len() + self.other.text_len());
        let mut ends = [0; 6];
        text.push_str(self.name);
        ends[NAME] = text.len();
        let mut present = 0;
        for (bit, (i, v)) in [
            (NAMESPACE, self.namespace),
            (UID, self.uid),
            (RESOURCE_VERSION, self.resource_version),
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(v) = v {
                present |= 1 << bit;
                text.push_str(v);
            }
            ends[i] = text.len();
        }
        self.labels.write(&mut text);
        ends[LABELS] = text.len();
        self.annotations.write(&mut text);
        ends[ANNOTATIONS] = text.len();
        self.other.write(&mut text);
        debug_assert_eq!(
            text.len(),
            text.capacity(),
            "the size written is the size computed"
        );
        ObjectMeta {
            text: text.into_boxed_str(),
            ends,
            counts: [self.labels.count(), self.annotations.count()],
            present,
        }
    }
}

/// The other members of a metadata block: a JSON object text, or members being decoded.
pub(crate) enum OtherSource<'a> {
    /// The text of a JSON object with at least one member, or empty (none).
    Text(&'a str),
    /// Members collected while decoding.
    Members(&'a [(Cow<'a, str>, Cow<'a, str>)]),
}

impl Default for OtherSource<'_> {
    fn default() -> Self {
        OtherSource::Text("")
    }
}

impl OtherSource<'_> {
    fn text_len(&self) -> usize {
        match self {
            OtherSource::Text(t) => t.len(),
            OtherSource::Members(m) => crate::object::raw::members_len(m),
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            OtherSource::Text(t) => out.push_str(t),
            OtherSource::Members(m) => crate::object::raw::write_members(out, m),
        }
    }
}

impl fmt::Debug for ObjectMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectMeta")
            .field("name", &self.name())
            .field("namespace", &self.namespace_as_sent())
            .field("uid", &self.uid())
            .field("resource_version", &self.resource_version())
            .field("labels", &self.labels())
            .field("annotations", &self.annotations())
            .field("other", &self.other())
            .finish()
    }
}

impl<'de> Deserialize<'de> for ObjectMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ObjectMeta;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("object metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ObjectMeta, A::Error> {
                // Everything is kept borrowed from the input where it can be, then written
                // into the block in one exact-size allocation.
                let mut other = RawFieldsBuilder::default();
                let mut name = None;
                let (mut namespace, mut uid, mut resource_version) = (None, None, None);
                let mut labels = None;
                let mut annotations = None;
                while let Some(Str(key)) = map.next_key()? {
                    match &*key {
                        "name" => name = map.next_value::<Option<Str<'de>>>()?,
                        "namespace" => namespace = map.next_value::<Option<Str<'de>>>()?,
                        "uid" => uid = map.next_value::<Option<Str<'de>>>()?,
                        "resourceVersion" => {
                            resource_version = map.next_value::<Option<Str<'de>>>()?
                        }
                        "labels" => labels = map.next_value::<Option<Pairs<'de>>>()?,
                        "annotations" => annotations = map.next_value::<Option<Pairs<'de>>>()?,
                        _ => other.push_value(key, &mut map)?,
                    }
                }
                let label_pairs = labels.as_ref().map(Pairs::strs).unwrap_or_default();
                let annotation_pairs = annotations.as_ref().map(Pairs::strs).unwrap_or_default();
                let strings = MetaStrings {
                    other: OtherSource::Members(other.members()),
                    name: name.as_ref().map_or("", |s| s.as_ref()),
                    namespace: namespace.as_ref().map(|s| s.as_ref()),
                    uid: uid.as_ref().map(|s| s.as_ref()),
                    resource_version: resource_version.as_ref().map(|s| s.as_ref()),
                    labels: MapSource::Sorted(&label_pairs),
                    annotations: MapSource::Sorted(&annotation_pairs),
                };
                Ok(strings.build())
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for ObjectMeta {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.strings();
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", m.name)?;
        if let Some(ns) = m.namespace {
            map.serialize_entry("namespace", ns)?;
        }
        if let Some(uid) = m.uid {
            map.serialize_entry("uid", uid)?;
        }
        if let Some(rv) = m.resource_version {
            map.serialize_entry("resourceVersion", rv)?;
        }
        if !self.labels().is_empty() {
            map.serialize_entry("labels", &self.labels())?;
        }
        if !self.annotations().is_empty() {
            map.serialize_entry("annotations", &self.annotations())?;
        }
        self.other().serialize_into(&mut map)?;
        map.end()
    }
}

/// An object of any kind, built-in or custom: typed metadata, everything else (`spec`,
/// `status`, `data`, …) kept as one block of raw JSON in [`fields`](Self::fields).
///
/// Keeping the rest raw makes a cached object about as large as its JSON and cheap to drop;
/// read a field with [`field`](Self::field) (decoded on demand) or [`RawFields::to_map`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DynamicObject {
    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub api_version: Option<CompactString>,
    /// `kind`, e.g. `ConfigMap`.
    pub kind: Option<CompactString>,
    /// `metadata`.
    pub metadata: ObjectMeta,
    /// Every other top-level field, as raw JSON.
    pub fields: RawFields,
}

impl<'de> Deserialize<'de> for DynamicObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DynamicObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DynamicObject, A::Error> {
                let mut obj = DynamicObject::default();
                let mut fields = RawFieldsBuilder::default();
                while let Some(Str(key)) = map.next_key()? {
                    match &*key {
                        "apiVersion" => obj.api_version = map.next_value()?,
                        "kind" => obj.kind = map.next_value()?,
                        "metadata" => {
                            obj.metadata = map.next_value::<Option<_>>()?.unwrap_or_default()
                        }
                        _ => fields.push_value(key, &mut map)?,
                    }
                }
                obj.fields = fields.finish();
                Ok(obj)
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for DynamicObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(v) = &self.api_version {
            map.serialize_entry("apiVersion", v)?;
        }
        if let Some(k) = &self.kind {
            map.serialize_entry("kind", k)?;
        }
        map.serialize_entry("metadata", &self.metadata)?;
        self.fields.serialize_into(&mut map)?;
        map.end()
    }
}

impl Object for DynamicObject {
    fn name(&self) -> &str {
        self.metadata.name()
    }
    fn namespace(&self) -> Option<&str> {
        self.metadata.namespace()
    }
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version()
    }
    fn uid(&self) -> Option<&str> {
        self.metadata.uid()
    }
    fn labels(&self) -> MetaMap<'_> {
        self.metadata.labels().into()
    }
    fn annotations(&self) -> MetaMap<'_> {
        self.metadata.annotations().into()
    }
    fn generation(&self) -> Result<Option<i64>, MetadataError> {
        Object::generation(&self.metadata)
    }
    fn deletion_timestamp(&self) -> Result<Option<Timestamp>, MetadataError> {
        Object::deletion_timestamp(&self.metadata)
    }
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        Object::finalizers(&self.metadata)
    }
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        Object::owner_references(&self.metadata)
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    #[inline]
    fn json_start_reader() -> Option<JsonStartReader<Self>> {
        Some(DynamicObject::from_json_start)
    }
    #[inline]
    fn type_meta_filler() -> Option<fn(&mut Self, api_version: &str, kind: &str)> {
        Some(|obj, api_version, kind| {
            if obj.api_version.is_none() {
                obj.api_version = Some(api_version.into());
            }
            if obj.kind.is_none() {
                obj.kind = Some(kind.into());
            }
        })
    }
}

/// Who a JSON object is, read from its text without decoding it: its key and
/// resourceVersion, as [`Object`] has them for the object decoded from the same text.
///
/// A list answer names the version of every object it holds, and an informer that relists
/// already holds most of them at that version (the same key and resourceVersion are the same
/// object): reading this much of an item is enough to take the cached object instead of
/// building a copy.
///
/// ```
/// use informer_core::object::JsonIdentity;
///
/// let text = r#"{"metadata":{"namespace":"ns","name":"a","resourceVersion":"7"},"data":{}},{"#;
/// let (id, len) = JsonIdentity::of_json_start(text).unwrap();
/// assert_eq!((id.namespace, id.name, id.resource_version), (Some("ns"), "a", Some("7")));
/// assert_eq!(&text[len..], ",{");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JsonIdentity<'a> {
    /// `metadata.namespace`; `None` when absent, `null` or empty.
    pub namespace: Option<&'a str>,
    /// `metadata.name`; empty when absent or `null`.
    pub name: &'a str,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<&'a str>,
}

impl<'a> JsonIdentity<'a> {
    /// The identity of the JSON object that starts `text` (at its `{`) and the bytes the
    /// object takes (`text` may go on after it).
    ///
    /// Every byte of the object is read, its syntax checked as [`DynamicObject::from_json_start`]
    /// checks it, but only these three strings are kept, borrowed from `text`. `None` when the
    /// text is not one JSON object, or one of the three is not a string without escapes (or
    /// `null`): decode the object then.
    pub fn of_json_start(text: &'a str) -> Option<(JsonIdentity<'a>, usize)> {
        crate::object::json::identity(text)
    }

    /// The key an object with this identity is cached under.
    pub fn key(&self) -> KeyRef<'a> {
        KeyRef::new(self.namespace, self.name)
    }
}

impl DynamicObject {
    /// Decodes the JSON object that starts `text` (at its `{`) as
    /// `serde_json::Deserializer::from_str(text).into_iter::<DynamicObject>().next()` does —
    /// the same object, and the bytes it takes (`text` may go on after it) — but reading the
    /// raw members (`data`, `spec`, `managedFields`, …) several bytes at a time instead of one:
    /// most of a list's bytes are such values.
    ///
    /// `None` when this decoder leaves the text to serde_json: a string it keeps (a key, the
    /// name, a label) has an escape, a value has an unexpected type, or the text is not one
    /// JSON object. Decode it with serde_json then, which gives the same object or the error;
    /// this never accepts what serde_json refuses.
    ///
    /// ```
    /// use informer_core::object::DynamicObject;
    ///
    /// let text = r#"{"kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}} next"#;
    /// let (obj, len) = DynamicObject::from_json_start(text).unwrap();
    /// assert_eq!(obj.metadata.name(), "a");
    /// assert_eq!(&text[len..], " next");
    /// let mut serde = serde_json::Deserializer::from_str(text).into_iter::<DynamicObject>();
    /// assert_eq!(obj, serde.next().unwrap().unwrap());
    /// assert_eq!(len, serde.byte_offset());
    /// ```
    pub fn from_json_start(text: &str) -> Option<(DynamicObject, usize)> {
        crate::object::json::dynamic_object(text)
    }

    /// A label value.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.metadata.labels().get(name)
    }

    /// Top-level field `name` (`spec`, `data`, …) decoded as `T`; `None` when absent.
    pub fn field<T: de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<Result<T, serde_json::Error>> {
        self.fields.field(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::string::String;
    use serde_json::Value;

    fn meta(ns: Option<&str>, name: &str) -> DynamicObject {
        DynamicObject {
            metadata: ObjectMetaParts {
                name: name.into(),
                namespace: ns.map(Into::into),
                ..Default::default()
            }
            .into(),
            ..Default::default()
        }
    }

    /// CONFORMANCE 1: the key is `namespace/name`, or `name` when cluster-scoped.
    #[test]
    fn conformance_01_key_is_namespace_slash_name_or_name() {
        assert_eq!(Key::of(&meta(Some("default"), "cm")).as_str(), "default/cm");
        assert_eq!(Key::of(&meta(None, "node-1")).as_str(), "node-1");
        assert_eq!(Key::of(&meta(Some(""), "node-1")).as_str(), "node-1");
        let k = Key::parse("kube-system/coredns");
        assert_eq!(k.namespace(), Some("kube-system"));
        assert_eq!(k.name(), "coredns");
        assert_eq!(Key::parse("n1").namespace(), None);
        assert_eq!(
            alloc::format!("{}", KeyRef::new(Some("default"), "cm")),
            "default/cm"
        );
        assert_eq!(alloc::format!("{}", KeyRef::new(Some(""), "n")), "n");
        assert_eq!(alloc::format!("{}", KeyRef::new(None, "node-1")), "node-1");
    }

    #[test]
    fn dynamic_object_round_trips_unknown_fields() {
        let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","uid":"u","labels":{"app":"x"},"creationTimestamp":"2020-01-01T00:00:00Z"},"data":{"k":"v"}}"#;
        let obj: DynamicObject = serde_json::from_str(json).unwrap();
        assert_eq!(obj.resource_version(), Some("7"));
        assert_eq!(obj.label("app"), Some("x"));
        let data: BTreeMap<String, String> = obj.field("data").unwrap().unwrap();
        assert_eq!(data["k"], "v");
        assert!(obj.field::<u8>("spec").is_none());
        assert_eq!(
            obj.metadata.other().get("creationTimestamp").unwrap().get(),
            r#""2020-01-01T00:00:00Z""#
        );
        let back: Value = serde_json::to_value(&obj).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(json).unwrap());
        // Through a `Value` as well (not only from text).
        let via_value: DynamicObject = serde_json::from_value(back.clone()).unwrap();
        assert_eq!(via_value, obj);
        // Escaped keys survive the raw round trip.
        let odd = r#"{"metadata":{"name":"x"},"we\"ird\n":{"a\u0001":[1,2.5,null]}}"#;
        let obj: DynamicObject = serde_json::from_str(odd).unwrap();
        assert_eq!(
            serde_json::to_value(&obj).unwrap(),
            serde_json::from_str::<Value>(odd).unwrap()
        );
    }

    #[test]
    fn metadata_reads_from_one_block_and_changes_through_its_parts() {
        let json = r#"{"name":"a","namespace":"","uid":"u-1","labels":{"b":"2","a":"1","b":"3"},"annotations":{"x":"y\n"},"creationTimestamp":"t","ownerReferences":[{"k":"v"}]}"#;
        let m: ObjectMeta = serde_json::from_str(json).unwrap();
        assert_eq!(m.name(), "a");
        assert_eq!(m.namespace(), None, "an empty namespace is cluster-scoped");
        assert_eq!(m.to_parts().namespace.as_deref(), Some(""), "kept as sent");
        assert_eq!((m.uid(), m.resource_version()), (Some("u-1"), None));
        assert_eq!(m.labels().len(), 2);
        assert_eq!(m.labels().get("b"), Some("3"), "later duplicates win");
        assert_eq!(
            m.labels().iter().collect::<alloc::vec::Vec<_>>(),
            [("a", "1"), ("b", "3")]
        );
        assert_eq!(m.annotations().get("x"), Some("y\n"));
        assert_eq!(m.other().get("creationTimestamp").unwrap().get(), r#""t""#);
        assert_eq!(m.other().entries().len(), 2);
        assert_eq!(ObjectMeta::from(m.to_parts()), m, "parts round-trip");
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"name": "a", "namespace": "", "uid": "u-1",
                "labels": {"a": "1", "b": "3"}, "annotations": {"x": "y\n"},
                "creationTimestamp": "t", "ownerReferences": [{"k": "v"}]})
        );

        let mut edited = m.clone();
        let old = edited.edit(|p| {
            p.resource_version = Some("9".into());
            p.namespace = Some("ns".into());
            p.other.remove("ownerReferences");
            p.labels.remove("a")
        });
        assert_eq!(old.as_deref(), Some("1"));
        assert_eq!(edited.resource_version(), Some("9"));
        assert_eq!(edited.namespace(), Some("ns"));
        assert_eq!(
            edited.labels().iter().collect::<alloc::vec::Vec<_>>(),
            [("b", "3")]
        );
        assert!(!edited.other().contains_key("ownerReferences"));
        assert!(edited.other().contains_key("creationTimestamp"));
        assert_eq!((edited.name(), edited.uid()), ("a", Some("u-1")));
        assert_ne!(edited, m);
        let mut stripped = m.clone();
        assert_eq!(
            stripped.remove_other("ownerReferences").unwrap().get(),
            r#"[{"k":"v"}]"#
        );
        assert!(stripped.remove_other("ownerReferences").is_none());
        assert_eq!(stripped.other().as_json(), r#"{"creationTimestamp":"t"}"#);
        assert_eq!(stripped.labels(), m.labels());
        assert_eq!(stripped.uid(), Some("u-1"));
        assert_eq!(
            stripped.remove_other("creationTimestamp").unwrap().get(),
            r#""t""#
        );
        assert!(
            stripped.other().is_empty(),
            "no members left: {:?}",
            stripped.other()
        );

        let empty = ObjectMeta::default();
        assert_eq!(
            (empty.name(), empty.namespace(), empty.uid()),
            ("", None, None)
        );
        assert!(empty.labels().is_empty() && empty.other().is_empty());
        assert_eq!(empty.heap_size(), 0, "empty metadata holds no block");
        assert_eq!(ObjectMeta::from(ObjectMetaParts::default()), empty);
        let n = ObjectMeta::new(Some("ns"), "n");
        assert_eq!((n.namespace(), n.name()), (Some("ns"), "n"));
        assert_eq!(n.heap_size(), 3);
        let debug = alloc::format!("{m:?}");
        assert!(debug.contains(r#"name: "a""#) && debug.contains("creationTimestamp"));
    }

    #[test]
    fn dynamic_object_tolerates_nulls_and_missing_metadata() {
        let obj: DynamicObject =
            serde_json::from_str(r#"{"metadata":{"name":null,"labels":null},"spec":null}"#)
                .unwrap();
        assert_eq!(obj.name(), "");
        assert!(obj.metadata.labels().is_empty());
        let obj: DynamicObject = serde_json::from_str(r#"{"kind":"X"}"#).unwrap();
        assert_eq!(obj.kind.as_deref(), Some("X"));
        assert!(serde_json::from_str::<DynamicObject>(r#"{"metadata":{"name":7}}"#).is_err());
        assert!(serde_json::from_str::<DynamicObject>("[1]").is_err());
    }
}
