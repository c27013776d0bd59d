//! The events on the bus and their stable JSON form (`type`-tagged, snake_case fields,
//! times as Unix epoch milliseconds).

use crate::arguments::{Arguments, Digest};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

/// Milliseconds since the Unix epoch, from the wall clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A request id as a caller names it (to answer, cancel or look up a request, or to issue a
/// token for it): text that is not a UUID names no request, [`Error::NoSuchRequest`] (kind
/// `unknown_request`), the same in every language.
///
/// ```
/// assert_eq!(signoff::parse_request_id("nope").unwrap_err().kind(), signoff::ErrorKind::UnknownRequest);
/// assert!(signoff::parse_request_id("67e55044-10b1-426f-9247-bb680e5fe0c8").is_ok());
/// ```
pub fn parse_request_id(id: &str) -> Result<Uuid> {
    Uuid::parse_str(id).map_err(|_| Error::NoSuchRequest(id.to_owned()))
}

/// A call waiting for a person. Everything a UI needs to show it, and what a response must echo.
///
/// Its JSON form also carries `display_arguments` ([`display_arguments`](Self::display_arguments),
/// derived from the arguments when written; a `display_arguments` in JSON that is read is ignored,
/// so the text shown cannot differ from the arguments that run).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ConfirmationRequest {
    // Each field's `///` text is what every language shows its users: the bindings' request
    // types (Python's getters and stub, Node's type and getters, Swift's record) are generated
    // from this declaration by `core/tests/sourcegen.rs`. A field added here reaches them with
    // `SIGNOFF_SOURCEGEN=write cargo test -p signoff --test sourcegen`; a type not seen before
    // needs one conversion per language there.
    /// The request's id (a UUID); a response carries it back.
    pub id: Uuid,
    /// The tool's name.
    // Shared with the tool's other requests, as are `description` and, mostly, `prompt`.
    pub tool: Arc<str>,
    /// The tool's description, escaped for display.
    pub description: Arc<str>,
    /// The arguments that run if the request is approved unchanged.
    // Kept as canonical JSON text.
    pub arguments: Arguments,
    /// The rendered prompt, escaped for display.
    pub prompt: Arc<str>,
    /// `sha256:<hex>` of the canonical JSON of the arguments; a response may echo it.
    pub arguments_digest: Digest,
    /// The agent session the call belongs to.
    pub session_id: Arc<str>,
    /// The model's id for this tool call, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Whether the person may edit the arguments.
    pub editable: bool,
    /// Why approval is needed.
    #[serde(default)]
    pub reasons: Arc<[String]>,
    /// How long the request waits, in milliseconds.
    pub timeout_ms: u64,
    /// When it stops waiting, in Unix epoch milliseconds.
    pub deadline_ms: u64,
    /// When it was made, in Unix epoch milliseconds.
    pub created_at_ms: u64,
    /// Free metadata from the caller (absent when none was given).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
}

impl ConfirmationRequest {
    /// Pretty JSON of the arguments with control, bidi, zero-width and other invisible
    /// characters escaped: show this, not a rendering of `arguments` of your own. Computed from
    /// the arguments on each call (a pending request does not keep it).
    pub fn display_arguments(&self) -> String {
        crate::display::display_arguments_json(self.arguments.json())
    }
}

impl Serialize for ConfirmationRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.write(s, true)
    }
}

/// [`ConfirmationRequest::details`]: the request's JSON form without `id`, `tool`, `arguments`
/// and `display_arguments`.
#[derive(Debug, Clone, Copy)]
pub struct RequestDetails<'a>(&'a ConfirmationRequest);

impl Serialize for RequestDetails<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.write(s, false)
    }
}

impl ConfirmationRequest {
    /// The fields of the JSON form other than `id`, `tool`, `arguments` and `display_arguments`,
    /// for a binding that hands those over on their own (the display text is derived from the
    /// arguments with [`display::display_arguments_json`](crate::display::display_arguments_json)
    /// when asked for): what the rest costs to write is then paid for the short fields only.
    pub fn details(&self) -> RequestDetails<'_> {
        RequestDetails(self)
    }

    /// The JSON form; without `id`, `tool`, `arguments` and `display_arguments` unless `whole`.
    fn write<S: serde::Serializer>(&self, s: S, whole: bool) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let optional = usize::from(self.tool_call_id.is_some()) + usize::from(!self.metadata.is_null());
        let mut st = s.serialize_struct("ConfirmationRequest", if whole { 13 } else { 9 } + optional)?;
        if whole {
            st.serialize_field("id", &self.id)?;
            st.serialize_field("tool", &self.tool)?;
        }
        st.serialize_field("description", &self.description)?;
        if whole {
            st.serialize_field("arguments", &self.arguments)?;
            st.serialize_field("display_arguments", &self.display_arguments())?;
        }
        st.serialize_field("prompt", &self.prompt)?;
        st.serialize_field("arguments_digest", &self.arguments_digest)?;
        st.serialize_field("session_id", &self.session_id)?;
        match &self.tool_call_id {
            Some(t) => st.serialize_field("tool_call_id", t)?,
            None => st.skip_field("tool_call_id")?,
        }
        st.serialize_field("editable", &self.editable)?;
        st.serialize_field("reasons", &self.reasons)?;
        st.serialize_field("timeout_ms", &self.timeout_ms)?;
        st.serialize_field("deadline_ms", &self.deadline_ms)?;
        st.serialize_field("created_at_ms", &self.created_at_ms)?;
        if self.metadata.is_null() {
            st.skip_field("metadata")?;
        } else {
            st.serialize_field("metadata", &self.metadata)?;
        }
        st.end()
    }
}

/// A person's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseDecision {
    /// Run the call (with edited arguments, if the response carries them).
    Approve,
    /// Do not run the call.
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
    // Each field's `///` text is what every language shows: the bindings' copies of this type
    // are generated from it (`core/tests/sourcegen.rs`, `make generate`).
    /// The request's id.
    pub id: Uuid,
    /// Approve or deny.
    pub decision: ResponseDecision,
    /// Once (default) or for the rest of the session.
    #[serde(default)]
    pub scope: Scope,
    /// Edited arguments (approve only; the tool must be editable). Validated against the
    /// tool's schema before they can run. `null` is no edit, as when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The person's reason, passed to the model on a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// The tool the person saw; checked against the request when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The digest of the arguments the person saw; checked against the request when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_digest: Option<String>,
    /// The request's session; checked against the request when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When the person answered, in Unix epoch milliseconds; filled in by the gate when absent.
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
            tool: Some(request.tool.to_string()),
            arguments_digest: Some(request.arguments_digest.to_string()),
            session_id: Some(request.session_id.to_string()),
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

    /// Sets the scope. [`Scope::Session`] is for approvals only: a denial with it is rejected
    /// as `malformed`.
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Names who answered; recorded in the audit log and checked by authenticators such as
    /// [`AllowedResponders`](crate::AllowedResponders).
    pub fn with_responder(mut self, who: impl Into<String>) -> Self {
        self.responder = Some(who.into());
        self
    }

    /// Sets the person's reason; on a denial the model reads it.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Parses a response from JSON. A `"type": "confirmation-response"` field is accepted;
    /// any other `type`, unknown fields, or missing required fields are [`Error::Malformed`]; an
    /// `id` string that is not a UUID is [`Error::NoSuchRequest`] (kind `unknown_request`).
    /// Only `id` and `decision` are required.
    ///
    /// # Examples
    ///
    /// ```
    /// use signoff::{ConfirmationResponse, ErrorKind, ResponseDecision, Scope};
    ///
    /// let r = ConfirmationResponse::from_json_str(r#"{
    ///     "type": "confirmation-response",
    ///     "id": "67e55044-10b1-426f-9247-bb680e5fe0c8",
    ///     "decision": "approve",
    ///     "scope": "session",
    ///     "responder": "alice"
    /// }"#)
    /// .unwrap();
    /// assert_eq!(r.decision, ResponseDecision::Approve);
    /// assert_eq!(r.scope, Scope::Session);
    /// assert_eq!(r.responder.as_deref(), Some("alice"));
    ///
    /// let bad = r#"{"id": "67e55044-10b1-426f-9247-bb680e5fe0c8", "decision": "maybe"}"#;
    /// let err = ConfirmationResponse::from_json_str(bad).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Malformed);
    /// ```
    pub fn from_json_str(s: &str) -> Result<Self> {
        Self::from_json(crate::json::from_str(s, "the response")?)
    }

    /// Like [`from_json_str`](Self::from_json_str), from a parsed value.
    pub fn from_json(mut v: Value) -> Result<Self> {
        let Some(obj) = v.as_object_mut() else {
            return Err(Error::Malformed("response must be a JSON object".into()));
        };
        if let Some(t) = obj.remove("type")
            && t != "confirmation-response"
        {
            return Err(Error::Malformed(format!("expected type \"confirmation-response\", got {t}")));
        }
        // An id that is not a request id names no request: say so, not "malformed".
        if let Some(Value::String(id)) = obj.get("id") {
            parse_request_id(id)?;
        }
        serde_json::from_value(v).map_err(|e| Error::Malformed(format!("response: {e}")))
    }
}

/// Sent when a request's deadline passes with no answer. Never reported as a person's denial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmationTimeout {
    // Each field's `///` text is what every language shows: the bindings' copies of this type
    // are generated from it (`core/tests/sourcegen.rs`, `make generate`).
    /// The request's id.
    pub id: Uuid,
    /// The request's tool.
    pub tool: String,
    /// The request's session.
    pub session_id: String,
    /// The request's deadline, in Unix epoch milliseconds.
    pub deadline_ms: u64,
    /// When the timeout was detected, in Unix epoch milliseconds.
    pub at_ms: u64,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// A person approved; the call may run.
    Approved,
    /// A person denied, or signoff denied for an approval handler that failed or did not answer.
    Denied,
    /// The deadline passed with no valid answer.
    TimedOut,
    /// Ended without an answer for a [`CancelReason`].
    Cancelled,
}

impl Outcome {
    /// The stable kebab-case name, as in the JSON form, e.g. `"timed-out"`.
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
    /// No approver was attached when the request was made, or the last one went away
    /// (observers do not count). Records written before this name read back from its old
    /// name, `no-subscribers`.
    #[serde(alias = "no-subscribers")]
    NoApprover,
    /// The gate was shut down.
    Shutdown,
    /// The task waiting for the decision was cancelled (future dropped, abort signal, ...).
    Aborted,
    /// The session ended.
    SessionEnded,
    /// The approval step itself failed before anyone decided: a handler raised, panicked or
    /// returned without answering. Not a person's refusal; the detail is in the audit log.
    ApprovalFailed,
}

impl CancelReason {
    /// The stable kebab-case name, as in the JSON form, e.g. `"no-approver"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::NoApprover => "no-approver",
            CancelReason::Shutdown => "shutdown",
            CancelReason::Aborted => "aborted",
            CancelReason::SessionEnded => "session-ended",
            CancelReason::ApprovalFailed => "approval-failed",
        }
    }
}

/// The final event of every request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmationResolved {
    // Each field's `///` text is what every language shows: the bindings' copies of this type
    // are generated from it (`core/tests/sourcegen.rs`, `make generate`).
    /// The request's id.
    pub id: Uuid,
    /// The request's tool.
    pub tool: String,
    /// The request's session.
    pub session_id: String,
    /// How the request ended.
    pub outcome: Outcome,
    /// Why it was cancelled (outcome `cancelled` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<CancelReason>,
    /// Who decided (approved or denied only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// The reason given with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `session` when the approval also granted later calls of the tool in the session, else
    /// `once`.
    #[serde(default)]
    pub scope: Scope,
    /// The person changed the arguments.
    #[serde(default)]
    pub edited: bool,
    /// When the request resolved, in Unix epoch milliseconds.
    pub at_ms: u64,
}

/// An event on the bus. The JSON form is the payload's fields plus a kebab-case `type` tag, e.g.
/// `"type": "confirmation-request"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Event {
    /// `confirmation-request`: a call waits for a person; answer it with
    /// [`Gate::respond`](crate::Gate::respond).
    ConfirmationRequest(Arc<ConfirmationRequest>),
    /// `confirmation-response`: a response was accepted (rejected responses are not published).
    ConfirmationResponse(Arc<ConfirmationResponse>),
    /// `confirmation-timeout`: a request's deadline passed with no answer.
    ConfirmationTimeout(Arc<ConfirmationTimeout>),
    /// `confirmation-resolved`: the last event of every request, whatever its outcome.
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

/// A set of event types, for a subscription that wants only some
/// ([`Subscription::only`](crate::Subscription::only)): an approver that reads only requests is
/// not handed the responses and resolutions that follow its own answers.
///
/// ```
/// use signoff::EventTypes;
/// let t = EventTypes::from_names(["confirmation-request", "confirmation-resolved"]).unwrap();
/// assert!(t.contains(EventTypes::REQUEST) && !t.contains(EventTypes::RESPONSE));
/// assert_eq!(t, EventTypes::REQUEST | EventTypes::RESOLVED);
/// assert!(EventTypes::from_names(["request"]).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventTypes(u8);

impl EventTypes {
    /// `confirmation-request`.
    pub const REQUEST: EventTypes = EventTypes(1);
    /// `confirmation-response`.
    pub const RESPONSE: EventTypes = EventTypes(2);
    /// `confirmation-timeout`.
    pub const TIMEOUT: EventTypes = EventTypes(4);
    /// `confirmation-resolved`.
    pub const RESOLVED: EventTypes = EventTypes(8);
    /// Every type.
    pub const ALL: EventTypes = EventTypes(15);
    /// No type: only a [`Lagged`](crate::Lagged) marker, which every subscription receives.
    pub const NONE: EventTypes = EventTypes(0);
    /// The `type` tags, in the order of the bits.
    pub const NAMES: [&'static str; 4] =
        ["confirmation-request", "confirmation-response", "confirmation-timeout", "confirmation-resolved"];

    /// The type of `event`.
    pub fn of(event: &Event) -> EventTypes {
        match event {
            Event::ConfirmationRequest(_) => Self::REQUEST,
            Event::ConfirmationResponse(_) => Self::RESPONSE,
            Event::ConfirmationTimeout(_) => Self::TIMEOUT,
            Event::ConfirmationResolved(_) => Self::RESOLVED,
        }
    }

    /// True when every type in `other` is in `self`.
    pub fn contains(self, other: EventTypes) -> bool {
        self.0 & other.0 == other.0
    }

    /// The set named by `type` tags (`"confirmation-request"`, ...); an empty list is
    /// [`NONE`](Self::NONE).
    ///
    /// # Errors
    /// [`Error::Malformed`] naming a tag that is not an event type.
    pub fn from_names<I, S>(names: I) -> Result<EventTypes>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut bits = 0;
        for name in names {
            let name = name.as_ref();
            let i = Self::NAMES.iter().position(|k| *k == name).ok_or_else(|| {
                Error::Malformed(format!("unknown event type {name:?} (one of {})", Self::NAMES.join(", ")))
            })?;
            bits |= 1 << i;
        }
        Ok(EventTypes(bits))
    }
}

impl std::ops::BitOr for EventTypes {
    type Output = EventTypes;
    fn bitor(self, rhs: EventTypes) -> EventTypes {
        EventTypes(self.0 | rhs.0)
    }
}
