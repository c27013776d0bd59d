//! Request listeners, bridged to the core's handler driver (`Gate::on_request`).
//!
//! The core calls our `RequestHandler` once per request and, when the returned future completes
//! with the request still pending, the approval step has failed: the core cancels the request
//! (`approval-failed`, whatever the authenticator allows) and writes the detail ("returned
//! without answering" / "failed: ...") to the audit log and stderr, never to the model.
//! The future completes when the JavaScript listeners have settled: the facade's dispatcher
//! returns their result when they all returned synchronously, or calls `finishRequest(token)`
//! once their promises have settled. The core's driver runs on the JavaScript thread's local
//! runtime (`crate::LOCAL`).
//!
//! Two routes lead a request to the listeners; both end in that same future:
//!
//! * asynchronous: the core's driver queues the request for the JavaScript thread (and, if that
//!   thread is not inside a call into the gate, wakes it through the threadsafe function);
//! * synchronous: a request created while the JavaScript thread polls a confirm (the common case)
//!   is *claimed* by the pending-store hook before the core publishes it, handed to the listeners
//!   as soon as the poll returns, and the listeners' result is passed to the core's driver when it
//!   asks for it. An approval given synchronously thus completes `confirm` with no thread hop.

use crate::driver::{JsState, Shared};
use crate::errors;
use crate::events::js_string;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use napi::bindgen_prelude::*;
use napi::{Env, sys};
use signoff::{ConfirmationRequest, HandlerGuard, PendingRequest, RequestHandler};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use uuid::Uuid;

/// What the listeners reported: `Err(message)` when one threw or rejected.
pub(crate) type HandlerResult = std::result::Result<(), String>;

const RELEASED: &str = "the request listener was removed, or the gate closed, before it finished";

enum Slot {
    /// Claimed for the synchronous route; the listeners have not finished.
    Inline,
    /// The core's driver asked first and waits for the listeners.
    Waiting(oneshot::Sender<HandlerResult>),
    /// The listeners finished first.
    Done(HandlerResult),
}

type Queued = (PendingRequest, oneshot::Sender<HandlerResult>);

/// The thread-safe half: what the core's driver and the pending-store hook touch.
#[derive(Default)]
pub(crate) struct HandlerShared {
    /// A request listener is registered.
    pub active: AtomicBool,
    claims: Mutex<HashMap<Uuid, Slot>>,
    queue: Mutex<Vec<Queued>>,
}

impl HandlerShared {
    pub(crate) fn claim_inline(&self, id: Uuid) {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        claims.insert(id, Slot::Inline);
        // Claims the core's driver never picked up (it lagged, or was stopped) must not pile up.
        if claims.len() > 8192 {
            claims.retain(|_, s| !matches!(s, Slot::Done(_)));
        }
    }

    pub(crate) fn finish_claim(&self, id: &Uuid, result: HandlerResult) {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        match claims.remove(id) {
            Some(Slot::Waiting(tx)) => {
                drop(claims);
                let _ = tx.send(result);
            }
            Some(Slot::Inline) => {
                claims.insert(*id, Slot::Done(result));
            }
            Some(done @ Slot::Done(_)) => {
                claims.insert(*id, done);
            }
            None => {}
        }
    }

    /// The request will not be shown (cancelled first): let the core's driver move on.
    pub(crate) fn release_claim(&self, id: &Uuid) {
        self.finish_claim(id, Ok(()));
    }

    pub(crate) fn take_queued(&self) -> Vec<Queued> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.is_empty() { Vec::new() } else { std::mem::take(&mut *q) }
    }

    fn clear(&self) {
        let claims = std::mem::take(&mut *self.claims.lock().unwrap_or_else(|e| e.into_inner()));
        let queue = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        // Dropping the senders completes the core's handler futures with an error: it cancels
        // whatever is still pending (approval-failed).
        drop(claims);
        drop(queue);
    }
}

/// How a listener run reports back to the core's driver.
pub(crate) enum Completion {
    Claim(Arc<Shared>, Uuid),
    Channel(oneshot::Sender<HandlerResult>),
}

/// Reports the listeners' result exactly once; dropped unreported, it fails safe.
pub(crate) struct CompletionCell(Option<Completion>);

impl CompletionCell {
    fn finish(&mut self, result: HandlerResult) {
        match self.0.take() {
            Some(Completion::Claim(shared, id)) => shared.handler.finish_claim(&id, result),
            Some(Completion::Channel(tx)) => {
                let _ = tx.send(result);
            }
            None => {}
        }
    }
}

impl Drop for CompletionCell {
    fn drop(&mut self) {
        self.finish(Err(RELEASED.into()));
    }
}

/// The JavaScript-thread half: the facade's dispatch function, the core's handler guard, and the
/// listener runs in flight (by token).
#[derive(Default)]
pub(crate) struct HandlerJs {
    dispatch: RefCell<Option<sys::napi_ref>>,
    guard: RefCell<Option<HandlerGuard>>,
    runs: RefCell<HashMap<u64, CompletionCell>>,
    next_token: Cell<u64>,
}

impl HandlerJs {
    /// The core's handler driver runs, or a run of it has not finished.
    pub(crate) fn is_running(&self) -> bool {
        self.guard.borrow().is_some() || crate::LOCAL.with(|rt| rt.metrics().num_alive_tasks() > 0)
    }
}

/// The handler given to `Gate::on_request`: routes each request to the JavaScript listeners and
/// completes when they have settled.
fn route(shared: &Arc<Shared>, pending: PendingRequest) -> BoxFuture<'static, HandlerResult> {
    let id = pending.request().id;
    {
        let mut claims = shared.handler.claims.lock().unwrap_or_else(|e| e.into_inner());
        match claims.remove(&id) {
            Some(Slot::Done(r)) => return Box::pin(std::future::ready(r)),
            Some(Slot::Inline) | Some(Slot::Waiting(_)) => {
                let (tx, rx) = oneshot::channel();
                claims.insert(id, Slot::Waiting(tx));
                return Box::pin(rx.map(released));
            }
            None => {}
        }
    }
    let (tx, rx) = oneshot::channel();
    shared.handler.queue.lock().unwrap_or_else(|e| e.into_inner()).push((pending, tx));
    shared.notify();
    Box::pin(rx.map(released))
}

fn released(r: std::result::Result<HandlerResult, oneshot::error::RecvError>) -> HandlerResult {
    r.unwrap_or_else(|_| Err(RELEASED.into()))
}

/// Registers (or replaces) the facade's dispatch function and makes sure the core's handler
/// driver runs.
pub(crate) fn start(state: &Rc<JsState>, env: &Env, dispatch: sys::napi_value) -> Result<()> {
    if state.is_released() || state.gate.is_closed() {
        return Err(errors::throw(env, &signoff::Error::Closed));
    }
    // Weak: the facade keeps the function alive, so a gate nobody references can be collected
    // (its request listeners with it) instead of being rooted here.
    let mut r = std::ptr::null_mut();
    // SAFETY: `env` is the env of the native call running now, on the gate's JavaScript thread;
    // `dispatch` is an argument of that call (a handle of its scope); `r` is a live local.
    crate::driver::check(unsafe { sys::napi_create_reference(env.raw(), dispatch, 0, &mut r) })?;
    if let Some(old) = state.handler.dispatch.replace(Some(r)) {
        // SAFETY: `old` was made by `napi_create_reference` above in an earlier call on this
        // thread (a gate never leaves its thread, so with this env); it was just taken out of
        // `dispatch`, its only holder, so it is deleted exactly once.
        unsafe { sys::napi_delete_reference(env.raw(), old) };
    }
    if state.handler.guard.borrow().is_none() {
        state.shared.handler.active.store(true, Ordering::SeqCst);
        let shared = state.shared.clone();
        let handler: RequestHandler = Arc::new(move |p: PendingRequest| route(&shared, p));
        let guard = crate::LOCAL.with(|rt| {
            let _local = rt.enter();
            state.gate.on_request(handler)
        });
        *state.handler.guard.borrow_mut() = Some(guard);
    }
    Ok(())
}

/// Stops the core's handler driver and forgets the dispatch function and the listener runs in
/// flight (the last request listener was removed, or the gate is released).
///
/// In this order, on the JavaScript thread, before returning:
/// 1. The driver task is aborted *and dropped* (the local runtime only drops an aborted task when
///    it is next driven, which may be never: the task holds a clone of the core's gate, so its
///    store, audit log, thread and files would stay open). Its bus subscription goes with it: when
///    it was the last approver, the core cancels what is pending (`no-approver`), as for a request
///    nobody can answer.
/// 2. Every run still waiting for its listeners is abandoned: the core's handler future for it
///    completes with "the request listener was removed, or the gate closed, before it finished",
///    which ends a request still pending as `approval-failed` (the core's rule for a handler that
///    finished without answering). A listener that settles later changes nothing.
pub(crate) fn stop(state: &Rc<JsState>, env: Option<&Env>) {
    state.shared.handler.active.store(false, Ordering::SeqCst);
    let guard = state.handler.guard.borrow_mut().take();
    drop(guard);
    crate::run_local();
    state.shared.handler.clear();
    let runs = std::mem::take(&mut *state.handler.runs.borrow_mut());
    drop(runs);
    crate::run_local();
    let dispatch = state.handler.dispatch.borrow_mut().take();
    if let (Some(d), Some(env)) = (dispatch, env) {
        // SAFETY: `d` was made by `napi_create_reference` in `start`, on this thread (so with
        // `env`, the env of the call or finalizer running now); it was just taken out of
        // `dispatch`, its only holder, so it is deleted exactly once.
        unsafe { sys::napi_delete_reference(env.raw(), d) };
    }
}

/// Reports that the listeners of run `token` have settled (`error`: the first failure).
pub(crate) fn finish(state: &Rc<JsState>, token: u64, error: Option<String>) {
    let cell = state.handler.runs.borrow_mut().remove(&token);
    if let Some(mut c) = cell {
        c.finish(match error {
            Some(e) => Err(e),
            None => Ok(()),
        });
    }
}

/// Shows requests created on this thread to the listeners (synchronous route).
pub(crate) fn dispatch_inline(env: &Env, state: &Rc<JsState>, requests: Vec<Arc<ConfirmationRequest>>) {
    let mut items = Vec::with_capacity(requests.len());
    for req in requests {
        let id = req.id;
        if state.gate.pending_request(&id).is_none() {
            // Already resolved (aborted, closed): nothing to show.
            state.shared.handler.release_claim(&id);
            continue;
        }
        items.push((req, Completion::Claim(state.shared.clone(), id)));
    }
    call_dispatch(env, state, items);
}

/// Shows requests queued by the core's driver to the listeners (asynchronous route).
pub(crate) fn dispatch_queued(env: &Env, state: &Rc<JsState>, queued: Vec<Queued>) {
    let items = queued.into_iter().map(|(p, tx)| (p.request().clone(), Completion::Channel(tx))).collect();
    call_dispatch(env, state, items);
}

fn call_dispatch(env: &Env, state: &Rc<JsState>, items: Vec<(Arc<ConfirmationRequest>, Completion)>) {
    let raw = env.raw();
    let dispatch = *state.handler.dispatch.borrow();
    let mut f = std::ptr::null_mut();
    let usable = dispatch.is_some_and(|d| {
        // SAFETY: `d` is live (only `start` and `stop` delete one, after taking it out of
        // `dispatch`, where it was read just now) and was made on this thread, so with `env`, the
        // env of the call running now; `f` is a live local. A collected function (the reference
        // is weak) gives null, checked below.
        let status = unsafe { sys::napi_get_reference_value(raw, d, &mut f) };
        status == sys::Status::napi_ok && !f.is_null()
    });
    let undefined = ().into_unknown(env).map(|u| u.raw());
    let usable = usable && undefined.is_ok();
    let undefined = undefined.unwrap_or(std::ptr::null_mut());
    for (req, completion) in items {
        let mut cell = CompletionCell(Some(completion));
        if !usable {
            // No listener any more: the approval step failed (the core cancels the request).
            continue;
        }
        let token = state.handler.next_token.get() + 1;
        state.handler.next_token.set(token);
        let args = req.arguments.to_string();
        let rest = serde_json::to_string(&RequestRest::of(&req)).unwrap_or_default();
        let argv = (|| -> Result<[sys::napi_value; 5]> {
            Ok([
                (token as f64).into_unknown(env)?.raw(),
                js_string(env, &req.id.to_string())?,
                js_string(env, &req.tool)?,
                js_string(env, &args)?,
                js_string(env, &rest)?,
            ])
        })();
        let Ok(argv) = argv else {
            cell.finish(Err("the request could not be handed to JavaScript".into()));
            continue;
        };
        state.handler.runs.borrow_mut().insert(token, cell);
        let mut out = std::ptr::null_mut();
        // SAFETY: on the JavaScript thread, with `env`, the env of the call running now; `f` (a
        // function: the facade only registers functions, and napi refuses anything else with a
        // status) and `undefined` are handles of the current scope, which keeps them alive even
        // if a listener removes the dispatcher meanwhile; `argv` holds exactly `argv.len()` handles
        // of this scope and outlives the call; `out` is a live local.
        let status = unsafe { sys::napi_call_function(raw, undefined, f, argv.len(), argv.as_ptr(), &mut out) };
        if status != sys::Status::napi_ok {
            // The dispatcher itself failed (it never should): this run fails safe.
            let msg = errors::clear_exception(env)
                .map(|e| errors::describe(env, e))
                .unwrap_or_else(|| format!("status {status}"));
            finish(state, token, Some(format!("the request dispatcher failed: {msg}")));
            continue;
        }
        // `undefined`: listeners still running (finishRequest follows); `null`: all returned;
        // a string: the first failure.
        let Ok(out) = out.into_unknown(env) else {
            finish(state, token, Some("the request dispatcher's result could not be read".into()));
            continue;
        };
        match out.get_type() {
            Ok(ValueType::Null) => finish(state, token, None),
            Ok(ValueType::String) => {
                let msg = out
                    .coerce_to_string()
                    .and_then(|s| s.into_utf8())
                    .and_then(|s| s.as_str().map(str::to_owned))
                    .unwrap_or_default();
                finish(state, token, Some(msg));
            }
            _ => {}
        }
    }
}

/// The fields of a request the dispatcher receives as one JSON object (besides id, tool and
/// arguments): parsed only if a listener reads them.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestRest<'a> {
    description: &'a str,
    display_arguments: &'a str,
    prompt: &'a str,
    arguments_digest: &'a str,
    session_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    editable: bool,
    reasons: &'a [String],
    timeout_ms: u64,
    deadline_ms: u64,
    created_at_ms: u64,
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    metadata: &'a serde_json::Value,
}

impl<'a> RequestRest<'a> {
    fn of(r: &'a ConfirmationRequest) -> Self {
        RequestRest {
            description: &r.description,
            display_arguments: &r.display_arguments,
            prompt: &r.prompt,
            arguments_digest: &r.arguments_digest,
            session_id: &r.session_id,
            tool_call_id: r.tool_call_id.as_deref(),
            editable: r.editable,
            reasons: &r.reasons,
            timeout_ms: r.timeout_ms,
            deadline_ms: r.deadline_ms,
            created_at_ms: r.created_at_ms,
            metadata: &r.metadata,
        }
    }
}
