//! kube-rs resource types (kube-derive's `CustomResource` included) as informer objects.

use std::any::TypeId;
use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

use informer_http::api::k8s_meta as meta;
use informer_http::core::object::{
    Finalizers, MetaMap, MetadataError, Object, OwnerReferences, Timestamp,
};
use informer_http::{HasResource, Resource};
use serde::{Deserialize, Serialize};

/// A kube-rs resource type as an informer object: `Informer::<Kube<Gizmo>>`, for a type with
/// `#[derive(CustomResource)]` (kube-derive implements `kube::Resource`, not the k8s-openapi
/// traits [`K8s`](informer_http::K8s) takes). A newtype because of the orphan rule; it
/// (de)serializes exactly as the wrapped type and derefs to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Kube<T>(pub T);

impl<T> Deref for Kube<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Kube<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A `'static` string kube-rs gives for the type (kube-derive's are literals); `None` if it
/// built one.
fn borrowed(c: Cow<'static, str>) -> Option<&'static str> {
    match c {
        Cow::Borrowed(s) => Some(s),
        Cow::Owned(_) => None,
    }
}

impl<T: kube::Resource<DynamicType = ()>> Object for Kube<T> {
    fn name(&self) -> &str {
        meta::name(self.0.meta())
    }
    fn namespace(&self) -> Option<&str> {
        meta::namespace(self.0.meta())
    }
    fn resource_version(&self) -> Option<&str> {
        self.0.meta().resource_version.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.0.meta().uid.as_deref()
    }
    fn type_kind() -> Option<&'static str> {
        borrowed(T::kind(&()))
    }
    fn labels(&self) -> MetaMap<'_> {
        self.0.meta().labels.as_ref().into()
    }
    fn annotations(&self) -> MetaMap<'_> {
        self.0.meta().annotations.as_ref().into()
    }
    fn generation(&self) -> Result<Option<i64>, MetadataError> {
        Ok(self.0.meta().generation)
    }
    fn deletion_timestamp(&self) -> Result<Option<Timestamp>, MetadataError> {
        meta::deletion_timestamp(self.0.meta())
    }
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        Ok(meta::finalizers(self.0.meta()))
    }
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        Ok(meta::owner_references(self.0.meta()))
    }
    fn api_version(&self) -> Option<&str> {
        borrowed(T::api_version(&()))
    }
    fn kind(&self) -> Option<&str> {
        borrowed(T::kind(&()))
    }
}

/// Labels for selector queries on the cache.
impl<T: kube::Resource<DynamicType = ()>> informer_http::core::object::selector::Labels
    for Kube<T>
{
    fn label(&self, key: &str) -> Option<&str> {
        self.0.meta().labels.as_ref()?.get(key).map(String::as_str)
    }
}

impl<T: kube::Resource<DynamicType = ()> + 'static> HasResource for Kube<T> {
    fn resource() -> Resource {
        Resource::new(
            T::group(&()).into_owned(),
            T::version(&()).into_owned(),
            T::kind(&()).into_owned(),
            T::plural(&()).into_owned(),
            TypeId::of::<T::Scope>() == TypeId::of::<kube::core::NamespaceResourceScope>(),
        )
    }
}
