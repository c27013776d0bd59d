//! The event bus: subscriptions, lag and re-sync.

use super::{Gate, Inner, lock};
use crate::event::{CancelReason, ConfirmationRequest, Event, EventTypes};
use crate::store::PendingCursor;
use futures_util::task::AtomicWaker;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

impl Gate {
    /// Subscribes to the bus as an **approver**: someone who shows requests to a person (or
    /// decides them) and answers with [`respond`](Self::respond). Events published from now on are
    /// delivered in order; a subscriber that falls more than the bus capacity behind receives one
    /// [`Lagged`] carrying the oldest pending requests, then continues with the newest events.
    ///
    /// While at least one approver is attached (an approver subscription, an
    /// [`on_request`](Self::on_request) handler, an [`on_request_inline`](Self::on_request_inline)
    /// approver), gated calls wait for an answer; with none, on a gate built with
    /// `deny_when_unobserved(true)` (the default), they are cancelled at once
    /// ([`CancelReason::NoApprover`]). A logger or a display that never answers should
    /// [`observe`](Self::observe) instead.
    pub fn subscribe(&self) -> Subscription {
        self.subscription(true)
    }

    /// Subscribes to the bus as an **observer**: it receives every event, like
    /// [`subscribe`](Self::subscribe), but does not count as someone who can answer, so it never
    /// keeps a gated call waiting for nobody.
    pub fn observe(&self) -> Subscription {
        self.subscription(false)
    }

    fn subscription(&self, approver: bool) -> Subscription {
        if approver {
            self.inner.approvers.fetch_add(1, Ordering::SeqCst);
        }
        let signal = Arc::new(CloseSignal::default());
        {
            let mut subs = lock(&self.inner.subscriptions);
            subs.retain(|s| s.strong_count() > 0);
            subs.push(Arc::downgrade(&signal));
        }
        // Subscribed after a close: ends at once.
        if self.is_closed() {
            signal.gate_closed.store(true, Ordering::SeqCst);
        }
        Subscription {
            inner: tokio_stream::wrappers::BroadcastStream::new(self.inner.bus.subscribe()),
            gate: Arc::downgrade(&self.inner),
            approver,
            signal,
            types: EventTypes::ALL,
        }
    }

    /// How many approvers are attached: approver [`Subscription`]s, [`on_request`](Self::on_request)
    /// handlers and [`on_request_inline`](Self::on_request_inline) approvers (observers do not
    /// count). 0 once the gate is closed: nothing is asked any more, so nobody attached then or
    /// later is an approver, whatever the language registered it from.
    pub fn approver_count(&self) -> usize {
        if self.is_closed() { 0 } else { self.inner.approvers.load(Ordering::SeqCst) }
    }

    /// One approver went away (a subscription dropped or closed, a handler stopped): when it was
    /// the last, every pending request is cancelled ([`CancelReason::NoApprover`]) unless the gate
    /// lets requests wait for answers from elsewhere.
    pub(crate) fn approver_left(inner: Arc<Inner>) {
        let was_last = inner.approvers.fetch_sub(1, Ordering::SeqCst) == 1;
        // With a shared store, approvers are elsewhere by design.
        if was_last && inner.deny_when_unobserved && !inner.store.is_shared() {
            Gate { inner }.cancel_where(|_| true, CancelReason::NoApprover);
        }
    }

    /// Ends every subscription once it has delivered what was published before the close.
    pub(super) fn end_subscriptions(&self) {
        let subs = std::mem::take(&mut *lock(&self.inner.subscriptions));
        for s in subs.iter().filter_map(Weak::upgrade) {
            s.gate_closed.store(true, Ordering::SeqCst);
            s.waker.wake();
        }
    }
}

#[derive(Default)]
pub(crate) struct CloseSignal {
    /// Closed by its owner ([`SubscriptionCloser::close`]): ends at once.
    closed: AtomicBool,
    /// The gate closed: ends after the events already buffered.
    gate_closed: AtomicBool,
    /// The approver count was given back (once, by close or drop).
    released: AtomicBool,
    waker: AtomicWaker,
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

impl PendingPage {
    /// The largest page size a caller may ask for: `u32::MAX` (a page holds at most what is
    /// pending, so the bound is only what every language can say).
    pub const MAX_LIMIT: u64 = u32::MAX as u64;

    /// A page size as a caller gives it, as a number in its own language: a whole number from 1
    /// to [`MAX_LIMIT`](Self::MAX_LIMIT), else [`Error::Malformed`](crate::Error::Malformed)
    /// naming `what` (the same rule for every binding).
    ///
    /// ```
    /// use signoff::{ErrorKind, PendingPage};
    /// assert_eq!(PendingPage::limit(500.0, "limit").unwrap(), 500);
    /// for bad in [0.0, -1.0, 1.5, f64::NAN, 4294967296.0] {
    ///     assert_eq!(PendingPage::limit(bad, "limit").unwrap_err().kind(), ErrorKind::Malformed);
    /// }
    /// ```
    pub fn limit(n: f64, what: &str) -> crate::Result<usize> {
        if n.fract() == 0.0 && (1.0..=Self::MAX_LIMIT as f64).contains(&n) {
            return Ok(n as usize);
        }
        Err(crate::Error::Malformed(format!("{what} must be a whole number from 1 to {}, not {n}", Self::MAX_LIMIT)))
    }
}

/// A subscriber fell behind and missed `missed` events. Re-sync (de-duplicating by id) from
/// `pending`, the oldest requests pending when this was noticed, and, when `more` is set, from
/// [`Gate::pending_page`] starting at `more`.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
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

/// A stream of bus events ([`Gate::subscribe`], [`Gate::observe`]). It ends (`None`) when it is
/// closed ([`close`](Self::close), a [`SubscriptionCloser`]), and after the gate closes, once it
/// has delivered the events published before. Dropping or closing an approver subscription
/// detaches that approver: when it was the last one, on a gate built with
/// `deny_when_unobserved(true)`, every pending request is cancelled ([`CancelReason::NoApprover`]).
pub struct Subscription {
    inner: tokio_stream::wrappers::BroadcastStream<Event>,
    gate: Weak<Inner>,
    approver: bool,
    signal: Arc<CloseSignal>,
    types: EventTypes,
}

/// How many unwanted events one poll of a filtered [`Subscription`] skips before it yields (and
/// asks to be polled again), so a flood of them never holds its task.
const SKIP_BUDGET: usize = 256;

/// Closes a [`Subscription`] from anywhere (another task, another thread, a host callback): a
/// `recv` waiting on it returns `None` at once. Cheap to clone.
#[derive(Clone)]
pub struct SubscriptionCloser {
    signal: Arc<CloseSignal>,
    gate: Weak<Inner>,
    approver: bool,
}

impl SubscriptionCloser {
    /// Ends the subscription (idempotent).
    pub fn close(&self) {
        self.signal.close(&self.gate, self.approver);
    }
}

impl CloseSignal {
    fn close(&self, gate: &Weak<Inner>, approver: bool) {
        self.closed.store(true, Ordering::SeqCst);
        self.waker.wake();
        self.release(gate, approver);
    }

    fn release(&self, gate: &Weak<Inner>, approver: bool) {
        if approver
            && !self.released.swap(true, Ordering::SeqCst)
            && let Some(inner) = gate.upgrade()
        {
            Gate::approver_left(inner);
        }
    }
}

impl Subscription {
    /// A handle that closes this subscription from elsewhere.
    pub fn closer(&self) -> SubscriptionCloser {
        SubscriptionCloser { signal: self.signal.clone(), gate: self.gate.clone(), approver: self.approver }
    }

    /// Ends this subscription now (idempotent).
    pub fn close(&self) {
        self.signal.close(&self.gate, self.approver);
    }

    /// Delivers only events of `types` from now on (a [`Lagged`] marker is always delivered: what
    /// it reports is missed events of any type). Other events are passed over inside the poll:
    /// the reader never receives them.
    ///
    /// ```
    /// # use signoff::{EventTypes, Gate};
    /// # let gate = Gate::builder().build().unwrap();
    /// let requests = gate.subscribe().only(EventTypes::REQUEST);
    /// # drop(requests);
    /// ```
    pub fn only(mut self, types: EventTypes) -> Self {
        self.types = types;
        self
    }

    /// The event types delivered ([`only`](Self::only)).
    pub fn types(&self) -> EventTypes {
        self.types
    }

    /// True for an approver subscription ([`Gate::subscribe`]), false for an observer.
    pub fn is_approver(&self) -> bool {
        self.approver
    }

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
        if self.signal.closed.load(Ordering::SeqCst) {
            return Poll::Ready(None);
        }
        self.signal.waker.register(cx.waker());
        for _ in 0..SKIP_BUDGET {
            return match std::pin::Pin::new(&mut self.inner).poll_next(cx) {
                _ if self.signal.closed.load(Ordering::SeqCst) => Poll::Ready(None),
                Poll::Ready(Some(Ok(e))) if !self.types.contains(EventTypes::of(&e)) => continue,
                Poll::Ready(Some(Ok(e))) => Poll::Ready(Some(Ok(e))),
                Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => Poll::Ready(Some(Err(self.lagged(n)))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending if self.signal.gate_closed.load(Ordering::SeqCst) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.signal.release(&self.gate, self.approver);
    }
}
