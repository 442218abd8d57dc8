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
        meta::name(self.0.metadata())
    }
    fn namespace(&self) -> Option<&str> {
        meta::namespace(self.0.metadata())
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
        meta::deletion_timestamp(self.0.metadata())
    }
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        Ok(meta::finalizers(self.0.metadata()))
    }
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        Ok(meta::owner_references(self.0.metadata()))
    }
    fn api_version(&self) -> Option<&str> {
        Some(T::API_VERSION)
    }
    fn kind(&self) -> Option<&str> {
        Some(T::KIND)
    }
}

/// k8s-openapi's `ObjectMeta` read as [`Object`] reads metadata: for other wrappers of types
/// that carry it (informer-tokio's `Kube<T>` for kube-rs types).
#[doc(hidden)]
pub mod meta {
    use super::*;

    /// The name (empty when absent).
    pub fn name(m: &ObjectMeta) -> &str {
        m.name.as_deref().unwrap_or("")
    }

    /// The namespace (`None` when absent or empty).
    pub fn namespace(m: &ObjectMeta) -> Option<&str> {
        m.namespace.as_deref().filter(|n| !n.is_empty())
    }

    /// `deletionTimestamp` as a [`Timestamp`].
    pub fn deletion_timestamp(m: &ObjectMeta) -> Result<Option<Timestamp>, MetadataError> {
        let Some(t) = &m.deletion_timestamp else {
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

    /// The finalizers.
    pub fn finalizers(m: &ObjectMeta) -> Finalizers<'_> {
        m.finalizers.iter().flatten().map(String::as_str).collect()
    }

    /// The owner references, borrowed.
    pub fn owner_references(m: &ObjectMeta) -> OwnerReferences<'_> {
        m.owner_references
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
            .collect()
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

    /// The same JSON read as a typed `K8s<T>`, a `DynamicObject` and a
    /// `PartialObjectMetadata` gives the same metadata answers through `Object`.
    #[test]
    fn typed_dynamic_and_metadata_only_objects_answer_alike() {
        use informer_core::object::{DynamicObject, PartialObjectMetadata};
        let json = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{
            "name":"web","namespace":"prod","uid":"d-1","resourceVersion":"12","generation":3,
            "labels":{"app":"web","team":"a"},"annotations":{"deployment.kubernetes.io/revision":"2"},
            "deletionTimestamp":"2024-05-06T07:08:09Z","finalizers":["foregroundDeletion"],
            "ownerReferences":[{"apiVersion":"example.com/v1","kind":"App","name":"web","uid":"a-1","controller":true,"blockOwnerDeletion":true}]},
            "spec":{"selector":{"matchLabels":{"app":"web"}},"template":{}}}"#;
        let typed: K8s<Deployment> = serde_json::from_str(json).unwrap();
        let dynamic: DynamicObject = serde_json::from_str(json).unwrap();
        let partial: PartialObjectMetadata = serde_json::from_str(json).unwrap();

        #[derive(Debug, PartialEq)]
        struct Answers {
            key: String,
            uid: Option<String>,
            labels: Vec<(String, String)>,
            annotations: Vec<(String, String)>,
            generation: Option<i64>,
            deletion: Option<String>,
            finalizers: Vec<String>,
            owners: Vec<OwnerReference>,
            controller: Option<OwnerReference>,
            api_version: Option<String>,
            kind: Option<String>,
        }
        fn answers(o: &impl Object) -> Answers {
            let pairs = |m: MetaMap<'_>| m.iter().map(|(k, v)| (k.into(), v.into())).collect();
            Answers {
                key: o.key_ref().to_string(),
                uid: o.uid().map(Into::into),
                labels: pairs(o.labels()),
                annotations: pairs(o.annotations()),
                generation: o.generation().unwrap(),
                deletion: o.deletion_timestamp().unwrap().map(|t| t.to_string()),
                finalizers: o
                    .finalizers()
                    .unwrap()
                    .iter()
                    .map(|f| f.to_string())
                    .collect(),
                owners: o
                    .owner_references()
                    .unwrap()
                    .iter()
                    .map(|r| r.to_owned())
                    .collect(),
                controller: o.controller_owner().unwrap().map(|r| r.to_owned()),
                api_version: o.api_version().map(Into::into),
                kind: o.kind().map(Into::into),
            }
        }
        let a = answers(&typed);
        assert_eq!(a, answers(&dynamic));
        assert_eq!(a, answers(&partial));
        assert_eq!(a.generation, Some(3));
        assert_eq!(a.deletion.as_deref(), Some("2024-05-06T07:08:09Z"));
        assert_eq!(a.controller.unwrap().kind, "App");
        assert_eq!(a.labels.len(), 2);
        assert_eq!(
            (a.api_version.as_deref(), a.kind.as_deref()),
            (Some("apps/v1"), Some("Deployment"))
        );

        // A fraction of a second, and an instant before 1970, as jiff and the core both see it.
        for (text, secs, nanos) in [
            ("2024-05-06T07:08:09.25Z", 1_714_979_289, 250_000_000),
            ("1969-12-31T23:59:59.5Z", -1, 500_000_000),
        ] {
            let json = format!(
                r#"{{"metadata":{{"name":"a","deletionTimestamp":"{text}"}},"spec":{{"selector":{{}},"template":{{}}}}}}"#
            );
            let typed: K8s<Deployment> = serde_json::from_str(&json).unwrap();
            let dynamic: DynamicObject = serde_json::from_str(&json).unwrap();
            let t = typed.deletion_timestamp().unwrap().unwrap();
            assert_eq!(
                (t.unix_seconds(), t.subsec_nanos()),
                (secs, nanos),
                "{text}"
            );
            assert_eq!(Some(t), dynamic.deletion_timestamp().unwrap());
        }
    }

    /// `controller_of` builds the reference a child carries; it serializes as Kubernetes'
    /// `OwnerReference` (k8s-openapi reads it back equal), survives a typed child's JSON and
    /// reads back from the child through `Object` for every object type.
    #[test]
    fn owner_reference_json_round_trips() {
        use informer_core::object::{DynamicObject, PartialObjectMetadata, controller_of};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        let owner: K8s<Deployment> = serde_json::from_str(
            r#"{"metadata":{"name":"web","namespace":"prod","uid":"d-1"},"spec":{"selector":{},"template":{}}}"#,
        )
        .unwrap();
        let r = controller_of(&owner).unwrap();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "d-1", "controller": true, "blockOwnerDeletion": true})
        );
        let theirs: meta::OwnerReference = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(theirs, k8s_owner_reference(r.clone()));
        assert_eq!(serde_json::to_value(&theirs).unwrap(), json);

        // A typed child carrying it, and the JSON a client would send.
        let child = K8s(ConfigMap {
            metadata: ObjectMeta {
                name: Some("web-config".into()),
                namespace: Some("prod".into()),
                owner_references: Some(vec![k8s_owner_reference(r.clone())]),
                ..Default::default()
            },
            ..Default::default()
        });
        let sent = serde_json::to_string(&child).unwrap();
        let as_dynamic: DynamicObject = serde_json::from_str(&sent).unwrap();
        let as_partial: PartialObjectMetadata = serde_json::from_str(&sent).unwrap();
        for refs in [
            child.owner_references().unwrap(),
            as_dynamic.owner_references().unwrap(),
            as_partial.owner_references().unwrap(),
        ] {
            assert_eq!(refs.len(), 1);
            assert_eq!(refs.controller().unwrap().to_owned(), r);
        }
        // The same written straight into a DynamicObject's JSON.
        let dynamic_child = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web-config", "ownerReferences": [controller_of(&owner).unwrap()]}});
        let back: DynamicObject = serde_json::from_value(dynamic_child).unwrap();
        assert_eq!(back.controller_owner().unwrap().unwrap().to_owned(), r);

        // An owner known by metadata only: the resource names its kind.
        let meta_only: PartialObjectMetadata = serde_json::from_str(
            r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"web","uid":"d-1"}}"#,
        )
        .unwrap();
        assert!(controller_of(&meta_only).is_err());
        assert_eq!(Resource::DEPLOYMENTS.controller_of(&meta_only).unwrap(), r);
        assert!(matches!(
            Resource::DEPLOYMENTS.controller_of(&NoUid(informer_core::object::ObjectMeta::new(
                Some("prod"),
                "web"
            ))),
            Err(MetadataError::Missing { field: "uid" })
        ));
    }

    struct NoUid(informer_core::object::ObjectMeta);
    informer_core::impl_object!(NoUid, 0);

    /// `client.api_for::<K>(ns)`: the resource comes from the type.
    #[test]
    fn api_for_takes_the_resource_from_the_type() {
        let c = crate::test_support::Scripted::client(vec![], |_| {});
        let api = c.api_for::<K8s<Deployment>>(Some("prod"));
        assert_eq!(api.resource(), &Resource::DEPLOYMENTS);
        assert_eq!(api.namespace(), Some("prod"));
        assert_eq!(c.api_for::<K8s<Node>>(None).resource(), &Resource::NODES);
    }
}
