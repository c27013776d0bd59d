//! Loopback de-duplication: a call a person already approved through one signoff gate carries a
//! signed approval marker to the next signoff gate it reaches (an MCP gate in front of a proxied
//! server), which accepts it once instead of asking again.

use super::{ApprovedBy, Decision, Gate, lock};
use crate::audit::{AuditKind, AuditRecord};
use crate::error::{Error, Result};
use crate::event::now_ms;
use crate::store::RecordState;
use crate::token::MarkerClaims;
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

/// How long an approval marker is accepted after it is issued: it is meant for the call about
/// to be made, not for later.
pub const MARKER_TTL: Duration = Duration::from_secs(60);

/// The `_meta` key an approval marker travels under in an MCP request (reverse-DNS, ours).
pub const MARKER_META_KEY: &str = "dev.signoff/approval";

impl Gate {
    /// Issues an approval marker for a call this gate approved by a person (or by a session grant a
    /// person gave): signed with the gate's [`TokenKeys`](crate::TokenKeys), naming `tool` as the
    /// receiving gate knows it, the digest of the arguments approved to run
    /// ([`Decision::arguments`]), the approver, the request and a nonce; valid for [`MARKER_TTL`].
    /// Send it with the call (for MCP: `_meta["dev.signoff/approval"]`, [`MARKER_META_KEY`]); a
    /// gate sharing the keys accepts it once with
    /// [`accept_approval_marker`](Self::accept_approval_marker) instead of asking again. The
    /// issue is audited (the marker is not).
    ///
    /// Errors: `config` (no token keys), `malformed` (an empty tool name, or a decision that is
    /// not a person's approval: denied, timed out, cancelled, not gated, gating disabled),
    /// `mismatch` (this gate's record of the request names another tool or other arguments),
    /// `not_pending` (this gate's record says the request was not approved).
    pub fn approval_marker(&self, tool: &str, decision: &Decision) -> Result<String> {
        let keys = self.token_keys()?;
        if tool.trim().is_empty() {
            return Err(Error::Malformed("an approval marker must name the tool".into()));
        }
        let Decision::Approved { request_id, arguments, by, responder, .. } = decision else {
            return Err(Error::Malformed(format!(
                "only an approved call gets an approval marker (this one was {})",
                decision.outcome().as_str()
            )));
        };
        if !matches!(by, ApprovedBy::Person | ApprovedBy::SessionGrant) {
            return Err(Error::Malformed(format!(
                "only a call a person approved gets an approval marker (this one ran because it was {})",
                if *by == ApprovedBy::NotGated { "not gated" } else { "not checked: gating is disabled" }
            )));
        }
        let digest = crate::display::arguments_digest(arguments);
        if let Some(id) = request_id
            && lock(&self.inner.markers).issued.contains(id)
        {
            // One request, one marker: a second would let the approved call run twice.
            return Err(Error::AlreadyUsed(*id));
        }
        if let Some(id) = request_id
            && let Some(record) = self.inner.store.record(id)
        {
            let approved = matches!(
                record.state,
                RecordState::Approved | RecordState::Executing | RecordState::Released | RecordState::Done
            );
            if !approved {
                return Err(Error::NotPending { id: *id, state: record.state.as_str().to_owned() });
            }
            let ran = record.arguments.as_ref().map(crate::display::arguments_digest);
            if let Some(ran) = ran.filter(|ran| *ran != digest) {
                return Err(Error::Mismatch { id: *id, field: "arguments_digest", expected: ran, got: digest });
            }
        }
        let now = now_ms();
        let mut claims = MarkerClaims {
            nonce: Uuid::new_v4(),
            request_id: *request_id,
            tool: tool.to_owned(),
            arguments_digest: digest,
            approver: responder.clone().unwrap_or_else(|| "a session grant".to_owned()),
            issued_at_ms: now,
            expires_at_ms: now.saturating_add(MARKER_TTL.as_millis() as u64),
            key_id: String::new(),
        };
        let marker = keys.sign_marker(&mut claims);
        if let Some(id) = request_id
            && !lock(&self.inner.markers).issue(*id)
        {
            return Err(Error::AlreadyUsed(*id));
        }
        self.audit(|| {
            let mut r = AuditRecord::new(AuditKind::Notice)
                .with_decision("marker-issued")
                .with_responder(Some(claims.approver.clone()))
                .with_reason(format!(
                    "approval marker for {tool} ({}), key {}, expires at {} (epoch ms)",
                    claims.arguments_digest, claims.key_id, claims.expires_at_ms
                ));
            r.request_id = claims.request_id;
            r
        });
        Ok(marker)
    }

    /// Accepts an approval marker from [`approval_marker`](Self::approval_marker) (issued by a
    /// gate with the same keys) for a call to `tool` with `arguments`, at most once: checks the
    /// form, key and signature, the expiry, that it names this tool and exactly these arguments
    /// (digest recomputed here), and that neither it nor another marker for the same request was
    /// accepted before by this gate. Every acceptance and every refusal is audited. A caller that
    /// gets an error asks a person, as if there were no marker.
    ///
    /// Single use is remembered for the marker's lifetime ([`MARKER_TTL`]) in memory and, with
    /// a durable or shared store ([`PendingStore::use_once`](crate::PendingStore::use_once)),
    /// in the store: a replay is refused after the gate restarts and by every gate sharing the
    /// store. With the in-memory store, a gate restarted within that minute would accept a replay
    /// of a marker it accepted before the restart.
    ///
    /// Errors: `config`, `malformed`, `unknown_key`, `bad_signature`, `token_expired`,
    /// `mismatch` (`tool` or `arguments_digest`), `already_used`, `store` (the store could not
    /// record the acceptance).
    pub fn accept_approval_marker(&self, marker: &str, tool: &str, arguments: &Value) -> Result<MarkerClaims> {
        let result = self.accept_marker_inner(marker, tool, arguments);
        self.audit(|| match &result {
            Ok(c) => {
                let mut r = AuditRecord::new(AuditKind::Notice)
                    .with_decision("marker-accepted")
                    .with_responder(Some(c.approver.clone()))
                    .with_reason(format!("approval marker for {tool} ({}), key {}", c.arguments_digest, c.key_id));
                r.request_id = c.request_id;
                r
            }
            Err(e) => AuditRecord::new(AuditKind::ResponseRejected)
                .with_error(e)
                .with_reason(format!("approval marker for {tool}: {e}")),
        });
        result
    }

    fn accept_marker_inner(&self, marker: &str, tool: &str, arguments: &Value) -> Result<MarkerClaims> {
        let claims = self.token_keys()?.verify_marker(marker)?;
        let id = claims.request_id.unwrap_or(claims.nonce);
        let now = now_ms();
        if now >= claims.expires_at_ms {
            return Err(Error::TokenExpired { id, expired_at_ms: claims.expires_at_ms });
        }
        if claims.tool != tool {
            return Err(Error::Mismatch { id, field: "tool", expected: tool.to_owned(), got: claims.tool });
        }
        let digest = crate::display::arguments_digest(arguments);
        if claims.arguments_digest != digest {
            return Err(Error::Mismatch {
                id,
                field: "arguments_digest",
                expected: digest,
                got: claims.arguments_digest,
            });
        }
        // One request, one acceptance, however many markers were issued for it; a grant-covered
        // call's marker by its nonce. A store that cannot say refuses the marker (a person is
        // asked).
        if !self.use_once(id, claims.expires_at_ms, now)? {
            return Err(Error::AlreadyUsed(id));
        }
        Ok(claims)
    }

    /// Uses the single-use `id` (valid until `until`, epoch ms): `Ok(false)` when it was used
    /// before. Remembered in memory and, where the store keeps them
    /// ([`PendingStore::use_once`](crate::PendingStore::use_once)), in the store: then a use
    /// before a restart, or by another gate sharing the store, counts too.
    pub(super) fn use_once(&self, id: Uuid, until: u64, now: u64) -> Result<bool> {
        if !lock(&self.inner.markers).accept(id, until, now) {
            return Ok(false);
        }
        self.inner.store.use_once(&id, until)
    }

    /// Whether single-use ids (accepted approval markers, used sign-in links) are kept beyond
    /// this process's memory: true with a durable or shared store.
    pub fn keeps_single_use(&self) -> bool {
        self.inner.store.is_durable() || self.inner.store.is_shared()
    }
}

/// What a gate remembers about approval markers, in memory.
#[derive(Default)]
pub(crate) struct Markers {
    /// Requests a marker was issued for (bounded: the oldest are forgotten first).
    issued: std::collections::HashSet<Uuid>,
    issued_order: std::collections::VecDeque<Uuid>,
    /// Used single-use ids (accepted markers by request, else nonce; used sign-in links by
    /// nonce) until they expire.
    accepted: std::collections::HashMap<Uuid, u64>,
}

/// How many issued requests a gate remembers.
const ISSUED_REMEMBERED: usize = 65_536;

impl Markers {
    /// Records a marker issued for `id`; false if one was issued before.
    fn issue(&mut self, id: Uuid) -> bool {
        if !self.issued.insert(id) {
            return false;
        }
        self.issued_order.push_back(id);
        if self.issued_order.len() > ISSUED_REMEMBERED
            && let Some(old) = self.issued_order.pop_front()
        {
            self.issued.remove(&old);
        }
        true
    }

    /// Records an acceptance of `id`, valid until `until`; false if it was accepted before.
    fn accept(&mut self, id: Uuid, until: u64, now: u64) -> bool {
        self.accepted.retain(|_, u| *u > now);
        self.accepted.insert(id, until).is_none()
    }
}
