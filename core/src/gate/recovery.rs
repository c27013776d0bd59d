//! Start-up recovery from a durable store.

use super::{Gate, lock};
use crate::audit::{AuditKind, AuditRecord};
use crate::error::{Error, Result};
use crate::event::{CancelReason, ConfirmationRequest, Outcome, now_ms};
use crate::store::{RecordState, StateChange, StoredRecord};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// What [`Gate::recover`] found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Recovery {
    /// Still pending: waiting again, with their original deadlines. Approving one runs its
    /// tool's executor once, in a task of the gate's; the result is stored with the request
    /// ([`Gate::record`]).
    pub restored: Vec<Arc<ConfirmationRequest>>,
    /// Their deadline passed while the process was down: resolved as timed out.
    pub timed_out: Vec<Arc<ConfirmationRequest>>,
    /// Approved, or executing, when the process stopped: the tool may or may not have run, so
    /// it is not run again. Each is now `interrupted`; the record is as it was found.
    pub interrupted: Vec<StoredRecord>,
    /// Pending, but could not be restored (cancelled, never run).
    pub not_restored: Vec<NotRestored>,
}

/// A pending request that [`Gate::recover`] cancelled instead of restoring.
#[derive(Debug, Clone, Serialize)]
pub struct NotRestored {
    /// The request.
    pub request: Arc<ConfirmationRequest>,
    /// Why: its tool is not registered or has no executor, or its stored arguments no longer
    /// match their digest or the tool's schema.
    pub reason: String,
}

/// The restored requests still waiting or running their tool, and who to tell when none is.
#[derive(Default)]
pub(crate) struct RestoredRuns {
    running: std::sync::atomic::AtomicUsize,
    idle: std::sync::Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

/// One restored request's task: counted while it lives, however it ends (decided, cancelled,
/// its runtime shut down).
struct Running(Gate);

impl Running {
    fn start(gate: &Gate) -> Self {
        gate.inner.restored.running.fetch_add(1, Ordering::SeqCst);
        Running(gate.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let runs = &self.0.inner.restored;
        if runs.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            let idle = lock(&runs.idle).clone();
            if let Some(f) = idle {
                f();
            }
        }
    }
}

impl Gate {
    /// How many requests restored by [`recover`](Self::recover) are still waiting for a
    /// decision or running their tool. A host that keeps its process alive while a call is in
    /// flight does the same while this is not zero (Node's binding does).
    pub fn restored_running(&self) -> usize {
        self.inner.restored.running.load(Ordering::SeqCst)
    }

    /// Calls `f`, on whatever thread that happens, each time the last restored request still
    /// running ([`restored_running`](Self::restored_running)) finishes; replaces an earlier
    /// `f`. It must not block.
    pub fn on_restored_idle(&self, f: impl Fn() + Send + Sync + 'static) {
        *lock(&self.inner.restored.idle) = Some(Arc::new(f));
    }

    /// Picks up what an earlier process left in a durable store ([`SqliteStore`](crate::SqliteStore)).
    /// Call it once, after registering tools and before the first call, inside a tokio runtime.
    ///
    /// - A pending request whose deadline has not passed waits again until that same deadline
    ///   and is re-published; when approved, the gate runs its tool's executor exactly once
    ///   and stores the result.
    /// - A pending request whose deadline passed is resolved as timed out.
    /// - An approved or executing request is marked `interrupted`, reported, and never run
    ///   again: the tool may have run, and running it twice is worse than reporting it.
    ///
    /// The same fail-safe rules apply as to new requests: on a gate built with
    /// `deny_when_unobserved(true)` (the default), restored requests are cancelled at once if
    /// nobody is subscribed. Durable, remotely approved setups build with
    /// `deny_when_unobserved(false)`.
    ///
    /// Errors: `config` (called twice, after the first request, or outside a tokio runtime),
    /// `store`.
    pub fn recover(&self) -> Result<Recovery> {
        let recover = self.inner.host.recover();
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::Config(format!("`{recover}` needs a tokio runtime (it restarts each restored request's timer)"))
        })?;
        if self.inner.recovered.swap(true, Ordering::SeqCst) {
            return Err(Error::Config(format!("`{recover}` runs once per gate")));
        }
        if self.inner.requests_made.load(Ordering::SeqCst) {
            return Err(Error::Config(format!("`{recover}` must run before the gate's first request")));
        }
        let mut report = Recovery::default();
        let now = now_ms();
        let mut restored_ids = HashSet::new();
        for mut rec in self.inner.store.unfinished()? {
            let request = rec.request.clone();
            let id = request.id;
            let expired = request.deadline_ms <= now;
            let mut timed_out = false;
            if expired && rec.state == RecordState::Pending {
                let settled = self.settle_stored(&request, RecordState::TimedOut, None, Outcome::TimedOut, |r| {
                    r.decision = Some(Outcome::TimedOut.as_str().into());
                    r.reason = Some("the deadline passed while the process was down".into());
                });
                match settled {
                    Ok(()) => timed_out = true,
                    // A shared store judges deadlines by the database's clock, which may be
                    // behind this host's, and another process may have answered meanwhile: what
                    // the row says now is recovered (still pending: it waits again, until its
                    // deadline by that clock).
                    Err(e) if self.inner.store.is_shared() => match self.inner.store.try_record(&id)? {
                        Some(now) => rec = now,
                        None => return Err(e),
                    },
                    Err(e) => return Err(e),
                }
            }
            match rec.state {
                RecordState::Pending if timed_out => report.timed_out.push(request),
                RecordState::Pending => match self.restore(request.clone(), &handle) {
                    Ok(()) => {
                        restored_ids.insert(id);
                        report.restored.push(request);
                    }
                    Err(reason) => {
                        let note = Value::String(reason.clone());
                        self.settle_stored(&request, RecordState::Cancelled, Some(&note), Outcome::Cancelled, |r| {
                            r.decision = Some(Outcome::Cancelled.as_str().into());
                            r.reason = Some(format!("not restored after a restart: {reason}"));
                        })?;
                        report.not_restored.push(NotRestored { request, reason });
                    }
                },
                RecordState::Approved | RecordState::Executing => {
                    let note = serde_json::json!({
                        "interrupted_in": rec.state.as_str(),
                        "note": "the process stopped before the tool's result was recorded; not run again",
                    });
                    self.settle_stored(&request, RecordState::Interrupted, Some(&note), Outcome::Approved, |r| {
                        r.kind = AuditKind::Execution;
                        r.decision = Some("interrupted".into());
                        r.responder = rec.responder.clone();
                        r.reason = Some(format!(
                            "the process stopped while this call was {}; it may or may not have run, and is not run again",
                            rec.state.as_str()
                        ));
                    })?;
                    report.interrupted.push(rec);
                }
                _ => {}
            }
        }
        for r in &report.restored {
            self.announce(r);
        }
        if self.is_closed() {
            self.cancel_where(|w| restored_ids.contains(&w.request.id), CancelReason::Shutdown);
        } else if self.inner.deny_when_unobserved && !self.inner.store.is_shared() && !self.has_approver() {
            self.cancel_where(|w| restored_ids.contains(&w.request.id), CancelReason::NoApprover);
        }
        Ok(report)
    }

    /// Ends a stored request found at start-up: records its final state (with `note`), remembers
    /// how it ended for late responses, and audits it (an `outcome` record that `describe`
    /// fills in).
    fn settle_stored(
        &self,
        request: &ConfirmationRequest,
        state: RecordState,
        note: Option<&Value>,
        outcome: Outcome,
        describe: impl FnOnce(&mut AuditRecord),
    ) -> Result<()> {
        self.inner.store.transition(&request.id, StateChange { result: note, ..StateChange::to(state) })?;
        lock(&self.inner.tombstones).add(request.id, outcome);
        self.audit(|| {
            let mut r = AuditRecord::about(AuditKind::Outcome, request);
            describe(&mut r);
            r
        });
        Ok(())
    }

    /// Waits again for a stored pending request, in a task that runs its tool once approved.
    fn restore(&self, request: Arc<ConfirmationRequest>, handle: &tokio::runtime::Handle) -> Result<(), String> {
        // What was shown is what runs: the stored arguments must still be the ones digested.
        if request.arguments.digest() != request.arguments_digest {
            return Err("the stored arguments do not match their digest".into());
        }
        let tool = self.tool(&request.tool).map_err(|e| e.to_string())?;
        let executor = tool.tool.executor.clone().ok_or_else(|| format!("tool `{}` has no executor", request.tool))?;
        tool.validate(&request.arguments.value(), "original").map_err(|e| e.to_string())?;
        let id = request.id;
        let remaining = request.deadline_ms.saturating_sub(now_ms());
        let deadline = Instant::now() + Duration::from_millis(remaining);
        let (waiter, waiting) = super::answer::pair(request.clone(), tool, deadline);
        {
            // As in `prepare`: the waiter exists before the store shows the request.
            let mut waiters = lock(&self.inner.waiters);
            self.inner.store.restore(request.clone());
            waiters.replace(waiter);
        }
        let gate = self.clone();
        let (name, session, call_id) =
            (request.tool.to_string(), request.session_id.to_string(), request.tool_call_id.clone());
        let running = Running::start(self);
        handle.spawn(async move {
            let _running = running;
            let decision = gate.resume(waiting).await;
            match decision {
                Ok(d) => {
                    gate.run_decided(executor, name, session, call_id, d).await;
                }
                Err(e) => crate::report!("signoff: restored request {id} failed: {e}"),
            }
        });
        Ok(())
    }
}
