//! The gate: decides, publishes, waits, and resolves every request exactly once.

use crate::audit::{AuditKind, AuditRecord, AuditSink};
use crate::display;
use crate::error::{Error, Result};
use crate::event::{
    CancelReason, ConfirmationRequest, ConfirmationResolved, ConfirmationResponse, ConfirmationTimeout, Event, Outcome,
    ResponseDecision, Scope, now_ms,
};
use crate::policy::{CompiledTool, Policy};
use crate::store::{
    AcceptAll, MemoryPendingStore, PendingCursor, PendingStore, RecordState, ResponseAuthenticator, StateChange,
    StoredRecord,
};
use crate::token::{TokenClaims, TokenKeys, TokenResponse};
use crate::tool::{DEFAULT_PROMPT, Tool, ToolSpec};
use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;
use uuid::Uuid;

mod recovery;
mod tokens;
pub use recovery::{NotRestored, Recovery};

/// The session used when a call names none.
pub const DEFAULT_SESSION: &str = "default";

/// A tool call from the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// The arguments (a JSON object for most schemas).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The agent session. Grants never cross sessions.
    #[serde(default = "default_session")]
    pub session_id: String,
    /// The model's id for this call, carried to the request and the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Free metadata, shown with the request.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}
fn default_session() -> String {
    DEFAULT_SESSION.to_owned()
}

impl ToolCall {
    /// A call in the default session.
    pub fn new(tool: impl Into<String>, arguments: Value) -> Self {
        ToolCall { tool: tool.into(), arguments, session_id: default_session(), call_id: None, metadata: Value::Null }
    }
    /// Sets the agent session (grants never cross sessions).
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = session_id.into();
        self
    }
    /// Sets the model's id for this call; it is carried to the request and the result.
    pub fn call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }
    /// Attaches free metadata, shown with the request.
    pub fn metadata(mut self, m: Value) -> Self {
        self.metadata = m;
        self
    }
}

/// Why a call may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovedBy {
    /// The policy does not gate this call.
    NotGated,
    /// A person approved this call.
    Person,
    /// A person approved this tool for the session earlier.
    SessionGrant,
    /// Gating is disabled on this gate (development only).
    GatingDisabled,
}

/// The gate's answer to [`Gate::confirm`]: run (with these arguments) or do not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Decision {
    /// Run the tool with `arguments` (the original ones, or the person's edit).
    Approved {
        /// The request a person answered; `None` when no request was made.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<Uuid>,
        /// The arguments to run with: the original ones, or the person's validated edit.
        arguments: Value,
        /// The person changed the arguments.
        edited: bool,
        /// Why the call may run.
        by: ApprovedBy,
        /// `Session` when the approval (or the grant that covered it) was for the session.
        #[serde(default)]
        scope: Scope,
        /// Who approved.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        responder: Option<String>,
    },
    /// A person said no.
    Denied {
        /// The request that was denied.
        request_id: Uuid,
        /// The person's reason, passed on to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Who denied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        responder: Option<String>,
    },
    /// Nobody answered before the deadline.
    TimedOut {
        /// The request nobody answered.
        request_id: Uuid,
        /// How long it waited.
        timeout_ms: u64,
    },
    /// The request was cancelled before anyone answered.
    Cancelled {
        /// The cancelled request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<Uuid>,
        /// Why it was cancelled.
        reason: CancelReason,
    },
}

impl Decision {
    /// True only for [`Decision::Approved`].
    pub fn is_approved(&self) -> bool {
        matches!(self, Decision::Approved { .. })
    }
    /// The arguments to run with, when approved.
    pub fn arguments(&self) -> Option<&Value> {
        match self {
            Decision::Approved { arguments, .. } => Some(arguments),
            _ => None,
        }
    }
    /// The confirmation request this decision answers, if one was made.
    pub fn request_id(&self) -> Option<Uuid> {
        match self {
            Decision::Approved { request_id, .. } | Decision::Cancelled { request_id, .. } => *request_id,
            Decision::Denied { request_id, .. } | Decision::TimedOut { request_id, .. } => Some(*request_id),
        }
    }
    /// The final outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::Approved { .. } => Outcome::Approved,
            Decision::Denied { .. } => Outcome::Denied,
            Decision::TimedOut { .. } => Outcome::TimedOut,
            Decision::Cancelled { .. } => Outcome::Cancelled,
        }
    }
}

/// What resolved a waiter; sent through its oneshot.
/// A response that passed every check, and the request it claimed.
struct Claimed {
    waiter: Waiter,
    resolution: Resolution,
}

enum Resolution {
    Approved { arguments: Value, edited: bool, scope: Scope, responder: Option<String> },
    Denied { reason: Option<String>, responder: Option<String> },
    TimedOut,
    Cancelled(CancelReason),
}

pub(crate) enum Prepared {
    Done(Decision),
    Wait(Waiting),
}

/// A published request and the receiving end of its decision.
pub(crate) struct Waiting {
    id: Uuid,
    rx: oneshot::Receiver<Resolution>,
    deadline: Instant,
    timeout_ms: u64,
}

struct Waiter {
    tx: oneshot::Sender<Resolution>,
    request: Arc<ConfirmationRequest>,
    tool: Arc<CompiledTool>,
    deadline: Instant,
}

/// Remembers how recent requests ended, to tell `already_resolved` and `expired` from
/// `unknown_request`. Bounded: the oldest are forgotten first.
struct Tombstones {
    map: HashMap<Uuid, Outcome, FxBuildHasher>,
    /// Request id → fingerprint of the approval token that answered it.
    tokens: HashMap<Uuid, String, FxBuildHasher>,
    order: VecDeque<Uuid>,
    cap: usize,
}

impl Tombstones {
    fn add(&mut self, id: Uuid, o: Outcome) {
        if self.cap == 0 {
            return;
        }
        if let Some(existing) = self.map.get_mut(&id) {
            *existing = o;
            return;
        }
        if self.order.len() >= self.cap
            && let Some(old) = self.order.pop_front()
        {
            self.map.remove(&old);
            self.tokens.remove(&old);
        }
        self.map.insert(id, o);
        self.order.push_back(id);
    }
}

/// Configures a [`Gate`].
pub struct GateBuilder {
    policy: Policy,
    store: Option<Arc<dyn PendingStore>>,
    authenticator: Option<Arc<dyn ResponseAuthenticator>>,
    audit: Option<Arc<dyn AuditSink>>,
    bus_capacity: usize,
    deny_when_unobserved: bool,
    remembered: usize,
    tools: Vec<Tool>,
    tokens: Option<TokenKeys>,
    token_ttl: Option<Duration>,
}

impl Default for GateBuilder {
    fn default() -> Self {
        GateBuilder {
            policy: Policy::default(),
            store: None,
            authenticator: None,
            audit: None,
            bus_capacity: 4096,
            deny_when_unobserved: true,
            remembered: 65_536,
            tools: Vec::new(),
            tokens: None,
            token_ttl: None,
        }
    }
}

impl GateBuilder {
    /// Replaces the whole policy.
    pub fn policy(mut self, p: Policy) -> Self {
        self.policy = p;
        self
    }
    /// Replaces the keyword list.
    pub fn keywords<I: IntoIterator<Item = S>, S: Into<String>>(mut self, k: I) -> Self {
        self.policy.keywords = k.into_iter().map(Into::into).collect();
        self
    }
    /// The approval timeout for tools that set none (60 s by default).
    pub fn default_timeout(mut self, t: Duration) -> Self {
        self.policy.default_timeout = t;
        self
    }
    /// DEVELOPMENT ONLY: every call runs without approval. Announced on stderr and in the audit
    /// log when the gate is built.
    pub fn dangerously_disable_gating(mut self, yes: bool) -> Self {
        self.policy.gating_disabled = yes;
        self
    }
    /// Where pending requests are kept (in memory by default).
    pub fn store(mut self, s: Arc<dyn PendingStore>) -> Self {
        self.store = Some(s);
        self
    }
    /// Who may answer (by default any in-process response that matches its request).
    pub fn authenticator(mut self, a: Arc<dyn ResponseAuthenticator>) -> Self {
        self.authenticator = Some(a);
        self
    }
    /// Where audit records go (none by default).
    pub fn audit(mut self, a: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(a);
        self
    }
    /// How many events the bus buffers per subscriber before that subscriber is told it lagged.
    pub fn bus_capacity(mut self, n: usize) -> Self {
        self.bus_capacity = n.max(1);
        self
    }
    /// With `true` (the default), a request published while nobody is subscribed, and every
    /// request pending when the last subscriber goes away, is cancelled at once
    /// ([`CancelReason::NoSubscribers`]). Set `false` when responses come from elsewhere (a
    /// remote UI calling [`Gate::respond`] after listing [`Gate::pending`]): requests then wait
    /// for their deadline.
    pub fn deny_when_unobserved(mut self, yes: bool) -> Self {
        self.deny_when_unobserved = yes;
        self
    }
    /// How many resolved request ids are remembered to classify late responses (65,536).
    pub fn remember_resolved(mut self, n: usize) -> Self {
        self.remembered = n;
        self
    }
    /// The keys approval tokens are signed and verified with (see [`Gate::issue_token`]).
    /// Load them from configuration ([`TokenKeys::from_env`], [`TokenKeys::from_file`]) so
    /// tokens stay valid across a restart.
    pub fn tokens(mut self, keys: TokenKeys) -> Self {
        self.tokens = Some(keys);
        self
    }
    /// How long an issued token is valid (by default until its request's deadline; never
    /// beyond it).
    pub fn token_ttl(mut self, ttl: Duration) -> Self {
        self.token_ttl = Some(ttl);
        self
    }
    /// Registers a tool when the gate is built.
    pub fn tool(mut self, t: Tool) -> Self {
        self.tools.push(t);
        self
    }

    /// Builds the gate; fails with `invalid_tool` if a tool given to [`tool`](Self::tool) is invalid.
    pub fn build(self) -> Result<Gate> {
        let (bus, _) = broadcast::channel(self.bus_capacity);
        let store: Arc<dyn PendingStore> = self.store.unwrap_or_else(|| Arc::new(MemoryPendingStore::new()));
        if let (Some(audit), Some(anchor)) = (&self.audit, store.clone().audit_anchor()) {
            audit.set_anchor(anchor);
        }
        let gate = Gate {
            inner: Arc::new(Inner {
                policy: self.policy,
                tools: RwLock::new(HashMap::default()),
                bus,
                store,
                authenticator: self.authenticator.unwrap_or_else(|| Arc::new(AcceptAll)),
                audit: self.audit,
                waiters: Mutex::new(HashMap::default()),
                grants: Mutex::new(HashMap::new()),
                tombstones: Mutex::new(Tombstones {
                    map: HashMap::default(),
                    tokens: HashMap::default(),
                    order: VecDeque::new(),
                    cap: self.remembered,
                }),
                closed: AtomicBool::new(false),
                subscribers: AtomicUsize::new(0),
                deny_when_unobserved: self.deny_when_unobserved,
                tokens: self.tokens,
                token_ttl: self.token_ttl,
                requests_made: AtomicBool::new(false),
                recovered: AtomicBool::new(false),
                warned_unobserved: AtomicBool::new(false),
            }),
        };

        for t in self.tools {
            gate.register(t)?;
        }
        if gate.inner.policy.gating_disabled {
            eprintln!("signoff: WARNING: gating is DISABLED on this gate; every tool call runs without approval");
            gate.audit(|| {
                let mut r = AuditRecord::new(AuditKind::Notice);
                r.decision = Some("gating-disabled".into());
                r.reason = Some("dangerously_disable_gating is on: every call runs without approval".into());
                r
            });
        }
        Ok(gate)
    }
}

pub(crate) struct Inner {
    pub(crate) policy: Policy,
    tools: RwLock<HashMap<String, Arc<CompiledTool>, FxBuildHasher>>,
    bus: broadcast::Sender<Event>,
    store: Arc<dyn PendingStore>,
    authenticator: Arc<dyn ResponseAuthenticator>,
    audit: Option<Arc<dyn AuditSink>>,
    waiters: Mutex<HashMap<Uuid, Waiter, FxBuildHasher>>,
    /// session id → tools granted for the rest of that session.
    grants: Mutex<HashMap<String, HashSet<String>>>,
    tombstones: Mutex<Tombstones>,
    closed: AtomicBool,
    subscribers: AtomicUsize,
    deny_when_unobserved: bool,
    tokens: Option<TokenKeys>,
    token_ttl: Option<Duration>,
    requests_made: AtomicBool,
    recovered: AtomicBool,
    /// The no-subscribers warning was printed.
    warned_unobserved: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The approval gate. Cheap to clone: every clone is a handle to the same gate.
#[derive(Clone)]
pub struct Gate {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("pending", &self.pending_count()).field("closed", &self.is_closed()).finish()
    }
}

impl Gate {
    /// A gate with default policy, in-memory store, no audit sink.
    pub fn new() -> Self {
        GateBuilder::default().build().expect("a gate without tools always builds")
    }

    /// Configures a gate.
    pub fn builder() -> GateBuilder {
        GateBuilder::default()
    }

    /// Registers (or replaces) a tool. Fails with `invalid_tool` for a bad definition.
    pub fn register(&self, tool: Tool) -> Result<()> {
        let compiled = Arc::new(self.inner.policy.compile(tool)?);
        let name = compiled.name().to_owned();
        self.inner.tools.write().unwrap_or_else(|e| e.into_inner()).insert(name, compiled);
        Ok(())
    }

    /// Registers a tool from its serializable spec (no executor).
    pub fn register_spec(&self, spec: ToolSpec) -> Result<()> {
        self.register(Tool::from_spec(spec))
    }

    /// Removes a tool; later calls to it are `unknown_tool`.
    pub fn unregister(&self, name: &str) -> bool {
        self.inner.tools.write().unwrap_or_else(|e| e.into_inner()).remove(name).is_some()
    }

    /// The specs of every registered tool, sorted by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        let mut v: Vec<_> =
            self.inner.tools.read().unwrap_or_else(|e| e.into_inner()).values().map(|t| t.tool.spec.clone()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub(crate) fn tool(&self, name: &str) -> Result<Arc<CompiledTool>> {
        self.inner
            .tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTool(name.to_owned()))
    }

    /// Whether a call would need approval right now, and why (no request is made).
    pub fn evaluate(&self, call: &ToolCall) -> Result<crate::policy::Evaluation> {
        let tool = self.tool(&call.tool)?;
        crate::json::check(&call.arguments, "arguments")?;
        tool.validate(&call.arguments, "original")?;
        Ok(tool.evaluate(&call.arguments))
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// True when gating is disabled (development only).
    pub fn gating_disabled(&self) -> bool {
        self.inner.policy.gating_disabled
    }

    fn audit(&self, f: impl FnOnce() -> AuditRecord) {
        if let Some(a) = &self.inner.audit {
            a.record(f());
        }
    }

    /// Asks for approval when the call needs it and waits for the decision.
    ///
    /// Returns at once, without touching the bus, when the call needs no approval. Otherwise
    /// publishes a `confirmation-request` and waits until a person answers, the deadline
    /// passes, the gate shuts down, every subscriber goes away, or this future is dropped;
    /// every one of those except an explicit approval is a decision not to run.
    ///
    /// Errors (the call is refused, nothing is asked): `malformed` (arguments or metadata nested
    /// deeper than [`json::MAX_NESTING`](crate::json::MAX_NESTING)), `unknown_tool`, `invalid_arguments`,
    /// `store`.
    pub fn confirm(&self, call: ToolCall) -> Confirm<'_> {
        self.confirm_future(None, call, true)
    }

    /// `confirm` with the tool already looked up (used by `execute`).
    pub(crate) fn confirm_tool(&self, tool: Arc<CompiledTool>, call: ToolCall) -> Confirm<'_> {
        self.confirm_future(Some(tool), call, false)
    }

    pub(crate) fn prepare(&self, tool: Arc<CompiledTool>, call: ToolCall) -> Result<Prepared> {
        crate::json::check(&call.arguments, "arguments")?;
        crate::json::check(&call.metadata, "metadata")?;
        tool.validate(&call.arguments, "original")?;
        if tool.never_gated() {
            return Ok(Prepared::Done(self.bypass(&tool, call, ApprovedBy::NotGated)));
        }
        let eval = tool.evaluate(&call.arguments);
        if !eval.required {
            return Ok(Prepared::Done(self.bypass(&tool, call, ApprovedBy::NotGated)));
        }
        if self.inner.policy.gating_disabled {
            return Ok(Prepared::Done(self.bypass(&tool, call, ApprovedBy::GatingDisabled)));
        }
        if !eval.forced_by_rule
            && lock(&self.inner.grants).get(&call.session_id).is_some_and(|tools| tools.contains(&call.tool))
        {
            return Ok(Prepared::Done(self.bypass(&tool, call, ApprovedBy::SessionGrant)));
        }

        // A request is needed.
        let spec = &tool.tool.spec;
        let timeout = tool.timeout;
        let created = now_ms();
        let timeout_ms = timeout.as_millis().min(u64::MAX as u128) as u64;
        let request = Arc::new(ConfirmationRequest {
            id: Uuid::new_v4(),
            prompt: match &tool.fixed_prompt {
                Some(p) => p.clone(),
                None => display::render_prompt(
                    spec.prompt_template.as_deref().unwrap_or(DEFAULT_PROMPT),
                    &spec.name,
                    &spec.description,
                    &call.arguments,
                ),
            },
            display_arguments: display::display_arguments(&call.arguments),
            arguments_digest: display::arguments_digest(&call.arguments),
            tool: call.tool,
            description: tool.description_display.clone(),
            arguments: call.arguments,
            session_id: call.session_id,
            tool_call_id: call.call_id,
            editable: spec.editable,
            reasons: eval.reasons,
            timeout_ms,
            deadline_ms: created.saturating_add(timeout_ms),
            created_at_ms: created,
            metadata: call.metadata,
        });
        let id = request.id;

        if self.is_closed() {
            self.audit_outcome(&request, Outcome::Cancelled, Some(CancelReason::Shutdown), None, None);
            return Ok(Prepared::Done(Decision::Cancelled { request_id: Some(id), reason: CancelReason::Shutdown }));
        }

        let deadline = Instant::now() + timeout;
        let (tx, rx) = oneshot::channel();
        if !self.inner.requests_made.load(Ordering::Relaxed) {
            self.inner.requests_made.store(true, Ordering::Relaxed);
            self.warn_if_unrecovered();
        }
        {
            // The store makes the request visible (`pending`, `pending_request`): its waiter must
            // exist by then, or a UI that lists it and answers at once would get `unknown_request`.
            // Nothing takes the waiters lock while holding a store lock, so this cannot deadlock.
            let mut waiters = lock(&self.inner.waiters);
            self.inner.store.insert(request.clone())?;
            waiters.insert(id, Waiter { tx, request: request.clone(), tool: tool.clone(), deadline });
        }
        // From here on, dropping the `Confirm` future that holds this cancels the request.
        let waiting = Waiting { id, rx, deadline, timeout_ms };
        self.audit(|| {
            let mut r = record_for(AuditKind::Request, &request);
            r.arguments = Some(request.arguments.clone());
            r.reason = Some(request.reasons.join("; "));
            r
        });
        self.publish(Event::ConfirmationRequest(request));
        // The waiter was inserted before these checks, and `close` / the last subscriber's drop
        // flip their flag before sweeping the waiters: one side or the other always sees it.
        if self.is_closed() {
            self.cancel(id, CancelReason::Shutdown);
        } else if self.inner.deny_when_unobserved
            && self.inner.subscribers.load(Ordering::SeqCst) == 0
            && self.cancel(id, CancelReason::NoSubscribers)
            && !self.inner.warned_unobserved.swap(true, Ordering::Relaxed)
        {
            // A forgotten approver must not look like a silent denial (said once per gate).
            eprintln!(
                "signoff: a call to `{tool}` needs approval, but nothing is listening for confirmation requests, so \
                 it was cancelled at once (no-subscribers) and did not run. Attach an approver before calling \
                 (on_request, an event subscription, a console), or build the gate with \
                 deny_when_unobserved(false) if answers come from elsewhere (respond after listing pending).",
                tool = tool.name()
            );
        }
        Ok(Prepared::Wait(waiting))
    }

    /// The first request on a durable store whose earlier requests were never recovered.
    fn warn_if_unrecovered(&self) {
        if self.inner.store.is_durable()
            && !self.inner.recovered.load(Ordering::SeqCst)
            && let Ok(left) = self.inner.store.unfinished()
            && !left.is_empty()
        {
            eprintln!(
                "signoff: the pending store holds {} unfinished request(s) from an earlier run that were not recovered; call Gate::recover() after registering tools, before the first call",
                left.len()
            );
        }
    }

    /// The deadline passed: time the request out, unless a response claimed it first.
    fn time_out(&self, id: Uuid) -> Option<Resolution> {
        let w = self.claim(&id, Outcome::TimedOut)?;
        let now = now_ms();
        self.publish(Event::ConfirmationTimeout(Arc::new(ConfirmationTimeout {
            id,
            tool: w.request.tool.clone(),
            session_id: w.request.session_id.clone(),
            deadline_ms: w.request.deadline_ms,
            at_ms: now,
        })));
        self.finish_local(w, Resolution::TimedOut, now);
        Some(Resolution::TimedOut)
    }

    fn bypass(&self, tool: &CompiledTool, call: ToolCall, by: ApprovedBy) -> Decision {
        self.audit(|| {
            let mut r = AuditRecord::new(AuditKind::Bypass);
            r.session_id = Some(call.session_id.clone());
            r.tool = Some(tool.name().to_owned());
            r.tool_call_id = call.call_id.clone();
            r.arguments_digest = Some(display::arguments_digest(&call.arguments));
            r.arguments = Some(call.arguments.clone());
            r.decision = Some(
                match by {
                    ApprovedBy::NotGated => "not-gated",
                    ApprovedBy::SessionGrant => "session-grant",
                    ApprovedBy::GatingDisabled => "gating-disabled",
                    ApprovedBy::Person => "person",
                }
                .into(),
            );
            r
        });
        let scope = if by == ApprovedBy::SessionGrant { Scope::Session } else { Scope::Once };
        Decision::Approved { request_id: None, arguments: call.arguments, edited: false, by, scope, responder: None }
    }

    fn publish(&self, e: Event) {
        let _ = self.inner.bus.send(e);
    }

    /// Publishes the resolved event, records the outcome and forgets the request. Called by
    /// whoever removed the waiter from the map: exactly once per request.
    fn finish_local(&self, w: Waiter, res: Resolution, at_ms: u64) {
        // Approvals and denials were recorded by `apply` before the waiter learned of them.
        let state = match &res {
            Resolution::TimedOut => Some(RecordState::TimedOut),
            Resolution::Cancelled(_) => Some(RecordState::Cancelled),
            _ => None,
        };
        if let Some(state) = state
            && let Err(e) = self.inner.store.transition(&w.request.id, StateChange::to(state))
        {
            eprintln!("signoff: could not record request {} as {}: {e}", w.request.id, state.as_str());
        }
        self.inner.store.remove(&w.request.id);
        let (outcome, cancel, responder, reason, scope, edited) = match &res {
            Resolution::Approved { edited, scope, responder, .. } => {
                (Outcome::Approved, None, responder.clone(), None, *scope, *edited)
            }
            Resolution::Denied { reason, responder } => {
                (Outcome::Denied, None, responder.clone(), reason.clone(), Scope::Once, false)
            }
            Resolution::TimedOut => (Outcome::TimedOut, None, None, None, Scope::Once, false),
            Resolution::Cancelled(c) => (Outcome::Cancelled, Some(*c), None, None, Scope::Once, false),
        };
        if outcome == Outcome::Cancelled {
            // Claimed as something else, then found the waiting task gone.
            lock(&self.inner.tombstones).add(w.request.id, outcome);
        }
        self.audit_outcome(&w.request, outcome, cancel, responder.clone(), reason.clone());
        self.publish(Event::ConfirmationResolved(Arc::new(ConfirmationResolved {
            id: w.request.id,
            tool: w.request.tool.clone(),
            session_id: w.request.session_id.clone(),
            outcome,
            cancel_reason: cancel,
            responder,
            reason,
            scope,
            edited,
            at_ms,
        })));
    }

    /// Removes a waiter: the one point where a request is claimed by whoever resolves it. The
    /// tombstone is written under the same lock, so a concurrent response that finds the
    /// waiter gone always learns why (`already_resolved` / `expired`, never `unknown_request`).
    fn claim(&self, id: &Uuid, outcome: Outcome) -> Option<Waiter> {
        self.claim_with(id, outcome, None)
    }

    /// [`claim`](Self::claim), consuming an approval token in the same step: of two concurrent
    /// submissions of one token, exactly one claims and the other finds the token used.
    fn claim_with(&self, id: &Uuid, outcome: Outcome, token: Option<&str>) -> Option<Waiter> {
        let mut waiters = lock(&self.inner.waiters);
        let w = waiters.remove(id)?;
        let mut t = lock(&self.inner.tombstones);
        t.add(*id, outcome);
        if let Some(fp) = token
            && t.map.contains_key(id)
        {
            t.tokens.insert(*id, fp.to_owned());
        }
        Some(w)
    }

    /// Cancels one pending request ([`CancelReason::Aborted`]): for a UI that is closed or a
    /// host task that was cancelled. Returns whether it was still pending.
    pub fn cancel_request(&self, id: &Uuid) -> bool {
        self.cancel(*id, CancelReason::Aborted)
    }

    /// The approval step for a request failed before anyone decided (a handler raised, panicked
    /// or returned without answering): the request ends as cancelled
    /// ([`CancelReason::ApprovalFailed`]). This is signoff's own fail-safe, so the authenticator
    /// is not asked (a gate that restricts responders must still end the request at once). The
    /// detail goes to the audit log and stderr, never to the model. Returns whether it was
    /// still pending (a concurrent answer may have won).
    pub(crate) fn fail_approval(&self, id: &Uuid, detail: &str) -> bool {
        let Some(w) = self.claim(id, Outcome::Cancelled) else { return false };
        eprintln!(
            "signoff: the approval step for request {id} (`{}`) failed: {detail}; the request is cancelled and the tool does not run",
            w.request.tool
        );
        self.audit(|| {
            let mut r = record_for(AuditKind::Notice, &w.request);
            r.decision = Some(CancelReason::ApprovalFailed.as_str().into());
            r.responder = Some(crate::handler::HANDLER_RESPONDER.into());
            r.reason = Some(detail.to_owned());
            r
        });
        self.resolve(w, Resolution::Cancelled(CancelReason::ApprovalFailed), now_ms());
        true
    }

    fn cancel(&self, id: Uuid, reason: CancelReason) -> bool {
        match self.claim(&id, Outcome::Cancelled) {
            Some(w) => {
                self.resolve(w, Resolution::Cancelled(reason), now_ms());
                true
            }
            None => false,
        }
    }

    /// Delivers `res` to the waiter and reports the final state. Returns the reported outcome.
    fn resolve(&self, w: Waiter, res: Resolution, at_ms: u64) -> Outcome {
        let report = match &res {
            Resolution::Approved { arguments: _, edited, scope, responder } => Resolution::Approved {
                arguments: Value::Null,
                edited: *edited,
                scope: *scope,
                responder: responder.clone(),
            },
            Resolution::Denied { reason, responder } => {
                Resolution::Denied { reason: reason.clone(), responder: responder.clone() }
            }
            Resolution::TimedOut => Resolution::TimedOut,
            Resolution::Cancelled(c) => Resolution::Cancelled(*c),
        };
        let Waiter { tx, request, tool, deadline } = w;
        // Not listed as pending once its caller can see the decision (the rest of the
        // bookkeeping follows in `finish_local`).
        self.inner.store.remove(&request.id);
        let (shell_tx, _) = oneshot::channel();
        let shell = Waiter { tx: shell_tx, request, tool, deadline };
        match tx.send(res) {
            Ok(()) => {
                let o = match &report {
                    Resolution::Approved { .. } => Outcome::Approved,
                    Resolution::Denied { .. } => Outcome::Denied,
                    Resolution::TimedOut => Outcome::TimedOut,
                    Resolution::Cancelled(_) => Outcome::Cancelled,
                };
                self.finish_local(shell, report, at_ms);
                o
            }
            Err(_) => {
                self.finish_local(shell, Resolution::Cancelled(CancelReason::Aborted), at_ms);
                Outcome::Cancelled
            }
        }
    }

    fn audit_outcome(
        &self,
        req: &ConfirmationRequest,
        outcome: Outcome,
        cancel: Option<CancelReason>,
        responder: Option<String>,
        reason: Option<String>,
    ) {
        self.audit(|| {
            let mut r = record_for(AuditKind::Outcome, req);
            r.decision = Some(outcome.as_str().into());
            r.responder = responder;
            r.reason = reason.or_else(|| cancel.map(|c| c.as_str().to_owned()));
            r
        });
    }

    /// Answers a pending request.
    ///
    /// The first valid response wins; the request resolves and its `confirm` returns. A rejected
    /// response leaves the request exactly as it was. Errors: `unknown_request`,
    /// `already_resolved`, `expired`, `mismatch` (tool, digest or session differ from the
    /// request), `unauthorized`, `edits_not_allowed`, `invalid_arguments` (edited arguments
    /// fail the schema), `malformed` (e.g. edited arguments on a denial), `closed`.
    pub fn respond(&self, response: ConfirmationResponse) -> Result<Outcome> {
        let claimed = match self.check_response(&response, None) {
            Ok(c) => c,
            Err(e) => {
                self.audit_rejected(&response, &e);
                return Err(e);
            }
        };
        self.apply(claimed, response, None)
    }

    fn audit_rejected(&self, response: &ConfirmationResponse, e: &Error) {
        self.audit(|| {
            // Recorded against the request when it is known; the response's claims are in
            // the error message.
            let mut r = match self.inner.store.get(&response.id) {
                Some(req) => record_for(AuditKind::ResponseRejected, &req),
                None => {
                    let mut r = AuditRecord::new(AuditKind::ResponseRejected);
                    r.request_id = Some(response.id);
                    r.session_id = response.session_id.clone();
                    r.tool = response.tool.clone();
                    r.arguments_digest = response.arguments_digest.clone();
                    r
                }
            };
            r.edited_arguments = response.arguments.clone();
            r.decision = Some(decision_str(response.decision).into());
            r.responder = response.responder.clone();
            r.reason = Some(e.to_string());
            r.error_kind = Some(e.kind());
            r
        });
    }

    /// Parses a JSON response (see [`ConfirmationResponse::from_json_str`]) and answers with it.
    pub fn respond_json(&self, json: &str) -> Result<Outcome> {
        match ConfirmationResponse::from_json_str(json) {
            Ok(r) => self.respond(r),
            Err(e) => {
                self.audit(|| {
                    let mut r = AuditRecord::new(AuditKind::ResponseRejected);
                    r.reason = Some(e.to_string());
                    r.error_kind = Some(e.kind());
                    r
                });
                Err(e)
            }
        }
    }

    /// Checks a response against its request and claims the request. Nothing is published or
    /// changed unless this returns `Ok`.
    fn check_response(&self, resp: &ConfirmationResponse, token: Option<&str>) -> Result<Claimed> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let id = resp.id;
        let (request, tool, deadline) = {
            let waiters = lock(&self.inner.waiters);
            match waiters.get(&id) {
                Some(w) => (w.request.clone(), w.tool.clone(), w.deadline),
                None => {
                    drop(waiters);
                    return Err(self.not_pending(id));
                }
            }
        };
        let mismatch = |field: &'static str, expected: &str, got: &str| Error::Mismatch {
            id,
            field,
            expected: expected.to_owned(),
            got: got.to_owned(),
        };
        if let Some(t) = &resp.tool
            && *t != request.tool
        {
            return Err(mismatch("tool", &request.tool, t));
        }
        if let Some(d) = &resp.arguments_digest
            && *d != request.arguments_digest
        {
            return Err(mismatch("arguments_digest", &request.arguments_digest, d));
        }
        if let Some(s) = &resp.session_id
            && *s != request.session_id
        {
            return Err(mismatch("session_id", &request.session_id, s));
        }
        if Instant::now() >= deadline {
            return Err(Error::Expired(id));
        }
        self.inner.authenticator.authenticate(&request, resp).map_err(|reason| Error::Unauthorized { id, reason })?;

        if let Some(edit) = &resp.arguments {
            crate::json::check(edit, "edited arguments")?;
        }
        let resolution = match resp.decision {
            ResponseDecision::Deny => {
                if resp.arguments.is_some() {
                    return Err(Error::Malformed("a denial cannot carry edited arguments".into()));
                }
                if resp.scope == Scope::Session {
                    return Err(Error::Malformed("scope \"session\" applies to approvals only".into()));
                }
                Resolution::Denied { reason: resp.reason.clone(), responder: resp.responder.clone() }
            }
            ResponseDecision::Approve => {
                let (arguments, edited) = match &resp.arguments {
                    Some(edit) if *edit != request.arguments => {
                        if !request.editable {
                            return Err(Error::EditsNotAllowed(request.tool.clone()));
                        }
                        tool.validate(edit, "edited")?;
                        (edit.clone(), true)
                    }
                    _ => (request.arguments.clone(), false),
                };
                Resolution::Approved { arguments, edited, scope: resp.scope, responder: resp.responder.clone() }
            }
        };

        // Claim the request: only one response can remove it.
        let outcome = match resolution {
            Resolution::Approved { .. } => Outcome::Approved,
            _ => Outcome::Denied,
        };
        let Some(waiter) = self.claim_with(&id, outcome, token) else {
            return Err(self.not_pending(id));
        };
        Ok(Claimed { waiter, resolution })
    }

    /// Publishes an accepted response and resolves its request.
    fn apply(&self, claimed: Claimed, mut resp: ConfirmationResponse, token: Option<&str>) -> Result<Outcome> {
        let Claimed { waiter, resolution } = claimed;
        let id = resp.id;
        // Record the answer before anyone acts on it.
        let recorded = match &resolution {
            Resolution::Approved { arguments, .. } => self.inner.store.transition(
                &id,
                StateChange {
                    arguments: Some(arguments),
                    responder: resp.responder.as_deref(),
                    token,
                    ..StateChange::to(RecordState::Approved)
                },
            ),
            _ => self.inner.store.transition(
                &id,
                StateChange { responder: resp.responder.as_deref(), token, ..StateChange::to(RecordState::Denied) },
            ),
        };
        if let Err(e) = recorded {
            // Fail safe: an approval that could not be recorded does not count.
            self.resolve(waiter, Resolution::Cancelled(CancelReason::Aborted), now_ms());
            return Err(e);
        }
        let now = now_ms();
        resp.at_ms.get_or_insert(now);
        self.audit(|| {
            let request = &waiter.request;
            let mut r = record_for(AuditKind::Response, request);
            r.decision = Some(decision_str(resp.decision).into());
            r.responder = resp.responder.clone();
            r.reason = resp.reason.clone();
            if let Resolution::Approved { arguments, edited: true, .. } = &resolution {
                r.arguments = Some(request.arguments.clone());
                r.edited_arguments = Some(arguments.clone());
                let rules = waiter.tool.evaluate(arguments);
                if rules.forced_by_rule {
                    r.reason = Some(format!("edited arguments match rules: {}", rules.reasons.join("; ")));
                }
            }
            r
        });
        if let Resolution::Approved { scope: Scope::Session, .. } = &resolution {
            self.grant(&waiter.request.session_id, &waiter.request.tool, resp.responder.clone());
        }
        self.publish(Event::ConfirmationResponse(Arc::new(resp)));
        match self.resolve(waiter, resolution, now) {
            Outcome::Cancelled => {
                Err(Error::AlreadyResolved { id, outcome: "cancelled (the waiting task was gone)".into() })
            }
            o => Ok(o),
        }
    }

    fn not_pending(&self, id: Uuid) -> Error {
        match lock(&self.inner.tombstones).map.get(&id) {
            Some(Outcome::TimedOut) => Error::Expired(id),
            Some(o) => Error::AlreadyResolved { id, outcome: o.as_str().into() },
            None => Error::UnknownRequest(id),
        }
    }

    fn grant(&self, session: &str, tool: &str, responder: Option<String>) {
        lock(&self.inner.grants).entry(session.to_owned()).or_default().insert(tool.to_owned());
        self.audit(|| {
            let mut r = AuditRecord::new(AuditKind::Grant);
            r.session_id = Some(session.to_owned());
            r.tool = Some(tool.to_owned());
            r.decision = Some("granted".into());
            r.responder = responder;
            r
        });
    }

    /// Revokes a session grant. Returns whether one existed.
    pub fn revoke_grant(&self, session_id: &str, tool: &str) -> bool {
        let removed = {
            let mut g = lock(&self.inner.grants);
            let removed = g.get_mut(session_id).is_some_and(|tools| tools.remove(tool));
            if g.get(session_id).is_some_and(HashSet::is_empty) {
                g.remove(session_id);
            }
            removed
        };
        if removed {
            self.audit(|| {
                let mut r = AuditRecord::new(AuditKind::Grant);
                r.session_id = Some(session_id.to_owned());
                r.tool = Some(tool.to_owned());
                r.decision = Some("revoked".into());
                r
            });
        }
        removed
    }

    /// The tools granted for a session, sorted.
    pub fn grants(&self, session_id: &str) -> Vec<String> {
        let mut v: Vec<String> =
            lock(&self.inner.grants).get(session_id).map(|t| t.iter().cloned().collect()).unwrap_or_default();
        v.sort();
        v
    }

    /// Ends a session: drops its grants and cancels its pending requests
    /// ([`CancelReason::SessionEnded`]). Returns how many requests were cancelled.
    pub fn end_session(&self, session_id: &str) -> usize {
        let mut tools: Vec<String> =
            lock(&self.inner.grants).remove(session_id).map(|t| t.into_iter().collect()).unwrap_or_default();
        tools.sort();
        for t in tools {
            self.audit(|| {
                let mut r = AuditRecord::new(AuditKind::Grant);
                r.session_id = Some(session_id.to_owned());
                r.tool = Some(t);
                r.decision = Some("revoked".into());
                r.reason = Some("session ended".into());
                r
            });
        }
        self.cancel_where(|w| w.request.session_id == session_id, CancelReason::SessionEnded)
    }

    fn cancel_where(&self, pred: impl Fn(&Waiter) -> bool, reason: CancelReason) -> usize {
        let ids: Vec<Uuid> = lock(&self.inner.waiters).iter().filter(|(_, v)| pred(v)).map(|(k, _)| *k).collect();
        let taken: Vec<Waiter> = ids.iter().filter_map(|id| self.claim(id, Outcome::Cancelled)).collect();
        let n = taken.len();
        for w in taken {
            self.resolve(w, Resolution::Cancelled(reason), now_ms());
        }
        n
    }

    /// Shuts the gate down: every pending request is cancelled ([`CancelReason::Shutdown`]),
    /// later requests are cancelled at once, later responses fail with `closed`, the pending
    /// store is closed ([`PendingStore::close`]) and the audit sink is flushed. Idempotent.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.cancel_where(|_| true, CancelReason::Shutdown);
        // The audit first: its head is anchored in the store, which must still be open.
        if let Some(a) = &self.inner.audit {
            a.flush();
        }
        // A durable store is released (file and lock), so a new gate can open it. A tool
        // still running now cannot record its result: a restart reports it as interrupted.
        self.inner.store.close();
    }

    /// True after [`close`](Self::close).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }

    /// Every pending request, oldest first. This copies the whole list: where many requests
    /// may be pending (a UI, a re-sync), read it in pages with [`pending_page`](Self::pending_page).
    pub fn pending(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.inner.store.list()
    }

    /// Up to `limit` pending requests (at least 1), oldest first, after `after` (from the oldest
    /// when `None`); [`PendingPage::next`] continues. Each page costs O(limit), whatever is pending,
    /// and paging neither skips nor repeats a request that stays pending; requests made while
    /// paging appear on a later page.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let gate = signoff::Gate::new();
    /// let mut after = None;
    /// loop {
    ///     let page = gate.pending_page(after.as_ref(), 500);
    ///     for request in &page.requests { /* show it */ }
    ///     match page.next { Some(next) => after = Some(next), None => break }
    /// }
    /// # });
    /// ```
    pub fn pending_page(&self, after: Option<&PendingCursor>, limit: usize) -> PendingPage {
        let limit = limit.max(1);
        let requests = self.inner.store.page(after, limit);
        let next = if requests.len() == limit { requests.last().map(|r| PendingCursor::of(r)) } else { None };
        PendingPage { requests, next }
    }

    /// One pending request.
    pub fn pending_request(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.store.get(id)
    }

    /// How many requests are pending.
    pub fn pending_count(&self) -> usize {
        self.inner.store.len()
    }

    /// Subscribes to the bus. Events published from now on are delivered in order; a subscriber
    /// that falls more than the bus capacity behind receives one [`Lagged`] carrying the
    /// current pending snapshot, then continues with the newest events.
    pub fn subscribe(&self) -> Subscription {
        self.inner.subscribers.fetch_add(1, Ordering::SeqCst);
        Subscription {
            inner: tokio_stream::wrappers::BroadcastStream::new(self.inner.bus.subscribe()),
            gate: Arc::downgrade(&self.inner),
        }
    }

    /// How many [`Subscription`]s are alive.
    pub fn subscriber_count(&self) -> usize {
        self.inner.subscribers.load(Ordering::SeqCst)
    }

    pub(crate) fn store(&self) -> &Arc<dyn PendingStore> {
        &self.inner.store
    }

    /// A request's stored record, in any state (durable stores keep them; the in-memory store
    /// keeps nothing once a request resolves).
    pub fn record(&self, id: &Uuid) -> Option<StoredRecord> {
        self.inner.store.record(id)
    }

    pub(crate) fn audit_sink(&self) -> Option<Arc<dyn AuditSink>> {
        self.inner.audit.clone()
    }

    /// Flushes the audit sink.
    pub fn flush_audit(&self) {
        if let Some(a) = &self.inner.audit {
            a.flush();
        }
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

fn decision_str(d: ResponseDecision) -> &'static str {
    match d {
        ResponseDecision::Approve => "approve",
        ResponseDecision::Deny => "deny",
    }
}

fn record_for(kind: AuditKind, req: &ConfirmationRequest) -> AuditRecord {
    let mut r = AuditRecord::new(kind);
    r.request_id = Some(req.id);
    r.session_id = Some(req.session_id.clone());
    r.tool = Some(req.tool.clone());
    r.tool_call_id = req.tool_call_id.clone();
    r.arguments_digest = Some(req.arguments_digest.clone());
    r
}

pin_project_lite::pin_project! {
    /// The future returned by [`Gate::confirm`]. Lazy: nothing is checked or published until it
    /// is first polled. Dropping it while its request is pending cancels the request
    /// ([`CancelReason::Aborted`]), which denies.
    #[must_use = "a confirmation does nothing unless awaited"]
    pub struct Confirm<'a> {
        gate: &'a Gate,
        // `confirm` hands an approval to its caller (recorded as `released`); `execute` runs it.
        hand_off: bool,
        #[pin]
        state: ConfirmState,
    }

    impl PinnedDrop for Confirm<'_> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let ConfirmStateProj::Waiting { waiting, .. } = this.state.project() {
                this.gate.cancel(waiting.id, CancelReason::Aborted);
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// Start and wait share storage: a pending confirmation carries only what the wait needs.
    #[project = ConfirmStateProj]
    enum ConfirmState {
        Start { tool: Option<Arc<CompiledTool>>, call: Option<ToolCall> },
        Waiting { waiting: Waiting, #[pin] sleep: Option<tokio::time::Sleep> },
        Done,
    }
}

impl Gate {
    fn confirm_future(&self, tool: Option<Arc<CompiledTool>>, call: ToolCall, hand_off: bool) -> Confirm<'_> {
        Confirm { gate: self, hand_off, state: ConfirmState::Start { tool, call: Some(call) } }
    }

    /// Waits for a request that is already published (a recovered one).
    fn resume(&self, waiting: Waiting) -> Confirm<'_> {
        let sleep = tokio::time::sleep_until(waiting.deadline);
        Confirm { gate: self, hand_off: false, state: ConfirmState::Waiting { waiting, sleep: Some(sleep) } }
    }
}

impl std::future::Future for Confirm<'_> {
    type Output = Result<Decision>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let mut this = self.project();
        if let ConfirmStateProj::Start { tool, call } = this.state.as_mut().project() {
            let (tool, call) = (tool.take(), call.take().expect("`Confirm` polled after completion"));
            let prepared = match tool {
                Some(t) => Ok(t),
                None => this.gate.tool(&call.tool),
            }
            .and_then(|t| this.gate.prepare(t, call));
            match prepared {
                Err(e) => {
                    this.state.set(ConfirmState::Done);
                    return Poll::Ready(Err(e));
                }
                Ok(Prepared::Done(d)) => {
                    this.state.set(ConfirmState::Done);
                    return Poll::Ready(Ok(d));
                }
                Ok(Prepared::Wait(w)) => {
                    let sleep = tokio::time::sleep_until(w.deadline);
                    this.state.set(ConfirmState::Waiting { waiting: w, sleep: Some(sleep) });
                }
            }
        }
        let ConfirmStateProj::Waiting { waiting: w, mut sleep } = this.state.as_mut().project() else {
            panic!("`Confirm` polled after completion");
        };
        let resolution = match std::pin::Pin::new(&mut w.rx).poll(cx) {
            Poll::Ready(Ok(res)) => res,
            // The sender is only ever dropped after sending; fail safe regardless.
            Poll::Ready(Err(_)) => Resolution::Cancelled(CancelReason::Aborted),
            Poll::Pending => match sleep.as_mut().as_pin_mut().map(|s| s.poll(cx)) {
                Some(Poll::Ready(())) => match this.gate.time_out(w.id) {
                    Some(r) => r,
                    // Someone claimed it just before the deadline (possibly on another thread)
                    // and is about to send: stop the timer and wait for what they send.
                    None => {
                        sleep.set(None);
                        match std::pin::Pin::new(&mut w.rx).poll(cx) {
                            Poll::Ready(Ok(r)) => r,
                            Poll::Ready(Err(_)) => Resolution::Cancelled(CancelReason::Aborted),
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                },
                _ => return Poll::Pending,
            },
        };
        let (id, timeout_ms) = (w.id, w.timeout_ms);
        // Resolved: leaving the Waiting state disarms the cancel-on-drop.
        this.state.set(ConfirmState::Done);
        Poll::Ready(Ok(match resolution {
            Resolution::Approved { arguments, edited, scope, responder } => {
                if *this.hand_off
                    && let Err(e) = this.gate.inner.store.transition(&id, StateChange::to(RecordState::Released))
                {
                    eprintln!("signoff: could not record request {id} as released: {e}");
                }
                Decision::Approved { request_id: Some(id), arguments, edited, by: ApprovedBy::Person, scope, responder }
            }
            Resolution::Denied { reason, responder } => Decision::Denied { request_id: id, reason, responder },
            Resolution::TimedOut => Decision::TimedOut { request_id: id, timeout_ms },
            Resolution::Cancelled(reason) => Decision::Cancelled { request_id: Some(id), reason },
        }))
    }
}

/// How many pending requests a [`Lagged`] carries at most; the rest are read with
/// [`Gate::pending_page`] from [`Lagged::more`], so re-syncing stays bounded however many are
/// pending.
pub const LAGGED_SNAPSHOT_LIMIT: usize = 1000;

/// One page of pending requests ([`Gate::pending_page`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingPage {
    /// Oldest first.
    pub requests: Vec<Arc<ConfirmationRequest>>,
    /// Where the next page starts; `None` when this page reached the end.
    pub next: Option<PendingCursor>,
}

/// A subscriber fell behind and missed `missed` events. Re-sync (de-duplicating by id) from
/// `pending`, the oldest requests pending when this was noticed, and, when `more` is set, from
/// [`Gate::pending_page`] starting at `more`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("subscriber lagged and missed {missed} events; re-sync from the pending requests")]
pub struct Lagged {
    /// How many events this subscriber missed.
    pub missed: u64,
    /// The oldest pending requests, at most [`LAGGED_SNAPSHOT_LIMIT`], oldest first.
    pub pending: Vec<Arc<ConfirmationRequest>>,
    /// Set when more requests are pending than `pending` holds: read them with
    /// [`Gate::pending_page`]`(Some(&more), ..)`.
    pub more: Option<PendingCursor>,
}

/// A stream of bus events. Dropping it unsubscribes; when the last subscriber of a gate built
/// with `deny_when_unobserved(true)` goes away, every pending request is cancelled.
pub struct Subscription {
    inner: tokio_stream::wrappers::BroadcastStream<Event>,
    gate: Weak<Inner>,
}

impl Subscription {
    /// The next event; `None` when the gate is gone.
    pub async fn recv(&mut self) -> Option<Result<Event, Lagged>> {
        use tokio_stream::StreamExt;
        self.next().await
    }

    fn lagged(&self, missed: u64) -> Lagged {
        let page = match self.gate.upgrade() {
            Some(inner) => Gate { inner }.pending_page(None, LAGGED_SNAPSHOT_LIMIT),
            None => PendingPage { requests: Vec::new(), next: None },
        };
        Lagged { missed, pending: page.requests, more: page.next }
    }
}

impl tokio_stream::Stream for Subscription {
    type Item = Result<Event, Lagged>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
        match std::pin::Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(e))) => Poll::Ready(Some(Ok(e))),
            Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => Poll::Ready(Some(Err(self.lagged(n)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(inner) = self.gate.upgrade() else { return };
        let was_last = inner.subscribers.fetch_sub(1, Ordering::SeqCst) == 1;
        if was_last && inner.deny_when_unobserved {
            Gate { inner }.cancel_where(|_| true, CancelReason::NoSubscribers);
        }
    }
}
