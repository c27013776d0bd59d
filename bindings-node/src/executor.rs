//! Decisions and tool results in their JavaScript shape (camelCase JSON).

use crate::errors::ErrorCode;
use crate::events::{CancelReasonKind, OutcomeKind, ScopeKind, string_enum};
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use signoff::{ApprovedBy, Decision, ToolResult, ToolStatus};

string_enum!(
    #[doc = "Why a call may run."]
    ApprovedByKind("kebab-case") <=> ApprovedBy { NotGated, Person, SessionGrant, GatingDisabled }
);
string_enum!(
    #[doc = "What became of a call."]
    ToolStatusKind("kebab-case") <=> ToolStatus { Executed, Failed, Denied, TimedOut, Cancelled, Rejected }
);

/// The gate's decision (the core's `Decision`, flattened; `approved` is true only for
/// `outcome: 'approved'`).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionData {
    pub outcome: OutcomeKind,
    pub approved: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The arguments to run with (approved only): the original ones or the person's edit.
    #[napi(ts_type = "any")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<ApprovedByKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// The person's reason (denied) or the cancel reason (cancelled), as in the core's JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<CancelReasonKind>,
    #[napi(ts_type = "number")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

pub(crate) fn decision_data(d: Decision) -> DecisionData {
    let mut out = DecisionData {
        outcome: d.outcome().into(),
        approved: d.is_approved(),
        request_id: d.request_id().map(|u| u.to_string()),
        arguments: None,
        edited: None,
        by: None,
        scope: None,
        responder: None,
        reason: None,
        cancel_reason: None,
        timeout_ms: None,
    };
    match d {
        Decision::Approved { arguments, edited, by, scope, responder, .. } => {
            out.arguments = Some(arguments);
            out.edited = Some(edited);
            out.by = Some(by.into());
            out.scope = Some(scope.into());
            out.responder = responder;
        }
        Decision::Denied { reason, responder, .. } => {
            out.reason = reason;
            out.responder = responder;
        }
        Decision::TimedOut { timeout_ms, .. } => out.timeout_ms = Some(timeout_ms),
        Decision::Cancelled { reason, .. } => {
            out.reason = Some(reason.as_str().to_owned());
            out.cancel_reason = Some(reason.into());
        }
    }
    out
}

/// The result of one call, in the model's terms (`content` is the tool message text).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultData {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub tool: String,
    pub status: ToolStatusKind,
    #[napi(ts_type = "any")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    #[napi(ts_type = "any")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    pub edited: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionData>,
    pub content: String,
    pub is_error: bool,
}

pub(crate) fn result_data(r: ToolResult) -> ToolResultData {
    ToolResultData {
        is_error: r.is_error(),
        call_id: r.call_id,
        tool: r.tool,
        status: r.status.into(),
        output: r.output,
        error: r.error,
        error_code: r.error_kind.map(Into::into),
        arguments: r.arguments,
        edited: r.edited,
        request_id: r.request_id.map(|u| u.to_string()),
        decision: r.decision.map(decision_data),
        content: r.content,
    }
}

/// [`result_data`] for the facade's `ToolResult`, whose JSON is parsed on every call: the
/// decision leaves out what the result itself says (its `requestId`, and an approval's
/// `arguments` and `edited`), and `ToolResult`'s constructor puts them back.
pub(crate) fn result_data_compact(r: ToolResult) -> ToolResultData {
    let mut out = result_data(r);
    if let Some(d) = &mut out.decision {
        if d.request_id == out.request_id {
            d.request_id = None;
        }
        if d.arguments.is_some() && d.arguments == out.arguments && d.edited == Some(out.edited) {
            d.arguments = None;
            d.edited = None;
        }
    }
    out
}

/// A tool call, as `executeBatch` receives them: its arguments and metadata as JSON text (parsed
/// strictly, as `execute`'s).
#[napi(object)]
pub struct ToolCallData {
    pub tool: String,
    pub arguments_json: Option<String>,
    pub session_id: Option<String>,
    pub call_id: Option<String>,
    pub metadata_json: Option<String>,
}
