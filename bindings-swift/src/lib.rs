//! uniffi bindings for `signoff`, built as `signoff_ffi` (cdylib + staticlib) for the Swift
//! package in this directory (and, over the same C ABI, uniffi's Python bindings used by the
//! test suite here).
//!
//! This crate only converts types and bridges async. Every rule (policy, matching, timeouts,
//! "a handler that failed or did not answer ends its request as cancelled/approval-failed",
//! strict JSON, cancel-on-drop) is the core's.
//!
//! Async: every core future runs on this library's own multi-thread tokio runtime; what the
//! foreign side awaits is runtime-agnostic (a `watch` channel, the core's `Subscription`), so
//! uniffi's `tokio` feature is not needed. Foreign callbacks (handler, executor) are async foreign
//! trait methods: calling one only starts a Swift `Task` / Python coroutine and returns, so no
//! tokio worker is ever blocked on foreign code.
//!
//! Cancellation: uniffi does not propagate Swift task cancellation into Rust futures, so each
//! long wait is a spawned task behind a handle (`PendingConfirmation`, `PendingExecution`,
//! `PendingBatch`) with `cancel()`; cancelling (or dropping the handle) drops the core future,
//! and the core's rule applies: a call still waiting for a decision has its request cancelled
//! (`aborted`) and never runs; a tool that has started runs to the end on this runtime and its
//! result is recorded. The Swift extension calls `cancel()` from `withTaskCancellationHandler`.

use futures_util::FutureExt;
use signoff as core;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::watch;

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

/// A core future running on the runtime; its result is shared through a watch channel so any
/// number of `wait()`s see it. `cancel()` (or dropping the handle) aborts the task, which drops
/// the core future.
struct Cancellable<T: Clone + Send + Sync + 'static> {
    rx: watch::Receiver<Option<T>>,
    abort: tokio::task::AbortHandle,
}

impl<T: Clone + Send + Sync + 'static> Cancellable<T> {
    fn spawn(fut: impl Future<Output = T> + Send + 'static) -> Self {
        let (tx, rx) = watch::channel(None);
        let task = runtime().spawn(async move {
            let v = fut.await;
            let _ = tx.send(Some(v));
        });
        Cancellable { rx, abort: task.abort_handle() }
    }

    /// The result, or `None` when the task was cancelled before it produced one.
    async fn wait(&self) -> Option<T> {
        let mut rx = self.rx.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone(),
            Err(_) => None,
        }
    }

    fn cancel(&self) {
        self.abort.abort();
    }

    /// True once a result is in, or the task is gone (cancelled).
    fn is_finished(&self) -> bool {
        self.rx.borrow().is_some() || self.rx.has_changed().is_err() || self.abort.is_finished()
    }
}

impl<T: Clone + Send + Sync + 'static> Drop for Cancellable<T> {
    fn drop(&mut self) {
        self.abort.abort();
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
        match self.task.wait().await {
            Some(r) => Ok(r?.into()),
            // The core future was dropped: the core cancelled the request (if it had made one)
            // with `aborted`; the call does not run.
            None => Ok(Decision::Cancelled { request_id: None, reason: CancelReason::Aborted }),
        }
    }

    pub fn cancel(&self) {
        self.task.cancel();
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
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
        Arc::new(Gate { inner: core::Gate::new() })
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

    /// Up to `limit` pending requests (at least 1), oldest first, after the cursor `after` (a
    /// previous page's `next`, or a lagged event's `more`; from the oldest when nil). Each page
    /// costs O(limit) however many are pending; paging neither skips nor repeats a request that
    /// stays pending, and requests made meanwhile appear on a later page. Errors: `malformed`
    /// for an `after` that is not such a cursor.
    #[uniffi::method(default(after = None, limit = 1000))]
    pub fn pending_page(&self, after: Option<String>, limit: u32) -> Result<PendingPage, SignoffError> {
        let after = after.as_deref().map(parse_cursor).transpose()?;
        Ok(self.inner.pending_page(after.as_ref(), limit as usize).into())
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

    /// Shuts the gate down: pending requests are cancelled (`shutdown`), later ones at once,
    /// later responses fail with `closed`. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// How many approvers are attached: approver subscriptions and handlers (observers do not
    /// count).
    pub fn approver_count(&self) -> u64 {
        self.inner.approver_count() as u64
    }

    pub fn gating_disabled(&self) -> bool {
        self.inner.gating_disabled()
    }
}
