//! The HTTP side: routes, verbs, answers, and the watch stream.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use futures_channel::mpsc::{UnboundedReceiver, unbounded};
use futures_util::{FutureExt as _, Stream, StreamExt as _};
use informer_core::object::selector::Selector;
use informer_core::protocol::Failure;
use informer_http::backend::HttpResponse;
use informer_http::transport::BoxFuture;
use serde_json::{Value, json};

use crate::faults::{Injected, Kind, WatchFault, plan};
use crate::patch;
use crate::state::{
    FieldSelector, JsonLabels, Msg, ObjKey, ResInfo, State, Watcher, deleting, event_line,
    finalizers, meta, meta_mut, meta_str, metadata_only, watch_event,
};
use crate::{ApiError, FakeCluster, TraceEntry};

/// Where a request goes.
struct Route {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    sub: Option<String>,
}

fn decode(seg: &str) -> String {
    let b = seg.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn route(path: &str) -> Option<Route> {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let (group, version, rest) = match segs.first().map(String::as_str) {
        Some("api") if segs.len() >= 2 => (String::new(), segs[1].clone(), &segs[2..]),
        Some("apis") if segs.len() >= 3 => (segs[1].clone(), segs[2].clone(), &segs[3..]),
        _ => return None,
    };
    let r = |namespace: Option<String>, rest: &[String]| {
        Some(Route {
            group: group.clone(),
            version: version.clone(),
            namespace,
            plural: rest.first()?.clone(),
            name: rest.get(1).cloned(),
            sub: rest.get(2).cloned(),
        })
        .filter(|_| rest.len() <= 3)
    };
    match rest {
        [ns, name, sub]
            if ns == "namespaces" && group.is_empty() && (sub == "status" || sub == "finalize") =>
        {
            r(None, &[ns.clone(), name.clone(), sub.clone()])
        }
        [ns, name, tail @ ..] if ns == "namespaces" && !tail.is_empty() => {
            r(Some(name.clone()), tail)
        }
        _ => r(None, rest),
    }
}

/// The query string as pairs.
fn query(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn json_response(code: u16, body: &Value, extra: &[(&str, String)]) -> HttpResponse {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    for (k, v) in extra {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            headers.insert(k, v);
        }
    }
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
    HttpResponse {
        status: http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
        headers,
        body: Box::pin(futures_util::stream::iter([Ok(bytes)])),
    }
}

impl ApiError {
    fn response(&self) -> HttpResponse {
        let mut extra = Vec::new();
        if let Some(s) = self.retry_after {
            extra.push(("retry-after", s.to_string()));
        }
        json_response(self.code, &self.status_body(), &extra)
    }
}

/// An object key for `route` and `info`.
fn key(info: &ResInfo, ns: Option<&str>, name: &str) -> ObjKey {
    let ns = if info.namespaced {
        ns.unwrap_or("")
    } else {
        ""
    };
    (ns.to_string(), name.to_string())
}

/// Continue tokens: the snapshot's resourceVersion and the last key returned.
fn encode_continue(rv: u64, last: &ObjKey) -> String {
    let v =
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{}/{}\u{0}", last.0, last.1)});
    base64::engine::general_purpose::STANDARD.encode(v.to_string())
}

fn decode_continue(token: &str) -> Option<(u64, ObjKey)> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    let rv = v.get("rv")?.as_u64()?;
    let start = v.get("start")?.as_str()?.trim_end_matches('\u{0}');
    let (ns, name) = start.split_once('/')?;
    Some((rv, (ns.to_string(), name.to_string())))
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::new(400, "BadRequest", format!("invalid resource version: {s}")))
}

fn body_json(body: &[u8], yaml: bool) -> Result<Value, ApiError> {
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(e) if yaml => serde_norway::from_slice(body)
            .map_err(|y| ApiError::bad_request(format!("error decoding YAML: {y} (as JSON: {e})"))),
        Err(e) => Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {e}"
        ))),
    }
}

fn strip_for(v: &mut Value, paths: &[&str]) {
    if let Value::Object(o) = v {
        for p in paths {
            o.remove(*p);
        }
    }
}

/// The value with metadata and status left out: what changes the generation.
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    strip_for(&mut v, &["metadata", "status", "apiVersion", "kind"]);
    v
}

/// What every write shares after the verb built the new object: identity and preconditions,
/// system fields, status (sub)resource rules, generation, no-op detection, finalizers.
struct Update<'a> {
    info: &'a ResInfo,
    key: ObjKey,
    old: Arc<Value>,
    status: bool,
    dry_run: bool,
}

impl Update<'_> {
    fn run(self, st: &mut State, new: Value) -> Result<(u16, Arc<Value>), ApiError> {
        let info = self.info;
        let name = &self.key.1;
        if !new.is_object() {
            return Err(ApiError::bad_request("the body is not an object".into()));
        }
        if let Some(n) = meta_str(&new, "name").filter(|n| !n.is_empty()) {
            if n != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
        }
        let old_rv = meta_str(&self.old, "resourceVersion")
            .unwrap_or_default()
            .to_string();
        if let Some(rv) = meta_str(&new, "resourceVersion").filter(|r| !r.is_empty()) {
            if rv != old_rv {
                return Err(ApiError::conflict(info, name));
            }
        }
        let old_uid = meta_str(&self.old, "uid").unwrap_or_default().to_string();
        if let Some(uid) = meta_str(&new, "uid").filter(|u| !u.is_empty()) {
            if uid != old_uid {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}",
                        info.qualified()
                    ),
                )
                .details(info, name));
            }
        }
        let mut result = if self.status {
            let mut r = (*self.old).clone();
            match new.get("status") {
                Some(s) => {
                    if let Value::Object(o) = &mut r {
                        o.insert("status".into(), s.clone());
                    }
                }
                None => strip_for(&mut r, &["status"]),
            }
            r
        } else {
            let mut r = new;
            let old_meta = meta(&self.old).cloned().unwrap_or_default();
            let m = meta_mut(&mut r);
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
                "managedFields",
            ] {
                match old_meta.get(f) {
                    Some(v) if f != "managedFields" || !m.contains_key(f) => {
                        m.insert(f.into(), v.clone());
                    }
                    Some(_) => {}
                    None => {
                        m.remove(f);
                    }
                }
            }
            if let Value::Object(o) = &mut r {
                o.insert("apiVersion".into(), json!(info.api_version()));
                o.insert("kind".into(), json!(info.kind));
                if info.status {
                    match self.old.get("status") {
                        Some(s) => {
                            o.insert("status".into(), s.clone());
                        }
                        None => {
                            o.remove("status");
                        }
                    }
                }
            }
            r
        };
        if !self.status && info.tracks_generation() && spec_part(&result) != spec_part(&self.old) {
            let g = meta(&self.old)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut result).insert("generation".into(), json!(g + 1));
        }
        meta_mut(&mut result).insert("resourceVersion".into(), json!(old_rv));
        if deleting(&self.old) {
            let before = finalizers(&self.old);
            if finalizers(&result).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    format!(
                        "{} \"{name}\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                        info.kind
                    ),
                )
                .kind_details(info, name));
            }
        }
        crate::state::prune_empty(&mut result, info);
        if result == *self.old {
            return Ok((200, self.old));
        }
        if self.dry_run {
            return Ok((200, Arc::new(result)));
        }
        if deleting(&result) && finalizers(&result).is_empty() {
            // The last finalizer went: the object goes; the answer is its last state, at the
            // version it had (as the apiserver answers).
            // (DELETED carries the stored state, finalizer and all, at the deletion's version.)
            crate::state::prune_empty(&mut result, info);
            st.commit(info, self.key, None);
            return Ok((200, Arc::new(result)));
        }
        let stored = st
            .commit(info, self.key, Some(result))
            .unwrap_or_else(|| Arc::new(Value::Null));
        Ok((200, stored))
    }
}

impl ApiError {
    fn conflict(info: &ResInfo, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                info.qualified()
            ),
        )
        .details(info, name)
    }

    fn not_found(info: &ResInfo, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", info.qualified()),
        )
        .details(info, name)
    }
}

impl FakeCluster {
    /// Serves one request.
    pub(crate) fn serve(
        &self,
        req: http::Request<Bytes>,
    ) -> BoxFuture<'static, Result<HttpResponse, Failure>> {
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let method = parts.method.clone();
            let path = parts.uri.path().to_string();
            let q = query(parts.uri.query());
            let text = format!("{method} {}", parts.uri);
            let content_type = parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let accept = parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let watch = matches!(param(&q, "watch"), Some("true" | "1"));
            let r = route(&path);
            let kind = match (&method, r.as_ref().and_then(|r| r.name.as_ref())) {
                (&http::Method::GET, None) if watch => Kind::Watch,
                (&http::Method::GET, None) => Kind::List,
                (&http::Method::GET, Some(_)) => Kind::Get,
                (&http::Method::POST, _) => Kind::Create,
                _ => Kind::Write,
            };
            let now = this.inner.clock.elapsed();
            let (plan, down) = {
                let mut st = this.lock();
                st.now = now;
                if let Some(at) = st.next_restart.filter(|at| now >= *at) {
                    st.restart();
                    st.next_restart = st
                        .faults
                        .restart_every
                        .map(|e| at + e.max(Duration::from_millis(1)));
                    if let Some(n) = st.next_restart.filter(|n| *n <= now) {
                        // Far behind (a long idle stretch): one restart, then on schedule.
                        st.next_restart = Some(n + (now - n));
                    }
                }
                // A restart refuses every connection, but gets and writes only when errors reach
                // them at all (`errors_on_writes`: their retries wait in real time).
                let spared =
                    !st.faults.errors_on_writes && !matches!(kind, Kind::List | Kind::Watch);
                let down = now < st.down_until && !this.clean && !spared;
                let nth = {
                    let n = st.seen.entry(text.clone()).or_insert(0);
                    *n += 1;
                    *n - 1
                };
                if this.clean {
                    (crate::faults::Plan::default(), false)
                } else {
                    (plan(&st.faults, st.seed, &text, nth, kind), down)
                }
            };
            if down {
                this.record(&text, 0, "refused (restarting)");
                return Err(Failure::ConnectionRefused(format!(
                    "connect to fake cluster: connection refused (restarting): {text}"
                )));
            }
            if let Some(d) = plan.delay {
                this.inner.clock.sleep(d).await;
            }
            let injected = match plan.fail {
                Some(Injected::TooMany(secs)) => Some(
                    ApiError::new(
                        429,
                        "TooManyRequests",
                        "Too many requests, please try again later.".into(),
                    )
                    .retry_after(secs),
                ),
                Some(Injected::Server) => Some(ApiError::new(
                    500,
                    "InternalError",
                    "Internal error occurred: injected by FakeCluster".into(),
                )),
                Some(Injected::Gone) if kind == Kind::List => Some(ApiError::new(
                    410,
                    "Expired",
                    "The resourceVersion for the provided list is too old.".into(),
                )),
                Some(Injected::Conflict) => {
                    let name = r.as_ref().and_then(|r| r.name.clone()).unwrap_or_default();
                    let plural = r.as_ref().map(|r| r.plural.clone()).unwrap_or_default();
                    Some(ApiError::new(
                        409,
                        "Conflict",
                        format!(
                            "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                        ),
                    ))
                }
                _ => None,
            };
            if let Some(e) = injected {
                this.record(&text, e.code, "injected");
                return Ok(e.response());
            }
            let Some(r) = r else {
                let e = ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource".into(),
                )
                .empty_details();
                this.record(&text, 404, "");
                return Ok(e.response());
            };
            let ctx = Req {
                route: r,
                q,
                body,
                content_type,
                metadata_only: accept.contains("as=PartialObjectMetadata"),
            };
            if kind == Kind::Watch {
                let gone = plan.fail == Some(Injected::Gone);
                let note = match plan.watch {
                    _ if gone => "410 event".to_string(),
                    WatchFault::Hang => "hung".to_string(),
                    WatchFault::Drop {
                        after_events,
                        after_secs,
                        reset,
                    } => format!(
                        "dropped after {after_events} events or {after_secs} s{}",
                        if reset { ", reset" } else { "" }
                    ),
                    WatchFault::None => String::new(),
                };
                return match this.watch(&ctx, plan.watch, gone) {
                    Ok(resp) => {
                        this.record(&text, 200, &note);
                        Ok(resp)
                    }
                    Err(e) => {
                        this.record(&text, e.code, "");
                        Ok(e.response())
                    }
                };
            }
            let answer = {
                let mut st = this.lock();
                let a = handle(&mut st, &method, &ctx);
                st.collect_garbage();
                a
            };
            match answer {
                Ok((code, v)) => {
                    this.record(&text, code, "");
                    Ok(json_response(code, &v, &[]))
                }
                Err(e) => {
                    this.record(&text, e.code, "");
                    Ok(e.response())
                }
            }
        })
    }

    fn record(&self, request: &str, code: u16, note: &str) {
        let mut st = self.lock();
        if st.trace.len() < 1_000_000 {
            st.trace.push(TraceEntry {
                request: request.to_string(),
                code,
                note: note.to_string(),
            });
        }
    }

    fn watch(&self, req: &Req, fault: WatchFault, gone: bool) -> Result<HttpResponse, ApiError> {
        let mut st = self.lock();
        let info = resolve(&st, &req.route)?;
        let q = &req.q;
        let labels = parse_labels(param(q, "labelSelector"))?;
        let fields = FieldSelector::parse(param(q, "fieldSelector").unwrap_or(""), &info)?
            .with_shard(param(q, "shardSelector"), st.shard_selectors)?;
        let rv = param(q, "resourceVersion").filter(|s| !s.is_empty());
        let rvm = param(q, "resourceVersionMatch").filter(|s| !s.is_empty());
        let initial = param(q, "sendInitialEvents") == Some("true");
        let bookmarks = param(q, "allowWatchBookmarks") == Some("true");
        let timeout = match param(q, "timeoutSeconds").map(str::parse::<u64>) {
            Some(Ok(t)) if t > 0 => Duration::from_secs(t),
            Some(Err(_)) => return Err(ApiError::bad_request("invalid timeoutSeconds".into())),
            // The apiserver's default: a random time in [min-request-timeout, 2x) (30 min).
            _ => Duration::from_secs(
                1800 + crate::faults::fnv(&format!("{:?}", st.next_watcher)) % 1800,
            ),
        };
        if initial && rvm != Some("NotOlderThan") {
            return Err(ApiError::new(
                422,
                "Invalid",
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
            ));
        }
        let ns = if info.namespaced {
            req.route.namespace.clone()
        } else {
            None
        };
        let (tx, rx) = unbounded();
        let id = st.next_watcher;
        st.next_watcher += 1;
        let w = Watcher {
            id,
            store: info.store(),
            namespace: ns.clone(),
            labels,
            fields,
            metadata_only: req.metadata_only,
            tx,
        };
        let mut pending = VecDeque::new();
        let shape = |v: &Value| {
            if req.metadata_only {
                metadata_only(v)
            } else {
                v.clone()
            }
        };
        let bookmark = |rv: u64, end: bool| {
            let mut m = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
            if end {
                m["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line(
                "BOOKMARK",
                &json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": m}),
            )
        };
        let in_ns = |k: &ObjKey| ns.as_deref().is_none_or(|n| n == k.0);
        let sel = |v: &Value| w.labels.matches(&JsonLabels(v)) && w.fields.matches(v);
        let too_old = |rv: u64, floor: u64| {
            let e = ApiError::new(
                410,
                "Expired",
                format!("too old resource version: {rv} ({})", floor + 1),
            );
            event_line("ERROR", &e.status_body())
        };
        let mut register = true;
        if gone {
            pending.push_back(too_old(rv.and_then(|r| r.parse().ok()).unwrap_or(0), st.rv));
            register = false;
        } else if initial || rv.is_none() || rv == Some("0") {
            if let Some(objs) = st.objects.get(&info.store()) {
                for (k, v) in objs {
                    if in_ns(k) && sel(v) {
                        pending.push_back(event_line("ADDED", &shape(v)));
                    }
                }
            }
            if initial {
                pending.push_back(bookmark(st.rv, true));
            }
        } else {
            let from = parse_rv(rv.unwrap_or_default())?;
            if from < st.floor {
                pending.push_back(too_old(from, st.floor));
                register = false;
            } else {
                for c in st
                    .log
                    .iter()
                    .filter(|c| c.rv > from && c.store == w.store && in_ns(&c.key))
                {
                    let gone_obj = c.gone.as_deref();
                    if let Some((k, v)) =
                        watch_event(&w, c.old.as_deref(), c.new.as_deref(), gone_obj)
                    {
                        pending.push_back(event_line(k, &shape(&v)));
                    }
                }
            }
        }
        if register {
            st.watchers.push(w);
        }
        drop(st);
        let clock = self.inner.clock.clone();
        let (drop_timer, drop_after, reset) = match fault {
            WatchFault::Drop {
                after_events,
                after_secs,
                reset,
            } => (
                Some(clock.sleep(Duration::from_secs(after_secs.into()))),
                Some(after_events),
                reset,
            ),
            _ => (None, None, false),
        };
        let stream = WatchStream {
            cluster: self.clone(),
            id,
            registered: register,
            rx,
            pending,
            timeout: clock.sleep(timeout),
            bookmark: bookmarks.then(|| clock.sleep(BOOKMARK_EVERY)),
            bookmark_line: (info.kind.clone(), info.api_version()),
            clock,
            hang: fault == WatchFault::Hang,
            drop_timer,
            drop_after,
            reset,
            delivered: 0,
            done: !register,
            finished: false,
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(HttpResponse {
            status: http::StatusCode::OK,
            headers,
            body: Box::pin(stream),
        })
    }
}

/// How often an open watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

struct Req {
    route: Route,
    q: Vec<(String, String)>,
    body: Bytes,
    content_type: String,
    metadata_only: bool,
}

fn resolve(st: &State, r: &Route) -> Result<Arc<ResInfo>, ApiError> {
    let info = st.info(&r.group, &r.version, &r.plural).ok_or_else(|| {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        )
        .empty_details()
    })?;
    if !info.namespaced && r.namespace.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        )
        .empty_details());
    }
    Ok(info)
}

fn parse_labels(s: Option<&str>) -> Result<Selector, ApiError> {
    match s.filter(|s| !s.is_empty()) {
        None => Ok(Selector::everything()),
        Some(s) => Selector::parse(s)
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}"))),
    }
}

fn handle(st: &mut State, method: &http::Method, req: &Req) -> Result<(u16, Value), ApiError> {
    let info = resolve(st, &req.route)?;
    let r = &req.route;
    let dry_run = param(&req.q, "dryRun") == Some("All");
    let ns = if info.namespaced {
        r.namespace.as_deref()
    } else {
        None
    };
    let sub = r.sub.as_deref();
    if let Some(s) = sub {
        let served =
            (s == "status" && info.status) || (s == "finalize" && info.plural == "namespaces");
        if !served {
            return Err(ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource".into(),
            )
            .empty_details());
        }
    }
    match (method.as_str(), r.name.as_deref()) {
        ("GET", None) => list(st, &info, ns, req).map(|v| (200, v)),
        ("GET", Some(name)) => st
            .get(&info.store(), &key(&info, ns, name))
            .map(|v| (200, shaped(&v, req.metadata_only)))
            .ok_or_else(|| ApiError::not_found(&info, name)),
        ("POST", None) => {
            if info.namespaced && ns.is_none() {
                return Err(ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource".into(),
                )
                .empty_details());
            }
            let body = body_json(&req.body, false)?;
            create(st, &info, ns.unwrap_or(""), body, dry_run).map(|v| (201, (*v).clone()))
        }
        ("PUT", Some(name)) => {
            let body = body_json(&req.body, false)?;
            if info.custom && meta_str(&body, "resourceVersion").is_none_or(str::is_empty) {
                // Custom resources allow no unconditional update.
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    format!(
                        "{} \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                        info.kind
                    ),
                )
                .details(&info, name));
            }
            let k = key(&info, ns, name);
            let old = st
                .get(&info.store(), &k)
                .ok_or_else(|| ApiError::not_found(&info, name))?;
            Update {
                info: &info,
                key: k,
                old,
                status: sub == Some("status"),
                dry_run,
            }
            .run(st, body)
            .map(|(c, v)| (c, (*v).clone()))
        }
        ("PATCH", Some(name)) => patch_object(st, &info, ns, name, req, dry_run),
        ("DELETE", Some(name)) => {
            let k = key(&info, ns, name);
            let cur = st
                .get(&info.store(), &k)
                .ok_or_else(|| ApiError::not_found(&info, name))?;
            let opts: Value = if req.body.is_empty() {
                json!({})
            } else {
                body_json(&req.body, false)?
            };
            if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str) {
                let have = meta_str(&cur, "uid").unwrap_or_default();
                if uid != have {
                    return Err(ApiError::new(409, "Conflict", format!(
                        "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {have}", info.qualified())).kind_details(&info, name));
                }
            }
            if let Some(rv) = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
            {
                let have = meta_str(&cur, "resourceVersion").unwrap_or_default();
                if rv != have {
                    return Err(ApiError::new(409, "Conflict", format!(
                        "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {have}", info.qualified())).kind_details(&info, name));
                }
            }
            let policy = opts.get("propagationPolicy").and_then(Value::as_str);
            if dry_run
                || opts
                    .get("dryRun")
                    .is_some_and(|d| d.as_array().is_some_and(|a| !a.is_empty()))
            {
                return Ok((200, (*cur).clone()));
            }
            match st.delete_object(&info, &k, policy) {
                Some(v) => Ok((200, (*v).clone())),
                None => Ok((
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Success",
                    "details": details_of(&info, name, meta_str(&cur, "uid"))}),
                )),
            }
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )),
    }
}

fn details_of(info: &ResInfo, name: &str, uid: Option<&str>) -> Value {
    let mut d = json!({"name": name, "kind": info.plural});
    if !info.group.is_empty() {
        d["group"] = json!(info.group);
    }
    if let Some(u) = uid {
        d["uid"] = json!(u);
    }
    d
}

impl ApiError {
    fn details(mut self, info: &ResInfo, name: &str) -> ApiError {
        self.details = Some(details_of(info, name, None));
        self
    }

    /// Details naming the kind (not the resource), as validation errors and delete
    /// preconditions carry them.
    fn kind_details(mut self, info: &ResInfo, name: &str) -> ApiError {
        let mut d = json!({"kind": info.kind});
        if !name.is_empty() {
            d["name"] = json!(name);
        }
        if !info.group.is_empty() {
            d["group"] = json!(info.group);
        }
        self.details = Some(d);
        self
    }

    fn empty_details(mut self) -> ApiError {
        self.details = Some(json!({}));
        self
    }

    fn list_options(mut self) -> ApiError {
        self.details = Some(json!({"group": "meta.k8s.io", "kind": "ListOptions"}));
        self
    }
}

fn shaped(v: &Value, metadata_only_: bool) -> Value {
    if metadata_only_ {
        metadata_only(v)
    } else {
        v.clone()
    }
}

fn list(st: &State, info: &Arc<ResInfo>, ns: Option<&str>, req: &Req) -> Result<Value, ApiError> {
    let q = &req.q;
    let labels = parse_labels(param(q, "labelSelector"))?;
    let fields = FieldSelector::parse(param(q, "fieldSelector").unwrap_or(""), info)?
        .with_shard(param(q, "shardSelector"), st.shard_selectors)?;
    let rv = param(q, "resourceVersion").filter(|s| !s.is_empty());
    let rvm = param(q, "resourceVersionMatch").filter(|s| !s.is_empty());
    let limit = match param(q, "limit").map(str::parse::<i64>) {
        Some(Ok(l)) if l > 0 => Some(l as usize),
        Some(Ok(_)) | None => None,
        Some(Err(_)) => return Err(ApiError::bad_request("invalid limit".into())),
    };
    let cont = param(q, "continue").filter(|s| !s.is_empty());
    if rvm.is_some() && rv.is_none() {
        return Err(ApiError::new(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into()).list_options());
    }
    if let Some(m) = rvm {
        if m != "Exact" && m != "NotOlderThan" {
            return Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                ),
            )
            .list_options());
        }
    }
    if cont.is_some() && rv.is_some_and(|r| r != "0") {
        return Err(ApiError::new(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: resourceVersion: Forbidden: specifying resource version is not allowed when using continue".into()).list_options());
    }
    if rvm == Some("Exact") && rv == Some("0") {
        return Err(ApiError::new(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".into()).list_options());
    }
    let too_large = |n: u64| {
        let mut e = ApiError::new(
            504,
            "Timeout",
            format!(
                "Timeout: Too large resource version: {n}, current: {}",
                st.rv
            ),
        );
        e.details = Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        );
        e
    };
    let expired = || {
        ApiError::new(
            410,
            "Expired",
            "The resourceVersion for the provided list is too old.".into(),
        )
    };
    let (snap, after, paged) = if let Some(c) = cont {
        let (snap, after) = decode_continue(c)
            .ok_or_else(|| ApiError::bad_request("continue key is not valid".into()))?;
        if snap < st.floor {
            return Err(ApiError::new(410, "Expired", "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into()));
        }
        (snap, Some(after), true)
    } else {
        match (rv, rvm) {
            (None, _) => (st.rv, None, true),
            // From the watch cache: never paged.
            (Some("0"), _) => (st.rv, None, false),
            (Some(n), Some("Exact")) => {
                let n = parse_rv(n)?;
                if n < st.floor {
                    return Err(expired());
                }
                if n > st.rv {
                    return Err(too_large(n));
                }
                (n, None, true)
            }
            (Some(n), None) if limit.is_some() => {
                // A paged list at N without a match rule is an exact one.
                let n = parse_rv(n)?;
                if n < st.floor {
                    return Err(expired());
                }
                if n > st.rv {
                    return Err(too_large(n));
                }
                (n, None, true)
            }
            (Some(n), _) => {
                let n = parse_rv(n)?;
                if n > st.rv {
                    return Err(too_large(n));
                }
                (st.rv, None, rvm.is_some())
            }
        }
    };
    let objs = st.state_at(&info.store(), snap);
    let mut items = Vec::new();
    let mut last = None;
    let mut remaining = 0u64;
    let mut iter = objs.iter().filter(|(k, v)| {
        ns.is_none_or(|n| n == k.0)
            && after.as_ref().is_none_or(|a| *k > a)
            && labels.matches(&JsonLabels(v))
            && fields.matches(v)
    });
    for (k, v) in iter.by_ref() {
        if paged && limit.is_some_and(|l| items.len() >= l) {
            remaining = 1;
            break;
        }
        let mut item = shaped(v, req.metadata_only);
        if !info.custom && !req.metadata_only {
            strip_for(&mut item, &["apiVersion", "kind"]);
        }
        items.push(item);
        last = Some(k.clone());
    }
    remaining += iter.count() as u64;
    let mut metadata = json!({"resourceVersion": snap.to_string()});
    if remaining > 0 {
        if let Some(l) = &last {
            metadata["continue"] = json!(encode_continue(snap, l));
            if labels.is_empty() && fields.is_empty() {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
    }
    let (kind, av) = if req.metadata_only {
        (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
        )
    } else {
        (format!("{}List", info.kind), info.api_version())
    };
    Ok(json!({"kind": kind, "apiVersion": av, "metadata": metadata, "items": items}))
}

fn create(
    st: &mut State,
    info: &Arc<ResInfo>,
    ns: &str,
    mut body: Value,
    dry_run: bool,
) -> Result<Arc<Value>, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the body is not an object".into()));
    }
    if let Some(k) = body.get("kind").and_then(Value::as_str) {
        if k != info.kind {
            return Err(ApiError::bad_request(format!(
                "the kind of the object ({k}) does not match the resource ({})",
                info.kind
            )));
        }
    }
    if info.namespaced {
        if let Some(n) = meta_str(&body, "namespace").filter(|n| !n.is_empty()) {
            if n != ns {
                return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request".into()));
            }
        }
        let nsinfo = st
            .info("", "v1", "namespaces")
            .ok_or_else(|| ApiError::bad_request("no namespaces".into()))?;
        match st.get(&nsinfo.store(), &(String::new(), ns.to_string())) {
            None => {
                return Err(ApiError::new(
                    404,
                    "NotFound",
                    format!("namespaces \"{ns}\" not found"),
                )
                .details(&nsinfo, ns));
            }
            Some(n) if deleting(&n) => {
                return Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!(
                        "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                        info.qualified(),
                        meta_str(&body, "name").unwrap_or_default()
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    let name = match meta_str(&body, "name").filter(|n| !n.is_empty()) {
        Some(n) => n.to_string(),
        None => match meta_str(&body, "generateName").filter(|n| !n.is_empty()) {
            Some(g) => {
                let g = g.to_string();
                let mut n = st.generate_name(&g);
                while st.get(&info.store(), &key(info, Some(ns), &n)).is_some() {
                    n = st.generate_name(&g);
                }
                n
            }
            None => {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    format!(
                        "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                        info.kind
                    ),
                )
                .kind_details(info, ""));
            }
        },
    };
    let k = key(info, Some(ns), &name);
    if st.get(&info.store(), &k).is_some() {
        return Err(ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", info.qualified()),
        )
        .details(info, &name));
    }
    if info.status {
        strip_for(&mut body, &["status"]);
        if info.group.is_empty() && info.plural == "namespaces" {
            body["status"] = json!({"phase": "Active"});
            if body.pointer("/spec/finalizers").is_none() {
                body["spec"] = json!({"finalizers": ["kubernetes"]});
            }
        }
    }
    meta_mut(&mut body).remove("resourceVersion");
    if dry_run {
        // Filled in as a create would, stored nowhere (no resourceVersion).
        return Ok(Arc::new(st.fill_new(info, body, &k.0, &name)));
    }
    let stored = st.stamp_new(info, body, &k.0, &name);
    if info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions" {
        register_crd(st, &stored);
    }
    Ok(stored)
}

/// A CRD's served versions become resources.
fn register_crd(st: &mut State, crd: &Value) {
    let spec = crd.get("spec");
    let s = |p: &str| {
        spec.and_then(|s| s.pointer(p))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (group, plural, kind) = (s("/group"), s("/names/plural"), s("/names/kind"));
    let namespaced = s("/scope") != "Cluster";
    for v in spec
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let Some(name) = v.get("name").and_then(Value::as_str) else {
            continue;
        };
        let status = v.pointer("/subresources/status").is_some();
        let r = informer_http::Resource::new(
            group.clone(),
            name.to_string(),
            kind.clone(),
            plural.clone(),
            namespaced,
        );
        st.register(&r, status, true);
    }
}

fn patch_object(
    st: &mut State,
    info: &Arc<ResInfo>,
    ns: Option<&str>,
    name: &str,
    req: &Req,
    dry_run: bool,
) -> Result<(u16, Value), ApiError> {
    let k = key(info, ns, name);
    let status = req.route.sub.as_deref() == Some("status");
    let ct = req.content_type.split(';').next().unwrap_or("").trim();
    let current = st.get(&info.store(), &k);
    match ct {
        "application/apply-patch+yaml" => {
            let applied = body_json(&req.body, true)?;
            let manager = param(&req.q, "fieldManager").filter(|m| !m.is_empty()).ok_or_else(|| {
                ApiError::new(422, "Invalid", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into())
            })?;
            let force = param(&req.q, "force") == Some("true");
            apply(
                st, info, &k, current, applied, manager, force, status, dry_run,
            )
        }
        "application/merge-patch+json"
        | "application/json-patch+json"
        | "application/strategic-merge-patch+json" => {
            if ct == "application/strategic-merge-patch+json" && info.custom {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".to_string(),
                ));
            }
            let old = current.ok_or_else(|| ApiError::not_found(info, name))?;
            let p = body_json(&req.body, false)?;
            let mut new = (*old).clone();
            if ct == "application/json-patch+json" {
                patch::json_patch(&mut new, &p).map_err(|e| match e {
                    patch::JsonPatchError::Malformed(m) => ApiError::bad_request(m),
                    patch::JsonPatchError::Failed(m) => {
                        ApiError::new(422, "Invalid", m).empty_details()
                    }
                })?;
            } else {
                // Strategic merge on built-ins is taken as a merge patch (lists replaced).
                patch::merge(&mut new, &p);
            }
            Update {
                info,
                key: k,
                old,
                status,
                dry_run,
            }
            .run(st, new)
            .map(|(c, v)| (c, (*v).clone()))
        }
        other => Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (not {other})"
            ),
        )),
    }
}

#[allow(clippy::too_many_arguments)]
fn apply(
    st: &mut State,
    info: &Arc<ResInfo>,
    k: &ObjKey,
    current: Option<Arc<Value>>,
    applied: Value,
    manager: &str,
    force: bool,
    status: bool,
    dry_run: bool,
) -> Result<(u16, Value), ApiError> {
    if !applied.is_object() {
        return Err(ApiError::bad_request(
            "the applied configuration is not an object".into(),
        ));
    }
    let mut paths = patch::leaf_paths(&applied);
    if info.status {
        paths.retain(|p| (p.first().map(String::as_str) == Some("status")) == status);
    }
    let entry = |st: &State| {
        json!({"manager": manager, "operation": "Apply", "apiVersion": info.api_version(),
        "time": st.timestamp(), "fieldsType": "FieldsV1", "fieldsV1": patch::fields_v1(&paths)})
    };
    let Some(old) = current else {
        if status {
            return Err(ApiError::not_found(info, &k.1));
        }
        let mut obj = applied.clone();
        meta_mut(&mut obj).insert("managedFields".into(), json!([entry(st)]));
        let ns = if info.namespaced {
            Some(k.0.as_str())
        } else {
            None
        };
        if let Some(n) = meta_str(&applied, "name") {
            if n != k.1 {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({})",
                    k.1
                )));
            }
        }
        meta_mut(&mut obj).insert("name".into(), json!(k.1));
        return create(st, info, ns.unwrap_or(""), obj, dry_run).map(|v| (201, (*v).clone()));
    };
    let mut managed: Vec<Value> = meta(&old)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let overlaps = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut conflicts = Vec::new();
    for e in &managed {
        let who = e.get("manager").and_then(Value::as_str).unwrap_or("");
        if who == manager {
            continue;
        }
        let owned = e
            .get("fieldsV1")
            .map(patch::paths_of_fields)
            .unwrap_or_default();
        for p in &paths {
            for o in &owned {
                if overlaps(p, o) {
                    let short = if p.len() <= o.len() { p } else { o };
                    if patch::at(&old, short) != patch::at(&applied, short) {
                        conflicts.push((who.to_string(), p.clone(), o.clone()));
                    }
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let list: Vec<String> = conflicts
            .iter()
            .map(|(w, p, _)| format!("conflict with \"{w}\": .{}", p.join(".")))
            .collect();
        let mut e = ApiError::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict{}: {}",
                list.len(),
                if list.len() == 1 { "" } else { "s" },
                list.join(", ")
            ),
        );
        e.details = Some(
            json!({"causes": conflicts.iter().map(|(w, p, _)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{w}\""), "field": format!(".{}", p.join("."))})).collect::<Vec<_>>()}),
        );
        return Err(e);
    }
    let mut previous = Vec::new();
    let mut others = Vec::new();
    for e in &mut managed {
        let who = e
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut owned = e
            .get("fieldsV1")
            .map(patch::paths_of_fields)
            .unwrap_or_default();
        if who == manager && e.get("operation").and_then(Value::as_str) == Some("Apply") {
            previous = owned;
            continue;
        }
        // Forced: the conflicting fields move to this manager; fields applied with the same
        // value stay shared.
        owned.retain(|o| !conflicts.iter().any(|(w, _, c)| *w == who && c == o));
        e["fieldsV1"] = patch::fields_v1(&owned);
        others.extend(owned);
    }
    managed.retain(|e| {
        let mine = e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply");
        !mine
            && e.get("fieldsV1")
                .is_some_and(|f| f.as_object().is_some_and(|o| !o.is_empty()))
    });
    let mut new = (*old).clone();
    let mut applied_part = applied.clone();
    if info.status {
        if status {
            applied_part = json!({"status": applied.get("status").cloned().unwrap_or(Value::Null)});
        } else {
            strip_for(&mut applied_part, &["status"]);
        }
    }
    if let Some(m) = applied_part
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
    {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    patch::apply_merge(&mut new, &applied_part);
    for p in &previous {
        if !paths.iter().any(|q| overlaps(p, q)) && !others.iter().any(|o| overlaps(p, o)) {
            patch::remove_path(&mut new, p);
        }
    }
    let unchanged = {
        let mut a = new.clone();
        let mut b = (*old).clone();
        meta_mut(&mut a).remove("managedFields");
        meta_mut(&mut b).remove("managedFields");
        a == b && previous == paths
    };
    if unchanged {
        return Ok((200, (*old).clone()));
    }
    managed.push(entry(st));
    meta_mut(&mut new).insert("managedFields".into(), Value::Array(managed));
    Update {
        info,
        key: k.clone(),
        old,
        status: false,
        dry_run,
    }
    .run(st, new)
    .map(|(c, v)| (c, (*v).clone()))
}

/// A watch's body.
struct WatchStream {
    cluster: FakeCluster,
    id: u64,
    registered: bool,
    rx: UnboundedReceiver<Msg>,
    pending: VecDeque<Bytes>,
    timeout: BoxFuture<'static, ()>,
    bookmark: Option<BoxFuture<'static, ()>>,
    bookmark_line: (String, String),
    clock: Arc<dyn crate::Clock>,
    hang: bool,
    drop_timer: Option<BoxFuture<'static, ()>>,
    drop_after: Option<u32>,
    reset: bool,
    delivered: u32,
    /// No more events: deliver what is pending, then end.
    done: bool,
    finished: bool,
}

impl Stream for WatchStream {
    type Item = Result<Bytes, Failure>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.finished {
                return Poll::Ready(None);
            }
            if this.hang {
                // Stalled: nothing until the timeout; what arrives meanwhile is not sent.
                while let Poll::Ready(Some(_)) = this.rx.poll_next_unpin(cx) {}
                if this.timeout.poll_unpin(cx).is_ready() {
                    this.finished = true;
                    return Poll::Ready(None);
                }
                return Poll::Pending;
            }
            if let Some(line) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(line)));
            }
            if this.done {
                this.finished = true;
                if this.reset {
                    return Poll::Ready(Some(Err(Failure::ConnectionClosed(
                        "fake cluster: connection reset".into(),
                    ))));
                }
                return Poll::Ready(None);
            }
            if this.drop_after.is_some_and(|n| this.delivered >= n) {
                this.done = true;
                continue;
            }
            match this.rx.poll_next_unpin(cx) {
                Poll::Ready(Some(Msg::Line(l))) => {
                    if !l.starts_with(b"{\"type\":\"BOOKMARK\"") {
                        this.delivered += 1;
                    }
                    this.pending.push_back(l);
                    continue;
                }
                Poll::Ready(Some(Msg::Close { reset })) => {
                    this.reset = reset;
                    this.done = true;
                    continue;
                }
                Poll::Ready(None) => {
                    this.done = true;
                    continue;
                }
                Poll::Pending => {}
            }
            if this.timeout.poll_unpin(cx).is_ready() {
                this.done = true;
                this.reset = false;
                continue;
            }
            if let Some(t) = &mut this.drop_timer {
                if t.poll_unpin(cx).is_ready() {
                    this.drop_timer = None;
                    this.done = true;
                    continue;
                }
            }
            if let Some(b) = &mut this.bookmark {
                if b.poll_unpin(cx).is_ready() {
                    // Under the lock every change up to st.rv has reached the channel: take it
                    // first, so the bookmark follows every event at or below its version.
                    let st = this.cluster.lock();
                    while let Ok(m) = this.rx.try_recv() {
                        match m {
                            Msg::Line(l) => this.pending.push_back(l),
                            Msg::Close { reset } => {
                                this.reset = reset;
                                this.done = true;
                            }
                        }
                    }
                    let (kind, av) = &this.bookmark_line;
                    this.pending.push_back(event_line(
                        "BOOKMARK",
                        &json!({"kind": kind, "apiVersion": av,
                            "metadata": {"resourceVersion": st.rv.to_string(), "creationTimestamp": null}}),
                    ));
                    drop(st);
                    this.bookmark = Some(this.clock.sleep(BOOKMARK_EVERY));
                    continue;
                }
            }
            return Poll::Pending;
        }
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        if self.registered {
            let id = self.id;
            self.cluster.lock().watchers.retain(|w| w.id != id);
        }
    }
}
