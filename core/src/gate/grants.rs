//! Session grants: "approve for the session" and its revocation.

use super::{Gate, lock};
use crate::audit::AuditRecord;
use crate::event::CancelReason;
use std::collections::HashSet;

impl Gate {
    pub(super) fn grant(&self, session: &str, tool: &str, responder: Option<String>) {
        lock(&self.inner.grants).entry(session.to_owned()).or_default().insert(tool.to_owned());
        self.audit(|| AuditRecord::grant(session, tool, "granted").with_responder(responder));
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
            self.audit(|| AuditRecord::grant(session_id, tool, "revoked"));
        }
        removed
    }

    /// Revokes `tool`'s grants in every session (e.g. because the tool's definition changed, so
    /// what a person approved for the session is no longer what would run). Each revocation is
    /// audited. Returns the sessions that had one, sorted.
    pub fn revoke_tool_grants(&self, tool: &str) -> Vec<String> {
        let mut sessions: Vec<String> = {
            let mut g = lock(&self.inner.grants);
            let mut had = Vec::new();
            for (s, t) in g.iter_mut() {
                if t.remove(tool) {
                    had.push(s.clone());
                }
            }
            g.retain(|_, t| !t.is_empty());
            had
        };
        sessions.sort();
        for s in &sessions {
            self.audit(|| AuditRecord::grant(s, tool, "revoked"));
        }
        sessions
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
            self.audit(|| AuditRecord::grant(session_id, &t, "revoked").with_reason("session ended"));
        }
        self.cancel_where(|w| &*w.request.session_id == session_id, CancelReason::SessionEnded)
    }
}
