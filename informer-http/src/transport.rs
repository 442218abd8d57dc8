//! The transport interface the runtime adapters drive ([`Transport`]) and its one
//! implementation, [`Api`], shared by every backend.
//!
//! The layers live in modules of their own — [`backend`](crate::backend) (bytes),
//! [`client`](crate::client) (authentication, errors) and [`api`](crate::api) (one resource,
//! decoded) — and are re-exported here, so `informer_http::transport::*` names the whole
//! stack.

use std::sync::Arc;

use informer_core::protocol::{Failure, ListPage, ListRequest, WatchEvent, WatchRequest};
use serde::de::DeserializeOwned;

use crate::decode::KnownObjects;

pub use crate::addr::ServerAddr;
pub use crate::api::{Api, MAX_LIST_BODY, end_at_first_decode_error, watch_results};
pub use crate::backend::{Backend, BoxFuture, BoxStream, HttpResponse, transport_failure};
pub use crate::client::Client;
pub use crate::error::ClientError;
pub use crate::well_known::USER_AGENT;
use informer_core::object::Object;

/// What a runtime adapter needs from the API server for one resource: list pages and watch
/// streams, in the core's vocabulary.
///
/// The watch stream ends when the server ends the watch (`timeoutSeconds`, or the connection
/// closing). An `ERROR` event arrives as [`WatchEvent::Error`] (the server closes the stream
/// after it). A line that cannot be decoded (an object that does not fit the type, an unknown
/// event type, an over-long line, ...) arrives as `WatchEvent::Error(Failure::Decode(..))` and
/// ends the stream: skipping it would let a later bookmark move the informer past a change it
/// never applied.
pub trait Transport<K>: Send + Sync {
    /// Fetches one list page.
    fn list<'a>(&'a self, request: &'a ListRequest) -> BoxFuture<'a, Result<ListPage<K>, Failure>>;

    /// Fetches one list page as [`list`](Transport::list) does, but may take from `known` the
    /// objects it holds at the listed resourceVersion instead of building them again (the
    /// runtime passes its cache when it relists). The page must be the one `list` would give,
    /// but for sharing those objects. The default ignores `known`.
    fn list_known<'a>(
        &'a self,
        request: &'a ListRequest,
        known: Arc<dyn KnownObjects<K>>,
    ) -> BoxFuture<'a, Result<ListPage<K>, Failure>> {
        let _ = known;
        self.list(request)
    }

    /// Opens a watch. Fails before the first event when the server refuses the watch (an HTTP
    /// error status, a refused connection, …).
    fn watch<'a>(
        &'a self,
        request: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<K>>, Failure>>;
}

impl<K, B> Transport<K> for Api<K, B>
where
    K: DeserializeOwned + Object + Send + Sync + 'static,
    B: Backend,
{
    fn list<'a>(&'a self, request: &'a ListRequest) -> BoxFuture<'a, Result<ListPage<K>, Failure>> {
        Box::pin(self.list_page(request))
    }

    fn list_known<'a>(
        &'a self,
        request: &'a ListRequest,
        known: Arc<dyn KnownObjects<K>>,
    ) -> BoxFuture<'a, Result<ListPage<K>, Failure>> {
        Box::pin(self.list_page_known(request, known))
    }

    fn watch<'a>(
        &'a self,
        request: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<K>>, Failure>> {
        Box::pin(self.watch_stream(request))
    }
}

#[cfg(test)]
mod tests;
