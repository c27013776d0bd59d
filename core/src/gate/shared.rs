//! A store shared with other processes (`PostgresStore`): every decision
//! goes through the store's guarded transition first, requests waited for elsewhere are answered
//! in the store, and decisions made elsewhere wake the waiting call here.

use super::{Gate, Inner, Resolution, TimeOut, Waiter, decision_str, lock};
use crate::audit::{AuditKind, AuditRecord};
use crate::error::{Error, Result};
use crate::event::{CancelReason, ConfirmationResponse, Event, Outcome, ResponseDecision, Scope, now_ms};
use crate::store::{RecordState, StateChange, StoreWatcher, StoredRecord};
use std::sync::{Arc, Weak};
use std::time::Duration;
use uuid::Uuid;

/// The gate's side of [`PendingStore::watch`](crate::PendingStore::watch).
pub(super) struct Watcher(pub(super) Weak<Inner>);

impl StoreWatcher for Watcher {
    fn changed(&self, records: Vec<StoredRecord>) {
        let Some(inner) = self.0.upgrade() else { return };
        let gate = Gate { inner };
        for rec in records {
            gate.adopt(rec);
        }
    }

    fn wants_requests(&self) -> bool {
        self.0.upgrade().is_some_and(|inner| {
            !inner.closed.load(std::sync::atomic::Ordering::SeqCst)
                && (inner.bus.receiver_count() > 0
                    || !inner.inline.read().unwrap_or_else(|e| e.into_inner()).is_empty())
        })
    }

    fn appeared(&self, requests: Vec<Arc<crate::ConfirmationRequest>>) {
        let Some(inner) = self.0.upgrade() else { return };
        let gate = Gate { inner };
        for r in &requests {
            // Shown and offered to approvers here; answers go to the store (`respond_elsewhere`).
            gate.announce(r);
        }
    }

    fn ended(&self, records: Vec<StoredRecord>) {
        let Some(inner) = self.0.upgrade() else { return };
        let gate = Gate { inner };
        for rec in records {
            let Some(res) = resolution_of(&rec) else { continue };
            let (responder, reason, scope, edited) = match &res {
                Resolution::Approved { responder, scope, edited, .. } => (responder.clone(), None, *scope, *edited),
                Resolution::Denied { reason, responder } => (responder.clone(), reason.clone(), Scope::Once, false),
                _ => (None, None, Scope::Once, false),
            };
            let outcome = outcome_of(&res);
            gate.publish_with(|| {
                Event::ConfirmationResolved(Arc::new(crate::ConfirmationResolved {
                    id: rec.request.id,
                    tool: rec.request.tool.to_string(),
                    session_id: rec.request.session_id.to_string(),
                    outcome,
                    cancel_reason: None,
                    responder,
                    reason,
                    scope,
                    edited,
                    at_ms: rec.updated_at_ms,
                }))
            });
        }
    }
}

/// What a stored record means for the call waiting on it (`None` while it is pending).
fn resolution_of(rec: &StoredRecord) -> Option<Resolution> {
    Some(match rec.state {
        RecordState::Pending => return None,
        RecordState::Approved | RecordState::Executing | RecordState::Released | RecordState::Done => {
            let arguments = rec.arguments.clone().filter(|a| *a != rec.request.arguments);
            Resolution::Approved {
                edited: arguments.is_some(),
                arguments,
                scope: rec.scope,
                responder: rec.responder.clone(),
            }
        }
        RecordState::Denied => Resolution::Denied { reason: rec.reason.clone(), responder: rec.responder.clone() },
        RecordState::TimedOut => Resolution::TimedOut,
        RecordState::Cancelled | RecordState::Interrupted => Resolution::Cancelled(CancelReason::Aborted),
    })
}

fn outcome_of(res: &Resolution) -> Outcome {
    match res {
        Resolution::Approved { .. } => Outcome::Approved,
        Resolution::Denied { .. } => Outcome::Denied,
        Resolution::TimedOut => Outcome::TimedOut,
        Resolution::Cancelled(_) => Outcome::Cancelled,
    }
}

/// The error for answering a request the store holds in `state`.
fn not_pending(id: Uuid, state: RecordState) -> Error {
    match state {
        RecordState::TimedOut => Error::Expired(id),
        RecordState::Pending => Error::Expired(id),
        s => Error::AlreadyResolved {
            id,
            outcome: match s {
                RecordState::Approved | RecordState::Executing | RecordState::Released | RecordState::Done => {
                    Outcome::Approved.as_str().to_owned()
                }
                RecordState::Denied => Outcome::Denied.as_str().to_owned(),
                _ => Outcome::Cancelled.as_str().to_owned(),
            },
        },
    }
}

impl Gate {
    /// A decision another process recorded for a request this gate waits for: delivered to the
    /// waiting call as if it were made here (it was recorded and audited where it was made).
    pub(super) fn adopt(&self, rec: StoredRecord) {
        let Some(res) = resolution_of(&rec) else { return };
        let id = rec.request.id;
        let Some(w) = self.claim(&id, outcome_of(&res)) else { return };
        self.deliver_recorded(w, res);
    }

    /// Delivers a resolution the store already holds to a claimed waiter. An approval made in
    /// another process must still pass this gate's own checks before anything runs here: the
    /// tool's schema for edited arguments, and this gate's authenticator (e.g. its
    /// [`Approvers`](crate::Approvers)) for the response as recorded (responder, scope,
    /// arguments), so a process configured more loosely cannot approve past this one's policy.
    fn deliver_recorded(&self, w: Waiter, res: Resolution) {
        let refused = match &res {
            Resolution::Approved { arguments, edited, scope, responder } => {
                let schema = match arguments {
                    Some(arguments) if *edited => w.tool.validate(arguments, "edited").err().map(|_| {
                        "the edited arguments approved by another process do not match this tool's schema".to_owned()
                    }),
                    _ => None,
                };
                schema.or_else(|| {
                    let a = self.inner.authenticator.as_ref()?;
                    let mut resp = ConfirmationResponse::approve(&w.request).with_scope(*scope);
                    resp.responder = responder.clone();
                    resp.arguments = arguments.clone();
                    a.authenticate(&w.request, &resp).err().map(|reason| {
                        format!(
                            "the approval another process recorded (by {}) is not accepted by this gate's \
                             authenticator: {reason}",
                            responder.as_deref().unwrap_or("no one named")
                        )
                    })
                })
            }
            _ => None,
        };
        if let Some(detail) = refused {
            crate::report!("signoff: request {}: {detail}; the tool does not run", w.request.id);
            self.audit(|| {
                AuditRecord::about(AuditKind::Notice, &w.request)
                    .with_decision(CancelReason::ApprovalFailed.as_str())
                    .with_reason(detail.as_str())
            });
            self.resolve_as(w, Resolution::Cancelled(CancelReason::ApprovalFailed), now_ms(), false);
            return;
        }
        match &res {
            Resolution::Approved { scope: Scope::Session, responder, .. } => {
                self.grant(&w.request.session_id, &w.request.tool, responder.clone());
            }
            Resolution::TimedOut => {
                self.deliver_timeout(w, true);
                return;
            }
            _ => {}
        }
        self.resolve_as(w, res, now_ms(), true);
    }

    /// [`time_out`](Gate::time_out) with a shared store: the store's clock decides.
    pub(super) fn time_out_shared(&self, id: Uuid) -> TimeOut {
        if !lock(&self.inner.waiters).contains(&id) {
            return TimeOut::Elsewhere;
        }
        match self.inner.store.transition(&id, StateChange::to(RecordState::TimedOut)) {
            Ok(()) => match self.claim(&id, Outcome::TimedOut) {
                Some(w) => TimeOut::Now(Resolution::TimedOut, self.timed_out(w, true)),
                None => TimeOut::Elsewhere,
            },
            Err(e) => match self.inner.store.record(&id) {
                Some(rec) if rec.state == RecordState::Pending => match self.inner.store.time_left(&id) {
                    Some(left) if !left.is_zero() => TimeOut::RetryIn(left),
                    // Due by its clock too: a race with a sweeper or a lost connection.
                    _ => TimeOut::RetryIn(Duration::from_millis(50)),
                },
                Some(rec) => {
                    // Decided elsewhere just before the deadline.
                    self.adopt(rec);
                    TimeOut::Elsewhere
                }
                None => {
                    // The store cannot be read: the deadline passed here, so fail safe here.
                    crate::report!("signoff: request {id} timed out; the store could not record it: {e}");
                    match self.claim(&id, Outcome::TimedOut) {
                        Some(w) => TimeOut::Now(Resolution::TimedOut, self.timed_out(w, true)),
                        None => TimeOut::Elsewhere,
                    }
                }
            },
        }
    }

    /// [`claim_cancel`](Gate::claim_cancel) with a shared store.
    pub(super) fn claim_cancel_shared(&self, id: &Uuid) -> Option<(Waiter, bool)> {
        if !lock(&self.inner.waiters).contains(id) {
            return None;
        }
        // Only from `pending`: an approval another process committed first is not overwritten
        // (it used to be, and its approver had been told it was approved).
        match self.inner.store.cancel_pending(id) {
            Ok(()) => self.claim(id, Outcome::Cancelled).map(|w| (w, true)),
            Err(e) => match self.inner.store.record(id) {
                Some(rec) if rec.state != RecordState::Pending => {
                    self.adopt(rec);
                    None
                }
                _ => {
                    crate::report!("signoff: request {id} is cancelled here; the store could not record it: {e}");
                    let w = self.claim(id, Outcome::Cancelled)?;
                    // A row still being written is ended once it is.
                    self.flag_if_writing(id);
                    Some((w, true))
                }
            },
        }
    }

    /// After a shared store refused to record a local answer: what the store says instead,
    /// delivered to the claimed waiter, and the error for the one who answered.
    pub(super) fn lost_to_store(&self, w: Waiter, e: Error) -> Error {
        let id = w.request.id;
        match self.inner.store.record(&id) {
            Some(rec) if rec.state != RecordState::Pending => {
                let err = not_pending(id, rec.state);
                match resolution_of(&rec) {
                    Some(res) => self.deliver_recorded(w, res),
                    None => {
                        self.resolve(w, Resolution::Cancelled(CancelReason::Aborted), now_ms());
                    }
                }
                err
            }
            Some(_) if self.inner.store.time_left(&id).is_some_and(|l| l.is_zero()) => {
                // Past its deadline by the store's clock.
                let recorded = self.inner.store.transition(&id, StateChange::to(RecordState::TimedOut)).is_ok();
                self.deliver_timeout(w, recorded);
                Error::Expired(id)
            }
            _ => {
                // Fail safe: an approval that could not be recorded does not count.
                self.resolve(w, Resolution::Cancelled(CancelReason::Aborted), now_ms());
                e
            }
        }
    }

    /// Answers a request that another process waits for, in the shared store: the same checks
    /// as a local answer, then one guarded change (pending → approved / denied, before the
    /// deadline by the store's clock, the token with it) that the waiting process is woken by.
    pub(super) fn respond_elsewhere(&self, resp: ConfirmationResponse, token: Option<&str>) -> Result<Outcome> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let id = resp.id;
        let rec = self.inner.store.try_record(&id)?.ok_or(Error::UnknownRequest(id))?;
        if rec.state != RecordState::Pending {
            return Err(not_pending(id, rec.state));
        }
        let request = rec.request.clone();
        super::respond::check_binding(&request, &resp)?;
        if let Some(a) = &self.inner.authenticator {
            a.authenticate(&request, &resp).map_err(|reason| Error::Unauthorized { id, reason })?;
        }
        if let Some(edit) = &resp.arguments {
            crate::json::check(edit, "edited arguments")?;
        }
        let (state, arguments, edited) = match resp.decision {
            ResponseDecision::Deny => {
                if resp.arguments.is_some() {
                    return Err(Error::Malformed("a denial cannot carry edited arguments".into()));
                }
                if resp.scope == Scope::Session {
                    return Err(Error::Malformed("scope \"session\" applies to approvals only".into()));
                }
                (RecordState::Denied, None, false)
            }
            ResponseDecision::Approve => match &resp.arguments {
                Some(edit) if *edit != request.arguments => {
                    if !request.editable {
                        return Err(Error::EditsNotAllowed(request.tool.to_string()));
                    }
                    // Edits are validated against the tool's schema here, so this process must
                    // register the tool (the waiting process checks them again).
                    self.tool(&request.tool)?.validate(edit, "edited")?;
                    (RecordState::Approved, Some(edit.clone()), true)
                }
                _ => (RecordState::Approved, Some(request.arguments.value()), false),
            },
        };
        let change = StateChange {
            arguments: arguments.as_ref(),
            responder: resp.responder.as_deref(),
            token,
            reason: resp.reason.as_deref(),
            scope: (state == RecordState::Approved).then_some(resp.scope),
            ..StateChange::to(state)
        };
        if let Err(e) = self.inner.store.transition(&id, change) {
            return Err(match self.inner.store.try_record(&id) {
                Ok(Some(rec)) if rec.state != RecordState::Pending => not_pending(id, rec.state),
                Ok(Some(_)) if self.inner.store.time_left(&id).is_some_and(|l| l.is_zero()) => Error::Expired(id),
                _ => e,
            });
        }
        self.audit(|| {
            let mut r = AuditRecord::about(AuditKind::Response, &request)
                .with_decision(decision_str(resp.decision))
                .with_responder(resp.responder.clone());
            r.reason = resp.reason.clone();
            if edited {
                r.arguments = Some(request.arguments.value());
                r.edited_arguments = arguments.clone();
            }
            r
        });
        let mut resp = resp;
        resp.at_ms.get_or_insert(now_ms());
        self.publish_with(|| Event::ConfirmationResponse(Arc::new(resp)));
        Ok(if state == RecordState::Approved { Outcome::Approved } else { Outcome::Denied })
    }
}
