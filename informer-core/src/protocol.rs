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

/// Label and field selectors restricting which objects are listed and watched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selectors {
    /// `labelSelector`, e.g. `app=web,tier!=db`.
    pub label: Option<String>,
    /// `fieldSelector`, e.g. `status.phase=Running`.
    pub field: Option<String>,
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
    /// 401 or 403: carries the server's message.
    Unauthorized(Status),
    /// The server refused the connection (it is down or restarting): back off and retry without
    /// relisting.
    ConnectionRefused(String),
    /// A streaming list (`sendInitialEvents`) is not supported by the server.
    StreamingListUnsupported(Status),
    /// Any other failure: another status code, a dropped connection, a decoding error, a
    /// timeout. `status.code` is 0 when no HTTP status was involved.
    Other(Status),
}

impl Failure {
    /// The server's `Status`, when the failure has one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Failure::Expired(s)
            | Failure::TooLargeResourceVersion(s)
            | Failure::TooManyRequests(s)
            | Failure::Unauthorized(s)
            | Failure::StreamingListUnsupported(s)
            | Failure::Other(s) => Some(s),
            Failure::ConnectionRefused(_) => None,
        }
    }

    /// A failure without HTTP status (transport-level), with a message.
    pub fn other(message: impl Into<String>) -> Failure {
        Failure::Other(Status {
            message: message.into(),
            ..Status::default()
        })
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, s) = match self {
            Failure::Expired(s) => ("resource version expired", s),
            Failure::TooLargeResourceVersion(s) => ("resource version too large", s),
            Failure::TooManyRequests(s) => ("too many requests", s),
            Failure::Unauthorized(s) => ("unauthorized", s),
            Failure::StreamingListUnsupported(s) => ("streaming list unsupported", s),
            Failure::Other(s) => ("request failed", s),
            Failure::ConnectionRefused(m) => return write!(f, "connection refused: {m}"),
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

impl core::error::Error for Failure {}
