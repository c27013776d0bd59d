//! Handing requests to approvers: a handler run as a task per request
//! ([`Gate::on_request`]), or an approver called in the publishing context
//! ([`Gate::on_request_inline`]), each answering through a [`PendingRequest`]. The rules every
//! binding shares live here: a handler that fails, panics or
//! returns without answering ends its request as cancelled
//! ([`CancelReason::ApprovalFailed`](crate::CancelReason::ApprovalFailed)): the tool does not run,
//! the model is told the approval step failed (not that a person declined), and the failure's
//! detail goes to the audit log and stderr, never to the model.

use crate::error::Result;
use crate::event::{ConfirmationRequest, ConfirmationResponse, Event, Outcome, ResponseDecision, Scope};
use crate::gate::{Gate, Inner};
use crate::store::PendingCursor;
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use uuid::Uuid;

/// The responder named in the audit record of a failed approval step (a handler that failed,
/// panicked or returned without answering).
pub const HANDLER_RESPONDER: &str = "signoff:handler";

/// A pending request and the means to answer it, bound to that request (id, tool, digest,
/// session are filled in for you).
#[derive(Clone)]
pub struct PendingRequest {
    gate: Gate,
    request: Arc<ConfirmationRequest>,
    /// Set on the handles given to inline approvers: the last clone to go away unanswered ends
    /// the approval step as failed.
    _duty: Option<Arc<Duty>>,
}

/// The obligation to answer, carried by the handles given to an inline approver.
struct Duty {
    gate: Weak<Inner>,
    id: Uuid,
}

impl Drop for Duty {
    fn drop(&mut self) {
        if let Some(inner) = self.gate.upgrade() {
            Gate { inner }.fail_approval(&self.id, "the approver let go of the request without answering");
        }
    }
}

impl std::fmt::Debug for PendingRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingRequest").field("request", &self.request).finish()
    }
}

impl PendingRequest {
    /// A handle for `request` on `gate`.
    pub fn new(gate: Gate, request: Arc<ConfirmationRequest>) -> Self {
        PendingRequest { gate, request, _duty: None }
    }

    /// A handle that carries the obligation to answer: when its last clone is dropped while the
    /// request is still pending, the approval step has failed
    /// ([`CancelReason::ApprovalFailed`](crate::CancelReason::ApprovalFailed)). This is the handle
    /// [`Gate::on_request_inline`] approvers receive.
    pub fn with_duty(gate: Gate, request: Arc<ConfirmationRequest>) -> Self {
        let duty = Arc::new(Duty { gate: Arc::downgrade(&gate.inner), id: request.id });
        PendingRequest { gate, request, _duty: Some(duty) }
    }

    /// The request as shown.
    pub fn request(&self) -> &Arc<ConfirmationRequest> {
        &self.request
    }

    /// Approves it as shown, once.
    pub fn approve(&self) -> Result<Outcome> {
        self.gate.respond_for(&self.request, ConfirmationResponse::by_id(self.request.id, ResponseDecision::Approve))
    }

    /// Approves, optionally with edited arguments, for this call or the whole session.
    pub fn approve_with(&self, arguments: Option<Value>, scope: Scope, responder: Option<String>) -> Result<Outcome> {
        let mut r = ConfirmationResponse::by_id(self.request.id, ResponseDecision::Approve).with_scope(scope);
        r.arguments = arguments;
        r.responder = responder;
        self.gate.respond_for(&self.request, r)
    }

    /// Denies, with an optional reason the model will read.
    pub fn deny(&self, reason: Option<String>, responder: Option<String>) -> Result<Outcome> {
        let mut r = ConfirmationResponse::by_id(self.request.id, ResponseDecision::Deny);
        r.reason = reason;
        r.responder = responder;
        self.gate.respond_for(&self.request, r)
    }

    /// Ends the approval step as failed
    /// ([`CancelReason::ApprovalFailed`](crate::CancelReason::ApprovalFailed)): the tool does not
    /// run, the model is told the approval step failed, and `detail` goes to the audit log and
    /// stderr only. For a host approver that raised or rejected. Returns whether it was still
    /// pending.
    pub fn fail(&self, detail: &str) -> bool {
        self.gate.fail_approval(&self.request.id, detail)
    }

    /// True while nobody has answered and it has not timed out or been cancelled.
    pub fn is_pending(&self) -> bool {
        self.gate.pending_request(&self.request.id).is_some()
    }
}

/// Called once per request. Answer through the [`PendingRequest`]; the returned future's
/// `Err(message)` means the handler failed.
pub type RequestHandler =
    Arc<dyn Fn(PendingRequest) -> BoxFuture<'static, std::result::Result<(), String>> + Send + Sync>;

/// An approver called in the publishing context ([`Gate::on_request_inline`]).
pub type InlineApprover = Arc<dyn Fn(PendingRequest) + Send + Sync>;

/// Keeps an inline approver attached; dropping it (or [`stop`](Self::stop)) detaches it. When it
/// was the last approver, pending requests are cancelled
/// ([`CancelReason::NoApprover`](crate::CancelReason::NoApprover)) on a gate built with
/// `deny_when_unobserved(true)`.
#[must_use = "the approver is detached when this guard is dropped"]
pub struct ApproverGuard {
    gate: Weak<Inner>,
    id: u64,
    stopped: std::sync::atomic::AtomicBool,
}

impl ApproverGuard {
    /// Detaches the approver now (idempotent). Requests it already holds stay its to answer.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(inner) = self.gate.upgrade() else { return };
        {
            let mut list = inner.inline.write().unwrap_or_else(|e| e.into_inner());
            let kept: Vec<_> = list.iter().filter(|(id, _)| *id != self.id).cloned().collect();
            *list = Arc::from(kept);
        }
        Gate::approver_left(inner);
    }
}

impl Drop for ApproverGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Keeps a handler registered; dropping it (or calling [`stop`](Self::stop)) unregisters the
/// handler, and with it its subscription.
pub struct HandlerGuard {
    task: tokio::task::JoinHandle<()>,
}

impl HandlerGuard {
    /// Unregisters the handler now. Handler calls already running are not cancelled.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for HandlerGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Gate {
    /// Attaches an approver that the gate calls **in the publishing context**: inside the
    /// `confirm` / `execute` poll that made the request (or inside `recover` for a restored one),
    /// once per request, with a [`PendingRequest`] that carries the duty to answer. Requests
    /// already pending are handed to it now, in this call.
    ///
    /// This is the fast path: an approver that answers before it returns (an automatic policy,
    /// a binding answering a synchronous host callback) resolves the call with no task and no
    /// thread hop. It **must not block**: a binding that runs host code asynchronously keeps the
    /// handle, returns at once, and answers (or calls [`PendingRequest::fail`]) later. Fail-safe:
    /// if it panics, or every clone of the handle is dropped while the request is pending, the
    /// approval step has failed ([`CancelReason::ApprovalFailed`](crate::CancelReason::ApprovalFailed)).
    ///
    /// Counts as an approver (see [`Gate::subscribe`]) until the guard is dropped.
    pub fn on_request_inline(&self, approver: impl Fn(PendingRequest) + Send + Sync + 'static) -> ApproverGuard {
        let approver: InlineApprover = Arc::new(approver);
        let id = self.inner.next_inline.fetch_add(1, Ordering::Relaxed);
        self.inner.approvers.fetch_add(1, Ordering::SeqCst);
        {
            let mut list = self.inner.inline.write().unwrap_or_else(|e| e.into_inner());
            let mut v: Vec<_> = list.iter().cloned().collect();
            v.push((id, approver.clone()));
            *list = Arc::from(v);
        }
        self.for_each_pending(None, |req| self.call_inline(&approver, req));
        ApproverGuard { gate: Arc::downgrade(&self.inner), id, stopped: Default::default() }
    }

    /// Hands a new request to every inline approver (no lock held).
    pub(crate) fn dispatch_inline(&self, request: &Arc<ConfirmationRequest>) {
        let list = self.inner.inline.read().unwrap_or_else(|e| e.into_inner()).clone();
        for (_, approver) in list.iter() {
            self.call_inline(approver, request.clone());
        }
    }

    fn call_inline(&self, approver: &InlineApprover, request: Arc<ConfirmationRequest>) {
        let id = request.id;
        let handle = PendingRequest::with_duty(self.clone(), request);
        // Kept until the approver has returned, so a panic is reported as one.
        let keep = handle.clone();
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| approver(handle))).is_err() {
            self.fail_approval(&id, "the approver panicked");
        }
        drop(keep);
    }

    /// Calls `handler` for every request from now on (and for every request already pending),
    /// each in its own task. When the handler's future completes while the request is still
    /// pending, the approval step has failed: the request is cancelled
    /// ([`CancelReason::ApprovalFailed`](crate::CancelReason::ApprovalFailed)) whatever the
    /// gate's authenticator allows, so it never waits for its deadline. The detail ("the approval
    /// handler returned without answering", "the approval handler failed: ...", "the approval
    /// handler panicked") is written to the audit log and stderr.
    ///
    /// Must be called within a tokio runtime.
    pub fn on_request(&self, handler: RequestHandler) -> HandlerGuard {
        let mut sub = self.subscribe();
        let gate = self.clone();
        let task = tokio::spawn(async move {
            let mut seen: HashSet<Uuid> = HashSet::new();
            let dispatch = |req: Arc<ConfirmationRequest>, seen: &mut HashSet<Uuid>| {
                if seen.insert(req.id) {
                    tokio::spawn(run_handler(gate.clone(), handler.clone(), req));
                }
            };
            gate.for_each_pending(None, |req| dispatch(req, &mut seen));
            while let Some(item) = sub.recv().await {
                match item {
                    Ok(Event::ConfirmationRequest(req)) => dispatch(req, &mut seen),
                    Ok(Event::ConfirmationResolved(r)) => {
                        seen.remove(&r.id);
                    }
                    Ok(_) => {}
                    Err(lagged) => {
                        // Re-sync, a page at a time: forget what resolved meanwhile, handle what
                        // is pending and not handled yet.
                        seen.retain(|id| gate.pending_request(id).is_some());
                        let more = lagged.more;
                        for req in lagged.pending {
                            dispatch(req, &mut seen);
                        }
                        if let Some(after) = more {
                            gate.for_each_pending(Some(after), |req| dispatch(req, &mut seen));
                        }
                    }
                }
            }
        });
        HandlerGuard { task }
    }
}

impl Gate {
    /// Calls `f` for every pending request after `after`, oldest first, a page at a time (no lock
    /// is held while `f` runs).
    fn for_each_pending(&self, mut after: Option<PendingCursor>, mut f: impl FnMut(Arc<ConfirmationRequest>)) {
        loop {
            let page = self.pending_page(after.as_ref(), 1024);
            page.requests.into_iter().for_each(&mut f);
            match page.next {
                Some(next) => after = Some(next),
                None => return,
            }
        }
    }
}

async fn run_handler(gate: Gate, handler: RequestHandler, req: Arc<ConfirmationRequest>) {
    use futures_util::FutureExt;
    let pending = PendingRequest::new(gate.clone(), req.clone());
    let fut = std::panic::AssertUnwindSafe(async { handler(pending).await }).catch_unwind();
    let reason = match fut.await {
        Ok(Ok(())) => "the approval handler returned without answering".to_owned(),
        Ok(Err(e)) => format!("the approval handler failed: {e}"),
        Err(_) => "the approval handler panicked".to_owned(),
    };
    // Fail safe. A concurrent answer may win this race; either way exactly one counts.
    gate.fail_approval(&req.id, &reason);
}
