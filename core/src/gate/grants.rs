//! Session grants: "approve for the session" and its revocation.

use super::{Gate, lock};
use crate::audit::{AuditKind, AuditRecord};
use crate::event::CancelReason;
use std::collections::HashSet;

impl Gate {
    pub(super) fn grant(&self, session: &str, tool: &str, responder: Option<String>) {
        lock(&self.inner.grants).entry(session.to_owned()).or_default().insert(tool.to_owned());
        self.audit(|| {
            let mut r = AuditRecord::new(AuditKind::Grant);
            r.session_id = Some(session.to_owned());
            r.tool = Some(tool.to_owned());
            r.decision = Some("granted".into());
            r.responder = responder;
            r
        });
    }

    /// Revokes a session grant. Returns whether one existed.
    pub fn revoke_grant(&self, session_id: &str, tool: &str) -> bool {
        let removed = {
            let mut g = lock(&self.inner.grants);
            let removed = g.get_mut(session_id).is_some_and(|tools| tools.remove(tool));
            if g.get(session_id).is_some_and(HashSet::is_empty) {
                g.remove(session_id);
            }
            removed
        };
        if removed {
            self.audit(|| {
                let mut r = AuditRecord::new(AuditKind::Grant);
                r.session_id = Some(session_id.to_owned());
                r.tool = Some(tool.to_owned());
                r.decision = Some("revoked".into());
                r
            });
        }
        removed
    }

    /// The tools granted for a session, sorted.
    pub fn grants(&self, session_id: &str) -> Vec<String> {
        let mut v: Vec<String> =
            lock(&self.inner.grants).get(session_id).map(|t| t.iter().cloned().collect()).unwrap_or_default();
        v.sort();
        v
    }

    /// Ends a session: drops its grants and cancels its pending requests
    /// ([`CancelReason::SessionEnded`]). Returns how many requests were cancelled.
    pub fn end_session(&self, session_id: &str) -> usize {
        let mut tools: Vec<String> =
            lock(&self.inner.grants).remove(session_id).map(|t| t.into_iter().collect()).unwrap_or_default();
        tools.sort();
        for t in tools {
            self.audit(|| {
                let mut r = AuditRecord::new(AuditKind::Grant);
                r.session_id = Some(session_id.to_owned());
                r.tool = Some(t);
                r.decision = Some("revoked".into());
                r.reason = Some("session ended".into());
                r
            });
        }
        self.cancel_where(|w| w.request.session_id == session_id, CancelReason::SessionEnded)
    }
}
