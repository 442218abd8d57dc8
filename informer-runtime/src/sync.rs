//! Waiting for caches and handlers to sync.

use std::future::Future;
use std::time::Duration;

use futures_util::future::{Either, select};

use informer_core::protocol::Failure;

use crate::error::Error;
use crate::runtime::{BoxFuture, Runtime};

/// Something that can say whether it has synced and wait for it: an
/// [`Informer`](crate::Informer), a [`HandlerRegistration`](crate::HandlerRegistration), an
/// [`EventStream`](crate::EventStream).
pub trait CacheSync: Send + Sync {
    /// Whether it has synced.
    fn is_synced(&self) -> bool;
    /// Resolves once synced (or with [`Error::Stopped`]).
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>>;
    /// The last list or watch failure of the informer behind it, if any: the likely reason it
    /// has not synced.
    fn last_failure(&self) -> Option<Failure> {
        None
    }
    /// The name of the informer behind it, if any: named in a timeout.
    fn informer_name(&self) -> Option<&str> {
        None
    }
}

/// Waits until every one of `items` has synced (client-go `WaitForCacheSync`), at most
/// `timeout` in all (`None`: as long as it takes).
pub async fn wait_for_cache_sync<R: Runtime>(
    rt: &R,
    items: &[&dyn CacheSync],
    timeout: Option<Duration>,
) -> Result<(), Error> {
    let all = async {
        for i in items {
            i.synced().await?;
        }
        Ok(())
    };
    // On a timeout, the informer and cause are those of the first item still not synced.
    let cause = || {
        items
            .iter()
            .find(|i| !i.is_synced())
            .map_or((None, None), |i| {
                (i.informer_name().map(str::to_string), i.last_failure())
            })
    };
    with_timeout(rt, all, timeout, cause).await
}

/// `wait`, or [`Error::Timeout`] (carrying `cause()`: the informer's name and its last
/// failure) once `timeout` has passed (`None`: no limit).
pub(crate) async fn with_timeout<R: Runtime>(
    rt: &R,
    wait: impl Future<Output = Result<(), Error>>,
    timeout: Option<Duration>,
    cause: impl FnOnce() -> (Option<String>, Option<Failure>),
) -> Result<(), Error> {
    match timeout {
        None => wait.await,
        Some(t) => match select(Box::pin(wait), rt.sleep(t)).await {
            Either::Left((r, _)) => r,
            Either::Right(_) => {
                let (informer, last_failure) = cause();
                Err(Error::Timeout {
                    informer,
                    last_failure: last_failure.map(Box::new),
                })
            }
        },
    }
}
