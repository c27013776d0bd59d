//! Tools: specs go to the core as its `ToolSpec` JSON; JavaScript executors become core
//! `ContextExecutor`s that call into JavaScript on the thread polling `execute` (the JavaScript
//! thread), handing over the arguments and the core's `CallContext` (as [`CallContextData`]), and
//! settle through `settleExecution` (the output as JSON text, or the error message). Called
//! from another thread (a request restored by `Gate::recover` runs its tool in a task on the
//! tokio runtime), the call is queued for the JavaScript thread and made there.
//!
//! Two thread-local tables, neither about which call runs (that is the core's `CallContext`):
//! `EXECUTORS` holds the facade's executor functions (a `napi_ref` is not `Send`, so the core's
//! executor holds an id), and `SETTLES` the executions whose tool returned a promise, until
//! `settleExecution` answers them (also after the gate closed: a running tool is not interrupted).

use crate::driver::{self, RemoteCall, Settle, Shared, TaskFuture};
use crate::errors;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use napi::bindgen_prelude::{Result, ToNapiValue, ValueType};
use napi::{Env, JsValue, sys};
use napi_derive::napi;
use serde_json::Value;
use signoff::{CallContext, ContextExecutor, ExecResult};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use tokio::sync::oneshot;

thread_local! {
    /// JavaScript executor functions by id (references owned by their gate).
    static EXECUTORS: RefCell<HashMap<u64, sys::napi_ref>> = RefCell::new(HashMap::new());
    static NEXT_EXECUTOR: Cell<u64> = const { Cell::new(1) };
    /// Executions waiting for `settleExecution`: token -> (result slot, gate id).
    static SETTLES: RefCell<HashMap<u64, (oneshot::Sender<ExecResult>, u64)>> = RefCell::new(HashMap::new());
    static NEXT_SETTLE: Cell<u64> = const { Cell::new(1) };
}

/// The call an executor runs, as the core's `CallContext` tells it. Handed to the facade's
/// executor wrapper as arguments of its own (no object to build per call); the facade adds the
/// gate's `signal` and freezes them into the tool's `ExecutionContext`.
pub struct CallContextData {
    /// The tool's name.
    pub tool: String,
    /// The model's id for the call.
    pub call_id: Option<String>,
    /// The confirmation request a person answered; absent when the call was not gated.
    pub request_id: Option<String>,
    /// The agent session.
    pub session_id: String,
    /// A person changed the arguments before approving.
    pub edited: bool,
}

impl From<&CallContext> for CallContextData {
    fn from(c: &CallContext) -> Self {
        CallContextData {
            tool: c.tool.clone(),
            call_id: c.call_id.clone(),
            request_id: c.request_id.map(|u| u.to_string()),
            session_id: c.session_id.clone(),
            edited: c.edited,
        }
    }
}

/// Wraps the facade's executor function as a core executor: `(argsJson, token, context) =>
/// string | undefined` returns the output's JSON text when the tool returned synchronously, else
/// calls `settleExecution(token, ok, outputJsonOrMessage)` once. The reference is weak: the
/// facade must keep the function alive while the tool is registered. Returns its id for
/// [`release`].
pub(crate) fn executor_for(env: &Env, func: sys::napi_value, shared: Weak<Shared>) -> Result<(u64, ContextExecutor)> {
    // Weak: the facade keeps its executor functions alive as long as the gate is referenced.
    let mut r = std::ptr::null_mut();
    // SAFETY: `env` is the env of the native call running now (`register`), on the gate's
    // JavaScript thread; `func` is an argument of that call (a handle of its scope); `r` is a
    // live local.
    driver::check(unsafe { sys::napi_create_reference(env.raw(), func, 0, &mut r) })?;
    let id = NEXT_EXECUTOR.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    });
    EXECUTORS.with(|m| m.borrow_mut().insert(id, r));
    let gate_id = shared.upgrade().map_or(0, |s| s.gate_id);
    let exec: ContextExecutor = Arc::new(move |args: Value, context: CallContext| {
        let context = CallContextData::from(&context);
        if let Some(env) = driver::current_env() {
            return call_executor(env, id, gate_id, args, context);
        }
        // Off the JavaScript thread: have the gate make the call there.
        let Some(shared) = shared.upgrade() else {
            return fail("the gate is gone: the tool cannot run");
        };
        let (done, rx) = oneshot::channel();
        if shared.execute_remote(RemoteCall { executor: id, args, context, done }) {
            Box::pin(rx.map(|r| r.unwrap_or_else(|_| Err(LOST.into()))))
        } else {
            fail("the gate was closed before the tool could run")
        }
    });
    Ok((id, exec))
}

/// Forgets an executor function.
pub(crate) fn release(env: &Env, id: u64) {
    if let Some(r) = EXECUTORS.with(|m| m.borrow_mut().remove(&id)) {
        // SAFETY: `r` was made by `napi_create_reference` in `executor_for` on this thread
        // (`EXECUTORS` is thread-local), so with `env`, the env of the call or finalizer running
        // now; it was just removed from `EXECUTORS`, its only holder, so it is deleted once.
        unsafe { sys::napi_delete_reference(env.raw(), r) };
    }
}

const LOST: &str = "the tool's result was lost";

/// A task of the gate's that makes an executor call queued from another thread, on the
/// JavaScript thread, and hands its result back.
pub(crate) fn remote_call(call: RemoteCall, gate_id: u64) -> TaskFuture {
    Box::pin(async move {
        let RemoteCall { executor, args, context, done } = call;
        let result = match driver::current_env() {
            Some(env) => call_executor(env, executor, gate_id, args, context).await,
            None => Err(LOST.to_owned()),
        };
        let _ = done.send(result);
        Box::new(|env: &Env| Ok(().into_unknown(env)?.raw())) as Settle
    })
}

fn fail(msg: &str) -> BoxFuture<'static, ExecResult> {
    Box::pin(std::future::ready(Err(msg.to_owned())))
}

fn call_executor(
    env: sys::napi_env,
    id: u64,
    gate_id: u64,
    args: Value,
    context: CallContextData,
) -> BoxFuture<'static, ExecResult> {
    let Some(func_ref) = EXECUTORS.with(|m| m.borrow().get(&id).copied()) else {
        return fail("the tool was unregistered before it could run");
    };
    let token = NEXT_SETTLE.with(|n| {
        let t = n.get();
        n.set(t + 1);
        t
    });
    let (tx, rx) = oneshot::channel();
    SETTLES.with(|s| s.borrow_mut().insert(token, (tx, gate_id)));
    // The env of the JavaScript call driving the task that polls this (see `driver::drive`):
    // valid until that call returns, which is after this function returns.
    let env = Env::from_raw(env);
    let raw = env.raw();
    let called = (|| -> std::result::Result<Option<String>, String> {
        let mut f = std::ptr::null_mut();
        // SAFETY: `func_ref` is live (only `release` deletes one, after removing it from
        // `EXECUTORS`, where it was read just now) and was made on this thread (`EXECUTORS` is
        // thread-local), so with `raw`, the env of the call running now; `f` is a live local. A
        // collected function (the reference is weak) gives null, checked here.
        if unsafe { sys::napi_get_reference_value(raw, func_ref, &mut f) } != sys::Status::napi_ok || f.is_null() {
            return Err("the executor function is gone".into());
        }
        let reason = |e: napi::Error| e.reason;
        let js_args = env.create_string(serde_json::to_string(&args).unwrap_or_default()).map_err(reason)?.raw();
        let js_token = (token as f64).into_unknown(&env).map_err(reason)?.raw();
        let undefined = ().into_unknown(&env).map_err(reason)?.raw();
        let string = |s: Option<String>| -> std::result::Result<sys::napi_value, String> {
            match s {
                Some(s) => Ok(env.create_string(&s).map_err(reason)?.raw()),
                None => Ok(undefined),
            }
        };
        let argv = [
            js_args,
            js_token,
            string(Some(context.tool))?,
            string(Some(context.session_id))?,
            context.edited.into_unknown(&env).map_err(reason)?.raw(),
            string(context.call_id)?,
            string(context.request_id)?,
        ];
        let mut out = std::ptr::null_mut();
        // SAFETY: on the JavaScript thread, with the env of the call running now; `f` (a
        // function: the facade only registers functions, and napi refuses anything else with a
        // status) and `undefined` are handles of the current scope; `argv` holds exactly
        // `argv.len()` handles of this scope and outlives the call; `out` is a live local.
        let status = unsafe { sys::napi_call_function(raw, undefined, f, argv.len(), argv.as_ptr(), &mut out) };
        if status != sys::Status::napi_ok {
            return Err(errors::clear_exception(&env)
                .map(|e| errors::describe(&env, e))
                .unwrap_or_else(|| format!("calling the executor failed (status {status})")));
        }
        // The output's JSON text when the tool returned synchronously.
        let out = out.into_unknown(&env).map_err(reason)?;
        Ok(match out.get_type() {
            Ok(ValueType::String) => out
                .coerce_to_string()
                .and_then(|s| s.into_utf8())
                .map(|s| s.as_str().map(str::to_owned))
                .ok()
                .and_then(|s| s.ok()),
            _ => None,
        })
    })();
    match called {
        Ok(None) => Box::pin(rx.map(|r| r.unwrap_or_else(|_| Err(LOST.into())))),
        Ok(Some(json)) => {
            SETTLES.with(|s| s.borrow_mut().remove(&token));
            Box::pin(std::future::ready(output(&json)))
        }
        Err(msg) => {
            SETTLES.with(|s| s.borrow_mut().remove(&token));
            Box::pin(std::future::ready(Err(msg)))
        }
    }
}

fn output(json: &str) -> ExecResult {
    serde_json::from_str(json).map_err(|e| format!("the tool returned a value that is not JSON ({e})"))
}

/// Settles an execution started by an executor call: `ok` with the tool's output as JSON text,
/// or not with the error message for the model. Unknown tokens are ignored (each settles once).
#[napi]
pub fn settle_execution(env: Env, token: f64, ok: bool, payload: String) {
    let Some((tx, gate_id)) = SETTLES.with(|s| s.borrow_mut().remove(&(token as u64))) else { return };
    let result = if ok { output(&payload) } else { Err(payload) };
    match driver::state_for(gate_id) {
        Some(state) => state.enter(&env, || {
            let _ = tx.send(result);
        }),
        None => {
            let _ = tx.send(result);
        }
    }
}
