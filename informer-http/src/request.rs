//! Request URLs: paths for core and group resources, and the list / watch query strings.

use std::fmt::Write as _;

use informer_core::protocol::{ListRequest, Selectors, WatchRequest};

use crate::resource::Resource;

/// Appends `s` percent-encoded for use as one path segment or one query value: everything but
/// RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`) is escaped.
pub fn percent_encode_into(out: &mut String, s: &str) {
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// `s` percent-encoded (see [`percent_encode_into`]).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    percent_encode_into(&mut out, s);
    out
}

/// The collection path of `resource`: `/api/v1/namespaces/NS/pods`,
/// `/apis/apps/v1/deployments` (all namespaces), `/api/v1/nodes` (cluster-scoped).
///
/// `namespace` is ignored for cluster-scoped resources; `None` (or `""`) means all namespaces.
pub fn collection_path(resource: &Resource, namespace: Option<&str>) -> String {
    let mut p = String::with_capacity(64);
    if resource.group.is_empty() {
        p.push_str("/api/");
    } else {
        p.push_str("/apis/");
        percent_encode_into(&mut p, &resource.group);
        p.push('/');
    }
    percent_encode_into(&mut p, &resource.version);
    if resource.namespaced {
        if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
            p.push_str("/namespaces/");
            percent_encode_into(&mut p, ns);
        }
    }
    p.push('/');
    percent_encode_into(&mut p, &resource.plural);
    p
}

/// The path of one object: the collection path plus `/NAME`.
pub fn object_path(resource: &Resource, namespace: Option<&str>, name: &str) -> String {
    let mut p = collection_path(resource, namespace);
    p.push('/');
    percent_encode_into(&mut p, name);
    p
}

/// A query string under construction (`?a=b&c=d`), values percent-encoded.
struct Query {
    s: String,
}

impl Query {
    fn new(path: String) -> Query {
        Query { s: path }
    }

    fn push(&mut self, name: &str, value: &str) {
        self.s.push(if self.s.contains('?') { '&' } else { '?' });
        self.s.push_str(name);
        self.s.push('=');
        percent_encode_into(&mut self.s, value);
    }

    fn selectors(&mut self, sel: &Selectors) {
        if let Some(l) = sel.label.as_deref().filter(|l| !l.is_empty()) {
            self.push("labelSelector", l);
        }
        if let Some(f) = sel.field.as_deref().filter(|f| !f.is_empty()) {
            self.push("fieldSelector", f);
        }
        if let Some(s) = sel.shard.as_deref().filter(|s| !s.is_empty()) {
            self.push("shardSelector", s);
        }
    }
}

/// Path and query of one list call.
pub fn list_url(resource: &Resource, namespace: Option<&str>, req: &ListRequest) -> String {
    let mut q = Query::new(collection_path(resource, namespace));
    q.selectors(&req.selectors);
    if let Some(limit) = req.limit {
        q.push("limit", &limit.to_string());
    }
    if let Some(c) = req.continue_token.as_deref().filter(|c| !c.is_empty()) {
        q.push("continue", c);
    }
    if let Some(rv) = req.resource_version.as_deref() {
        q.push("resourceVersion", rv);
    }
    if let Some(m) = req.resource_version_match {
        q.push("resourceVersionMatch", m.as_str());
    }
    q.s
}

/// Path and query of one watch call.
pub fn watch_url(resource: &Resource, namespace: Option<&str>, req: &WatchRequest) -> String {
    let mut q = Query::new(collection_path(resource, namespace));
    q.push("watch", "true");
    q.selectors(&req.selectors);
    if !req.resource_version.is_empty() || req.send_initial_events {
        q.push("resourceVersion", &req.resource_version);
    }
    if let Some(m) = req.resource_version_match {
        q.push("resourceVersionMatch", m.as_str());
    }
    if req.allow_watch_bookmarks {
        q.push("allowWatchBookmarks", "true");
    }
    if req.send_initial_events {
        q.push("sendInitialEvents", "true");
    }
    if let Some(t) = req.timeout_seconds {
        q.push("timeoutSeconds", &t.to_string());
    }
    q.s
}

#[cfg(test)]
mod tests {
    use super::*;
    use informer_core::protocol::ResourceVersionMatch;

    #[test]
    fn paths_for_core_group_namespaced_and_cluster_scoped() {
        let cm = &Resource::CONFIGMAPS;
        assert_eq!(
            collection_path(cm, Some("default")),
            "/api/v1/namespaces/default/configmaps"
        );
        assert_eq!(collection_path(cm, None), "/api/v1/configmaps");
        assert_eq!(collection_path(cm, Some("")), "/api/v1/configmaps");
        assert_eq!(
            collection_path(&Resource::DEPLOYMENTS, Some("kube-system")),
            "/apis/apps/v1/namespaces/kube-system/deployments"
        );
        assert_eq!(
            collection_path(&Resource::DEPLOYMENTS, None),
            "/apis/apps/v1/deployments"
        );
        assert_eq!(
            collection_path(&Resource::NODES, Some("ignored")),
            "/api/v1/nodes"
        );
        let crd = Resource::new("example.com", "v1alpha1", "Widget", "widgets", true);
        assert_eq!(
            collection_path(&crd, Some("ns")),
            "/apis/example.com/v1alpha1/namespaces/ns/widgets"
        );
        assert_eq!(
            object_path(cm, Some("a b"), "x/y"),
            "/api/v1/namespaces/a%20b/configmaps/x%2Fy"
        );
    }

    #[test]
    fn list_query_has_everything_encoded() {
        let req = ListRequest {
            resource_version: Some("123".into()),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            limit: Some(500),
            continue_token: Some("eyJ2Ijoi+/=".into()),
            selectors: Selectors {
                label: Some("app in (a,b),tier!=db".into()),
                field: Some("metadata.name=x".into()),
                shard: None,
            },
        };
        assert_eq!(
            list_url(&Resource::PODS, Some("default"), &req),
            "/api/v1/namespaces/default/pods?labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb\
             &fieldSelector=metadata.name%3Dx&limit=500&continue=eyJ2Ijoi%2B%2F%3D\
             &resourceVersion=123&resourceVersionMatch=NotOlderThan"
        );
        assert_eq!(
            list_url(&Resource::PODS, None, &ListRequest::default()),
            "/api/v1/pods"
        );
        let rv0 = ListRequest {
            resource_version: Some("0".into()),
            ..Default::default()
        };
        assert_eq!(
            list_url(&Resource::PODS, None, &rv0),
            "/api/v1/pods?resourceVersion=0"
        );
        let exact = ListRequest {
            resource_version: Some("7".into()),
            resource_version_match: Some(ResourceVersionMatch::Exact),
            ..Default::default()
        };
        assert_eq!(
            list_url(&Resource::PODS, None, &exact),
            "/api/v1/pods?resourceVersion=7&resourceVersionMatch=Exact"
        );
    }

    #[test]
    fn watch_query() {
        let req = WatchRequest {
            resource_version: "42".into(),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(290),
            selectors: Selectors {
                label: Some("a=b".into()),
                field: None,
                shard: Some("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')".into()),
            },
            ..Default::default()
        };
        assert_eq!(
            watch_url(&Resource::CONFIGMAPS, None, &req),
            "/api/v1/configmaps?watch=true&labelSelector=a%3Db\
             &shardSelector=shardRange%28object.metadata.uid%2C%20%270x0%27%2C%20%270x8000000000000000%27%29\
             &resourceVersion=42&allowWatchBookmarks=true&timeoutSeconds=290"
        );
        let streaming = WatchRequest {
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            allow_watch_bookmarks: true,
            send_initial_events: true,
            ..Default::default()
        };
        assert_eq!(
            watch_url(&Resource::DEPLOYMENTS, Some("ns"), &streaming),
            "/apis/apps/v1/namespaces/ns/deployments?watch=true&resourceVersion=\
             &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&sendInitialEvents=true"
        );
        assert_eq!(
            watch_url(&Resource::NODES, None, &WatchRequest::default()),
            "/api/v1/nodes?watch=true"
        );
    }

    #[test]
    fn encoding_of_non_ascii() {
        assert_eq!(percent_encode("é&=?#% +"), "%C3%A9%26%3D%3F%23%25%20%2B");
        assert_eq!(percent_encode("Az09-._~"), "Az09-._~");
    }
}
