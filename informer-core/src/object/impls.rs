//! [`Object`] for types with standard metadata: [`impl_object!`](crate::impl_object) and the
//! [`Object`] impl of [`ObjectMeta`] it delegates to.

use crate::object::meta_fields::{
    self, Finalizers, MetaMap, MetadataError, OwnerReferences, Timestamp,
};
use crate::object::{Object, ObjectMeta};

/// `metadata` on its own answers everything [`Object`] asks about metadata, so a type holding
/// it can delegate to it (that is what [`impl_object!`](crate::impl_object) does). An empty
/// namespace counts as cluster-scoped. Generation, deletionTimestamp, finalizers and owner
/// references are read from the raw JSON of the other fields when asked (a scan of that text).
impl Object for ObjectMeta {
    fn name(&self) -> &str {
        ObjectMeta::name(self)
    }
    fn namespace(&self) -> Option<&str> {
        ObjectMeta::namespace(self)
    }
    fn resource_version(&self) -> Option<&str> {
        ObjectMeta::resource_version(self)
    }
    fn uid(&self) -> Option<&str> {
        ObjectMeta::uid(self)
    }
    fn labels(&self) -> MetaMap<'_> {
        ObjectMeta::labels(self).into()
    }
    fn annotations(&self) -> MetaMap<'_> {
        ObjectMeta::annotations(self).into()
    }
    fn generation(&self) -> Result<Option<i64>, MetadataError> {
        meta_fields::raw_generation(self.other())
    }
    fn deletion_timestamp(&self) -> Result<Option<Timestamp>, MetadataError> {
        meta_fields::raw_deletion_timestamp(self.other())
    }
    fn finalizers(&self) -> Result<Finalizers<'_>, MetadataError> {
        meta_fields::raw_finalizers(self.other())
    }
    fn owner_references(&self) -> Result<OwnerReferences<'_>, MetadataError> {
        meta_fields::raw_owner_references(self.other())
    }
}

/// Implements [`Object`](crate::object::Object) for a type whose metadata is one of its fields: the
/// usual shape of a typed Kubernetes object decoded with serde.
///
/// ```
/// use informer_core::{object::Key, object::Object, object::ObjectMeta};
///
/// #[derive(serde::Deserialize)]
/// struct Widget {
///     metadata: ObjectMeta,
///     spec: WidgetSpec,
/// }
///
/// #[derive(serde::Deserialize)]
/// struct WidgetSpec {
///     size: u32,
/// }
///
/// informer_core::impl_object!(Widget);
///
/// let w: Widget = serde_json::from_str(
///     r#"{"metadata": {"name": "w", "namespace": "prod", "resourceVersion": "7"},
///         "spec": {"size": 3}}"#,
/// )
/// .unwrap();
/// assert_eq!(Key::of(&w).as_str(), "prod/w");
/// assert_eq!(w.resource_version(), Some("7"));
/// assert_eq!(w.spec.size, 3);
/// ```
///
/// The forms:
///
/// - `impl_object!(Widget)`: the metadata is the field `metadata`.
/// - `impl_object!(Widget, meta)`: it is the field `meta` (or `0` in a tuple struct).
/// - `impl_object!([S: Clone] Crd<S>)` or `impl_object!([S] Crd<S>, meta)`: a generic type;
///   what is between the brackets becomes the impl's generic parameters.
/// - `impl_object!([] Widget, metadata { fn metadata_only() -> bool { true } })`: the same,
///   with more of `Object`'s provided methods overridden in the braces.
///
/// The field may be an [`ObjectMeta`](crate::object::ObjectMeta) or any type that implements
/// [`Object`](crate::object::Object) itself: a program with its own metadata struct implements
/// `Object` for that struct once, then uses this macro for every kind that holds it. For
/// k8s-openapi types there is `informer_http::K8s<T>` instead.
#[macro_export]
macro_rules! impl_object {
    ([$($generics:tt)*] $ty:ty) => {
        $crate::impl_object!([$($generics)*] $ty, metadata);
    };
    ([$($generics:tt)*] $ty:ty, $field:tt) => {
        $crate::impl_object!([$($generics)*] $ty, $field {});
    };
    ([$($generics:tt)*] $ty:ty, $field:tt { $($extra:tt)* }) => {
        impl<$($generics)*> $crate::object::Object for $ty {
            $($extra)*
            fn name(&self) -> &str {
                $crate::object::Object::name(&self.$field)
            }
            fn namespace(&self) -> ::core::option::Option<&str> {
                $crate::object::Object::namespace(&self.$field)
            }
            fn resource_version(&self) -> ::core::option::Option<&str> {
                $crate::object::Object::resource_version(&self.$field)
            }
            fn uid(&self) -> ::core::option::Option<&str> {
                $crate::object::Object::uid(&self.$field)
            }
            fn labels(&self) -> $crate::object::MetaMap<'_> {
                $crate::object::Object::labels(&self.$field)
            }
            fn annotations(&self) -> $crate::object::MetaMap<'_> {
                $crate::object::Object::annotations(&self.$field)
            }
            fn generation(
                &self,
            ) -> ::core::result::Result<::core::option::Option<i64>, $crate::object::MetadataError>
            {
                $crate::object::Object::generation(&self.$field)
            }
            fn deletion_timestamp(
                &self,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::object::Timestamp>,
                $crate::object::MetadataError,
            > {
                $crate::object::Object::deletion_timestamp(&self.$field)
            }
            fn finalizers(
                &self,
            ) -> ::core::result::Result<$crate::object::Finalizers<'_>, $crate::object::MetadataError>
            {
                $crate::object::Object::finalizers(&self.$field)
            }
            fn owner_references(
                &self,
            ) -> ::core::result::Result<
                $crate::object::OwnerReferences<'_>,
                $crate::object::MetadataError,
            > {
                $crate::object::Object::owner_references(&self.$field)
            }
        }
    };
    ($ty:ty) => {
        $crate::impl_object!([] $ty, metadata);
    };
    ($ty:ty, $field:tt) => {
        $crate::impl_object!([] $ty, $field);
    };
}

#[cfg(test)]
mod tests {
    use crate::object::{Key, Object, ObjectMeta, ObjectMetaParts};
    use alloc::string::String;

    struct Plain {
        metadata: ObjectMeta,
    }
    crate::impl_object!(Plain);

    struct Renamed {
        meta: ObjectMeta,
    }
    crate::impl_object!(Renamed, meta);

    struct Tuple(ObjectMeta);
    crate::impl_object!(Tuple, 0);

    struct Generic<S> {
        meta: ObjectMeta,
        #[allow(dead_code)]
        spec: S,
    }
    crate::impl_object!([S] Generic<S>, meta);

    /// A metadata type of the program's own, used through its `Object` impl.
    struct OwnMeta {
        name: String,
    }
    impl Object for OwnMeta {
        fn name(&self) -> &str {
            &self.name
        }
        fn namespace(&self) -> Option<&str> {
            Some("own")
        }
        fn resource_version(&self) -> Option<&str> {
            None
        }
        fn uid(&self) -> Option<&str> {
            None
        }
    }
    struct WithOwnMeta {
        metadata: OwnMeta,
    }
    crate::impl_object!(WithOwnMeta);

    fn meta(ns: Option<&str>) -> ObjectMeta {
        ObjectMetaParts {
            name: "n".into(),
            namespace: ns.map(Into::into),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            ..Default::default()
        }
        .into()
    }

    #[test]
    fn every_form_answers_from_the_metadata() {
        fn check(o: &impl Object, key: &str) {
            assert_eq!(Key::of(o).as_str(), key);
            assert_eq!(o.name(), "n");
            assert_eq!(o.resource_version(), Some("7"));
            assert_eq!(o.uid(), Some("u"));
        }
        check(
            &Plain {
                metadata: meta(Some("ns")),
            },
            "ns/n",
        );
        check(
            &Renamed {
                meta: meta(Some("ns")),
            },
            "ns/n",
        );
        check(&Tuple(meta(None)), "n");
        check(
            &Generic {
                meta: meta(Some("ns")),
                spec: 1_u8,
            },
            "ns/n",
        );
        let own = WithOwnMeta {
            metadata: OwnMeta { name: "o".into() },
        };
        assert_eq!(Key::of(&own).as_str(), "own/o");
        assert_eq!(own.uid(), None);
    }

    /// An empty namespace is cluster-scoped, as for every other `Object`.
    #[test]
    fn empty_namespace_is_cluster_scoped() {
        let p = Plain {
            metadata: meta(Some("")),
        };
        assert_eq!(p.namespace(), None);
        assert_eq!(Key::of(&p).as_str(), "n");
    }
}
