//! What the informer needs from an object, how objects are keyed, and a dynamic object type.

use alloc::sync::Arc;

pub use compact_str::CompactString;
use core::fmt;

use alloc::borrow::Cow;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::key::{Key, KeyRef};
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
///
/// The strings are [`CompactString`]s: one of up to 24 bytes (a name, a namespace, a
/// resourceVersion) lives inside the struct, so it costs no heap block to keep and no `free`
/// to drop; a longer one is on the heap as with `String`. They read as `&str` (`Deref`) and are
/// built from `&str` or `String` with `.into()`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectMeta {
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
                            meta.name = map
                                .next_value::<Option<CompactString>>()?
                                .unwrap_or_default()
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
    use alloc::string::String;
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
