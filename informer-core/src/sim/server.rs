//! A model kube-apiserver: one resource, resourceVersions, a compaction window, paging with
//! continue tokens, watches with bookmarks, streaming lists.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::Bound;

use crate::object::{Key, Object};
use crate::protocol::{Failure, ListPage, ListRequest, Status, WatchEvent, WatchRequest};

/// A minimal object for the simulation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SimObject {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `metadata.uid`.
    pub uid: String,
    /// The object's content.
    pub data: u64,
    /// Content a transform drops (think `managedFields`).
    pub noise: u64,
}

impl Object for SimObject {
    fn name(&self) -> &str {
        &self.name
    }
    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref().filter(|n| !n.is_empty())
    }
    fn resource_version(&self) -> Option<&str> {
        Some(&self.resource_version)
    }
    fn uid(&self) -> Option<&str> {
        Some(&self.uid)
    }
}

/// Stored in snapshots as JSON (the default codec).
impl crate::snapshot::SnapshotCodec for SimObject {}

impl SimObject {
    /// The resourceVersion as a number (0 if unparsable).
    pub fn rv(&self) -> u64 {
        self.resource_version.parse().unwrap_or(0)
    }
}

/// One change in the server's history.
#[derive(Clone, Debug)]
pub struct LogEntry {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// The object's key.
    pub key: Key,
    /// The state before.
    pub prev: Option<Arc<SimObject>>,
    /// The state after (`None`: deleted).
    pub next: Option<Arc<SimObject>>,
    /// What a watch reports: the new state, or for a delete the last state at the delete's
    /// resourceVersion.
    pub event: Arc<SimObject>,
}

/// How a watch request is answered.
#[derive(Debug)]
pub enum WatchOpen {
    /// The stream opens: first `initial` (a streaming list's initial events and its closing
    /// bookmark), then live events after `cursor`.
    Stream {
        /// Events to send at once.
        initial: Vec<WatchEvent<SimObject>>,
        /// The resourceVersion after which live events follow.
        cursor: u64,
    },
    /// The stream opens with one ERROR event and closes (how 410 reaches a client).
    ErrorThenEnd(Failure),
}

/// The model API server.
#[derive(Debug, Default)]
pub struct ModelServer {
    /// The current resourceVersion (of the last change).
    pub rv: u64,
    objects: BTreeMap<Key, Arc<SimObject>>,
    log: Vec<LogEntry>,
    /// Changes at or below this resourceVersion are compacted: watches from an older
    /// resourceVersion and exact reads below it fail with 410.
    pub compacted: u64,
    uid_seq: u64,
    /// Whether lists at resourceVersion "0" are served from a watch cache (ignoring `limit`).
    pub watch_cache: bool,
    /// Whether `sendInitialEvents` is supported (Kubernetes 1.27+).
    pub streaming_supported: bool,
}

fn status(code: u16, reason: &str, message: String) -> Status {
    Status {
        code,
        reason: reason.into(),
        message,
        ..Status::default()
    }
}

impl ModelServer {
    /// A server at resourceVersion 1 with nothing stored.
    pub fn new(watch_cache: bool, streaming_supported: bool) -> Self {
        ModelServer {
            rv: 1,
            compacted: 1,
            watch_cache,
            streaming_supported,
            ..ModelServer::default()
        }
    }

    /// The current state.
    pub fn objects(&self) -> &BTreeMap<Key, Arc<SimObject>> {
        &self.objects
    }

    fn record(&mut self, key: Key, next: Option<Arc<SimObject>>, event: Arc<SimObject>) {
        let prev = match &next {
            Some(o) => self.objects.insert(key.clone(), o.clone()),
            None => self.objects.remove(&key),
        };
        self.log.push(LogEntry {
            rv: self.rv,
            key,
            prev,
            next,
            event,
        });
    }

    /// Creates `namespace/name`; false if it exists.
    pub fn create(&mut self, namespace: Option<&str>, name: &str, data: u64, noise: u64) -> bool {
        let key = Key::new(namespace, name);
        if self.objects.contains_key(&key) {
            return false;
        }
        self.rv += 1;
        self.uid_seq += 1;
        let obj = Arc::new(SimObject {
            name: name.into(),
            namespace: namespace.map(Into::into),
            resource_version: self.rv.to_string(),
            uid: format!("uid-{}", self.uid_seq),
            data,
            noise,
        });
        self.record(key, Some(obj.clone()), obj);
        true
    }

    /// Updates `key`; false if absent.
    pub fn update(&mut self, key: &Key, data: u64, noise: u64) -> bool {
        let Some(old) = self.objects.get(key) else {
            return false;
        };
        let mut obj = (**old).clone();
        self.rv += 1;
        obj.resource_version = self.rv.to_string();
        obj.data = data;
        obj.noise = noise;
        let obj = Arc::new(obj);
        self.record(key.clone(), Some(obj.clone()), obj);
        true
    }

    /// Deletes `key`; false if absent.
    pub fn delete(&mut self, key: &Key) -> bool {
        let Some(old) = self.objects.get(key) else {
            return false;
        };
        let mut last = (**old).clone();
        self.rv += 1;
        last.resource_version = self.rv.to_string();
        self.record(key.clone(), None, Arc::new(last));
        true
    }

    /// Compacts history up to `rv` (clamped to the current resourceVersion).
    pub fn compact(&mut self, rv: u64) {
        self.compacted = self.compacted.max(rv.min(self.rv));
    }

    /// The state at resourceVersion `at` (which must not be compacted).
    fn snapshot(&self, at: u64) -> BTreeMap<Key, Arc<SimObject>> {
        let mut state = self.objects.clone();
        for e in self.log.iter().rev() {
            if e.rv <= at {
                break;
            }
            match &e.prev {
                Some(p) => state.insert(e.key.clone(), p.clone()),
                None => state.remove(&e.key),
            };
        }
        state
    }

    /// The changes after `rv`, oldest first.
    pub fn events_after(&self, rv: u64) -> &[LogEntry] {
        let i = self.log.partition_point(|e| e.rv <= rv);
        self.log.get(i..).unwrap_or(&[])
    }

    fn page(
        state: &BTreeMap<Key, Arc<SimObject>>,
        snap: u64,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> ListPage<SimObject> {
        let lower = match after {
            Some(a) => Bound::Excluded(Key::parse(a)),
            None => Bound::Unbounded,
        };
        let limit = limit.filter(|&l| l > 0).map(|l| l as usize);
        let mut items = Vec::new();
        let mut continue_token = None;
        for (k, o) in state.range((lower, Bound::Unbounded)) {
            if limit.is_some_and(|l| items.len() >= l) {
                continue_token = items
                    .last()
                    .map(|last: &Arc<SimObject>| format!("{snap}/{}", Key::of(&**last)));
                break;
            }
            let _ = k;
            items.push(o.clone());
        }
        ListPage {
            items,
            resource_version: snap.to_string(),
            continue_token,
            remaining_item_count: None,
        }
    }

    /// Answers one list call.
    pub fn list(&self, req: &ListRequest) -> Result<ListPage<SimObject>, Failure> {
        if let Some(token) = &req.continue_token {
            let Some((snap, after)) = token
                .split_once('/')
                .and_then(|(s, a)| Some((s.parse::<u64>().ok()?, a)))
            else {
                return Err(Failure::Other(status(
                    400,
                    "BadRequest",
                    "bad continue".into(),
                )));
            };
            if req
                .resource_version
                .as_deref()
                .is_some_and(|r| !r.is_empty())
            {
                return Err(Failure::Other(status(
                    400,
                    "BadRequest",
                    "specifying resource version is not allowed when using continue".into(),
                )));
            }
            if snap < self.compacted {
                let mut st = status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result"
                        .into(),
                );
                st.continue_token = Some(format!("{}/{after}", self.rv));
                return Err(Failure::Expired(st));
            }
            return Ok(Self::page(
                &self.snapshot(snap),
                snap,
                Some(after),
                req.limit,
            ));
        }
        match req.resource_version.as_deref() {
            None | Some("") => Ok(Self::page(&self.objects, self.rv, None, req.limit)),
            Some("0") => {
                let limit = if self.watch_cache { None } else { req.limit };
                Ok(Self::page(&self.objects, self.rv, None, limit))
            }
            Some(x) => {
                let Ok(x) = x.parse::<u64>() else {
                    return Err(Failure::Other(status(400, "BadRequest", "bad rv".into())));
                };
                if x > self.rv {
                    return Err(Failure::TooLargeResourceVersion(status(
                        504,
                        "Timeout",
                        format!("Too large resource version: {x}, current: {}", self.rv),
                    )));
                }
                if req.limit.is_some_and(|l| l > 0) {
                    // Paged at a specific RV: an exact read from etcd.
                    if x < self.compacted {
                        return Err(Failure::Expired(status(
                            410,
                            "Expired",
                            format!("too old resource version: {x} ({})", self.compacted),
                        )));
                    }
                    Ok(Self::page(&self.snapshot(x), x, None, req.limit))
                } else {
                    // NotOlderThan, from the watch cache: the current state.
                    Ok(Self::page(&self.objects, self.rv, None, None))
                }
            }
        }
    }

    /// Answers a watch call.
    pub fn watch(&self, req: &WatchRequest) -> Result<WatchOpen, Failure> {
        let rv = match req.resource_version.as_str() {
            "" | "0" => None,
            x => match x.parse::<u64>() {
                Ok(x) => Some(x),
                Err(_) => return Err(Failure::Other(status(400, "BadRequest", "bad rv".into()))),
            },
        };
        if rv.is_some_and(|x| x > self.rv) {
            return Err(Failure::TooLargeResourceVersion(status(
                504,
                "Timeout",
                "Too large resource version".into(),
            )));
        }
        if req.send_initial_events {
            if !self.streaming_supported {
                return Err(Failure::StreamingListUnsupported(status(
                    400,
                    "BadRequest",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
                        .into(),
                )));
            }
            let mut initial: Vec<WatchEvent<SimObject>> = self
                .objects
                .values()
                .map(|o| WatchEvent::Added(o.clone()))
                .collect();
            initial.push(WatchEvent::Bookmark {
                resource_version: self.rv.to_string(),
                initial_events_end: true,
            });
            return Ok(WatchOpen::Stream {
                initial,
                cursor: self.rv,
            });
        }
        match rv {
            None => Ok(WatchOpen::Stream {
                initial: Vec::new(),
                cursor: self.rv,
            }),
            Some(x) if x < self.compacted => Ok(WatchOpen::ErrorThenEnd(Failure::Expired(status(
                410,
                "Expired",
                format!("too old resource version: {x} ({})", self.compacted),
            )))),
            Some(x) => Ok(WatchOpen::Stream {
                initial: Vec::new(),
                cursor: x,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_snapshots_and_compaction() {
        let mut s = ModelServer::new(false, true);
        for i in 0..5 {
            s.create(Some("a"), &format!("o{i}"), i, 0);
        }
        let k0 = Key::new(Some("a"), "o0");
        let req = ListRequest {
            limit: Some(2),
            ..ListRequest::default()
        };
        let p1 = s.list(&req).unwrap();
        assert_eq!(p1.items.len(), 2);
        let rv1 = p1.resource_version.clone();
        s.delete(&k0);
        s.update(&Key::new(Some("a"), "o3"), 99, 0);
        let p2 = s
            .list(&ListRequest {
                continue_token: p1.continue_token.clone(),
                limit: Some(2),
                ..ListRequest::default()
            })
            .unwrap();
        assert_eq!(p2.resource_version, rv1);
        assert_eq!(p2.items[1].data, 3, "snapshot state, not the update");
        s.compact(s.rv);
        let err = s
            .list(&ListRequest {
                continue_token: p2.continue_token.clone(),
                limit: Some(2),
                ..ListRequest::default()
            })
            .unwrap_err();
        assert!(matches!(err, Failure::Expired(_)));
        assert_eq!(s.events_after(0).len(), 7);
        assert_eq!(s.events_after(s.rv).len(), 0);
    }
}
