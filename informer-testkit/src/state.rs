//! The cluster's state: resources, objects, the change log (history for exact lists and
//! resumed watches, up to the compaction floor), watchers, and the writes every verb shares
//! (commit, delete, the garbage collector and namespace cleanup).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_channel::mpsc::UnboundedSender;
use informer_core::object::selector::{Labels, Selector};
use informer_core::rng::SplitMix64;
use serde_json::{Map, Value, json};

use crate::faults::Faults;
use crate::{ApiError, TraceEntry};

/// Objects of one resource are stored under (group, plural), whatever version wrote them.
pub(crate) type StoreKey = (String, String);
/// (namespace, name); the namespace is "" for cluster-scoped objects. Ordered as etcd's keys.
pub(crate) type ObjKey = (String, String);

/// What the server knows of one resource version.
#[derive(Debug)]
pub(crate) struct ResInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Has a status subresource: the main resource ignores `.status`, `/status` only it.
    pub status: bool,
    /// A custom resource (kind and apiVersion kept on list items; generation tracked).
    pub custom: bool,
}

impl ResInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    pub fn store(&self) -> StoreKey {
        (self.group.clone(), self.plural.clone())
    }
    /// Whether spec changes bump `metadata.generation`.
    pub fn tracks_generation(&self) -> bool {
        self.custom || matches!(self.group.as_str(), "apps" | "batch" | "networking.k8s.io")
    }
    /// The `details.kind` and `group` of error answers, as the apiserver gives them.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// One change, kept until compacted: enough to rebuild any state since the floor.
pub(crate) struct Change {
    pub rv: u64,
    pub store: StoreKey,
    pub key: ObjKey,
    pub old: Option<Arc<Value>>,
    pub new: Option<Arc<Value>>,
    /// A deletion's last state, at the deletion's resourceVersion (what `DELETED` carries).
    pub gone: Option<Arc<Value>>,
}

/// What a watch stream is sent.
pub(crate) enum Msg {
    Line(Bytes),
    /// The server ends the stream (a restart: with a connection reset).
    Close {
        reset: bool,
    },
}

/// An open watch.
pub(crate) struct Watcher {
    pub id: u64,
    pub store: StoreKey,
    pub namespace: Option<String>,
    pub labels: Selector,
    pub fields: FieldSelector,
    pub metadata_only: bool,
    pub tx: UnboundedSender<Msg>,
}

/// `fieldSelector`: `a=b`, `a==b`, `a!=b`, comma-separated, on dotted paths; and, where the
/// server honours it, `shardSelector`'s ranges (any of them) of a field's FNV-1a hash.
#[derive(Clone, Debug, Default)]
pub(crate) struct FieldSelector(Vec<(Vec<String>, bool, String)>, ShardRanges);

/// `shardSelector`: `shardRange(<field>, '<start>', '<end>')` joined by `||`; `None`: none.
type ShardRanges = Option<Vec<(Vec<String>, u64, u128)>>;

impl FieldSelector {
    pub fn parse(s: &str, info: &ResInfo) -> Result<FieldSelector, ApiError> {
        let mut out = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            if info.custom && !matches!(k, "metadata.name" | "metadata.namespace") {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k}"
                )));
            }
            out.push((
                k.split('.').map(str::to_string).collect(),
                eq,
                v.trim().into(),
            ));
        }
        Ok(FieldSelector(out, None))
    }

    /// Adds `shardSelector` `s` when `honoured` (a 1.36 server with the feature on); a server
    /// without it ignores the parameter.
    pub fn with_shard(mut self, s: Option<&str>, honoured: bool) -> Result<Self, ApiError> {
        let Some(s) = s.filter(|s| !s.trim().is_empty() && honoured) else {
            return Ok(self);
        };
        let bad = || ApiError::bad_request(format!("invalid shardSelector: '{s}'"));
        let hex = |t: &str| -> Result<u128, ApiError> {
            let t = t
                .trim()
                .strip_prefix('\'')
                .and_then(|t| t.strip_suffix('\''));
            let t = t.and_then(|t| t.strip_prefix("0x")).ok_or_else(bad)?;
            u128::from_str_radix(t, 16).map_err(|_| bad())
        };
        let mut ranges = Vec::new();
        for part in s.split("||") {
            let inner = part
                .trim()
                .strip_prefix("shardRange(")
                .and_then(|p| p.strip_suffix(')'))
                .ok_or_else(bad)?;
            let args: Vec<&str> = inner.split(',').collect();
            let [field, start, end] = args[..] else {
                return Err(bad());
            };
            let path = match field.trim() {
                "object.metadata.uid" => vec!["metadata".to_string(), "uid".to_string()],
                "object.metadata.namespace" => {
                    vec!["metadata".to_string(), "namespace".to_string()]
                }
                _ => return Err(bad()),
            };
            let (start, end) = (hex(start)?, hex(end)?);
            if start > u128::from(u64::MAX) || end > 1 << 64 || start >= end {
                return Err(bad());
            }
            ranges.push((path, start as u64, end));
        }
        self.1 = Some(ranges);
        Ok(self)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty() && self.1.is_none()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let fields = self.0.iter().all(|(path, eq, want)| {
            let got = match crate::patch::at(obj, path) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            };
            (got == *want) == *eq
        });
        fields
            && self.1.as_ref().is_none_or(|ranges| {
                ranges.iter().any(|(path, start, end)| {
                    let got = crate::patch::at(obj, path).and_then(Value::as_str);
                    let h = informer_core::controller::shard::fnv1a64(got.unwrap_or("").as_bytes());
                    h >= *start && u128::from(h) < *end
                })
            })
    }
}

/// An object's labels, for [`Selector::matches`].
pub(crate) struct JsonLabels<'a>(pub &'a Value);

impl Labels for JsonLabels<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.0.get("metadata")?.get("labels")?.get(key)?.as_str()
    }
}

/// Everything behind the cluster's lock.
pub(crate) struct State {
    pub seed: u64,
    /// The last resourceVersion handed out (one counter for everything, as etcd's revision).
    pub rv: u64,
    /// Changes at or below this were compacted away.
    pub floor: u64,
    pub resources: HashMap<(String, String, String), Arc<ResInfo>>,
    pub objects: HashMap<StoreKey, BTreeMap<ObjKey, Arc<Value>>>,
    pub log: VecDeque<Change>,
    pub watchers: Vec<Watcher>,
    pub next_watcher: u64,
    /// How many times each request text was seen (the fault plan's occurrence number).
    pub seen: HashMap<String, u64>,
    pub uids: u64,
    pub names: u64,
    pub faults: Faults,
    pub next_restart: Option<Duration>,
    pub down_until: Duration,
    pub trace: Vec<TraceEntry>,
    /// Seconds since the Unix epoch at the clock's origin (timestamps it writes).
    pub epoch: i64,
    /// Virtual time now, as of the request being served.
    pub now: Duration,
    /// Something was deleted or started deleting: the garbage collector has work.
    pub gc_dirty: bool,
    /// Changes kept before the older half is compacted.
    pub history: usize,
    /// `shardSelector` is honoured (Kubernetes 1.36's KEP-5866), not ignored.
    pub shard_selectors: bool,
}

/// Changes kept for exact lists and resumed watches before the older half is compacted, by
/// default.
pub(crate) const HISTORY: usize = 100_000;

/// Finalizers the garbage collector itself handles.
pub(crate) const FOREGROUND: &str = "foregroundDeletion";
pub(crate) const ORPHAN: &str = "orphan";

pub(crate) fn meta(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata")?.as_object()
}

pub(crate) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let m = v
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| json!({})));
    match m {
        Some(m) => {
            if !m.is_object() {
                *m = json!({});
            }
            match m.as_object_mut() {
                Some(m) => m,
                None => unreachable!("made an object just above"),
            }
        }
        None => unreachable!("made an object just above"),
    }
}

pub(crate) fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    meta(v)?.get(field)?.as_str()
}

pub(crate) fn finalizers(v: &Value) -> Vec<String> {
    meta(v)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(v: &mut Value, f: &[String]) {
    let m = meta_mut(v);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

pub(crate) fn deleting(v: &Value) -> bool {
    meta(v).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()))
}

/// Owner uids of `v`.
fn owner_uids(v: &Value) -> Vec<String> {
    meta(v)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn without_owner(v: &mut Value, uids: &HashSet<String>) {
    let m = meta_mut(v);
    let kept: Vec<Value> = m
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|r| {
                    !r.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| uids.contains(u))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if kept.is_empty() {
        m.remove("ownerReferences");
    } else {
        m.insert("ownerReferences".into(), Value::Array(kept));
    }
}

/// One line of a watch stream.
pub(crate) fn event_line(kind: &str, obj: &Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    // Serializing a Value cannot fail.
    let _ = serde_json::to_writer(&mut out, obj);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// The metadata-only form of an object (`PartialObjectMetadata`).
pub(crate) fn metadata_only(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

impl State {
    pub fn new(seed: u64, faults: Faults, epoch: i64) -> State {
        let mut st = State {
            seed,
            rv: 0,
            floor: 0,
            resources: HashMap::new(),
            objects: HashMap::new(),
            log: VecDeque::new(),
            watchers: Vec::new(),
            next_watcher: 0,
            seen: HashMap::new(),
            uids: 0,
            names: 0,
            next_restart: faults.restart_every,
            faults,
            down_until: Duration::ZERO,
            trace: Vec::new(),
            epoch,
            now: Duration::ZERO,
            gc_dirty: false,
            history: HISTORY,
            shard_selectors: false,
        };
        for r in informer_http::Resource::BUILTINS {
            let status = matches!(
                &*r.plural,
                "pods"
                    | "services"
                    | "namespaces"
                    | "nodes"
                    | "persistentvolumeclaims"
                    | "persistentvolumes"
                    | "deployments"
                    | "replicasets"
                    | "statefulsets"
                    | "daemonsets"
                    | "jobs"
                    | "cronjobs"
                    | "ingresses"
                    | "customresourcedefinitions"
            );
            st.register(r, status, false);
        }
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            let info = st.info("", "v1", "namespaces").expect("built in");
            st.stamp_new(&info, obj, "", ns);
        }
        st
    }

    pub fn register(&mut self, r: &informer_http::Resource, status: bool, custom: bool) {
        self.resources.insert(
            (
                r.group.to_string(),
                r.version.to_string(),
                r.plural.to_string(),
            ),
            Arc::new(ResInfo {
                group: r.group.to_string(),
                version: r.version.to_string(),
                kind: r.kind.to_string(),
                plural: r.plural.to_string(),
                namespaced: r.namespaced,
                status,
                custom,
            }),
        );
    }

    pub fn info(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResInfo>> {
        self.resources
            .get(&(group.into(), version.into(), plural.into()))
            .cloned()
    }

    pub fn timestamp(&self) -> String {
        let secs = self.epoch + self.now.as_secs() as i64;
        informer_core::object::Timestamp::from_unix(secs, 0)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    fn rng(&self, salt: u64) -> SplitMix64 {
        SplitMix64::new(self.seed ^ salt.wrapping_mul(0xD6E8_FEB8_6659_FD93))
    }

    pub fn new_uid(&mut self) -> String {
        self.uids += 1;
        let mut r = self.rng(self.uids);
        let (a, b) = (r.next_u64(), r.next_u64());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            (b >> 48) | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }

    /// `generateName` plus five characters, as the apiserver's (same alphabet).
    pub fn generate_name(&mut self, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        self.names += 1;
        let mut r = self.rng(self.names ^ 0x5bd1_e995);
        let mut s = prefix.to_string();
        for _ in 0..5 {
            s.push(ALPHABET[r.below(ALPHABET.len() as u64) as usize] as char);
        }
        s
    }

    pub fn get(&self, store: &StoreKey, key: &ObjKey) -> Option<Arc<Value>> {
        self.objects.get(store)?.get(key).cloned()
    }

    /// Fills a new object's system fields and commits it (no checks: the callers did them).
    pub fn stamp_new(&mut self, info: &ResInfo, obj: Value, ns: &str, name: &str) -> Arc<Value> {
        let obj = self.fill_new(info, obj, ns, name);
        self.commit(info, (ns.into(), name.into()), Some(obj))
            .unwrap_or_else(|| Arc::new(Value::Null))
    }

    /// A new object's system fields: name, namespace, uid, creationTimestamp, generation,
    /// apiVersion and kind.
    pub fn fill_new(&mut self, info: &ResInfo, mut obj: Value, ns: &str, name: &str) -> Value {
        let uid = self.new_uid();
        let ts = self.timestamp();
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        if info.namespaced {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(ts));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if info.tracks_generation() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if let Value::Object(o) = &mut obj {
            o.insert("apiVersion".into(), json!(info.api_version()));
            o.insert("kind".into(), json!(info.kind));
        }
        prune_empty(&mut obj, info);
        obj
    }

    /// Stores `new` (or removes the object when `None`) at the next resourceVersion, logs the
    /// change and tells the watchers. Returns what was stored (or the removed object, at its
    /// deletion's resourceVersion).
    pub fn commit(
        &mut self,
        info: &ResInfo,
        key: ObjKey,
        new: Option<Value>,
    ) -> Option<Arc<Value>> {
        let store = info.store();
        let old = self.get(&store, &key);
        self.rv += 1;
        let rv = self.rv;
        let (stored, gone) = match new {
            Some(mut v) => {
                prune_empty(&mut v, info);
                meta_mut(&mut v).insert("resourceVersion".into(), json!(rv.to_string()));
                let v = Arc::new(v);
                self.objects
                    .entry(store.clone())
                    .or_default()
                    .insert(key.clone(), v.clone());
                (Some(v), None)
            }
            None => {
                let removed = self.objects.get_mut(&store).and_then(|m| m.remove(&key));
                let gone = removed.map(|o| {
                    let mut o = (*o).clone();
                    meta_mut(&mut o).insert("resourceVersion".into(), json!(rv.to_string()));
                    Arc::new(o)
                });
                self.gc_dirty = true;
                (None, gone)
            }
        };
        self.broadcast(
            &store,
            &key.0,
            old.as_deref(),
            stored.as_deref(),
            gone.as_deref(),
        );
        self.log.push_back(Change {
            rv,
            store,
            key,
            old,
            new: stored.clone(),
            gone: gone.clone(),
        });
        if self.log.len() > self.history {
            // As etcd's periodic compaction: the older half of the history goes.
            let drop = self.log.len() / 2;
            if let Some(last) = self.log.drain(..drop).next_back() {
                self.floor = last.rv;
            }
        }
        stored.or(gone)
    }

    fn broadcast(
        &mut self,
        store: &StoreKey,
        ns: &str,
        old: Option<&Value>,
        new: Option<&Value>,
        gone: Option<&Value>,
    ) {
        self.watchers.retain(|w| {
            if &w.store != store || w.namespace.as_deref().is_some_and(|n| n != ns) {
                return true;
            }
            let Some((kind, obj)) = watch_event(w, old, new, gone) else {
                return true;
            };
            let line = if w.metadata_only {
                event_line(kind, &metadata_only(&obj))
            } else {
                event_line(kind, &obj)
            };
            w.tx.unbounded_send(Msg::Line(line)).is_ok()
        });
    }

    /// The objects of `store` as they were at `rv` (at least the floor).
    pub fn state_at(&self, store: &StoreKey, rv: u64) -> BTreeMap<ObjKey, Arc<Value>> {
        let mut m = self.objects.get(store).cloned().unwrap_or_default();
        for c in self.log.iter().rev() {
            if c.rv <= rv {
                break;
            }
            if &c.store != store {
                continue;
            }
            match &c.old {
                Some(o) => {
                    m.insert(c.key.clone(), o.clone());
                }
                None => {
                    m.remove(&c.key);
                }
            }
        }
        m
    }

    /// Everything up to now is history no more: lists and watches from an older
    /// resourceVersion get 410.
    pub fn compact(&mut self) {
        self.floor = self.rv;
        self.log.clear();
    }

    /// A restart: every watch ends with a reset, history is compacted, connections are refused
    /// for `downtime`.
    pub fn restart(&mut self) {
        for w in self.watchers.drain(..) {
            let _ = w.tx.unbounded_send(Msg::Close { reset: true });
        }
        self.compact();
        self.down_until = self.now + self.faults.downtime;
    }

    /// Deletes an object as a `DELETE` without options would, finalizers and propagation
    /// honoured: `Ok(Some(obj))` while it stays (deleting), `Ok(None)` once gone.
    pub fn delete_object(
        &mut self,
        info: &ResInfo,
        key: &ObjKey,
        policy: Option<&str>,
    ) -> Option<Arc<Value>> {
        let current = self.get(&info.store(), key)?;
        let mut obj = (*current).clone();
        let mut fins = finalizers(&obj);
        let add = match policy {
            Some("Foreground") => Some(FOREGROUND),
            Some("Orphan") => Some(ORPHAN),
            _ => None,
        };
        let is_namespace = info.group.is_empty() && info.plural == "namespaces";
        if let Some(f) = add {
            if !fins.iter().any(|x| x == f) {
                fins.push(f.to_string());
            }
        }
        if fins.is_empty() && !is_namespace {
            self.commit(info, key.clone(), None);
            return None;
        }
        if deleting(&current) && finalizers(&current) == fins {
            return Some(current);
        }
        set_finalizers(&mut obj, &fins);
        if !deleting(&obj) {
            let ts = self.timestamp();
            let m = meta_mut(&mut obj);
            m.insert("deletionTimestamp".into(), json!(ts));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        if is_namespace {
            if let Some(s) = obj.get_mut("status").and_then(Value::as_object_mut) {
                s.insert("phase".into(), json!("Terminating"));
            }
        }
        self.gc_dirty = true;
        self.commit(info, key.clone(), Some(obj))
    }

    /// All live objects: (resource, key, object).
    fn all(&self) -> Vec<(Arc<ResInfo>, ObjKey, Arc<Value>)> {
        let mut out = Vec::new();
        for (store, objs) in &self.objects {
            let Some(info) = self
                .resources
                .values()
                .find(|i| i.group == store.0 && i.plural == store.1)
            else {
                continue;
            };
            for (k, v) in objs {
                out.push((info.clone(), k.clone(), v.clone()));
            }
        }
        // Deterministic order whatever the hash maps' order.
        out.sort_by(|a, b| (&a.0.group, &a.0.plural, &a.1).cmp(&(&b.0.group, &b.0.plural, &b.1)));
        out
    }

    /// The garbage collector and the namespace controller, run to a fixed point after each
    /// write that deleted something or started a deletion: dependents of gone owners are
    /// deleted (background), foreground deletions delete their dependents first, orphaning
    /// strips the owner reference, a terminating namespace empties and goes.
    pub fn collect_garbage(&mut self) {
        let mut rounds = 0;
        while self.gc_dirty && rounds < 64 {
            self.gc_dirty = false;
            rounds += 1;
            let all = self.all();
            let uids: HashSet<String> = all
                .iter()
                .filter_map(|(_, _, v)| meta_str(v, "uid").map(str::to_string))
                .collect();
            let mut dependents: HashMap<String, Vec<usize>> = HashMap::new();
            for (i, (_, _, v)) in all.iter().enumerate() {
                for u in owner_uids(v) {
                    dependents.entry(u).or_default().push(i);
                }
            }
            for (info, key, v) in &all {
                // Re-read: an earlier step of this round may have changed it.
                let Some(v) = self.get(&info.store(), key).filter(|c| Arc::ptr_eq(c, v)) else {
                    self.gc_dirty = true;
                    continue;
                };
                let uid = meta_str(&v, "uid").unwrap_or_default().to_string();
                let fins = finalizers(&v);
                if deleting(&v) && fins.iter().any(|f| f == FOREGROUND) {
                    let deps = dependents.get(&uid).cloned().unwrap_or_default();
                    let mut waiting = false;
                    for i in deps {
                        let (dinfo, dkey, _) = &all[i];
                        if self.get(&dinfo.store(), dkey).is_some() {
                            waiting = true;
                            self.delete_object(dinfo, dkey, Some("Foreground"));
                        }
                    }
                    if !waiting {
                        self.remove_finalizer(info, key, FOREGROUND);
                    }
                    continue;
                }
                if deleting(&v) && fins.iter().any(|f| f == ORPHAN) {
                    let one: HashSet<String> = [uid.clone()].into();
                    for i in dependents.get(&uid).cloned().unwrap_or_default() {
                        let (dinfo, dkey, _) = &all[i];
                        if let Some(d) = self.get(&dinfo.store(), dkey) {
                            let mut d = (*d).clone();
                            without_owner(&mut d, &one);
                            self.commit(dinfo, dkey.clone(), Some(d));
                        }
                    }
                    self.remove_finalizer(info, key, ORPHAN);
                    continue;
                }
                if info.group.is_empty() && info.plural == "namespaces" && deleting(&v) {
                    let ns = &key.1;
                    let mut left = false;
                    for (cinfo, ckey, c) in &all {
                        if cinfo.namespaced && &ckey.0 == ns {
                            left = true;
                            if !deleting(c) {
                                self.delete_object(cinfo, ckey, None);
                            }
                        }
                    }
                    if !left {
                        self.commit(info, key.clone(), None);
                    }
                    continue;
                }
                let owners = owner_uids(&v);
                if owners.is_empty() {
                    continue;
                }
                let dangling: HashSet<String> = owners
                    .iter()
                    .filter(|u| !uids.contains(*u))
                    .cloned()
                    .collect();
                if dangling.len() == owners.len() {
                    if !deleting(&v) {
                        self.delete_object(info, key, None);
                    }
                } else if !dangling.is_empty() {
                    let mut d = (*v).clone();
                    without_owner(&mut d, &dangling);
                    self.commit(info, key.clone(), Some(d));
                }
            }
        }
    }

    /// Removes finalizer `f`; the object goes when it was the last one and it is deleting.
    pub fn remove_finalizer(&mut self, info: &ResInfo, key: &ObjKey, f: &str) {
        let Some(v) = self.get(&info.store(), key) else {
            return;
        };
        let mut fins = finalizers(&v);
        fins.retain(|x| x != f);
        let mut obj = (*v).clone();
        set_finalizers(&mut obj, &fins);
        if fins.is_empty() && deleting(&obj) {
            self.commit(info, key.clone(), None);
        } else {
            self.commit(info, key.clone(), Some(obj));
        }
    }
}

/// The event a watcher sees for a change, if any: selectors decide ADDED/MODIFIED/DELETED as
/// the apiserver's watch cache does (an object leaving the selection is DELETED for it).
pub(crate) fn watch_event<'a>(
    w: &Watcher,
    old: Option<&'a Value>,
    new: Option<&'a Value>,
    gone: Option<&'a Value>,
) -> Option<(&'static str, Cow<'a, Value>)> {
    let sel = |v: &Value| w.labels.matches(&JsonLabels(v)) && w.fields.matches(v);
    let was = old.is_some_and(sel);
    match (new, gone) {
        (Some(n), _) => match (was, sel(n)) {
            (false, true) => Some(("ADDED", Cow::Borrowed(n))),
            (true, true) => Some(("MODIFIED", Cow::Borrowed(n))),
            (true, false) => {
                // Leaving the selection: the object as the watch last matched it, at the
                // change's resourceVersion (as the watch cache sends it).
                let mut o = old.cloned().unwrap_or(Value::Null);
                if let Some(rv) = meta_str(n, "resourceVersion") {
                    let rv = rv.to_string();
                    meta_mut(&mut o).insert("resourceVersion".into(), json!(rv));
                }
                Some(("DELETED", Cow::Owned(o)))
            }
            (false, false) => None,
        },
        (None, Some(g)) if was => Some(("DELETED", Cow::Borrowed(g))),
        _ => None,
    }
}

/// Drops what the apiserver's Go types leave out when empty: metadata's maps and lists, and a
/// built-in's `data`-like maps.
pub(crate) fn prune_empty(v: &mut Value, info: &ResInfo) {
    let empty = |x: &Value| {
        x.is_null()
            || x.as_object().is_some_and(Map::is_empty)
            || x.as_array().is_some_and(Vec::is_empty)
    };
    let m = meta_mut(v);
    for f in [
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "managedFields",
    ] {
        if m.get(f).is_some_and(empty) {
            m.remove(f);
        }
    }
    if !info.custom {
        if let Value::Object(o) = v {
            for f in ["data", "binaryData", "stringData"] {
                if o.get(f).is_some_and(empty) {
                    o.remove(f);
                }
            }
        }
    }
}
