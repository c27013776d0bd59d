//! Running tool calls: confirm, then execute at most once, and tell the model what happened.

use crate::audit::{AuditKind, AuditRecord};
use crate::display;
use crate::error::{Error, ErrorKind};
use crate::event::CancelReason;
use crate::gate::{Decision, Gate, ToolCall};
use crate::store::{RecordState, StateChange};
use crate::tool::ExecResult;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

/// What became of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolStatus {
    /// The tool ran and returned a value.
    Executed,
    /// The tool ran and returned an error (or panicked).
    Failed,
    /// A person declined; the tool did not run.
    Denied,
    /// Nobody answered in time; the tool did not run.
    TimedOut,
    /// The request was cancelled (no approver, shutdown, abort, session end); the tool did not run.
    Cancelled,
    /// The call was refused before anyone was asked (unknown tool, invalid arguments, no executor,
    /// pending-store failure).
    Rejected,
}

impl ToolStatus {
    /// True when the tool ran.
    pub fn ran(self) -> bool {
        matches!(self, ToolStatus::Executed | ToolStatus::Failed)
    }
}

/// The result of one call, in the model's terms. `content` is the text to hand back to the model
/// as the tool message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The model's id for the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The tool's name, as called.
    pub tool: String,
    /// What became of the call.
    pub status: ToolStatus,
    /// The tool's output, when it ran and succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The tool's error, or why the call was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error kind, when rejected ([`ToolStatus::Rejected`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// The arguments the tool ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The person changed the arguments before approving.
    #[serde(default)]
    pub edited: bool,
    /// The confirmation request, if one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<Uuid>,
    /// The decision, as the gate made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Text for the model.
    pub content: String,
}

impl ToolResult {
    /// True unless the tool ran successfully: for Anthropic-style `is_error`.
    pub fn is_error(&self) -> bool {
        self.status != ToolStatus::Executed
    }

    fn rejected(call: &ToolCall, e: &Error) -> Self {
        Self::rejected_parts(call.call_id.clone(), call.tool.clone(), e)
    }

    fn rejected_parts(call_id: Option<String>, tool: String, e: &Error) -> Self {
        ToolResult {
            content: format!("The call to `{tool}` was refused and did not run: {e}."),
            call_id,
            tool,
            status: ToolStatus::Rejected,
            output: None,
            error: Some(e.to_string()),
            error_kind: Some(e.kind()),
            arguments: None,
            edited: false,
            request_id: None,
            decision: None,
        }
    }
}

const DO_NOT_RETRY: &str =
    "Do not retry the same call; continue without it, or ask the user what they would like to do instead.";

/// The text the model reads for a call that did not run.
pub(crate) fn declined_text(tool: &str, d: &Decision) -> String {
    match d {
        Decision::Denied { reason: Some(r), .. } if !r.trim().is_empty() => {
            format!(
                "The user declined this call to `{tool}`, so the tool did not run. Their reason: \"{r}\". {DO_NOT_RETRY}"
            )
        }
        Decision::Denied { .. } => {
            format!("The user declined this call to `{tool}`, so the tool did not run. {DO_NOT_RETRY}")
        }
        Decision::TimedOut { timeout_ms, .. } => format!(
            "Nobody approved this call to `{tool}` within {}, so the tool did not run. {DO_NOT_RETRY}",
            human_duration(*timeout_ms)
        ),
        Decision::Cancelled { reason, .. } => {
            let why = match reason {
                CancelReason::NoApprover => "no one was available to approve it",
                CancelReason::Shutdown => "the application is shutting down",
                CancelReason::Aborted => "the request was aborted",
                CancelReason::SessionEnded => "the session ended",
                CancelReason::ApprovalFailed => {
                    return format!(
                        "This call to `{tool}` did not run: the approval step failed before anyone decided, so \
                         nobody approved it (this is not a person's refusal). {DO_NOT_RETRY}"
                    );
                }
            };
            format!(
                "This call to `{tool}` was cancelled before anyone approved it ({why}), so the tool did not run. {DO_NOT_RETRY}"
            )
        }
        Decision::Approved { .. } => String::new(),
    }
}

fn human_duration(ms: u64) -> String {
    if ms.is_multiple_of(1000) { format!("{} s", ms / 1000) } else { format!("{ms} ms") }
}

fn output_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => display::canonical_json(other),
    }
}

/// How many tools are running, and a wake-up for whoever waits for none to be.
#[derive(Default)]
pub(crate) struct Runs {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One running tool, counted in [`Runs`] until dropped (finished, or its run dropped).
struct Running(Arc<Runs>);

impl Running {
    fn new(runs: &Arc<Runs>) -> Self {
        runs.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Running(runs.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The tool's run, detached from its caller: polled in place (no task, no thread hop) while the
/// caller waits; handed to the tokio runtime it started on if the caller's future is dropped, so
/// a started tool always finishes and its result is recorded.
struct Detached {
    run: Option<BoxFuture<'static, ToolResult>>,
    runtime: Option<tokio::runtime::Handle>,
}

impl Detached {
    fn new(run: BoxFuture<'static, ToolResult>) -> Self {
        Detached { run: Some(run), runtime: tokio::runtime::Handle::try_current().ok() }
    }
}

impl std::future::Future for Detached {
    type Output = ToolResult;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<ToolResult> {
        let run = self.run.as_mut().expect("`Detached` polled after completion");
        let out = run.as_mut().poll(cx);
        if out.is_ready() {
            self.run = None;
        }
        out
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if let (Some(run), Some(rt)) = (self.run.take(), self.runtime.take()) {
            rt.spawn(run);
        }
    }
}

impl Gate {
    /// How many approved (or ungated) calls are running their tool now, their callers waiting
    /// or not.
    pub fn running_tools(&self) -> usize {
        self.inner.runs.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Completes once no tool is running ([`running_tools`](Self::running_tools) is zero), at
    /// once if none is. For a host that stops after [`close`](Self::close): the tools already
    /// running are not interrupted, and waiting for them (bounded by the host's own grace
    /// period) lets their results be recorded before the process ends.
    pub async fn tools_finished(&self) {
        let runs = &self.inner.runs;
        loop {
            let idle = runs.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if runs.count.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Confirms a call and, if approved, runs its executor exactly once.
    ///
    /// Never returns an error: an unknown tool, invalid arguments or a missing executor give a
    /// [`ToolStatus::Rejected`] result (checked before anyone is asked), a decision not to run
    /// gives `Denied` / `TimedOut` / `Cancelled`, and a failing or panicking executor gives
    /// `Failed`. `content` is always ready for the model.
    ///
    /// **Cancellation** (dropping this future; a cancelled task or an abort signal in the
    /// bindings), the same in every language:
    /// - while the call waits for a decision: its request is cancelled
    ///   ([`CancelReason::Aborted`]) and the tool never runs;
    /// - once the call was approved (its `executing` record being stored, or the tool running):
    ///   the tool is not interrupted. It runs to the end on the runtime
    ///   it started on, and its result is recorded (audit `execution`, store `done`); only the
    ///   cancelled caller does not receive it.
    pub async fn execute(&self, call: ToolCall) -> ToolResult {
        let tool = match self.tool(&call.tool) {
            Ok(t) => t,
            Err(e) => return ToolResult::rejected(&call, &e),
        };
        let Some(executor) = tool.tool.executor.clone() else {
            return ToolResult::rejected(&call, &Error::NoExecutor(call.tool.clone()));
        };
        let session = call.session_id.clone();
        let call_id = call.call_id.clone();
        let name = call.tool.clone();
        let decision = match self.confirm_tool(tool, call).await {
            Ok(d) => d,
            Err(e) => return ToolResult::rejected_parts(call_id, name, &e),
        };
        self.run_decided(executor, name, session, call_id, decision).await
    }

    /// Runs an approved call exactly once (recording `executing` before and `done` after, in a
    /// durable store), or turns any other decision into the model's text.
    pub(crate) async fn run_decided(
        &self,
        executor: crate::tool::ContextExecutor,
        name: String,
        session: String,
        call_id: Option<String>,
        decision: Decision,
    ) -> ToolResult {
        let request_id = decision.request_id();
        let (arguments, edited) = match &decision {
            Decision::Approved { arguments, edited, .. } => (arguments.clone(), *edited),
            other => {
                let status = match other {
                    Decision::Denied { .. } => ToolStatus::Denied,
                    Decision::TimedOut { .. } => ToolStatus::TimedOut,
                    _ => ToolStatus::Cancelled,
                };
                return ToolResult {
                    call_id,
                    content: declined_text(&name, other),
                    tool: name,
                    status,
                    output: None,
                    error: None,
                    error_kind: None,
                    arguments: None,
                    edited: false,
                    request_id,
                    decision: Some(decision),
                };
            }
        };

        // The one execution that follows this decision. Once approved it runs to the end even if
        // the caller stops waiting (see `execute`): the run owns what it needs and is handed to
        // the runtime when the caller's future is dropped, also while `executing` is committed.
        let gate = self.clone();
        let running = Running::new(&self.inner.runs);
        let run = async move {
            let _running = running;
            // Record before execute: once `executing` is stored, a crash can only ever report this
            // call as interrupted, never run it again. If it cannot be stored, the tool does not run.
            if let Some(id) = request_id
                && let Err(e) = gate.record_state(id, StateChange::to(RecordState::Executing)).await
            {
                let mut r = ToolResult::rejected_parts(call_id, name, &e);
                r.request_id = request_id;
                r.decision = Some(decision);
                return r;
            }
            let context = crate::tool::CallContext {
                tool: name.clone(),
                call_id: call_id.clone(),
                request_id,
                session_id: session.clone(),
                edited,
                gate: Arc::downgrade(&gate.inner),
            };
            let run = std::panic::AssertUnwindSafe(executor(arguments.clone(), context)).catch_unwind().await;
            let result = match run {
                Ok(r) => r,
                Err(_) => Err("the tool panicked".to_owned()),
            };
            gate.finish_execution(result, name, session, call_id, arguments, edited, request_id, decision).await
        };
        Detached::new(run.boxed()).await
    }

    /// Records a finished execution (audit `execution`, store `done`) and words its result.
    #[allow(clippy::too_many_arguments)]
    async fn finish_execution(
        &self,
        result: ExecResult,
        name: String,
        session: String,
        call_id: Option<String>,
        arguments: Value,
        edited: bool,
        request_id: Option<Uuid>,
        decision: Decision,
    ) -> ToolResult {
        if let Some(a) = self.audit_sink() {
            let mut r = AuditRecord::about_call(AuditKind::Execution, &session, &name, call_id.as_deref(), &arguments)
                .with_decision(if result.is_ok() { "ok" } else { "error" });
            r.request_id = request_id;
            r.reason = result.as_ref().err().cloned();
            a.record(r);
        }
        let edit_note = if edited {
            format!(
                "Note: the user changed the arguments before approving; the tool ran with {}.\n",
                display::canonical_json(&arguments)
            )
        } else {
            String::new()
        };
        let result = match result {
            Ok(output) => ToolResult {
                call_id,
                content: format!("{edit_note}{}", output_text(&output)),
                tool: name,
                status: ToolStatus::Executed,
                output: Some(output),
                error: None,
                error_kind: None,
                arguments: Some(arguments),
                edited,
                request_id,
                decision: Some(decision),
            },
            Err(err) => ToolResult {
                call_id,
                content: format!("{edit_note}The tool `{name}` ran and failed: {err}"),
                tool: name,
                status: ToolStatus::Failed,
                output: None,
                error: Some(err),
                error_kind: None,
                arguments: Some(arguments),
                edited,
                request_id,
                decision: Some(decision),
            },
        };
        if let Some(id) = request_id {
            // Only a durable store keeps the result (the in-memory one forgets it at once).
            let durable = self.store().is_durable();
            let stored = if durable { serde_json::to_value(&result).unwrap_or(Value::Null) } else { Value::Null };
            let done = StateChange { result: durable.then_some(&stored), ..StateChange::to(RecordState::Done) };
            if let Err(e) = self.record_state(id, done).await {
                crate::report!("signoff: could not record the result of request {id}: {e}");
            }
        }
        result
    }

    /// Records a state change this call's task waits for (`executing`, `done`). A durable or
    /// shared store commits it without blocking the task's thread where it can
    /// ([`PendingStore::transition_async`]: SQLite with `synchronous_full` hands it to its writer
    /// thread, PostgreSQL to its connection's runtime); the in-memory store records nothing.
    async fn record_state(&self, id: Uuid, change: StateChange<'_>) -> crate::error::Result<()> {
        let store = self.store();
        if store.is_durable() || store.is_shared() {
            store.transition_async(id, change.into()).await
        } else {
            store.transition(&id, change)
        }
    }

    /// Runs a batch of calls from one model turn. Every call proceeds concurrently: ungated calls
    /// run at once, each gated call waits for its own decision. Results come back in the order
    /// of `calls`, each with its call id; each call executes at most once.
    pub async fn execute_batch(&self, calls: Vec<ToolCall>) -> Vec<ToolResult> {
        futures_util::future::join_all(calls.into_iter().map(|c| self.execute(c))).await
    }
}
