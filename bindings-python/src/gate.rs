//! The gate (core `gate` module, with its `tokens` and `recovery` parts): `Gate`, `Decision`,
//! `Recovery`, and tool calls from Python arguments.

use crate::bridge;
use crate::convert::{self, to_py};
use crate::errors::{self, IntoPyResult};
use crate::events::{self, EventStream, RequestRef};
use crate::executor::{self, ToolResult};
use crate::handler::{self, HandlerRegistration};
use crate::store::{Approvers, StoredRecord};
use crate::token::{TokenClaims, TokenKeys};
use crate::tools;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use signoff::{ConfirmationResponse, Gate, GateConfig, Naming, PendingRequest, ToolCall};
use std::sync::{Arc, Mutex};

/// What the gate decided about one call: run it (with `arguments`) or do not.
///
/// `outcome` is `"approved"`, `"denied"`, `"timed-out"` or `"cancelled"`; only `approved` means
/// the tool may run. `to_dict()` / `to_json()` give the core's stable JSON form.
#[pyclass(module = "signoff._native", frozen)]
pub struct Decision {
    pub inner: signoff::Decision,
}

impl Decision {
    fn value(&self) -> serde_json::Value {
        serde_json::to_value(&self.inner).unwrap_or_default()
    }
}

#[pymethods]
impl Decision {
    /// `"approved"`, `"denied"`, `"timed-out"` or `"cancelled"`.
    #[getter]
    fn outcome(&self) -> &'static str {
        self.inner.outcome().as_str()
    }
    /// True only when the call may run.
    #[getter]
    fn approved(&self) -> bool {
        self.inner.is_approved()
    }
    /// The arguments to run with (the original ones or the person's edit); `None` unless approved.
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.arguments().map(|a| to_py(py, a)).transpose()
    }
    /// The person changed the arguments before approving.
    #[getter]
    fn edited(&self) -> bool {
        self.inner.edited()
    }
    /// Why the call may run: `"person"`, `"not-gated"`, `"session-grant"`, `"gating-disabled"`.
    #[getter]
    fn by(&self) -> Option<String> {
        self.inner.approved_by().map(|by| convert::enum_str(&by))
    }
    /// `"once"` or `"session"` for an approval; `None` otherwise.
    #[getter]
    fn scope(&self) -> Option<String> {
        self.inner.is_approved().then(|| convert::enum_str(&self.inner.scope()))
    }
    /// Who approved or denied.
    #[getter]
    fn responder(&self) -> Option<&str> {
        self.inner.responder()
    }
    /// As in the JSON form: the person's reason for a denial, the cancel reason for a cancellation.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.inner.reason().or_else(|| self.inner.cancel_reason().map(|c| c.as_str()))
    }
    /// For a cancellation: `"no-approver"`, `"shutdown"`, `"aborted"`, `"session-ended"` or
    /// `"approval-failed"`.
    #[getter]
    fn cancel_reason(&self) -> Option<&'static str> {
        self.inner.cancel_reason().map(|c| c.as_str())
    }
    /// The confirmation request this decision answers, if one was made.
    #[getter]
    fn request_id(&self) -> Option<String> {
        self.inner.request_id().map(|u| u.to_string())
    }
    /// For a timeout: how long the request waited.
    #[getter]
    fn timeout_ms(&self) -> Option<u64> {
        self.inner.timeout_ms()
    }
    /// The stable JSON form, as a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.value())
    }
    /// The stable JSON form, as text.
    #[pyo3(signature = (*, indent=None))]
    fn to_json(&self, py: Python<'_>, indent: Option<usize>) -> PyResult<String> {
        convert::pretty_json(py, &self.value(), indent)
    }
    /// Parses the stable JSON form (dict or JSON string).
    #[staticmethod]
    fn from_json(data: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Decision { inner: convert::from_py_as(data, "decision")? })
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Decision>().is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __repr__(&self) -> String {
        format!("Decision({})", convert::to_json_text(&self.inner))
    }
}

/// Builds a core `ToolCall` from Python arguments.
pub fn make_call(
    tool: String,
    arguments: Option<&Bound<'_, PyAny>>,
    session_id: Option<String>,
    call_id: Option<String>,
    metadata: Option<&Bound<'_, PyAny>>,
) -> PyResult<ToolCall> {
    let args = match arguments {
        Some(a) if !a.is_none() => convert::from_py(a, "arguments")?,
        _ => serde_json::Value::Object(Default::default()),
    };
    let mut call = ToolCall::new(tool, args);
    if let Some(s) = session_id {
        call.session_id = s;
    }
    call.call_id = call_id;
    if let Some(m) = metadata
        && !m.is_none()
    {
        call.metadata = convert::from_py(m, "metadata")?;
    }
    Ok(call)
}

/// Tool calls from a sequence of dicts (the core `ToolCall` JSON form), each one document.
fn calls_from_py(calls: &Bound<'_, PyAny>) -> PyResult<Vec<ToolCall>> {
    calls.try_iter()?.map(|call| convert::from_py_as(&call?, "tool call")).collect()
}

fn decision_to_py(py: Python<'_>, r: signoff::Result<signoff::Decision>) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Decision { inner: r.map_err(errors::to_py)? })?.into_any())
}

fn outcome_to_py(py: Python<'_>, r: signoff::Result<signoff::Outcome>) -> PyResult<Py<PyAny>> {
    Ok(pyo3::types::PyString::new(py, r.py_err()?.as_str()).into_any().unbind())
}

/// A token answer's fields, checked as `respond_token` takes them.
fn token_response(
    decision: &str,
    approver: String,
    arguments: Option<&Bound<'_, PyAny>>,
    scope: &str,
    reason: Option<String>,
) -> PyResult<signoff::TokenResponse> {
    Ok(signoff::TokenResponse {
        approver,
        decision: convert::parse_enum::<signoff::ResponseDecision>(decision, "decision")?,
        arguments: match arguments {
            Some(a) if !a.is_none() => Some(convert::from_py(a, "arguments")?),
            _ => None,
        },
        scope: convert::parse_enum::<signoff::Scope>(scope, "scope")?,
        reason,
    })
}

fn results_to_py(py: Python<'_>, v: Vec<signoff::ToolResult>) -> PyResult<Py<PyAny>> {
    let items: PyResult<Vec<Py<ToolResult>>> = v.into_iter().map(|r| Py::new(py, ToolResult { inner: r })).collect();
    Ok(PyList::new(py, items?)?.into_any().unbind())
}

/// A request id from a `ConfirmationRequest`, `PendingRequest` or id string.
fn request_id(obj: &Bound<'_, PyAny>) -> PyResult<uuid::Uuid> {
    Ok(match events::request_ref(obj)? {
        RequestRef::Request(r) => r.id,
        RequestRef::Id(id) => id,
    })
}

/// What `Gate.recover()` found and did.
#[pyclass(module = "signoff._native", frozen)]
pub struct Recovery {
    pub inner: signoff::Recovery,
}

#[pymethods]
impl Recovery {
    /// Still pending: waiting again until their original deadlines. Approving one runs its
    /// tool's executor once, in the gate; the result is stored (`Gate.record`).
    #[getter]
    fn restored<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        events::requests_to_py(py, self.inner.restored.clone())
    }
    /// Their deadline passed while the process was down: resolved as timed out.
    #[getter]
    fn timed_out<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        events::requests_to_py(py, self.inner.timed_out.clone())
    }
    /// Approved or executing when the process stopped: now `interrupted`, never run again (the
    /// records as they were found).
    #[getter]
    fn interrupted<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items: PyResult<Vec<Py<StoredRecord>>> =
            self.inner.interrupted.iter().map(|r| Py::new(py, StoredRecord { inner: r.clone() })).collect();
        PyList::new(py, items?)
    }
    /// Pending but not restorable (cancelled, never run): `NotRestored(request, reason)` items.
    #[getter]
    fn not_restored<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items: PyResult<Vec<Py<NotRestored>>> =
            self.inner.not_restored.iter().map(|n| Py::new(py, NotRestored { inner: n.clone() })).collect();
        PyList::new(py, items?)
    }
    /// As a dict (the core's JSON form).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &serde_json::to_value(&self.inner).unwrap_or_default())
    }
    fn __repr__(&self) -> String {
        format!(
            "Recovery(restored={}, timed_out={}, interrupted={}, not_restored={})",
            self.inner.restored.len(),
            self.inner.timed_out.len(),
            self.inner.interrupted.len(),
            self.inner.not_restored.len()
        )
    }
}

/// A stored pending request `Gate.recover()` cancelled instead of restoring, and why.
#[pyclass(module = "signoff._native", frozen)]
pub struct NotRestored {
    pub inner: signoff::NotRestored,
}

#[pymethods]
impl NotRestored {
    /// The request.
    #[getter]
    fn request(&self, py: Python<'_>) -> PyResult<Py<events::ConfirmationRequest>> {
        Py::new(py, events::ConfirmationRequest { inner: self.inner.request.clone() })
    }
    /// Why it was not restored (tool missing or without executor, arguments no longer valid).
    #[getter]
    fn reason(&self) -> &str {
        &self.inner.reason
    }
    fn __repr__(&self) -> String {
        format!("NotRestored(id={}, reason={:?})", self.inner.request.id, self.inner.reason)
    }
}

/// The approval gate (native layer; use `signoff.Gate`).
#[pyclass(module = "signoff._native", name = "Gate", frozen)]
pub struct PyGate {
    pub gate: Gate,
    handlers: Mutex<Vec<Arc<handler::HandlerSlot>>>,
    /// On a store shared with other processes (`store_url`): the core's calls may wait for a
    /// database round trip, so they run without the GIL (async calls are polled without it too).
    shared: bool,
}

impl Drop for PyGate {
    fn drop(&mut self) {
        // Garbage-collected: nobody can answer through this gate any more. Fail safe. (With a
        // shared store, closing cancels each pending request in the database: without the GIL.)
        if self.shared {
            let me = &*self;
            if Python::try_attach(|py| py.detach(|| me.shutdown())).is_some() {
                return;
            }
        }
        self.shutdown();
    }
}

impl PyGate {
    fn shutdown(&self) {
        // Close first, so pending requests end as `shutdown` (not `no-approver` when the
        // handlers detach).
        self.gate.close();
        let handlers = std::mem::take(&mut *self.handlers.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handlers {
            h.stop();
        }
    }
}

/// The gate options Python's `Gate` takes beside the core's: durations in seconds (or a
/// `timedelta`), which `signoff.gate` turns into the core's `_ms` options.
const PYTHON_ONLY_OPTIONS: [&str; 2] = ["default_timeout", "token_ttl"];

#[pymethods]
impl PyGate {
    /// A gate from keyword options: the core's `GateConfig` in snake_case, validated there
    /// (`ConfigError` naming the option). `token_keys` and `approvers` may also be the objects.
    #[new]
    #[pyo3(signature = (**options))]
    fn new(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let (mut json, mut keys, mut approvers) = (serde_json::Map::new(), None, None);
        for (name, value) in options.into_iter().flatten() {
            let name: String = name.extract()?;
            // The objects only under their own names: anywhere else they are not configuration.
            if let (Ok(k), "token_keys") = (value.cast::<TokenKeys>(), name.as_str()) {
                keys = Some(k.get().inner.clone());
            } else if let (Ok(a), "approvers") = (value.cast::<Approvers>(), name.as_str()) {
                approvers = Some(a.get().inner.clone());
            } else {
                json.insert(name.clone(), convert::from_py(&value, &name).map_err(|e| config_error(py, &e))?);
            }
        }
        // An unknown name is refused with a suggestion among the names Python takes: the core's,
        // and the durations in seconds the facade turns into them (`default_timeout`).
        let core_names: Vec<String> = GateConfig::option_names(Naming::Snake).collect();
        if let Some(key) = json.keys().find(|k| !core_names.contains(k)) {
            let mut names = core_names.clone();
            names.extend(PYTHON_ONLY_OPTIONS.iter().map(|s| (*s).to_owned()));
            return Err(errors::to_py(signoff::config::unknown_option(key, &names, "gate option")));
        }
        // Read, add the objects, then check the rules between options (`token_ttl_ms` needs keys).
        let mut config = GateConfig::read_json(&serde_json::Value::Object(json), Naming::Snake).py_err()?;
        config.token_keys = keys.or(config.token_keys);
        config.approvers = approvers.or(config.approvers);
        config.validate(Naming::Snake).py_err()?;
        // Its warnings and errors name Python's API (`Gate(deny_when_unobserved=False)`).
        config.host = signoff::Host::Python;
        let shared = config.store_url.is_some();
        Ok(PyGate { gate: py.detach(|| config.build()).py_err()?, handlers: Mutex::new(Vec::new()), shared })
    }

    /// Registers (or replaces) a tool from its spec dict (the core `ToolSpec` JSON form) and an
    /// optional executor: an async one is the tool function itself, called with the approved
    /// arguments (as keywords with `keywords`) and the call's `CallContext` as the keyword
    /// argument `context_param` when given; a sync one is called with the arguments and the
    /// `CallContext`.
    #[pyo3(signature = (spec, executor=None, executor_is_async=None, context_param=None, keywords=false))]
    fn register(
        &self,
        spec: &Bound<'_, PyAny>,
        executor: Option<Bound<'_, PyAny>>,
        executor_is_async: Option<bool>,
        context_param: Option<Bound<'_, PyString>>,
        keywords: bool,
    ) -> PyResult<()> {
        let mut tool = signoff::Tool::from_spec(tools::spec_from_py(spec)?);
        if let Some(f) = executor
            && !f.is_none()
        {
            let run = executor::python_executor(f, executor_is_async, context_param, keywords)?;
            tool = tool.with_context_executor(run);
        }
        self.gate.register(tool).py_err()
    }

    /// Removes a tool; returns whether it was registered.
    fn unregister(&self, name: &str) -> bool {
        self.gate.unregister(name)
    }

    /// The specs of every registered tool (dicts), sorted by name.
    fn tools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::ser_to_py(py, &self.gate.tools())
    }

    /// Whether a call would need approval now, and why: `{"required", "forced_by_rule", "reasons"}`.
    #[pyo3(signature = (tool, arguments=None, session_id=None))]
    fn evaluate<'py>(
        &self,
        py: Python<'py>,
        tool: String,
        arguments: Option<&Bound<'py, PyAny>>,
        session_id: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let call = make_call(tool, arguments, session_id, None, None)?;
        let e = self.gate.evaluate(&call).py_err()?;
        let d = PyDict::new(py);
        d.set_item("required", e.required)?;
        d.set_item("forced_by_rule", e.forced_by_rule)?;
        d.set_item("reasons", e.reasons)?;
        Ok(d)
    }

    /// Asks for approval when needed and waits: an `asyncio.Future[Decision]` of the running loop.
    /// Cancelling it cancels the request (reason `aborted`).
    #[pyo3(signature = (tool, arguments=None, session_id=None, call_id=None, metadata=None))]
    fn confirm<'py>(
        &self,
        py: Python<'py>,
        tool: String,
        arguments: Option<&Bound<'py, PyAny>>,
        session_id: Option<String>,
        call_id: Option<String>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = make_call(tool, arguments, session_id, call_id, metadata)?;
        // The core's future as it is (it holds its own gate handle): one allocation per call.
        bridge::spawn(py, self.gate.confirm_owned(call), decision_to_py, self.shared)
    }

    /// `confirm`, blocking the calling thread (not the GIL) until decided.
    #[pyo3(signature = (tool, arguments=None, session_id=None, call_id=None, metadata=None))]
    fn confirm_blocking(
        &self,
        py: Python<'_>,
        tool: String,
        arguments: Option<&Bound<'_, PyAny>>,
        session_id: Option<String>,
        call_id: Option<String>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let call = make_call(tool, arguments, session_id, call_id, metadata)?;
        let r = bridge::block_on(py, "confirm_blocking()", self.gate.confirm_owned(call))?;
        decision_to_py(py, r)
    }

    /// Confirms and, if approved, runs the executor once: an `asyncio.Future[ToolResult]`.
    #[pyo3(signature = (tool, arguments=None, session_id=None, call_id=None, metadata=None))]
    fn execute<'py>(
        &self,
        py: Python<'py>,
        tool: String,
        arguments: Option<&Bound<'py, PyAny>>,
        session_id: Option<String>,
        call_id: Option<String>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = make_call(tool, arguments, session_id, call_id, metadata)?;
        let gate = self.gate.clone();
        let deliver = |py: Python<'_>, r| Ok(Py::new(py, ToolResult { inner: r })?.into_any());
        bridge::spawn(py, async move { gate.execute(call).await }, deliver, self.shared)
    }

    /// `execute`, blocking the calling thread (not the GIL).
    #[pyo3(signature = (tool, arguments=None, session_id=None, call_id=None, metadata=None))]
    fn execute_blocking(
        &self,
        py: Python<'_>,
        tool: String,
        arguments: Option<&Bound<'_, PyAny>>,
        session_id: Option<String>,
        call_id: Option<String>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<ToolResult>> {
        let call = make_call(tool, arguments, session_id, call_id, metadata)?;
        let gate = self.gate.clone();
        let r = bridge::block_on(py, "execute_blocking()", async move { gate.execute(call).await })?;
        Py::new(py, ToolResult { inner: r })
    }

    /// Runs the calls of one model turn concurrently (each at most once); results in call order.
    fn execute_batch<'py>(&self, py: Python<'py>, calls: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let calls = calls_from_py(calls)?;
        let gate = self.gate.clone();
        bridge::spawn(py, async move { gate.execute_batch(calls).await }, results_to_py, self.shared)
    }

    /// `execute_batch`, blocking the calling thread (not the GIL).
    fn execute_batch_blocking(&self, py: Python<'_>, calls: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let calls = calls_from_py(calls)?;
        let gate = self.gate.clone();
        let r = bridge::block_on(py, "execute_batch_blocking()", async move { gate.execute_batch(calls).await })?;
        results_to_py(py, r)
    }

    /// Answers a pending request with a response dict (the core `ConfirmationResponse` JSON form).
    /// Returns the outcome (`"approved"` / `"denied"`); raises a `SignoffError` subclass when the
    /// response is rejected (the request is then unchanged).
    fn respond(&self, py: Python<'_>, response: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        let v = convert::json_arg(response, "response")?;
        let r = ConfirmationResponse::from_json(v).py_err()?;
        Ok(answering(py, || self.gate.respond(r)).py_err()?.as_str())
    }

    /// `respond` without holding the calling thread while the answer is recorded
    /// (`Gate::respond_async`): an `asyncio.Future` of the outcome, resolved once a durable or
    /// shared store recorded it (at once with the in-memory store); same errors as `respond`.
    fn respond_async<'py>(&self, py: Python<'py>, response: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let v = convert::json_arg(response, "response")?;
        let r = ConfirmationResponse::from_json(v).py_err()?;
        let gate = self.gate.clone();
        let answer = answering(py, move || {
            let _rt = bridge::runtime().enter();
            gate.respond_async(r)
        });
        bridge::spawn(py, answer, outcome_to_py, false)
    }

    /// Answers with a JSON text response (e.g. from a remote UI).
    fn respond_json(&self, py: Python<'_>, json: &str) -> PyResult<&'static str> {
        Ok(answering(py, || self.gate.respond_json(json)).py_err()?.as_str())
    }

    /// Approves `request` (a `ConfirmationRequest`, `PendingRequest` or id). With a request
    /// object the response is bound to what was shown (tool, argument digest, session).
    #[pyo3(signature = (request, arguments=None, scope="once", responder=None))]
    fn approve(
        &self,
        py: Python<'_>,
        request: &Bound<'_, PyAny>,
        arguments: Option<&Bound<'_, PyAny>>,
        scope: &str,
        responder: Option<String>,
    ) -> PyResult<&'static str> {
        let scope = convert::parse_enum::<signoff::Scope>(scope, "scope")?;
        let args = match arguments {
            Some(a) if !a.is_none() => Some(convert::from_py(a, "arguments")?),
            _ => None,
        };
        let target = events::request_ref(request)?;
        let outcome = answering(py, || match target {
            RequestRef::Request(req) => {
                PendingRequest::new(self.gate.clone(), req).approve_with(args, scope, responder)
            }
            RequestRef::Id(id) => {
                let mut r = ConfirmationResponse::by_id(id, signoff::ResponseDecision::Approve).with_scope(scope);
                r.arguments = args;
                r.responder = responder;
                self.gate.respond(r)
            }
        });
        Ok(outcome.py_err()?.as_str())
    }

    /// Denies `request` (a `ConfirmationRequest`, `PendingRequest` or id) with an optional reason
    /// the model will read.
    #[pyo3(signature = (request, reason=None, responder=None))]
    fn deny(
        &self,
        py: Python<'_>,
        request: &Bound<'_, PyAny>,
        reason: Option<String>,
        responder: Option<String>,
    ) -> PyResult<&'static str> {
        let target = events::request_ref(request)?;
        let outcome = answering(py, || match target {
            RequestRef::Request(req) => PendingRequest::new(self.gate.clone(), req).deny(reason, responder),
            RequestRef::Id(id) => {
                let mut r = ConfirmationResponse::by_id(id, signoff::ResponseDecision::Deny);
                r.reason = reason;
                r.responder = responder;
                self.gate.respond(r)
            }
        });
        Ok(outcome.py_err()?.as_str())
    }

    /// Every pending request, oldest first.
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        events::requests_to_py(py, py.detach(|| self.gate.pending()))
    }

    /// Up to `limit` pending requests after the cursor `after`, oldest first, and the cursor of
    /// the next page (`None` at the end).
    #[pyo3(signature = (after=None, limit=None), text_signature = "($self, after=None, limit=1000)")]
    fn pending_page<'py>(
        &self,
        py: Python<'py>,
        after: Option<&str>,
        limit: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyList>, Option<String>)> {
        // The core's rule for any number; an int too large for a float is simply out of range.
        let n = match limit.map(|l| (l, l.extract::<f64>())) {
            None => signoff::LAGGED_SNAPSHOT_LIMIT as f64,
            Some((l, Err(_))) if l.is_instance_of::<pyo3::types::PyInt>() => f64::INFINITY,
            Some((_, n)) => n?,
        };
        let limit = signoff::PendingPage::limit(n, "limit").py_err()?;
        let after = after.map(|a| a.parse::<signoff::PendingCursor>()).transpose().py_err()?;
        let page = py.detach(|| self.gate.pending_page(after.as_ref(), limit));
        Ok((events::requests_to_py(py, page.requests)?, page.next.map(|c| c.to_string())))
    }

    /// One pending request, or `None`.
    fn pending_request(&self, py: Python<'_>, request_id: &str) -> PyResult<Option<Py<events::ConfirmationRequest>>> {
        let id = events::parse_uuid(request_id)?;
        let found = py.detach(|| self.gate.pending_request(&id));
        found.map(|r| Py::new(py, events::ConfirmationRequest { inner: r })).transpose()
    }

    /// How many requests are pending.
    #[getter]
    fn pending_count(&self, py: Python<'_>) -> usize {
        py.detach(|| self.gate.pending_count())
    }

    /// Cancels one pending request (reason `aborted`); returns whether it was pending.
    fn cancel_request(&self, py: Python<'_>, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let id = self::request_id(request_id)?;
        Ok(py.detach(|| self.gate.cancel_request(&id)))
    }

    /// Ends a session: drops its grants and cancels its pending requests. Returns how many.
    fn end_session(&self, py: Python<'_>, session_id: &str) -> usize {
        py.detach(|| self.gate.end_session(session_id))
    }

    /// Revokes a session grant; returns whether one existed.
    fn revoke_grant(&self, session_id: &str, tool: &str) -> bool {
        self.gate.revoke_grant(session_id, tool)
    }

    /// The tools granted for a session, sorted.
    fn grants(&self, session_id: &str) -> Vec<String> {
        self.gate.grants(session_id)
    }

    // ---- remote approval (core `gate::tokens`) ------------------------------------------------

    /// Issues a signed approval token for a pending request, for `approver` only.
    fn issue_token(&self, py: Python<'_>, request: &Bound<'_, PyAny>, approver: &str) -> PyResult<String> {
        let id = request_id(request)?;
        py.detach(|| self.gate.issue_token(&id, approver)).py_err()
    }

    /// Verifies a token's key and signature and returns its claims.
    fn inspect_token(&self, py: Python<'_>, token: &str) -> PyResult<TokenClaims> {
        let inner = py.detach(|| self.gate.inspect_token(token)).py_err()?;
        Ok(TokenClaims { inner })
    }

    /// Answers the token's request, presented by `approver`.
    #[pyo3(signature = (token, decision, approver, arguments=None, scope="once", reason=None))]
    #[allow(clippy::too_many_arguments)]
    fn respond_token(
        &self,
        py: Python<'_>,
        token: &str,
        decision: &str,
        approver: String,
        arguments: Option<&Bound<'_, PyAny>>,
        scope: &str,
        reason: Option<String>,
    ) -> PyResult<&'static str> {
        let response = token_response(decision, approver, arguments, scope, reason)?;
        Ok(answering(py, || self.gate.respond_token(token, response)).py_err()?.as_str())
    }

    /// `respond_token` without holding the calling thread while the answer is recorded
    /// (`Gate::respond_token_async`): an `asyncio.Future` of the outcome.
    #[pyo3(signature = (token, decision, approver, arguments=None, scope="once", reason=None))]
    #[allow(clippy::too_many_arguments)]
    fn respond_token_async<'py>(
        &self,
        py: Python<'py>,
        token: &str,
        decision: &str,
        approver: String,
        arguments: Option<&Bound<'py, PyAny>>,
        scope: &str,
        reason: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let response = token_response(decision, approver, arguments, scope, reason)?;
        let gate = self.gate.clone();
        let answer = answering(py, move || {
            let _rt = bridge::runtime().enter();
            gate.respond_token_async(token, response)
        });
        bridge::spawn(py, answer, outcome_to_py, false)
    }

    /// An approval marker for a call this gate approved by a person (`Gate::approval_marker`).
    fn approval_marker(&self, py: Python<'_>, tool: &str, decision: PyRef<'_, Decision>) -> PyResult<String> {
        let d = decision.inner.clone();
        py.detach(|| self.gate.approval_marker(tool, &d)).py_err()
    }

    /// Accepts an approval marker once for a call to `tool` with `arguments`
    /// (`Gate::accept_approval_marker`); returns its claims as a dict.
    fn accept_approval_marker<'py>(
        &self,
        py: Python<'py>,
        marker: &str,
        tool: &str,
        arguments: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = convert::from_py(arguments, "arguments")?;
        let claims = py.detach(|| self.gate.accept_approval_marker(marker, tool, &args)).py_err()?;
        to_py(py, &serde_json::to_value(&claims).unwrap_or_default())
    }

    // ---- durable store (core `gate::recovery`, `store`) ---------------------------------------

    /// A request's stored record in any state, or `None`.
    fn record(&self, py: Python<'_>, request: &Bound<'_, PyAny>) -> PyResult<Option<StoredRecord>> {
        let id = request_id(request)?;
        Ok(py.detach(|| self.gate.record(&id)).map(|inner| StoredRecord { inner }))
    }

    /// Picks up what an earlier process left in the durable store. Once, after registering
    /// tools, before the first call.
    fn recover(&self, py: Python<'_>) -> PyResult<Recovery> {
        let inner = py
            .detach(|| {
                // Restored requests wait (and run their tools) in tasks on the binding's runtime.
                let _rt = bridge::runtime().enter();
                self.gate.recover()
            })
            .py_err()?;
        Ok(Recovery { inner })
    }

    /// Subscribes to the event bus now: as an approver, or (`observe=True`) as an observer,
    /// which sees every event but never counts as someone who can answer; with `types`, only
    /// events of those types (`"confirmation-request"`, ...) and lag markers.
    #[pyo3(signature = (observe=false, types=None))]
    fn events(&self, observe: bool, types: Option<Vec<String>>) -> PyResult<EventStream> {
        let types = match types {
            None => signoff::EventTypes::ALL,
            Some(names) => signoff::EventTypes::from_names(names).map_err(errors::to_py)?,
        };
        let sub = if observe { self.gate.observe() } else { self.gate.subscribe() };
        Ok(EventStream::new(sub.only(types), self.shared))
    }

    /// Calls `handler(request: PendingRequest)` for every request from now on (and those already
    /// pending), in the publishing context. See `signoff.Gate.on_request`.
    #[pyo3(signature = (handler, is_async=None))]
    fn on_request(
        &self,
        py: Python<'_>,
        handler: Bound<'_, PyAny>,
        is_async: Option<bool>,
    ) -> PyResult<HandlerRegistration> {
        let (slot, reg) = handler::start(py, &self.gate, handler, is_async)?;
        self.handlers.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
        Ok(reg)
    }

    /// Shuts the gate down: pending requests are cancelled (`shutdown`), handlers stop, later
    /// calls are cancelled at once, later responses raise `ClosedError`. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.shutdown());
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.gate.is_closed()
    }

    /// How many approvers are attached (event streams and handlers; observers do not count).
    #[getter]
    fn approver_count(&self) -> usize {
        self.gate.approver_count()
    }

    /// True when gating is disabled (development only).
    #[getter]
    fn gating_disabled(&self) -> bool {
        self.gate.gating_disabled()
    }

    /// The approval timeout for tools that set none, in milliseconds.
    #[getter]
    fn default_timeout_ms(&self) -> u64 {
        self.gate.policy().default_timeout.as_millis() as u64
    }

    /// The policy's keywords.
    #[getter]
    fn keywords(&self) -> Vec<String> {
        self.gate.policy().keywords.clone()
    }

    /// Waits until every audit record so far is written.
    fn flush_audit(&self, py: Python<'_>) {
        py.detach(|| self.gate.flush_audit());
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("Gate(pending={}, closed={})", py.detach(|| self.gate.pending_count()), self.gate.is_closed())
    }
}

/// Runs an answer without the GIL; the calls it resolves on this thread's loop are polled right
/// after it (see `bridge::polling_woken`).
fn answering<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    bridge::polling_woken(py, || py.detach(f))
}

/// A value that is not JSON, as a `ConfigError` (the converter's message names the option).
pub(crate) fn config_error(py: Python<'_>, e: &PyErr) -> PyErr {
    let msg = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
    errors::kind_err(py, signoff::ErrorKind::Config, format!("configuration error: {msg}"))
}

/// The core's default keywords.
#[pyfunction]
fn default_keywords() -> Vec<&'static str> {
    signoff::DEFAULT_KEYWORDS.to_vec()
}

/// The core's gate options, as Python names them (`Gate(**options)` in milliseconds; the
/// facade also reads `default_timeout` and `token_ttl` in seconds).
#[pyfunction]
fn gate_option_names() -> Vec<String> {
    signoff::GateConfig::option_names(signoff::Naming::Snake).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGate>()?;
    m.add_class::<Decision>()?;
    m.add_class::<Recovery>()?;
    m.add_class::<NotRestored>()?;
    m.add("DEFAULT_SESSION", signoff::DEFAULT_SESSION)?;
    m.add("HANDLER_RESPONDER", signoff::HANDLER_RESPONDER)?;
    m.add_function(wrap_pyfunction!(default_keywords, m)?)?;
    m.add_function(wrap_pyfunction!(gate_option_names, m)?)?;
    Ok(())
}
