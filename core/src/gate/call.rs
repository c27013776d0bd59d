//! A call from the model and the gate's decision about it.

use crate::event::{CancelReason, Outcome, Scope};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The session used when a call names none.
pub const DEFAULT_SESSION: &str = "default";

/// A tool call from the model. Its JSON form refuses unknown fields: a misspelt `sessionId` or
/// `args` would otherwise run the call in the default session, or with no arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// The arguments (a JSON object for most schemas). `null` is no arguments: `{}`, as when
    /// absent (a model's call of a tool without parameters may say either).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The agent session. Grants never cross sessions.
    #[serde(default = "default_session")]
    pub session_id: String,
    /// The model's id for this call, carried to the request and the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Free metadata, shown with the request.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl ToolCall {
    /// The arguments as the gate reads them: `null` is none, `{}`.
    pub(crate) fn arguments_or_empty(&self) -> std::borrow::Cow<'_, Value> {
        match &self.arguments {
            Value::Null => std::borrow::Cow::Owned(empty_object()),
            a => std::borrow::Cow::Borrowed(a),
        }
    }
}

/// `session` as a request keeps it: the default session's name is one shared string.
pub(crate) fn shared_session(session: String) -> std::sync::Arc<str> {
    static DEFAULT: std::sync::LazyLock<std::sync::Arc<str>> = std::sync::LazyLock::new(|| DEFAULT_SESSION.into());
    if session == DEFAULT_SESSION { DEFAULT.clone() } else { session.into() }
}

fn default_session() -> String {
    DEFAULT_SESSION.to_owned()
}

impl ToolCall {
    /// A call in the default session.
    pub fn new(tool: impl Into<String>, arguments: Value) -> Self {
        ToolCall { tool: tool.into(), arguments, session_id: default_session(), call_id: None, metadata: Value::Null }
    }
    /// Sets the agent session (grants never cross sessions).
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = session_id.into();
        self
    }
    /// Sets the model's id for this call; it is carried to the request and the result.
    pub fn call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }
    /// Attaches free metadata, shown with the request.
    pub fn metadata(mut self, m: Value) -> Self {
        self.metadata = m;
        self
    }
}

/// Why a call may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovedBy {
    /// The policy does not gate this call.
    NotGated,
    /// A person approved this call.
    Person,
    /// A person approved this tool for the session earlier.
    SessionGrant,
    /// Gating is disabled on this gate (development only).
    GatingDisabled,
}

/// The gate's answer to [`Gate::confirm`](crate::Gate::confirm): run (with these arguments) or do not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Decision {
    /// Run the tool with `arguments` (the original ones, or the person's edit).
    Approved {
        /// The request a person answered; `None` when no request was made.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<Uuid>,
        /// The arguments to run with: the original ones, or the person's validated edit.
        arguments: Value,
        /// The person changed the arguments.
        edited: bool,
        /// Why the call may run.
        by: ApprovedBy,
        /// `Session` when the approval (or the grant that covered it) was for the session.
        #[serde(default)]
        scope: Scope,
        /// Who approved.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        responder: Option<String>,
    },
    /// A person said no.
    Denied {
        /// The request that was denied.
        request_id: Uuid,
        /// The person's reason, passed on to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Who denied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        responder: Option<String>,
    },
    /// Nobody answered before the deadline.
    TimedOut {
        /// The request nobody answered.
        request_id: Uuid,
        /// How long it waited.
        timeout_ms: u64,
    },
    /// The request was cancelled before anyone answered.
    Cancelled {
        /// The cancelled request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<Uuid>,
        /// Why it was cancelled.
        reason: CancelReason,
    },
}

impl Decision {
    /// True only for [`Decision::Approved`].
    pub fn is_approved(&self) -> bool {
        matches!(self, Decision::Approved { .. })
    }
    /// The arguments to run with, when approved.
    pub fn arguments(&self) -> Option<&Value> {
        match self {
            Decision::Approved { arguments, .. } => Some(arguments),
            _ => None,
        }
    }
    /// The confirmation request this decision answers, if one was made.
    pub fn request_id(&self) -> Option<Uuid> {
        match self {
            Decision::Approved { request_id, .. } | Decision::Cancelled { request_id, .. } => *request_id,
            Decision::Denied { request_id, .. } | Decision::TimedOut { request_id, .. } => Some(*request_id),
        }
    }
    /// Who answered: the approver or the person who denied (when known).
    pub fn responder(&self) -> Option<&str> {
        match self {
            Decision::Approved { responder, .. } | Decision::Denied { responder, .. } => responder.as_deref(),
            _ => None,
        }
    }
    /// The reason a person gave for a denial.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Decision::Denied { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }
    /// Why the request was cancelled, for [`Decision::Cancelled`].
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        match self {
            Decision::Cancelled { reason, .. } => Some(*reason),
            _ => None,
        }
    }
    /// The approval's scope ([`Scope::Once`] for everything but an approval for the session).
    pub fn scope(&self) -> Scope {
        match self {
            Decision::Approved { scope, .. } => *scope,
            _ => Scope::Once,
        }
    }
    /// Why an approved call may run.
    pub fn approved_by(&self) -> Option<ApprovedBy> {
        match self {
            Decision::Approved { by, .. } => Some(*by),
            _ => None,
        }
    }
    /// True when a person changed the arguments before approving.
    pub fn edited(&self) -> bool {
        matches!(self, Decision::Approved { edited: true, .. })
    }
    /// How long the request waited, for [`Decision::TimedOut`].
    pub fn timeout_ms(&self) -> Option<u64> {
        match self {
            Decision::TimedOut { timeout_ms, .. } => Some(*timeout_ms),
            _ => None,
        }
    }
    /// The final outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::Approved { .. } => Outcome::Approved,
            Decision::Denied { .. } => Outcome::Denied,
            Decision::TimedOut { .. } => Outcome::TimedOut,
            Decision::Cancelled { .. } => Outcome::Cancelled,
        }
    }
}
