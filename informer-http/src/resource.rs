//! Which kind of object to list and watch, and where it lives in the API.

use std::borrow::Cow;

use informer_core::object::meta_fields::owner_reference_as;
use informer_core::object::{MetadataError, Object, OwnerReference};

/// A Kubernetes resource type: API group, version, kind, plural name and scope.
///
/// The built-ins are constants ([`Resource::PODS`], [`Resource::DEPLOYMENTS`], …); custom
/// resources are described with [`Resource::new`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Resource {
    /// API group, `""` for the core group (`/api/v1`).
    pub group: Cow<'static, str>,
    /// API version, e.g. `v1`.
    pub version: Cow<'static, str>,
    /// Kind, e.g. `ConfigMap`.
    pub kind: Cow<'static, str>,
    /// Plural resource name used in URLs, e.g. `configmaps`.
    pub plural: Cow<'static, str>,
    /// Whether objects of this resource live in a namespace.
    pub namespaced: bool,
}

macro_rules! builtins {
    ($($(#[$doc:meta])* $name:ident = ($group:literal, $version:literal, $kind:literal, $plural:literal, $ns:literal);)*) => {
        impl Resource {
            $(
                $(#[$doc])*
                pub const $name: Resource = Resource::from_static($group, $version, $kind, $plural, $ns);
            )*

            /// Every predefined built-in resource.
            pub const BUILTINS: &'static [Resource] = &[$(Resource::$name),*];
        }
    };
}

builtins! {
    /// `v1` `Pod`.
    PODS = ("", "v1", "Pod", "pods", true);
    /// `v1` `ConfigMap`.
    CONFIGMAPS = ("", "v1", "ConfigMap", "configmaps", true);
    /// `v1` `Secret`.
    SECRETS = ("", "v1", "Secret", "secrets", true);
    /// `v1` `Service`.
    SERVICES = ("", "v1", "Service", "services", true);
    /// `v1` `Endpoints`.
    ENDPOINTS = ("", "v1", "Endpoints", "endpoints", true);
    /// `v1` `ServiceAccount`.
    SERVICEACCOUNTS = ("", "v1", "ServiceAccount", "serviceaccounts", true);
    /// `v1` `PersistentVolumeClaim`.
    PERSISTENTVOLUMECLAIMS = ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true);
    /// `v1` `PersistentVolume` (cluster-scoped).
    PERSISTENTVOLUMES = ("", "v1", "PersistentVolume", "persistentvolumes", false);
    /// `v1` `Namespace` (cluster-scoped).
    NAMESPACES = ("", "v1", "Namespace", "namespaces", false);
    /// `v1` `Node` (cluster-scoped).
    NODES = ("", "v1", "Node", "nodes", false);
    /// `v1` `Event` (core group).
    EVENTS = ("", "v1", "Event", "events", true);
    /// `apps/v1` `Deployment`.
    DEPLOYMENTS = ("apps", "v1", "Deployment", "deployments", true);
    /// `apps/v1` `ReplicaSet`.
    REPLICASETS = ("apps", "v1", "ReplicaSet", "replicasets", true);
    /// `apps/v1` `StatefulSet`.
    STATEFULSETS = ("apps", "v1", "StatefulSet", "statefulsets", true);
    /// `apps/v1` `DaemonSet`.
    DAEMONSETS = ("apps", "v1", "DaemonSet", "daemonsets", true);
    /// `batch/v1` `Job`.
    JOBS = ("batch", "v1", "Job", "jobs", true);
    /// `batch/v1beta1` `CronJob` (the version a v1.20 server serves; `batch/v1` from 1.21).
    CRONJOBS = ("batch", "v1beta1", "CronJob", "cronjobs", true);
    /// `events.k8s.io/v1` `Event`.
    EVENTS_V1 = ("events.k8s.io", "v1", "Event", "events", true);
    /// `networking.k8s.io/v1` `Ingress`.
    INGRESSES = ("networking.k8s.io", "v1", "Ingress", "ingresses", true);
    /// `rbac.authorization.k8s.io/v1` `Role`.
    ROLES = ("rbac.authorization.k8s.io", "v1", "Role", "roles", true);
    /// `rbac.authorization.k8s.io/v1` `ClusterRole` (cluster-scoped).
    CLUSTERROLES = ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false);
    /// `coordination.k8s.io/v1` `Lease`.
    LEASES = ("coordination.k8s.io", "v1", "Lease", "leases", true);
    /// `apiextensions.k8s.io/v1` `CustomResourceDefinition` (cluster-scoped).
    CUSTOMRESOURCEDEFINITIONS = ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false);
}

impl Resource {
    const fn from_static(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        namespaced: bool,
    ) -> Resource {
        Resource {
            group: Cow::Borrowed(group),
            version: Cow::Borrowed(version),
            kind: Cow::Borrowed(kind),
            plural: Cow::Borrowed(plural),
            namespaced,
        }
    }

    /// Any resource, e.g. a custom resource:
    /// `Resource::new("example.com", "v1", "Widget", "widgets", true)`.
    pub fn new(
        group: impl Into<Cow<'static, str>>,
        version: impl Into<Cow<'static, str>>,
        kind: impl Into<Cow<'static, str>>,
        plural: impl Into<Cow<'static, str>>,
        namespaced: bool,
    ) -> Resource {
        Resource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    /// `apiVersion` as written in objects: `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The owner reference a controller puts on an object it creates for `owner`, an object
    /// of this resource: this resource's `apiVersion` and `kind`, the owner's name and uid,
    /// `controller: true` and `blockOwnerDeletion: true`. For owners that do not carry their
    /// kind ([`PartialObjectMetadata`](informer_core::object::PartialObjectMetadata), custom
    /// types); [`controller_of`](informer_core::object::controller_of) takes it from the owner.
    pub fn controller_of<O: Object + ?Sized>(
        &self,
        owner: &O,
    ) -> Result<OwnerReference, MetadataError> {
        owner_reference_as(owner, &self.api_version(), &self.kind).map(OwnerReference::controller)
    }

    /// A predefined built-in by plural name and group (`""` for core), e.g.
    /// `Resource::builtin("apps", "deployments")`.
    pub fn builtin(group: &str, plural: &str) -> Option<&'static Resource> {
        Resource::BUILTINS
            .iter()
            .find(|r| r.group == group && r.plural == plural)
    }
}

/// A type tied to one resource: an informer of it needs no [`Resource`] argument
/// (`Informer::<K8s<Pod>>::builder(&client)`). `K8s<T>` implements it for every k8s-openapi
/// type; implement it for your own typed objects (CRDs) to get the same.
pub trait HasResource {
    /// The resource this type's objects come from.
    fn resource() -> Resource;
}

/// A custom resource type whose spec and status types are known, so its CRD manifest comes from
/// the type alone (`crd::Crd::of`, feature `crd`). [`custom_resource!`](crate::custom_resource)
/// implements it.
pub trait CustomResource: HasResource {
    /// The `spec`'s type.
    type Spec;
    /// The `status`'s type (`()` for a resource without status).
    type Status;
    /// Whether the resource has a status (and the status subresource).
    const HAS_STATUS: bool;
}

/// Declares a custom resource type in one place: the struct (`metadata`, `spec` and, if named,
/// `status` as an `Option`, with serde's `Serialize` and `Deserialize`), its
/// [`Object`](informer_core::object::Object) accessors, its [`HasResource`] (the kind is the
/// struct's name) and [`CustomResource`]. What kube-derive's `CustomResource` derive does, as a
/// declarative macro: the crate using it needs `serde` (with `derive`) as a dependency.
///
/// ```
/// use informer_http::{HasResource, custom_resource};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Debug, Serialize, Deserialize)]
/// pub struct GizmoSpec { pub size: u32 }
/// #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// pub struct GizmoStatus { pub ready: bool }
///
/// custom_resource! {
///     /// A gizmo (`example.com/v1`, namespaced).
///     pub struct Gizmo("example.com", "v1", "gizmos", namespaced) {
///         spec: GizmoSpec,
///         status: GizmoStatus,
///     }
/// }
///
/// let g: Gizmo = serde_json::from_str(r#"{"metadata": {"name": "a"}, "spec": {"size": 2}}"#)?;
/// assert_eq!((g.spec.size, g.status), (2, None));
/// assert_eq!(Gizmo::resource().kind, "Gizmo");
/// assert!(Gizmo::resource().namespaced);
/// # Ok::<_, serde_json::Error>(())
/// ```
///
/// The scope is `namespaced` or `cluster`; the `status` line may be left out.
#[macro_export]
macro_rules! custom_resource {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident($group:literal, $version:literal, $plural:literal, $scope:ident) {
            spec: $spec:ty
            $(, status: $status:ty)? $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, Debug, ::serde::Serialize, ::serde::Deserialize)]
        $vis struct $name {
            /// Name, namespace, labels, generation, finalizers...
            pub metadata: $crate::core::object::ObjectMeta,
            /// What the object asks for.
            pub spec: $spec,
            $(
                /// What its controller observed (written through the status subresource).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub status: ::core::option::Option<$status>,
            )?
        }
        $crate::core::impl_object!($name);
        impl $crate::HasResource for $name {
            fn resource() -> $crate::Resource {
                $crate::Resource::new(
                    $group,
                    $version,
                    ::core::stringify!($name),
                    $plural,
                    $crate::custom_resource!(@scope $scope),
                )
            }
        }
        impl $crate::CustomResource for $name {
            type Spec = $spec;
            type Status = $crate::custom_resource!(@status $($status)?);
            const HAS_STATUS: bool = $crate::custom_resource!(@has $($status)?);
        }
    };
    (@scope namespaced) => { true };
    (@scope cluster) => { false };
    (@status $status:ty) => { $status };
    (@status) => { () };
    (@has $status:ty) => { true };
    (@has) => { false };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_findable_and_distinct() {
        assert_eq!(Resource::builtin("", "pods"), Some(&Resource::PODS));
        assert_eq!(
            Resource::builtin("apps", "deployments").unwrap().kind,
            "Deployment"
        );
        assert!(Resource::builtin("", "deployments").is_none());
        for (i, a) in Resource::BUILTINS.iter().enumerate() {
            for b in &Resource::BUILTINS[i + 1..] {
                assert!(a.group != b.group || a.plural != b.plural, "{a:?} twice");
            }
        }
        assert_eq!(Resource::CONFIGMAPS.api_version(), "v1");
        assert_eq!(Resource::DEPLOYMENTS.api_version(), "apps/v1");
        assert!(!Resource::builtin("", "nodes").unwrap().namespaced);
    }
}
