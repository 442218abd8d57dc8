//! Finalizers as pure decisions: what a controller owning the finalizer `name` does with an
//! object, given its state ([`decide`]), the JSON patches that add or remove the finalizer
//! without clobbering anyone else's ([`add_patch`], [`remove_patch`]), and the check of the
//! name itself ([`validate_name`]). The runtime crates perform them (`finalizer` there).
//!
//! | being deleted | has our finalizer | [`Decision`]                                      |
//! |---------------|-------------------|---------------------------------------------------|
//! | no            | no                | [`AddFinalizer`](Decision::AddFinalizer), then apply |
//! | no            | yes               | [`Apply`](Decision::Apply)                        |
//! | yes           | yes               | [`Cleanup`](Decision::Cleanup), then remove it    |
//! | yes           | no                | [`Nothing`](Decision::Nothing)                    |
//!
//! Both patches are JSON patches (RFC 6902) whose first operations `test` what the decision
//! was made on, so a concurrent change of the finalizers makes the server refuse the patch
//! (the runtime reports a conflict) instead of overwriting another controller's finalizer:
//!
//! - adding to a non-empty list tests the whole list, then appends (`/metadata/finalizers/-`);
//!   adding to an empty one tests the object's `resourceVersion` (an absent list and an empty
//!   one look the same once read, and an `add` of the whole list would replace either), then
//!   sets the list;
//! - removing tests our name at each index it is at, then removes those indices, last first
//!   (only ours; another controller's finalizers are never part of the patch).

use alloc::format;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Value, json};

use crate::object::{Finalizers, MetadataError, Object};

/// Why a finalizer name is refused. A controller's finalizer must be a qualified name with a
/// domain prefix (`example.com/cleanup`), as Kubernetes asks of finalizers it does not define
/// itself: the domain keeps two controllers from owning the same finalizer by accident.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinalizerNameError {
    /// The name is empty.
    Empty,
    /// No `domain/` prefix (`cleanup` instead of `example.com/cleanup`).
    MissingPrefix,
    /// The prefix is not a DNS subdomain: at most 253 characters, dot-separated labels of
    /// lowercase letters, digits and `-`, each starting and ending with a letter or digit.
    BadPrefix,
    /// The part after the prefix is not 1 to 63 characters of letters, digits, `-`, `_` and
    /// `.`, starting and ending with a letter or digit.
    BadName,
}

impl fmt::Display for FinalizerNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FinalizerNameError::Empty => "the finalizer name is empty",
            FinalizerNameError::MissingPrefix => {
                "the finalizer name has no domain prefix (example.com/name)"
            }
            FinalizerNameError::BadPrefix => {
                "the finalizer name's prefix is not a DNS subdomain (lowercase, at most 253 characters)"
            }
            FinalizerNameError::BadName => {
                "the finalizer name after the prefix is not 1-63 letters, digits, '-', '_' or '.', \
                 starting and ending with a letter or digit"
            }
        })
    }
}

impl core::error::Error for FinalizerNameError {}

/// Checks that `name` can be a controller's finalizer: a qualified name (Kubernetes'
/// `IsQualifiedName`) with a domain prefix, `example.com/cleanup`.
pub fn validate_name(name: &str) -> Result<(), FinalizerNameError> {
    if name.is_empty() {
        return Err(FinalizerNameError::Empty);
    }
    let Some((prefix, rest)) = name.split_once('/') else {
        return Err(FinalizerNameError::MissingPrefix);
    };
    if !is_dns_subdomain(prefix) {
        return Err(FinalizerNameError::BadPrefix);
    }
    if !is_qualified_name_part(rest) {
        return Err(FinalizerNameError::BadName);
    }
    Ok(())
}

/// Kubernetes' `IsDNS1123Subdomain`.
fn is_dns_subdomain(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(&first), Some(&last)) => {
                    alnum(first) && alnum(last) && b.iter().all(|&c| alnum(c) || c == b'-')
                }
                _ => false,
            }
        })
}

/// The name part of Kubernetes' `IsQualifiedName`.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            b.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// What a controller owning a finalizer does with an object (the table in the
/// [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not being deleted and without our finalizer: add it ([`add_patch`]) before anything
    /// else, so the object cannot go away without our cleanup, then apply.
    AddFinalizer,
    /// Not being deleted, our finalizer on it: apply (reconcile the desired state).
    Apply,
    /// Being deleted, our finalizer still on it: clean up, then remove our finalizer
    /// ([`remove_patch`]). A failed cleanup keeps the finalizer, and so the object.
    Cleanup,
    /// Being deleted and our finalizer already removed: our part is done; nothing to do.
    Nothing,
}

/// What to do with `obj` for the finalizer `name` (see [`Decision`]). An object whose
/// `deletionTimestamp` or `finalizers` is not what Kubernetes writes is a [`MetadataError`]:
/// never taken for "not being deleted" or "no finalizer".
pub fn decide<K: Object + ?Sized>(obj: &K, name: &str) -> Result<Decision, MetadataError> {
    let deleting = obj.deletion_timestamp()?.is_some();
    let ours = obj.finalizers()?.contains(name);
    Ok(match (deleting, ours) {
        (false, false) => Decision::AddFinalizer,
        (false, true) => Decision::Apply,
        (true, true) => Decision::Cleanup,
        (true, false) => Decision::Nothing,
    })
}

/// The JSON patch adding `name` to an object whose finalizers were read as `current` at
/// `resource_version`, failing on the server if the list changed since (see the
/// [module documentation](self)). `None` if `name` is already in `current`.
pub fn add_patch(
    current: &Finalizers<'_>,
    resource_version: Option<&str>,
    name: &str,
) -> Option<Value> {
    if current.contains(name) {
        return None;
    }
    Some(if current.is_empty() {
        // An absent list and `[]` read alike; the resourceVersion pins whichever it was.
        let guard = match resource_version {
            Some(rv) => json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
            None => json!({"op": "test", "path": "/metadata/finalizers", "value": null}),
        };
        json!([guard, {"op": "add", "path": "/metadata/finalizers", "value": [name]}])
    } else {
        let list: Vec<&str> = current.iter().map(|f| &**f).collect();
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": name},
        ])
    })
}

/// The JSON patch removing every occurrence of `name` from an object whose finalizers were read
/// as `current`: for each index holding `name`, last first, a `test` that it still does and its
/// `remove`. Others' finalizers are left as they are, wherever they moved; if ours moved, the
/// test fails on the server (a conflict) rather than removing someone else's. `None` if `name`
/// is not in `current`.
pub fn remove_patch(current: &Finalizers<'_>, name: &str) -> Option<Value> {
    let ops: Vec<Value> = current
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, f)| **f == name)
        .flat_map(|(i, _)| {
            let path = format!("/metadata/finalizers/{i}");
            [
                json!({"op": "test", "path": path, "value": name}),
                json!({"op": "remove", "path": path}),
            ]
        })
        .collect();
    (!ops.is_empty()).then_some(Value::Array(ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::DynamicObject;

    fn obj(meta: Value) -> DynamicObject {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta});
        serde_json::from_value(v).unwrap()
    }

    const NAME: &str = "example.com/cleanup";
    const DELETED: &str = "2024-01-02T03:04:05Z";

    #[test]
    fn finalizer_01_decision_table() {
        let cases = [
            (json!({"name": "a"}), Decision::AddFinalizer),
            (
                json!({"name": "a", "finalizers": ["other.io/x"]}),
                Decision::AddFinalizer,
            ),
            (
                json!({"name": "a", "finalizers": ["other.io/x", NAME]}),
                Decision::Apply,
            ),
            (
                json!({"name": "a", "finalizers": [NAME], "deletionTimestamp": DELETED}),
                Decision::Cleanup,
            ),
            (
                json!({"name": "a", "finalizers": ["other.io/x", NAME], "deletionTimestamp": DELETED}),
                Decision::Cleanup,
            ),
            (
                json!({"name": "a", "finalizers": ["other.io/x"], "deletionTimestamp": DELETED}),
                Decision::Nothing,
            ),
            (
                json!({"name": "a", "deletionTimestamp": DELETED}),
                Decision::Nothing,
            ),
        ];
        for (meta, want) in cases {
            assert_eq!(decide(&obj(meta.clone()), NAME), Ok(want), "{meta}");
        }
    }

    #[test]
    fn finalizer_02_malformed_metadata_is_an_error_not_a_decision() {
        let bad_list = obj(json!({"name": "a", "finalizers": "example.com/cleanup"}));
        assert!(matches!(
            decide(&bad_list, NAME),
            Err(MetadataError::Malformed {
                field: "finalizers",
                ..
            })
        ));
        let bad_time = obj(json!({"name": "a", "finalizers": [NAME], "deletionTimestamp": "soon"}));
        assert!(matches!(
            decide(&bad_time, NAME),
            Err(MetadataError::BadTimestamp {
                field: "deletionTimestamp",
                ..
            })
        ));
    }

    #[test]
    fn finalizer_03_add_patch_tests_what_it_read() {
        let none: Finalizers<'_> = Finalizers::default();
        assert_eq!(
            add_patch(&none, Some("42"), NAME),
            Some(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/finalizers", "value": [NAME]},
            ]))
        );
        assert_eq!(
            add_patch(&none, None, NAME),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [NAME]},
            ]))
        );
        let others: Finalizers<'_> = ["a.io/x", "b.io/y"].into_iter().collect();
        assert_eq!(
            add_patch(&others, Some("42"), NAME),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["a.io/x", "b.io/y"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": NAME},
            ]))
        );
        let ours: Finalizers<'_> = ["a.io/x", NAME].into_iter().collect();
        assert_eq!(add_patch(&ours, Some("42"), NAME), None);
    }

    #[test]
    fn finalizer_04_remove_patch_removes_only_ours_last_index_first() {
        let list: Finalizers<'_> = [NAME, "a.io/x", NAME, "b.io/y"].into_iter().collect();
        assert_eq!(
            remove_patch(&list, NAME),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers/2", "value": NAME},
                {"op": "remove", "path": "/metadata/finalizers/2"},
                {"op": "test", "path": "/metadata/finalizers/0", "value": NAME},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ]))
        );
        let others: Finalizers<'_> = ["a.io/x"].into_iter().collect();
        assert_eq!(remove_patch(&others, NAME), None);
        assert_eq!(remove_patch(&Finalizers::default(), NAME), None);
    }

    #[test]
    fn finalizer_05_names_must_be_qualified_with_a_domain() {
        for ok in [
            "example.com/cleanup",
            "a/b",
            "x-1.example.com/Clean_up.v2",
            "kubernetes.io/pv-protection",
        ] {
            assert_eq!(validate_name(ok), Ok(()), "{ok}");
        }
        let long_name = ["a"; 64].concat();
        let long_prefix = [["a"; 60].concat().as_str(); 5].join(".");
        for (bad, why) in [
            ("", FinalizerNameError::Empty),
            ("cleanup", FinalizerNameError::MissingPrefix),
            ("foregroundDeletion", FinalizerNameError::MissingPrefix),
            ("/cleanup", FinalizerNameError::BadPrefix),
            ("Example.com/cleanup", FinalizerNameError::BadPrefix),
            ("example..com/cleanup", FinalizerNameError::BadPrefix),
            ("-example.com/cleanup", FinalizerNameError::BadPrefix),
            (&format!("{long_prefix}/x"), FinalizerNameError::BadPrefix),
            ("example.com/", FinalizerNameError::BadName),
            ("example.com/a/b", FinalizerNameError::BadName),
            ("example.com/-a", FinalizerNameError::BadName),
            ("example.com/a b", FinalizerNameError::BadName),
            (
                &format!("example.com/{long_name}"),
                FinalizerNameError::BadName,
            ),
        ] {
            assert_eq!(validate_name(bad), Err(why), "{bad}");
        }
        assert_eq!(
            validate_name(&format!("example.com/{}", &long_name[1..])),
            Ok(())
        );
    }
}
