//! The two runtimes and helpers shared by the tests that drive the public informer through
//! the real transports; the scripted server they drive it against is
//! `testcluster::scripted` (shared with informer-http's tests). The tests that need no server
//! at all use the in-memory transport of [`fake_transport`].

#![allow(dead_code)] // each test file uses its part

pub mod fake_transport;

use std::future::Future;
use std::time::{Duration, Instant};

use informer_http::{Backend, Client, Config};
use informer_runtime::Runtime;
#[allow(unused_imports)] // each test file uses its part
pub use testcluster::scripted::{
    Reply, Req, Script, Server, bookmark, cm, event, list_of, status_json,
};

pub trait Env: 'static {
    type R: Runtime + Default;
    type B: Backend;
    fn client(config: Config) -> Client<Self::B>;
    fn block_on<F: Future>(f: F) -> F::Output;
}

pub struct TokioEnv;
impl Env for TokioEnv {
    type R = informer_tokio::Tokio;
    type B = informer_tokio::Backend;
    fn client(config: Config) -> Client<Self::B> {
        informer_tokio::client(config).unwrap()
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        informer_tokio::block_on(f).unwrap()
    }
}

pub struct SmolEnv;
impl Env for SmolEnv {
    type R = informer_smol::Smol;
    type B = informer_smol::Backend;
    fn client(config: Config) -> Client<Self::B> {
        informer_smol::client(config).unwrap()
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        informer_smol::block_on(f).unwrap()
    }
}

/// Polls `cond` until it holds or `limit` passes (a bound, not a measurement).
pub async fn eventually<E: Env>(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return true;
        }
        <E::R as Default>::default()
            .sleep(Duration::from_millis(20))
            .await;
    }
    cond()
}

/// Runs `$name::<Env>` as a test on each runtime.
#[macro_export]
macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod on_tokio {
            $(#[test] fn $name() { <super::support::TokioEnv as super::support::Env>::block_on(super::$name::<super::support::TokioEnv>()) })*
        }
        mod on_smol {
            $(#[test] fn $name() { <super::support::SmolEnv as super::support::Env>::block_on(super::$name::<super::support::SmolEnv>()) })*
        }
    };
}
