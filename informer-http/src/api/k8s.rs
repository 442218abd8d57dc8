//! k8s-openapi types as informer objects (feature `k8s-openapi`).

use std::any::TypeId;
use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

use informer_core::object::{
    Finalizers, MetaMap, MetadataError, Object, OwnerReference, OwnerReferenceRef, OwnerReferences,
    Timestamp,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::Api;
use crate::backend::Backend;
use crate::client::Client;
use crate::resource::{HasResource, Resource};

/// A k8s-openapi resource type as an informer object: `Api<K8s<ConfigMap>, _>`.
///
/// A newtype because of the orphan rule (neither `Object` nor the k8s-openapi types belong to
/// this crate); it (de)serializes exactly as the wrapped type and derefs to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct K8s<T>(pub T);

impl<T> Deref for K8s<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for K8s<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Labels for [`Selector`](informer_core::object::selector::Selector) queries on the cache.
impl<T: k8s_openapi::Metadata<Ty = ObjectMeta>> informer_core::object::selector::Labels for K8s<T> {
    fn label(&self, key: &str) -> Option<&str> {
        self.0
            .metadata()
            .labels
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

/// Stored in snapshots as JSON, the one encoding every k8s-openapi type round-trips through
/// exactly (their serde impls are written for JSON: optional fields skipped, `Quantity`,
/// `IntOrString` and `serde_json::Value` fields).
impl<T> informer_core::snapshot::SnapshotCodec for K8s<T> where
    T: k8s_openapi::Metadata<Ty = ObjectMeta> + Serialize + serde::de::DeserializeOwned
{
}

impl<T: k8s_openapi::Metadata<Ty = ObjectMeta>> Object for K8s<T> {
    fn name(&self) -> &str {
        self.0.metadata().name.as_deref().unwrap_or("")
    }
    fn namespace(&self) -> Option<&str> {
        self.0
            .metadata()
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
    }
    fn resource_version(&self) -> Option<&str> {
        self.0.metadata().resource_version.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.0.metadata().uid.as_deref()
    }
    fn type_kind() -> Option<&'static str> {
        Some(T::KIND)
    }
    fn labels(&self) -> MetaMap<'_> {
        self.0.metadata().labels.as_ref().into()
    }
    fn annotations(&self) -> MetaMap<'_> {
        self.0.metadata().annotations.as_ref().into()
    }
    fn generation(&self) -> Result<Option<i64>, MetadataError> {
        Ok(self.0.metadata().generation)
    }
    fn deletion_timestamp(&self) -> Result<Option<Timestamp>, MetadataError> {
        let Some(t) = &self.0.metadata().deletion_timestamp else {
            return Ok(None);
        };
        // jiff counts the fraction of an instant before 1970 as negative nanoseconds.
        let (mut secs, mut nanos) = (t.0.as_second(), t.0.subsec_nanosecond());
        if nanos < 0 {
            secs -= 1;
            nanos += 1_000_000_000;
        }
        Timestamp::from_unix(secs, nanos.unsigned_abs())
            .map(Some)
            .map_err(|error| MetadataError::BadTimestamp {
                field: "deletionTimestamp",
                error,
            })
    }
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        Ok(self
            .0
            .metadata()
            .finalizers
            .iter()
            .flatten()
            .map(String::as_str)
            .collect())
    }
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        Ok(self
            .0
            .metadata()
            .owner_references
            .iter()
            .flatten()
            .map(|r| OwnerReferenceRef {
                api_version: Cow::Borrowed(&r.api_version),
                kind: Cow::Borrowed(&r.kind),
                name: Cow::Borrowed(&r.name),
                uid: Cow::Borrowed(&r.uid),
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
            })
            .collect())
    }
    fn api_version(&self) -> Option<&str> {
        Some(T::API_VERSION)
    }
    fn kind(&self) -> Option<&str> {
        Some(T::KIND)
    }
}

/// An owner reference as k8s-openapi's type, for a typed child object's
/// `metadata.owner_references` (the two serialize alike).
pub fn k8s_owner_reference(
    r: OwnerReference,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: r.api_version,
        kind: r.kind,
        name: r.name,
        uid: r.uid,
        controller: r.controller,
        block_owner_deletion: r.block_owner_deletion,
    }
}

impl<T: k8s_openapi::Resource + 'static> K8s<T> {
    /// The [`Resource`] describing `T` (group, version, kind, plural, scope).
    pub fn resource() -> Resource {
        Resource::new(
            T::GROUP,
            T::VERSION,
            T::KIND,
            T::URL_PATH_SEGMENT,
            TypeId::of::<T::Scope>() == TypeId::of::<k8s_openapi::NamespaceResourceScope>(),
        )
    }
}

impl<T: k8s_openapi::Resource + 'static> HasResource for K8s<T> {
    fn resource() -> Resource {
        K8s::<T>::resource()
    }
}

impl<B: Backend> Client<B> {
    /// An [`Api`] for the k8s-openapi type `T` in `namespace` (`None`: all namespaces), e.g.
    /// `client.k8s_api::<ConfigMap>(Some("default"))`.
    pub fn k8s_api<T>(&self, namespace: Option<&str>) -> Api<K8s<T>, B>
    where
        T: k8s_openapi::Resource + 'static,
    {
        self.api(K8s::<T>::resource(), namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Node};

    #[test]
    fn k8s_openapi_types_are_objects() {
        let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"5","uid":"u"},"data":{"k":"v"}}"#;
        let cm: K8s<ConfigMap> = serde_json::from_str(json).unwrap();
        assert_eq!(
            cm.key_ref(),
            informer_core::object::KeyRef::new(Some("ns"), "a")
        );
        assert_eq!(cm.resource_version(), Some("5"));
        assert_eq!(cm.data.as_ref().unwrap()["k"], "v");
        assert_eq!(K8s::<ConfigMap>::resource(), Resource::CONFIGMAPS);
        assert_eq!(K8s::<Deployment>::resource(), Resource::DEPLOYMENTS);
        assert_eq!(K8s::<Node>::resource(), Resource::NODES);
        let ev = crate::decode::decode_event::<K8s<ConfigMap>>(
            format!(r#"{{"type":"ADDED","object":{json}}}"#).as_bytes(),
        )
        .unwrap();
        assert!(matches!(ev, informer_core::protocol::WatchEvent::Added(o) if o.name() == "a"));
    }

    /// Typed objects go into a snapshot as their JSON and come back equal, quantities, byte
    /// strings and all; the file names the JSON codec, so a DynamicObject snapshot is refused.
    #[test]
    fn k8s_openapi_types_round_trip_through_snapshots() {
        use informer_core::snapshot::{Snapshot, SnapshotError, SnapshotIdentity};
        use std::sync::Arc;
        let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"5","labels":{"x":"y"}},"data":{"k":"v"},"binaryData":{"b":"AAEC"}}"#;
        let cm: K8s<ConfigMap> = serde_json::from_str(json).unwrap();
        let id = SnapshotIdentity::default();
        let s = Snapshot {
            resource_version: "5".into(),
            items: vec![Arc::new(cm.clone())],
        };
        let mut bytes = Vec::new();
        s.encode(&id, &mut bytes).unwrap();
        let back = Snapshot::<K8s<ConfigMap>>::decode(&bytes, &id).unwrap();
        assert_eq!(*back.items[0], cm);
        assert!(matches!(
            Snapshot::<informer_core::object::DynamicObject>::decode(&bytes, &id),
            Err(SnapshotError::OtherCodec { .. })
        ));
    }
}
