//! Writes through an [`Api`]: get, create, replace, delete, merge patch, JSON patch,
//! server-side apply, and the status subresource, for typed objects (`K8s<T>`, any serde type)
//! and [`DynamicObject`](informer_core::object::DynamicObject)s alike.
//!
//! Errors come back typed ([`WriteError`]): 404 [`NotFound`](WriteError::NotFound), 409
//! [`Conflict`](WriteError::Conflict) with the server's reason (`AlreadyExists`, `Conflict`),
//! 422 [`Invalid`](WriteError::Invalid) with the causes.
//!
//! # Retries
//!
//! Only where a retry cannot do harm: a 429 (the server turned the request away before doing
//! anything) and a refused connection (nothing was sent) are retried for every verb; a 5xx or a
//! broken connection only for idempotent requests — get, replace, delete and apply —, never
//! for create or a merge/JSON patch, which the server may have applied before failing (a JSON
//! patch applied twice can differ from once). At most [`MAX_ATTEMPTS`] attempts, waiting
//! 200 ms doubling (at most 5 s), or the server's `Retry-After` when longer (at most 30 s).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use informer_core::protocol::{Failure, Status};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Api;
use crate::backend::Backend;
use crate::client::MAX_LIST_BODY;
use crate::request::{collection_path, object_path, percent_encode_into};
use crate::status::{StatusCause, StatusObject};

/// Attempts made for a request whose failure may be retried.
pub const MAX_ATTEMPTS: u32 = 4;

/// Largest error body read.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Why a write (or a get) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// 404: the object (or its namespace) does not exist.
    NotFound(Status),
    /// 409: `reason` is `AlreadyExists` (create) or `Conflict` (a stale resourceVersion, a
    /// failed delete precondition, an apply conflict with another field manager).
    Conflict {
        /// The server's reason.
        reason: String,
        /// The whole status.
        status: Status,
    },
    /// 422: the object is invalid; `causes` name the fields.
    Invalid {
        /// The server's causes (`field`, `message`, `reason`).
        causes: Vec<StatusCause>,
        /// The whole status.
        status: Status,
    },
    /// 401.
    Unauthorized(Status),
    /// 403.
    Forbidden(Status),
    /// 429, after the retries.
    TooManyRequests(Status),
    /// 5xx (after the retries, where retried).
    Server(Status),
    /// Any other error answer (400, 405, 415, ...).
    Api(Status),
    /// The request could not be made or its answer not read.
    Transport(Failure),
    /// The client's [`WriteHook`](crate::client::WriteHook) refused the write before it was
    /// sent (a controller that is not the leader: its writes are fenced).
    Refused(String),
    /// The object or patch could not be encoded.
    Encode(String),
    /// The answer could not be decoded as the object type.
    Decode(String),
}

impl WriteError {
    /// The server's status, for errors that have one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            WriteError::NotFound(s)
            | WriteError::Conflict { status: s, .. }
            | WriteError::Invalid { status: s, .. }
            | WriteError::Unauthorized(s)
            | WriteError::Forbidden(s)
            | WriteError::TooManyRequests(s)
            | WriteError::Server(s)
            | WriteError::Api(s) => Some(s),
            WriteError::Transport(_)
            | WriteError::Refused(_)
            | WriteError::Encode(_)
            | WriteError::Decode(_) => None,
        }
    }

    /// True for a 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, WriteError::NotFound(_))
    }

    /// True for a 409 (`AlreadyExists` or `Conflict`).
    pub fn is_conflict(&self) -> bool {
        matches!(self, WriteError::Conflict { .. })
    }

    /// The error for an HTTP error answer.
    pub fn from_response(code: u16, retry_after: Option<&str>, body: &[u8]) -> WriteError {
        let parsed = serde_json::from_slice::<StatusObject>(body)
            .ok()
            .filter(|s| s.kind.as_deref() == Some("Status") || s.message.is_some());
        let header = retry_after.and_then(crate::status::parse_retry_after);
        let obj = parsed.unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            StatusObject {
                message: Some(if text.is_empty() {
                    http::StatusCode::from_u16(code)
                        .ok()
                        .and_then(|c| c.canonical_reason())
                        .unwrap_or("error")
                        .to_string()
                } else {
                    text.chars().take(1024).collect()
                }),
                ..StatusObject::default()
            }
        });
        let status = obj.to_status(code, header);
        match code {
            404 => WriteError::NotFound(status),
            409 => WriteError::Conflict {
                reason: status.reason.clone(),
                status,
            },
            422 => WriteError::Invalid {
                causes: obj.details.map(|d| d.causes).unwrap_or_default(),
                status,
            },
            401 => WriteError::Unauthorized(status),
            403 => WriteError::Forbidden(status),
            429 => WriteError::TooManyRequests(status),
            500..=599 => WriteError::Server(status),
            _ => WriteError::Api(status),
        }
    }
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::NotFound(s) => write!(f, "not found: {}", s.message),
            WriteError::Conflict { reason, status } => {
                write!(f, "conflict ({reason}): {}", status.message)
            }
            WriteError::Invalid { status, .. } => write!(f, "invalid: {}", status.message),
            WriteError::Unauthorized(s) => write!(f, "unauthorized: {}", s.message),
            WriteError::Forbidden(s) => write!(f, "forbidden: {}", s.message),
            WriteError::TooManyRequests(s) => write!(f, "too many requests: {}", s.message),
            WriteError::Server(s) => write!(f, "server error {}: {}", s.code, s.message),
            WriteError::Api(s) => write!(f, "error {}: {}", s.code, s.message),
            WriteError::Transport(e) => write!(f, "transport: {e}"),
            WriteError::Refused(e) => write!(f, "write refused before it was sent: {e}"),
            WriteError::Encode(e) => write!(f, "encode: {e}"),
            WriteError::Decode(e) => write!(f, "decode: {e}"),
        }
    }
}

impl std::error::Error for WriteError {}

/// An object that cannot be referred to (an owner reference to an object without a uid, say)
/// makes the write that would carry the reference unencodable.
impl From<informer_core::object::MetadataError> for WriteError {
    fn from(e: informer_core::object::MetadataError) -> Self {
        WriteError::Encode(e.to_string())
    }
}

/// A patch, with the content type that says how the server applies it.
#[derive(Clone, Debug)]
pub enum Patch<P> {
    /// A JSON merge patch (RFC 7386, `application/merge-patch+json`).
    Merge(P),
    /// A JSON patch (RFC 6902, `application/json-patch+json`): a list of operations.
    Json(P),
    /// Server-side apply (`application/apply-patch+yaml`; JSON is YAML): the fields this
    /// manager owns. Needs [`PatchParams::field_manager`].
    Apply(P),
}

impl<P> Patch<P> {
    fn content_type(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Json(_) => "application/json-patch+json",
            Patch::Apply(_) => "application/apply-patch+yaml",
        }
    }
    fn body(&self) -> &P {
        match self {
            Patch::Merge(p) | Patch::Json(p) | Patch::Apply(p) => p,
        }
    }
}

/// Options of a create or replace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostParams {
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `dryRun=All`: validate, change nothing.
    pub dry_run: bool,
}

/// Options of a patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchParams {
    /// `fieldManager` (required by apply).
    pub field_manager: Option<String>,
    /// `force=true` (apply only): take over fields other managers own.
    pub force: bool,
    /// `dryRun=All`.
    pub dry_run: bool,
}

impl PatchParams {
    /// Server-side apply as `manager`.
    pub fn apply(manager: &str) -> Self {
        PatchParams {
            field_manager: Some(manager.to_string()),
            ..PatchParams::default()
        }
    }

    /// Forces an apply through conflicts.
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }
}

/// What happens to the dependents of a deleted object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PropagationPolicy {
    /// Leave them.
    Orphan,
    /// Delete them in the background.
    Background,
    /// Delete them first; the owner stays (with a finalizer) until they are gone.
    Foreground,
}

/// Conditions a delete checks before deleting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Preconditions {
    /// The object must have this uid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The object must be at this resourceVersion.
    #[serde(rename = "resourceVersion", skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// Options of a delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteParams {
    /// `propagationPolicy`.
    pub propagation_policy: Option<PropagationPolicy>,
    /// `preconditions` (a mismatch is a 409 [`WriteError::Conflict`]).
    pub preconditions: Preconditions,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<u32>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

impl DeleteParams {
    fn body(&self) -> Vec<u8> {
        let mut m = serde_json::Map::new();
        m.insert("kind".into(), "DeleteOptions".into());
        m.insert("apiVersion".into(), "v1".into());
        if let Some(p) = self.propagation_policy {
            m.insert("propagationPolicy".into(), serde_json::json!(p));
        }
        if self.preconditions != Preconditions::default() {
            m.insert(
                "preconditions".into(),
                serde_json::json!(self.preconditions),
            );
        }
        if let Some(g) = self.grace_period_seconds {
            m.insert("gracePeriodSeconds".into(), g.into());
        }
        if self.dry_run {
            m.insert("dryRun".into(), serde_json::json!(["All"]));
        }
        serde_json::to_vec(&m).unwrap_or_default()
    }
}

/// Whether a failed attempt may be made again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idempotent {
    Yes,
    No,
}

fn query(path: &mut String, name: &str, value: &str) {
    path.push(if path.contains('?') { '&' } else { '?' });
    path.push_str(name);
    path.push('=');
    percent_encode_into(path, value);
}

fn post_query(path: &mut String, p: &PostParams) {
    if let Some(m) = &p.field_manager {
        query(path, "fieldManager", m);
    }
    if p.dry_run {
        query(path, "dryRun", "All");
    }
}

fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, WriteError> {
    serde_json::to_vec(v).map_err(|e| WriteError::Encode(e.to_string()))
}

fn decode<K: DeserializeOwned>(body: &[u8]) -> Result<K, WriteError> {
    serde_json::from_slice(body).map_err(|e| WriteError::Decode(e.to_string()))
}

/// The delay before retry number `attempt` (0-based).
fn retry_delay(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let backoff = Duration::from_millis(200)
        .saturating_mul(1u32 << attempt.min(8))
        .min(Duration::from_secs(5));
    match retry_after {
        Some(r) => r.min(Duration::from_secs(30)).max(backoff),
        None => backoff,
    }
}

impl<K, B> Api<K, B>
where
    K: Serialize + DeserializeOwned,
    B: Backend,
{
    fn namespace_for(&self, obj_namespace: Option<&str>) -> Option<String> {
        self.namespace()
            .map(str::to_string)
            .or_else(|| obj_namespace.map(str::to_string))
    }

    /// Sends one request, retrying where safe (see the [module documentation](self)), and
    /// reads the whole successful answer.
    async fn execute(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
        idempotent: Idempotent,
    ) -> Result<Vec<u8>, WriteError> {
        let hook = (method != http::Method::GET)
            .then(|| self.client().write_hook().cloned())
            .flatten();
        if let Some(h) = &hook {
            h.before_write(self.resource(), self.namespace())
                .map_err(WriteError::Refused)?;
        }
        let body = self
            .execute_unhooked(method, path, body, content_type, idempotent)
            .await?;
        if let Some(h) = &hook {
            #[derive(serde::Deserialize)]
            struct Meta<'a> {
                #[serde(borrow, rename = "resourceVersion")]
                resource_version: Option<&'a str>,
                #[serde(default)]
                labels: Option<std::collections::BTreeMap<String, String>>,
            }
            #[derive(serde::Deserialize)]
            struct Written<'a> {
                #[serde(borrow)]
                metadata: Option<Meta<'a>>,
            }
            if let Ok(Written {
                metadata:
                    Some(Meta {
                        resource_version: Some(rv),
                        labels,
                    }),
            }) = serde_json::from_slice::<Written<'_>>(&body)
            {
                let labels = labels.unwrap_or_default();
                h.after_write(self.resource(), self.namespace(), rv, &labels);
            }
        }
        Ok(body)
    }

    async fn execute_unhooked(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
        idempotent: Idempotent,
    ) -> Result<Vec<u8>, WriteError> {
        let mut attempt = 0;
        loop {
            let last = attempt + 1 >= MAX_ATTEMPTS;
            let sent = self
                .client()
                .send_with_content_type(method.clone(), path, body.clone(), content_type)
                .await;
            let (err, retry_after) = match sent {
                Ok(resp) if resp.status.is_success() => {
                    return resp
                        .collect(MAX_LIST_BODY)
                        .await
                        .map_err(WriteError::Transport);
                }
                Ok(resp) => {
                    let code = resp.status.as_u16();
                    let retry_after = resp
                        .headers
                        .get(http::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let body = resp.collect(MAX_ERROR_BODY).await.unwrap_or_default();
                    let err = WriteError::from_response(code, retry_after.as_deref(), &body);
                    let after = err.status().and_then(|s| s.retry_after);
                    (err, after)
                }
                Err(f) => (WriteError::Transport(f), None),
            };
            let retry = match &err {
                WriteError::TooManyRequests(_) => true,
                WriteError::Transport(Failure::ConnectionRefused(_)) => true,
                WriteError::Server(_) | WriteError::Transport(_) => idempotent == Idempotent::Yes,
                _ => false,
            };
            if !retry || last {
                return Err(err);
            }
            sleep(retry_delay(attempt, retry_after)).await;
            attempt += 1;
        }
    }

    /// Reads `name`.
    pub async fn get(&self, name: &str) -> Result<K, WriteError> {
        let path = object_path(self.resource(), self.namespace(), name);
        let body = self
            .execute(http::Method::GET, &path, None, "", Idempotent::Yes)
            .await?;
        decode(&body)
    }

    /// Reads `name`, `None` if it does not exist.
    pub async fn get_opt(&self, name: &str) -> Result<Option<K>, WriteError> {
        match self.get(name).await {
            Ok(k) => Ok(Some(k)),
            Err(WriteError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates `obj` (in the Api's namespace, else the object's own). Never retried on a 5xx.
    pub async fn create(&self, obj: &K, params: &PostParams) -> Result<K, WriteError>
    where
        K: informer_core::object::Object,
    {
        let ns = self.namespace_for(obj.namespace());
        let mut path = collection_path(self.resource(), ns.as_deref());
        post_query(&mut path, params);
        let body = self
            .execute(
                http::Method::POST,
                &path,
                Some(encode(obj)?),
                "application/json",
                Idempotent::No,
            )
            .await?;
        decode(&body)
    }

    /// Replaces `obj` (named by its metadata): with a resourceVersion set, fails with
    /// [`WriteError::Conflict`] if the object changed meanwhile.
    pub async fn replace(&self, obj: &K, params: &PostParams) -> Result<K, WriteError>
    where
        K: informer_core::object::Object,
    {
        self.put(obj, "", params).await
    }

    /// Replaces the status subresource of `obj` (the rest of `obj` is ignored).
    pub async fn replace_status(&self, obj: &K, params: &PostParams) -> Result<K, WriteError>
    where
        K: informer_core::object::Object,
    {
        self.put(obj, "/status", params).await
    }

    async fn put(&self, obj: &K, sub: &str, params: &PostParams) -> Result<K, WriteError>
    where
        K: informer_core::object::Object,
    {
        let ns = self.namespace_for(obj.namespace());
        let mut path = object_path(self.resource(), ns.as_deref(), obj.name());
        path.push_str(sub);
        post_query(&mut path, params);
        let body = self
            .execute(
                http::Method::PUT,
                &path,
                Some(encode(obj)?),
                "application/json",
                Idempotent::Yes,
            )
            .await?;
        decode(&body)
    }

    /// Patches `name`. Merge and JSON patches are never retried on a 5xx; apply is.
    pub async fn patch<P: Serialize>(
        &self,
        name: &str,
        patch: &Patch<P>,
        params: &PatchParams,
    ) -> Result<K, WriteError> {
        self.patch_sub(name, "", patch, params).await
    }

    /// Patches the status subresource of `name`.
    pub async fn patch_status<P: Serialize>(
        &self,
        name: &str,
        patch: &Patch<P>,
        params: &PatchParams,
    ) -> Result<K, WriteError> {
        self.patch_sub(name, "/status", patch, params).await
    }

    /// Sets the status of `name` through the status subresource: a merge patch
    /// `{"status": status}` (fields of the status left out of `status` are kept unless it
    /// serializes them as `null`).
    pub async fn set_status<S: Serialize>(&self, name: &str, status: &S) -> Result<K, WriteError> {
        #[derive(Serialize)]
        struct StatusPatch<'a, S> {
            status: &'a S,
        }
        let patch = Patch::Merge(StatusPatch { status });
        self.patch_sub(name, "/status", &patch, &PatchParams::default())
            .await
    }

    async fn patch_sub<P: Serialize>(
        &self,
        name: &str,
        sub: &str,
        patch: &Patch<P>,
        params: &PatchParams,
    ) -> Result<K, WriteError> {
        let mut path = object_path(self.resource(), self.namespace(), name);
        path.push_str(sub);
        if let Some(m) = &params.field_manager {
            query(&mut path, "fieldManager", m);
        }
        let apply = matches!(patch, Patch::Apply(_));
        if apply && params.force {
            query(&mut path, "force", "true");
        }
        if params.dry_run {
            query(&mut path, "dryRun", "All");
        }
        let body = self
            .execute(
                http::Method::PATCH,
                &path,
                Some(encode(patch.body())?),
                patch.content_type(),
                if apply {
                    Idempotent::Yes
                } else {
                    Idempotent::No
                },
            )
            .await?;
        decode(&body)
    }

    /// Deletes `name`. `Ok(Some(obj))` when the object still exists (finalizers, foreground
    /// deletion: it now has a deletionTimestamp), `Ok(None)` when it is gone.
    pub async fn delete(&self, name: &str, params: &DeleteParams) -> Result<Option<K>, WriteError> {
        let mut path = object_path(self.resource(), self.namespace(), name);
        if params.dry_run {
            query(&mut path, "dryRun", "All");
        }
        let body = self
            .execute(
                http::Method::DELETE,
                &path,
                Some(params.body()),
                "application/json",
                Idempotent::Yes,
            )
            .await?;
        let kind = serde_json::from_slice::<StatusObject>(&body)
            .ok()
            .and_then(|s| s.kind);
        if kind.as_deref() == Some("Status") {
            return Ok(None);
        }
        decode(&body).map(Some)
    }
}

/// A runtime-agnostic sleep for the rare retry: a thread waits and wakes the task.
fn sleep(d: Duration) -> impl Future<Output = ()> + Send {
    struct Shared {
        done: AtomicBool,
        waker: Mutex<Option<Waker>>,
    }
    struct Sleep {
        shared: Arc<Shared>,
        duration: Duration,
        started: bool,
    }
    impl Future for Sleep {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.shared.done.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            *self.shared.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
            if !self.started {
                self.started = true;
                let shared = self.shared.clone();
                let d = self.duration;
                let spawned = std::thread::Builder::new()
                    .name("informer-retry-wait".into())
                    .spawn(move || {
                        std::thread::sleep(d);
                        shared.done.store(true, Ordering::Release);
                        if let Some(w) = shared
                            .waker
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .take()
                        {
                            w.wake();
                        }
                    });
                if spawned.is_err() {
                    // No thread: retry at once rather than never.
                    return Poll::Ready(());
                }
            }
            if self.shared.done.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            Poll::Pending
        }
    }
    Sleep {
        shared: Arc::new(Shared {
            done: AtomicBool::new(false),
            waker: Mutex::new(None),
        }),
        duration: d,
        started: false,
    }
}

#[cfg(test)]
mod tests;
