//! Running tools (core `executor` module and `tool::ContextExecutor`): Python callables wrapped
//! into the core `ContextExecutor` type, `CallContext` and `ToolResult`.
//!
//! * A sync executor runs on the runtime's blocking pool (like `asyncio.to_thread`), holding the
//!   GIL only while Python runs.
//! * An async executor runs as a Task on the event loop of the caller of `execute()`, created
//!   in the poll that started it. From the blocking API (no loop) it runs under `asyncio.run` on
//!   a blocking-pool thread.
//! * Either way a started tool runs to the end: when the caller stops waiting (its task was
//!   cancelled, Ctrl-C), the core hands the run to the runtime and records its result.
//!
//! A tool is the user's function, called here with the approved arguments (a dict for object
//! schemas) and the call's [`CallContext`] (the core's `CallContext`: tool, call id, request,
//! session, edited, whether the gate has closed) passed to the parameter that asks for it, with
//! `signoff.current_call()` set: in an async tool's Task, or in a copy of the worker thread's
//! context for a sync one. A tool's return value must be JSON-compatible (`convert::from_py`: NaN, a cycle, a
//! set... make the call `failed`, never `null`). An exception becomes the core's `failed` status.

use crate::bridge::{self, LoopBridge};
use crate::convert::{self, to_py};
use crate::gate::Decision;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::Value;
use signoff::{ContextExecutor, ExecResult};
use std::sync::Arc;

const TOOL_FAILED: &str = "signoff: a tool executor raised";

fn finish_value() -> bridge::Finish<Value> {
    Box::new(output_value)
}

fn output_value(py: Python<'_>, r: PyResult<Bound<'_, PyAny>>) -> Result<Value, String> {
    match r {
        Ok(v) => convert::from_py(&v, "the tool's return value").map_err(|e| convert::describe_err(py, &e)),
        Err(e) => {
            convert::log_exception(py, convert::LOG_WARNING, TOOL_FAILED, &e);
            Err(convert::describe_err(py, &e))
        }
    }
}

enum Step {
    Done(ExecResult),
    /// The tool returned an awaitable: awaited on the loop, with `current_call()` set.
    Await(Py<PyAny>, Option<Py<PyAny>>),
}

/// Runs an awaitable without a caller loop: `asyncio.run` on a blocking-pool thread.
async fn run_detached(
    make: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
) -> ExecResult {
    let joined = tokio::task::spawn_blocking(move || {
        bridge::attach_bg(|py| {
            let r = make(py).and_then(|aw| bridge::asyncio_run(py, &aw));
            output_value(py, r)
        })
        .unwrap_or_else(|| Err("the Python interpreter is shutting down".into()))
    })
    .await;
    joined.unwrap_or_else(|_| Err("the tool panicked".into()))
}

/// The call's context, as the tool sees it (`signoff.CallContext`): read-only, from the core.
#[pyclass(module = "signoff._native", frozen)]
pub struct CallContext {
    inner: signoff::CallContext,
}

#[pymethods]
impl CallContext {
    /// The tool's name.
    #[getter]
    fn tool(&self) -> &str {
        &self.inner.tool
    }
    /// The model's id for the call.
    #[getter]
    fn call_id(&self) -> Option<&str> {
        self.inner.call_id.as_deref()
    }
    /// The confirmation request a person answered; `None` when the call was not gated.
    #[getter]
    fn request_id(&self) -> Option<String> {
        self.inner.request_id.map(|u| u.to_string())
    }
    /// The agent session.
    #[getter]
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    /// A person changed the arguments before approving.
    #[getter]
    fn edited(&self) -> bool {
        self.inner.edited
    }
    /// True once the gate that runs this call has closed: a long tool may stop early and say so
    /// (signoff never interrupts it).
    #[getter]
    fn gate_closed(&self) -> bool {
        self.inner.gate_closed()
    }
    fn __repr__(&self) -> String {
        let c = &self.inner;
        format!(
            "CallContext(tool={:?}, call_id={:?}, request_id={:?}, session_id={:?}, edited={})",
            c.tool,
            c.call_id,
            c.request_id.map(|u| u.to_string()),
            c.session_id,
            if c.edited { "True" } else { "False" }
        )
    }
}

/// A tool function, called as `f(arguments)`, with the call's context as the keyword argument
/// `param` when it asks for it, or as `f(**arguments)` (`Gate.tool`).
struct PyTool {
    func: Py<PyAny>,
    param: Option<Py<PyString>>,
    keywords: bool,
}

impl PyTool {
    /// Calls the tool (through `via.run(...)`, a `contextvars.Context`, when given) and returns
    /// what it returned with the context object, which `signoff.current_call()` is set to while
    /// the tool runs. What Python's `f(**arguments, **{param: context})` does, with its
    /// `TypeError` for a duplicate keyword.
    fn call<'py>(
        &self,
        py: Python<'py>,
        args: &Value,
        context: signoff::CallContext,
        via: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<bridge::Made<'py>> {
        let func = self.func.bind(py);
        let args = to_py(py, args)?;
        let context = Bound::new(py, CallContext { inner: context })?.into_any();
        let param = self.param.as_ref().map(|p| p.bind(py));
        let (positional, kw) = match args.cast::<PyDict>() {
            // A dict converted for this call only: the context can join it as a keyword.
            Ok(kw) if self.keywords => {
                if let Some(p) = param {
                    if kw.contains(p)? {
                        let name = func.getattr(pyo3::intern!(py, "__qualname__")).map(|n| n.to_string());
                        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                            "{}() got multiple values for keyword argument '{p}'",
                            name.as_deref().unwrap_or("the tool")
                        )));
                    }
                    kw.set_item(p, &context)?;
                }
                (None, Some(kw.clone()))
            }
            _ => {
                let kw = param.map(|p| -> PyResult<_> {
                    let kw = PyDict::new(py);
                    kw.set_item(p, &context)?;
                    Ok(kw)
                });
                (Some(args), kw.transpose()?)
            }
        };
        if let Some(ctx) = via {
            let var = CURRENT_CALL.import(py, "signoff.context", "_CURRENT")?;
            ctx.call_method1(pyo3::intern!(py, "run"), (var.getattr(pyo3::intern!(py, "set"))?, &context))?;
        }
        let called = match (via, positional) {
            (None, Some(a)) => func.call((a,), kw.as_ref())?,
            (None, None) => func.call((), kw.as_ref())?,
            (Some(ctx), Some(a)) => ctx.call_method(pyo3::intern!(py, "run"), (func, a), kw.as_ref())?,
            (Some(ctx), None) => ctx.call_method(pyo3::intern!(py, "run"), (func,), kw.as_ref())?,
        };
        Ok((called, Some(context)))
    }
}

static WITH_CURRENT: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
static CURRENT_CALL: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// Runs an async tool as a Task on the caller's loop (its first step at once), or, from the
/// blocking API, under `asyncio.run` on a blocking-pool thread.
async fn run_async(
    tool: Arc<PyTool>,
    caller: Option<Arc<LoopBridge>>,
    args: Value,
    context: signoff::CallContext,
) -> ExecResult {
    match caller {
        Some(b) => bridge::call_on_loop(b, move |py| tool.call(py, &args, context, None), finish_value()).await,
        None => {
            run_detached(move |py| {
                let (aw, current) = tool.call(py, &args, context, None)?;
                WITH_CURRENT.import(py, "signoff._tasks", "with_current")?.call1((aw, current))
            })
            .await
        }
    }
}

static COPY_CONTEXT: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// Runs a sync tool on the blocking pool, in a copy of that thread's context where
/// `signoff.current_call()` is set (nothing set there outlives the call); an awaitable it returns
/// is awaited as an async tool's is.
async fn run_sync(
    tool: Arc<PyTool>,
    caller: Option<Arc<LoopBridge>>,
    args: Value,
    context: signoff::CallContext,
) -> ExecResult {
    let joined = tokio::task::spawn_blocking(move || {
        bridge::attach_bg(|py| {
            let r = COPY_CONTEXT.import(py, "contextvars", "copy_context").and_then(|copy| {
                let ctx = copy.call0()?;
                let (out, current) = tool.call(py, &args, context, Some(&ctx))?;
                Ok((out, current.map(Bound::unbind)))
            });
            match r {
                Ok((v, current)) if bridge::is_awaitable(&v).unwrap_or(false) => Step::Await(v.unbind(), current),
                r => Step::Done(output_value(py, r.map(|(v, _)| v))),
            }
        })
        .unwrap_or_else(|| Step::Done(Err("the Python interpreter is shutting down".into())))
    })
    .await;
    match joined {
        Ok(Step::Done(r)) => r,
        Ok(Step::Await(aw, current)) => match caller {
            Some(b) => {
                let make = bridge::made(move |py| Ok((aw.into_bound(py), current.map(|c| c.into_bound(py)))));
                bridge::call_on_loop(b, make, finish_value()).await
            }
            None => {
                run_detached(move |py| {
                    let current = current.map(|c| c.into_bound(py));
                    WITH_CURRENT.import(py, "signoff._tasks", "with_current")?.call1((aw.into_bound(py), current))
                })
                .await
            }
        },
        Err(_) => Err("the tool panicked".into()),
    }
}

static ISCOROUTINEFUNCTION: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// Wraps a Python tool function into the core `ContextExecutor` type: called as `f(arguments)`,
/// with the context as the keyword argument `context_param` when given, or as `f(**arguments)`
/// with `keywords` (when the arguments are a dict), with `signoff.current_call()` set. An async
/// one (`is_async`, or `None` and `inspect.iscoroutinefunction`) runs as a Task on the caller's
/// loop, a sync one on the blocking pool.
pub fn python_executor(
    f: Bound<'_, PyAny>,
    is_async: Option<bool>,
    context_param: Option<Bound<'_, PyString>>,
    keywords: bool,
) -> PyResult<ContextExecutor> {
    let py = f.py();
    if !f.is_callable() {
        return Err(pyo3::exceptions::PyTypeError::new_err("the executor must be callable"));
    }
    let is_async = match is_async {
        Some(a) => a,
        None => ISCOROUTINEFUNCTION.import(py, "inspect", "iscoroutinefunction")?.call1((&f,))?.is_truthy()?,
    };
    let tool = Arc::new(PyTool { func: f.unbind(), param: context_param.map(Bound::unbind), keywords });
    // Called while the core future is polled inside `bridge::spawn`'s scope: the caller's loop.
    let caller = || bridge::CALLER.try_with(|b| b.clone()).ok();
    Ok(Arc::new(move |args: Value, context: signoff::CallContext| match is_async {
        true => Box::pin(run_async(tool.clone(), caller(), args, context)),
        false => Box::pin(run_sync(tool.clone(), caller(), args, context)),
    }))
}

/// The result of one call, in the model's terms: `content` is the text for the tool message.
#[pyclass(module = "signoff._native", frozen)]
pub struct ToolResult {
    pub inner: signoff::ToolResult,
}

impl ToolResult {
    fn value(&self) -> Value {
        serde_json::to_value(&self.inner).unwrap_or_default()
    }
}

#[pymethods]
impl ToolResult {
    /// The model's id for the call.
    #[getter]
    fn call_id(&self) -> Option<&str> {
        self.inner.call_id.as_deref()
    }
    #[getter]
    fn tool(&self) -> &str {
        &self.inner.tool
    }
    /// `"executed"`, `"failed"`, `"denied"`, `"timed-out"`, `"cancelled"` or `"rejected"`.
    #[getter]
    fn status(&self) -> String {
        convert::enum_str(&self.inner.status)
    }
    /// The tool's output, when it ran and succeeded.
    #[getter]
    fn output<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.output.as_ref().map(|v| to_py(py, v)).transpose()
    }
    /// The tool's error, or why the call was refused.
    #[getter]
    fn error(&self) -> Option<&str> {
        self.inner.error.as_deref()
    }
    /// The error kind when rejected (e.g. `"unknown_tool"`).
    #[getter]
    fn error_kind(&self) -> Option<&'static str> {
        self.inner.error_kind.map(|k| k.as_str())
    }
    /// The arguments the tool ran with.
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.arguments.as_ref().map(|v| to_py(py, v)).transpose()
    }
    #[getter]
    fn edited(&self) -> bool {
        self.inner.edited
    }
    #[getter]
    fn request_id(&self) -> Option<String> {
        self.inner.request_id.map(|u| u.to_string())
    }
    /// The gate's decision, when one was made.
    #[getter]
    fn decision(&self, py: Python<'_>) -> PyResult<Option<Py<Decision>>> {
        self.inner.decision.clone().map(|d| Py::new(py, Decision { inner: d })).transpose()
    }
    /// The text to hand back to the model.
    #[getter]
    fn content(&self) -> &str {
        &self.inner.content
    }
    /// True unless the tool ran successfully (Anthropic's `is_error`).
    #[getter]
    fn is_error(&self) -> bool {
        self.inner.is_error()
    }
    /// True when the tool ran (successfully or not).
    #[getter]
    fn ran(&self) -> bool {
        self.inner.status.ran()
    }
    /// An OpenAI Chat Completions tool message:
    /// `{"role": "tool", "tool_call_id": ..., "content": ...}`.
    fn to_openai<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("role", "tool")?;
        d.set_item("tool_call_id", self.inner.call_id.as_deref())?;
        d.set_item("content", &self.inner.content)?;
        Ok(d)
    }
    /// An OpenAI Responses API input item (the answer to a `function_call` item):
    /// `{"type": "function_call_output", "call_id": ..., "output": ...}`.
    fn to_openai_responses<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("type", "function_call_output")?;
        d.set_item("call_id", self.inner.call_id.as_deref())?;
        d.set_item("output", &self.inner.content)?;
        Ok(d)
    }
    /// An Anthropic Messages `tool_result` content block:
    /// `{"type": "tool_result", "tool_use_id": ..., "content": ..., "is_error": ...}`.
    fn to_anthropic<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("type", "tool_result")?;
        d.set_item("tool_use_id", self.inner.call_id.as_deref())?;
        d.set_item("content", &self.inner.content)?;
        d.set_item("is_error", self.inner.is_error())?;
        Ok(d)
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
        Ok(ToolResult { inner: convert::from_py_as(data, "tool result")? })
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<ToolResult>().is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __repr__(&self) -> String {
        format!(
            "ToolResult(tool={:?}, call_id={:?}, status={:?})",
            self.inner.tool,
            self.inner.call_id,
            convert::enum_str(&self.inner.status)
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ToolResult>()?;
    m.add_class::<CallContext>()?;
    Ok(())
}
