//! [`PartialObjectMetadata`]: an object's metadata without the rest, for metadata-only
//! informers (client-go's `metadatainformer`, kube-rs's `metadata_watcher`).

use compact_str::CompactString;

use serde::{Deserialize, Serialize};

use crate::object::meta_fields::{Finalizers, MetaMap, MetadataError, OwnerReferences, Timestamp};
use crate::object::selector::Labels;
use crate::object::{Object, ObjectMeta};

/// The metadata of an object of any kind (`meta.k8s.io/v1` `PartialObjectMetadata`).
///
/// An informer of this type asks the server for metadata only (the transport sends
/// `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`), so a list of
/// Secrets or large ConfigMaps costs the bytes of their names, labels and annotations, not of
/// their data. A server that does not offer the representation answers with whole objects,
/// which decode into this type all the same.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PartialObjectMetadata {
    /// `apiVersion` as the server sent it (`meta.k8s.io/v1` for the metadata representation).
    #[serde(
        rename = "apiVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<CompactString>,
    /// `kind` as the server sent it (`PartialObjectMetadata`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<CompactString>,
    /// The object's metadata: name, namespace, uid, resourceVersion, labels, annotations and
    /// the rest of `metadata` (owner references, finalizers, ...) as raw JSON.
    #[serde(default)]
    pub metadata: ObjectMeta,
}

impl Object for PartialObjectMetadata {
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
    /// `None` for the metadata representation's own `meta.k8s.io/v1`: it is not the object's.
    fn api_version(&self) -> Option<&str> {
        self.api_version
            .as_deref()
            .filter(|_| !self.is_metadata_representation())
    }
    /// `None` for the metadata representation's own `PartialObjectMetadata`: it is not the
    /// object's kind.
    fn kind(&self) -> Option<&str> {
        self.kind
            .as_deref()
            .filter(|_| !self.is_metadata_representation())
    }
    #[inline]
    fn metadata_only() -> bool {
        true
    }
}

impl PartialObjectMetadata {
    /// Whether this came as the metadata representation (`kind: PartialObjectMetadata`),
    /// whose `apiVersion` and `kind` are the representation's, not the object's.
    fn is_metadata_representation(&self) -> bool {
        self.kind.as_deref() == Some("PartialObjectMetadata")
    }
}

impl Labels for PartialObjectMetadata {
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels().get(key)
    }
    fn same_labels(&self, other: &Self) -> bool {
        self.metadata.same_labels(&other.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_metadata_representation_and_whole_objects_alike() {
        let partial = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"7","labels":{"app":"web"},"ownerReferences":[{"kind":"X","name":"o","uid":"1","apiVersion":"v1"}]}}"#;
        let p: PartialObjectMetadata = serde_json::from_str(partial).unwrap();
        assert_eq!(p.key_ref(), crate::object::KeyRef::new(Some("ns"), "a"));
        assert_eq!(p.resource_version(), Some("7"));
        assert_eq!(p.label("app"), Some("web"));
        assert!(p.metadata.other().get("ownerReferences").is_some());
        let whole = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns"},"data":{"big":"xxxxxxxx"}}"#;
        let w: PartialObjectMetadata = serde_json::from_str(whole).unwrap();
        assert_eq!(w.name(), "a");
        assert_eq!(w.kind.as_deref(), Some("ConfigMap"));
        let back = serde_json::to_value(&p).unwrap();
        assert_eq!(back["metadata"]["labels"]["app"], "web");
    }
}
