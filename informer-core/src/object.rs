//! What the informer needs from an object, how objects are keyed, and a dynamic object type.

use alloc::string::String;
use alloc::sync::Arc;
use core::fmt;
use core::hash::{Hash, Hasher};

use alloc::borrow::Cow;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::raw::{RawFields, RawFieldsBuilder};
use crate::string_map::StringMap;

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

    /// The borrowed key of this object (no allocation).
    fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::new(self.namespace(), self.name())
    }
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
}

/// The cache key of an object: `namespace/name`, or `name` for a cluster-scoped object.
///
/// A `Key` is a shared immutable string: cloning it bumps a reference count, so the same key
/// can sit in the store, in every index bucket and in every queue without new allocations.
/// Lookups by an object's borrowed [`KeyRef`] need no allocation either: both hash the
/// namespace and name parts the same way (see the `Hash` impls).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key(Arc<str>);

impl Key {
    /// The key for `name` in `namespace` (`None` or `""`: cluster-scoped).
    pub fn new(namespace: Option<&str>, name: &str) -> Key {
        KeyRef::new(namespace, name).to_key()
    }

    /// The key of `obj`.
    pub fn of<K: Object + ?Sized>(obj: &K) -> Key {
        obj.key_ref().to_key()
    }

    /// Parses `namespace/name` or `name`. Kubernetes names and namespaces never contain `/`, so
    /// the first `/` separates them.
    pub fn parse(s: &str) -> Key {
        Key(Arc::from(s))
    }

    /// The key as `namespace/name` or `name`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The namespace part, `None` for a cluster-scoped key.
    pub fn namespace(&self) -> Option<&str> {
        self.as_ref_parts().namespace
    }

    /// The name part.
    pub fn name(&self) -> &str {
        self.as_ref_parts().name
    }

    /// This key as a borrowed [`KeyRef`].
    pub fn as_ref_parts(&self) -> KeyRef<'_> {
        match self.0.split_once('/') {
            Some((ns, name)) => KeyRef {
                namespace: Some(ns),
                name,
            },
            None => KeyRef {
                namespace: None,
                name: &self.0,
            },
        }
    }
}

/// Keys up to this length hash as one contiguous write; `KeyRef` assembles the same bytes in a
/// stack buffer of this size. A longer key (not a valid Kubernetes name) hashes its first
/// `INLINE_KEY_HASH` joined bytes and its length: the same on both sides, whatever the
/// namespace/name split, so no lookup can miss (equality still compares every byte).
const INLINE_KEY_HASH: usize = 320;

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let bytes = self.0.as_bytes();
        if bytes.len() <= INLINE_KEY_HASH {
            state.write(bytes);
            state.write_u8(0xff);
        } else {
            state.write(&bytes[..INLINE_KEY_HASH]);
            state.write_usize(bytes.len());
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<KeyRef<'_>> for Key {
    fn from(k: KeyRef<'_>) -> Key {
        k.to_key()
    }
}

/// A borrowed key: the namespace and name of an object, not joined.
///
/// Hashes and compares equal to the [`Key`] it stands for, so maps keyed by `Key` can be
/// queried with a `KeyRef` without building the joined string.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KeyRef<'a> {
    /// The namespace, `None` when cluster-scoped (an empty namespace is normalised to `None`).
    pub namespace: Option<&'a str>,
    /// The name.
    pub name: &'a str,
}

impl<'a> KeyRef<'a> {
    /// A borrowed key; an empty namespace means cluster-scoped.
    pub fn new(namespace: Option<&'a str>, name: &'a str) -> Self {
        KeyRef {
            namespace: namespace.filter(|ns| !ns.is_empty()),
            name,
        }
    }

    /// Builds the owned, joined [`Key`] (one allocation).
    pub fn to_key(self) -> Key {
        match self.namespace {
            None => Key(Arc::from(self.name)),
            Some(ns) if self.joined_len() <= INLINE_KEY_HASH => {
                // Join on the stack so the `Arc` is the only allocation.
                let mut buf = [0u8; INLINE_KEY_HASH];
                let len = self.join_prefix(&mut buf);
                match core::str::from_utf8(&buf[..len]) {
                    Ok(joined) => Key(Arc::from(joined)),
                    // Unreachable: the buffer holds two `str`s and an ASCII byte.
                    Err(_) => Key(Arc::from(alloc::format!("{ns}/{}", self.name).as_str())),
                }
            }
            Some(ns) => {
                let mut s = String::with_capacity(ns.len() + 1 + self.name.len());
                s.push_str(ns);
                s.push('/');
                s.push_str(self.name);
                Key(Arc::from(s))
            }
        }
    }
}

impl fmt::Display for KeyRef<'_> {
    /// `namespace/name`, or `name` when cluster-scoped: the same text as the [`Key`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(self.name),
        }
    }
}

impl KeyRef<'_> {
    /// Length of the joined key.
    fn joined_len(&self) -> usize {
        match self.namespace {
            Some(ns) => ns.len() + 1 + self.name.len(),
            None => self.name.len(),
        }
    }

    /// Writes the first `buf.len()` bytes of the joined key into `buf`; returns how many.
    fn join_prefix(&self, buf: &mut [u8; INLINE_KEY_HASH]) -> usize {
        let mut n = 0;
        let mut put = |bytes: &[u8]| {
            let take = bytes.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&bytes[..take]);
            n += take;
        };
        if let Some(ns) = self.namespace {
            put(ns.as_bytes());
            put(b"/");
        }
        put(self.name.as_bytes());
        n
    }
}

impl Hash for KeyRef<'_> {
    /// Hashes exactly as the [`Key`] it stands for: the joined bytes (their first
    /// `INLINE_KEY_HASH` and the length, for an over-long key) in one write.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let len = self.joined_len();
        match self.namespace {
            None if len <= INLINE_KEY_HASH => state.write(self.name.as_bytes()),
            None => state.write(&self.name.as_bytes()[..INLINE_KEY_HASH]),
            Some(_) => {
                let mut buf = [0u8; INLINE_KEY_HASH];
                let n = self.join_prefix(&mut buf);
                state.write(&buf[..n]);
            }
        }
        if len <= INLINE_KEY_HASH {
            state.write_u8(0xff);
        } else {
            state.write_usize(len);
        }
    }
}

impl hashbrown::Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        // Compare against the joined form without searching for the separator.
        let k = key.as_str().as_bytes();
        match self.namespace {
            None => k == self.name.as_bytes(),
            Some(ns) => {
                k.len() == ns.len() + 1 + self.name.len()
                    && k[ns.len()] == b'/'
                    && k.ends_with(self.name.as_bytes())
                    && k.starts_with(ns.as_bytes())
            }
        }
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

/// The `metadata` of any Kubernetes object: the fields the informer and indexers read, typed;
/// every other field (`creationTimestamp`, `ownerReferences`, `managedFields`, …) kept as raw
/// JSON in [`other`](Self::other).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectMeta {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.labels`.
    pub labels: StringMap,
    /// `metadata.annotations`.
    pub annotations: StringMap,
    /// Every other metadata field, as raw JSON.
    pub other: RawFields,
}

/// A JSON object key, borrowed from the input when it has no escapes.
struct MapKey<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for MapKey<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MapKey<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MapKey(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MapKey(Cow::Owned(v.into())))
            }
        }
        d.deserialize_str(V)
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
                let mut meta = ObjectMeta::default();
                let mut other = RawFieldsBuilder::default();
                while let Some(MapKey(key)) = map.next_key()? {
                    match &*key {
                        "name" => {
                            meta.name = map.next_value::<Option<String>>()?.unwrap_or_default()
                        }
                        "namespace" => meta.namespace = map.next_value()?,
                        "uid" => meta.uid = map.next_value()?,
                        "resourceVersion" => meta.resource_version = map.next_value()?,
                        "labels" => {
                            meta.labels = map.next_value::<Option<_>>()?.unwrap_or_default()
                        }
                        "annotations" => {
                            meta.annotations = map.next_value::<Option<_>>()?.unwrap_or_default()
                        }
                        _ => other.push_value(&key, &mut map)?,
                    }
                }
                meta.other = other.finish();
                Ok(meta)
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for ObjectMeta {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        if let Some(ns) = &self.namespace {
            map.serialize_entry("namespace", ns)?;
        }
        if let Some(uid) = &self.uid {
            map.serialize_entry("uid", uid)?;
        }
        if let Some(rv) = &self.resource_version {
            map.serialize_entry("resourceVersion", rv)?;
        }
        if !self.labels.is_empty() {
            map.serialize_entry("labels", &self.labels)?;
        }
        if !self.annotations.is_empty() {
            map.serialize_entry("annotations", &self.annotations)?;
        }
        self.other.serialize_into(&mut map)?;
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
    pub api_version: Option<String>,
    /// `kind`, e.g. `ConfigMap`.
    pub kind: Option<String>,
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
                while let Some(MapKey(key)) = map.next_key()? {
                    match &*key {
                        "apiVersion" => obj.api_version = map.next_value()?,
                        "kind" => obj.kind = map.next_value()?,
                        "metadata" => {
                            obj.metadata = map.next_value::<Option<_>>()?.unwrap_or_default()
                        }
                        _ => fields.push_value(&key, &mut map)?,
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
        &self.metadata.name
    }
    fn namespace(&self) -> Option<&str> {
        self.metadata
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
    }
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.metadata.uid.as_deref()
    }
}

impl DynamicObject {
    /// A label value.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.metadata.labels.get(name)
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
    use core::hash::BuildHasher;
    use serde_json::Value;

    fn meta(ns: Option<&str>, name: &str) -> DynamicObject {
        DynamicObject {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: ns.map(Into::into),
                ..Default::default()
            },
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
    fn key_ref_hashes_and_compares_like_key() {
        let s = hashbrown::DefaultHashBuilder::default();
        for (ns, name) in [
            (Some("a"), "b"),
            (None, "b"),
            (Some("ab"), ""),
            (Some(""), "x"),
        ] {
            let r = KeyRef::new(ns, name);
            let k = r.to_key();
            assert_eq!(s.hash_one(&k), s.hash_one(r));
            assert!(hashbrown::Equivalent::equivalent(&r, &k));
        }
        let long_ns = "n".repeat(200);
        let long_name = "x".repeat(300);
        for (ns, name) in [
            (Some(long_ns.as_str()), long_name.as_str()),
            (None, long_name.as_str()),
        ] {
            let r = KeyRef::new(ns, name);
            assert_eq!(s.hash_one(r.to_key()), s.hash_one(r));
        }
        // "a/bc" and "ab/c" must not collide structurally.
        assert!(!hashbrown::Equivalent::equivalent(
            &KeyRef::new(Some("ab"), "c"),
            &Key::parse("a/bc")
        ));
    }

    /// Regression (faults probe): a cluster-scoped name `"x/" + "y" * 400` used to hash as
    /// namespace `x` + name `y…` on the `Key` side and as one name on the `KeyRef` side, so
    /// `get` and `delete` missed it. Every split of an over-long key must hash alike.
    #[test]
    fn over_long_keys_with_a_slash_hash_alike_on_both_sides() {
        let s = hashbrown::DefaultHashBuilder::default();
        let name = alloc::format!("x/{}", "y".repeat(400));
        let r = KeyRef::new(None, &name);
        let k = r.to_key();
        assert_eq!(s.hash_one(&k), s.hash_one(r));
        assert!(hashbrown::Equivalent::equivalent(&r, &k));
        let mut map: crate::hash::HashMap<Key, u32> = Default::default();
        map.insert(k.clone(), 1);
        assert_eq!(map.get(&r), Some(&1));
        assert_eq!(map.remove(&r), Some(1));
        for split in [1, 2, 100, 319, 320, 321, 399] {
            let joined = "z".repeat(402);
            let (ns, name) = joined.split_at(split);
            let r = KeyRef::new(Some(ns), &name[1..]);
            assert_eq!(s.hash_one(r.to_key()), s.hash_one(r), "split at {split}");
        }
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
            obj.metadata.other.get("creationTimestamp").unwrap().get(),
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
    fn dynamic_object_tolerates_nulls_and_missing_metadata() {
        let obj: DynamicObject =
            serde_json::from_str(r#"{"metadata":{"name":null,"labels":null},"spec":null}"#)
                .unwrap();
        assert_eq!(obj.name(), "");
        assert!(obj.metadata.labels.is_empty());
        let obj: DynamicObject = serde_json::from_str(r#"{"kind":"X"}"#).unwrap();
        assert_eq!(obj.kind.as_deref(), Some("X"));
        assert!(serde_json::from_str::<DynamicObject>(r#"{"metadata":{"name":7}}"#).is_err());
        assert!(serde_json::from_str::<DynamicObject>("[1]").is_err());
    }
}
