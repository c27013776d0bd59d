//! Handler-style approvals (core `dispatch` module): a Python callable attached with the core's
//! `Gate::on_request_inline`, which calls it in the publishing context (inside the poll of the
//! `confirm` / `execute` that made the request), answering through a `PendingRequest`. When the
//! handler raises or returns without answering, the request ends as cancelled
//! (`approval-failed`, the detail in the audit log and on stderr, the exception with its
//! traceback on the `signoff` logger).
//!
//! * A sync handler is called right there, on the thread that polls the core future: the event
//!   loop's (or a blocking call's) thread, no thread hop and no task. It must not block.
//! * An async handler (or a sync one returning an awaitable) runs as a Task on the event loop
//!   that was running when it was registered, holding the request until it answers.
//! * Never on a tokio thread: were the core to call it there, it is moved to the blocking pool.

use crate::bridge::{self, LoopBridge};
use crate::convert;
use crate::errors::IntoPyResult;
use crate::events::ConfirmationRequest;
use pyo3::prelude::*;
use signoff::{ApproverGuard, Gate};
use std::sync::{Arc, Mutex};

/// Only that it raised: the handler may have answered first (then the call ran), and the core
/// reports what happened to the request.
const HANDLER_FAILED: &str = "signoff: the approval handler raised";
const NO_ANSWER: &str = "the approval handler returned without answering";
const LOOP_CLOSED: &str = "the approval handler's event loop is closed";
const NO_LOOP: &str =
    "the approval handler returned an awaitable, but no event loop was running when it was registered";

/// A request waiting for the handler, with the means to answer it (bound to what was shown): a
/// `ConfirmationRequest` (every field, `to_dict()`, `to_json()`) with `approve()` and `deny()`.
#[pyclass(module = "signoff._native", frozen, extends = ConfirmationRequest)]
pub struct PendingRequest {
    pub inner: signoff::PendingRequest,
}

impl PendingRequest {
    fn new_py(py: Python<'_>, pending: signoff::PendingRequest) -> PyResult<Py<PendingRequest>> {
        let request = ConfirmationRequest { inner: pending.request().clone() };
        Py::new(py, pyo3::PyClassInitializer::from(request).add_subclass(PendingRequest { inner: pending }))
    }
}

#[pymethods]
impl PendingRequest {
    /// The request as published.
    #[getter]
    fn request(&self, py: Python<'_>) -> PyResult<Py<ConfirmationRequest>> {
        Py::new(py, ConfirmationRequest { inner: self.inner.request().clone() })
    }
    /// True while nobody has answered and it has neither timed out nor been cancelled.
    #[getter]
    fn is_pending(&self, py: Python<'_>) -> bool {
        py.detach(|| self.inner.is_pending())
    }

    /// Approves, optionally with edited `arguments` (the tool must be editable) and for the
    /// whole session (`scope="session"`). Returns `"approved"`; raises a `SignoffError` subclass
    /// when rejected (e.g. `AlreadyResolvedError`, `EditsNotAllowedError`).
    #[pyo3(signature = (arguments=None, scope="once", responder=None))]
    fn approve(
        &self,
        py: Python<'_>,
        arguments: Option<&Bound<'_, PyAny>>,
        scope: &str,
        responder: Option<String>,
    ) -> PyResult<&'static str> {
        let scope = convert::parse_enum::<signoff::Scope>(scope, "scope")?;
        let args = match arguments {
            Some(a) if !a.is_none() => Some(convert::from_py(a, "arguments")?),
            _ => None,
        };
        let outcome = bridge::polling_woken(py, || py.detach(|| self.inner.approve_with(args, scope, responder)));
        Ok(outcome.py_err()?.as_str())
    }

    /// Denies, with an optional reason the model will read. Returns `"denied"`.
    #[pyo3(signature = (reason=None, responder=None))]
    fn deny(&self, py: Python<'_>, reason: Option<String>, responder: Option<String>) -> PyResult<&'static str> {
        Ok(bridge::polling_woken(py, || py.detach(|| self.inner.deny(reason, responder))).py_err()?.as_str())
    }

    fn __repr__(&self) -> String {
        let r = self.inner.request();
        format!("PendingRequest(id={}, tool={:?}, session_id={:?})", r.id, r.tool, r.session_id)
    }
}

/// Keeps one handler attached until stopped (or the gate closes).
pub struct HandlerSlot {
    guard: Mutex<Option<ApproverGuard>>,
}

impl HandlerSlot {
    pub fn stop(&self) {
        // Dropping the guard detaches the approver.
        drop(self.guard.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
    fn active(&self) -> bool {
        self.guard.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// A registered approval handler. `stop()` unregisters it (the gate also keeps it registered
/// until the gate closes, so dropping this object does not stop it).
#[pyclass(module = "signoff._native", frozen)]
pub struct HandlerRegistration {
    slot: Arc<HandlerSlot>,
}

#[pymethods]
impl HandlerRegistration {
    /// Unregisters the handler. Requests it is handling right now still get its answer (or are
    /// cancelled as `approval-failed` if it gives none). Idempotent.
    fn stop(&self) {
        self.slot.stop();
    }
    /// True until stopped.
    #[getter]
    fn active(&self) -> bool {
        self.slot.active()
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.slot.stop();
        false
    }
}

/// The Python handler, as the core's inline approver.
struct Approver {
    handler: Py<PyAny>,
    is_async: bool,
    /// The loop running when it was registered: where its coroutines run.
    home: Option<Arc<LoopBridge>>,
}

impl Approver {
    /// Called by the core with the duty to answer `pending`.
    fn dispatch(self: &Arc<Self>, pending: signoff::PendingRequest) {
        if bridge::on_runtime_thread() {
            // No Python on a runtime thread. (Dropped unanswered if the interpreter is
            // finalizing: the core then ends the request as approval-failed.)
            let me = self.clone();
            bridge::runtime().spawn_blocking(move || bridge::attach_bg(|py| me.call(py, pending)));
        } else {
            bridge::attach_bg(|py| self.call(py, pending));
        }
    }

    fn call(&self, py: Python<'_>, pending: signoff::PendingRequest) {
        let home = self.home.as_ref().filter(|h| !h.is_closed());
        if self.is_async && home.is_none() {
            pending.fail(LOOP_CLOSED);
            return;
        }
        let handler = self.handler.bind(py);
        let result = PendingRequest::new_py(py, pending.clone()).and_then(|req| {
            let out = handler.call1((req,))?;
            Ok((self.is_async || (!out.is_none() && bridge::is_awaitable(&out)?)).then_some(out))
        });
        let awaitable = match result {
            Ok(None) => {
                pending.fail(NO_ANSWER);
                return;
            }
            Ok(Some(awaitable)) => awaitable,
            Err(e) => return failed(py, &pending, &e),
        };
        // Its awaitable runs as a Task on its home loop; the request fails when the Task ends
        // without an answer.
        let Some(home) = home else {
            let _ = awaitable.call_method0("close"); // never awaited: no warning
            pending.fail(if self.home.is_some() { LOOP_CLOSED } else { NO_LOOP });
            return;
        };
        let (awaitable, held, b) = (awaitable.unbind(), pending.clone(), home.clone());
        let started = home.run_or_post(Box::new(move |py| {
            let not_awaitable = || pyo3::exceptions::PyTypeError::new_err("the async handler returned no awaitable");
            let task = b.start_task(awaitable.bind(py)).and_then(|t| t.ok_or_else(not_awaitable));
            if let Err(e) = task.and_then(|t| bridge::when_done(&t, HandlerDone { pending: held.clone() })) {
                failed(py, &held, &e);
            }
        }));
        if !started {
            pending.fail(LOOP_CLOSED);
        }
    }
}

/// Logs the handler's exception and fails its request (a no-op when it answered first).
fn failed(py: Python<'_>, pending: &signoff::PendingRequest, e: &PyErr) {
    convert::log_exception(py, convert::LOG_ERROR, HANDLER_FAILED, e);
    pending.fail(&format!("the approval handler failed: {}", convert::describe_err(py, e)));
}

/// The done callback of an async handler's Task.
#[pyclass(module = "signoff._native", frozen)]
struct HandlerDone {
    pending: signoff::PendingRequest,
}

#[pymethods]
impl HandlerDone {
    fn __call__(&self, task: &Bound<'_, PyAny>) -> PyResult<()> {
        if task.call_method0("cancelled")?.is_truthy()? {
            self.pending.fail("the approval handler's task was cancelled");
        } else if let Err(e) = task.call_method0("result") {
            failed(task.py(), &self.pending, &e);
        } else {
            self.pending.fail(NO_ANSWER);
        }
        Ok(())
    }
}

static ISCOROUTINEFUNCTION: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// Attaches `handler` as an inline approver (`Gate::on_request_inline`).
pub fn start(
    py: Python<'_>,
    gate: &Gate,
    handler: Bound<'_, PyAny>,
    is_async: Option<bool>,
) -> PyResult<(Arc<HandlerSlot>, HandlerRegistration)> {
    if !handler.is_callable() {
        return Err(pyo3::exceptions::PyTypeError::new_err("the approval handler must be callable"));
    }
    let is_async = match is_async {
        Some(a) => a,
        None => ISCOROUTINEFUNCTION.import(py, "inspect", "iscoroutinefunction")?.call1((&handler,))?.is_truthy()?,
    };
    let home = LoopBridge::current(py).ok();
    if is_async && home.is_none() {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "an async approval handler runs on the event loop that registers it: call on_request() from a running \
             event loop (or pass a sync handler)",
        ));
    }
    let approver = Arc::new(Approver { handler: handler.unbind(), is_async, home });
    // Requests already pending are handed to it in this call.
    let guard = gate.on_request_inline(move |pending| approver.dispatch(pending));
    let slot = Arc::new(HandlerSlot { guard: Mutex::new(Some(guard)) });
    Ok((slot.clone(), HandlerRegistration { slot }))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PendingRequest>()?;
    m.add_class::<HandlerRegistration>()?;
    Ok(())
}
