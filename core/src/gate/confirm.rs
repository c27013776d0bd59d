//! The [`Confirm`] future: publish, wait for a decision or the deadline, cancel on drop.

use super::{Gate, Inserting, Prepared, Resolution, Settling, TimeOut, Waiting};
use crate::error::Result;
use crate::event::CancelReason;
use crate::gate::{ApprovedBy, Decision, ToolCall};
use crate::policy::CompiledTool;
use crate::store::RecordState;
use std::sync::Arc;

impl Gate {
    /// Asks for approval when the call needs it and waits for the decision.
    ///
    /// Returns at once, without touching the bus, when the call needs no approval. Otherwise
    /// publishes a `confirmation-request` and waits until a person answers, the deadline
    /// passes, the gate shuts down, every subscriber goes away, or this future is dropped;
    /// every one of those except an explicit approval is a decision not to run.
    ///
    /// Poll it inside a tokio runtime with time enabled. The gate keeps one timer for every
    /// waiting call, a task on the runtime of the first call that waits; if that runtime shuts
    /// down, the next call it wakes starts the timer again on its own runtime.
    ///
    /// Errors (the call is refused, nothing is asked): `malformed` (arguments or metadata nested
    /// deeper than [`json::MAX_NESTING`](crate::json::MAX_NESTING)), `unknown_tool`, `invalid_arguments`,
    /// `store`.
    pub fn confirm(&self, call: ToolCall) -> Confirm<'_> {
        self.confirm_future(None, call, true)
    }

    /// [`confirm`](Self::confirm) as a `'static` future that holds its own handle of the gate
    /// (as tokio's `acquire_owned`): for a caller that boxes or spawns it without keeping the
    /// gate alongside. The gate stays alive while the future does.
    pub fn confirm_owned(&self, call: ToolCall) -> Confirm<'static> {
        Confirm {
            gate: GateRef::Owned(self.clone()),
            hand_off: true,
            state: ConfirmState::Start { tool: None, call: Some(Box::new(call)) },
        }
    }

    /// `confirm` with the tool already looked up (used by `execute`).
    pub(crate) fn confirm_tool(&self, tool: Arc<CompiledTool>, call: ToolCall) -> Confirm<'_> {
        self.confirm_future(Some(tool), call, false)
    }
}

pin_project_lite::pin_project! {
    /// The future returned by [`Gate::confirm`]. Lazy: nothing is checked or published until it
    /// is first polled. Dropping it while its request is pending cancels the request
    /// ([`CancelReason::Aborted`]), which denies.
    #[must_use = "a confirmation does nothing unless awaited"]
    pub struct Confirm<'a> {
        gate: GateRef<'a>,
        // `confirm` hands an approval to its caller (recorded as `released`); `execute` runs it.
        hand_off: bool,
        #[pin]
        state: ConfirmState,
    }

    impl PinnedDrop for Confirm<'_> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            match this.state.project() {
                ConfirmStateProj::Waiting { waiting, queued, .. } => {
                    this.gate.inner.timer.forget(waiting.slot(), queued);
                    this.gate.cancel(waiting.id(), CancelReason::Aborted);
                }
                ConfirmStateProj::Inserting { ins: Some(ins) } => this.gate.abandon(ins),
                _ => {}
            }
        }
    }
}

/// The gate a [`Confirm`] works for: borrowed from its caller, or its own handle.
enum GateRef<'a> {
    Borrowed(&'a Gate),
    Owned(Gate),
}

impl std::ops::Deref for GateRef<'_> {
    type Target = Gate;
    fn deref(&self) -> &Gate {
        match self {
            GateRef::Borrowed(g) => g,
            GateRef::Owned(g) => g,
        }
    }
}

pin_project_lite::pin_project! {
    /// Start and wait share storage: a pending confirmation carries only what the wait needs
    /// (56 bytes in all: what the other states need more is boxed, and the deadline's timer is
    /// the gate's, shared by every waiting call).
    #[project = ConfirmStateProj]
    enum ConfirmState {
        Start { tool: Option<Arc<CompiledTool>>, call: Option<Box<ToolCall>> },
        Inserting { ins: Option<Box<Inserting>> },
        /// `queued`: in the gate's timer queue. `retry`: a later look at a deadline a shared
        /// store's clock had not reached yet. `timing`: a shared store's timeout, decided on a
        /// blocking thread (database round trips), never inside this poll.
        Waiting {
            waiting: Waiting,
            queued: bool,
            retry: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
            timing: Option<tokio::task::JoinHandle<TimeOut>>,
        },
        /// Decided; the store is committing the final record (`timed_out`, `released`).
        Settling { settling: Settling, decision: Option<Box<Decision>> },
        Done,
    }
}

impl ConfirmState {
    fn waiting(w: Waiting) -> Self {
        ConfirmState::Waiting { waiting: w, queued: false, retry: None, timing: None }
    }
}

impl Gate {
    fn confirm_future(&self, tool: Option<Arc<CompiledTool>>, call: ToolCall, hand_off: bool) -> Confirm<'_> {
        Confirm {
            gate: GateRef::Borrowed(self),
            hand_off,
            state: ConfirmState::Start { tool, call: Some(Box::new(call)) },
        }
    }

    /// Waits for a request that is already published (a recovered one).
    pub(super) fn resume(&self, waiting: Waiting) -> Confirm<'_> {
        Confirm { gate: GateRef::Borrowed(self), hand_off: false, state: ConfirmState::waiting(waiting) }
    }
}

impl Gate {
    /// What the deadline means for a waiting call, once it passed (`due`): `None` while that is
    /// not known yet. With a shared store the store's clock decides (`time_out_shared`: database
    /// round trips), so that runs on a blocking thread, polled through `timing`.
    fn deadline_passed(
        &self,
        id: uuid::Uuid,
        due: bool,
        timing: &mut Option<tokio::task::JoinHandle<TimeOut>>,
        cx: &mut std::task::Context<'_>,
    ) -> Option<TimeOut> {
        use std::task::Poll;
        if let Some(h) = timing.as_mut() {
            let decided = match std::pin::Pin::new(h).poll(cx) {
                Poll::Pending => return None,
                Poll::Ready(r) => r,
            };
            *timing = None;
            // A panic there decided nothing: look again shortly.
            return Some(decided.unwrap_or(TimeOut::RetryIn(std::time::Duration::from_millis(50))));
        }
        if !due {
            return None;
        }
        if self.inner.store.is_shared()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let gate = self.clone();
            *timing = Some(rt.spawn_blocking(move || gate.time_out(id)));
            // Polled at once, so its waker is registered.
            return self.deadline_passed(id, false, timing, cx);
        }
        Some(self.time_out(id))
    }
}

impl std::future::Future for Confirm<'_> {
    type Output = Result<Decision>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let mut this = self.project();
        if let ConfirmStateProj::Settling { settling, decision } = this.state.as_mut().project() {
            if settling.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let d = *decision.take().expect("`Confirm` polled after completion");
            this.state.set(ConfirmState::Done);
            return Poll::Ready(Ok(d));
        }
        // The call's own arguments, while this poll has them (see `Gate::prepare`).
        let mut original = None;
        if let ConfirmStateProj::Start { tool, call } = this.state.as_mut().project() {
            let (tool, call) = (tool.take(), *call.take().expect("`Confirm` polled after completion"));
            let prepared = match tool {
                Some(t) => Ok(t),
                None => this.gate.tool(&call.tool),
            }
            .and_then(|t| this.gate.prepare(t, call, &mut original));
            match prepared {
                Err(e) => {
                    this.state.set(ConfirmState::Done);
                    return Poll::Ready(Err(e));
                }
                Ok(Prepared::Done(d)) => {
                    this.state.set(ConfirmState::Done);
                    return Poll::Ready(Ok(d));
                }
                Ok(Prepared::Wait(w)) => {
                    this.state.set(ConfirmState::waiting(w));
                }
                Ok(Prepared::Insert(ins)) => this.state.set(ConfirmState::Inserting { ins: Some(Box::new(ins)) }),
            }
        }
        if let ConfirmStateProj::Inserting { ins } = this.state.as_mut().project() {
            let stored = match ins.as_mut().expect("`Confirm` polled after completion").stored.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            };
            let ins = *ins.take().expect("checked above");
            if let Err(e) = this.gate.inserted(&ins, stored) {
                this.state.set(ConfirmState::Done);
                return Poll::Ready(Err(e));
            }
            this.state.set(ConfirmState::waiting(ins.waiting));
        }
        let ConfirmStateProj::Waiting { waiting: w, queued, retry, timing } = this.state.as_mut().project() else {
            panic!("`Confirm` polled after completion");
        };
        let mut settling = None;
        // While a shared store's timeout is being decided, its outcome comes first: the call that
        // times out takes the waiter (and its sender) with it.
        let received = if timing.is_some() { Poll::Pending } else { w.poll_answer(cx) };
        let resolution = match received {
            Poll::Ready(Some(res)) => *res,
            // The waiter is only dropped unsent by a call that decides itself; fail safe regardless.
            Poll::Ready(None) => Resolution::Cancelled(CancelReason::Aborted),
            Poll::Pending => {
                let due = timing.is_none()
                    && match retry.as_mut() {
                        Some(s) => s.as_mut().poll(cx).is_ready(),
                        None => this.gate.inner.timer.due(w.slot(), queued),
                    };
                match this.gate.deadline_passed(w.id(), due, timing, cx) {
                    None => return Poll::Pending,
                    Some(TimeOut::Now(r, s)) => {
                        settling = s;
                        r
                    }
                    // A shared store's clock is behind ours: wait until its deadline.
                    Some(TimeOut::RetryIn(d)) => {
                        let s = retry.insert(Box::pin(tokio::time::sleep(d)));
                        if s.as_mut().poll(cx).is_ready() {
                            cx.waker().wake_by_ref();
                        }
                        return Poll::Pending;
                    }
                    // Someone claimed it just before the deadline (possibly on another thread)
                    // and is about to send: wait for what they send.
                    Some(TimeOut::Elsewhere) => {
                        *retry = None;
                        match w.poll_answer(cx) {
                            Poll::Ready(Some(r)) => *r,
                            Poll::Ready(None) => Resolution::Cancelled(CancelReason::Aborted),
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                }
            }
        };
        this.gate.inner.timer.forget(w.slot(), queued);
        let (id, timeout_ms) = (w.id(), w.timeout_ms());
        let decision = match resolution {
            Resolution::Approved { arguments, edited, scope, responder } => {
                if *this.hand_off {
                    settling = this.gate.record_final(id, RecordState::Released);
                }
                // Approved as shown: the arguments the call came with (still here when it was
                // answered in this poll), or the request's, which are the same text.
                let arguments = arguments.or(original).unwrap_or_else(|| w.slot().request.arguments.value());
                Decision::Approved { request_id: Some(id), arguments, edited, by: ApprovedBy::Person, scope, responder }
            }
            Resolution::Denied { reason, responder } => Decision::Denied { request_id: id, reason, responder },
            Resolution::TimedOut => Decision::TimedOut { request_id: id, timeout_ms },
            Resolution::Cancelled(reason) => Decision::Cancelled { request_id: Some(id), reason },
        };
        // Resolved: leaving the Waiting state disarms the cancel-on-drop.
        if let Some(mut s) = settling
            && s.as_mut().poll(cx).is_pending()
        {
            // What the call returns is what the store says: wait for its final record.
            this.state.set(ConfirmState::Settling { settling: s, decision: Some(Box::new(decision)) });
            return Poll::Pending;
        }
        this.state.set(ConfirmState::Done);
        Poll::Ready(Ok(decision))
    }
}
