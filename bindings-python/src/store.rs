//! Stores and authenticators (core `store` and `sqlite` modules): opening the SQLite pending
//! store, `Approvers` (who may approve which tools) and `StoredRecord` (a request's persisted
//! state). Every decision is the core's; an `Approvers.check` callback only answers the
//! question the core asks.

use crate::bridge;
use crate::convert::{self, to_py};
use crate::events::ConfirmationRequest;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::sync::Arc;

const CHECK_FAILED: &str = "signoff: the approver check raised; the approval is refused";

/// Runs a Python `check(request, approver)` for the core. Called synchronously by the core while
/// it validates a response, i.e. on the Python thread that answered (`respond`, `approve`,
/// `respond_token`, a handler's `request.approve`), which may have released the GIL: it is
/// re-acquired there. Never on a runtime thread: there the approval is refused instead, so no
/// runtime thread ever waits for the GIL.
fn run_check(f: &Py<PyAny>, request: &signoff::ConfirmationRequest, approver: &str) -> Result<(), String> {
    if bridge::on_runtime_thread() {
        return Err("the approver check cannot run on a runtime thread (e.g. inside a tool executor)".into());
    }
    bridge::attach_bg(|py| {
        let req = ConfirmationRequest { inner: Arc::new(request.clone()) };
        match f.bind(py).call1((req, approver)) {
            Ok(v) => {
                if v.is_exact_instance_of::<pyo3::types::PyBool>() && v.is_truthy().unwrap_or(false) {
                    Ok(())
                } else if let Ok(s) = v.cast::<PyString>() {
                    Err(s.to_string())
                } else if v.is_exact_instance_of::<pyo3::types::PyBool>() {
                    Err(format!("the approver check refused {approver:?}"))
                } else {
                    let shown = v.repr().map(|r| r.to_string()).unwrap_or_default();
                    Err(format!("the approver check returned {shown}, not True"))
                }
            }
            Err(e) => {
                convert::log_exception(py, convert::LOG_WARNING, CHECK_FAILED, &e);
                Err(format!("the approver check raised {}", convert::describe_err(py, &e)))
            }
        }
    })
    .unwrap_or_else(|| Err("the Python interpreter is shutting down".into()))
}

/// Who may approve which tools (the core `Approvers`). Immutable: each method returns a new
/// `Approvers`. Approvals must name their approver (`responder`); denials are accepted from
/// anyone, refusing to run being the safe side.
#[pyclass(module = "signoff._native", frozen)]
pub struct Approvers {
    pub inner: signoff::Approvers,
}

#[pymethods]
impl Approvers {
    /// No rules yet: any named approver may approve until a rule or check is added.
    #[new]
    fn new() -> Self {
        Approvers { inner: signoff::Approvers::new() }
    }
    /// `approvers` may approve calls to `tool`.
    fn allow(&self, tool: String, approvers: Vec<String>) -> Self {
        Approvers { inner: self.inner.clone().allow(tool, approvers) }
    }
    /// `approvers` may approve calls to any tool.
    fn allow_all_tools(&self, approvers: Vec<String>) -> Self {
        Approvers { inner: self.inner.clone().allow_all_tools(approvers) }
    }
    /// Refuse an approval whose approver is the request's own session id.
    #[pyo3(signature = (forbid=true))]
    fn forbid_self_approval(&self, forbid: bool) -> Self {
        Approvers { inner: self.inner.clone().forbid_self_approval(forbid) }
    }
    /// A callback `check(request, approver)` that must also agree: `True` allows, a string is a
    /// refusal reason, anything else (or raising) refuses.
    fn check(&self, check: Bound<'_, PyAny>) -> PyResult<Self> {
        if !check.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err("the approver check must be callable"));
        }
        let f = Arc::new(check.unbind());
        Ok(Approvers { inner: self.inner.clone().check(move |request, approver| run_check(&f, request, approver)) })
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

/// A request as the durable store keeps it: the request as published and where it is now.
#[pyclass(module = "signoff._native", frozen)]
pub struct StoredRecord {
    pub inner: signoff::StoredRecord,
}

impl StoredRecord {
    fn value(&self) -> serde_json::Value {
        serde_json::to_value(&self.inner).unwrap_or_default()
    }
}

#[pymethods]
impl StoredRecord {
    /// The request as it was published.
    #[getter]
    fn request(&self, py: Python<'_>) -> PyResult<Py<ConfirmationRequest>> {
        Py::new(py, ConfirmationRequest { inner: self.inner.request.clone() })
    }
    /// The request id.
    #[getter]
    fn id(&self) -> String {
        self.inner.request.id.to_string()
    }
    /// `"pending"`, `"approved"`, `"executing"`, `"done"`, `"released"`, `"denied"`,
    /// `"timed-out"`, `"cancelled"` or `"interrupted"`.
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state.as_str()
    }
    /// True when no further change will happen.
    #[getter]
    fn is_final(&self) -> bool {
        self.inner.state.is_final()
    }
    /// The arguments approved to run, once approved.
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.arguments.as_ref().map(|v| to_py(py, v)).transpose()
    }
    /// Who answered.
    #[getter]
    fn responder(&self) -> Option<&str> {
        self.inner.responder.as_deref()
    }
    /// The fingerprint of the approval token that answered (never the token itself).
    #[getter]
    fn token(&self) -> Option<&str> {
        self.inner.token.as_deref()
    }
    /// The tool's result (`done`: the `ToolResult` JSON form) or a note (`interrupted`,
    /// `cancelled`).
    #[getter]
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.result.as_ref().map(|v| to_py(py, v)).transpose()
    }
    /// When the state last changed (epoch ms).
    #[getter]
    fn updated_at_ms(&self) -> u64 {
        self.inner.updated_at_ms
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
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<StoredRecord>().is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __repr__(&self) -> String {
        format!(
            "StoredRecord(id={}, tool={:?}, state={:?})",
            self.inner.request.id,
            self.inner.request.tool,
            self.inner.state.as_str()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Approvers>()?;
    m.add_class::<StoredRecord>()?;
    Ok(())
}
