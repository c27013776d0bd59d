//! Answering a pending request: every check a response passes before it counts.

use super::{Claimed, Gate, Resolution, decision_str, lock};
use crate::audit::{AuditKind, AuditRecord};
use crate::error::{Error, Result};
use crate::event::{
    CancelReason, ConfirmationRequest, ConfirmationResponse, Event, Outcome, ResponseDecision, Scope, now_ms,
};
use crate::store::{Completion, OwnedStateChange, RecordState, StateChange};

use std::sync::Arc;
use tokio::time::Instant;
use uuid::Uuid;

thread_local! {
    /// Set on the thread [`Gate::off_thread`] answers on: there the answer is recorded before
    /// the call returns (`respond_async` resolves once it is recorded).
    static RECORD_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Where [`Gate::apply`]'s answer stands when the store records it on a thread of its own.
enum Answer {
    Recording,
    /// Recorded before `apply` returned: its result is `apply`'s.
    Recorded(Result<Outcome>),
    /// `apply` returned first; a failure to record is reported where it happens.
    Returned,
}

/// Sets [`RECORD_HERE`] for its lifetime (also when the answer panics: the thread is reused).
struct RecordHere;

impl RecordHere {
    fn set() -> Self {
        RECORD_HERE.with(|h| h.set(true));
        RecordHere
    }
}

impl Drop for RecordHere {
    fn drop(&mut self) {
        RECORD_HERE.with(|h| h.set(false));
    }
}

impl Gate {
    /// Answers a pending request.
    ///
    /// The first valid response wins; the request resolves and its `confirm` returns. A rejected
    /// response leaves the request exactly as it was. Errors: `unknown_request`,
    /// `already_resolved`, `expired`, `mismatch` (tool, digest or session differ from the
    /// request), `unauthorized`, `edits_not_allowed`, `invalid_arguments` (edited arguments
    /// fail the schema), `malformed` (e.g. edited arguments on a denial), `closed`.
    ///
    /// The answer is recorded before the waiting call acts on it. With SQLite and
    /// `synchronous_full` the commit (a disk sync, up to ~1 ms) happens on the store's writer
    /// thread, not on this one: `Ok` then means the answer passed every check and was accepted,
    /// and should the disk refuse it the call is cancelled and does not run (reported on stderr
    /// and in the audit log). [`respond_async`](Self::respond_async) resolves only once the
    /// answer is recorded. Every other store records it during this call.
    pub fn respond(&self, response: ConfirmationResponse) -> Result<Outcome> {
        self.respond_bound(response, None)
    }

    /// [`respond`](Self::respond) with a response made by a [`PendingRequest`](crate::PendingRequest)
    /// handle for `request`, without its binding fields: the handle holds the request itself,
    /// which binds the answer more tightly than the fields could. They are filled in from
    /// `request` wherever anyone reads the response (the authenticator, the published event, the
    /// audit record of a refusal, another process), so nothing observable differs from a
    /// response that carried them; only the copies nobody reads are not made.
    pub(crate) fn respond_for(
        &self,
        request: &Arc<ConfirmationRequest>,
        response: ConfirmationResponse,
    ) -> Result<Outcome> {
        self.respond_bound(response, Some(request))
    }

    fn respond_bound(
        &self,
        mut response: ConfirmationResponse,
        handle: Option<&Arc<ConfirmationRequest>>,
    ) -> Result<Outcome> {
        if self.answered_elsewhere(&response.id) {
            if let Some(r) = handle {
                fill_binding(&mut response, r);
            }
            return self.respond_elsewhere(response.clone(), None).inspect_err(|e| self.audit_rejected(&response, e));
        }
        let claimed = match self.check_response(&mut response, None, handle) {
            Ok(c) => c,
            Err(e) => {
                if let Some(r) = handle {
                    fill_binding(&mut response, r);
                }
                self.audit_rejected(&response, &e);
                return Err(e);
            }
        };
        self.apply(claimed, response, None)
    }

    /// [`respond`](Self::respond) without holding the caller's thread while the answer is
    /// recorded. With a durable or shared store (a commit to disk, a database round trip) the
    /// answer starts at once on a blocking thread of the current tokio runtime (outside one, on
    /// a thread of its own), and the future resolves once it is recorded; with the in-memory
    /// store it is made during this call and the future is ready. Same outcome and errors as
    /// `respond`. The answer does not depend on the future being polled or kept: once this
    /// returns, it is recorded or refused as `respond` would, and the call it answers goes on.
    pub fn respond_async(
        &self,
        response: ConfirmationResponse,
    ) -> impl std::future::Future<Output = Result<Outcome>> + Send + 'static + use<> {
        let gate = self.clone();
        self.off_thread(move || gate.respond(response))
    }

    /// Starts `answer` (an answer that may wait for the store) where it does not hold the
    /// caller's thread; see [`respond_async`](Self::respond_async).
    pub(super) fn off_thread<F: FnOnce() -> Result<Outcome> + Send + 'static>(
        &self,
        answer: F,
    ) -> impl std::future::Future<Output = Result<Outcome>> + Send + 'static + use<F> {
        use futures_util::future::Either;
        if !self.inner.store.is_durable() && !self.inner.store.is_shared() {
            return Either::Left(std::future::ready(answer()));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = move || {
            // This thread is the caller's stand-in: the answer is recorded here, and the
            // future's result is what the store said.
            let _here = RecordHere::set();
            let _ = tx.send(answer());
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(job)),
            Err(_) => {
                if let Err(e) = std::thread::Builder::new().name("signoff-respond".into()).spawn(job) {
                    let message = format!("could not start a thread for the answer: {e}");
                    return Either::Left(std::future::ready(Err(Error::Io {
                        message,
                        os_error: e.raw_os_error(),
                        path: None,
                    })));
                }
            }
        }
        Either::Right(async move {
            rx.await.unwrap_or_else(|_| Err(Error::Store("the answer stopped before it was recorded".into())))
        })
    }

    /// A shared store holds the request, and another process waits for it.
    pub(super) fn answered_elsewhere(&self, id: &uuid::Uuid) -> bool {
        self.inner.store.is_shared() && !lock(&self.inner.waiters).contains(id)
    }

    fn audit_rejected(&self, response: &ConfirmationResponse, e: &Error) {
        self.audit(|| {
            // Recorded against the request when it is known; the response's claims are in
            // the error message.
            let mut r = match self.inner.store.get(&response.id) {
                Some(req) => AuditRecord::about(AuditKind::ResponseRejected, &req),
                None => {
                    let mut r = AuditRecord::new(AuditKind::ResponseRejected);
                    r.request_id = Some(response.id);
                    r.session_id = response.session_id.clone();
                    r.tool = response.tool.clone();
                    r.arguments_digest = response.arguments_digest.clone();
                    r
                }
            };
            r.edited_arguments = response.arguments.clone();
            r.with_decision(decision_str(response.decision)).with_responder(response.responder.clone()).with_error(e)
        });
    }

    /// Parses a JSON response (see [`ConfirmationResponse::from_json_str`]) and answers with it.
    pub fn respond_json(&self, json: &str) -> Result<Outcome> {
        match ConfirmationResponse::from_json_str(json) {
            Ok(r) => self.respond(r),
            Err(e) => {
                self.audit(|| AuditRecord::new(AuditKind::ResponseRejected).with_error(&e));
                Err(e)
            }
        }
    }

    /// Checks a response against its request and claims the request. Nothing is published or
    /// changed unless this returns `Ok`.
    /// `handle`: the response was made by a handle for this request (see
    /// [`respond_for`](Self::respond_for)); its binding fields are filled in where they are read.
    pub(super) fn check_response(
        &self,
        resp: &mut ConfirmationResponse,
        token: Option<&str>,
        handle: Option<&Arc<ConfirmationRequest>>,
    ) -> Result<Claimed> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        // An edit of `null` is no edit, as `"arguments": null` reads in the JSON form.
        if resp.arguments.as_ref().is_some_and(serde_json::Value::is_null) {
            resp.arguments = None;
        }
        let id = resp.id;
        let (request, tool, deadline) = {
            let waiters = lock(&self.inner.waiters);
            match waiters.get(&id) {
                Some(w) => (w.request.clone(), w.tool.clone(), w.deadline),
                None => {
                    drop(waiters);
                    return Err(self.not_pending(id));
                }
            }
        };
        match handle {
            // The very request the waiter holds.
            Some(r) if Arc::ptr_eq(r, &request) => {}
            Some(r) => {
                fill_binding(resp, r);
                check_binding(&request, resp)?;
            }
            None => check_binding(&request, resp)?,
        }
        // A shared store judges deadlines by its own clock, when the answer is recorded.
        if Instant::now() >= deadline && !self.inner.store.is_shared() {
            return Err(Error::Expired(id));
        }
        if let Some(authenticator) = &self.inner.authenticator {
            if handle.is_some() {
                fill_binding(resp, &request);
            }
            authenticator.authenticate(&request, resp).map_err(|reason| Error::Unauthorized { id, reason })?;
        }

        if let Some(edit) = &resp.arguments {
            crate::json::check(edit, "edited arguments")?;
        }
        let resolution = match resp.decision {
            ResponseDecision::Deny => {
                if resp.arguments.is_some() {
                    return Err(Error::Malformed("a denial cannot carry edited arguments".into()));
                }
                if resp.scope == Scope::Session {
                    return Err(Error::Malformed("scope \"session\" applies to approvals only".into()));
                }
                Resolution::Denied { reason: resp.reason.clone(), responder: resp.responder.clone() }
            }
            ResponseDecision::Approve => {
                let (arguments, edited) = match &resp.arguments {
                    Some(edit) if *edit != request.arguments => {
                        if !request.editable {
                            return Err(Error::EditsNotAllowed(request.tool.to_string()));
                        }
                        tool.validate(edit, "edited")?;
                        (Some(edit.clone()), true)
                    }
                    _ => (None, false),
                };
                Resolution::Approved { arguments, edited, scope: resp.scope, responder: resp.responder.clone() }
            }
        };

        // Claim the request: only one response can remove it.
        let outcome = match resolution {
            Resolution::Approved { .. } => Outcome::Approved,
            _ => Outcome::Denied,
        };
        let Some(waiter) = self.claim_with(&id, outcome, token) else {
            return Err(self.not_pending(id));
        };
        Ok(Claimed { waiter, resolution, handle: handle.is_some() })
    }

    /// Records an accepted response, then publishes it and resolves its request.
    ///
    /// With a local durable store the record is handed to
    /// [`transition_then`](crate::PendingStore::transition_then): SQLite with `synchronous_full`
    /// commits it on its writer thread, so the responding host thread (an inline approver's
    /// `approve()`, a UI's `respond`) never waits for the disk; the waiting call learns of the
    /// answer once it is committed, and an answer that cannot be recorded cancels the call (it
    /// does not run; reported on stderr and in the audit log). Every other store records it
    /// during this call and its refusal is this call's error.
    pub(super) fn apply(&self, claimed: Claimed, resp: ConfirmationResponse, token: Option<&str>) -> Result<Outcome> {
        let Claimed { waiter, resolution, handle } = claimed;
        let id = resp.id;
        let store = &self.inner.store;
        if store.is_durable() && !store.is_shared() && !RECORD_HERE.with(std::cell::Cell::get) {
            let change = match &resolution {
                Resolution::Approved { arguments, scope, .. } => OwnedStateChange {
                    arguments: Some(arguments.clone().unwrap_or_else(|| waiter.request.arguments.value())),
                    responder: resp.responder.clone(),
                    token: token.map(str::to_owned),
                    scope: Some(*scope),
                    ..OwnedStateChange::to(RecordState::Approved)
                },
                _ => OwnedStateChange {
                    responder: resp.responder.clone(),
                    token: token.map(str::to_owned),
                    reason: resp.reason.clone(),
                    ..OwnedStateChange::to(RecordState::Denied)
                },
            };
            let accepted = match &resolution {
                Resolution::Approved { .. } => Outcome::Approved,
                _ => Outcome::Denied,
            };
            let slot = Arc::new(std::sync::Mutex::new(Answer::Recording));
            let gate = self.clone();
            let done = slot.clone();
            store.transition_then(
                id,
                change,
                Completion::new(move |recorded| {
                    let out = match recorded {
                        Ok(()) => gate.recorded(waiter, resolution, resp, handle),
                        Err(e) => {
                            // Fail safe: an answer that could not be recorded does not count. Its
                            // responder may have been told it was accepted: the audit says why not.
                            gate.audit(|| {
                                AuditRecord::about(AuditKind::Notice, &waiter.request)
                                    .with_decision("answer-not-recorded")
                                    .with_responder(resp.responder.clone())
                                    .with_error(&e)
                            });
                            gate.resolve(waiter, Resolution::Cancelled(CancelReason::Aborted), now_ms());
                            Err(e)
                        }
                    };
                    let mut slot = lock(&done);
                    match (&*slot, out) {
                        (Answer::Returned, Err(e)) => {
                            crate::report!(
                                "signoff: the answer to request {id} could not be recorded; the call does not run: {e}"
                            );
                        }
                        (Answer::Returned, Ok(_)) => {}
                        (_, out) => *slot = Answer::Recorded(out),
                    }
                }),
            );
            let mut slot = lock(&slot);
            return match std::mem::replace(&mut *slot, Answer::Returned) {
                Answer::Recorded(out) => out,
                // Committing on the store's thread: accepted now, acted on once recorded.
                _ => Ok(accepted),
            };
        }
        // Record the answer before anyone acts on it. The in-memory store keeps no record: the
        // approved arguments are not rebuilt for it.
        let own;
        let approved = match &resolution {
            Resolution::Approved { arguments: Some(edit), .. } => Some(edit),
            Resolution::Approved { arguments: None, .. } if !store.keeps_only_pending() => {
                own = waiter.request.arguments.value();
                Some(&own)
            }
            _ => None,
        };
        let recorded = match &resolution {
            Resolution::Approved { scope, .. } => store.transition(
                &id,
                StateChange {
                    arguments: approved,
                    responder: resp.responder.as_deref(),
                    token,
                    scope: Some(*scope),
                    ..StateChange::to(RecordState::Approved)
                },
            ),
            _ => store.transition(
                &id,
                StateChange {
                    responder: resp.responder.as_deref(),
                    token,
                    reason: resp.reason.as_deref(),
                    ..StateChange::to(RecordState::Denied)
                },
            ),
        };
        if let Err(e) = recorded {
            if store.is_shared() {
                // Another process decided first, or the deadline passed by the store's clock.
                return Err(self.lost_to_store(waiter, e));
            }
            // Fail safe: an approval that could not be recorded does not count.
            self.resolve(waiter, Resolution::Cancelled(CancelReason::Aborted), now_ms());
            return Err(e);
        }
        self.recorded(waiter, resolution, resp, handle)
    }

    /// Audits and publishes a recorded response, then resolves its request.
    fn recorded(
        &self,
        waiter: super::Waiter,
        resolution: Resolution,
        mut resp: ConfirmationResponse,
        handle: bool,
    ) -> Result<Outcome> {
        let id = resp.id;
        let now = now_ms();
        resp.at_ms.get_or_insert(now);
        self.audit(|| {
            let request = &waiter.request;
            let mut r = AuditRecord::about(AuditKind::Response, request)
                .with_decision(decision_str(resp.decision))
                .with_responder(resp.responder.clone());
            r.reason = resp.reason.clone();
            if let Resolution::Approved { arguments: Some(arguments), edited: true, .. } = &resolution {
                r.arguments = Some(request.arguments.value());
                r.edited_arguments = Some(arguments.clone());
                let rules = waiter.tool.evaluate(arguments);
                if rules.forced_by_rule {
                    r.reason = Some(format!("edited arguments match rules: {}", rules.reasons.join("; ")));
                }
            }
            r
        });
        if let Resolution::Approved { scope: Scope::Session, .. } = &resolution {
            self.grant(&waiter.request.session_id, &waiter.request.tool, resp.responder.clone());
        }
        self.publish_with(|| {
            if handle {
                fill_binding(&mut resp, &waiter.request);
            }
            Event::ConfirmationResponse(Arc::new(resp))
        });
        match self.resolve(waiter, resolution, now) {
            Outcome::Cancelled => {
                Err(Error::AlreadyResolved { id, outcome: "cancelled (the waiting task was gone)".into() })
            }
            o => Ok(o),
        }
    }

    fn not_pending(&self, id: Uuid) -> Error {
        match lock(&self.inner.tombstones).outcome(&id) {
            Some(Outcome::TimedOut) => Error::Expired(id),
            Some(o) => Error::AlreadyResolved { id, outcome: o.as_str().into() },
            None => Error::UnknownRequest(id),
        }
    }
}

/// Fills in the binding claims a handle's response leaves out (see [`Gate::respond_for`]).
fn fill_binding(resp: &mut ConfirmationResponse, request: &crate::ConfirmationRequest) {
    resp.tool.get_or_insert_with(|| request.tool.to_string());
    resp.arguments_digest.get_or_insert_with(|| request.arguments_digest.to_string());
    resp.session_id.get_or_insert_with(|| request.session_id.to_string());
}

/// The response's binding claims (tool, digest, session), where present, against the request.
pub(super) fn check_binding(request: &crate::ConfirmationRequest, resp: &ConfirmationResponse) -> Result<()> {
    let mismatch = |field: &'static str, expected: &str, got: &str| Error::Mismatch {
        id: request.id,
        field,
        expected: expected.to_owned(),
        got: got.to_owned(),
    };
    if let Some(t) = &resp.tool
        && **t != *request.tool
    {
        return Err(mismatch("tool", &request.tool, t));
    }
    if let Some(d) = &resp.arguments_digest
        && *d != request.arguments_digest
    {
        return Err(mismatch("arguments_digest", &request.arguments_digest.to_string(), d));
    }
    if let Some(s) = &resp.session_id
        && **s != *request.session_id
    {
        return Err(mismatch("session_id", &request.session_id, s));
    }
    Ok(())
}
