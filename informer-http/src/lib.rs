//! Kubernetes list/watch protocol, configuration and HTTP transports for informer-rs.
//!
#![doc = include_str!("../README.md")]
//!
//! ## Layers
//!
//! The modules are floors, each using only those below it (no module imports one above it):
//!
//! 1. the ground floor: [`error`] (the errors before a request is sent), [`addr`] (a server
//!    URL's parts), [`well_known`] (constants), [`transport`] (the seam the runtime adapters
//!    drive: [`Transport`]); the Kubernetes wire format, pure: [`resource`], [`request`] (URLs),
//!    [`status`] (answers to failures), [`decode`] (watch and list decoders);
//! 2. [`config`]: where the server is and who to be, parsed data only;
//! 3. [`net`]: TLS, proxies, redirects; [`auth`]: credential sources and their state;
//! 4. [`backend`]: moving bytes, one transport each (reqwest on tokio; smol, with its own
//!    HTTP/1.1 codec and HTTP/2 through `h2`);
//! 5. [`client`]: a backend serving one configuration (authentication, headers, errors);
//! 6. [`api`]: one resource, decoded; writes.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub use informer_core as core;

// 1. Ground floor.
pub mod addr;
pub mod error;
pub mod transport;
pub mod well_known;

pub mod decode;
pub mod request;
pub mod resource;
pub mod status;

// 2. Configuration.
pub mod config;

// 3. Reaching the server, and as whom.
pub mod auth;
pub mod net;

// 4. Transports.
pub mod backend;

// 5. The client.
pub mod client;

// 6. Resources.
pub mod api;

// 7. Manifests (on resources alone).
#[cfg(feature = "crd")]
pub mod crd;

pub use api::Api;

#[cfg(test)]
mod test_support;
/// The writes of [`Api`] (create, replace, patch, delete), also at `api::write`.
pub use api::write;
#[cfg(feature = "k8s-openapi")]
pub use api::{K8s, k8s_owner_reference};
#[cfg(feature = "tokio")]
pub use backend::ReqwestBackend;
#[cfg(feature = "smol")]
pub use backend::SmolBackend;
/// The smol backend's HTTP/1.1 codec, also at `backend::h1`.
#[cfg(feature = "smol")]
pub use backend::h1;
pub use backend::{Backend, InProcess};
pub use client::{Client, WriteHook};
pub use config::{Config, ConfigError, Secret};
pub use decode::{DecodeError, WatchDecoder};
pub use error::ClientError;
pub use resource::{CustomResource, HasResource, Resource};
pub use transport::Transport;
pub use write::{
    DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy, WriteError,
};
