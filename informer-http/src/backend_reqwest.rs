//! The reqwest backend (tokio). TLS is the shared rustls configuration ([`crate::tls`]).

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use informer_core::protocol::Failure;

use crate::config::Config;
use crate::transport::{Backend, BoxFuture, ClientError, HttpResponse, ServerAddr};
use crate::transport::{Client, transport_failure};

/// A [`Backend`] on reqwest: needs a tokio runtime. HTTP/1.1 over rustls (ring), honouring the
/// configured CA, client certificate, `insecure-skip-tls-verify` and `tls-server-name`.
#[derive(Clone, Debug)]
pub struct ReqwestBackend {
    client: reqwest::Client,
    base: String,
}

impl ReqwestBackend {
    /// A backend for `config`'s server.
    pub fn new(config: &Config) -> Result<ReqwestBackend, ClientError> {
        let addr = ServerAddr::parse(&config.server)?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .tcp_keepalive(Duration::from_secs(30))
            .http1_only();
        let scheme = if addr.tls { "https" } else { "http" };
        let mut base = format!("{scheme}://{}{}", addr.authority, addr.path_prefix);
        if addr.tls {
            let tls = crate::tls::client_config(config, &[b"http/1.1"])?;
            builder = builder.tls_backend_preconfigured(tls);
            if let Some(name) = config.tls_server_name.as_deref() {
                // Verify against `name` while connecting to the configured address.
                use std::net::ToSocketAddrs as _;
                let sock = (addr.host.as_str(), addr.port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| {
                        ClientError::InvalidServer(format!("cannot resolve {}", addr.host))
                    })?;
                builder = builder.resolve(name, sock);
                base = format!("https://{name}:{}{}", addr.port, addr.path_prefix);
            }
        }
        let client = builder
            .build()
            .map_err(|e| ClientError::Backend(e.to_string()))?;
        Ok(ReqwestBackend { client, base })
    }
}

impl Backend for ReqwestBackend {
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>> {
        let (parts, body) = request.into_parts();
        let url = format!("{}{}", self.base, parts.uri);
        let mut rb = self
            .client
            .request(parts.method, url)
            .headers(parts.headers);
        if !body.is_empty() {
            rb = rb.body(body);
        }
        Box::pin(async move {
            let resp = rb
                .send()
                .await
                .map_err(|e| transport_failure("request failed", &e))?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = stream::unfold(Some(resp), |resp| async move {
                let mut resp = resp?;
                match resp.chunk().await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(resp))),
                    Ok(None) => None,
                    Err(e) => Some((Err(transport_failure("reading the body", &e)), None)),
                }
            });
            Ok(HttpResponse {
                status,
                headers,
                body: Box::pin(body),
            })
        })
    }
}

impl Client<ReqwestBackend> {
    /// A client on the reqwest backend (needs a tokio runtime to run requests).
    pub fn reqwest(config: Config) -> Result<Client<ReqwestBackend>, ClientError> {
        Ok(Client::new(ReqwestBackend::new(&config)?, config))
    }
}
