//! Request listeners: the core's inline approver (`Gate::on_request_inline`).
//!
//! The core calls the approver in the publishing context: inside the poll of the confirm or
//! execute that made the request, which runs on the JavaScript thread (see `driver.rs`), so the
//! facade's dispatcher is called right there and a listener that answers at once completes the
//! call within the JavaScript call that started it, with no task and no thread hop. Requests
//! handed over elsewhere (off the JavaScript thread) are queued and shown from there.
//!
//! The approver receives a `PendingRequest` that carries the duty to answer. The dispatcher
//! returns `null` when every listener returned, a string (the first failure) when one threw, or
//! `undefined` when some returned promises: the handle is then kept until `finishRequest(token)`.
//! If nobody answered by then, the approval step failed: the request ends as `approval-failed`
//! (the core's rule) with the detail in the audit log and on stderr, never for the model.

use crate::driver::{JsState, Shared, current_env, state_for};
use crate::errors;
use crate::events::js_string;
use napi::bindgen_prelude::*;
use napi::{Env, sys};
use napi_derive::napi;
use signoff::{ApproverGuard, PendingRequest};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Weak};

const RELEASED: &str = "the request listener was removed, or the gate closed, before it finished";
const RETURNED: &str = "the approval handler returned without answering";

/// The facade's dispatch function and the core's approver guard.
#[derive(Default)]
pub(crate) struct HandlerJs {
    dispatch: RefCell<Option<sys::napi_ref>>,
    guard: RefCell<Option<ApproverGuard>>,
}

/// A listener run: the request its listeners were shown, held (with the duty to answer) until
/// they have settled, and the gate it belongs to.
struct Run {
    gate_id: u64,
    request: PendingRequest,
}

thread_local! {
    /// The listener runs in flight on this thread, by token (unique on the thread, so that a
    /// listener's answer can name its run alone: [`approve_run`]).
    static RUNS: RefCell<HashMap<u64, Run>> = RefCell::new(HashMap::new());
    static NEXT_TOKEN: Cell<u64> = const { Cell::new(0) };
}

fn take_run(token: u64, gate_id: u64) -> Option<PendingRequest> {
    RUNS.with(|r| {
        let mut runs = r.borrow_mut();
        match runs.get(&token) {
            Some(run) if run.gate_id == gate_id => runs.remove(&token).map(|run| run.request),
            _ => None,
        }
    })
}

/// Approves, as shown, the request of listener run `token` (`PendingRequest.approve()` with no
/// options, from a listener the dispatcher called): the core's answer through the handle the
/// run holds, with no lookup by id. `null` when that run is over: the facade then answers by id,
/// and the core says why the request no longer waits.
#[napi]
pub fn approve_run(env: Env, token: f64) -> Result<Option<crate::events::OutcomeKind>> {
    let found = RUNS.with(|r| r.borrow().get(&(token as u64)).map(|run| (run.gate_id, run.request.clone())));
    let Some((gate_id, p)) = found else { return Ok(None) };
    let Some(state) = state_for(gate_id) else { return Ok(None) };
    let outcome = state.enter(&env, || p.approve());
    outcome.map(|o| Some(o.into())).map_err(|e| errors::throw(&env, &e))
}

/// Ends the approval step for a request whose listeners have settled: a no-op when one answered.
fn settle(p: PendingRequest, error: Option<String>) {
    match error {
        None => p.fail(RETURNED),
        Some(e) => p.fail(&format!("the approval handler failed: {e}")),
    };
}

/// Registers (or replaces) the facade's dispatch function and attaches the inline approver.
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
        let shared = Arc::downgrade(&state.shared);
        // Requests already pending are shown in this call (not published by a call being polled,
        // if this is a listener's or a tool's: see `JsState::shown`).
        let guard = state.polling(None, || state.gate.on_request_inline(move |p| approve(&shared, p)));
        *state.handler.guard.borrow_mut() = Some(guard);
    }
    Ok(())
}

/// The inline approver: shows the request now when called on the JavaScript thread inside a call
/// into the gate (always, in practice), else queues it for that thread.
fn approve(shared: &Weak<Shared>, p: PendingRequest) {
    let Some(shared) = shared.upgrade() else { return };
    if std::thread::current().id() == shared.js_thread
        && let Some(env) = current_env()
        && let Some(state) = state_for(shared.gate_id)
    {
        return dispatch(&Env::from_raw(env), &state, p);
    }
    shared.requests.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    shared.notify();
}

/// Detaches the approver and ends the approval step of every request a listener still holds
/// (the last request listener was removed, or the gate is released). The core cancels what is
/// pending (`no-approver`) when this was the gate's last approver; a request held by a listener
/// whose promise has not settled ends as `approval-failed` otherwise. A listener that settles
/// later changes nothing.
pub(crate) fn stop(state: &Rc<JsState>, env: Option<&Env>) {
    let guard = state.handler.guard.borrow_mut().take();
    drop(guard);
    let gate_id = state.shared.gate_id;
    let runs: Vec<PendingRequest> = RUNS.with(|r| {
        let mut runs = r.borrow_mut();
        let tokens: Vec<u64> = runs.iter().filter(|(_, run)| run.gate_id == gate_id).map(|(t, _)| *t).collect();
        tokens.into_iter().filter_map(|t| runs.remove(&t)).map(|run| run.request).collect()
    });
    let queued = std::mem::take(&mut *state.shared.requests.lock().unwrap_or_else(|e| e.into_inner()));
    for p in runs.into_iter().chain(queued) {
        p.fail(RELEASED);
    }
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
    if let Some(p) = take_run(token, state.shared.gate_id) {
        settle(p, error);
    }
}

/// Shows a request to the listeners through the facade's dispatcher.
pub(crate) fn dispatch(env: &Env, state: &Rc<JsState>, p: PendingRequest) {
    let raw = env.raw();
    let mut f = std::ptr::null_mut();
    let usable = state.handler.dispatch.borrow().is_some_and(|d| {
        // SAFETY: `d` is live (only `start` and `stop` delete one, after taking it out of
        // `dispatch`, where it was read just now) and was made on this thread, so with `env`, the
        // env of the call running now; `f` is a live local. A collected function (the reference
        // is weak) gives null, checked below.
        let status = unsafe { sys::napi_get_reference_value(raw, d, &mut f) };
        status == sys::Status::napi_ok && !f.is_null()
    });
    if !usable {
        p.fail(RELEASED);
        return;
    }
    let token = NEXT_TOKEN.with(|n| n.get() + 1);
    NEXT_TOKEN.with(|n| n.set(token));
    let req = p.request();
    if !state.shown(req.id) {
        // Its call was aborted earlier in this poll: nobody is asked.
        state.gate.cancel_request(&req.id);
        return;
    }
    // The id, tool and arguments on their own, and the rest of the request (parsed only if a
    // listener reads it) without the display text, which is derived from the arguments when read.
    let mut details = Vec::with_capacity(512);
    crate::camel::write(&mut details, &req.details());
    let details = std::str::from_utf8(&details).unwrap_or_default();
    let argv = (|| -> Result<[sys::napi_value; 6]> {
        Ok([
            (token as f64).into_unknown(env)?.raw(),
            js_string(env, req.id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()))?,
            js_string(env, &req.tool)?,
            js_string(env, req.arguments.json())?,
            js_string(env, details)?,
            ().into_unknown(env)?.raw(),
        ])
    })();
    let Ok(argv) = argv else {
        p.fail("the approval handler failed: the request could not be handed to JavaScript");
        return;
    };
    let gate_id = state.shared.gate_id;
    RUNS.with(|r| r.borrow_mut().insert(token, Run { gate_id, request: p }));
    // Taken back when the listeners have returned; gone if the dispatcher stopped meanwhile.
    let done = |error: Option<String>| {
        if let Some(p) = take_run(token, gate_id) {
            settle(p, error);
        }
    };
    let mut out = std::ptr::null_mut();
    // SAFETY: on the JavaScript thread, with `env`, the env of the call running now; `f` (a
    // function: the facade only registers functions, and napi refuses anything else with a
    // status) and `argv[5]` (`undefined`, the receiver) are handles of the current scope, which
    // keeps them alive even if a listener removes the dispatcher meanwhile; `argv` holds 5
    // arguments after the receiver and outlives the call; `out` is a live local.
    let status = unsafe { sys::napi_call_function(raw, argv[5], f, 5, argv.as_ptr(), &mut out) };
    if status != sys::Status::napi_ok {
        // The dispatcher itself failed (it never should): this run fails safe.
        let msg = errors::clear_exception(env)
            .map(|e| errors::describe(env, e))
            .unwrap_or_else(|| format!("status {status}"));
        return done(Some(format!("the request dispatcher failed: {msg}")));
    }
    // `undefined`: listeners still running (finishRequest follows, the run stays); `null`: all
    // returned; a string: the first failure.
    let Ok(out) = out.into_unknown(env) else {
        return done(Some("the request dispatcher's result could not be read".into()));
    };
    match out.get_type() {
        Ok(ValueType::Null) => done(None),
        Ok(ValueType::String) => {
            let msg = out
                .coerce_to_string()
                .and_then(|s| s.into_utf8())
                .and_then(|s| s.as_str().map(str::to_owned))
                .unwrap_or_default();
            done(Some(msg));
        }
        _ => {}
    }
}
