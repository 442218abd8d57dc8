//! [`ShardView`]: what the labels mode's sharder caches of each object.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::object::{ObjectMeta, ObjectMetaParts, RawFields, StringMap};

/// An object as the labels mode's sharder sees it: name, namespace, uid, resourceVersion,
/// labels and `ownerReferences` (the hash input of an owned object), nothing else.
///
/// It decodes straight from the server's JSON (the metadata representation, like
/// [`PartialObjectMetadata`](crate::object::PartialObjectMetadata), or a whole object): every
/// other field (`managedFields`, annotations, timestamps, `data`...) is skipped as it is read,
/// never allocated, so a list of every object the ring shares costs the sharder only these
/// fields, even before its informer has the whole list in hand.
/// [`ShardConfig::object_shard`](super::ShardConfig::object_shard) reads the same of it as
/// of the whole object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardView {
    /// The metadata kept.
    pub metadata: ObjectMeta,
}

impl From<ObjectMeta> for ShardView {
    /// Keeps what [`ShardView`] keeps of `meta` (a copy cut the same way).
    fn from(meta: ObjectMeta) -> Self {
        let other = meta
            .other()
            .get("ownerReferences")
            .and_then(|r| {
                RawFields::from_json(&format!("{{\"ownerReferences\":{}}}", r.get())).ok()
            })
            .unwrap_or_default();
        ShardView {
            metadata: ObjectMetaParts {
                name: meta.name().into(),
                namespace: meta.namespace().map(Into::into),
                uid: meta.uid().map(Into::into),
                resource_version: meta.resource_version().map(Into::into),
                labels: meta.labels().to_owned(),
                annotations: StringMap::new(),
                other,
            }
            .into(),
        }
    }
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    metadata: Option<WireMeta<'a>>,
}

#[derive(Deserialize)]
struct WireMeta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    labels: Option<BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
    #[serde(default, rename = "ownerReferences")]
    owner_references: Option<Box<RawValue>>,
}

impl<'de> Deserialize<'de> for ShardView {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Some(m) = Wire::deserialize(d)?.metadata else {
            return Ok(ShardView::default());
        };
        let other = match &m.owner_references {
            Some(r) => RawFields::from_json(&format!("{{\"ownerReferences\":{}}}", r.get()))
                .map_err(serde::de::Error::custom)?,
            None => RawFields::new(),
        };
        let labels: StringMap = m.labels.unwrap_or_default().into_iter().collect();
        Ok(ShardView {
            metadata: ObjectMetaParts {
                name: m.name.as_deref().unwrap_or("").into(),
                namespace: m.namespace.as_deref().map(Into::into),
                uid: m.uid.as_deref().map(Into::into),
                resource_version: m.resource_version.as_deref().map(Into::into),
                labels,
                annotations: StringMap::new(),
                other,
            }
            .into(),
        })
    }
}

crate::impl_object!([] ShardView, metadata {
    /// Asks for the metadata representation: the server sends no `data` or `spec`.
    #[inline]
    fn metadata_only() -> bool {
        true
    }
});
