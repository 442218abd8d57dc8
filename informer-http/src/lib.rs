//! Kubernetes list/watch protocol, configuration and HTTP transports for informer-rs.
//!
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub use informer_core as core;

pub mod addr;
pub mod error;
pub mod well_known;

pub mod api;
pub mod auth;
pub mod backend;
pub mod client;
pub mod config;
pub mod decode;
pub mod net;
pub mod request;
pub mod resource;
pub mod status;
pub mod transport;

pub use api::Api;
#[cfg(feature = "k8s-openapi")]
pub use api::K8s;
pub use api::write;
pub use backend::Backend;
#[cfg(feature = "tokio")]
pub use backend::ReqwestBackend;
#[cfg(feature = "smol")]
pub use backend::SmolBackend;
#[cfg(feature = "smol")]
pub use backend::h1;
pub use client::Client;
pub use config::{Config, ConfigError, Secret};
pub use decode::{DecodeError, WatchDecoder};
pub use error::ClientError;
pub use resource::{HasResource, Resource};
pub use transport::Transport;
pub use write::{
    DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy, WriteError,
};
