//! A pending request's waiter and its waiting call share one allocation: what the request needs
//! to be answered (the request, its tool, its deadline) and the one-shot hand-over of its
//! resolution. The waiters table then holds a pointer per request, and a pending call costs one
//! allocation where a table slot plus a channel cost two.

use super::{Resolution, lock};
use crate::event::ConfirmationRequest;
use crate::policy::CompiledTool;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::time::Instant;
use uuid::Uuid;

pub(super) struct Slot {
    pub(super) request: Arc<ConfirmationRequest>,
    /// The tool as it was registered when the request was made (what was shown is what runs).
    pub(super) tool: Arc<CompiledTool>,
    pub(super) deadline: Instant,
    state: Mutex<State>,
}

enum State {
    /// Nothing sent yet; the waiting call's waker once it has polled.
    Open(Option<Waker>),
    /// Boxed: a pending call then holds a pointer, not a whole resolution.
    Sent(Box<Resolution>),
    /// Received; or one side went away (the waiter without sending, the call before receiving).
    Closed,
}

/// The claiming side: in the waiters table until someone claims the request and sends its
/// resolution. Dropped without sending, its waiting call learns that nothing will come.
pub(super) struct Waiter(Arc<Slot>);

/// The waiting side, held by the call (`Confirm`). Dropped, a later send fails: the call is gone.
pub(crate) struct Waiting(Arc<Slot>);

/// A new request's waiter and the call's end of it.
pub(super) fn pair(request: Arc<ConfirmationRequest>, tool: Arc<CompiledTool>, deadline: Instant) -> (Waiter, Waiting) {
    let slot = Arc::new(Slot { request, tool, deadline, state: Mutex::new(State::Open(None)) });
    (Waiter(slot.clone()), Waiting(slot))
}

impl std::ops::Deref for Waiter {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.0
    }
}

impl Waiter {
    /// Hands the waiting call its resolution; `Err` gives it back when the call is gone.
    pub(super) fn send(&self, res: Box<Resolution>) -> Result<(), Box<Resolution>> {
        let mut state = lock(&self.0.state);
        // One send per waiter, so not `Sent`; `Closed`: the call is gone.
        let State::Open(waker) = &mut *state else { return Err(res) };
        let waker = waker.take();
        *state = State::Sent(res);
        drop(state);
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        if let State::Open(waker) = &mut *state {
            let waker = waker.take();
            *state = State::Closed;
            drop(state);
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

impl Slot {
    /// Wakes the waiting call (its deadline passed), if it has polled.
    pub(super) fn wake_call(&self) {
        let waker = match &*lock(&self.state) {
            State::Open(Some(w)) => w.clone(),
            _ => return,
        };
        waker.wake();
    }
}

// A waiter is found by its request's id (kept once, in the request): the waiters table holds
// one pointer per request.
found_by_id!(Waiter, 0.request);

impl Waiting {
    pub(crate) fn id(&self) -> Uuid {
        self.0.request.id
    }
    pub(super) fn slot(&self) -> &Arc<Slot> {
        &self.0
    }
    pub(super) fn timeout_ms(&self) -> u64 {
        self.0.request.timeout_ms
    }

    /// The resolution once sent; `Ready(None)` when the waiter went away without sending.
    pub(super) fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<Option<Box<Resolution>>> {
        let mut state = lock(&self.0.state);
        match std::mem::replace(&mut *state, State::Closed) {
            State::Open(mut waker) => {
                match &waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => waker = Some(cx.waker().clone()),
                }
                *state = State::Open(waker);
                Poll::Pending
            }
            State::Sent(res) => Poll::Ready(Some(res)),
            State::Closed => Poll::Ready(None),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // A resolution sent but not received goes with it; a later send fails.
        let old = std::mem::replace(&mut *lock(&self.0.state), State::Closed);
        drop(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::CancelReason;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn pair_for_test() -> (Waiter, Waiting) {
        let gate = crate::Gate::builder().tool(crate::Tool::builder("t").build()).build().unwrap();
        let tool = gate.tool("t").unwrap();
        let request: ConfirmationRequest = serde_json::from_value(serde_json::json!({
            "id": Uuid::new_v4(), "tool": "t", "description": "", "arguments": {}, "prompt": "",
            "arguments_digest": format!("sha256:{}", "0".repeat(64)), "session_id": "s", "editable": false, "reasons": [],
            "timeout_ms": 1000, "deadline_ms": 2000, "created_at_ms": 1000
        }))
        .unwrap();
        pair(Arc::new(request), tool, Instant::now())
    }

    fn cancelled() -> Box<Resolution> {
        Box::new(Resolution::Cancelled(CancelReason::Aborted))
    }

    #[test]
    fn a_sent_resolution_wakes_the_call_and_is_received_once() {
        let (waiter, mut waiting) = pair_for_test();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(waiting.poll_answer(&mut cx).is_pending());
        assert!(waiter.send(cancelled()).is_ok());
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the waiting call is woken by the send");
        assert!(waiter.send(cancelled()).is_err(), "a second send is refused");
        drop(waiter);
        assert!(matches!(waiting.poll_answer(&mut cx), Poll::Ready(Some(r)) if matches!(*r, Resolution::Cancelled(_))));
        assert!(matches!(waiting.poll_answer(&mut cx), Poll::Ready(None)), "received once");
    }

    #[test]
    fn a_waiter_dropped_unsent_ends_the_wait_and_wakes_it() {
        let (waiter, mut waiting) = pair_for_test();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(waiting.poll_answer(&mut cx).is_pending());
        drop(waiter);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(matches!(waiting.poll_answer(&mut cx), Poll::Ready(None)), "nothing will come: fail safe");
    }

    #[test]
    fn a_send_to_a_call_that_went_away_is_given_back() {
        let (waiter, waiting) = pair_for_test();
        drop(waiting);
        let back = waiter.send(cancelled());
        assert!(back.is_err(), "the claimer must learn the call is gone (it then records `aborted`)");
    }
}
