//! Informers on an application's own [`kube::Client`]: [`KubeBackend`] sends every request
//! through [`kube::Client::send`], so the client's authentication (including its exec and
//! OIDC support), proxy, TLS and any tower layers apply unchanged.

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::BodyExt as _;
use informer_http::backend::{HttpResponse, transport_failure};
use informer_http::core::protocol::Failure;
use informer_http::transport::BoxFuture;

/// A [`Backend`](informer_http::Backend) on a [`kube::Client`].
#[derive(Clone)]
pub struct KubeBackend {
    client: kube::Client,
}

impl std::fmt::Debug for KubeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBackend").finish_non_exhaustive()
    }
}

impl KubeBackend {
    /// Wraps `client`.
    pub fn new(client: kube::Client) -> KubeBackend {
        KubeBackend { client }
    }
}

impl informer_http::Backend for KubeBackend {
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>> {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, kube::client::Body::from(body.to_vec()));
        Box::pin(async move {
            let response = self
                .client
                .send(request)
                .await
                .map_err(|e| transport_failure("request failed", &e))?;
            let (parts, body) = response.into_parts();
            let body = body
                .into_data_stream()
                .map(|chunk| chunk.map_err(|e| transport_failure("reading the body", &e)));
            Ok(HttpResponse {
                status: parts.status,
                headers: parts.headers,
                body: Box::pin(body),
            })
        })
    }
}

/// An informer client on `client`: informers built on it list and watch through the
/// `kube::Client` (its cluster URL, credentials, proxy and TLS); the default namespace is the
/// `kube::Client`'s. The returned client's [`Config`](informer_http::Config) carries no
/// credential and a placeholder server: the `kube::Client` holds the real ones.
pub fn kube_client(client: kube::Client) -> informer_http::Client<KubeBackend> {
    let mut config = informer_http::Config::new("https://kube-client.invalid");
    config.default_namespace = client.default_namespace().to_string();
    informer_http::Client::new(KubeBackend::new(client), config)
}
