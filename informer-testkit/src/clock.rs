//! The time a [`FakeCluster`](crate::FakeCluster) runs on: watch timeouts, bookmarks, slow
//! answers, outages after a restart, and the timestamps it writes.

use std::time::Duration;

use informer_http::transport::BoxFuture;

/// A monotonic clock and its timers.
///
/// [`TokioClock`] runs on tokio's timers, so under a paused tokio clock (`tokio::time::pause`,
/// `#[tokio::test(start_paused = true)]`) the cluster's time is virtual: a minute of watch
/// timeouts passes as soon as every task waits. [`SmolClock`] runs on async-io's timers, in
/// real time: smol has no paused clock to hook into (async-io's timers read the OS clock
/// directly), so on smol a fault run takes the time it simulates.
pub trait Clock: Send + Sync + 'static {
    /// Time since the clock's origin.
    fn elapsed(&self) -> Duration;
    /// Completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// tokio's clock: virtual under a paused runtime. Its origin is where it was made.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock starting now (tokio's now: the paused clock's, inside a paused runtime).
    pub fn new() -> TokioClock {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn elapsed(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.origin)
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// async-io's clock (smol's timers): real time.
#[cfg(feature = "smol")]
#[derive(Debug, Clone, Copy)]
pub struct SmolClock {
    origin: std::time::Instant,
}

#[cfg(feature = "smol")]
impl SmolClock {
    /// A clock starting now.
    pub fn new() -> SmolClock {
        SmolClock {
            origin: std::time::Instant::now(),
        }
    }
}

#[cfg(feature = "smol")]
impl Default for SmolClock {
    fn default() -> Self {
        SmolClock::new()
    }
}

#[cfg(feature = "smol")]
impl Clock for SmolClock {
    fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            async_io::Timer::after(duration).await;
        })
    }
}

/// The std clock, each sleep waited out on a thread of its own: real time on any executor
/// (the default without the `tokio` and `smol` features).
#[derive(Debug, Clone, Copy)]
pub struct ThreadClock {
    origin: std::time::Instant,
}

impl ThreadClock {
    /// A clock starting now.
    pub fn new() -> ThreadClock {
        ThreadClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for ThreadClock {
    fn default() -> Self {
        ThreadClock::new()
    }
}

impl Clock for ThreadClock {
    fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let (tx, rx) = futures_channel::oneshot::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("fake-cluster-sleep".into())
            .spawn(move || {
                std::thread::sleep(duration);
                let _ = tx.send(());
            });
        Box::pin(async move {
            if spawned.is_ok() {
                let _ = rx.await;
            }
        })
    }
}
