//! The top floor: [`Api`], one resource through a [`Client`]. List and watch, decoded as the
//! informer's object type (the [`Transport`] the runtime adapters drive, and
//! [`Client::api`]); writes ([`write`](mod@write): create, replace, patch, delete);
//! k8s-openapi types as objects (`K8s`, feature `k8s-openapi`).

#[cfg(feature = "k8s-openapi")]
mod k8s;
pub mod write;

#[cfg(feature = "k8s-openapi")]
#[doc(hidden)]
pub use k8s::meta as k8s_meta;
#[cfg(feature = "k8s-openapi")]
pub use k8s::{K8s, k8s_owner_reference};

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use informer_core::object::{FromJson, Object};
use informer_core::protocol::{
    DecodeFailure, DecodeKind, Failure, ListPage, ListRequest, WatchEvent, WatchRequest,
};
use serde::de::DeserializeOwned;

use crate::backend::{Backend, HttpResponse};
use crate::client::{Client, MAX_LIST_BODY, error_failure};
use crate::decode::{DEFAULT_MAX_LINE, DecodeError, ListDecoder, WatchDecoder};
use crate::request::{list_url, watch_url};
use crate::resource::{HasResource, Resource};
use crate::transport::{BoxFuture, BoxStream, KnownObjects, Transport};

/// List and watch of one resource (in one namespace or all), decoding objects as `K`: the
/// [`Transport`] the runtime adapters use.
pub struct Api<K, B> {
    client: Client<B>,
    resource: Resource,
    namespace: Option<String>,
    max_line: usize,
    _k: PhantomData<fn() -> K>,
}

impl<K, B> Clone for Api<K, B> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            max_line: self.max_line,
            _k: PhantomData,
        }
    }
}

impl<K, B> fmt::Debug for Api<K, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .field("max_line", &self.max_line)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Client<B> {
    /// An [`Api`] for `resource` in `namespace` (`None`: all namespaces, or cluster-scoped).
    pub fn api<K>(&self, resource: Resource, namespace: Option<&str>) -> Api<K, B> {
        Api::new(self.clone(), resource, namespace)
    }

    /// An [`Api`] for a type that knows its resource ([`HasResource`]: every `K8s<T>`, and
    /// your own typed objects that implement it) in `namespace` (`None`: all namespaces, or
    /// cluster-scoped): `client.api_for::<Greeting>(Some("default"))` instead of
    /// `client.api::<Greeting>(Greeting::resource(), Some("default"))`.
    pub fn api_for<K: HasResource>(&self, namespace: Option<&str>) -> Api<K, B> {
        Api::new(self.clone(), K::resource(), namespace)
    }
}

impl<K, B> Api<K, B> {
    /// An [`Api`] for `resource` in `namespace` (`None` or `""`: all namespaces, or
    /// cluster-scoped); [`Client::api`] is the usual way to get one.
    pub fn new(client: Client<B>, resource: Resource, namespace: Option<&str>) -> Api<K, B> {
        Api {
            client,
            resource,
            namespace: namespace.filter(|n| !n.is_empty()).map(str::to_string),
            max_line: DEFAULT_MAX_LINE,
            _k: PhantomData,
        }
    }

    /// Sets the bound on one watch event's line (default [`DEFAULT_MAX_LINE`], 16 MiB). A
    /// longer line is never held whole: it is discarded as it arrives and ends the watch with
    /// `Failure::Decode` of kind `TooLarge`.
    pub fn with_max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line;
        self
    }

    /// The resource.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The namespace, `None` for all namespaces.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The client.
    pub fn client(&self) -> &Client<B> {
        &self.client
    }
}

/// `Accept` for a list of metadata only: `meta.k8s.io/v1` `PartialObjectMetadataList`, or
/// whole objects from a server without it.
pub const ACCEPT_PARTIAL_METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// `Accept` for a watch of metadata only (`PartialObjectMetadata` events).
pub const ACCEPT_PARTIAL_METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

impl<K, B> Api<K, B>
where
    K: DeserializeOwned + Object + Send + Sync + 'static,
    B: Backend,
{
    /// A `GET` of `url`, for metadata only when `K` holds only that
    /// ([`Object::metadata_only`]: `PartialObjectMetadata`).
    async fn get_url(&self, url: &str, metadata_accept: &str) -> Result<HttpResponse, Failure> {
        if K::metadata_only() {
            self.client.get_accepting(url, metadata_accept).await
        } else {
            self.client.send(http::Method::GET, url, None).await
        }
    }

    /// Fetches one list page.
    pub async fn list_page(&self, request: &ListRequest) -> Result<ListPage<K>, Failure> {
        self.list_page_from(request, None).await
    }

    /// Fetches one list page, taking from `known` every object it holds at the listed
    /// resourceVersion instead of decoding the item ([`ListDecoder::with_known`]): a relist
    /// of mostly unchanged objects builds only the changed ones.
    pub async fn list_page_known(
        &self,
        request: &ListRequest,
        known: Arc<dyn KnownObjects<K>>,
    ) -> Result<ListPage<K>, Failure> {
        self.list_page_from(request, Some(known)).await
    }

    async fn list_page_from(
        &self,
        request: &ListRequest,
        known: Option<Arc<dyn KnownObjects<K>>>,
    ) -> Result<ListPage<K>, Failure> {
        let url = list_url(&self.resource, self.namespace.as_deref(), request);
        let resp = self.get_url(&url, ACCEPT_PARTIAL_METADATA_LIST).await?;
        if !resp.status.is_success() {
            return Err(error_failure(resp).await);
        }
        // Decoded while it arrives: a first list can be tens of megabytes, and only the item
        // being received needs to be held, never the whole body.
        let mut body = resp.body;
        let mut decoder = ListDecoder::<K>::new();
        if let Some(known) = known {
            decoder = decoder.with_known(known);
        }
        let mut received = 0usize;
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            received += chunk.len();
            if received > MAX_LIST_BODY {
                return Err(Failure::other(format!(
                    "response body larger than {MAX_LIST_BODY} bytes"
                )));
            }
            decoder.feed(&chunk).map_err(|e| e.to_failure())?;
        }
        if let (Some(want), Some(got)) = (K::type_kind(), decoder.list_kind()) {
            // List items carry no kind, so a typed object (whose fields are all optional)
            // would decode from another kind's items as an empty value: refuse the list.
            if got.strip_suffix("List") != Some(want) {
                return Err(Failure::Decode(DecodeFailure {
                    kind: DecodeKind::Object,
                    message: format!(
                        "the server listed {got} for {}, but the informer's type holds {want}",
                        self.resource.plural
                    ),
                }));
            }
        }
        let mut page = decoder.finish().map_err(|e| e.to_failure())?;
        // Known objects are shared (so left alone here): they were filled when first listed.
        self.fill_type_meta(&mut page.items);
        Ok(page)
    }

    /// kube-apiserver leaves `apiVersion` and `kind` out of list items (they are on the list);
    /// watch events carry them. So that cached objects of a type keeping them (such as
    /// `DynamicObject`) look the same whichever way they arrived, list items get them from
    /// the resource ([`Object::type_meta_filler`]; nothing to do for other types).
    fn fill_type_meta(&self, items: &mut [Arc<K>]) {
        let Some(fill) = K::type_meta_filler() else {
            return;
        };
        let api_version = self.resource.api_version();
        for item in items {
            if let Some(obj) = Arc::get_mut(item) {
                fill(obj, &api_version, &self.resource.kind);
            }
        }
    }

    /// Opens a watch whose stream yields every line's result: events, and the
    /// [`DecodeError`]s of lines that could not be decoded (the stream goes on after them).
    pub async fn watch_results(
        &self,
        request: &WatchRequest,
    ) -> Result<BoxStream<'static, Result<WatchEvent<K>, DecodeError>>, Failure> {
        let url = watch_url(&self.resource, self.namespace.as_deref(), request);
        let resp = self.get_url(&url, ACCEPT_PARTIAL_METADATA).await?;
        if !resp.status.is_success() {
            let failure = error_failure(resp).await;
            return Err(match failure {
                Failure::Other(s) | Failure::Forbidden(s)
                    if request.send_initial_events
                        && matches!(s.code, 400 | 403 | 422)
                        && s.message.contains("sendInitialEvents") =>
                {
                    Failure::StreamingListUnsupported(s)
                }
                f => f,
            });
        }
        Ok(watch_results(resp.body, WatchDecoder::new(self.max_line)))
    }

    /// Opens a watch stream of events, as [`Transport::watch`] hands it out: the first line
    /// that cannot be decoded becomes `WatchEvent::Error(Failure::Decode(..))` and ends the
    /// stream (see [`Transport`]).
    pub async fn watch_stream(
        &self,
        request: &WatchRequest,
    ) -> Result<BoxStream<'static, WatchEvent<K>>, Failure> {
        let results = self.watch_results(request).await?;
        Ok(end_at_first_decode_error(results))
    }
}

/// Turns every line's result into events, ending after the first [`DecodeError`] (yielded as
/// `WatchEvent::Error(Failure::Decode(..))`).
pub fn end_at_first_decode_error<K: Send + Sync + 'static>(
    results: BoxStream<'static, Result<WatchEvent<K>, DecodeError>>,
) -> BoxStream<'static, WatchEvent<K>> {
    Box::pin(
        results
            .scan(false, |ended, r| {
                if *ended {
                    return std::future::ready(None);
                }
                let ev = match r {
                    Ok(ev) => ev,
                    Err(e) => {
                        *ended = true;
                        WatchEvent::Error(e.to_failure())
                    }
                };
                std::future::ready(Some(ev))
            })
            .fuse(),
    )
}

/// Turns a body stream into the results its lines decode to: events, and [`DecodeError`]s for
/// lines that could not be decoded (the stream goes on after them).
///
/// A transport error while reading ends the stream: silently when the connection was closed or
/// reset (as client-go treats a probable EOF: the reflector watches again from where it was),
/// else after a [`WatchEvent::Error`] carrying it.
pub fn watch_results<K: FromJson + Send + 'static>(
    body: BoxStream<'static, Result<Bytes, Failure>>,
    decoder: WatchDecoder<K>,
) -> BoxStream<'static, Result<WatchEvent<K>, DecodeError>> {
    struct State<K> {
        body: BoxStream<'static, Result<Bytes, Failure>>,
        decoder: WatchDecoder<K>,
        done: bool,
    }
    let state = State {
        body,
        decoder,
        done: false,
    };
    Box::pin(stream::unfold(state, move |mut st| async move {
        loop {
            if let Some(r) = st.decoder.next_event() {
                return Some((r, st));
            }
            if st.done {
                return None;
            }
            match st.body.next().await {
                Some(Ok(chunk)) => st.decoder.feed(&chunk),
                Some(Err(f)) => {
                    st.done = true;
                    if !matches!(f, Failure::ConnectionClosed(_)) {
                        return Some((Ok(WatchEvent::Error(f)), st));
                    }
                }
                None => {
                    st.done = true;
                    if let Some(r) = st.decoder.finish() {
                        return Some((r, st));
                    }
                    return None;
                }
            }
        }
    }))
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
