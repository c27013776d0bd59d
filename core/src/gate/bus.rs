//! The event bus: subscriptions, lag and re-sync.

use super::{Gate, Inner};
use crate::event::{CancelReason, ConfirmationRequest, Event};
use crate::store::PendingCursor;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

impl Gate {
    /// Subscribes to the bus. Events published from now on are delivered in order; a subscriber
    /// that falls more than the bus capacity behind receives one [`Lagged`] carrying the
    /// current pending snapshot, then continues with the newest events.
    pub fn subscribe(&self) -> Subscription {
        self.inner.subscribers.fetch_add(1, Ordering::SeqCst);
        Subscription {
            inner: tokio_stream::wrappers::BroadcastStream::new(self.inner.bus.subscribe()),
            gate: Arc::downgrade(&self.inner),
        }
    }

    /// How many [`Subscription`]s are alive.
    pub fn subscriber_count(&self) -> usize {
        self.inner.subscribers.load(Ordering::SeqCst)
    }
}

/// How many pending requests a [`Lagged`] carries at most; the rest are read with
/// [`Gate::pending_page`] from [`Lagged::more`], so re-syncing stays bounded however many are
/// pending.
pub const LAGGED_SNAPSHOT_LIMIT: usize = 1000;

/// One page of pending requests ([`Gate::pending_page`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingPage {
    /// Oldest first.
    pub requests: Vec<Arc<ConfirmationRequest>>,
    /// Where the next page starts; `None` when this page reached the end.
    pub next: Option<PendingCursor>,
}

/// A subscriber fell behind and missed `missed` events. Re-sync (de-duplicating by id) from
/// `pending`, the oldest requests pending when this was noticed, and, when `more` is set, from
/// [`Gate::pending_page`] starting at `more`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("subscriber lagged and missed {missed} events; re-sync from the pending requests")]
pub struct Lagged {
    /// How many events this subscriber missed.
    pub missed: u64,
    /// The oldest pending requests, at most [`LAGGED_SNAPSHOT_LIMIT`], oldest first.
    pub pending: Vec<Arc<ConfirmationRequest>>,
    /// Set when more requests are pending than `pending` holds: read them with
    /// [`Gate::pending_page`]`(Some(&more), ..)`.
    pub more: Option<PendingCursor>,
}

/// A stream of bus events. Dropping it unsubscribes; when the last subscriber of a gate built
/// with `deny_when_unobserved(true)` goes away, every pending request is cancelled.
pub struct Subscription {
    inner: tokio_stream::wrappers::BroadcastStream<Event>,
    gate: Weak<Inner>,
}

impl Subscription {
    /// The next event; `None` when the gate is gone.
    pub async fn recv(&mut self) -> Option<Result<Event, Lagged>> {
        use tokio_stream::StreamExt;
        self.next().await
    }

    fn lagged(&self, missed: u64) -> Lagged {
        let page = match self.gate.upgrade() {
            Some(inner) => Gate { inner }.pending_page(None, LAGGED_SNAPSHOT_LIMIT),
            None => PendingPage { requests: Vec::new(), next: None },
        };
        Lagged { missed, pending: page.requests, more: page.next }
    }
}

impl tokio_stream::Stream for Subscription {
    type Item = Result<Event, Lagged>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
        match std::pin::Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(e))) => Poll::Ready(Some(Ok(e))),
            Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => Poll::Ready(Some(Err(self.lagged(n)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(inner) = self.gate.upgrade() else { return };
        let was_last = inner.subscribers.fetch_sub(1, Ordering::SeqCst) == 1;
        if was_last && inner.deny_when_unobserved {
            Gate { inner }.cancel_where(|_| true, CancelReason::NoSubscribers);
        }
    }
}
