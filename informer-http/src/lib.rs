//! Kubernetes list/watch protocol, configuration and HTTP transports for informer-rs.
//!
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub use informer_core as core;

pub mod api;
pub mod backend;
pub mod client;
pub mod config;
pub mod credential;
pub mod decode;
mod minihttp;
pub mod proxy;
pub mod redirect;
pub mod request;
pub mod resource;
pub mod status;
pub mod tls;
pub mod transport;
pub mod write;

#[cfg(test)]
mod test_support;

#[cfg(feature = "tokio")]
mod backend_reqwest;
#[cfg(feature = "smol")]
mod backend_smol;
#[cfg(feature = "smol")]
pub mod h1;
#[cfg(feature = "smol")]
mod h2conn;
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
pub use resource::{HasResource, Resource};
pub use transport::{Api, Backend, Client, ClientError, Transport};
pub use write::{
    DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy, WriteError,
};
