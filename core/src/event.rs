//! The events on the bus and their stable JSON form (`type`-tagged, snake_case fields,
//! times as Unix epoch milliseconds).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

/// Milliseconds since the Unix epoch, from the wall clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A call waiting for a person. Everything a UI needs to show it, and what a response must echo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmationRequest {
    /// Unique id; a response carries it back.
    pub id: Uuid,
    /// The tool's name.
    pub tool: String,
    /// The tool's description.
    pub description: String,
    /// The arguments that will run if approved unchanged.
    pub arguments: Value,
    /// Pretty JSON of the arguments with control, bidi and zero-width characters escaped:
    /// show this, not a rendering of `arguments` of your own.
    pub display_arguments: String,
    /// The rendered, escaped prompt.
    pub prompt: String,
    /// `sha256:<hex>` of the canonical JSON of `arguments`; a response may echo it.
    pub arguments_digest: String,
    /// The agent session the call belongs to.
    pub session_id: String,
    /// The model's id for this tool call, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Whether the person may edit the arguments.
    pub editable: bool,
    /// Why approval is needed.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// How long the request waits, in milliseconds.
    pub timeout_ms: u64,
    /// When it stops waiting (epoch ms).
    pub deadline_ms: u64,
    /// When it was made (epoch ms).
    pub created_at_ms: u64,
    /// Free metadata from the caller.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
}

/// A person's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseDecision {
    Approve,
    Deny,
}

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This call only.
    #[default]
    Once,
    /// This call and later calls of the same tool in the same session, until revoked or the
    /// session ends. Never crosses sessions, never persisted, never overrides an argument rule.
    Session,
}

/// A person's answer to a [`ConfirmationRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationResponse {
    /// The request's id.
    pub id: Uuid,
    /// Approve or deny.
    pub decision: ResponseDecision,
    /// Edited arguments (approve only; the tool must be editable). Validated against the
    /// tool's schema before they can run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Once (default) or for the rest of the session.
    #[serde(default)]
    pub scope: Scope,
    /// The person's reason, passed to the model on a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// Binding: the tool the person saw. Checked when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Binding: the digest of the arguments the person saw. Checked when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_digest: Option<String>,
    /// Binding: the session of the request. Checked when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When the person answered (epoch ms); filled in by the gate when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

impl ConfirmationResponse {
    fn bound(request: &ConfirmationRequest, decision: ResponseDecision) -> Self {
        ConfirmationResponse {
            id: request.id,
            decision,
            arguments: None,
            scope: Scope::Once,
            reason: None,
            responder: None,
            tool: Some(request.tool.clone()),
            arguments_digest: Some(request.arguments_digest.clone()),
            session_id: Some(request.session_id.clone()),
            at_ms: None,
        }
    }

    /// An approval bound to `request` (id, tool, digest, session).
    pub fn approve(request: &ConfirmationRequest) -> Self {
        Self::bound(request, ResponseDecision::Approve)
    }

    /// A denial bound to `request`, with an optional reason.
    pub fn deny(request: &ConfirmationRequest, reason: Option<String>) -> Self {
        ConfirmationResponse { reason, ..Self::bound(request, ResponseDecision::Deny) }
    }

    /// An unbound response by id alone (the gate checks only what is present).
    pub fn by_id(id: Uuid, decision: ResponseDecision) -> Self {
        ConfirmationResponse {
            id,
            decision,
            arguments: None,
            scope: Scope::Once,
            reason: None,
            responder: None,
            tool: None,
            arguments_digest: None,
            session_id: None,
            at_ms: None,
        }
    }

    /// Approve with edited arguments.
    pub fn with_arguments(mut self, args: Value) -> Self {
        self.arguments = Some(args);
        self
    }

    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    pub fn with_responder(mut self, who: impl Into<String>) -> Self {
        self.responder = Some(who.into());
        self
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Parses a response from JSON. A `"type": "confirmation-response"` field is accepted;
    /// any other `type`, unknown fields, or missing required fields are [`Error::Malformed`].
    pub fn from_json_str(s: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(s).map_err(|e| Error::Malformed(format!("response is not JSON: {e}")))?;
        Self::from_json(v)
    }

    /// Like [`from_json_str`](Self::from_json_str), from a parsed value.
    pub fn from_json(mut v: Value) -> Result<Self> {
        let Some(obj) = v.as_object_mut() else {
            return Err(Error::Malformed("response must be a JSON object".into()));
        };
        if let Some(t) = obj.remove("type")
            && t != "confirmation-response" {
                return Err(Error::Malformed(format!("expected type \"confirmation-response\", got {t}")));
            }
        serde_json::from_value(v).map_err(|e| Error::Malformed(format!("response: {e}")))
    }
}

/// Sent when a request's deadline passes with no answer. Never reported as a person's denial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmationTimeout {
    pub id: Uuid,
    pub tool: String,
    pub session_id: String,
    pub deadline_ms: u64,
    pub at_ms: u64,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Approved,
    Denied,
    TimedOut,
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Approved => "approved",
            Outcome::Denied => "denied",
            Outcome::TimedOut => "timed-out",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Why a request was cancelled (each is a distinct, reported fail-safe outcome; all deny).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CancelReason {
    /// Nobody was subscribed to the bus, or every subscriber went away.
    NoSubscribers,
    /// The gate was shut down.
    Shutdown,
    /// The task waiting for the decision was cancelled (future dropped, abort signal, ...).
    Aborted,
    /// The session ended.
    SessionEnded,
}

impl CancelReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::NoSubscribers => "no-subscribers",
            CancelReason::Shutdown => "shutdown",
            CancelReason::Aborted => "aborted",
            CancelReason::SessionEnded => "session-ended",
        }
    }
}

/// The final event of every request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmationResolved {
    pub id: Uuid,
    pub tool: String,
    pub session_id: String,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<CancelReason>,
    /// Who decided (approved or denied only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub scope: Scope,
    /// The person changed the arguments.
    #[serde(default)]
    pub edited: bool,
    pub at_ms: u64,
}

/// An event on the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Event {
    ConfirmationRequest(Arc<ConfirmationRequest>),
    ConfirmationResponse(Arc<ConfirmationResponse>),
    ConfirmationTimeout(Arc<ConfirmationTimeout>),
    ConfirmationResolved(Arc<ConfirmationResolved>),
}

impl Event {
    /// The request id the event is about.
    pub fn request_id(&self) -> Uuid {
        match self {
            Event::ConfirmationRequest(e) => e.id,
            Event::ConfirmationResponse(e) => e.id,
            Event::ConfirmationTimeout(e) => e.id,
            Event::ConfirmationResolved(e) => e.id,
        }
    }

    /// The `type` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::ConfirmationRequest(_) => "confirmation-request",
            Event::ConfirmationResponse(_) => "confirmation-response",
            Event::ConfirmationTimeout(_) => "confirmation-timeout",
            Event::ConfirmationResolved(_) => "confirmation-resolved",
        }
    }

    /// The stable JSON form.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Parses the stable JSON form.
    pub fn from_json(v: Value) -> Result<Self> {
        serde_json::from_value(v).map_err(|e| Error::Malformed(format!("event: {e}")))
    }
}
