//! Notifications as a [`Stream`]: a handler whose consumer pulls.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::Stream;
use informer_core::{informer::HandlerId, informer::Notification, object::Object};

use crate::delivery::Inbox;
use crate::error::Error;
use crate::runtime::{BoxFuture, Runtime};
use crate::state::Shared;
use crate::sync::CacheSync;

/// Notifications as a [`Stream`] ([`Informer::event_stream`](crate::Informer::event_stream)):
/// a handler whose consumer pulls. Asking for the next item finishes the previous one; the
/// informer hands this handler nothing else meanwhile, so a slow consumer holds back only
/// itself. Ends when the informer shuts down; dropping it removes the handler.
pub struct EventStream<K, R> {
    pub(crate) shared: Arc<Shared<K, R>>,
    pub(crate) id: HandlerId,
    pub(crate) inbox: Inbox<K>,
    /// `Shared::remove_handler`, taken where its bounds hold, so that `Drop` (which cannot
    /// have them) removes the handler the same way [`HandlerRegistration::remove`] does.
    ///
    /// [`HandlerRegistration::remove`]: crate::HandlerRegistration::remove
    pub(crate) remove: fn(&Shared<K, R>, HandlerId) -> Result<bool, crate::error::Error>,
}

impl<K, R> fmt::Debug for EventStream<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> EventStream<K, R> {
    /// The handler id behind this stream.
    pub fn id(&self) -> HandlerId {
        self.id
    }

    /// Whether the informer has synced and this stream's initial adds have been taken and
    /// finished (the consumer asked for the item after the last of them).
    pub fn has_synced(&self) -> bool {
        self.shared.handler_has_synced(self.id)
    }

    /// Waits until [`has_synced`](Self::has_synced); `timeout` `None` waits as long as it
    /// takes. Fails with [`Error::Timeout`] or [`Error::Stopped`]. Only another task pulling
    /// the stream can make it sync.
    pub async fn wait_for_sync(&self, timeout: Option<Duration>) -> Result<(), Error> {
        self.shared.wait_for_handler_sync(self.id, timeout).await
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Stream for EventStream<K, R> {
    type Item = Notification<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inbox.poll_next(cx)
    }
}

impl<K, R> Drop for EventStream<K, R> {
    fn drop(&mut self) {
        // Its own id: never foreign.
        let _ = (self.remove)(&self.shared, self.id);
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> CacheSync for EventStream<K, R> {
    fn is_synced(&self) -> bool {
        self.has_synced()
    }
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.wait_for_sync(None))
    }
    fn last_failure(&self) -> Option<informer_core::protocol::Failure> {
        self.shared.counters.last_failure()
    }
    fn informer_name(&self) -> Option<&str> {
        Some(&self.shared.name)
    }
}
