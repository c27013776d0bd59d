//! The gate: decides, publishes, waits, and resolves every request exactly once.

use crate::arguments::Arguments;
use crate::audit::{AuditKind, AuditRecord, AuditSink};
use crate::display;
use crate::error::{Error, Result};
use crate::event::{
    CancelReason, ConfirmationRequest, ConfirmationResolved, ConfirmationTimeout, Event, Outcome, ResponseDecision,
    Scope, now_ms,
};
use crate::policy::{CompiledTool, Policy};
use crate::store::{PendingCursor, PendingStore, RecordState, ResponseAuthenticator, StateChange, StoredRecord};
use crate::token::TokenKeys;
use crate::tool::{DEFAULT_PROMPT, Tool, ToolSpec};
use rustc_hash::FxBuildHasher;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;
use uuid::Uuid;

mod answer;
mod builder;
mod bus;
mod call;
mod confirm;
mod grants;
mod marker;
mod recovery;
mod respond;
mod shared;
mod timer;
mod tokens;
use answer::Waiter;
pub(crate) use answer::Waiting;
pub use builder::GateBuilder;
pub use bus::{LAGGED_SNAPSHOT_LIMIT, Lagged, PendingPage, Subscription, SubscriptionCloser};
pub use call::{ApprovedBy, DEFAULT_SESSION, Decision, ToolCall};
pub use confirm::Confirm;
pub use marker::{MARKER_META_KEY, MARKER_TTL};
pub use recovery::{NotRestored, Recovery};

/// How many cancellations `close` makes at once with a shared store (each a database round trip).
const SIDE_BY_SIDE: usize = 64;

/// A response that passed every check, and the request it claimed.
struct Claimed {
    waiter: Waiter,
    resolution: Resolution,
    /// Answered through a handle: the response's binding fields are filled in where read.
    handle: bool,
}

enum Resolution {
    /// `arguments`: the edit that was approved; `None` for the request's own arguments.
    Approved {
        arguments: Option<Value>,
        edited: bool,
        scope: Scope,
        responder: Option<String>,
    },
    Denied {
        reason: Option<String>,
        responder: Option<String>,
    },
    TimedOut,
    Cancelled(CancelReason),
}

pub(crate) enum Prepared {
    Done(Decision),
    Wait(Waiting),
    /// The store is writing the request; it is published once stored.
    Insert(Inserting),
}

/// A request whose waiter exists and whose store write is under way.
pub(crate) struct Inserting {
    waiting: Waiting,
    request: Arc<ConfirmationRequest>,
    stored: crate::store::StoreFuture<()>,
    /// Set when the call goes away before the write completes (the store then ends the row).
    abandoned: Arc<AtomicBool>,
}

/// What a deadline that passed locally turned out to mean.
enum TimeOut {
    /// Timed out now, by this call; with the commit of its `timed_out` record when the store
    /// takes it asynchronously (the call waits for it before it returns).
    Now(Resolution, Option<Settling>),
    /// Someone else claimed the request and is about to send its resolution.
    Elsewhere,
    /// The store's clock says the deadline is still ahead: look again then.
    RetryIn(Duration),
}

/// The commit of a final record under way ([`Gate::record_final`]).
pub(crate) type Settling = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Remembers how recent requests ended, to tell `already_resolved` and `expired` from
/// `unknown_request`. Bounded: at least the last `cap` ids are remembered, and at most two chunks
/// more (the one being filled, and a part of a chunk when `cap` is not a whole number of them).
/// Ids go into the newest of a queue of small tables (chunks); when it is full, a new one
/// starts, and past the bound the oldest is emptied whole and reused. The table an answer writes
/// to stays small enough to be in cache (one big table cost a cache miss in every answer, plus
/// another to evict the oldest id); a lookup, made only for an answer that is refused, reads
/// every chunk (at most 66: `cap / 64` ids each, at least 1,024).
pub(super) struct Tombstones {
    /// Oldest first.
    chunks: std::collections::VecDeque<Chunk>,
    /// Ids per chunk.
    chunk: usize,
    /// Chunks kept: enough full ones to hold `cap` besides the one being filled.
    max_chunks: usize,
}

#[derive(Default)]
struct Chunk {
    outcomes: HashMap<Uuid, Outcome, FxBuildHasher>,
    /// Request id → fingerprint of the approval token that answered it.
    tokens: HashMap<Uuid, String, FxBuildHasher>,
}

impl Tombstones {
    pub(super) fn new(cap: usize) -> Self {
        let chunk = (cap / 64).max(1024).min(cap.max(1));
        Tombstones { chunks: Default::default(), chunk, max_chunks: if cap == 0 { 0 } else { cap.div_ceil(chunk) + 1 } }
    }

    /// Records how `id` ended (a later outcome for the same id replaces the earlier one). Returns
    /// whether it is remembered (not with a cap of 0).
    fn add(&mut self, id: Uuid, o: Outcome) -> bool {
        if self.max_chunks == 0 {
            return false;
        }
        let full = self.chunks.back().is_none_or(|c| c.outcomes.len() >= self.chunk && !c.outcomes.contains_key(&id));
        if full {
            let fresh = if self.chunks.len() >= self.max_chunks {
                let mut oldest = self.chunks.pop_front().unwrap_or_default();
                // Keeps its allocation: emptying a table of plain entries is a memset.
                oldest.outcomes.clear();
                oldest.tokens.clear();
                oldest
            } else {
                Chunk {
                    outcomes: HashMap::with_capacity_and_hasher(self.chunk, FxBuildHasher),
                    tokens: HashMap::default(),
                }
            };
            self.chunks.push_back(fresh);
        }
        // A copy left in an older chunk is shadowed: lookups read the newest first.
        if let Some(c) = self.chunks.back_mut() {
            c.outcomes.insert(id, o);
        }
        true
    }

    /// Remembers the fingerprint of the token that answered `id` (just added).
    fn add_token(&mut self, id: Uuid, fingerprint: &str) {
        if let Some(c) = self.chunks.back_mut() {
            c.tokens.insert(id, fingerprint.to_owned());
        }
    }

    fn outcome(&self, id: &Uuid) -> Option<Outcome> {
        self.chunks.iter().rev().find_map(|c| c.outcomes.get(id)).copied()
    }

    fn token(&self, id: &Uuid) -> Option<&str> {
        self.chunks.iter().rev().find_map(|c| c.tokens.get(id)).map(String::as_str)
    }
}

pub(crate) struct Inner {
    pub(crate) policy: Policy,
    tools: RwLock<HashMap<String, Arc<CompiledTool>, FxBuildHasher>>,
    bus: broadcast::Sender<Event>,
    store: Arc<dyn PendingStore>,
    /// `None`: any response that matches its request is accepted ([`AcceptAll`](crate::AcceptAll)).
    authenticator: Option<Arc<dyn ResponseAuthenticator>>,
    audit: Option<Arc<dyn AuditSink>>,
    waiters: Mutex<HashSet<Waiter, FxBuildHasher>>,
    /// session id → tools granted for the rest of that session.
    grants: Mutex<HashMap<String, HashSet<String>>>,
    tombstones: Mutex<Tombstones>,
    closed: AtomicBool,
    /// Approver subscriptions, handlers and inline approvers attached (observers do not count).
    pub(crate) approvers: AtomicUsize,
    /// Every live subscription's close signal, ended by `close`.
    subscriptions: Mutex<Vec<Weak<bus::CloseSignal>>>,
    /// Approvers called in the publishing context ([`Gate::on_request_inline`]).
    pub(crate) inline: RwLock<Arc<[(u64, crate::dispatch::InlineApprover)]>>,
    pub(crate) next_inline: std::sync::atomic::AtomicU64,
    deny_when_unobserved: bool,
    tokens: Option<TokenKeys>,
    token_ttl: Option<Duration>,
    /// The language the gate is used from: what its messages name.
    host: crate::config::Host,
    requests_made: AtomicBool,
    recovered: AtomicBool,
    /// The no-approver warning was printed.
    warned_unobserved: AtomicBool,
    /// What a shared store calls when another process decides one of this gate's requests
    /// (the store holds it weakly).
    watcher: Option<Arc<dyn crate::store::StoreWatcher>>,
    /// Requests whose store write is under way, with the flag that tells the store to end the
    /// row once written (set when the request is cancelled meanwhile). Shared or asynchronous
    /// stores only.
    inserting: Mutex<HashMap<Uuid, Arc<AtomicBool>, FxBuildHasher>>,
    /// When the gate was built (epoch ms).
    built_at_ms: u64,
    /// Approval markers issued and accepted ([`Gate::approval_marker`]).
    markers: Mutex<marker::Markers>,
    /// Every waiting call's deadline, in one queue with one task.
    timer: Arc<timer::Timer>,
    /// Requests restored by `recover` still waiting or running their tool.
    restored: recovery::RestoredRuns,
    /// Tools running now (see [`Gate::running_tools`]).
    pub(crate) runs: Arc<crate::executor::Runs>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.timer.close();
    }
}

/// What a gate says, once, when a call is cancelled because no approver is attached: in the
/// words of the language the gate is used from (`host`).
pub(crate) fn no_approver_warning(host: crate::config::Host, tool: &str) -> String {
    format!(
        "signoff: a call to `{tool}` needs approval, but no approver is attached (observers do not count), so it \
         was cancelled at once (no-approver) and did not run. Attach an approver before calling ({}), or make the \
         gate with {} if answers come from elsewhere ({}).",
        host.approver_ways(),
        host.gate_with("deny_when_unobserved", false),
        host.respond_after_pending(),
    )
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
        let arguments = call.arguments_or_empty();
        crate::json::check(&arguments, "arguments")?;
        tool.validate(&arguments, "original")?;
        Ok(tool.evaluate(&arguments).into())
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// True when gating is disabled (development only).
    pub fn gating_disabled(&self) -> bool {
        self.inner.policy.gating_disabled
    }

    /// Adds a [`Notice`](AuditKind::Notice) to the gate's audit (nothing without an audit sink):
    /// something the host reports that belongs in the same hash-chained record as the gate's
    /// decisions, e.g. the MCP gate's "an upstream changed a tool's definition". `what` names it
    /// (the record's `decision`, e.g. `"definition-changed"`), `tool` is the tool it is about,
    /// `detail` says what happened.
    pub fn audit_notice(&self, what: &str, tool: Option<&str>, detail: impl Into<String>) {
        self.audit(|| {
            let mut r = AuditRecord::notice(what, detail);
            r.tool = tool.map(str::to_owned);
            r
        });
    }

    fn audit(&self, f: impl FnOnce() -> AuditRecord) {
        if let Some(a) = &self.inner.audit {
            a.record(f());
        }
    }

    /// Checks a call and, when it needs approval, makes and publishes its request. `original`
    /// receives the call's arguments when a request was made: an approval as shown given while
    /// this poll is still running (an inline approver) hands them back as they came instead of
    /// rebuilding them from the request's text. They are not kept while the call waits.
    pub(crate) fn prepare(
        &self,
        tool: Arc<CompiledTool>,
        mut call: ToolCall,
        original: &mut Option<Value>,
    ) -> Result<Prepared> {
        if call.arguments.is_null() {
            call.arguments = call.arguments_or_empty().into_owned();
        }
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
        // A closed gate runs nothing that needs approval: neither a session grant nor disabled
        // gating lets such a call through; it is made a request, cancelled below (`shutdown`).
        let open = !self.is_closed();
        if self.inner.policy.gating_disabled && open {
            return Ok(Prepared::Done(self.bypass(&tool, call, ApprovedBy::GatingDisabled)));
        }
        if !eval.forced_by_rule
            && open
            && lock(&self.inner.grants).get(&call.session_id).is_some_and(|tools| tools.contains(&call.tool))
        {
            return Ok(Prepared::Done(self.bypass(&tool, call, ApprovedBy::SessionGrant)));
        }

        // A request is needed.
        let spec = &tool.tool.spec;
        let timeout = tool.timeout;
        let created = now_ms();
        let timeout_ms = timeout.as_millis().min(u64::MAX as u128) as u64;
        // The arguments are kept as canonical text from here on: what is digested, shown and run.
        let arguments = Arguments::new(&call.arguments);
        let request = Arc::new(ConfirmationRequest {
            id: Uuid::new_v4(),
            prompt: match &tool.fixed_prompt {
                Some(p) => p.clone(),
                None => display::render_prompt_json(
                    spec.prompt_template.as_deref().unwrap_or(DEFAULT_PROMPT),
                    &spec.name,
                    &spec.description,
                    arguments.json(),
                )
                .into(),
            },
            arguments_digest: arguments.digest(),
            tool: tool.shared_name.clone(),
            description: tool.description_display.clone(),
            arguments,
            session_id: call::shared_session(call.session_id),
            tool_call_id: call.call_id,
            editable: spec.editable,
            reasons: eval.reasons,
            timeout_ms,
            deadline_ms: created.saturating_add(timeout_ms),
            created_at_ms: created,
            metadata: call.metadata,
        });
        *original = Some(call.arguments);
        let id = request.id;

        if self.is_closed() {
            self.audit_outcome(&request, Outcome::Cancelled, Some(CancelReason::Shutdown), None, None);
            return Ok(Prepared::Done(Decision::Cancelled { request_id: Some(id), reason: CancelReason::Shutdown }));
        }

        let deadline = Instant::now() + timeout;
        if !self.inner.requests_made.load(Ordering::Relaxed) {
            self.inner.requests_made.store(true, Ordering::Relaxed);
            self.warn_if_unrecovered();
        }
        let store = &self.inner.store;
        let shared = store.is_shared();
        // A store that writes elsewhere (or is shared) gets the request once its waiter and its
        // in-flight entry exist, so a cancellation from here on (a dropped call, `close`) finds
        // them and flags the row for the store to end. The in-memory store needs no entry.
        let abandoned = (!store.keeps_only_pending()).then(|| Arc::new(AtomicBool::new(false)));
        let (waiter, waiting) = answer::pair(request.clone(), tool.clone(), deadline);
        if let Some(flag) = &abandoned {
            lock(&self.inner.inserting).insert(id, flag.clone());
        }
        lock(&self.inner.waiters).replace(waiter);
        // `close` flips its flag before it sweeps the waiters: one side always sees the other.
        if self.is_closed() {
            if abandoned.is_some() {
                lock(&self.inner.inserting).remove(&id);
            }
            // Never written. The sweep may have claimed (and recorded) it already.
            if self.claim(&id, Outcome::Cancelled).is_some() {
                self.audit_outcome(&request, Outcome::Cancelled, Some(CancelReason::Shutdown), None, None);
            }
            return Ok(Prepared::Done(Decision::Cancelled { request_id: Some(id), reason: CancelReason::Shutdown }));
        }
        if let Some(abandoned) = abandoned {
            if let Some(stored) = store.insert_async(request.clone(), abandoned.clone()) {
                // From here on, dropping the `Confirm` future that holds this cancels the request.
                return Ok(Prepared::Insert(Inserting { waiting, request, stored, abandoned }));
            }
            if shared {
                // A database round trip: not under the waiters lock, which every answer takes.
                let stored = store.insert(request.clone());
                self.stored(&request, stored)?;
                return Ok(Prepared::Wait(waiting));
            }
            lock(&self.inner.inserting).remove(&id);
        }
        {
            // The store makes the request visible (`pending`, `pending_request`) with its waiter
            // already there, or a UI that lists it and answers at once would get
            // `unknown_request`. Under the waiters lock, so nothing claims it in between. Nothing
            // takes the waiters lock while holding a store lock, so this cannot deadlock.
            let mut waiters = lock(&self.inner.waiters);
            if !waiters.contains(&id) {
                // Cancelled (and recorded) by a `close` that began meanwhile; never written.
                return Ok(Prepared::Done(Decision::Cancelled {
                    request_id: Some(id),
                    reason: CancelReason::Shutdown,
                }));
            }
            if let Err(e) = self.inner.store.insert(request.clone()) {
                waiters.take(&id);
                return Err(e);
            }
        }
        self.publish_new(&request);
        Ok(Prepared::Wait(waiting))
    }

    /// The store's write of a new request completed: the request is published, or the call
    /// fails with the store's error.
    pub(super) fn inserted(&self, ins: &Inserting, stored: Result<()>) -> Result<()> {
        self.stored(&ins.request, stored)
    }

    /// After a (shared or asynchronous) store wrote a new request, or failed to.
    fn stored(&self, request: &Arc<ConfirmationRequest>, stored: Result<()>) -> Result<()> {
        let id = request.id;
        let cancelled_meanwhile =
            lock(&self.inner.inserting).remove(&id).is_some_and(|flag| flag.load(Ordering::SeqCst));
        if let Err(e) = stored {
            lock(&self.inner.waiters).take(&id);
            return Err(e);
        }
        if cancelled_meanwhile {
            // Cancelled (the gate closed, the call went away) while the row was being written:
            // end the row too, from `pending` only. One another process approved meanwhile is
            // released: its approval stays recorded, and nothing runs it here.
            self.cancel_or_release(&id);
        }
        // Answered already (it was visible once written): recorded, but not announced as new.
        let open = lock(&self.inner.waiters).contains(&id);
        self.publish_new_as(request, open);
        Ok(())
    }

    /// The call behind a request being written went away.
    pub(super) fn abandon(&self, ins: &Inserting) {
        // Nobody will see the write complete: the cancellation flags the row for the store to
        // end if it is not written yet, or ends it if it is.
        ins.abandoned.store(true, Ordering::SeqCst);
        self.cancel(ins.request.id, CancelReason::Aborted);
        lock(&self.inner.inserting).remove(&ins.request.id);
    }

    /// Audits and announces a stored request, then applies the closed and no-approver rules.
    fn publish_new(&self, request: &Arc<ConfirmationRequest>) {
        self.publish_new_as(request, true)
    }

    fn publish_new_as(&self, request: &Arc<ConfirmationRequest>, announce: bool) {
        let id = request.id;
        let shared = self.inner.store.is_shared();
        self.audit(|| {
            let mut r = AuditRecord::about(AuditKind::Request, request);
            r.arguments = Some(request.arguments.value());
            r.reason = Some(request.reasons.join("; "));
            let m = &request.metadata;
            if !(m.is_null() || m.as_object().is_some_and(|o| o.is_empty())) {
                r.metadata = Some(m.clone());
            }
            r
        });
        if !announce {
            return;
        }
        self.announce(request);
        // The waiter was inserted before these checks, and `close` / the last approver's
        // departure flip their flag before sweeping the waiters: one side always sees it.
        if self.is_closed() {
            self.cancel(id, CancelReason::Shutdown);
        } else if self.inner.deny_when_unobserved
            && !shared
            && !self.has_approver()
            && self.cancel(id, CancelReason::NoApprover)
            && !self.inner.warned_unobserved.swap(true, Ordering::Relaxed)
        {
            // A forgotten approver must not look like a silent denial (said once per gate).
            let host = self.inner.host;
            crate::report!("{}", no_approver_warning(host, &request.tool));
        }
    }

    /// The first request on a durable store whose earlier requests were never recovered.
    fn warn_if_unrecovered(&self) {
        if self.inner.store.is_durable()
            && !self.inner.recovered.load(Ordering::SeqCst)
            && let Ok(left) = self.inner.store.unfinished()
        {
            // Only what an earlier run left: requests this gate makes meanwhile (other tasks, at
            // the same moment) are not counted.
            let earlier = left.iter().filter(|r| r.request.created_at_ms < self.inner.built_at_ms).count();
            if earlier > 0 {
                crate::report!(
                    "signoff: the pending store holds {earlier} unfinished request(s) from an earlier run that were not \
                     recovered; call {} after registering tools, before the first call",
                    self.inner.host.recover()
                );
            }
        }
    }

    /// The deadline passed: time the request out, unless a response claimed it first.
    fn time_out(&self, id: Uuid) -> TimeOut {
        if self.inner.store.is_shared() {
            return self.time_out_shared(id);
        }
        match self.claim(&id, Outcome::TimedOut) {
            Some(w) => TimeOut::Now(Resolution::TimedOut, self.timed_out(w, false)),
            None => TimeOut::Elsewhere,
        }
    }

    /// Publishes and records a claimed request's timeout (`recorded`: the store has it already).
    /// The caller hands the waiting call its resolution itself (see [`deliver_timeout`](Self::deliver_timeout)).
    fn timed_out(&self, w: Waiter, recorded: bool) -> Option<Settling> {
        self.publish_timeout(&w);
        self.finish_local(w, Resolution::TimedOut, now_ms(), recorded)
    }

    /// [`timed_out`](Self::timed_out) for a call that waits elsewhere: the resolution goes
    /// through the waiter.
    fn deliver_timeout(&self, w: Waiter, recorded: bool) {
        self.publish_timeout(&w);
        self.resolve_as(w, Resolution::TimedOut, now_ms(), recorded);
    }

    fn publish_timeout(&self, w: &Waiter) {
        let id = w.request.id;
        let now = now_ms();
        self.publish_with(|| {
            Event::ConfirmationTimeout(Arc::new(ConfirmationTimeout {
                id,
                tool: w.request.tool.to_string(),
                session_id: w.request.session_id.to_string(),
                deadline_ms: w.request.deadline_ms,
                at_ms: now,
            }))
        });
    }

    fn bypass(&self, tool: &CompiledTool, call: ToolCall, by: ApprovedBy) -> Decision {
        self.audit(|| {
            let by = match by {
                ApprovedBy::NotGated => "not-gated",
                ApprovedBy::SessionGrant => "session-grant",
                ApprovedBy::GatingDisabled => "gating-disabled",
                ApprovedBy::Person => "person",
            };
            let mut r = AuditRecord::about_call(
                AuditKind::Bypass,
                &call.session_id,
                tool.name(),
                call.call_id.as_deref(),
                &call.arguments,
            )
            .with_decision(by);
            r.arguments = Some(call.arguments.clone());
            r
        });
        let scope = if by == ApprovedBy::SessionGrant { Scope::Session } else { Scope::Once };
        Decision::Approved { request_id: None, arguments: call.arguments, edited: false, by, scope, responder: None }
    }

    /// Makes a new (or restored) request known: on the bus, then to every inline approver, in
    /// this context. No lock is held.
    fn announce(&self, request: &Arc<ConfirmationRequest>) {
        self.publish(Event::ConfirmationRequest(request.clone()));
        self.dispatch_inline(request);
    }

    /// At least one approver is attached.
    fn has_approver(&self) -> bool {
        self.inner.approvers.load(Ordering::SeqCst) > 0
    }

    fn publish(&self, e: Event) {
        let _ = self.inner.bus.send(e);
    }

    /// Publishes the event `make` builds, building it only when someone subscribes.
    fn publish_with(&self, make: impl FnOnce() -> Event) {
        if self.inner.bus.receiver_count() > 0 {
            self.publish(make());
        }
    }

    /// Publishes the resolved event, records the outcome and forgets the request. Called by
    /// whoever removed the waiter from the map: exactly once per request. Returns the commit of
    /// a `timed_out` / `cancelled` record that the store makes asynchronously (see
    /// [`record_final`](Self::record_final)).
    fn finish_local(&self, w: Waiter, res: Resolution, at_ms: u64, recorded: bool) -> Option<Settling> {
        // Approvals and denials were recorded by `apply` before the waiter learned of them.
        let state = match &res {
            _ if recorded => None,
            Resolution::TimedOut => Some(RecordState::TimedOut),
            Resolution::Cancelled(_) => Some(RecordState::Cancelled),
            _ => None,
        };
        let settling = state.and_then(|state| self.record_final(w.request.id, state));
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
        self.publish_with(|| {
            Event::ConfirmationResolved(Arc::new(ConfirmationResolved {
                id: w.request.id,
                tool: w.request.tool.to_string(),
                session_id: w.request.session_id.to_string(),
                outcome,
                cancel_reason: cancel,
                responder,
                reason,
                scope,
                edited,
                at_ms,
            }))
        });
        settling
    }

    /// Records a final state that nothing runs on: `timed_out`, `cancelled`, or `released` (an
    /// approval handed to a `confirm` caller). Where a tokio runtime is current, a durable store
    /// commits it without holding this thread (SQLite with `synchronous_full` on its writer
    /// thread, PostgreSQL on its runtime), and the commit under way is returned: the call whose
    /// poll got here awaits it before it returns (so what it returns is what the store says),
    /// anyone else leaves it to the runtime ([`in_background`](Self::in_background)). A deadline
    /// or a cancellation never waits for a disk sync inside a poll. A failure is reported on
    /// stderr, as a failed record of these states always was: the call does not run either way.
    /// A crash before the commit leaves the record as it was, as a crash during a synchronous
    /// commit did: `pending` (recovery times it out, or restores it to be decided again) or
    /// `approved` (reported as interrupted, never run).
    pub(super) fn record_final(&self, id: Uuid, state: RecordState) -> Option<Settling> {
        let report =
            move |e: Error| crate::report!("signoff: could not record request {id} as {}: {e}", state.as_str());
        if self.inner.store.is_durable() && tokio::runtime::Handle::try_current().is_ok() {
            // Every store starts the change when asked; the future only learns how it ended.
            let stored = self.inner.store.transition_async(id, crate::store::OwnedStateChange::to(state));
            return Some(Box::pin(async move {
                if let Err(e) = stored.await {
                    report(e);
                }
            }));
        }
        if let Err(e) = self.inner.store.transition(&id, StateChange::to(state)) {
            report(e);
        }
        None
    }

    /// Lets a commit from [`record_final`](Self::record_final) finish on the runtime that was
    /// current when it started (this thread's).
    fn in_background(settling: Option<Settling>) {
        if let Some(s) = settling {
            drop(tokio::spawn(s));
        }
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
        let w = waiters.take(id)?;
        let mut t = lock(&self.inner.tombstones);
        if t.add(*id, outcome)
            && let Some(fp) = token
        {
            t.add_token(*id, fp);
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
        let Some((w, recorded)) = self.claim_cancel(id) else { return false };
        crate::report!(
            "signoff: the approval step for request {id} (`{}`) failed: {detail}; the request is cancelled and the tool does not run",
            w.request.tool
        );
        self.audit(|| {
            AuditRecord::about(AuditKind::Notice, &w.request)
                .with_decision(CancelReason::ApprovalFailed.as_str())
                .with_responder(Some(crate::dispatch::HANDLER_RESPONDER.into()))
                .with_reason(detail)
        });
        self.resolve_as(w, Resolution::Cancelled(CancelReason::ApprovalFailed), now_ms(), recorded);
        true
    }

    fn cancel(&self, id: Uuid, reason: CancelReason) -> bool {
        match self.claim_cancel(&id) {
            Some((w, recorded)) => {
                self.resolve_as(w, Resolution::Cancelled(reason), now_ms(), recorded);
                true
            }
            None => false,
        }
    }

    /// Claims a waiter to cancel it. With a shared store the store's guarded change comes
    /// first: a decision another process recorded just before wins (and is delivered), and
    /// `None` is returned. The flag says whether the store has the cancellation.
    fn claim_cancel(&self, id: &Uuid) -> Option<(Waiter, bool)> {
        let writing = lock(&self.inner.inserting).contains_key(id);
        // A row the store shows is written; one it does not show yet is left to the flag. (A
        // shared store shows only pending rows: one it does not show may be decided already,
        // so it is read.)
        let shared = self.inner.store.is_shared();
        let unwritten = writing
            && if shared {
                // Unreadable counts as not written yet: the flag then ends the row.
                !matches!(self.inner.store.try_record(id), Ok(Some(_)))
            } else {
                self.inner.store.get(id).is_none()
            };
        if unwritten {
            // The waiter first: a cancel that loses to an answer flags nothing. (It used to
            // flag the row before knowing, and the store then ended an approved row as
            // `cancelled` while the approved call ran.)
            let w = self.claim(id, Outcome::Cancelled)?;
            if self.flag_if_writing(id) {
                return Some((w, true));
            }
            // Written meanwhile. A shared store's row may have been answered elsewhere since:
            // it is ended from `pending` only, or released (nothing runs it here).
            if shared {
                self.cancel_or_release(id);
                return Some((w, true));
            }
            return Some((w, false));
        }
        if !shared {
            return self.claim(id, Outcome::Cancelled).map(|w| (w, false));
        }
        self.claim_cancel_shared(id)
    }

    /// Flags a request whose row is still being written for the store to end once written,
    /// under the lock [`stored`](Self::stored) reads the flag under; false when the write has
    /// completed. Only for a cancellation that has claimed the waiter.
    fn flag_if_writing(&self, id: &Uuid) -> bool {
        match lock(&self.inner.inserting).get(id) {
            Some(flag) => {
                flag.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// Ends a written request whose call was cancelled here: from `pending` only; one another
    /// process approved meanwhile is recorded as released (its approval stays, nothing runs it).
    fn cancel_or_release(&self, id: &Uuid) {
        if self.inner.store.cancel_pending(id).is_err() {
            let _ = self.inner.store.transition(id, StateChange::to(RecordState::Released));
        }
    }

    /// Delivers `res` to the waiter and reports the final state. Returns the reported outcome.
    fn resolve(&self, w: Waiter, res: Resolution, at_ms: u64) -> Outcome {
        self.resolve_as(w, res, at_ms, false)
    }

    /// [`resolve`](Self::resolve); `recorded`: the store already holds this outcome.
    fn resolve_as(&self, w: Waiter, res: Resolution, at_ms: u64, recorded: bool) -> Outcome {
        let report = match &res {
            Resolution::Approved { arguments: _, edited, scope, responder } => {
                Resolution::Approved { arguments: None, edited: *edited, scope: *scope, responder: responder.clone() }
            }
            Resolution::Denied { reason, responder } => {
                Resolution::Denied { reason: reason.clone(), responder: responder.clone() }
            }
            Resolution::TimedOut => Resolution::TimedOut,
            Resolution::Cancelled(c) => Resolution::Cancelled(*c),
        };
        // Not listed as pending once its caller can see the decision (the rest of the
        // bookkeeping follows in `finish_local`).
        self.inner.store.remove(&w.request.id);
        match w.send(Box::new(res)) {
            Ok(()) => {
                let o = match &report {
                    Resolution::Approved { .. } => Outcome::Approved,
                    Resolution::Denied { .. } => Outcome::Denied,
                    Resolution::TimedOut => Outcome::TimedOut,
                    Resolution::Cancelled(_) => Outcome::Cancelled,
                };
                Self::in_background(self.finish_local(w, report, at_ms, recorded));
                o
            }
            Err(_) => {
                // The waiting task is gone: whatever was recorded, the tool does not run.
                let recorded = recorded && matches!(report, Resolution::Cancelled(_));
                let aborted = Resolution::Cancelled(CancelReason::Aborted);
                Self::in_background(self.finish_local(w, aborted, at_ms, recorded));
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
            let mut r =
                AuditRecord::about(AuditKind::Outcome, req).with_decision(outcome.as_str()).with_responder(responder);
            r.reason = reason.or_else(|| cancel.map(|c| c.as_str().to_owned()));
            r
        });
    }

    fn cancel_where(&self, pred: impl Fn(&Waiter) -> bool, reason: CancelReason) -> usize {
        let ids: Vec<Uuid> = lock(&self.inner.waiters).iter().filter(|w| pred(w)).map(|w| w.request.id).collect();
        let taken: Vec<(Waiter, bool)> = if self.inner.store.is_shared() && ids.len() > 1 {
            // Each claim is a database round trip first, and up to its timeout when the server
            // does not answer: made side by side by up to `SIDE_BY_SIDE` workers, each taking
            // the next id, so closing with many calls waiting on a hung database takes one
            // timeout per `SIDE_BY_SIDE` calls, not one per call.
            let next = AtomicUsize::new(0);
            let taken = Mutex::new(Vec::with_capacity(ids.len()));
            std::thread::scope(|scope| {
                for _ in 0..ids.len().min(SIDE_BY_SIDE) {
                    scope.spawn(|| {
                        while let Some(id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
                            if let Some(t) = self.claim_cancel(id) {
                                lock(&taken).push(t);
                            }
                        }
                    });
                }
            });
            taken.into_inner().unwrap_or_else(|e| e.into_inner())
        } else {
            ids.iter().filter_map(|id| self.claim_cancel(id)).collect()
        };
        let n = taken.len();
        for (w, recorded) in taken {
            self.resolve_as(w, Resolution::Cancelled(reason), now_ms(), recorded);
        }
        n
    }

    /// Shuts the gate down: every pending request is cancelled ([`CancelReason::Shutdown`]),
    /// later calls that need approval are cancelled at once (a session grant or disabled gating
    /// no longer lets them through; a tool that needs no approval still runs), later responses
    /// fail with `closed`, the pending store is closed ([`PendingStore::close`]) and the audit
    /// sink is flushed. Idempotent.
    ///
    /// A tool already running is not interrupted (the rule for a cancelled call, too; every
    /// binding follows it, pinned by `tests/vectors/execute.json`): its executor can see the gate
    /// closed ([`CallContext::gate_closed`](crate::CallContext::gate_closed)) and stop early, and
    /// its call returns the tool's own result; its `execution` audit record is written, while a
    /// durable store, closed now, reports it `interrupted` after a restart.
    pub fn close(&self) {
        self.mark_closed();
        self.cancel_where(|_| true, CancelReason::Shutdown);
        // Subscriptions end once they have delivered the cancellations above.
        self.end_subscriptions();
        // The audit first: its head is anchored in the store, which must still be open.
        if let Some(a) = &self.inner.audit {
            a.flush();
        }
        // A durable store is released (file and lock), so a new gate can open it. A tool
        // still running now cannot record its result: a restart reports it as interrupted.
        self.inner.store.close();
        // Answers the store's writer thread recorded while it closed were audited just now.
        if let Some(a) = &self.inner.audit {
            a.flush();
        }
    }

    /// The first step of [`close`](Self::close), at once: from now on [`is_closed`](Self::is_closed)
    /// is true, a call that needs approval is cancelled (`shutdown`) and an answer is refused
    /// (`closed`). For a host that runs the rest of `close` (cancelling what is pending, flushing
    /// the audit log, releasing the store, all of which may wait for a disk) off its own thread:
    /// nothing gets through meanwhile. Call `close` after it.
    pub fn mark_closed(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
    }

    /// True after [`close`](Self::close) (or [`mark_closed`](Self::mark_closed)).
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

    /// Flushes the audit sink and verifies the hash chain it wrote (against the store's anchor
    /// when there is one, so records cut from the end show): what an approval console's audit
    /// view shows. `Ok(None)` when the gate has no audit sink, or one that cannot be read back
    /// (e.g. [`MemoryAuditSink`](crate::MemoryAuditSink)).
    ///
    /// Errors: `io` or `store` when the log cannot be read.
    pub fn verify_audit(&self) -> Result<Option<crate::ChainReport>> {
        match &self.inner.audit {
            Some(a) => {
                a.flush();
                a.verify().transpose()
            }
            None => Ok(None),
        }
    }

    /// Flushes the audit sink and reads back its newest records, newest first: at most `limit`,
    /// and with `before` only those whose `seq` is below it (the next page). What an approval
    /// console's audit list shows. `Ok(None)` when the gate has no audit sink, or one that cannot
    /// be read back ([`AuditSink::recent`]).
    ///
    /// Errors: `io` or `store` when the log cannot be read, `malformed` for a line that is not a
    /// record.
    pub fn recent_audit(&self, before: Option<u64>, limit: usize) -> Result<Option<Vec<AuditRecord>>> {
        match &self.inner.audit {
            Some(a) => {
                a.flush();
                a.recent(before, limit).transpose()
            }
            None => Ok(None),
        }
    }

    /// A registered tool's spec.
    pub fn tool_spec(&self, name: &str) -> Option<ToolSpec> {
        self.tool(name).ok().map(|t| t.tool.spec.clone())
    }

    /// Checks an edit of a pending request's arguments the way [`respond`](Self::respond) will
    /// when it arrives (well-formed JSON, the tool allows edits, the tool's schema), without
    /// answering: for a UI that validates before it submits. An edit equal to the request's
    /// arguments passes (it is not an edit).
    ///
    /// Errors: `not_pending`, `malformed`, `edits_not_allowed`, `unknown_tool` (a request from
    /// another process for a tool this one has not registered), `invalid_arguments`.
    pub fn check_edit(&self, id: &Uuid, edit: &Value) -> Result<()> {
        let request =
            self.inner.store.get(id).ok_or_else(|| Error::NotPending { id: *id, state: self.state_of(id) })?;
        crate::json::check(edit, "edited arguments")?;
        if request.arguments.is(edit) {
            return Ok(());
        }
        if !request.editable {
            return Err(Error::EditsNotAllowed(request.tool.to_string()));
        }
        self.tool(&request.tool)?.validate(edit, "edited")
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
