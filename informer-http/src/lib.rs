//! # informer-http
//!
//! The Kubernetes side of informer-rs: everything between the sans-IO core
//! ([`informer_core`]) and kube-apiserver.
//!
//! - [`request`]: list and watch URLs for any [`Resource`], percent-encoded.
//! - [`decode`]: the incremental watch-stream decoder ([`WatchDecoder`]) and list decoding.
//! - [`status`]: `Status` answers and `ERROR` events mapped to the core's
//!   [`Failure`](informer_core::protocol::Failure).
//! - [`config`]: kubeconfig (merged like kubectl) and in-cluster configuration.
//! - [`transport`]: the [`Transport`] trait the runtime adapters drive, and [`Api`], its
//!   implementation over any byte-moving [`Backend`].
//! - Backends: [`ReqwestBackend`] (feature `tokio`) and [`SmolBackend`] (feature `smol`, no
//!   tokio anywhere in its dependency tree: it speaks HTTP/1.1 itself, see [`h1`]).
//!
//! ## Features
//!
//! - `tokio` (default): the reqwest backend, rustls with ring, no OpenSSL.
//! - `smol` (default): the smol backend (own HTTP/1.1 codec, smol TCP, futures-rustls with
//!   ring). hyper is not used: its client depends on `tokio::sync`.
//! - `k8s-openapi`: [`K8s`], a newtype making any `k8s-openapi` resource type an informer
//!   object. Builds `k8s-openapi` 0.29 with its `v1_33` API feature (its earliest; the built-in
//!   types used by informers deserialize fine from older servers such as v1.20, whose extra or
//!   missing optional fields serde ignores). An application must not enable another `v1_*`
//!   feature of `k8s-openapi` at the same time.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub use informer_core as core;

pub mod config;
pub mod decode;
pub mod request;
pub mod resource;
pub mod status;
pub mod tls;
pub mod transport;

#[cfg(feature = "tokio")]
mod backend_reqwest;
#[cfg(feature = "smol")]
mod backend_smol;
#[cfg(feature = "smol")]
pub mod h1;
#[cfg(feature = "k8s-openapi")]
mod k8s;

#[cfg(feature = "tokio")]
pub use backend_reqwest::ReqwestBackend;
#[cfg(feature = "smol")]
pub use backend_smol::SmolBackend;
pub use config::{Config, ConfigError, Secret};
pub use decode::{DecodeError, WatchDecoder};
#[cfg(feature = "k8s-openapi")]
pub use k8s::K8s;
pub use resource::Resource;
pub use transport::{Api, Backend, ClientError, Transport};
