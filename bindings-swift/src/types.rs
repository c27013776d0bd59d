//! Records and enums mirroring the core types, and the conversions both ways. JSON values
//! (arguments, schemas, metadata, outputs) cross the FFI as JSON text in `*_json` fields.

use crate::error::{ErrorKind, SignoffError, malformed};
use serde_json::Value;
use signoff as core;
use std::sync::Arc;
use uuid::Uuid;

// Core types exposed as they are: each `#[uniffi::remote(...)]` below mirrors the core's
// definition (uniffi generates the FFI code for the core type; the mirror itself is not emitted).
pub use signoff::{
    ApprovalMode, ApprovedBy, CancelReason, ConfirmationResolved, ConfirmationTimeout, Evaluation, Outcome,
    ResponseDecision, Scope, ToolSource, ToolStatus,
};

/// A request id (a UUID) in its string form, as every id crosses the FFI; text that is not a UUID
/// is `malformed`.
pub type RequestId = Uuid;
uniffi::custom_type!(RequestId, String, {
    remote,
    lower: |id| id.to_string(),
    try_lift: |s| Ok(parse_uuid("a request id", &s)?),
});

// ---------------------------------------------------------------------------------------------
// helpers

/// A JSON document from the Swift side (a tool definition, an event), parsed by the core's
/// strict parser (`signoff::json`): a repeated key, `NaN`/`Infinity` or a number out of range,
/// or trailing data is `malformed`, the same rules as every other binding. A document may nest
/// one level deeper than a value, so that it can carry a value at the limit.
pub(crate) fn parse_json(what: &str, s: &str) -> Result<Value, SignoffError> {
    Ok(core::json::from_str(s, what)?)
}

/// A JSON value from the Swift side (arguments, edited arguments, metadata): [`parse_json`], and
/// at most `signoff::json::MAX_NESTING` (64) levels of arrays and objects, so that a value the
/// gate would refuse is refused here, before any request exists.
pub(crate) fn parse_value(what: &str, s: &str) -> Result<Value, SignoffError> {
    let v = core::json::from_str(s, what)?;
    core::json::check(&v, what)?;
    Ok(v)
}

pub(crate) fn parse_uuid(what: &str, s: &str) -> Result<Uuid, SignoffError> {
    Uuid::parse_str(s).map_err(|e| malformed(&format!("{what} is not a UUID"), e))
}

/// A request id the caller names to answer or cancel: one that is not a UUID names no request
/// (`UnknownRequest`, as in every language), not a malformed payload.
pub(crate) fn request_id(s: &str) -> Result<Uuid, SignoffError> {
    Ok(core::parse_request_id(s)?)
}

/// The detail of a core parse error, for an `invalid_tool` reason.
fn detail(e: core::Error) -> String {
    match e {
        core::Error::Malformed(m) => m,
        e => e.to_string(),
    }
}

fn opt_json(v: &Value) -> Option<String> {
    if v.is_null() { None } else { Some(v.to_string()) }
}

/// Free JSON carried as optional text: `None` is JSON `null`.
fn parse_opt_json(what: &str, s: &Option<String>) -> Result<Value, SignoffError> {
    match s {
        Some(s) => parse_value(what, s),
        None => Ok(Value::Null),
    }
}

/// Optional free JSON carried as optional text.
fn parse_opt_value(what: &str, s: &Option<String>) -> Result<Option<Value>, SignoffError> {
    s.as_deref().map(|s| parse_value(what, s)).transpose()
}

fn parse_digest(what: &str, s: &str) -> Result<core::Digest, SignoffError> {
    core::Digest::parse(s).ok_or_else(|| {
        SignoffError::from(core::Error::Malformed(format!("{what} is not `sha256:` and 64 lowercase hex digits")))
    })
}

// ---------------------------------------------------------------------------------------------
// tools

/// Whether calls to a tool need a person's approval.
#[uniffi::remote(Enum)]
pub enum ApprovalMode {
    /// Decided by the gate's policy (keywords, destructive, external source).
    Default,
    /// Always ask.
    Required,
    /// Never ask (argument rules can still force approval).
    NotRequired,
}

/// Where a tool comes from.
#[uniffi::remote(Enum)]
pub enum ToolSource {
    /// Shipped with the application.
    BuiltIn,
    /// Provided by an external server, e.g. an MCP server.
    External { server: String },
}

/// A rule on a call's arguments; when it holds, the call needs approval. `pointer` is a JSON
/// Pointer (`/path`). `values_json` is a JSON array, e.g. `["boss@example.com"]`.
#[derive(Debug, Clone, PartialEq, uniffi::Enum)]
pub enum ArgRule {
    PathOutside { pointer: String, prefixes: Vec<String> },
    GreaterThan { pointer: String, value: f64 },
    OneOf { pointer: String, values_json: String },
    NotOneOf { pointer: String, values_json: String },
    Contains { pointer: String, substring: String },
}

impl From<core::ArgRule> for ArgRule {
    fn from(r: core::ArgRule) -> Self {
        match r {
            core::ArgRule::PathOutside { pointer, prefixes } => ArgRule::PathOutside { pointer, prefixes },
            core::ArgRule::GreaterThan { pointer, value } => ArgRule::GreaterThan { pointer, value },
            core::ArgRule::OneOf { pointer, values } => {
                ArgRule::OneOf { pointer, values_json: Value::from(values).to_string() }
            }
            core::ArgRule::NotOneOf { pointer, values } => {
                ArgRule::NotOneOf { pointer, values_json: Value::from(values).to_string() }
            }
            core::ArgRule::Contains { pointer, substring } => ArgRule::Contains { pointer, substring },
        }
    }
}

fn rule_to_core(tool: &str, r: ArgRule) -> Result<core::ArgRule, SignoffError> {
    let values = |s: &str| -> Result<Vec<Value>, SignoffError> {
        let invalid = |reason: String| SignoffError::from(core::Error::InvalidTool { tool: tool.to_owned(), reason });
        match core::json::from_str(s, "rule values_json") {
            Ok(Value::Array(values)) => Ok(values),
            Ok(_) => Err(invalid("rule values_json must be a JSON array".into())),
            Err(e) => Err(invalid(detail(e))),
        }
    };
    Ok(match r {
        ArgRule::PathOutside { pointer, prefixes } => core::ArgRule::PathOutside { pointer, prefixes },
        ArgRule::GreaterThan { pointer, value } => core::ArgRule::GreaterThan { pointer, value },
        ArgRule::OneOf { pointer, values_json } => core::ArgRule::OneOf { pointer, values: values(&values_json)? },
        ArgRule::NotOneOf { pointer, values_json } => {
            core::ArgRule::NotOneOf { pointer, values: values(&values_json)? }
        }
        ArgRule::Contains { pointer, substring } => core::ArgRule::Contains { pointer, substring },
    })
}

/// The description of a tool (the core's `ToolSpec`). `nil` fields take the core's defaults:
/// parameters "any object", approval `.default`, source `.builtIn`.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ToolSpec {
    /// Unique name, as the model calls it.
    pub name: String,
    /// What the tool does, shown to the person.
    #[uniffi(default = "")]
    pub description: String,
    /// JSON Schema of the arguments, as JSON text.
    #[uniffi(default = None)]
    pub parameters_json: Option<String>,
    #[uniffi(default = None)]
    pub approval: Option<ApprovalMode>,
    /// Prompt shown to the person; `{tool}`, `{args}` and `{description}` are substituted.
    #[uniffi(default = None)]
    pub prompt_template: Option<String>,
    /// Whether the person may edit the arguments before approving.
    #[uniffi(default = false)]
    pub editable: bool,
    #[uniffi(default = None)]
    pub source: Option<ToolSource>,
    /// Hint: the tool only reads.
    #[uniffi(default = false)]
    pub read_only: bool,
    /// Hint: the tool destroys or changes something irreversibly.
    #[uniffi(default = false)]
    pub destructive: bool,
    /// Approval timeout in milliseconds; the gate's default when nil.
    #[uniffi(default = None)]
    pub timeout_ms: Option<u64>,
    /// Argument rules that force approval when they hold.
    #[uniffi(default = [])]
    pub rules: Vec<ArgRule>,
}

impl From<core::ToolSpec> for ToolSpec {
    fn from(s: core::ToolSpec) -> Self {
        ToolSpec {
            parameters_json: Some(s.parameters.to_string()),
            approval: Some(s.approval),
            source: Some(s.source),
            rules: s.rules.into_iter().map(Into::into).collect(),
            name: s.name,
            description: s.description,
            prompt_template: s.prompt_template,
            editable: s.editable,
            read_only: s.read_only,
            destructive: s.destructive,
            timeout_ms: s.timeout_ms,
        }
    }
}

impl ToolSpec {
    pub(crate) fn into_core(self) -> Result<core::ToolSpec, SignoffError> {
        let mut spec = core::ToolSpec::new(self.name);
        if let Some(p) = &self.parameters_json {
            spec.parameters = core::json::from_str(p, "parameters_json").map_err(|e| {
                SignoffError::from(core::Error::InvalidTool { tool: spec.name.clone(), reason: detail(e) })
            })?;
        }
        spec.description = self.description;
        if let Some(a) = self.approval {
            spec.approval = a;
        }
        spec.prompt_template = self.prompt_template;
        spec.editable = self.editable;
        if let Some(s) = self.source {
            spec.source = s;
        }
        spec.read_only = self.read_only;
        spec.destructive = self.destructive;
        spec.timeout_ms = self.timeout_ms;
        spec.rules = self.rules.into_iter().map(|r| rule_to_core(&spec.name, r)).collect::<Result<_, _>>()?;
        Ok(spec)
    }
}

/// Parses a tool spec from the core's `ToolSpec` JSON (unknown fields are `malformed`).
#[uniffi::export]
pub fn tool_spec_from_json(json: String) -> Result<ToolSpec, SignoffError> {
    let v = parse_json("tool definition", &json)?;
    Ok(core::ToolSpec::from_json(v)?.into())
}

/// The core's `ToolSpec` JSON for a spec.
#[uniffi::export]
pub fn tool_spec_to_json(spec: ToolSpec) -> Result<String, SignoffError> {
    let spec = spec.into_core()?;
    serde_json::to_string(&spec).map_err(|e| malformed("tool definition", e))
}

// ---------------------------------------------------------------------------------------------
// calls, decisions, results

/// A tool call from the model.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// The arguments as JSON text (an object for most schemas).
    #[uniffi(default = "{}")]
    pub arguments_json: String,
    /// The agent session. Grants never cross sessions.
    #[uniffi(default = "default")]
    pub session_id: String,
    /// The model's id for this call, carried to the request and the result.
    #[uniffi(default = None)]
    pub call_id: Option<String>,
    /// Free metadata as JSON text, shown with the request.
    #[uniffi(default = None)]
    pub metadata_json: Option<String>,
}

impl ToolCall {
    pub(crate) fn into_core(self) -> Result<core::ToolCall, SignoffError> {
        Ok(core::ToolCall {
            arguments: parse_value("arguments", &self.arguments_json)?,
            metadata: parse_opt_json("metadata", &self.metadata_json)?,
            tool: self.tool,
            session_id: self.session_id,
            call_id: self.call_id,
        })
    }
}

/// Why a call may run.
#[uniffi::remote(Enum)]
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

/// How far an approval reaches.
#[uniffi::remote(Enum)]
pub enum Scope {
    /// This call only.
    Once,
    /// This tool in this session, until revoked or the session ends.
    Session,
}

/// Why a request was cancelled (the tool does not run in any case).
#[uniffi::remote(Enum)]
pub enum CancelReason {
    /// No approver was attached, or the last one went away (observers do not count).
    NoApprover,
    /// The gate was shut down.
    Shutdown,
    /// The waiting task was cancelled.
    Aborted,
    /// The session ended.
    SessionEnded,
    /// The approval step failed before anyone decided: a request handler threw, or returned
    /// without answering. Not a person's refusal; the model is told the approval step failed
    /// (never the error's text).
    ApprovalFailed,
}

/// How a request ended.
#[uniffi::remote(Enum)]
pub enum Outcome {
    Approved,
    Denied,
    TimedOut,
    Cancelled,
}

/// The gate's answer to a confirmation: run (with these arguments) or do not run.
#[derive(Debug, Clone, PartialEq, uniffi::Enum)]
pub enum Decision {
    /// Run the tool with `arguments_json` (the original arguments, or the person's edit).
    Approved {
        request_id: Option<String>,
        arguments_json: String,
        edited: bool,
        by: ApprovedBy,
        scope: Scope,
        responder: Option<String>,
    },
    /// A person said no.
    Denied { request_id: String, reason: Option<String>, responder: Option<String> },
    /// Nobody answered before the deadline.
    TimedOut { request_id: String, timeout_ms: u64 },
    /// The request was cancelled before anyone answered. `request_id` is nil when the
    /// confirmation was cancelled from this side (task cancelled) before it resolved.
    Cancelled { request_id: Option<String>, reason: CancelReason },
}

impl From<core::Decision> for Decision {
    fn from(d: core::Decision) -> Self {
        match d {
            core::Decision::Approved { request_id, arguments, edited, by, scope, responder } => Decision::Approved {
                request_id: request_id.map(|u| u.to_string()),
                arguments_json: arguments.to_string(),
                edited,
                by,
                scope,
                responder,
            },
            core::Decision::Denied { request_id, reason, responder } => {
                Decision::Denied { request_id: request_id.to_string(), reason, responder }
            }
            core::Decision::TimedOut { request_id, timeout_ms } => {
                Decision::TimedOut { request_id: request_id.to_string(), timeout_ms }
            }
            core::Decision::Cancelled { request_id, reason } => {
                Decision::Cancelled { request_id: request_id.map(|u| u.to_string()), reason }
            }
        }
    }
}

impl Decision {
    /// The core's decision with its arguments and request id, checked (for `approvalMarker`): an
    /// id that is no UUID or arguments that are no JSON are `malformed`.
    pub(crate) fn to_core(&self) -> Result<core::Decision, SignoffError> {
        let id = |s: &str| parse_uuid("a decision's request id", s);
        Ok(match self.clone() {
            Decision::Approved { request_id, arguments_json, edited, by, scope, responder } => {
                core::Decision::Approved {
                    request_id: request_id.as_deref().map(id).transpose()?,
                    arguments: parse_value("a decision's arguments", &arguments_json)?,
                    edited,
                    by,
                    scope,
                    responder,
                }
            }
            Decision::Denied { request_id, reason, responder } => {
                core::Decision::Denied { request_id: id(&request_id)?, reason, responder }
            }
            Decision::TimedOut { request_id, timeout_ms } => {
                core::Decision::TimedOut { request_id: id(&request_id)?, timeout_ms }
            }
            Decision::Cancelled { request_id, reason } => {
                core::Decision::Cancelled { request_id: request_id.as_deref().map(id).transpose()?, reason }
            }
        })
    }

    /// The core's decision, for its accessors. The arguments and request ids are left out: no
    /// accessor but `request_id` reads them, and a `Decision` made up on the Swift side may hold
    /// text that is no JSON or no UUID.
    fn core(&self) -> core::Decision {
        let id = Uuid::nil();
        match self.clone() {
            Decision::Approved { edited, by, scope, responder, .. } => {
                core::Decision::Approved { request_id: None, arguments: Value::Null, edited, by, scope, responder }
            }
            Decision::Denied { reason, responder, .. } => core::Decision::Denied { request_id: id, reason, responder },
            Decision::TimedOut { timeout_ms, .. } => core::Decision::TimedOut { request_id: id, timeout_ms },
            Decision::Cancelled { reason, .. } => core::Decision::Cancelled { request_id: None, reason },
        }
    }
}

/// The core's `Decision` accessors.
#[uniffi::export]
impl Decision {
    /// True only for `approved`.
    pub fn is_approved(&self) -> bool {
        self.core().is_approved()
    }

    /// The final outcome.
    pub fn outcome(&self) -> Outcome {
        self.core().outcome()
    }

    /// The confirmation request this decision answers, if one was made (and is known).
    pub fn request_id(&self) -> Option<String> {
        match self {
            Decision::Approved { request_id, .. } | Decision::Cancelled { request_id, .. } => request_id.clone(),
            Decision::Denied { request_id, .. } | Decision::TimedOut { request_id, .. } => Some(request_id.clone()),
        }
    }

    /// Who answered: the approver, or the person who denied (when known).
    pub fn responder(&self) -> Option<String> {
        self.core().responder().map(str::to_owned)
    }

    /// The reason a person gave for a denial.
    pub fn reason(&self) -> Option<String> {
        self.core().reason().map(str::to_owned)
    }

    /// Why the request was cancelled (`cancelled` only).
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.core().cancel_reason()
    }

    /// The approval's scope: `once` for everything but an approval for the session.
    pub fn scope(&self) -> Scope {
        self.core().scope()
    }

    /// Why an approved call may run (`approved` only).
    pub fn approved_by(&self) -> Option<ApprovedBy> {
        self.core().approved_by()
    }

    /// True when a person changed the arguments before approving.
    pub fn edited(&self) -> bool {
        self.core().edited()
    }

    /// How long the request waited (`timedOut` only).
    pub fn timeout_ms(&self) -> Option<u64> {
        self.core().timeout_ms()
    }
}

/// Whether a call would need approval right now, and why.
#[uniffi::remote(Record)]
pub struct Evaluation {
    pub required: bool,
    /// At least one argument rule holds: session grants do not apply.
    pub forced_by_rule: bool,
    pub reasons: Vec<String>,
}

/// What became of an executed call.
#[uniffi::remote(Enum)]
pub enum ToolStatus {
    /// The tool ran and returned a value.
    Executed,
    /// The tool ran and failed.
    Failed,
    /// A person declined; the tool did not run.
    Denied,
    /// Nobody answered in time; the tool did not run.
    TimedOut,
    /// The request was cancelled; the tool did not run.
    Cancelled,
    /// Refused before anyone was asked (unknown tool, invalid arguments, no executor).
    Rejected,
}

/// The result of one call, in the model's terms: `content` is the text to hand back to the
/// model as the tool message.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ToolResult {
    pub call_id: Option<String>,
    pub tool: String,
    pub status: ToolStatus,
    /// The tool's output as JSON text, when it ran and succeeded.
    pub output_json: Option<String>,
    /// The tool's error, or why the call was refused.
    pub error: Option<String>,
    /// The error kind, when rejected.
    pub error_kind: Option<ErrorKind>,
    /// The arguments the tool ran with, as JSON text.
    pub arguments_json: Option<String>,
    /// The person changed the arguments before approving.
    pub edited: bool,
    pub request_id: Option<String>,
    pub decision: Option<Decision>,
    /// Text for the model.
    pub content: String,
    /// True unless the tool ran successfully (for Anthropic-style `is_error`).
    pub is_error: bool,
}

impl From<core::ToolResult> for ToolResult {
    fn from(r: core::ToolResult) -> Self {
        ToolResult {
            is_error: r.is_error(),
            call_id: r.call_id,
            tool: r.tool,
            status: r.status,
            output_json: r.output.as_ref().map(Value::to_string),
            error: r.error,
            error_kind: r.error_kind,
            arguments_json: r.arguments.as_ref().map(Value::to_string),
            edited: r.edited,
            request_id: r.request_id.map(|u| u.to_string()),
            decision: r.decision.map(Into::into),
            content: r.content,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// events

/// A call waiting for a person: everything a UI needs to show it. Show `display_arguments`
/// and `prompt` (escaped by the core), not a rendering of `arguments_json` of your own.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ConfirmationRequest {
    // @generated begin request-fields (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
    /// The request's id (a UUID); a response carries it back.
    pub id: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's description, escaped for display.
    pub description: String,
    /// The arguments that run if the request is approved unchanged.
    /// As JSON text.
    pub arguments_json: String,
    /// Pretty JSON of the arguments with control, bidi and zero-width characters escaped: show
    /// this, not a rendering of the arguments of your own.
    pub display_arguments: String,
    /// The rendered prompt, escaped for display.
    pub prompt: String,
    /// `sha256:<hex>` of the canonical JSON of the arguments; a response may echo it.
    pub arguments_digest: String,
    /// The agent session the call belongs to.
    pub session_id: String,
    /// The model's id for this tool call, if it gave one.
    #[uniffi(default = None)]
    pub tool_call_id: Option<String>,
    /// Whether the person may edit the arguments.
    pub editable: bool,
    /// Why approval is needed.
    pub reasons: Vec<String>,
    /// How long the request waits, in milliseconds.
    pub timeout_ms: u64,
    /// When it stops waiting, in Unix epoch milliseconds.
    pub deadline_ms: u64,
    /// When it was made, in Unix epoch milliseconds.
    pub created_at_ms: u64,
    /// Free metadata from the caller (absent when none was given).
    /// As JSON text.
    #[uniffi(default = None)]
    pub metadata_json: Option<String>,
    // @generated end request-fields
}

impl From<&core::ConfirmationRequest> for ConfirmationRequest {
    fn from(r: &core::ConfirmationRequest) -> Self {
        ConfirmationRequest {
            // @generated begin request-from-core (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
            id: r.id.to_string(),
            tool: r.tool.to_string(),
            description: r.description.to_string(),
            arguments_json: r.arguments.to_string(),
            display_arguments: r.display_arguments(),
            prompt: r.prompt.to_string(),
            arguments_digest: r.arguments_digest.to_string(),
            session_id: r.session_id.to_string(),
            tool_call_id: r.tool_call_id.clone(),
            editable: r.editable,
            reasons: r.reasons.to_vec(),
            timeout_ms: r.timeout_ms,
            deadline_ms: r.deadline_ms,
            created_at_ms: r.created_at_ms,
            metadata_json: opt_json(&r.metadata),
            // @generated end request-from-core
        }
    }
}

impl ConfirmationRequest {
    pub(crate) fn into_core(self) -> Result<core::ConfirmationRequest, SignoffError> {
        Ok(core::ConfirmationRequest {
            // @generated begin request-into-core (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
            id: parse_uuid("the request's id", &self.id)?,
            tool: self.tool.into(),
            description: self.description.into(),
            arguments: parse_value("the request's arguments", &self.arguments_json)?.into(),
            prompt: self.prompt.into(),
            arguments_digest: parse_digest("the request's argumentsDigest", &self.arguments_digest)?,
            session_id: self.session_id.into(),
            tool_call_id: self.tool_call_id,
            editable: self.editable,
            reasons: self.reasons.into(),
            timeout_ms: self.timeout_ms,
            deadline_ms: self.deadline_ms,
            created_at_ms: self.created_at_ms,
            metadata: parse_opt_json("the request's metadata", &self.metadata_json)?,
            // @generated end request-into-core
        })
    }
}

/// A person's decision.
#[uniffi::remote(Enum)]
pub enum ResponseDecision {
    Approve,
    Deny,
}

/// A person's answer to a request (the core's `ConfirmationResponse`). `tool`,
/// `arguments_digest` and `session_id` bind it to what was shown and are checked when present.
/// Prefer `Gate.approve` / `Gate.deny` / `PendingRequest`, which fill them in.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ConfirmationResponse {
    // @generated begin response-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
    /// The request's id.
    pub id: String,
    /// Approve or deny.
    pub decision: ResponseDecision,
    /// Once (default) or for the rest of the session.
    pub scope: Scope,
    /// Edited arguments (approve only; the tool must be editable). Validated against the
    /// tool's schema before they can run. `null` is no edit, as when absent.
    /// As JSON text.
    #[uniffi(default = None)]
    pub arguments_json: Option<String>,
    /// The person's reason, passed to the model on a denial.
    #[uniffi(default = None)]
    pub reason: Option<String>,
    /// Who answered.
    #[uniffi(default = None)]
    pub responder: Option<String>,
    /// The tool the person saw; checked against the request when present.
    #[uniffi(default = None)]
    pub tool: Option<String>,
    /// The digest of the arguments the person saw; checked against the request when present.
    #[uniffi(default = None)]
    pub arguments_digest: Option<String>,
    /// The request's session; checked against the request when present.
    #[uniffi(default = None)]
    pub session_id: Option<String>,
    /// When the person answered, in Unix epoch milliseconds; filled in by the gate when absent.
    #[uniffi(default = None)]
    pub at_ms: Option<u64>,
    // @generated end response-fields
}

impl From<&core::ConfirmationResponse> for ConfirmationResponse {
    fn from(r: &core::ConfirmationResponse) -> Self {
        ConfirmationResponse {
            // @generated begin response-from-core (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
            id: r.id.to_string(),
            decision: r.decision,
            scope: r.scope,
            arguments_json: r.arguments.as_ref().map(Value::to_string),
            reason: r.reason.clone(),
            responder: r.responder.clone(),
            tool: r.tool.clone(),
            arguments_digest: r.arguments_digest.clone(),
            session_id: r.session_id.clone(),
            at_ms: r.at_ms,
            // @generated end response-from-core
        }
    }
}

impl ConfirmationResponse {
    pub(crate) fn into_core(self) -> Result<core::ConfirmationResponse, SignoffError> {
        Ok(core::ConfirmationResponse {
            // @generated begin response-into-core (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
            id: request_id(&self.id)?,
            decision: self.decision,
            scope: self.scope,
            arguments: parse_opt_value("the response's arguments", &self.arguments_json)?,
            reason: self.reason,
            responder: self.responder,
            tool: self.tool,
            arguments_digest: self.arguments_digest,
            session_id: self.session_id,
            at_ms: self.at_ms,
            // @generated end response-into-core
        })
    }
}

/// Sent when a request's deadline passes with no answer.
#[uniffi::remote(Record)]
pub struct ConfirmationTimeout {
    // @generated begin timeout-fields (core/tests/sourcegen.rs, from the core's `ConfirmationTimeout`)
    /// The request's id.
    pub id: RequestId,
    /// The request's tool.
    pub tool: String,
    /// The request's session.
    pub session_id: String,
    /// The request's deadline, in Unix epoch milliseconds.
    pub deadline_ms: u64,
    /// When the timeout was detected, in Unix epoch milliseconds.
    pub at_ms: u64,
    // @generated end timeout-fields
}

/// The final event of every request.
#[uniffi::remote(Record)]
pub struct ConfirmationResolved {
    // @generated begin resolved-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResolved`)
    /// The request's id.
    pub id: RequestId,
    /// The request's tool.
    pub tool: String,
    /// The request's session.
    pub session_id: String,
    /// How the request ended.
    pub outcome: Outcome,
    /// Why it was cancelled (outcome `cancelled` only).
    pub cancel_reason: Option<CancelReason>,
    /// Who decided (approved or denied only).
    pub responder: Option<String>,
    /// The reason given with a denial.
    pub reason: Option<String>,
    /// `session` when the approval also granted later calls of the tool in the session, else
    /// `once`.
    pub scope: Scope,
    /// The person changed the arguments.
    pub edited: bool,
    /// When the request resolved, in Unix epoch milliseconds.
    pub at_ms: u64,
    // @generated end resolved-fields
}

/// The type of a bus event, for a subscription that wants only some (`Gate.subscribeOnly`,
/// `Gate.observeOnly`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Enum)]
pub enum EventType {
    /// `GateEvent.request`.
    Request,
    /// `GateEvent.response`.
    Response,
    /// `GateEvent.timeout`.
    Timeout,
    /// `GateEvent.resolved`.
    Resolved,
}

/// The event type an event's `type` names (`"confirmation-request"`, `"confirmation-response"`,
/// `"confirmation-timeout"`, `"confirmation-resolved"`), e.g. read from configuration: the names
/// the other bindings and the shared vectors use. Errors: `malformed` for any other name (a lag is
/// not a type to ask for: every subscription is told of one).
#[uniffi::export]
pub fn event_type_named(name: String) -> Result<EventType, SignoffError> {
    let wanted = core::EventTypes::from_names([name.as_str()])?;
    let all = [EventType::Request, EventType::Response, EventType::Timeout, EventType::Resolved];
    all.into_iter().find(|t| event_types(&[*t]) == wanted).ok_or_else(|| malformed("event type", &name))
}

/// The core's set of event types.
pub(crate) fn event_types(types: &[EventType]) -> core::EventTypes {
    types.iter().fold(core::EventTypes::NONE, |set, t| {
        set | match t {
            EventType::Request => core::EventTypes::REQUEST,
            EventType::Response => core::EventTypes::RESPONSE,
            EventType::Timeout => core::EventTypes::TIMEOUT,
            EventType::Resolved => core::EventTypes::RESOLVED,
        }
    })
}

/// An event on the gate's bus, or notice that this subscriber lagged.
#[derive(Debug, Clone, PartialEq, uniffi::Enum)]
pub enum GateEvent {
    /// A call waits for a person.
    Request { request: ConfirmationRequest },
    /// A response was accepted.
    Response { response: ConfirmationResponse },
    /// A request's deadline passed.
    Timeout { timeout: ConfirmationTimeout },
    /// A request reached its final state.
    Resolved { resolved: ConfirmationResolved },
    /// This subscriber fell behind and missed `missed` events. Not a bus event. Re-sync
    /// (de-duplicating by id) from `pending`, the oldest requests still pending (at most 1,000),
    /// and, when `more` is set, from `Gate.pendingPage(after: more)` and the pages after it.
    Lagged {
        missed: u64,
        pending: Vec<ConfirmationRequest>,
        /// Set when more requests are pending than `pending` holds: the cursor to page on from.
        #[uniffi(default = None)]
        more: Option<String>,
    },
}

impl From<core::Event> for GateEvent {
    fn from(e: core::Event) -> Self {
        match e {
            core::Event::ConfirmationRequest(r) => GateEvent::Request { request: (&*r).into() },
            core::Event::ConfirmationResponse(r) => GateEvent::Response { response: (&*r).into() },
            core::Event::ConfirmationTimeout(t) => GateEvent::Timeout { timeout: (*t).clone() },
            core::Event::ConfirmationResolved(r) => GateEvent::Resolved { resolved: (*r).clone() },
        }
    }
}

impl From<core::Lagged> for GateEvent {
    fn from(l: core::Lagged) -> Self {
        GateEvent::Lagged {
            missed: l.missed,
            pending: l.pending.iter().map(|r| (&**r).into()).collect(),
            more: l.more.map(|c| c.to_string()),
        }
    }
}

/// One page of pending requests (`Gate.pendingPage(after:limit:)`).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct PendingPage {
    /// Oldest first.
    pub requests: Vec<ConfirmationRequest>,
    /// Where the next page starts (pass it as `after`); nil when this page reached the end.
    pub next: Option<String>,
}

impl From<core::PendingPage> for PendingPage {
    fn from(p: core::PendingPage) -> Self {
        PendingPage {
            requests: p.requests.iter().map(|r| (&**r).into()).collect(),
            next: p.next.map(|c| c.to_string()),
        }
    }
}

/// A page cursor from its string form (`<created_at_ms>-<request id>`, as `PendingPage.next`
/// and `GateEvent.lagged(more:)` give it); anything else is `malformed`.
pub(crate) fn parse_cursor(s: &str) -> Result<core::PendingCursor, SignoffError> {
    Ok(s.parse::<core::PendingCursor>()?)
}

impl GateEvent {
    fn into_core(self) -> Result<core::Event, SignoffError> {
        Ok(match self {
            GateEvent::Request { request } => core::Event::ConfirmationRequest(Arc::new(request.into_core()?)),
            GateEvent::Response { response } => core::Event::ConfirmationResponse(Arc::new(response.into_core()?)),
            GateEvent::Timeout { timeout } => core::Event::ConfirmationTimeout(Arc::new(timeout)),
            GateEvent::Resolved { resolved } => core::Event::ConfirmationResolved(Arc::new(resolved)),
            GateEvent::Lagged { .. } => {
                return Err(malformed("event", "`lagged` is a subscriber notice, not a bus event"));
            }
        })
    }
}

/// Parses an event from its stable JSON form (`type`-tagged).
#[uniffi::export]
pub fn event_from_json(json: String) -> Result<GateEvent, SignoffError> {
    let v = parse_json("event", &json)?;
    Ok(core::Event::from_json(v)?.into())
}

/// The stable JSON form of an event (`lagged` has none: `malformed`).
#[uniffi::export]
pub fn event_to_json(event: GateEvent) -> Result<String, SignoffError> {
    Ok(event.into_core()?.to_json().to_string())
}

/// Parses a response from JSON (a `"type": "confirmation-response"` field is accepted; unknown
/// fields are `malformed`).
#[uniffi::export]
pub fn response_from_json(json: String) -> Result<ConfirmationResponse, SignoffError> {
    Ok((&core::ConfirmationResponse::from_json_str(&json)?).into())
}

/// An approval bound to `request` (id, tool, digest, session), as the core builds it.
#[uniffi::export]
pub fn approve_response(request: ConfirmationRequest) -> Result<ConfirmationResponse, SignoffError> {
    Ok((&core::ConfirmationResponse::approve(&request.into_core()?)).into())
}

/// A denial bound to `request`, with an optional reason the model will read.
#[uniffi::export(default(reason = None))]
pub fn deny_response(
    request: ConfirmationRequest,
    reason: Option<String>,
) -> Result<ConfirmationResponse, SignoffError> {
    Ok((&core::ConfirmationResponse::deny(&request.into_core()?, reason)).into())
}
