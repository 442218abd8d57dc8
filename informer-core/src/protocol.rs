//! The list/watch vocabulary shared by the reflector (which decides what to ask) and a
//! transport (which asks kube-apiserver and decodes the answer).
//!
//! These are plain values: the core never performs a request. A transport such as
//! `informer-http` turns a [`ListRequest`] or [`WatchRequest`] into an HTTP call and feeds back
//! [`ListPage`]s, [`WatchEvent`]s and [`Failure`]s.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

/// Identifies one request handed out by the informer (its reflector); the transport tags
/// what it observes for that request with it, and results of a superseded request are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// How a list's or watch's `resourceVersion` is to be matched (`resourceVersionMatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourceVersionMatch {
    /// `NotOlderThan`: any state at least as new as the given resourceVersion.
    NotOlderThan,
    /// `Exact`: exactly the given resourceVersion (fails with 410 once compacted).
    Exact,
}

impl ResourceVersionMatch {
    /// The value of the `resourceVersionMatch` query parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceVersionMatch::NotOlderThan => "NotOlderThan",
            ResourceVersionMatch::Exact => "Exact",
        }
    }
}

/// Label, field and shard selectors restricting which objects are listed and watched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selectors {
    /// `labelSelector`, e.g. `app=web,tier!=db`.
    pub label: Option<String>,
    /// `fieldSelector`, e.g. `status.phase=Running`.
    pub field: Option<String>,
    /// `shardSelector` (Kubernetes 1.36+, KEP-5866), e.g.
    /// `shardRange(object.metadata.uid, '0x0', '0x8000000000000000')`: only the objects whose
    /// hash falls in the ranges. A server without the feature ignores it and sends every
    /// object, so a client using it must also filter what it gets (the sharded controller's
    /// server mode does: see `controller::shard`).
    pub shard: Option<String>,
}

/// One list call (one page).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListRequest {
    /// `resourceVersion`: `None` omits it (a consistent read, same as `""`), `Some("0")` serves
    /// from the watch cache.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `limit` (page size); `None` asks for everything at once.
    pub limit: Option<u32>,
    /// `continue`: the token from the previous page.
    pub continue_token: Option<String>,
    /// Selectors.
    pub selectors: Selectors,
}

/// One watch call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchRequest {
    /// `resourceVersion` to start after (empty: start "now", or the initial events of a
    /// streaming list).
    pub resource_version: String,
    /// `resourceVersionMatch` (only used for streaming lists: `NotOlderThan`).
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: bool,
    /// `sendInitialEvents` (streaming list, Kubernetes 1.27+).
    pub send_initial_events: bool,
    /// `timeoutSeconds`: the server ends the watch after this long.
    pub timeout_seconds: Option<u32>,
    /// Selectors.
    pub selectors: Selectors,
}

/// A request the reflector wants performed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Fetch one list page.
    List(ListRequest),
    /// Open a watch stream.
    Watch(WatchRequest),
}

/// One page of a list answer.
#[derive(Debug)]
pub struct ListPage<K> {
    /// The items of this page.
    pub items: Vec<Arc<K>>,
    /// `metadata.resourceVersion` of the list.
    pub resource_version: String,
    /// `metadata.continue`: present when more pages remain.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`, when the server sent it.
    pub remaining_item_count: Option<u64>,
}

/// One event of a watch stream.
#[derive(Debug)]
pub enum WatchEvent<K> {
    /// `ADDED`.
    Added(Arc<K>),
    /// `MODIFIED`.
    Modified(Arc<K>),
    /// `DELETED`: the object's last state.
    Deleted(Arc<K>),
    /// `BOOKMARK`: only a resourceVersion; `initial_events_end` is set when the bookmark carries
    /// the `k8s.io/initial-events-end: "true"` annotation (end of a streaming list's initial
    /// events).
    Bookmark {
        /// The bookmark's `metadata.resourceVersion`.
        resource_version: String,
        /// Whether this bookmark ends the initial events of a streaming list.
        initial_events_end: bool,
    },
    /// `ERROR`: the server's `Status`, mapped to a failure.
    Error(Failure),
}

/// The `Status` object kube-apiserver answers with on failure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// HTTP-like code (`410`, `429`, …); 0 when unknown.
    pub code: u16,
    /// `reason`, e.g. `Expired`, `Gone`, `TooManyRequests`, `Unauthorized`.
    pub reason: String,
    /// `message`, as the server wrote it.
    pub message: String,
    /// `details.retryAfterSeconds` or the `Retry-After` header.
    pub retry_after: Option<Duration>,
    /// `metadata.continue` of the Status, present on an "inconsistent continue" 410 after
    /// compaction. The reflector never uses it: it restarts the list instead.
    pub continue_token: Option<String>,
}

/// Why a list or watch failed, in the categories the reflector's rules distinguish.
///
/// Every failure is reported to the watch-error hook; [`Failure::kind`] names its variant for
/// metrics and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// 410 `Expired` or `Gone`: the requested resourceVersion (or continue token) was compacted
    /// away. Leads to a relist.
    Expired(Status),
    /// The requested resourceVersion is newer than the server has ("Too large resource
    /// version"). A relist with resourceVersion "" follows.
    TooLargeResourceVersion(Status),
    /// 429: back off (at least `retry_after` when given) and retry without relisting.
    TooManyRequests(Status),
    /// 401: the server did not accept the credentials. Carries the server's message.
    Unauthorized(Status),
    /// 403: the credentials are valid but not allowed to list or watch this resource (RBAC).
    /// Carries the server's message (`pods is forbidden: User "x" cannot list ...`).
    Forbidden(Status),
    /// The server refused the connection (it is down or restarting): back off and retry without
    /// relisting.
    ConnectionRefused(String),
    /// The connection was reset or closed while a body was being read (client-go's "probable
    /// EOF"). A transport ends a watch stream on it without reporting it (the reflector
    /// re-watches from where it was); a list that breaks this way fails with it.
    ConnectionClosed(String),
    /// A streaming list (`sendInitialEvents`) is not supported by the server.
    StreamingListUnsupported(Status),
    /// A streaming list's watch ended without the initial-events-end bookmark: the server
    /// ignores `sendInitialEvents` (Kubernetes before 1.27 does so silently). The reflector
    /// lists from then on.
    StreamingListIgnored,
    /// A watch ended sooner than `very_short_watch` (1 s) having delivered no object (bookmarks
    /// do not count), as client-go's "very short watch": backs off, then relists.
    VeryShortWatch,
    /// A watch still open well past its `timeoutSeconds` (a half-open connection): abandoned
    /// and re-opened from the last resourceVersion.
    HungWatch,
    /// A list call unanswered past its deadline.
    ListTimeout,
    /// A watch line or a list body could not be decoded: the watch ends (so the informer never
    /// moves past a change it did not apply) and, after a backoff, the informer relists.
    Decode(DecodeFailure),
    /// A redirect the client does not follow: to another origin (credentials are only ever sent
    /// to the configured server), or one too many. `status.code` is the 3xx answer and
    /// `status.reason` says which (`RedirectToOtherOrigin`, `TooManyRedirects`).
    Redirect(Status),
    /// An object the informer cannot key (an empty name, or a `/` in its name or namespace,
    /// which Kubernetes never issues): it is not stored, and the error says which.
    InvalidObject(String),
    /// Any other failure: another status code, a transport error. `status.code` is 0 when no
    /// HTTP status was involved.
    Other(Status),
}

/// What a transport could not decode (see [`Failure::Decode`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeFailure {
    /// What kind of input was bad.
    pub kind: DecodeKind,
    /// The decoder's words, naming the object where its JSON allows (never the object's data).
    pub message: String,
}

/// The kinds of [`DecodeFailure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeKind {
    /// Not JSON, not shaped like a watch event or a list, or an `ERROR` event whose object is
    /// not a `Status`.
    Malformed,
    /// A watch event whose `type` is none of `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`,
    /// `ERROR`.
    UnknownEventType,
    /// One object did not decode into the informer's type (or a bookmark lacked its
    /// resourceVersion).
    Object,
    /// A watch event longer than the configured maximum: it was discarded as it arrived, never
    /// held whole.
    TooLarge,
    /// The stream ended in the middle of an event.
    Truncated,
}

impl Failure {
    /// The server's `Status`, when the failure has one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Failure::Expired(s)
            | Failure::TooLargeResourceVersion(s)
            | Failure::TooManyRequests(s)
            | Failure::Unauthorized(s)
            | Failure::Forbidden(s)
            | Failure::StreamingListUnsupported(s)
            | Failure::Redirect(s)
            | Failure::Other(s) => Some(s),
            Failure::ConnectionRefused(_)
            | Failure::ConnectionClosed(_)
            | Failure::StreamingListIgnored
            | Failure::VeryShortWatch
            | Failure::HungWatch
            | Failure::ListTimeout
            | Failure::Decode(_)
            | Failure::InvalidObject(_) => None,
        }
    }

    /// A failure without HTTP status (transport-level), with a message.
    pub fn other(message: impl Into<String>) -> Failure {
        Failure::Other(Status {
            message: message.into(),
            ..Status::default()
        })
    }

    /// A stable, lower-case name of the variant (`"expired"`, `"decode"`, …), for metrics
    /// labels and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Expired(_) => "expired",
            Failure::TooLargeResourceVersion(_) => "too_large_resource_version",
            Failure::TooManyRequests(_) => "too_many_requests",
            Failure::Unauthorized(_) => "unauthorized",
            Failure::Forbidden(_) => "forbidden",
            Failure::ConnectionRefused(_) => "connection_refused",
            Failure::ConnectionClosed(_) => "connection_closed",
            Failure::StreamingListUnsupported(_) => "streaming_list_unsupported",
            Failure::StreamingListIgnored => "streaming_list_ignored",
            Failure::VeryShortWatch => "very_short_watch",
            Failure::HungWatch => "hung_watch",
            Failure::ListTimeout => "list_timeout",
            Failure::Decode(_) => "decode",
            Failure::Redirect(_) => "redirect",
            Failure::InvalidObject(_) => "invalid_object",
            Failure::Other(_) => "other",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, s) = match self {
            Failure::Expired(s) => ("resource version expired", s),
            Failure::TooLargeResourceVersion(s) => ("resource version too large", s),
            Failure::TooManyRequests(s) => ("too many requests", s),
            Failure::Unauthorized(s) => ("unauthorized", s),
            Failure::Forbidden(s) => ("forbidden", s),
            Failure::StreamingListUnsupported(s) => ("streaming list unsupported", s),
            Failure::Redirect(s) => ("redirect not followed", s),
            Failure::Other(s) => ("request failed", s),
            Failure::ConnectionRefused(m) => return write!(f, "connection refused: {m}"),
            Failure::ConnectionClosed(m) => return write!(f, "connection closed: {m}"),
            Failure::StreamingListIgnored => {
                return f.write_str(
                    "streaming list: the watch ended without the initial-events-end bookmark; \
                     falling back to list",
                );
            }
            Failure::VeryShortWatch => {
                return f.write_str(
                    "very short watch: unexpected watch close - watch lasted less than a second \
                     and no items received",
                );
            }
            Failure::HungWatch => {
                return f.write_str("watch still open after its timeout: connection presumed hung");
            }
            Failure::ListTimeout => return f.write_str("list call unanswered past its deadline"),
            Failure::Decode(d) => return write!(f, "undecodable {}: {}", d.kind, d.message),
            Failure::InvalidObject(m) => return write!(f, "invalid object: {m}"),
        };
        if s.code != 0 {
            write!(f, "{what} (HTTP {}", s.code)?;
            if !s.reason.is_empty() {
                write!(f, " {}", s.reason)?;
            }
            write!(f, "): {}", s.message)
        } else {
            write!(f, "{what}: {}", s.message)
        }
    }
}

impl fmt::Display for DecodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecodeKind::Malformed => "malformed input",
            DecodeKind::UnknownEventType => "watch event type",
            DecodeKind::Object => "object",
            DecodeKind::TooLarge => "watch event over the size limit",
            DecodeKind::Truncated => "truncated stream",
        })
    }
}

impl core::error::Error for Failure {}

/// What a transport feeds back for the request it performs (one [`Request`], tagged with its
/// id by the caller): the one input type of [`Reflector::handle_input`] and
/// [`SharedIndexInformer::handle_input`].
///
/// - For a [`Request::List`]: exactly one `ListPage` or `Failed`.
/// - For a [`Request::Watch`]: any number of `Event`s, then exactly one `StreamEnd` or
///   `Failed` (a transport that stops reading after an `ERROR` event may omit it).
///
/// [`Reflector::handle_input`]: crate::informer::reflector::Reflector::handle_input
/// [`SharedIndexInformer::handle_input`]: crate::informer::SharedIndexInformer::handle_input
#[derive(Debug)]
pub enum Input<K> {
    /// One page of a list.
    ListPage(ListPage<K>),
    /// One event of a watch stream.
    Event(WatchEvent<K>),
    /// The watch stream ended without error: the server closed it (`timeoutSeconds`), or the
    /// connection ended cleanly ([`Failure::ConnectionClosed`] is reported this way).
    StreamEnd,
    /// The request could not be made, the server answered with an error, or the stream broke.
    Failed(Failure),
}
