//! The gate: the core's `Gate`, built from its `GateConfig`, and its calls.

use crate::driver::{JsState, Settle, TaskFuture};
use crate::errors;
use crate::events::{NativeSubscription, OutcomeKind, js_string, write_request};
use crate::executor::{ToolCallData, decision_data, result_data_compact};
use crate::handler;
use crate::json;
use crate::policy::EvaluationData;
use crate::store::{record_data, request_value};
use crate::token::{MarkerClaimsData, NativeTokenKeys, TokenClaimsData};
use crate::tools;
use napi::bindgen_prelude::*;
use napi::{Env, sys};
use napi_derive::napi;
use serde_json::Value;
use signoff::{
    ConfirmationResponse, GateConfig, Naming, PendingCursor, PendingPage, PendingRequest, ResponseDecision, Scope,
    TokenResponse, Tool, ToolCall, ToolSpec,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// A pending request `Gate::recover` cancelled instead of restoring.
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(serde::Serialize)]
pub struct NotRestoredData {
    #[napi(ts_type = "ConfirmationRequestData")]
    pub request: Value,
    /// Why: its tool is not registered or has no executor, or its stored arguments no longer
    /// match their digest or the tool's schema.
    pub reason: String,
}

/// What `Gate::recover` found and did (the core's `Recovery`).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryData {
    /// Still pending: waiting again until their original deadlines.
    #[napi(ts_type = "Array<ConfirmationRequestData>")]
    pub restored: Vec<Value>,
    /// Their deadline passed while the process was down: resolved as timed out.
    #[napi(ts_type = "Array<ConfirmationRequestData>")]
    pub timed_out: Vec<Value>,
    /// Approved or executing when the process stopped: now `interrupted`, never run again (the
    /// records as they were found).
    pub interrupted: Vec<crate::store::StoredRecordData>,
    /// Pending, but cancelled instead of restored.
    pub not_restored: Vec<NotRestoredData>,
}

fn recovery_data(r: signoff::Recovery) -> RecoveryData {
    RecoveryData {
        restored: r.restored.iter().map(|q| request_value(q)).collect(),
        timed_out: r.timed_out.iter().map(|q| request_value(q)).collect(),
        interrupted: r.interrupted.into_iter().map(record_data).collect(),
        not_restored: r
            .not_restored
            .into_iter()
            .map(|n| NotRestoredData { request: request_value(&n.request), reason: n.reason })
            .collect(),
    }
}

/// An optional JSON text from the user, parsed strictly (`malformed` on a repeated key, deep
/// nesting, a number that is not finite).
fn json_arg(env: &Env, what: &str, text: Option<String>) -> Result<Option<Value>> {
    json::parse_opt(env, text, what)
}

/// The page size `pendingPage` uses when none is given (the core's `LAGGED_SNAPSHOT_LIMIT`, the
/// size of a lagging subscriber's snapshot).
const DEFAULT_PAGE: usize = signoff::LAGGED_SNAPSHOT_LIMIT;

/// A page size from JavaScript: the core's rule (`PendingPage::limit`; the facade checks the
/// same before calling, with `maxPageSize()`).
fn page_limit(env: &Env, limit: Option<f64>) -> Result<usize> {
    limit.map_or(Ok(DEFAULT_PAGE), |n| PendingPage::limit(n, "limit").map_err(|e| errors::throw(env, &e)))
}

/// The largest page size `pendingPage` takes (`PendingPage::MAX_LIMIT`).
#[napi]
pub fn max_page_size() -> f64 {
    PendingPage::MAX_LIMIT as f64
}

/// One page of pending requests (the core's `PendingPage`).
#[napi(object, object_from_js = false)]
pub struct PendingPageData {
    /// The requests, oldest first, as JSON arrays of `ConfirmationRequestData` (several when
    /// the page is large): concatenated in order, they are the page.
    pub requests: Vec<String>,
    /// Where the next page starts (pass it as `after`); absent when this page reached the end.
    pub next: Option<String>,
}

/// Above this many bytes, a JSON array of requests is continued in another one.
const CHUNK_BYTES: usize = 16 << 20;

/// Requests as JSON arrays of `ConfirmationRequestData`, each about [`CHUNK_BYTES`] at most (one
/// request per array at least): one JSON text of a million requests would be longer than the
/// longest string V8 can hold.
fn request_chunks(requests: &[Arc<signoff::ConfirmationRequest>]) -> Vec<String> {
    // serde_json writes UTF-8: the fallback never happens.
    let close = |mut b: Vec<u8>| {
        b.push(b']');
        String::from_utf8(b).unwrap_or_else(|_| "[]".into())
    };
    let mut chunks = Vec::new();
    let mut buf = Vec::with_capacity(requests.len().min(4096) * 640);
    buf.push(b'[');
    for r in requests {
        if buf.len() >= CHUNK_BYTES {
            chunks.push(close(std::mem::replace(&mut buf, vec![b'['])));
        } else if buf.len() > 1 {
            buf.push(b',');
        }
        write_request(&mut buf, r);
    }
    chunks.push(close(buf));
    chunks
}

/// A request id the caller names: one that is not a UUID names no request (`unknown_request`).
fn uuid_arg(env: &Env, id: &str) -> Result<uuid::Uuid> {
    signoff::parse_request_id(id).map_err(|e| errors::throw(env, &e))
}

fn scope_arg(env: &Env, scope: Option<String>) -> Result<Scope> {
    match scope.as_deref() {
        None => Ok(Scope::Once),
        Some(s) => serde_json::from_value(Value::String(s.to_owned()))
            .map_err(|_| errors::malformed(env, format!("scope must be \"once\" or \"session\", not {s:?}"))),
    }
}

/// A core error about a response given in JavaScript's form (`respond`): a mismatch names the
/// field as the user wrote it (`argumentsDigest`, `sessionId`), not as the core's JSON does.
fn throw_response_error(env: &Env, e: &signoff::Error) -> Error {
    if let signoff::Error::Mismatch { id, field, expected, got } = e {
        let field = match *field {
            "arguments_digest" => "argumentsDigest",
            "session_id" => "sessionId",
            f => f,
        };
        let message =
            format!("response does not match request {id}: {field} is {got:?}, the request shows {expected:?}");
        return errors::throw_code(env, signoff::ErrorKind::Mismatch.as_str(), &message);
    }
    errors::throw(env, e)
}

fn call_from(
    env: &Env,
    tool: String,
    arguments: Option<String>,
    session_id: Option<String>,
    call_id: Option<String>,
    metadata: Option<String>,
) -> Result<ToolCall> {
    let mut call = ToolCall::new(
        tool,
        json_arg(env, "arguments", arguments)?.unwrap_or_else(|| Value::Object(Default::default())),
    );
    if let Some(s) = session_id {
        call.session_id = s;
    }
    call.call_id = call_id;
    call.metadata = json_arg(env, "metadata", metadata)?.unwrap_or(Value::Null);
    Ok(call)
}

fn to_js_string(env: &Env, s: &str) -> Result<sys::napi_value> {
    js_string(env, s)
}

/// `JSON.parse(text)`, called from here: the value itself is what the promise settles with, so a
/// pending call keeps one promise, not a second one and a reaction for a `.then` that parses.
fn js_json(env: &Env, text: &str) -> Result<sys::napi_value> {
    let json: Object = env.get_global()?.get_named_property("JSON")?;
    let parse: Function<String, Unknown> = json.get_named_property("parse")?;
    Ok(parse.call(text.to_owned())?.raw())
}

/// The approval gate (the core's `Gate`).
#[napi(custom_finalize)]
pub struct NativeGate {
    pub(crate) state: Rc<JsState>,
    /// Executor function ids by tool name (released when replaced or unregistered).
    executors: RefCell<HashMap<String, u64>>,
    /// An audit sink may block on the disk: close and flush it off the JavaScript thread.
    has_audit: bool,
    /// A durable store checkpoints and closes its database on close: also off the JavaScript
    /// thread.
    durable: bool,
}

fn undefined(env: &Env) -> Result<sys::napi_value> {
    Ok(().into_unknown(env)?.raw())
}

impl ObjectFinalize for NativeGate {
    fn finalize(self, env: Env) -> Result<()> {
        for (_, id) in self.executors.borrow_mut().drain() {
            tools::release(&env, id);
        }
        self.state.orphan(&env);
        Ok(())
    }
}

impl NativeGate {
    pub(crate) fn run<'env>(
        &self,
        env: &'env Env,
        fut: TaskFuture,
        keepalive: bool,
        abort_id: Option<u32>,
    ) -> Result<Unknown<'env>> {
        let (_, v) = self.state.run(env, fut, keepalive, abort_id)?;
        v.into_unknown(env)
    }
}

#[napi]
impl NativeGate {
    /// A gate from its options, as JSON in Node's names (the core's `GateConfig`, read with
    /// camelCase names and validated once by the core: every mistake is a `config` error naming
    /// the option as written), and the approval-token keys as an object (instead of
    /// `tokenKeys` in the JSON). Throws `config`, `store` (the database cannot be opened or is in
    /// use), `io` (the audit log cannot be opened).
    #[napi(constructor)]
    pub fn new(env: Env, options_json: String, keys: Option<&NativeTokenKeys>) -> Result<Self> {
        let throw = |e: signoff::Error| errors::throw(&env, &e);
        let options = json::parse(&env, &options_json, "the gate options")?;
        let mut config = GateConfig::read_json(&options, Naming::Camel).map_err(throw)?;
        if let Some(k) = keys {
            config.token_keys = Some(k.inner.clone());
        }
        config.validate(Naming::Camel).map_err(throw)?;
        // Its warnings and errors name Node's API (`new Gate({ denyWhenUnobserved: false })`).
        config.host = signoff::Host::Node;
        let has_audit = config.audit_path.is_some();
        let durable = config.store_path.is_some();
        let builder = config.builder().map_err(throw)?;
        let state = JsState::new(&env, move |shared| {
            let gate = builder.build()?;
            // Restored requests keep the process alive until the last one finishes: the
            // JavaScript thread then looks again.
            let shared = Arc::downgrade(&shared);
            gate.on_restored_idle(move || {
                if let Some(s) = shared.upgrade() {
                    s.notify();
                }
            });
            Ok(gate)
        })?
        .map_err(throw)?;
        Ok(NativeGate { state, executors: RefCell::new(HashMap::new()), has_audit, durable })
    }

    /// Registers (or replaces) a tool from the core's `ToolSpec` JSON (snake_case keys; unknown
    /// keys are refused) and its `parameters` schema (JSON, apart: it may nest as deeply as any
    /// value), with an optional executor wrapper from the facade.
    #[napi(
        ts_args_type = "specJson: string, parametersJson?: string, executor?: (argsJson: string, token: number, tool: string, sessionId: string, edited: boolean, callId?: string, requestId?: string) => string | undefined"
    )]
    pub fn register(
        &self,
        env: Env,
        spec_json: String,
        parameters_json: Option<String>,
        executor: Option<Unknown>,
    ) -> Result<()> {
        let mut value = json::parse(&env, &spec_json, "the tool definition")?;
        if let Some(p) = json_arg(&env, "the tool's parameters", parameters_json)? {
            let Some(spec) = value.as_object_mut() else {
                return Err(errors::malformed(&env, "a tool definition is an object"));
            };
            if spec.insert("parameters".into(), p).is_some() {
                return Err(errors::malformed(&env, "the tool's parameters are given twice"));
            }
        }
        let spec = ToolSpec::from_json(value).map_err(|e| errors::throw(&env, &e))?;
        let name = spec.name.clone();
        let mut tool = Tool::from_spec(spec);
        let mut exec_id = None;
        if let Some(f) = executor {
            let (id, exec) = tools::executor_for(&env, f.raw(), Arc::downgrade(&self.state.shared))?;
            exec_id = Some(id);
            tool = tool.with_context_executor(exec);
        }
        match self.state.gate.register(tool) {
            Ok(()) => {
                let old = match exec_id {
                    Some(id) => self.executors.borrow_mut().insert(name, id),
                    None => self.executors.borrow_mut().remove(&name),
                };
                if let Some(old) = old {
                    tools::release(&env, old);
                }
                Ok(())
            }
            Err(e) => {
                if let Some(id) = exec_id {
                    tools::release(&env, id);
                }
                Err(errors::throw(&env, &e))
            }
        }
    }

    /// Removes a tool; later calls to it are `unknown_tool`.
    #[napi]
    pub fn unregister(&self, env: Env, name: String) -> bool {
        let removed = self.state.gate.unregister(&name);
        if let Some(id) = self.executors.borrow_mut().remove(&name) {
            tools::release(&env, id);
        }
        removed
    }

    /// The specs of every registered tool: a JSON array of the core's `ToolSpec`, sorted by name.
    #[napi]
    pub fn tools(&self) -> String {
        serde_json::to_string(&self.state.gate.tools()).unwrap_or_else(|_| "[]".into())
    }

    /// Whether a call would need approval now, and why (no request is made).
    #[napi]
    pub fn evaluate(
        &self,
        env: Env,
        tool: String,
        arguments_json: Option<String>,
        session_id: Option<String>,
    ) -> Result<EvaluationData> {
        let call = call_from(&env, tool, arguments_json, session_id, None, None)?;
        self.state.gate.evaluate(&call).map(Into::into).map_err(|e| errors::throw(&env, &e))
    }

    /// Asks for approval when needed: the decision (a `DecisionData` object), returned at once
    /// when it is known before this call returns, else a promise of it. `abortId` identifies the
    /// call for `abort` (an aborted call resolves `null`). Throws / rejects with `SignoffError`.
    #[allow(clippy::too_many_arguments)]
    #[napi(ts_return_type = "DecisionData | null | Promise<DecisionData | null>")]
    pub fn confirm<'env>(
        &self,
        env: &'env Env,
        tool: String,
        arguments_json: Option<String>,
        session_id: Option<String>,
        call_id: Option<String>,
        metadata_json: Option<String>,
        abort_id: Option<u32>,
    ) -> Result<Unknown<'env>> {
        let call = call_from(env, tool, arguments_json, session_id, call_id, metadata_json)?;
        // The core's future as it is (it holds its own gate handle), mapped: an `async` block
        // would keep it twice (the captured future and the one it awaits), per pending call.
        let fut: TaskFuture = Box::pin(futures_util::FutureExt::map(self.state.gate.confirm_owned(call), |r| {
            Box::new(move |env: &Env| match r {
                Ok(d) => js_json(env, &serde_json::to_string(&decision_data(d)).unwrap_or_default()),
                Err(e) => Err(errors::throw(env, &e)),
            }) as Settle
        }));
        self.run(env, fut, true, abort_id)
    }

    /// Confirms and, if approved, runs the executor at most once: the result as `ToolResultData`
    /// JSON (at once or as a promise). Never fails for a refused call: the result says so.
    #[allow(clippy::too_many_arguments)]
    #[napi(ts_return_type = "string | null | Promise<string | null>")]
    pub fn execute<'env>(
        &self,
        env: &'env Env,
        tool: String,
        arguments_json: Option<String>,
        session_id: Option<String>,
        call_id: Option<String>,
        metadata_json: Option<String>,
        abort_id: Option<u32>,
    ) -> Result<Unknown<'env>> {
        let call = call_from(env, tool, arguments_json, session_id, call_id, metadata_json)?;
        let gate = self.state.gate.clone();
        let fut: TaskFuture = Box::pin(async move {
            let r = gate.execute(call).await;
            Box::new(move |env: &Env| {
                to_js_string(env, &serde_json::to_string(&result_data_compact(r)).unwrap_or_default())
            }) as Settle
        });
        self.run(env, fut, true, abort_id)
    }

    /// Runs a batch concurrently: a JSON array of `ToolResultData` in the order of the calls (at
    /// once or as a promise). Each call's arguments and metadata are parsed as in `execute`.
    #[napi(ts_return_type = "string | null | Promise<string | null>")]
    pub fn execute_batch<'env>(
        &self,
        env: &'env Env,
        calls: Vec<ToolCallData>,
        abort_id: Option<u32>,
    ) -> Result<Unknown<'env>> {
        let calls = calls
            .into_iter()
            .map(|c| call_from(env, c.tool, c.arguments_json, c.session_id, c.call_id, c.metadata_json))
            .collect::<Result<Vec<ToolCall>>>()?;
        let gate = self.state.gate.clone();
        let fut: TaskFuture = Box::pin(async move {
            let r = gate.execute_batch(calls).await;
            Box::new(move |env: &Env| {
                let data: Vec<_> = r.into_iter().map(result_data_compact).collect();
                to_js_string(env, &serde_json::to_string(&data).unwrap_or_default())
            }) as Settle
        });
        self.run(env, fut, true, abort_id)
    }

    /// Aborts the call started with `abortId`: the caller stops waiting (its promise resolves
    /// `null`). A request it waits on is cancelled by the core (`cancelled` / `aborted`) and its
    /// tool never runs; a tool it already started is not interrupted: it runs to the end and its
    /// result is recorded.
    #[napi]
    pub fn abort(&self, env: Env, abort_id: u32) {
        self.state.enter(&env, || self.state.abort(&env, abort_id));
    }

    /// Answers request `id` as shown (the core's `PendingRequest`: the response is bound to the
    /// request's tool, argument digest and session). `argumentsJson` (edited arguments) and
    /// `scope` apply to approvals, `reason` to denials.
    #[allow(clippy::too_many_arguments)]
    #[napi(
        ts_args_type = "id: string, approve: boolean, argumentsJson?: string, scope?: ScopeKind, reason?: string, responder?: string"
    )]
    pub fn answer(
        &self,
        env: Env,
        id: String,
        approve: bool,
        arguments_json: Option<String>,
        scope: Option<String>,
        reason: Option<String>,
        responder: Option<String>,
    ) -> Result<OutcomeKind> {
        let uuid = uuid_arg(&env, &id)?;
        let arguments = json_arg(&env, "edited arguments", arguments_json)?;
        let scope = scope_arg(&env, scope)?;
        let result = self.state.enter(&env, || match self.state.gate.pending_request(&uuid) {
            Some(req) => {
                let p = PendingRequest::new(self.state.gate.clone(), req);
                if approve { p.approve_with(arguments, scope, responder) } else { p.deny(reason, responder) }
            }
            // Not pending: the core says why (already resolved, expired, unknown, closed).
            None => {
                let decision = if approve { ResponseDecision::Approve } else { ResponseDecision::Deny };
                let mut r = ConfirmationResponse::by_id(uuid, decision).with_scope(scope);
                r.arguments = arguments;
                r.reason = reason;
                r.responder = responder;
                self.state.gate.respond(r)
            }
        });
        result.map(Into::into).map_err(|e| errors::throw(&env, &e))
    }

    /// Answers a pending request with a response in the core's JSON form without its
    /// `arguments`, and the edited arguments (JSON) apart: they may nest as deeply as the
    /// arguments of `answer` and `respondToken`. Without them, `respondJson`.
    #[napi]
    pub fn respond(&self, env: Env, json: String, arguments_json: Option<String>) -> Result<OutcomeKind> {
        let arguments = json_arg(&env, "edited arguments", arguments_json)?;
        let mut response = match ConfirmationResponse::from_json_str(&json) {
            Ok(r) => r,
            // Refused and audited as the core refuses it.
            Err(_) => return self.respond_json(env, json),
        };
        if let Some(arguments) = arguments {
            if response.arguments.is_some() {
                return Err(errors::malformed(&env, "the response's arguments are given twice"));
            }
            response.arguments = Some(arguments);
        }
        self.state
            .enter(&env, || self.state.gate.respond(response))
            .map(Into::into)
            .map_err(|e| throw_response_error(&env, &e))
    }

    /// Answers a pending request with a response in the core's JSON form (`Gate::respond_json`,
    /// which parses it strictly: a repeated key, deep nesting or a number that is not finite is
    /// `malformed`).
    #[napi]
    pub fn respond_json(&self, env: Env, json: String) -> Result<OutcomeKind> {
        self.state
            .enter(&env, || self.state.gate.respond_json(&json))
            .map(Into::into)
            .map_err(|e| errors::throw(&env, &e))
    }

    /// Issues a signed approval token for pending request `id`, meant for `approver` only
    /// (`Gate::issue_token`). Throws `config` (no token keys), `malformed`, `not_pending`.
    #[napi]
    pub fn issue_token(&self, env: Env, id: String, approver: String) -> Result<String> {
        let id = uuid_arg(&env, &id)?;
        self.state.gate.issue_token(&id, &approver).map_err(|e| errors::throw(&env, &e))
    }

    /// Verifies a token's key and signature and returns its claims (`Gate::inspect_token`).
    #[napi]
    pub fn inspect_token(&self, env: Env, token: String) -> Result<TokenClaimsData> {
        self.state.gate.inspect_token(&token).map(Into::into).map_err(|e| errors::throw(&env, &e))
    }

    /// An approval marker for a call this gate approved by a person (`Gate::approval_marker`);
    /// `decision_json` is the decision in the core's JSON form (the facade converts it). Throws
    /// `config`, `malformed`, `already_used`, `mismatch`, `not_pending`.
    #[napi]
    pub fn approval_marker(&self, env: Env, tool: String, decision_json: String) -> Result<String> {
        let decision: signoff::Decision = serde_json::from_str(&decision_json).map_err(|e| {
            errors::throw(&env, &signoff::Error::Malformed(format!("decision: not a decision from this gate ({e})")))
        })?;
        self.state.gate.approval_marker(&tool, &decision).map_err(|e| errors::throw(&env, &e))
    }

    /// Accepts an approval marker once for a call to `tool` with these arguments
    /// (`Gate::accept_approval_marker`). Throws `config`, `malformed`, `unknown_key`,
    /// `bad_signature`, `token_expired`, `mismatch`, `already_used`.
    #[napi]
    pub fn accept_approval_marker(
        &self,
        env: Env,
        marker: String,
        tool: String,
        arguments_json: Option<String>,
    ) -> Result<MarkerClaimsData> {
        let args = json_arg(&env, "arguments", arguments_json)?.unwrap_or(Value::Null);
        self.state
            .gate
            .accept_approval_marker(&marker, &tool, &args)
            .map(Into::into)
            .map_err(|e| errors::throw(&env, &e))
    }

    /// Answers a pending request with a signed token presented by `approver`
    /// (`Gate::respond_token`). `argumentsJson` (an edit) and `scope` apply to approvals.
    #[allow(clippy::too_many_arguments)]
    #[napi(
        ts_args_type = "token: string, approver: string, approve: boolean, argumentsJson?: string, scope?: ScopeKind, reason?: string"
    )]
    pub fn respond_token(
        &self,
        env: Env,
        token: String,
        approver: String,
        approve: bool,
        arguments_json: Option<String>,
        scope: Option<String>,
        reason: Option<String>,
    ) -> Result<OutcomeKind> {
        let response = TokenResponse {
            approver,
            decision: if approve { ResponseDecision::Approve } else { ResponseDecision::Deny },
            arguments: json_arg(&env, "edited arguments", arguments_json)?,
            scope: scope_arg(&env, scope)?,
            reason,
        };
        self.state
            .enter(&env, || self.state.gate.respond_token(&token, response))
            .map(Into::into)
            .map_err(|e| errors::throw(&env, &e))
    }

    /// `respond` without holding the JavaScript thread while the answer is recorded
    /// (`Gate::respond_async`): with a durable or shared store the answer is made on the addon's
    /// blocking threads and a promise of the outcome is returned; with the in-memory store, the
    /// outcome. Rejects / throws as `respond`.
    #[napi(ts_return_type = "OutcomeKind | Promise<OutcomeKind>")]
    pub fn respond_async<'env>(
        &self,
        env: &'env Env,
        json: String,
        arguments_json: Option<String>,
    ) -> Result<Unknown<'env>> {
        let arguments = json_arg(env, "edited arguments", arguments_json)?;
        let answer = match ConfirmationResponse::from_json_str(&json) {
            Ok(mut response) => {
                if let Some(arguments) = arguments {
                    if response.arguments.is_some() {
                        return Err(errors::malformed(env, "the response's arguments are given twice"));
                    }
                    response.arguments = Some(arguments);
                }
                // As `respond`: a call into the gate (the in-memory store answers during it).
                let answer = self.state.enter(env, || {
                    let _rt = crate::RUNTIME.enter();
                    self.state.gate.respond_async(response)
                });
                Box::pin(answer)
                    as std::pin::Pin<Box<dyn std::future::Future<Output = signoff::Result<signoff::Outcome>>>>
            }
            // Refused and audited as the core refuses it.
            Err(_) => Box::pin(std::future::ready(self.state.enter(env, || self.state.gate.respond_json(&json)))),
        };
        let fut: TaskFuture = Box::pin(async move {
            let r = answer.await;
            Box::new(move |env: &Env| match r {
                Ok(o) => to_js_string(env, o.as_str()),
                Err(e) => Err(throw_response_error(env, &e)),
            }) as Settle
        });
        // Kept alive: a script that awaits the answer sees it before Node exits.
        self.run(env, fut, true, None)
    }

    /// `respondToken` without holding the JavaScript thread while the answer is recorded
    /// (`Gate::respond_token_async`), as `respondAsync`.
    #[allow(clippy::too_many_arguments)]
    #[napi(
        ts_args_type = "token: string, approver: string, approve: boolean, argumentsJson?: string, scope?: ScopeKind, reason?: string",
        ts_return_type = "OutcomeKind | Promise<OutcomeKind>"
    )]
    pub fn respond_token_async<'env>(
        &self,
        env: &'env Env,
        token: String,
        approver: String,
        approve: bool,
        arguments_json: Option<String>,
        scope: Option<String>,
        reason: Option<String>,
    ) -> Result<Unknown<'env>> {
        let response = TokenResponse {
            approver,
            decision: if approve { ResponseDecision::Approve } else { ResponseDecision::Deny },
            arguments: json_arg(env, "edited arguments", arguments_json)?,
            scope: scope_arg(env, scope)?,
            reason,
        };
        let answer = self.state.enter(env, || {
            let _rt = crate::RUNTIME.enter();
            self.state.gate.respond_token_async(&token, response)
        });
        let fut: TaskFuture = Box::pin(async move {
            let r = answer.await;
            Box::new(move |env: &Env| match r {
                Ok(o) => to_js_string(env, o.as_str()),
                Err(e) => Err(errors::throw(env, &e)),
            }) as Settle
        });
        // Kept alive: a script that awaits the answer sees it before Node exits.
        self.run(env, fut, true, None)
    }

    /// Request `id`'s stored record in any state, as `StoredRecordData` JSON, or `null`
    /// (`Gate::record`; durable stores keep records, the in-memory store keeps none).
    #[napi]
    pub fn record(&self, env: Env, id: String) -> Result<Option<String>> {
        let id = uuid_arg(&env, &id)?;
        Ok(self.state.gate.record(&id).map(|r| serde_json::to_string(&record_data(r)).unwrap_or_default()))
    }

    /// Picks up what an earlier process left in the durable store (`Gate::recover`): the report
    /// as `RecoveryData` JSON. Restored requests wait in tasks on the addon's tokio runtime.
    /// Throws `config` (called twice, or after the first request), `store`.
    #[napi]
    pub fn recover(&self, env: Env) -> Result<String> {
        self.state
            .enter(&env, || {
                let _rt = crate::RUNTIME.enter();
                self.state.gate.recover()
            })
            .map(|r| serde_json::to_string(&recovery_data(r)).unwrap_or_default())
            .map_err(|e| errors::throw(&env, &e))
    }

    /// True while request `id` waits for an answer.
    #[napi]
    pub fn is_pending(&self, id: String) -> bool {
        uuid::Uuid::parse_str(&id).is_ok_and(|u| self.state.gate.pending_request(&u).is_some())
    }

    /// Cancels one pending request (`aborted`). Returns whether it was pending.
    #[napi]
    pub fn cancel_request(&self, env: Env, id: String) -> Result<bool> {
        let id = uuid_arg(&env, &id)?;
        Ok(self.state.enter(&env, || self.state.gate.cancel_request(&id)))
    }

    /// Every pending request, oldest first (one snapshot, `Gate::pending`), as JSON arrays of
    /// `ConfirmationRequestData` to concatenate in order (several when they are many: one JSON
    /// text of a million requests would not fit in a JavaScript string). Copies the whole list:
    /// where many may be pending, page with `pendingPage`.
    #[napi]
    pub fn pending(&self) -> Vec<String> {
        request_chunks(&self.state.gate.pending())
    }

    /// Up to `limit` pending requests (default 1,000), oldest first, after the cursor `after`
    /// (from the oldest when absent): `Gate::pending_page`, O(limit) whatever is pending. Throws
    /// `malformed` for a string that is not a cursor (the core's `PendingCursor`,
    /// `<createdAtMs>-<id>`) or a limit that is not a whole number from 1 to 2^32 - 1.
    #[napi]
    pub fn pending_page(&self, env: Env, after: Option<String>, limit: Option<f64>) -> Result<PendingPageData> {
        let limit = page_limit(&env, limit)?;
        let after = after.map(|s| s.parse::<PendingCursor>()).transpose().map_err(|e| errors::throw(&env, &e))?;
        let page = self.state.gate.pending_page(after.as_ref(), limit);
        Ok(PendingPageData { requests: request_chunks(&page.requests), next: page.next.map(|c| c.to_string()) })
    }

    #[napi(getter)]
    pub fn pending_count(&self) -> u32 {
        self.state.gate.pending_count() as u32
    }

    /// How many approvers are attached (request listeners count as one; observers do not).
    #[napi(getter)]
    pub fn approver_count(&self) -> u32 {
        self.state.gate.approver_count() as u32
    }

    #[napi(getter)]
    pub fn is_closed(&self) -> bool {
        self.state.gate.is_closed()
    }

    #[napi(getter)]
    pub fn gating_disabled(&self) -> bool {
        self.state.gate.gating_disabled()
    }

    /// The tools granted for a session, sorted.
    #[napi]
    pub fn grants(&self, session_id: String) -> Vec<String> {
        self.state.gate.grants(&session_id)
    }

    /// Revokes a session grant. Returns whether one existed.
    #[napi]
    pub fn revoke_grant(&self, session_id: String, tool: String) -> bool {
        self.state.gate.revoke_grant(&session_id, &tool)
    }

    /// Ends a session: drops its grants and cancels its pending requests. Returns how many.
    #[napi]
    pub fn end_session(&self, env: Env, session_id: String) -> u32 {
        self.state.enter(&env, || self.state.gate.end_session(&session_id)) as u32
    }

    /// Registers (a function) or removes (`null`) the facade's request dispatcher: while one is
    /// set, it is the gate's inline approver (`Gate::on_request_inline`), called in the call that
    /// made the request (requests already pending: in this call). It is called with a run
    /// token, the request's id, tool and arguments (JSON), and its other `ConfirmationRequestData`
    /// fields (JSON). It returns `null` when every listener has returned, a string (the first
    /// failure) when one threw, or `undefined` when some are still running: then it calls
    /// `finishRequest(token, error?)` once they have settled.
    #[napi(
        ts_args_type = "dispatch: ((token: number, id: string, tool: string, argumentsJson: string, restJson: string) => null | string | undefined) | null"
    )]
    pub fn set_request_handler(&self, env: Env, dispatch: Option<Unknown>) -> Result<()> {
        match dispatch {
            Some(f) => self.state.enter(&env, || handler::start(&self.state, &env, f.raw())),
            None => {
                self.state.enter(&env, || handler::stop(&self.state, Some(&env)));
                Ok(())
            }
        }
    }

    /// Reports that the listeners of run `token` have all settled; `error`: the first failure's
    /// message. If nobody answered the request, the approval step failed: the core cancels it
    /// (`approval-failed`) and writes `error` to the audit log and stderr, never to the model.
    #[napi]
    pub fn finish_request(&self, env: Env, token: f64, error: Option<String>) {
        self.state.enter(&env, || handler::finish(&self.state, token as u64, error));
    }

    /// Subscribes to the bus as an approver (`Gate::subscribe`), or as an observer when
    /// `observe` (`Gate::observe`: it never keeps a call waiting); `types` limits the event types
    /// delivered (lags always are).
    #[napi(
        ts_args_type = "types?: Array<'confirmation-request' | 'confirmation-response' | 'confirmation-timeout' | 'confirmation-resolved'>, observe?: boolean"
    )]
    pub fn subscribe(&self, env: Env, types: Option<Vec<String>>, observe: Option<bool>) -> Result<NativeSubscription> {
        NativeSubscription::new(&env, &self.state, types, observe.unwrap_or(false))
    }

    /// Shuts the gate down (`Gate::close`): pending requests are cancelled (`shutdown`), the audit
    /// log is flushed and a durable store closed (its file lock released) off the JavaScript
    /// thread, then the request handler and the threadsafe function are released (nothing keeps
    /// the process alive). Tools still running are not interrupted: each call resolves with its
    /// tool's result once the tool settles. Returns `undefined` when done at once, else a promise.
    #[napi(ts_return_type = "undefined | Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        let gate = self.state.gate.clone();
        let weak = Rc::downgrade(&self.state);
        // Marked while the task is polled, inside the call driving it (not when its promise is
        // settled, which may be after that call returned): that call then releases the gate's
        // resources before it returns, even when nothing calls into the gate afterwards.
        let mark = move || {
            if let Some(s) = weak.upgrade() {
                s.mark_closed();
            }
        };
        if !self.state.is_released() {
            // Closed now, also when the task below is polled later (a close() from inside a
            // listener or a tool): nothing that needs approval gets through meanwhile.
            gate.mark_closed();
        }
        let fut: TaskFuture = if self.state.is_released() {
            Box::pin(async move { Box::new(undefined) as Settle })
        } else if self.has_audit || self.durable {
            // What may wait for the disk runs off this thread.
            Box::pin(async move {
                let _ = tokio::task::spawn_blocking(move || gate.close()).await;
                mark();
                Box::new(undefined) as Settle
            })
        } else {
            Box::pin(async move {
                gate.close();
                mark();
                Box::new(undefined) as Settle
            })
        };
        self.run(env, fut, true, None)
    }

    /// Waits until every audit record so far is durable (off the JavaScript thread).
    #[napi(ts_return_type = "undefined | Promise<void>")]
    pub fn flush_audit<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        let gate = self.state.gate.clone();
        let fut: TaskFuture = if self.state.is_released() || !self.has_audit {
            // Closing flushed it already, or there is nothing to flush.
            Box::pin(async move { Box::new(undefined) as Settle })
        } else {
            Box::pin(async move {
                let _ = tokio::task::spawn_blocking(move || gate.flush_audit()).await;
                Box::new(undefined) as Settle
            })
        };
        self.run(env, fut, true, None)
    }
}

/// The core's gate options, as Node names them (`new Gate({ busCapacity })`).
#[napi]
pub fn gate_option_names() -> Vec<String> {
    signoff::GateConfig::option_names(signoff::Naming::Camel).collect()
}
