//! The little the informer needs from an async runtime.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed, `Send` future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the informer asks of an async runtime: spawn a task, sleep, read the clock.
///
/// `informer-tokio` and `informer-smol` implement it; any other executor can too. The informer
/// spawns one driver task per informer and one task per list or watch request; handlers run
/// on threads of their own, never on the runtime.
pub trait Runtime: Clone + Send + Sync + 'static {
    /// Runs `future` to completion in the background (detached).
    fn spawn(&self, future: BoxFuture<'static, ()>) -> Result<(), SpawnError>;

    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;

    /// The runtime's monotonic clock (the std clock unless a runtime has its own, e.g. a paused
    /// test clock).
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
}

/// A runtime could not spawn a task (for example: no tokio runtime is running on this thread).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnError(pub String);

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot spawn a task: {}", self.0)
    }
}

impl std::error::Error for SpawnError {}
