//! The bus events (core `event` module) as typed, immutable Python objects with a JSON round
//! trip, the `Lagged` marker, and the event stream over a core `Subscription`.

use crate::bridge;
use crate::convert::{self, to_py};
use crate::errors;
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use serde_json::Value;
use signoff::{Event, Subscription, SubscriptionCloser};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Parses the stable JSON form of an event (a dict or a JSON string) into the core type.
fn parse_event(obj: &Bound<'_, PyAny>) -> PyResult<Event> {
    let v = convert::json_arg(obj, "event")?;
    Event::from_json(v).map_err(errors::to_py)
}

/// The Python object for a core event.
pub fn event_to_py(py: Python<'_>, e: Event) -> PyResult<Py<PyAny>> {
    Ok(match e {
        Event::ConfirmationRequest(r) => Py::new(py, ConfirmationRequest { inner: r })?.into_any(),
        Event::ConfirmationResponse(r) => Py::new(py, ConfirmationResponse { inner: r })?.into_any(),
        Event::ConfirmationTimeout(r) => Py::new(py, ConfirmationTimeout { inner: r })?.into_any(),
        Event::ConfirmationResolved(r) => Py::new(py, ConfirmationResolved { inner: r })?.into_any(),
    })
}

/// Methods shared by the four event classes: `type`, `request_id`, `to_dict`, `to_json`,
/// `from_json`, equality and repr.
macro_rules! event_class {
    ($cls:ident, $variant:ident, $tag:literal, { $($extra:tt)* }) => {
        impl $cls {
            fn event(&self) -> Event {
                Event::$variant(self.inner.clone())
            }
        }

        #[pymethods]
        impl $cls {
            /// The event's `type` tag.
            #[getter(r#type)]
            fn type_(&self) -> &'static str {
                $tag
            }

            /// The stable JSON form, as a dict (with its `type` tag).
            fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                to_py(py, &self.event().to_json())
            }

            /// The stable JSON form, as text.
            #[pyo3(signature = (*, indent=None))]
            fn to_json(&self, py: Python<'_>, indent: Option<usize>) -> PyResult<String> {
                convert::pretty_json(py, &self.event().to_json(), indent)
            }

            /// Parses the stable JSON form (a dict or a JSON string). Raises `MalformedError`
            /// when it is not a valid event of this type.
            #[staticmethod]
            fn from_json(data: &Bound<'_, PyAny>) -> PyResult<Self> {
                match parse_event(data)? {
                    Event::$variant(inner) => Ok($cls { inner }),
                    other => Err(errors::malformed(format!(
                        "expected a {:?} event, got {:?}",
                        $tag,
                        other.kind()
                    ))),
                }
            }

            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                match other.cast::<$cls>() {
                    Ok(o) => *self.inner == *o.get().inner,
                    Err(_) => false,
                }
            }

            fn __repr__(&self) -> String {
                format!("{}({})", stringify!($cls), convert::to_json_text(&*self.inner))
            }

            $($extra)*
        }
    };
}

/// A call waiting for a person: everything a UI shows, and what a response must echo.
#[pyclass(module = "signoff._native", frozen, subclass)]
pub struct ConfirmationRequest {
    pub inner: Arc<signoff::ConfirmationRequest>,
}
event_class!(ConfirmationRequest, ConfirmationRequest, "confirmation-request", {
    // @generated begin request-fields (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
    /// The request's id (a UUID); a response carries it back.
    #[getter]
    fn id(&self) -> String {
        self.inner.id.to_string()
    }
    /// The tool's name.
    #[getter]
    fn tool(&self) -> &str {
        &self.inner.tool
    }
    /// The tool's description, escaped for display.
    #[getter]
    fn description(&self) -> &str {
        &self.inner.description
    }
    /// The arguments that run if the request is approved unchanged.
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::json_to_py(py, self.inner.arguments.json())
    }
    /// The rendered prompt, escaped for display.
    #[getter]
    fn prompt(&self) -> &str {
        &self.inner.prompt
    }
    /// `sha256:<hex>` of the canonical JSON of the arguments; a response may echo it.
    #[getter]
    fn arguments_digest(&self) -> String {
        self.inner.arguments_digest.to_string()
    }
    /// The agent session the call belongs to.
    #[getter]
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    /// The model's id for this tool call, if it gave one.
    #[getter]
    fn tool_call_id(&self) -> Option<&str> {
        self.inner.tool_call_id.as_deref()
    }
    /// Whether the person may edit the arguments.
    #[getter]
    fn editable(&self) -> bool {
        self.inner.editable
    }
    /// Why approval is needed.
    #[getter]
    fn reasons(&self) -> Vec<String> {
        self.inner.reasons.to_vec()
    }
    /// How long the request waits, in milliseconds.
    #[getter]
    fn timeout_ms(&self) -> u64 {
        self.inner.timeout_ms
    }
    /// When it stops waiting, in Unix epoch milliseconds.
    #[getter]
    fn deadline_ms(&self) -> u64 {
        self.inner.deadline_ms
    }
    /// When it was made, in Unix epoch milliseconds.
    #[getter]
    fn created_at_ms(&self) -> u64 {
        self.inner.created_at_ms
    }
    /// Free metadata from the caller (absent when none was given).
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.metadata)
    }
    // @generated end request-fields
    /// Pretty JSON of the arguments with control, bidi and zero-width characters escaped: show
    /// this, not a rendering of your own.
    #[getter]
    fn display_arguments(&self) -> String {
        self.inner.display_arguments()
    }
    /// The request id this event is about.
    #[getter]
    fn request_id(&self) -> String {
        self.inner.id.to_string()
    }
});

/// A person's answer to a request, as published on the bus.
#[pyclass(module = "signoff._native", frozen)]
pub struct ConfirmationResponse {
    pub inner: Arc<signoff::ConfirmationResponse>,
}
event_class!(ConfirmationResponse, ConfirmationResponse, "confirmation-response", {
    /// The request this event is about (its id, as `id`).
    #[getter]
    fn request_id(&self) -> String {
        self.inner.id.to_string()
    }
    // @generated begin response-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
    /// The request's id.
    #[getter]
    fn id(&self) -> String {
        self.inner.id.to_string()
    }
    /// Approve or deny.
    #[getter]
    fn decision(&self) -> String {
        convert::enum_str(&self.inner.decision)
    }
    /// Once (default) or for the rest of the session.
    #[getter]
    fn scope(&self) -> String {
        convert::enum_str(&self.inner.scope)
    }
    /// Edited arguments (approve only; the tool must be editable). Validated against the
    /// tool's schema before they can run. `null` is no edit, as when absent.
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.arguments.as_ref().map(|a| to_py(py, a)).transpose()
    }
    /// The person's reason, passed to the model on a denial.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.inner.reason.as_deref()
    }
    /// Who answered.
    #[getter]
    fn responder(&self) -> Option<&str> {
        self.inner.responder.as_deref()
    }
    /// The tool the person saw; checked against the request when present.
    #[getter]
    fn tool(&self) -> Option<&str> {
        self.inner.tool.as_deref()
    }
    /// The digest of the arguments the person saw; checked against the request when present.
    #[getter]
    fn arguments_digest(&self) -> Option<&str> {
        self.inner.arguments_digest.as_deref()
    }
    /// The request's session; checked against the request when present.
    #[getter]
    fn session_id(&self) -> Option<&str> {
        self.inner.session_id.as_deref()
    }
    /// When the person answered, in Unix epoch milliseconds; filled in by the gate when absent.
    #[getter]
    fn at_ms(&self) -> Option<u64> {
        self.inner.at_ms
    }
    // @generated end response-fields
});

/// A request's deadline passed with no answer (never reported as a person's denial).
#[pyclass(module = "signoff._native", frozen)]
pub struct ConfirmationTimeout {
    pub inner: Arc<signoff::ConfirmationTimeout>,
}
event_class!(ConfirmationTimeout, ConfirmationTimeout, "confirmation-timeout", {
    /// The request this event is about (its id, as `id`).
    #[getter]
    fn request_id(&self) -> String {
        self.inner.id.to_string()
    }
    // @generated begin timeout-fields (core/tests/sourcegen.rs, from the core's `ConfirmationTimeout`)
    /// The request's id.
    #[getter]
    fn id(&self) -> String {
        self.inner.id.to_string()
    }
    /// The request's tool.
    #[getter]
    fn tool(&self) -> &str {
        &self.inner.tool
    }
    /// The request's session.
    #[getter]
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    /// The request's deadline, in Unix epoch milliseconds.
    #[getter]
    fn deadline_ms(&self) -> u64 {
        self.inner.deadline_ms
    }
    /// When the timeout was detected, in Unix epoch milliseconds.
    #[getter]
    fn at_ms(&self) -> u64 {
        self.inner.at_ms
    }
    // @generated end timeout-fields
});

/// The final event of every request: how it ended.
#[pyclass(module = "signoff._native", frozen)]
pub struct ConfirmationResolved {
    pub inner: Arc<signoff::ConfirmationResolved>,
}
event_class!(ConfirmationResolved, ConfirmationResolved, "confirmation-resolved", {
    /// The request this event is about (its id, as `id`).
    #[getter]
    fn request_id(&self) -> String {
        self.inner.id.to_string()
    }
    // @generated begin resolved-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResolved`)
    /// The request's id.
    #[getter]
    fn id(&self) -> String {
        self.inner.id.to_string()
    }
    /// The request's tool.
    #[getter]
    fn tool(&self) -> &str {
        &self.inner.tool
    }
    /// The request's session.
    #[getter]
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    /// How the request ended.
    #[getter]
    fn outcome(&self) -> &'static str {
        self.inner.outcome.as_str()
    }
    /// Why it was cancelled (outcome `cancelled` only).
    #[getter]
    fn cancel_reason(&self) -> Option<&'static str> {
        self.inner.cancel_reason.map(|c| c.as_str())
    }
    /// Who decided (approved or denied only).
    #[getter]
    fn responder(&self) -> Option<&str> {
        self.inner.responder.as_deref()
    }
    /// The reason given with a denial.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.inner.reason.as_deref()
    }
    /// `session` when the approval also granted later calls of the tool in the session, else
    /// `once`.
    #[getter]
    fn scope(&self) -> String {
        convert::enum_str(&self.inner.scope)
    }
    /// The person changed the arguments.
    #[getter]
    fn edited(&self) -> bool {
        self.inner.edited
    }
    /// When the request resolved, in Unix epoch milliseconds.
    #[getter]
    fn at_ms(&self) -> u64 {
        self.inner.at_ms
    }
    // @generated end resolved-fields
});

/// Parses any event's stable JSON form (dict or JSON string) into its typed class.
#[pyfunction]
fn parse_event_json(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    event_to_py(py, parse_event(data)?)
}

/// The stream fell behind and missed `missed` events. Re-sync (de-duplicating by id) from
/// `pending`, the oldest pending requests (at most 1,000), and when `more` is set, from
/// `gate.pending_page(after=more)`. Yielded by the event stream in place of the missed events;
/// never dropped silently.
#[pyclass(module = "signoff._native", frozen)]
pub struct Lagged {
    missed: u64,
    pending: Vec<Arc<signoff::ConfirmationRequest>>,
    more: Option<signoff::PendingCursor>,
}

#[pymethods]
impl Lagged {
    #[getter(r#type)]
    fn type_(&self) -> &'static str {
        "lagged"
    }
    /// How many events were missed.
    #[getter]
    fn missed(&self) -> u64 {
        self.missed
    }
    /// The oldest requests pending when the lag was noticed (at most 1,000), oldest first.
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<Vec<Py<ConfirmationRequest>>> {
        self.pending.iter().map(|r| Py::new(py, ConfirmationRequest { inner: r.clone() })).collect()
    }
    /// When more requests are pending than `pending` holds: the cursor to read the rest with
    /// `gate.pending_page(after=more)`; otherwise `None`.
    #[getter]
    fn more(&self) -> Option<String> {
        self.more.map(|c| c.to_string())
    }
    /// `{"type": "lagged", "missed": n, "pending": [request dicts], "more": cursor-or-None}`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.to_value())
    }
    #[pyo3(signature = (*, indent=None))]
    fn to_json(&self, py: Python<'_>, indent: Option<usize>) -> PyResult<String> {
        convert::pretty_json(py, &self.to_value(), indent)
    }
    fn __repr__(&self) -> String {
        format!("Lagged(missed={}, pending={})", self.missed, self.pending.len())
    }
}

impl Lagged {
    fn to_value(&self) -> Value {
        serde_json::json!({
            "type": "lagged",
            "missed": self.missed,
            "pending": self.pending.iter().map(|r| Event::ConfirmationRequest(r.clone()).to_json()).collect::<Vec<_>>(),
            "more": self.more.map(|c| c.to_string()),
        })
    }
}

type Item = Result<Event, signoff::Lagged>;

struct StreamState {
    /// One reader at a time; the core's closer wakes it (`recv` returns `None`) from anywhere.
    sub: tokio::sync::Mutex<Subscription>,
    closer: SubscriptionCloser,
    /// Items received for a waiter that was cancelled meanwhile: handed out first.
    stash: Mutex<VecDeque<Item>>,
    closed: AtomicBool,
}

impl StreamState {
    async fn next(self: Arc<Self>) -> Option<Item> {
        let mut sub = self.sub.lock().await;
        if let Some(i) = self.stash.lock().unwrap_or_else(|e| e.into_inner()).pop_front() {
            return Some(i);
        }
        let item = sub.recv().await;
        if item.is_none() {
            self.closed.store(true, Ordering::Release);
        }
        item
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.closer.close();
    }
}

fn item_to_py(py: Python<'_>, item: Item) -> PyResult<Py<PyAny>> {
    match item {
        Ok(e) => event_to_py(py, e),
        Err(l) => Ok(Py::new(py, Lagged { missed: l.missed, pending: l.pending, more: l.more })?.into_any()),
    }
}

/// A subscription to the gate's event bus, subscribed from the moment it was created.
///
/// `async for event in stream` yields `ConfirmationRequest`, `ConfirmationResponse`,
/// `ConfirmationTimeout`, `ConfirmationResolved` and, if it fell behind, `Lagged`. `close()`
/// (or leaving an `async with` / `with` block, or dropping the last reference) unsubscribes.
/// Plain `for` iterates blocking, for scripts.
#[pyclass(module = "signoff._native", frozen)]
pub struct EventStream {
    state: Arc<StreamState>,
    /// Its gate's store is shared: a lag's snapshot (and a close that cancels what the last
    /// approver leaves) reads or writes the database, so polls run without the GIL.
    detached: bool,
}

impl EventStream {
    pub fn new(sub: Subscription, detached: bool) -> Self {
        let closer = sub.closer();
        EventStream {
            detached,
            state: Arc::new(StreamState {
                sub: tokio::sync::Mutex::new(sub),
                closer,
                stash: Mutex::new(VecDeque::new()),
                closed: AtomicBool::new(false),
            }),
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.state.close();
    }
}

#[pymethods]
impl EventStream {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let state = self.state.clone();
        let stash = self.state.clone();
        let deliver = move |py: Python<'_>, item: Option<_>, wanted: bool| match item {
            None => Some(Err(PyStopAsyncIteration::new_err(()))),
            Some(item) if !wanted => {
                // Nobody took it (the awaiting task was cancelled): keep it for the next call.
                stash.stash.lock().unwrap_or_else(|e| e.into_inner()).push_front(item);
                None
            }
            Some(item) => Some(item_to_py(py, item)),
        };
        bridge::spawn_with(py, state.next(), deliver, self.detached)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match bridge::block_on(py, "iterating events", self.state.clone().next())? {
            Some(item) => item_to_py(py, item),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    /// Waits (blocking, without the GIL) for the next item. Returns `None` when the stream is
    /// closed; raises `TimeoutError` when `timeout` seconds pass first.
    #[pyo3(signature = (timeout=None))]
    fn next_blocking(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        match bridge::block_on_timeout(py, "next_blocking()", self.state.clone().next(), timeout)? {
            Some(Some(item)) => Ok(Some(item_to_py(py, item)?)),
            Some(None) => Ok(None),
            None => Err(pyo3::exceptions::PyTimeoutError::new_err("no event arrived in time")),
        }
    }

    /// Unsubscribes. Idempotent. A pending `__anext__` ends with `StopAsyncIteration`.
    fn close(&self, py: Python<'_>) {
        if self.detached {
            py.detach(|| self.state.close());
        } else {
            self.state.close();
        }
    }

    /// True once closed (or the gate is gone).
    #[getter]
    fn closed(&self) -> bool {
        self.state.closed.load(Ordering::Acquire)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let fut = bridge::LoopBridge::current(py)?.create_future(py)?;
        fut.call_method1("set_result", (slf,))?;
        Ok(fut)
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(&self, py: Python<'py>, _args: &Bound<'py, pyo3::types::PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        self.close(py);
        let fut = bridge::LoopBridge::current(py)?.create_future(py)?;
        fut.call_method1("set_result", (false,))?;
        Ok(fut)
    }

    /// Same as `close()`, as a coroutine-compatible awaitable (for `contextlib.aclosing`).
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.close(py);
        let fut = bridge::LoopBridge::current(py)?.create_future(py)?;
        fut.call_method1("set_result", (py.None(),))?;
        Ok(fut)
    }
}

/// A list of pending requests as Python objects.
pub fn requests_to_py(py: Python<'_>, v: Vec<Arc<signoff::ConfirmationRequest>>) -> PyResult<Bound<'_, PyList>> {
    let items: PyResult<Vec<Py<ConfirmationRequest>>> =
        v.into_iter().map(|r| Py::new(py, ConfirmationRequest { inner: r })).collect();
    PyList::new(py, items?)
}

/// Accepts a `ConfirmationRequest` (a `PendingRequest` is one) or a request id string.
pub enum RequestRef {
    Request(Arc<signoff::ConfirmationRequest>),
    Id(uuid::Uuid),
}

pub fn request_ref(obj: &Bound<'_, PyAny>) -> PyResult<RequestRef> {
    if let Ok(r) = obj.cast::<ConfirmationRequest>() {
        return Ok(RequestRef::Request(r.get().inner.clone()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(RequestRef::Id(parse_uuid(&s.to_cow()?)?));
    }
    Err(PyTypeError::new_err("expected a ConfirmationRequest, a PendingRequest or a request id (str)"))
}

/// A request id from Python: one that is not a UUID names no request (`UnknownRequestError`).
pub fn parse_uuid(s: &str) -> PyResult<uuid::Uuid> {
    signoff::parse_request_id(s).map_err(errors::to_py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ConfirmationRequest>()?;
    m.add_class::<ConfirmationResponse>()?;
    m.add_class::<ConfirmationTimeout>()?;
    m.add_class::<ConfirmationResolved>()?;
    m.add_class::<Lagged>()?;
    m.add_class::<EventStream>()?;
    m.add_function(wrap_pyfunction!(parse_event_json, m)?)?;
    Ok(())
}
