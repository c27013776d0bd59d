//! Handler-style approvals: a function called for each request, answering through the
//! request handle. The rules every binding shares live here: a handler that fails, panics or
//! returns without answering ends its request as cancelled
//! ([`CancelReason::ApprovalFailed`](crate::CancelReason::ApprovalFailed)): the tool does not run,
//! the model is told the approval step failed (not that a person declined), and the failure's
//! detail goes to the audit log and stderr, never to the model.

use crate::error::Result;
use crate::event::{ConfirmationRequest, ConfirmationResponse, Event, Outcome, Scope};
use crate::gate::Gate;
use crate::store::PendingCursor;
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
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
}

impl std::fmt::Debug for PendingRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingRequest").field("request", &self.request).finish()
    }
}

impl PendingRequest {
    /// A handle for `request` on `gate`.
    pub fn new(gate: Gate, request: Arc<ConfirmationRequest>) -> Self {
        PendingRequest { gate, request }
    }

    /// The request as shown.
    pub fn request(&self) -> &Arc<ConfirmationRequest> {
        &self.request
    }

    /// Approves it as shown, once.
    pub fn approve(&self) -> Result<Outcome> {
        self.gate.respond(ConfirmationResponse::approve(&self.request))
    }

    /// Approves, optionally with edited arguments, for this call or the whole session.
    pub fn approve_with(&self, arguments: Option<Value>, scope: Scope, responder: Option<String>) -> Result<Outcome> {
        let mut r = ConfirmationResponse::approve(&self.request).with_scope(scope);
        r.arguments = arguments;
        r.responder = responder;
        self.gate.respond(r)
    }

    /// Denies, with an optional reason the model will read.
    pub fn deny(&self, reason: Option<String>, responder: Option<String>) -> Result<Outcome> {
        let mut r = ConfirmationResponse::deny(&self.request, reason);
        r.responder = responder;
        self.gate.respond(r)
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
