//! The consistency check's comparison (client-go has such a check for its own tests): the
//! cache, taken at a quiet moment, against a list from the server at exactly the cache's last
//! synced resourceVersion. One implementation for the runtime's switchable check
//! (`informer-runtime`'s `ConsistencyCheck`) and the simulation (`informer_core::sim`, feature
//! `sim`), which runs it at its quiet moments.
//!
//! Compared: the keys, each key's resourceVersion and, when asked, the content (with an
//! equality the caller gives, applied to the cached object and the server's object after the
//! informer's transform, see [`SharedIndexInformer::transform_object`]).
//!
//! [`SharedIndexInformer::transform_object`]: crate::SharedIndexInformer::transform_object

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::object::Object;
use crate::protocol::{ListRequest, ResourceVersionMatch, Selectors};

/// The check's list request: the first page at exactly `resource_version`
/// (`resourceVersionMatch=Exact`, pages of `limit`), later pages by their continue token alone
/// (the API server refuses a `resourceVersion` or `resourceVersionMatch` beside `continue`).
pub fn list_request(
    resource_version: &str,
    continue_token: Option<String>,
    selectors: &Selectors,
    limit: u32,
) -> ListRequest {
    let first = continue_token.is_none();
    ListRequest {
        resource_version: first.then(|| resource_version.to_string()),
        resource_version_match: first.then_some(ResourceVersionMatch::Exact),
        limit: Some(limit),
        continue_token,
        selectors: selectors.clone(),
    }
}

/// The cache and the server disagree at one resourceVersion: keys (`namespace/name`, or
/// `name` when cluster-scoped) the server has and the cache lacks, keys the cache has and the
/// server lacks, keys whose resourceVersions differ, and keys at the same resourceVersion
/// whose content differs (only when content is compared).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Divergence {
    /// The resourceVersion both were compared at.
    pub resource_version: String,
    /// On the server, not in the cache.
    pub missing: Vec<String>,
    /// In the cache, not on the server.
    pub unexpected: Vec<String>,
    /// In both at different resourceVersions: `(key, cached, server)`.
    pub stale: Vec<(String, String, String)>,
    /// In both at the same resourceVersion, with different content (only filled when content
    /// is compared).
    pub differing: Vec<String>,
}

impl Divergence {
    /// How many keys disagree in all.
    pub fn len(&self) -> usize {
        self.missing.len() + self.unexpected.len() + self.stale.len() + self.differing.len()
    }

    /// True when nothing disagrees ([`compare`] never returns such a divergence).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cache diverges from the server at resourceVersion {}: {} missing, {} unexpected, {} stale",
            self.resource_version,
            self.missing.len(),
            self.unexpected.len(),
            self.stale.len()
        )?;
        if !self.differing.is_empty() {
            write!(f, ", {} with other content", self.differing.len())?;
        }
        if let Some(k) = self.missing.first() {
            write!(f, " (first: missing {k})")
        } else if let Some(k) = self.unexpected.first() {
            write!(f, " (first: unexpected {k})")
        } else if let Some((k, c, s)) = self.stale.first() {
            write!(f, " (first: {k} cached at {c}, server at {s})")
        } else if let Some(k) = self.differing.first() {
            write!(f, " (first: {k} has other content)")
        } else {
            Ok(())
        }
    }
}

impl core::error::Error for Divergence {}

/// Compares a cached object with the server's object of the same key and resourceVersion:
/// true when they hold the same content.
pub type SameContent<'f, K> = &'f dyn Fn(&K, &K) -> bool;

/// The text of `obj`'s key.
fn key_text<K: Object + ?Sized>(obj: &K) -> String {
    obj.key_ref().to_string()
}

/// Compares the cache with the server's objects listed at `resource_version`.
///
/// `cache` and `server` may come in any order; a key listed twice keeps its last object.
/// `same_content`, when given, compares a cached object with the server's object of the same
/// key and resourceVersion (pass the server's object through the informer's transform first,
/// as the cache holds transformed objects). Returns `None` when they agree.
pub fn compare<'a, K, C, S>(
    resource_version: &str,
    cache: C,
    server: S,
    same_content: Option<SameContent<'_, K>>,
) -> Option<Divergence>
where
    K: Object + 'a,
    C: IntoIterator<Item = &'a K>,
    S: IntoIterator<Item = &'a K>,
{
    let cache: BTreeMap<String, &K> = cache.into_iter().map(|o| (key_text(o), o)).collect();
    let server: BTreeMap<String, &K> = server.into_iter().map(|o| (key_text(o), o)).collect();
    let rv = |o: &K| o.resource_version().unwrap_or("").to_string();
    let mut d = Divergence {
        resource_version: resource_version.to_string(),
        missing: Vec::new(),
        unexpected: Vec::new(),
        stale: Vec::new(),
        differing: Vec::new(),
    };
    for (k, srv) in &server {
        match cache.get(k) {
            None => d.missing.push(k.clone()),
            Some(c) if c.resource_version() != srv.resource_version() => {
                d.stale.push((k.clone(), rv(c), rv(srv)))
            }
            Some(c) => {
                if same_content.is_some_and(|eq| !eq(c, srv)) {
                    d.differing.push(k.clone());
                }
            }
        }
    }
    d.unexpected = cache
        .keys()
        .filter(|k| !server.contains_key(*k))
        .cloned()
        .collect();
    (!d.is_empty()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimObject;

    fn obj(ns: &str, name: &str, rv: u64, data: u64) -> SimObject {
        SimObject {
            name: name.into(),
            namespace: Some(ns.into()),
            resource_version: rv.to_string(),
            uid: name.into(),
            data,
            noise: 0,
        }
    }

    #[test]
    fn compare_finds_missing_unexpected_stale_and_differing() {
        let cache = [
            obj("ns", "a", 5, 1),
            obj("ns", "b", 6, 1),
            obj("ns", "c", 7, 1),
            obj("ns", "e", 8, 1),
        ];
        assert_eq!(compare("9", &cache, &cache, Some(&|a, b| a == b)), None);
        let server = [
            obj("ns", "a", 5, 1),
            obj("ns", "b", 8, 1),
            obj("ns", "d", 9, 1),
            obj("ns", "e", 8, 2),
        ];
        // Without content, `e` (same resourceVersion, other data) agrees.
        let d = compare("9", &cache, &server, None).unwrap();
        assert_eq!(d.missing, ["ns/d"]);
        assert_eq!(d.unexpected, ["ns/c"]);
        assert_eq!(
            d.stale,
            [("ns/b".to_string(), "6".to_string(), "8".to_string())]
        );
        assert!(d.differing.is_empty());
        assert_eq!(
            d.to_string(),
            "cache diverges from the server at resourceVersion 9: 1 missing, 1 unexpected, 1 stale (first: missing ns/d)"
        );
        let d = compare("9", &cache, &server, Some(&|a, b| a.data == b.data)).unwrap();
        assert_eq!(d.differing, ["ns/e"]);
        assert_eq!(d.len(), 4);
        // Only content differs.
        let d = compare("9", &cache[3..], &server[3..], Some(&|a, b| a == b)).unwrap();
        assert_eq!(
            d.to_string(),
            "cache diverges from the server at resourceVersion 9: 0 missing, 0 unexpected, 0 stale, 1 with other content (first: ns/e has other content)"
        );
    }
}
