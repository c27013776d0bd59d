//! Remote approval with signed tokens: issue, inspect, respond.

use super::{Gate, lock};
use crate::audit::{AuditKind, AuditRecord};
use crate::error::{Error, Result};
use crate::event::{ConfirmationResponse, Outcome, now_ms};
use crate::token::fingerprint;
use crate::token::{SignInClaims, TokenClaims, TokenKeys, TokenResponse};
use uuid::Uuid;

impl Gate {
    /// Issues a signed approval token for a pending request, meant for `approver` only: the
    /// link a remote UI (browser, phone, chat) answers with through
    /// [`respond_token`](Self::respond_token). It expires at the request's deadline, or sooner
    /// with [`GateBuilder::token_ttl`](crate::GateBuilder::token_ttl). The token is never written to the audit log (its
    /// issue is, with the approver).
    ///
    /// Errors: `config` (the gate has no [`TokenKeys`]), `malformed` (empty approver),
    /// `not_pending`.
    pub fn issue_token(&self, request_id: &Uuid, approver: &str) -> Result<String> {
        let keys = self.token_keys()?;
        if approver.trim().is_empty() {
            return Err(Error::Malformed("a token must name its approver".into()));
        }
        let mut request = lock(&self.inner.waiters).get(request_id).map(|w| w.request.clone());
        if request.is_none() && self.inner.store.is_shared() {
            // Waited for by another process.
            request = self.inner.store.get(request_id);
        }
        let Some(request) = request else {
            return Err(Error::NotPending { id: *request_id, state: self.state_of(request_id) });
        };
        let now = now_ms();
        let ttl_end = self.inner.token_ttl.map_or(u64::MAX, |t| now.saturating_add(t.as_millis() as u64));
        let mut claims = TokenClaims {
            request_id: request.id,
            tool: request.tool.to_string(),
            arguments_digest: request.arguments_digest.to_string(),
            session_id: request.session_id.to_string(),
            approver: approver.to_owned(),
            issued_at_ms: now,
            expires_at_ms: ttl_end.min(request.deadline_ms),
            key_id: String::new(),
        };
        let token = keys.sign(&mut claims);
        self.audit(|| {
            AuditRecord::about(AuditKind::Notice, &request)
                .with_decision("token-issued")
                .with_responder(Some(claims.approver.clone()))
                .with_reason(format!("key {}, expires at {} (epoch ms)", claims.key_id, claims.expires_at_ms))
        });
        Ok(token)
    }

    /// Verifies a token's key and signature and returns what it claims (for a UI that wants to
    /// show which request a link is for). Expiry, approver and the request's state are checked
    /// by [`respond_token`](Self::respond_token).
    pub fn inspect_token(&self, token: &str) -> Result<TokenClaims> {
        self.token_keys()?.verify(token)
    }

    /// Answers a pending request with a signed token, presented by `response.approver` (who
    /// the host authenticated). An approval runs exactly the arguments stored with the request;
    /// an edit, where the tool allows it, is validated against the schema, re-checked by the
    /// policy's rules and recorded, as for [`respond`](Self::respond). A token answers once.
    ///
    /// Errors, in the order checked: `closed`, `config`, `malformed`, `unknown_key`,
    /// `bad_signature`, `token_expired`, `wrong_approver`, `already_used`, `not_pending`, then
    /// everything [`respond`](Self::respond) checks (`unauthorized` from the gate's
    /// authenticator, e.g. [`Approvers`](crate::Approvers); `edits_not_allowed`;
    /// `invalid_arguments`; `malformed`). Every rejection is audited; none changes the request.
    pub fn respond_token(&self, token: &str, response: TokenResponse) -> Result<Outcome> {
        let mut known: Option<Uuid> = None;
        let result = self.respond_token_inner(token, response, &mut known);
        if let Err(e) = &result {
            self.audit(|| {
                let r = match known.and_then(|id| self.inner.store.get(&id)) {
                    Some(req) => AuditRecord::about(AuditKind::ResponseRejected, &req),
                    None => {
                        let mut r = AuditRecord::new(AuditKind::ResponseRejected);
                        r.request_id = known;
                        r
                    }
                };
                r.with_error(e).with_reason(format!("approval token: {e}"))
            });
        }
        result
    }

    /// [`respond_token`](Self::respond_token) without holding the caller's thread while the
    /// answer is recorded, as [`respond_async`](Self::respond_async) does for `respond`.
    pub fn respond_token_async(
        &self,
        token: &str,
        response: TokenResponse,
    ) -> impl std::future::Future<Output = Result<Outcome>> + Send + 'static + use<> {
        let (gate, token) = (self.clone(), token.to_owned());
        self.off_thread(move || gate.respond_token(&token, response))
    }

    fn respond_token_inner(&self, token: &str, response: TokenResponse, known: &mut Option<Uuid>) -> Result<Outcome> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let claims = self.token_keys()?.verify(token)?;
        let id = claims.request_id;
        *known = Some(id);
        if now_ms() >= claims.expires_at_ms {
            return Err(Error::TokenExpired { id, expired_at_ms: claims.expires_at_ms });
        }
        if response.approver != claims.approver {
            return Err(Error::WrongApprover { id, expected: claims.approver, got: response.approver });
        }
        let fp = fingerprint(token);
        if self.token_used(&fp, &id) {
            return Err(Error::AlreadyUsed(id));
        }
        let mut resp = ConfirmationResponse {
            id,
            decision: response.decision,
            arguments: response.arguments,
            scope: response.scope,
            reason: response.reason,
            responder: Some(response.approver),
            tool: Some(claims.tool),
            arguments_digest: Some(claims.arguments_digest),
            session_id: Some(claims.session_id),
            at_ms: None,
        };
        let answered = if self.answered_elsewhere(&id) {
            self.respond_elsewhere(resp, Some(&fp))
        } else {
            self.check_response(&mut resp, Some(&fp), None).and_then(|claimed| self.apply(claimed, resp, Some(&fp)))
        };
        match answered {
            Ok(o) => Ok(o),
            Err(Error::UnknownRequest(_) | Error::AlreadyResolved { .. } | Error::Expired(_)) => {
                // Lost a race with another submission of this token, or the request ended.
                if self.token_used(&fp, &id) {
                    Err(Error::AlreadyUsed(id))
                } else {
                    Err(Error::NotPending { id, state: self.state_of(&id) })
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Issues a sign-in token for `approver`, valid for `ttl`: what an approval console puts in
    /// a per-approver sign-in link. It only names a person; every decision they then make is
    /// still checked by the gate's authenticator. The issue is audited (the token is not).
    ///
    /// Errors: `config` (no [`TokenKeys`]), `malformed` (empty approver, or a `ttl` of zero).
    pub fn issue_sign_in(&self, approver: &str, ttl: std::time::Duration) -> Result<String> {
        let keys = self.token_keys()?;
        if approver.trim().is_empty() {
            return Err(Error::Malformed("a sign-in link must name its approver".into()));
        }
        if ttl.is_zero() {
            return Err(Error::Malformed("a sign-in link needs a lifetime above zero".into()));
        }
        let now = now_ms();
        let mut claims = SignInClaims {
            approver: approver.to_owned(),
            nonce: Uuid::new_v4(),
            issued_at_ms: now,
            expires_at_ms: now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            key_id: String::new(),
        };
        let token = keys.sign_sign_in(&mut claims);
        self.audit(|| {
            AuditRecord::new(AuditKind::Notice)
                .with_decision("sign-in-issued")
                .with_responder(Some(claims.approver.clone()))
                .with_reason(format!("key {}, expires at {} (epoch ms)", claims.key_id, claims.expires_at_ms))
        });
        Ok(token)
    }

    /// Verifies a sign-in token from [`issue_sign_in`](Self::issue_sign_in): form, key,
    /// signature, then expiry. Single use is the caller's to enforce, by `nonce`.
    ///
    /// Errors: `config`, `malformed`, `unknown_key`, `bad_signature`, `token_expired`.
    pub fn verify_sign_in(&self, token: &str) -> Result<SignInClaims> {
        let claims = self.token_keys()?.verify_sign_in(token)?;
        if now_ms() >= claims.expires_at_ms {
            return Err(Error::TokenExpired { id: claims.nonce, expired_at_ms: claims.expires_at_ms });
        }
        Ok(claims)
    }

    /// Signs in with a sign-in token, once: [`verify_sign_in`](Self::verify_sign_in), then its
    /// nonce is used up, in memory and, with a durable or shared store, in the store (so a link
    /// signs in once across restarts and across every gate sharing the store; see
    /// [`keeps_single_use`](Self::keeps_single_use)).
    ///
    /// Errors: those of `verify_sign_in`, `already_used`, `store` (the store could not record it).
    pub fn use_sign_in(&self, token: &str) -> Result<SignInClaims> {
        let claims = self.verify_sign_in(token)?;
        if !self.use_once(claims.nonce, claims.expires_at_ms, now_ms())? {
            return Err(Error::AlreadyUsed(claims.nonce));
        }
        Ok(claims)
    }

    /// Whether the gate has [`TokenKeys`], so it can issue approval tokens and sign-in links.
    pub fn can_issue_tokens(&self) -> bool {
        self.inner.tokens.is_some()
    }

    pub(super) fn token_keys(&self) -> Result<&TokenKeys> {
        self.inner
            .tokens
            .as_ref()
            .ok_or_else(|| Error::Config(format!("this gate has no token keys ({})", self.inner.host.token_keys())))
    }

    fn token_used(&self, fp: &str, id: &Uuid) -> bool {
        // A request still pending has not been answered, with this token or any other: the
        // claim that consumes a token removes the request in the same step.
        if lock(&self.inner.waiters).contains(id) {
            return false;
        }
        lock(&self.inner.tombstones).token(id).is_some_and(|t| t == fp)
            || self.inner.store.record(id).is_some_and(|r| r.token.as_deref() == Some(fp))
    }

    /// What became of a request that is not pending, in words for `not_pending`.
    pub(super) fn state_of(&self, id: &Uuid) -> String {
        if let Some(o) = lock(&self.inner.tombstones).outcome(id) {
            return o.as_str().to_owned();
        }
        match self.inner.store.record(id) {
            Some(r) => r.state.as_str().to_owned(),
            None => "unknown".to_owned(),
        }
    }
}
