//! [`Client`]: a [`Backend`] plus the configuration it serves (authentication, headers, error
//! answers mapped to [`Failure`]s).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use informer_core::protocol::Failure;

use crate::auth::{Credentials, ProcessRunner, ThreadRunner};
#[cfg(feature = "tokio")]
use crate::backend::ReqwestBackend;
#[cfg(feature = "smol")]
use crate::backend::SmolBackend;
use crate::backend::{Backend, HttpResponse};
use crate::config::{Config, Secret};
#[cfg(any(feature = "tokio", feature = "smol"))]
use crate::error::ClientError;
use crate::resource::Resource;
use crate::status::failure_from_response;
use crate::well_known::USER_AGENT;

/// Largest answer body read whole (1 GiB): a list's, or any answer of [`Client::request`].
pub const MAX_LIST_BODY: usize = 1 << 30;

/// The `Accept` (and body `Content-Type`) of ordinary requests.
const JSON: &str = "application/json";

/// Largest error body read (1 MiB).
const MAX_ERROR_BODY: usize = 1 << 20;

/// A backend plus the configuration it serves: adds authentication and the usual headers, maps
/// error answers to [`Failure`]s, and hands out `Api`s (`Client::api`, defined on the floor
/// above, with `Api`). Cheap to clone.
pub struct Client<B> {
    backend: Arc<B>,
    config: Arc<Config>,
    /// The credential source of `config`, with its state.
    credentials: Credentials,
    runner: Arc<dyn ProcessRunner>,
    /// Called around each write (see [`WriteHook`]).
    write_hook: Option<Arc<dyn WriteHook>>,
}

/// Called around every write made through a client ([`Api`](crate::Api)'s create, replace,
/// patch and delete; not its reads): the seam a controller fences its writes with (refused
/// while it is not the leader) and records what it wrote (read-your-writes).
pub trait WriteHook: Send + Sync + 'static {
    /// Before the request is sent; an error refuses the write (nothing is sent).
    fn before_write(&self, resource: &Resource, namespace: Option<&str>) -> Result<(), String>;
    /// After the server accepted the write: the resourceVersion of the object it returned,
    /// if it returned one, and that object's labels (so a reader can tell which label-scoped
    /// informers will ever show it).
    fn after_write(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        resource_version: &str,
        labels: &std::collections::BTreeMap<String, String>,
    );
}

impl<B> Clone for Client<B> {
    fn clone(&self) -> Self {
        Client {
            backend: self.backend.clone(),
            config: self.config.clone(),
            credentials: self.credentials.clone(),
            runner: self.runner.clone(),
            write_hook: self.write_hook.clone(),
        }
    }
}

impl<B> fmt::Debug for Client<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Client<B> {
    /// A client sending through `backend`, authenticating as `config` says.
    pub fn new(backend: B, config: Config) -> Client<B> {
        Client {
            backend: Arc::new(backend),
            credentials: Credentials::of(&config),
            config: Arc::new(config),
            runner: Arc::new(ThreadRunner),
            write_hook: None,
        }
    }

    /// This client (sharing its connections and credentials) with `hook` called around each
    /// write, in place of any hook it had.
    pub fn with_write_hook(&self, hook: Arc<dyn WriteHook>) -> Client<B> {
        let mut c = self.clone();
        c.write_hook = Some(hook);
        c
    }

    /// The write hook, if any.
    pub fn write_hook(&self) -> Option<&Arc<dyn WriteHook>> {
        self.write_hook.as_ref()
    }

    /// Runs exec credential plugins with `runner` instead of the default [`ThreadRunner`].
    pub fn with_process_runner(mut self, runner: Arc<dyn ProcessRunner>) -> Client<B> {
        self.runner = runner;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Sends one request with authentication, `Accept: application/json` and a JSON body if
    /// any. The answer's status is not checked, except that a 401 with a renewable credential
    /// (an exec plugin) renews it and sends the request once more.
    pub async fn send(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<HttpResponse, Failure> {
        self.send_with_content_type(method, path_and_query, body, "application/json")
            .await
    }

    /// As [`send`](Self::send), with the body's `Content-Type` given (a patch needs
    /// `application/merge-patch+json`, `application/json-patch+json` or
    /// `application/apply-patch+yaml`).
    pub async fn send_with_content_type(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> Result<HttpResponse, Failure> {
        self.send_full(method, path_and_query, body, content_type, JSON)
            .await
    }

    /// A `GET` asking for the representation `accept` (for example the `Accept` of a
    /// metadata-only list, `ACCEPT_PARTIAL_METADATA_LIST` in `api`: only the objects'
    /// metadata).
    pub async fn get_accepting(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<HttpResponse, Failure> {
        self.send_full(http::Method::GET, path_and_query, None, JSON, accept)
            .await
    }

    async fn send_full(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
        accept: &str,
    ) -> Result<HttpResponse, Failure> {
        let content_type = body.is_some().then_some(content_type);
        let body = Bytes::from(body.unwrap_or_default());
        // Bytes clones share the buffer: the retry after a 401 copies nothing.
        let build = |auth: Option<&Secret<String>>| {
            self.build(
                &method,
                path_and_query,
                content_type,
                accept,
                body.clone(),
                auth,
            )
        };
        let auth = self.authorization().await?;
        let resp = self.backend.send(build(auth.as_ref())?).await?;
        if resp.status != http::StatusCode::UNAUTHORIZED
            || !self.credentials.renew_after_unauthorized(auth.as_ref())
        {
            return Ok(resp);
        }
        drop(resp);
        let auth = self.authorization().await?;
        let req = build(auth.as_ref())?;
        self.backend.send(req).await
    }

    async fn authorization(&self) -> Result<Option<Secret<String>>, Failure> {
        self.credentials
            .authorization(&self.config, &*self.runner)
            .await
            .map_err(|e| Failure::other(e.to_string()))
    }

    fn build(
        &self,
        method: &http::Method,
        path_and_query: &str,
        content_type: Option<&str>,
        accept: &str,
        body: Bytes,
        auth: Option<&Secret<String>>,
    ) -> Result<http::Request<Bytes>, Failure> {
        let mut req = http::Request::builder()
            .method(method.clone())
            .uri(path_and_query)
            .header(http::header::ACCEPT, accept)
            .header(http::header::USER_AGENT, USER_AGENT);
        if let Some(auth) = auth {
            let mut value = http::HeaderValue::from_str(auth.expose())
                .map_err(|_| Failure::other("credential is not a valid header value"))?;
            value.set_sensitive(true);
            req = req.header(http::header::AUTHORIZATION, value);
        }
        if let Some(content_type) = content_type {
            req = req.header(http::header::CONTENT_TYPE, content_type);
        }
        req.body(body)
            .map_err(|e| Failure::other(format!("bad request {path_and_query:?}: {e}")))
    }

    /// Sends one request and reads the whole answer; a non-2xx status becomes its [`Failure`].
    pub async fn request(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, Failure> {
        let resp = self.send(method, path_and_query, body).await?;
        if !resp.status.is_success() {
            return Err(error_failure(resp).await);
        }
        resp.collect(MAX_LIST_BODY).await
    }
}

/// Turns an error answer into its failure.
pub(crate) async fn error_failure(resp: HttpResponse) -> Failure {
    let code = resp.status.as_u16();
    let retry_after = resp
        .headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match resp.collect(MAX_ERROR_BODY).await {
        Ok(b) => b,
        Err(f) => f
            .status()
            .map(|s| s.message.clone().into_bytes())
            .unwrap_or_default(),
    };
    failure_from_response(code, retry_after.as_deref(), &body)
}

#[cfg(feature = "tokio")]
impl Client<ReqwestBackend> {
    /// A client on the reqwest backend (needs a tokio runtime to run requests).
    pub fn reqwest(config: Config) -> Result<Client<ReqwestBackend>, ClientError> {
        Ok(Client::new(ReqwestBackend::new(&config)?, config))
    }
}

#[cfg(feature = "smol")]
impl Client<SmolBackend> {
    /// A client on the smol backend.
    pub fn smol(config: Config) -> Result<Client<SmolBackend>, ClientError> {
        Ok(Client::new(SmolBackend::new(&config)?, config))
    }
}
