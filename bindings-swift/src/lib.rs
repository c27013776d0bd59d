//! uniffi bindings for `signoff`, built as `signoff_ffi` (cdylib + staticlib) for the Swift
//! package in this directory (and, over the same C ABI, uniffi's Python bindings used by the
//! test suite here).
//!
//! This crate only converts types and bridges async. Every rule (policy, matching, timeouts,
//! "a handler that failed or did not answer ends its request as cancelled/approval-failed",
//! strict JSON, cancel-on-drop) is the core's.
//!
//! Async: every core future runs on this library's own multi-thread tokio runtime (polled there
//! when woken, without a task per call); what the foreign side awaits is runtime-agnostic (a
//! result kept with who waits for it, the core's `Subscription`), so
//! uniffi's `tokio` feature is not needed. Foreign callbacks (handler, executor) are async foreign
//! trait methods: calling one only starts a Swift `Task` / Python coroutine and returns, so no
//! tokio worker is ever blocked on foreign code.
//!
//! Cancellation: uniffi does not propagate Swift task cancellation into Rust futures, so each
//! long wait is a driven future behind a handle (`PendingConfirmation`, `PendingExecution`,
//! `PendingBatch`) with `cancel()`; cancelling (or dropping the handle) drops the core future,
//! and the core's rule applies: a call still waiting for a decision has its request cancelled
//! (`aborted`) and never runs; a tool that has started runs to the end on this runtime and its
//! result is recorded. The Swift extension calls `cancel()` from `withTaskCancellationHandler`.

use futures_util::FutureExt;
use signoff as core;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

mod console;
mod error;
mod remote;
mod types;

pub use console::*;
pub use error::{CallbackError, ErrorKind, SignoffError, error_kind_name};
pub use remote::*;
pub use types::*;

uniffi::setup_scaffolding!();

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("signoff-ffi")
            .build()
            .expect("signoff: cannot start the tokio runtime")
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// foreign traits

/// Runs a tool. Implemented in Swift (or Python). Receives the approved arguments as JSON text,
/// and the call's `CallContext` (which call, request and session it runs for; whether the gate
/// has closed since), and returns the output as JSON text (read strictly, like all JSON text
/// from the Swift side: text that is not acceptable JSON, e.g. with a repeated key, is the tool's
/// failure); a thrown error is the tool's failure, reported to the model. Runs at most once per
/// approved call; once started it runs to the end even when the caller is cancelled (its result
/// is recorded). Closing the gate does not stop it either: `context.gate.isClosed()` tells.
#[uniffi::export(with_foreign)]
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    async fn execute(&self, arguments_json: String, context: CallContext) -> Result<String, CallbackError>;
}

/// Which call an executor runs: the core's `CallContext`, converted.
#[derive(uniffi::Record)]
pub struct CallContext {
    /// The tool's name.
    pub tool: String,
    /// The model's id for the call.
    pub call_id: Option<String>,
    /// The confirmation request a person answered; nil when the call was not gated.
    pub request_id: Option<String>,
    /// The agent session.
    pub session_id: String,
    /// A person changed the arguments before approving.
    pub edited: bool,
    /// The gate that runs the call, as the tool may ask about it: `gate.isClosed()`.
    pub gate: Arc<GateStatus>,
}

/// What a running tool may ask about the gate that runs it. It does not keep the gate alive.
#[derive(uniffi::Object)]
pub struct GateStatus {
    context: core::CallContext,
}

#[uniffi::export]
impl GateStatus {
    /// True once the gate has closed (or is gone): a long tool may stop early and say so. The
    /// gate never interrupts a tool (its Swift task is not cancelled).
    pub fn is_closed(&self) -> bool {
        self.context.gate_closed()
    }
}

impl From<core::CallContext> for CallContext {
    fn from(c: core::CallContext) -> Self {
        CallContext {
            tool: c.tool.clone(),
            call_id: c.call_id.clone(),
            request_id: c.request_id.map(|u| u.to_string()),
            session_id: c.session_id.clone(),
            edited: c.edited,
            gate: Arc::new(GateStatus { context: c }),
        }
    }
}

/// Called once per confirmation request (see `Gate.onRequest`). Answer through the
/// `PendingRequest`. Returning without answering, or throwing, ends the request at once as
/// cancelled (`CancelReason.approvalFailed`), whatever responders the gate allows: the core's
/// fail-safe rule. The tool does not run, and the model is told the approval step failed, never
/// the error's text.
#[uniffi::export(with_foreign)]
#[async_trait::async_trait]
pub trait ApprovalHandler: Send + Sync {
    async fn handle(&self, request: Arc<PendingRequest>) -> Result<(), CallbackError>;
}

fn executor_from_foreign(exec: Arc<dyn ToolExecutor>) -> core::ContextExecutor {
    Arc::new(move |args: serde_json::Value, context: core::CallContext| {
        let exec = exec.clone();
        async move {
            let out = exec.execute(args.to_string(), context.into()).await.map_err(|e| e.to_string())?;
            // Strict, as all JSON text from the Swift side: a repeated key or NaN is the tool's
            // failure, not a value silently picked for the model.
            core::json::from_str(&out, "the executor's output").map_err(|e| match e {
                core::Error::Malformed(m) => m,
                e => e.to_string(),
            })
        }
        .boxed()
    })
}

/// A pending request and the means to answer it, bound to that request (the core's
/// `PendingRequest`): id, tool, digest and session are filled in for you.
#[derive(uniffi::Object)]
pub struct PendingRequest {
    inner: core::PendingRequest,
}

#[uniffi::export]
impl PendingRequest {
    /// The request as shown.
    pub fn request(&self) -> ConfirmationRequest {
        (&**self.inner.request()).into()
    }

    /// Approves it as shown, once.
    pub fn approve(&self) -> Result<Outcome, SignoffError> {
        Ok(self.inner.approve()?)
    }

    /// Approves, optionally with edited arguments (JSON text), for this call or the session.
    #[uniffi::method(default(arguments_json = None, scope = None, responder = None))]
    pub fn approve_with(
        &self,
        arguments_json: Option<String>,
        scope: Option<Scope>,
        responder: Option<String>,
    ) -> Result<Outcome, SignoffError> {
        let args = arguments_json.as_deref().map(|a| parse_value("edited arguments", a)).transpose()?;
        Ok(self.inner.approve_with(args, scope.unwrap_or_default(), responder)?)
    }

    /// Denies, with an optional reason the model will read.
    #[uniffi::method(default(reason = None, responder = None))]
    pub fn deny(&self, reason: Option<String>, responder: Option<String>) -> Result<Outcome, SignoffError> {
        Ok(self.inner.deny(reason, responder)?)
    }

    /// True while nobody has answered and it has not timed out or been cancelled.
    pub fn is_pending(&self) -> bool {
        self.inner.is_pending()
    }
}

/// Keeps a handler registered (`Gate.onRequest`). `stop()`, or dropping it, unregisters the
/// handler and its subscription.
#[derive(uniffi::Object)]
pub struct HandlerRegistration {
    guard: Mutex<Option<core::HandlerGuard>>,
}

#[uniffi::export]
impl HandlerRegistration {
    pub fn stop(&self) {
        if let Some(g) = lock(&self.guard).take() {
            g.stop();
        }
    }

    pub fn is_active(&self) -> bool {
        lock(&self.guard).is_some()
    }
}

// ---------------------------------------------------------------------------------------------
// cancellable waits

/// A core future driven on the runtime without a task of its own (what a million pending
/// calls would each pay for): the handle is the future's waker, and each wake schedules one poll
/// on the runtime. Its result is kept for any number of `wait()`s. `cancel()` (or dropping the
/// handle) has the future dropped on the runtime, never on the caller's thread (dropping a call
/// on a shared store is a database round trip).
struct Cancellable<T: Clone + Send + Sync + 'static> {
    driven: Arc<Driven<T>>,
}

type BoxedFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

struct Driven<T> {
    /// The future; held while it is polled (polls are one at a time), `None` once it finished
    /// or was dropped.
    fut: Mutex<Option<BoxedFuture<T>>>,
    /// The outcome, and who is told once it is in (`when_settled`, `wait()`s).
    out: Mutex<Settled<T>>,
    /// A poll is scheduled and has not started.
    scheduled: std::sync::atomic::AtomicBool,
    /// `cancel()` was called: the next poll drops the future instead of polling it.
    cancelled: std::sync::atomic::AtomicBool,
}

struct Settled<T> {
    out: Out<T>,
    listeners: Listeners,
    /// The id of the next `wait()` that registers.
    next_wait: u64,
}

enum Listener {
    Foreign(Arc<dyn SettledListener>),
    /// A registered sink's token (`whenSettledToken(sink:token:)`): nothing allocated per call.
    Token(u32, u64),
    /// A `wait()` in progress (removed when it is dropped first).
    Wait(u64, std::task::Waker),
}

/// Usually one (the extension's continuation): kept inline, no allocation until a second.
#[derive(Default)]
enum Listeners {
    #[default]
    None,
    One(Listener),
    Many(Vec<Listener>),
}

impl Listeners {
    fn push(&mut self, l: Listener) {
        *self = match std::mem::take(self) {
            Listeners::None => Listeners::One(l),
            Listeners::One(first) => Listeners::Many(vec![first, l]),
            Listeners::Many(mut v) => {
                v.push(l);
                Listeners::Many(v)
            }
        };
    }

    fn as_mut_slice(&mut self) -> &mut [Listener] {
        match self {
            Listeners::None => &mut [],
            Listeners::One(l) => std::slice::from_mut(l),
            Listeners::Many(v) => v,
        }
    }

    fn retain(&mut self, keep: impl Fn(&Listener) -> bool) {
        match self {
            Listeners::None => {}
            Listeners::One(l) => {
                if !keep(l) {
                    *self = Listeners::None;
                }
            }
            Listeners::Many(v) => v.retain(keep),
        }
    }

    fn tell(self) {
        let tell = |l: Listener| match l {
            Listener::Foreign(l) => l.settled(),
            Listener::Token(sink, token) => {
                // Registered before the token was accepted, and never removed.
                let sink = SINKS.read().unwrap_or_else(|e| e.into_inner()).get(sink as usize).cloned();
                if let Some(sink) = sink {
                    sink.settled(token);
                }
            }
            Listener::Wait(_, w) => w.wake(),
        };
        match self {
            Listeners::None => {}
            Listeners::One(l) => tell(l),
            Listeners::Many(v) => v.into_iter().for_each(tell),
        }
    }
}

enum Out<T> {
    Waiting,
    Done(Box<T>),
    /// Dropped before it produced a result.
    Cancelled,
}

impl<T: Send + 'static> std::task::Wake for Driven<T> {
    fn wake(self: Arc<Self>) {
        self.schedule();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.clone().schedule();
    }
}

impl<T: Send + 'static> Driven<T> {
    fn schedule(self: Arc<Self>) {
        use std::sync::atomic::Ordering;
        if !self.scheduled.swap(true, Ordering::SeqCst) {
            runtime().spawn(async move { self.poll_here() });
        }
    }

    /// On the runtime. A wake while this runs schedules the next poll, which waits for this one.
    /// `scheduled` and `cancelled` are sequentially consistent: a `cancel()` that finds a poll
    /// still scheduled (and so schedules none) is seen by that poll.
    fn poll_here(self: Arc<Self>) {
        use std::sync::atomic::Ordering;
        self.scheduled.store(false, Ordering::SeqCst);
        let mut slot = lock(&self.fut);
        let Some(fut) = slot.as_mut() else { return };
        if self.cancelled.load(Ordering::SeqCst) {
            drop(slot.take());
            drop(slot);
            return self.settle(Out::Cancelled);
        }
        let waker = std::task::Waker::from(self.clone());
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fut.as_mut().poll(&mut std::task::Context::from_waker(&waker))
        }));
        match polled {
            Ok(std::task::Poll::Pending) => {}
            Ok(std::task::Poll::Ready(v)) => {
                *slot = None;
                drop(slot);
                self.settle(Out::Done(Box::new(v)));
            }
            // A bug, not an outcome: nothing was decided, so the call ends as cancelled (and the
            // core's drop of the future cancels its request), never waits forever.
            Err(_) => {
                let broken = slot.take();
                drop(slot);
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(broken)));
                self.settle(Out::Cancelled);
            }
        }
    }

    fn settle(&self, out: Out<T>) {
        let listeners = {
            let mut o = lock(&self.out);
            o.out = out;
            std::mem::take(&mut o.listeners)
        };
        listeners.tell();
    }
}

impl<T: Clone + Send + Sync + 'static> Cancellable<T> {
    /// Starts `fut`: its first poll is scheduled on the runtime at once (so the call is made,
    /// its request published, whether or not anyone waits yet).
    fn spawn(fut: impl Future<Output = T> + Send + 'static) -> Self {
        let driven = Arc::new(Driven {
            fut: Mutex::new(Some(Box::pin(fut))),
            out: Mutex::new(Settled { out: Out::Waiting, listeners: Listeners::None, next_wait: 0 }),
            scheduled: std::sync::atomic::AtomicBool::new(false),
            cancelled: std::sync::atomic::AtomicBool::new(false),
        });
        driven.clone().schedule();
        Cancellable { driven }
    }

    /// The result, or `None` when the future was dropped before it produced one.
    async fn wait(&self) -> Option<T> {
        Wait { driven: &self.driven, id: None }.await
    }

    /// `None` while waiting; then the result, or `Some(None)` when the future was dropped
    /// before it produced one.
    fn outcome(&self) -> Option<Option<T>> {
        match &lock(&self.driven.out).out {
            Out::Done(v) => Some(Some((**v).clone())),
            Out::Cancelled => Some(None),
            Out::Waiting => None,
        }
    }

    /// Tells `listener` once the outcome is in: from the thread that settles it, or at once,
    /// here, when it already is.
    fn when_settled(&self, listener: Listener) {
        {
            let mut o = lock(&self.driven.out);
            if matches!(o.out, Out::Waiting) {
                o.listeners.push(listener);
                return;
            }
        }
        Listeners::One(listener).tell();
    }

    /// [`when_settled`](Self::when_settled) with a registered sink's token.
    fn when_settled_token(&self, sink: u32, token: u64) -> Result<(), SignoffError> {
        let known = (sink as usize) < SINKS.read().unwrap_or_else(|e| e.into_inner()).len();
        if !known {
            return Err(core::Error::Config(format!(
                "settled sink {sink} is not registered (use the id `registerSettledSink` returned)"
            ))
            .into());
        }
        self.when_settled(Listener::Token(sink, token));
        Ok(())
    }

    fn cancel(&self) {
        self.driven.cancelled.store(true, std::sync::atomic::Ordering::SeqCst);
        self.driven.clone().schedule();
    }

    /// True once a result is in, or the future is gone (cancelled).
    fn is_finished(&self) -> bool {
        !matches!(lock(&self.driven.out).out, Out::Waiting)
    }
}

/// A `wait()`: registered with the outcome while it waits, unregistered if dropped first (a
/// caller that gives up waiting leaves nothing behind).
struct Wait<'a, T> {
    driven: &'a Driven<T>,
    id: Option<u64>,
}

impl<T: Clone> Future for Wait<'_, T> {
    type Output = Option<T>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        use std::task::Poll;
        let mut o = lock(&self.driven.out);
        match &o.out {
            Out::Done(v) => return Poll::Ready(Some((**v).clone())),
            Out::Cancelled => return Poll::Ready(None),
            Out::Waiting => {}
        }
        let registered = self.id.and_then(|id| {
            o.listeners.as_mut_slice().iter_mut().find_map(|l| match l {
                Listener::Wait(i, w) if *i == id => Some(w),
                _ => None,
            })
        });
        match registered {
            Some(w) => {
                if !w.will_wake(cx.waker()) {
                    *w = cx.waker().clone();
                }
            }
            None => {
                let id = o.next_wait;
                o.next_wait += 1;
                o.listeners.push(Listener::Wait(id, cx.waker().clone()));
                drop(o);
                self.id = Some(id);
            }
        }
        Poll::Pending
    }
}

impl<T> Drop for Wait<'_, T> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            lock(&self.driven.out).listeners.retain(|l| !matches!(l, Listener::Wait(i, _) if *i == id));
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Drop for Cancellable<T> {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A confirmation in flight (`Gate.confirmCancellable`). `wait()` returns the decision;
/// `cancel()` cancels the confirmation, which denies: `wait()` then returns
/// `.cancelled(requestId: nil, reason: .aborted)` unless a decision had already been made.
/// Dropping the handle cancels too.
#[derive(uniffi::Object)]
pub struct PendingConfirmation {
    task: Cancellable<Result<core::Decision, core::Error>>,
}

#[uniffi::export]
impl PendingConfirmation {
    /// The decision. Errors (the call was refused, nobody was asked): `unknownTool`,
    /// `invalidArguments`, `store`.
    pub async fn wait(&self) -> Result<Decision, SignoffError> {
        decision_of(self.task.wait().await)
    }

    /// Calls `listener.settled()` once the decision is in (at once when it already is); then
    /// `decision()` returns it. What the Swift extension's `confirm(_:)` waits with: a
    /// continuation resumed by the listener keeps no Rust future per pending call (a `wait()`
    /// keeps one of ~500 bytes).
    pub fn when_settled(&self, listener: Arc<dyn SettledListener>) {
        self.task.when_settled(Listener::Foreign(listener));
    }

    /// `whenSettled(listener:)` for many calls at once: `sink` (an id from
    /// `registerSettledSink`) is told `token` once this call is settled (at once when it already
    /// is). Nothing is allocated per call, on either side of the FFI. Errors: `config` for a sink
    /// id that was never registered.
    pub fn when_settled_token(&self, sink: u32, token: u64) -> Result<(), SignoffError> {
        self.task.when_settled_token(sink, token)
    }

    /// The decision, as `wait()` returns it, once it is in; nil while the call still waits.
    pub fn decision(&self) -> Result<Option<Decision>, SignoffError> {
        self.task.outcome().map(decision_of).transpose()
    }

    pub fn cancel(&self) {
        self.task.cancel();
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

fn decision_of(outcome: Option<Result<core::Decision, core::Error>>) -> Result<Decision, SignoffError> {
    match outcome {
        Some(r) => Ok(r?.into()),
        // The core future was dropped: the core cancelled the request (if it had made one)
        // with `aborted`; the call does not run.
        None => Ok(Decision::Cancelled { request_id: None, reason: CancelReason::Aborted }),
    }
}

/// Told when a pending call is settled (`PendingConfirmation.whenSettled`). Called once, from a
/// thread of the library's (or at once, from `whenSettled`, when the call already is): it must
/// return quickly (resume a continuation, post to a queue), never block.
#[uniffi::export(with_foreign)]
pub trait SettledListener: Send + Sync {
    fn settled(&self);
}

/// Told the token of each pending call that settles (`whenSettledToken`): one object for any
/// number of calls, where a `SettledListener` is one per call. What the Swift extension's
/// `confirm`, `execute` and `executeBatch` wait with (a million waiting calls then cost no
/// listener object each). Called from a thread of the library's (or at once, from
/// `whenSettledToken`, when the call already is settled): it must return quickly.
#[uniffi::export(with_foreign)]
pub trait SettledSink: Send + Sync {
    fn settled(&self, token: u64);
}

/// Sinks are few (a process needs one) and live as long as the process: ids are indexes.
static SINKS: std::sync::RwLock<Vec<Arc<dyn SettledSink>>> = std::sync::RwLock::new(Vec::new());

/// At most this many sinks per process: registering one per call would be a leak.
const MAX_SINKS: usize = 64;

/// Registers `sink` for the life of the process and returns its id, for
/// `whenSettledToken(sink:token:)` on pending calls. Errors: `config` after 64 registrations
/// (register one sink and reuse it).
#[uniffi::export]
pub fn register_settled_sink(sink: Arc<dyn SettledSink>) -> Result<u32, SignoffError> {
    let mut sinks = SINKS.write().unwrap_or_else(|e| e.into_inner());
    if sinks.len() >= MAX_SINKS {
        return Err(core::Error::Config(format!(
            "{MAX_SINKS} settled sinks are registered already: register one and reuse it for every call"
        ))
        .into());
    }
    sinks.push(sink);
    Ok((sinks.len() - 1) as u32)
}

/// An execution in flight (`Gate.executeCancellable`). `wait()` returns the result, or nil when
/// it was cancelled first. Cancelling follows the core's rule (`Gate::execute`): while the call
/// waits for a decision, its request is cancelled (`aborted`) and the tool never runs; once the
/// tool has started, it is not interrupted: it runs to the end and its result is recorded (audit
/// `execution`, store `done`); only this handle does not receive it.
#[derive(uniffi::Object)]
pub struct PendingExecution {
    task: Cancellable<core::ToolResult>,
}

#[uniffi::export]
impl PendingExecution {
    pub async fn wait(&self) -> Option<ToolResult> {
        self.task.wait().await.map(Into::into)
    }

    /// Calls `listener.settled()` once the result is in or the execution was cancelled (at
    /// once when it already is); then `result()` returns it (as `PendingConfirmation.whenSettled`).
    pub fn when_settled(&self, listener: Arc<dyn SettledListener>) {
        self.task.when_settled(Listener::Foreign(listener));
    }

    /// `whenSettled(listener:)` for many calls at once: `sink` (an id from
    /// `registerSettledSink`) is told `token` once this call is settled (at once when it already
    /// is). Nothing is allocated per call, on either side of the FFI. Errors: `config` for a sink
    /// id that was never registered.
    pub fn when_settled_token(&self, sink: u32, token: u64) -> Result<(), SignoffError> {
        self.task.when_settled_token(sink, token)
    }

    /// The result, as `wait()` returns it, once settled; nil while the call still runs, and nil
    /// when it was cancelled first (`isFinished()` tells which).
    pub fn result(&self) -> Option<ToolResult> {
        self.task.outcome().flatten().map(Into::into)
    }

    pub fn cancel(&self) {
        self.task.cancel();
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// A batch in flight (`Gate.executeBatchCancellable`). Results come in the order of the calls;
/// nil when cancelled first.
#[derive(uniffi::Object)]
pub struct PendingBatch {
    task: Cancellable<Vec<core::ToolResult>>,
}

#[uniffi::export]
impl PendingBatch {
    pub async fn wait(&self) -> Option<Vec<ToolResult>> {
        self.task.wait().await.map(|v| v.into_iter().map(Into::into).collect())
    }

    /// Calls `listener.settled()` once the results are in or the batch was cancelled (at once
    /// when it already is); then `results()` returns them.
    pub fn when_settled(&self, listener: Arc<dyn SettledListener>) {
        self.task.when_settled(Listener::Foreign(listener));
    }

    /// `whenSettled(listener:)` for many calls at once: `sink` (an id from
    /// `registerSettledSink`) is told `token` once this call is settled (at once when it already
    /// is). Nothing is allocated per call, on either side of the FFI. Errors: `config` for a sink
    /// id that was never registered.
    pub fn when_settled_token(&self, sink: u32, token: u64) -> Result<(), SignoffError> {
        self.task.when_settled_token(sink, token)
    }

    /// The results, as `wait()` returns them, once settled; nil while the calls still run, and
    /// nil when the batch was cancelled first (`isFinished()` tells which).
    pub fn results(&self) -> Option<Vec<ToolResult>> {
        self.task.outcome().flatten().map(|v| v.into_iter().map(Into::into).collect())
    }

    pub fn cancel(&self) {
        self.task.cancel();
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

// ---------------------------------------------------------------------------------------------
// subscription

/// A stream of the gate's events (`Gate.subscribe`, `Gate.observe`): the core's `Subscription`.
/// `next()` returns nil once the subscription is closed, and after the gate closes (once it has
/// delivered the events published before). `close()` (or dropping it) detaches it: when it was
/// the last approver of a gate with `denyWhenUnobserved`, every pending request is cancelled.
#[derive(uniffi::Object)]
pub struct Subscription {
    inner: tokio::sync::Mutex<core::Subscription>,
    closer: core::SubscriptionCloser,
}

impl Subscription {
    fn new(inner: core::Subscription) -> Arc<Self> {
        Arc::new(Subscription { closer: inner.closer(), inner: tokio::sync::Mutex::new(inner) })
    }
}

#[uniffi::export]
impl Subscription {
    /// The next event, in order; nil once closed (a `next()` waiting meanwhile returns nil at once).
    pub async fn next(&self) -> Option<GateEvent> {
        Some(match self.inner.lock().await.recv().await? {
            Ok(event) => event.into(),
            Err(lagged) => lagged.into(),
        })
    }

    /// Ends the subscription now (idempotent), from any thread.
    pub fn close(&self) {
        self.closer.close();
    }
}

// ---------------------------------------------------------------------------------------------
// gate

/// The approval gate.
#[derive(uniffi::Object)]
pub struct Gate {
    inner: core::Gate,
}

impl Gate {
    fn register(&self, spec: ToolSpec, executor: Option<Arc<dyn ToolExecutor>>) -> Result<(), SignoffError> {
        let mut tool = core::Tool::from_spec(spec.into_core()?);
        if let Some(e) = executor {
            tool = tool.with_context_executor(executor_from_foreign(e));
        }
        Ok(self.inner.register(tool)?)
    }
}

#[uniffi::export]
impl Gate {
    /// A gate with the core's defaults, kept in memory. Any other option (a timeout, keywords,
    /// `denyWhenUnobserved`, a store, an audit log, token keys, ...) goes through
    /// `Gate.open(config:keys:)`, which the core checks.
    #[uniffi::constructor]
    pub fn new() -> Arc<Self> {
        // Its warnings and errors name Swift's API, as a gate from `Gate.open` does.
        let inner = core::Gate::builder().host(core::Host::Swift).build().expect("a gate without tools always builds");
        Arc::new(Gate { inner })
    }

    /// Registers (or replaces) a tool without an executor (confirm-only).
    pub fn register_tool(&self, spec: ToolSpec) -> Result<(), SignoffError> {
        self.register(spec, None)
    }

    /// Registers (or replaces) a tool that `execute` can run.
    pub fn register_executable_tool(
        &self,
        spec: ToolSpec,
        executor: Arc<dyn ToolExecutor>,
    ) -> Result<(), SignoffError> {
        self.register(spec, Some(executor))
    }

    /// Registers a tool from the core's `ToolSpec` JSON (no executor).
    pub fn register_tool_json(&self, json: String) -> Result<(), SignoffError> {
        let v = parse_json("tool definition", &json)?;
        Ok(self.inner.register_spec(core::ToolSpec::from_json(v)?)?)
    }

    /// Removes a tool; later calls to it are `unknownTool`.
    pub fn unregister_tool(&self, name: String) -> bool {
        self.inner.unregister(&name)
    }

    /// Every registered tool's spec, sorted by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.inner.tools().into_iter().map(Into::into).collect()
    }

    /// Whether a call would need approval right now, and why (no request is made).
    pub fn evaluate(&self, call: ToolCall) -> Result<Evaluation, SignoffError> {
        Ok(self.inner.evaluate(&call.into_core()?)?)
    }

    /// Starts a confirmation: asks for approval when the call needs it. The Swift extension's
    /// `confirm(_:)` awaits it and cancels it when the task is cancelled.
    pub fn confirm_cancellable(&self, call: ToolCall) -> Result<Arc<PendingConfirmation>, SignoffError> {
        let call = call.into_core()?;
        Ok(Arc::new(PendingConfirmation { task: Cancellable::spawn(self.inner.confirm_owned(call)) }))
    }

    /// Starts an execution: confirm, then run the tool's executor at most once. The result is
    /// never an error (refusals, denials and failures are `ToolResult`s); only `arguments_json`
    /// or `metadata_json` text the core's strict JSON parser refuses throws `malformed`.
    pub fn execute_cancellable(&self, call: ToolCall) -> Result<Arc<PendingExecution>, SignoffError> {
        let call = call.into_core()?;
        let gate = self.inner.clone();
        Ok(Arc::new(PendingExecution { task: Cancellable::spawn(async move { gate.execute(call).await }) }))
    }

    /// Starts a batch of calls from one model turn; every call proceeds concurrently and the
    /// results come back in the order of `calls`.
    pub fn execute_batch_cancellable(&self, calls: Vec<ToolCall>) -> Result<Arc<PendingBatch>, SignoffError> {
        let calls = calls.into_iter().map(ToolCall::into_core).collect::<Result<Vec<_>, _>>()?;
        let gate = self.inner.clone();
        Ok(Arc::new(PendingBatch { task: Cancellable::spawn(async move { gate.execute_batch(calls).await }) }))
    }

    /// Answers a pending request. The first valid response wins; a rejected one leaves the
    /// request as it was. Errors: `unknownRequest`, `alreadyResolved`, `expired`, `mismatch`,
    /// `unauthorized`, `editsNotAllowed`, `invalidArguments`, `malformed`, `closed`.
    pub fn respond(&self, response: ConfirmationResponse) -> Result<Outcome, SignoffError> {
        Ok(self.inner.respond(response.into_core()?)?)
    }

    /// `respond` without holding the calling thread while the answer is recorded: with a
    /// durable store the commit happens on this library's blocking threads, and this returns
    /// once it is recorded (at once with the in-memory store). Same outcome and errors as
    /// `respond`. The answer stands even if the awaiting task is cancelled.
    pub async fn respond_async(&self, response: ConfirmationResponse) -> Result<Outcome, SignoffError> {
        let response = response.into_core()?;
        let answer = {
            let _rt = runtime().enter();
            self.inner.respond_async(response)
        };
        Ok(answer.await?)
    }

    /// Answers with a JSON `confirmation-response` (e.g. from a remote UI).
    pub fn respond_json(&self, json: String) -> Result<Outcome, SignoffError> {
        Ok(self.inner.respond_json(&json)?)
    }

    /// Approves `request` as shown (bound to its id, tool, digest and session), optionally with
    /// edited arguments, for this call or the whole session.
    #[uniffi::method(default(arguments_json = None, scope = None, responder = None))]
    pub fn approve(
        &self,
        request: ConfirmationRequest,
        arguments_json: Option<String>,
        scope: Option<Scope>,
        responder: Option<String>,
    ) -> Result<Outcome, SignoffError> {
        let pending = core::PendingRequest::new(self.inner.clone(), Arc::new(request.into_core()?));
        let args = arguments_json.as_deref().map(|a| parse_value("edited arguments", a)).transpose()?;
        Ok(pending.approve_with(args, scope.unwrap_or_default(), responder)?)
    }

    /// Denies `request` (bound to what was shown), with an optional reason the model will read.
    #[uniffi::method(default(reason = None, responder = None))]
    pub fn deny(
        &self,
        request: ConfirmationRequest,
        reason: Option<String>,
        responder: Option<String>,
    ) -> Result<Outcome, SignoffError> {
        let pending = core::PendingRequest::new(self.inner.clone(), Arc::new(request.into_core()?));
        Ok(pending.deny(reason, responder)?)
    }

    /// Subscribes to the bus from now on, as an approver (someone who shows requests to a person
    /// and answers them). Subscribe before confirming: with `denyWhenUnobserved` a request with no
    /// approver attached is cancelled at once (`noApprover`).
    pub fn subscribe(&self) -> Arc<Subscription> {
        Subscription::new(self.inner.subscribe())
    }

    /// Watches the bus from now on without being an approver (a log, a display that never
    /// answers): it sees every event, but never keeps a request waiting for nobody.
    pub fn observe(&self) -> Arc<Subscription> {
        Subscription::new(self.inner.observe())
    }

    /// `subscribe()` delivering only events of `types` (and `.lagged`, which reports missed
    /// events of any type): an approver reading only `[.request]` is not handed the response and
    /// the resolution that follow each of its answers.
    pub fn subscribe_only(&self, types: Vec<EventType>) -> Arc<Subscription> {
        Subscription::new(self.inner.subscribe().only(types::event_types(&types)))
    }

    /// `observe()` delivering only events of `types` (and `.lagged`).
    pub fn observe_only(&self, types: Vec<EventType>) -> Arc<Subscription> {
        Subscription::new(self.inner.observe().only(types::event_types(&types)))
    }

    /// Calls `handler` for every request from now on (and every request already pending), each
    /// concurrently. A handler that returns without answering, or throws, ends its request at once
    /// as cancelled (`approvalFailed`); the error's text never reaches the model.
    pub fn on_request(&self, handler: Arc<dyn ApprovalHandler>) -> Arc<HandlerRegistration> {
        let callback: core::RequestHandler = Arc::new(move |pending: core::PendingRequest| {
            let handler = handler.clone();
            async move { handler.handle(Arc::new(PendingRequest { inner: pending })).await.map_err(|e| e.to_string()) }
                .boxed()
        });
        let _rt = runtime().enter();
        let guard = self.inner.on_request(callback);
        Arc::new(HandlerRegistration { guard: Mutex::new(Some(guard)) })
    }

    /// Every pending request, oldest first: what a UI shows when it opens. This copies the whole
    /// list: where many may be pending, read it with `pendingPage(after:limit:)`.
    pub fn pending(&self) -> Vec<ConfirmationRequest> {
        self.inner.pending().iter().map(|r| (&**r).into()).collect()
    }

    /// Up to `limit` pending requests (from 1), oldest first, after the cursor `after` (a
    /// previous page's `next`, or a lagged event's `more`; from the oldest when nil). Each page
    /// costs O(limit) however many are pending; paging neither skips nor repeats a request that
    /// stays pending, and requests made meanwhile appear on a later page. Errors: `malformed`
    /// for an `after` that is not such a cursor, or a `limit` of 0.
    #[uniffi::method(default(after = None, limit = 1000))]
    pub fn pending_page(&self, after: Option<String>, limit: u32) -> Result<PendingPage, SignoffError> {
        let limit = core::PendingPage::limit(f64::from(limit), "limit")?;
        let after = after.as_deref().map(parse_cursor).transpose()?;
        Ok(self.inner.pending_page(after.as_ref(), limit).into())
    }

    pub fn pending_count(&self) -> u64 {
        self.inner.pending_count() as u64
    }

    /// Cancels one pending request (`aborted`). Returns whether it was still pending.
    pub fn cancel_request(&self, id: String) -> Result<bool, SignoffError> {
        Ok(self.inner.cancel_request(&types::request_id(&id)?))
    }

    /// Ends a session: drops its grants and cancels its pending requests. Returns how many
    /// requests were cancelled.
    pub fn end_session(&self, session_id: String) -> u64 {
        self.inner.end_session(&session_id) as u64
    }

    /// Revokes a session grant. Returns whether one existed.
    pub fn revoke_grant(&self, session_id: String, tool: String) -> bool {
        self.inner.revoke_grant(&session_id, &tool)
    }

    /// The tools granted for a session, sorted.
    pub fn grants(&self, session_id: String) -> Vec<String> {
        self.inner.grants(&session_id)
    }

    /// Shuts the gate down: pending requests are cancelled (`shutdown`), and so is every later
    /// call that needs approval, at once (a session grant or disabled gating no longer lets one
    /// through; a tool that needs no approval still runs); later responses fail with `closed`.
    /// Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// How many approvers are attached: approver subscriptions and handlers (observers do not
    /// count). 0 once the gate is closed (nothing is asked any more).
    pub fn approver_count(&self) -> u64 {
        self.inner.approver_count() as u64
    }

    pub fn gating_disabled(&self) -> bool {
        self.inner.gating_disabled()
    }
}
