//! Handler-style approvals (core `handler` module): a Python callable called for each request
//! through the core's `Gate::on_request`, answering through a `PendingRequest`. When the handler
//! raises or returns without answering, the core ends the request as cancelled
//! (`approval-failed`, the detail in the audit log and on stderr); this file only runs the
//! callable, and logs the exception with its traceback on the `signoff` logger.
//!
//! * A sync handler runs on a dedicated thread (one per registration), never on a tokio worker
//!   or the event loop: it may block (e.g. read the terminal). Requests queued meanwhile are
//!   handled in one GIL acquisition.
//! * An async handler (or a sync one returning an awaitable) runs as a Task on the event loop
//!   that was running when it was registered.

use crate::bridge::{self, LoopBridge};
use crate::convert::{self, to_py};
use crate::errors::IntoPyResult;
use crate::events::ConfirmationRequest;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use signoff::{Gate, HandlerGuard, RequestHandler};
use std::sync::{Arc, Mutex, mpsc};

/// Only that it raised: the handler may have answered first (then the call ran), and the core
/// reports what happened to the request.
const HANDLER_FAILED: &str = "signoff: the approval handler raised";

/// A request waiting for the handler, with the means to answer it (bound to what was shown).
#[pyclass(module = "signoff._native", frozen)]
pub struct PendingRequest {
    pub inner: signoff::PendingRequest,
}

#[pymethods]
impl PendingRequest {
    /// The request as published.
    #[getter]
    fn request(&self, py: Python<'_>) -> PyResult<Py<ConfirmationRequest>> {
        Py::new(py, ConfirmationRequest { inner: self.inner.request().clone() })
    }
    #[getter]
    fn id(&self) -> String {
        self.inner.request().id.to_string()
    }
    #[getter]
    fn tool(&self) -> &str {
        &self.inner.request().tool
    }
    #[getter]
    fn description(&self) -> &str {
        &self.inner.request().description
    }
    /// The arguments as requested (a fresh copy on each access).
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.request().arguments)
    }
    /// Pretty, escaped JSON of the arguments: show this.
    #[getter]
    fn display_arguments(&self) -> &str {
        &self.inner.request().display_arguments
    }
    #[getter]
    fn prompt(&self) -> &str {
        &self.inner.request().prompt
    }
    #[getter]
    fn arguments_digest(&self) -> &str {
        &self.inner.request().arguments_digest
    }
    #[getter]
    fn session_id(&self) -> &str {
        &self.inner.request().session_id
    }
    #[getter]
    fn tool_call_id(&self) -> Option<&str> {
        self.inner.request().tool_call_id.as_deref()
    }
    #[getter]
    fn editable(&self) -> bool {
        self.inner.request().editable
    }
    #[getter]
    fn reasons(&self) -> Vec<String> {
        self.inner.request().reasons.clone()
    }
    #[getter]
    fn timeout_ms(&self) -> u64 {
        self.inner.request().timeout_ms
    }
    #[getter]
    fn deadline_ms(&self) -> u64 {
        self.inner.request().deadline_ms
    }
    #[getter]
    fn created_at_ms(&self) -> u64 {
        self.inner.request().created_at_ms
    }
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.request().metadata)
    }
    /// True while nobody has answered and it has neither timed out nor been cancelled.
    #[getter]
    fn is_pending(&self) -> bool {
        self.inner.is_pending()
    }

    /// Approves, optionally with edited `arguments` (the tool must be editable) and for the
    /// whole session (`scope="session"`). Returns `"approved"`; raises a `SignoffError` subclass
    /// when rejected (e.g. `AlreadyResolvedError`, `EditsNotAllowedError`).
    #[pyo3(signature = (arguments=None, scope="once", responder=None))]
    fn approve(
        &self,
        arguments: Option<&Bound<'_, PyAny>>,
        scope: &str,
        responder: Option<String>,
    ) -> PyResult<&'static str> {
        let scope = convert::parse_enum::<signoff::Scope>(scope, "scope")?;
        let args = match arguments {
            Some(a) if !a.is_none() => Some(convert::from_py(a, "arguments")?),
            _ => None,
        };
        Ok(self.inner.approve_with(args, scope, responder).py_err()?.as_str())
    }

    /// Denies, with an optional reason the model will read. Returns `"denied"`.
    #[pyo3(signature = (reason=None, responder=None))]
    fn deny(&self, reason: Option<String>, responder: Option<String>) -> PyResult<&'static str> {
        Ok(self.inner.deny(reason, responder).py_err()?.as_str())
    }

    /// The request's stable JSON form, as a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &signoff::Event::ConfirmationRequest(self.inner.request().clone()).to_json())
    }

    /// The request's stable JSON form, as text.
    #[pyo3(signature = (*, indent=None))]
    fn to_json(&self, py: Python<'_>, indent: Option<usize>) -> PyResult<String> {
        convert::pretty_json(py, &signoff::Event::ConfirmationRequest(self.inner.request().clone()).to_json(), indent)
    }

    fn __repr__(&self) -> String {
        let r = self.inner.request();
        format!("PendingRequest(id={}, tool={:?}, session_id={:?})", r.id, r.tool, r.session_id)
    }
}

/// Keeps one handler registered until stopped (or the gate closes).
pub struct HandlerSlot {
    guard: Mutex<Option<HandlerGuard>>,
}

impl HandlerSlot {
    pub fn stop(&self) {
        if let Some(g) = self.guard.lock().unwrap_or_else(|e| e.into_inner()).take() {
            g.stop();
        }
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

enum Step {
    Done(Result<(), String>),
    /// The sync handler returned an awaitable: run it on the registration loop.
    Await(Py<PyAny>),
}

type Work = (signoff::PendingRequest, tokio::sync::oneshot::Sender<Step>);

/// The thread a sync handler runs on.
struct SyncRunner {
    tx: Mutex<mpsc::Sender<Work>>,
    bridge: Option<Arc<LoopBridge>>,
}

impl SyncRunner {
    fn start(handler: Py<PyAny>, bridge: Option<Arc<LoopBridge>>) -> PyResult<SyncRunner> {
        let (tx, rx) = mpsc::channel::<Work>();
        std::thread::Builder::new()
            .name("signoff-handler".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while batch.len() < 1024 {
                        match rx.try_recv() {
                            Ok(w) => batch.push(w),
                            Err(_) => break,
                        }
                    }
                    // Not attached (interpreter finalizing): the batch is dropped, its senders
                    // close, and the core cancels each request (`approval-failed`).
                    // The answers wake the waiting loops once the GIL is released.
                    let attached = bridge::with_deferred_wakes(|| {
                        bridge::attach_bg(|py| {
                            for (pending, done) in batch.drain(..) {
                                let _ = done.send(call_sync(py, &handler, pending));
                            }
                        })
                    });
                    if attached.is_none() {
                        break;
                    }
                }
                let _ = bridge::attach_bg(move |_py| drop(handler));
            })
            .map_err(|e| PyRuntimeError::new_err(format!("signoff: cannot start the handler thread: {e}")))?;
        Ok(SyncRunner { tx: Mutex::new(tx), bridge })
    }

    async fn call(&self, pending: signoff::PendingRequest) -> Result<(), String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self.tx.lock().unwrap_or_else(|e| e.into_inner()).send((pending, tx));
        if sent.is_err() {
            return Err("the approval handler thread has stopped".into());
        }
        match rx.await {
            Ok(Step::Done(r)) => r,
            Ok(Step::Await(aw)) => match &self.bridge {
                Some(b) => {
                    bridge::call_on_loop(
                        b.clone(),
                        move |py| Ok(aw.into_bound(py)),
                        bridge::finish_unit(HANDLER_FAILED),
                    )
                    .await
                }
                None => Err("the approval handler returned an awaitable, but no event loop was running when it \
                             was registered"
                    .into()),
            },
            Err(_) => Err("the approval handler thread stopped before the handler returned".into()),
        }
    }
}

fn call_sync(py: Python<'_>, handler: &Py<PyAny>, pending: signoff::PendingRequest) -> Step {
    let req = match Py::new(py, PendingRequest { inner: pending }) {
        Ok(r) => r,
        Err(e) => return Step::Done(Err(convert::describe_err(py, &e))),
    };
    match handler.bind(py).call1((req,)) {
        Ok(v) => match bridge::is_awaitable(&v) {
            Ok(true) => Step::Await(v.unbind()),
            _ => Step::Done(Ok(())),
        },
        Err(e) => {
            convert::log_exception(py, convert::LOG_ERROR, HANDLER_FAILED, &e);
            Step::Done(Err(convert::describe_err(py, &e)))
        }
    }
}

static ISCOROUTINEFUNCTION: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// Registers `handler` with the core's `Gate::on_request`.
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
    let handler_fn: RequestHandler = if is_async {
        let bridge = LoopBridge::current(py).map_err(|_| {
            PyRuntimeError::new_err(
                "an async approval handler runs on the event loop that registers it: call on_request() from a \
                 running event loop (or pass a sync handler)",
            )
        })?;
        let handler = Arc::new(handler.unbind());
        Arc::new(move |pending: signoff::PendingRequest| {
            let bridge = bridge.clone();
            let handler = handler.clone();
            Box::pin(async move {
                bridge::call_on_loop(
                    bridge,
                    move |py| {
                        let req = Py::new(py, PendingRequest { inner: pending })?;
                        handler.bind(py).call1((req,))
                    },
                    bridge::finish_unit(HANDLER_FAILED),
                )
                .await
            })
        })
    } else {
        let runner = Arc::new(SyncRunner::start(handler.unbind(), LoopBridge::current(py).ok())?);
        Arc::new(move |pending: signoff::PendingRequest| {
            let runner = runner.clone();
            Box::pin(async move { runner.call(pending).await })
        })
    };
    let guard = {
        let _rt = bridge::runtime().enter();
        gate.on_request(handler_fn)
    };
    let slot = Arc::new(HandlerSlot { guard: Mutex::new(Some(guard)) });
    Ok((slot.clone(), HandlerRegistration { slot }))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PendingRequest>()?;
    m.add_class::<HandlerRegistration>()?;
    Ok(())
}
