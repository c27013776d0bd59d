//! Seams: where pending requests are stored, and how a response is authenticated.
//! In-memory and accept-all defaults; [`SqliteStore`](crate::SqliteStore) keeps requests across
//! restarts, [`Approvers`] decides who may approve what.

use crate::error::Result;
use crate::event::{ConfirmationRequest, ConfirmationResponse, ResponseDecision};
use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// A store operation completed elsewhere (see [`PendingStore::insert_async`]).
pub type StoreFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'static>>;

/// What a store calls once a change handed to [`PendingStore::transition_then`] is recorded or
/// refused. It runs exactly once: a completion dropped without being called (a store that
/// stopped with the change still queued) reports a `store` error, so whoever waits for the
/// change learns it did not happen and fails safe.
pub struct Completion(Option<Box<dyn FnOnce(Result<()>) + Send>>);

impl Completion {
    /// A completion that calls `f` with how the change ended. `f` must not block: a store may
    /// call it on the thread that commits its changes.
    pub fn new(f: impl FnOnce(Result<()>) + Send + 'static) -> Self {
        Completion(Some(Box::new(f)))
    }

    /// Reports how the change ended.
    pub fn complete(mut self, result: Result<()>) {
        if let Some(f) = self.0.take() {
            f(result);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(crate::Error::Store("the store stopped before the change was recorded".into())));
        }
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Completion(pending)" } else { "Completion(done)" })
    }
}

/// Where pending requests live while they wait. The gate inserts a request before publishing
/// it and removes it exactly once when it resolves; [`Gate::pending`](crate::Gate::pending)
/// (the snapshot a late or lagging UI re-syncs from) lists it.
pub trait PendingStore: Send + Sync + 'static {
    /// Stores a new pending request. An error refuses the call (it never runs unapproved).
    fn insert(&self, request: Arc<ConfirmationRequest>) -> Result<()>;
    /// Stores a new pending request without blocking the caller, for a store whose insert waits
    /// on I/O (a database round trip): the gate publishes the request once the returned future
    /// completes, and meanwhile the call's task is free. If the call goes away first, the gate
    /// sets `abandoned`; the store must then end the request (`cancelled`) once it is stored,
    /// so no pending request is left without a caller. `None` (the default): the gate calls
    /// [`insert`](Self::insert).
    fn insert_async(
        &self,
        request: Arc<ConfirmationRequest>,
        abandoned: Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<StoreFuture<()>> {
        let _ = (request, abandoned);
        None
    }
    /// True for a store that keeps nothing but the pending requests, in this process (the
    /// in-memory store): [`insert_async`](Self::insert_async) always returns `None` and
    /// [`transition`](Self::transition) ignores what it is given, so the gate skips preparing
    /// either (no in-flight entry for the write, no approved arguments rebuilt for the record).
    /// The default, `false`, is right for every store.
    fn keeps_only_pending(&self) -> bool {
        false
    }
    /// Removes a request that has resolved.
    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>>;
    /// One request.
    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>>;
    /// Every pending request, oldest first. O(pending): prefer [`page`](Self::page) where many
    /// may be pending.
    fn list(&self) -> Vec<Arc<ConfirmationRequest>>;
    /// Up to `limit` pending requests, oldest first, starting after `after` (from the oldest
    /// when `None`). The order is by [`PendingCursor`] (creation time, then id), so paging
    /// neither skips nor repeats a request that stays pending. The default sorts
    /// [`list`](Self::list); the stores in this crate keep an ordered index instead.
    fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        self.list().into_iter().filter(|r| after.is_none_or(|a| PendingCursor::of(r) > *a)).take(limit).collect()
    }
    /// How many are pending.
    fn len(&self) -> usize;
    /// No request is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when requests and their states survive a restart (the gate then records each state
    /// change before acting on it, and [`Gate::recover`](crate::Gate::recover) reads them back).
    fn is_durable(&self) -> bool {
        false
    }
    /// Records that a request moved to `change.state`. A durable store must have persisted it
    /// when this returns `Ok`: the gate calls it *before* it acts (an approval is recorded
    /// before the waiter learns of it, `executing` before the tool runs), so a crash can never
    /// leave a tool run without a record of it. An error makes the gate fail safe (the approval
    /// is refused, the tool does not run). The default (a store that forgets) does nothing.
    fn transition(&self, id: &Uuid, change: StateChange<'_>) -> Result<()> {
        let _ = (id, change);
        Ok(())
    }
    /// Ends a request as `cancelled` only while it is still `pending`: a cancellation never
    /// overrides a decision another process recorded first (the gate then delivers that
    /// decision). An `Err` when the request is not pending. A shared store must make this one
    /// guarded change (`PostgresStore` does). The default: for a store no other process answers
    /// in, [`transition`](Self::transition) to `cancelled` (the gate claims its waiter first, so
    /// nobody races it); for a shared store that does not override it, the same after reading
    /// that the request is still pending (a narrow race remains).
    fn cancel_pending(&self, id: &Uuid) -> Result<()> {
        if self.is_shared() {
            match self.try_record(id)? {
                Some(r) if r.state == RecordState::Pending => {}
                Some(r) => {
                    return Err(crate::Error::Store(format!(
                        "request {id} cannot move to cancelled from {}",
                        r.state.as_str()
                    )));
                }
                None => return Err(crate::Error::Store(format!("request {id} is not stored"))),
            }
        }
        self.transition(id, StateChange::to(RecordState::Cancelled))
    }
    /// [`transition`](Self::transition) without blocking the caller, for a store whose commit
    /// waits on I/O (a synced disk write, a database round trip): the gate awaits the returned
    /// future where it runs on its own task (`executing` before the tool starts, `done` after),
    /// and acts only once it completed with `Ok`, exactly as after `transition`. The change
    /// must start when this is called, not when the future is first polled: for the final states
    /// a call does not wait for (`timed_out`, `cancelled`, `released`) the gate keeps the future
    /// only to learn how it ended, and may drop it. The default calls
    /// [`transition`](Self::transition) at once.
    fn transition_async(&self, id: Uuid, change: OwnedStateChange) -> StoreFuture<()> {
        Box::pin(std::future::ready(self.transition(&id, change.as_change())))
    }
    /// [`transition`](Self::transition) for an answer given on a host's thread, where no
    /// runtime may be running to await [`transition_async`](Self::transition_async). A store
    /// whose commit waits for the disk (SQLite with `synchronous_full`) hands the change to a
    /// thread of its own, returns at once and calls `done` on that thread once the change is
    /// committed or refused; the gate acts on the answer only then, exactly as after
    /// `transition`. The default records the change during this call and calls `done` before
    /// returning.
    fn transition_then(&self, id: Uuid, change: OwnedStateChange, done: Completion) {
        done.complete(self.transition(&id, change.as_change()));
    }
    /// Records the use of a single-use id: an accepted approval marker's request (or nonce,
    /// [`Gate::accept_approval_marker`](crate::Gate::accept_approval_marker)) or a used sign-in
    /// link's nonce ([`Gate::use_sign_in`](crate::Gate::use_sign_in)), kept until
    /// `expires_at_ms` (epoch ms), when it could no longer be used anyway. `Ok(false)` when it
    /// was recorded before, by this process or another sharing the store: a replay, refused. A
    /// durable store keeps it across a restart, a shared one across hosts. The default (a store
    /// that forgets) records nothing: the gate's memory alone decides.
    fn use_once(&self, id: &Uuid, expires_at_ms: u64) -> Result<bool> {
        let _ = (id, expires_at_ms);
        Ok(true)
    }
    /// A request's stored record in any state (`None` if never stored or forgotten).
    fn record(&self, id: &Uuid) -> Option<StoredRecord> {
        let _ = id;
        None
    }
    /// [`record`](Self::record), telling a failed read (`store`) from a missing record. The
    /// default is `Ok(self.record(id))`; stores whose reads can fail (a database on the network)
    /// say so, so an answer is refused with `store`, not `unknown_request`.
    fn try_record(&self, id: &Uuid) -> Result<Option<StoredRecord>> {
        Ok(self.record(id))
    }
    /// Records an earlier process left unfinished (`pending`, `approved`, `executing`), oldest
    /// first, for [`Gate::recover`](crate::Gate::recover). Durable stores only.
    fn unfinished(&self) -> Result<Vec<StoredRecord>> {
        Ok(Vec::new())
    }
    /// Makes a recovered `pending` record visible to [`list`](Self::list) / [`get`](Self::get)
    /// again (durable stores that keep a memory index). The default does nothing.
    fn restore(&self, request: Arc<ConfirmationRequest>) {
        let _ = request;
    }
    /// Where the audit chain's head is anchored, when the store can keep it (see
    /// [`AuditAnchor`](crate::audit::AuditAnchor)): the gate hands it to its audit sink when it
    /// is built, so a log cut at the end is detected. The default has none.
    fn audit_anchor(self: Arc<Self>) -> Option<Arc<dyn crate::audit::AuditAnchor>> {
        None
    }
    /// True when other processes answer this store's requests too: a database that many agents
    /// and approvers on many hosts share (`PostgresStore`, cargo feature `postgres`). The gate then
    /// records every decision through the store first (its guarded transition decides which of
    /// two racing answers wins), answers requests it does not wait for itself by changing them
    /// in the store, learns of decisions made elsewhere through [`watch`](Self::watch), and
    /// takes deadlines from the store's clock ([`time_left`](Self::time_left)).
    fn is_shared(&self) -> bool {
        false
    }
    /// Shared stores: from now on, tell `watcher` when a request this store inserted (or
    /// restored) leaves `pending` through another process. A hint, never the truth: the gate
    /// acts on the records it is handed, which the store has just read. The default does nothing.
    fn watch(&self, watcher: std::sync::Weak<dyn StoreWatcher>) {
        let _ = watcher;
    }
    /// Shared stores: how long a pending request has before its deadline by the store's clock
    /// (hosts' clocks may disagree); `None` when it is not pending. The default is `None`.
    fn time_left(&self, id: &Uuid) -> Option<std::time::Duration> {
        let _ = id;
        None
    }
    /// Releases what the store holds (files, locks); called by [`Gate::close`](crate::Gate::close)
    /// after every pending request has been resolved. Later operations fail with `store`. The
    /// default does nothing.
    fn close(&self) {}
}

/// The file a `sqlite:` store URL names (`sqlite:/path/signoff.db`, `sqlite:///path/signoff.db`,
/// `sqlite:relative/signoff.db`): the shared SQLite store ([`SqliteSharedStore`](crate::SqliteSharedStore)).
/// `None` for any other URL.
pub(crate) fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    // `sqlite:///abs` (an empty authority) and `sqlite://localhost/abs` name /abs.
    let rest = match rest.strip_prefix("//") {
        Some(r) => r.strip_prefix("localhost").unwrap_or(r),
        None => rest,
    };
    Some(std::path::PathBuf::from(rest))
}

/// Checks that `url` is a shared store's URL (without connecting): `sqlite:<path>` (one
/// machine) or a PostgreSQL connection string (many hosts).
pub(crate) fn check_store_url(url: &str) -> std::result::Result<(), String> {
    if let Some(path) = sqlite_path(url) {
        return match path.as_os_str().is_empty() || url.starts_with("sqlite://") && !path.is_absolute() {
            true => Err(format!("{url:?} names no file: write `sqlite:/path/to/signoff.db`")),
            false => Ok(()),
        };
    }
    #[cfg(feature = "postgres")]
    {
        url.parse::<tokio_postgres::Config>().map(|_| ()).map_err(|e| {
            format!("neither `sqlite:<path>` (one machine) nor a PostgreSQL connection string (many hosts): {e}")
        })
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = url;
        Err("not `sqlite:<path>` (one machine), and this build of signoff has no PostgreSQL support (cargo feature \
             `postgres`)"
            .into())
    }
}

/// A guarded change a shared store's row refused, in words (`now`: its state, if it could be
/// read): a pending row refuses because its deadline decides.
pub(crate) fn refusal(id: Uuid, state: RecordState, now: Option<RecordState>) -> crate::Error {
    let now = now.map(|s| s.as_str()).unwrap_or("missing");
    crate::Error::Store(format!(
        "request {id} cannot move to {} from {now}{}",
        state.as_str(),
        if now == "pending" { " (its deadline decides, by the store's clock)" } else { "" }
    ))
}

/// A schema name the PostgreSQL store accepts: 1 to 63 ASCII letters, digits, underscores.
pub(crate) fn is_schema_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Told by a shared store ([`PendingStore::watch`]) which of its requests another process
/// decided. Implemented by the gate.
pub trait StoreWatcher: Send + Sync + 'static {
    /// These requests left `pending` elsewhere; each record was read after the change.
    fn changed(&self, records: Vec<StoredRecord>);
    /// Whether to be told of requests other processes make ([`appeared`](Self::appeared)): only
    /// when someone here shows or answers them. The default is `false`.
    fn wants_requests(&self) -> bool {
        false
    }
    /// Other processes made these requests (still pending when read).
    fn appeared(&self, requests: Vec<Arc<ConfirmationRequest>>) {
        let _ = requests;
    }
    /// Requests that [`appeared`](Self::appeared) here ended (each record read after the change).
    fn ended(&self, records: Vec<StoredRecord>) {
        let _ = records;
    }
}

/// Where a request is in its life. Persisted by durable stores:
/// `pending → approved → executing → done`, or `pending → denied | timed-out | cancelled`, or
/// `pending → approved → released` (a [`Gate::confirm`](crate::Gate::confirm) caller took the
/// approval and runs the tool itself). `interrupted` marks an `approved` or `executing` record
/// found at start-up: the process stopped before the tool's result was recorded, so it is
/// reported and never run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordState {
    /// Waiting for a person.
    Pending,
    /// A person approved; the tool has not started.
    Approved,
    /// The tool is running (recorded before it starts).
    Executing,
    /// The tool ran; the result is stored.
    Done,
    /// Approved and handed to a `confirm` caller, which runs the tool itself.
    Released,
    /// A person declined.
    Denied,
    /// Nobody answered before the deadline (including deadlines that passed while the process
    /// was down).
    TimedOut,
    /// Cancelled before anyone answered.
    Cancelled,
    /// Found `approved` or `executing` at start-up: reported, never re-run.
    Interrupted,
}

impl RecordState {
    /// Every state, in the order of a request's life.
    pub const ALL: [RecordState; 9] = [
        RecordState::Pending,
        RecordState::Approved,
        RecordState::Executing,
        RecordState::Done,
        RecordState::Released,
        RecordState::Denied,
        RecordState::TimedOut,
        RecordState::Cancelled,
        RecordState::Interrupted,
    ];

    /// The stable kebab-case name, e.g. `"timed-out"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::Pending => "pending",
            RecordState::Approved => "approved",
            RecordState::Executing => "executing",
            RecordState::Done => "done",
            RecordState::Released => "released",
            RecordState::Denied => "denied",
            RecordState::TimedOut => "timed-out",
            RecordState::Cancelled => "cancelled",
            RecordState::Interrupted => "interrupted",
        }
    }
    /// Parses [`as_str`](Self::as_str)'s form.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
    /// No further change will happen.
    pub fn is_final(self) -> bool {
        !matches!(self, RecordState::Pending | RecordState::Approved | RecordState::Executing)
    }
    /// The states a request may move to this one from (every durable store guards its
    /// transitions with this table): `approved`, `denied` and `timed-out` only from `pending`,
    /// `executing` and `released` only from `approved`, `done` only from `executing`.
    pub fn predecessors(self) -> &'static [&'static str] {
        match self {
            RecordState::Pending => &[],
            RecordState::Approved | RecordState::Denied | RecordState::TimedOut => &["pending"],
            RecordState::Cancelled => &["pending", "approved", "denied"],
            RecordState::Released | RecordState::Executing => &["approved"],
            RecordState::Done => &["executing"],
            RecordState::Interrupted => &["approved", "executing"],
        }
    }
}

/// One state change, with what the new state needs recorded.
#[derive(Debug, Clone, Copy)]
pub struct StateChange<'a> {
    /// The new state.
    pub state: RecordState,
    /// `approved`: the arguments that will run (the original ones or the validated edit).
    pub arguments: Option<&'a Value>,
    /// Who answered.
    pub responder: Option<&'a str>,
    /// The fingerprint of the approval token that answered, if one did.
    pub token: Option<&'a str>,
    /// `done`: the tool's result; `interrupted`, `cancelled`: a note.
    pub result: Option<&'a Value>,
    /// `denied`: the person's reason (kept by shared stores, where the waiting process reads it).
    pub reason: Option<&'a str>,
    /// `approved`: the approval's scope (kept by shared stores).
    pub scope: Option<crate::event::Scope>,
}

impl<'a> StateChange<'a> {
    /// A change to `state` with nothing else recorded.
    pub fn to(state: RecordState) -> Self {
        StateChange { state, arguments: None, responder: None, token: None, result: None, reason: None, scope: None }
    }
}

/// A [`StateChange`] that owns what it records, for [`PendingStore::transition_async`].
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedStateChange {
    /// The new state.
    pub state: RecordState,
    /// See [`StateChange::arguments`].
    pub arguments: Option<Value>,
    /// See [`StateChange::responder`].
    pub responder: Option<String>,
    /// See [`StateChange::token`].
    pub token: Option<String>,
    /// See [`StateChange::result`].
    pub result: Option<Value>,
    /// See [`StateChange::reason`].
    pub reason: Option<String>,
    /// See [`StateChange::scope`].
    pub scope: Option<crate::event::Scope>,
}

impl OwnedStateChange {
    /// A change to `state` with nothing else recorded.
    pub fn to(state: RecordState) -> Self {
        StateChange::to(state).into()
    }

    /// The borrowed form, for [`PendingStore::transition`].
    pub fn as_change(&self) -> StateChange<'_> {
        StateChange {
            state: self.state,
            arguments: self.arguments.as_ref(),
            responder: self.responder.as_deref(),
            token: self.token.as_deref(),
            result: self.result.as_ref(),
            reason: self.reason.as_deref(),
            scope: self.scope,
        }
    }
}

impl From<StateChange<'_>> for OwnedStateChange {
    fn from(c: StateChange<'_>) -> Self {
        OwnedStateChange {
            state: c.state,
            arguments: c.arguments.cloned(),
            responder: c.responder.map(str::to_owned),
            token: c.token.map(str::to_owned),
            result: c.result.cloned(),
            reason: c.reason.map(str::to_owned),
            scope: c.scope,
        }
    }
}

/// A request as a store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRecord {
    /// The request as it was published.
    pub request: Arc<ConfirmationRequest>,
    /// Where it is now.
    pub state: RecordState,
    /// The arguments approved to run, once approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// Fingerprint of the approval token that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The tool's result (`done`) or a note (`interrupted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// A denial's reason (shared stores keep it; `None` elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// An approval's scope (shared stores keep it; [`Scope::Once`](crate::Scope::Once) elsewhere).
    #[serde(default)]
    pub scope: crate::event::Scope,
    /// When the state last changed (epoch ms).
    pub updated_at_ms: u64,
}

/// Where a page of pending requests ends: the (creation time, id) of its last request. Its
/// string form, `<created_at_ms>-<id>`, is what bindings hand to their callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PendingCursor {
    /// The request's creation time (epoch ms).
    pub created_at_ms: u64,
    /// The request's id.
    pub id: Uuid,
}

impl PendingCursor {
    /// The cursor just after `request`.
    pub fn of(request: &ConfirmationRequest) -> Self {
        PendingCursor { created_at_ms: request.created_at_ms, id: request.id }
    }
}

impl std::fmt::Display for PendingCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.created_at_ms, self.id)
    }
}

impl std::str::FromStr for PendingCursor {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad =
            || crate::Error::Malformed(format!("{s:?} is not a pending-page cursor (from an earlier page's `next`)"));
        let (t, id) = s.split_once('-').ok_or_else(bad)?;
        Ok(PendingCursor { created_at_ms: t.parse().map_err(|_| bad())?, id: id.parse().map_err(|_| bad())? })
    }
}

impl Serialize for PendingCursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PendingCursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Pending requests by id, with an index in [`PendingCursor`] order for paging. Shared by the
/// in-memory and SQLite stores.
#[derive(Default)]
pub(crate) struct PendingIndex {
    by_id: HashSet<ById, FxBuildHasher>,
    order: BTreeSet<ByCursor>,
}

/// A request found by its id: the table holds only the pointer (8 bytes a slot, where a map
/// would repeat the 16-byte id beside it).
struct ById(Arc<ConfirmationRequest>);

found_by_id!(ById, 0);

/// A request in the paging index, ordered by its [`PendingCursor`] read through the pointer: the
/// index's nodes hold 8-byte keys instead of 24-byte cursors (about 30 bytes less per pending
/// request, with nodes about half full as requests arrive in order). Looked up by a cursor through
/// [`CursorKey`], which both implement.
struct ByCursor(Arc<ConfirmationRequest>);

trait CursorKey {
    fn cursor(&self) -> PendingCursor;
}
impl CursorKey for PendingCursor {
    fn cursor(&self) -> PendingCursor {
        *self
    }
}
impl CursorKey for ByCursor {
    fn cursor(&self) -> PendingCursor {
        PendingCursor::of(&self.0)
    }
}
ord_by_key!(dyn CursorKey + '_, cursor);
// The same order as through `dyn CursorKey`, as `Borrow` requires.
ord_by_key!(ByCursor, cursor);
impl<'a> std::borrow::Borrow<dyn CursorKey + 'a> for ByCursor {
    fn borrow(&self) -> &(dyn CursorKey + 'a) {
        self
    }
}

impl PendingIndex {
    pub(crate) fn insert(&mut self, request: Arc<ConfirmationRequest>) {
        if let Some(ById(old)) = self.by_id.replace(ById(request.clone())) {
            self.order.remove(&PendingCursor::of(&old) as &dyn CursorKey);
        }
        self.order.insert(ByCursor(request));
    }
    pub(crate) fn remove(&mut self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        let ById(r) = self.by_id.take(id)?;
        self.order.remove(&PendingCursor::of(&r) as &dyn CursorKey);
        Some(r)
    }
    pub(crate) fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.by_id.get(id).map(|r| r.0.clone())
    }
    pub(crate) fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.order.iter().map(|r| r.0.clone()).collect()
    }
    pub(crate) fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        use std::ops::Bound;
        let from: Bound<&dyn CursorKey> = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a as &dyn CursorKey));
        self.order.range::<dyn CursorKey, _>((from, Bound::Unbounded)).take(limit).map(|r| r.0.clone()).collect()
    }
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
    pub(crate) fn clear(&mut self) {
        self.by_id.clear();
        self.order.clear();
    }
}

/// The default store: pending requests in memory, behind a mutex.
#[derive(Default)]
pub struct MemoryPendingStore {
    index: Mutex<PendingIndex>,
}

impl MemoryPendingStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    fn index(&self) -> std::sync::MutexGuard<'_, PendingIndex> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl PendingStore for MemoryPendingStore {
    fn insert(&self, request: Arc<ConfirmationRequest>) -> Result<()> {
        self.index().insert(request);
        Ok(())
    }
    fn keeps_only_pending(&self) -> bool {
        true
    }
    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.index().remove(id)
    }
    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.index().get(id)
    }
    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.index().list()
    }
    fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        self.index().page(after, limit)
    }
    fn len(&self) -> usize {
        self.index().len()
    }
}

/// Decides whether a response may answer a request (who is answering, with what credential).
/// Runs after the response has been matched to its request and before it takes effect.
pub trait ResponseAuthenticator: Send + Sync + 'static {
    /// `Err(reason)` rejects the response with [`ErrorKind::Unauthorized`](crate::ErrorKind).
    fn authenticate(&self, request: &ConfirmationRequest, response: &ConfirmationResponse) -> Result<(), String>;
}

/// The default: any in-process response that matches its request is accepted.
#[derive(Debug, Default, Clone, Copy)]
pub struct AcceptAll;

impl ResponseAuthenticator for AcceptAll {
    fn authenticate(&self, _: &ConfirmationRequest, _: &ConfirmationResponse) -> Result<(), String> {
        Ok(())
    }
}

/// Accepts only responses whose `responder` is in a fixed list.
#[derive(Debug, Clone)]
pub struct AllowedResponders(pub Vec<String>);

impl ResponseAuthenticator for AllowedResponders {
    fn authenticate(&self, _: &ConfirmationRequest, response: &ConfirmationResponse) -> Result<(), String> {
        match &response.responder {
            Some(r) if self.0.iter().any(|a| a == r) => Ok(()),
            Some(r) => Err(format!("responder {r:?} may not approve this request")),
            None => Err("the response names no responder".into()),
        }
    }
}

/// Decides who may approve which tools: a [`ResponseAuthenticator`] for
/// [`GateBuilder::authenticator`](crate::GateBuilder::authenticator).
///
/// Approvals must name their responder. With rules, the responder must be listed for the tool
/// (or for every tool); with a check, the check must agree; with
/// [`forbid_self_approval`](Self::forbid_self_approval), nobody may approve a request of their
/// own session (the responder equals the request's `session_id`). Denials are always accepted
/// from anyone who matches the request: refusing to run is the safe side.
///
/// ```
/// use signoff::Approvers;
/// let approvers = Approvers::new()
///     .allow("delete_file", ["alice", "bob"])
///     .allow_all_tools(["admin"])
///     .forbid_self_approval(true);
/// # let _ = approvers;
/// ```
#[derive(Clone, Default)]
pub struct Approvers {
    rules: Vec<(Option<String>, Vec<String>)>,
    check: Option<Arc<ApproverCheck>>,
    forbid_self: bool,
}

/// A callback deciding whether `approver` may approve `request`; `Err(reason)` refuses.
pub type ApproverCheck = dyn Fn(&ConfirmationRequest, &str) -> Result<(), String> + Send + Sync;

impl Approvers {
    /// No rules yet (any named responder may approve until a rule or check is added).
    pub fn new() -> Self {
        Self::default()
    }
    /// `approvers` may approve calls to `tool`.
    pub fn allow<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tool: impl Into<String>, approvers: I) -> Self {
        self.rules.push((Some(tool.into()), approvers.into_iter().map(Into::into).collect()));
        self
    }
    /// `approvers` may approve calls to any tool.
    pub fn allow_all_tools<I: IntoIterator<Item = S>, S: Into<String>>(mut self, approvers: I) -> Self {
        self.rules.push((None, approvers.into_iter().map(Into::into).collect()));
        self
    }
    /// A callback that must also agree.
    pub fn check(
        mut self,
        f: impl Fn(&ConfirmationRequest, &str) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.check = Some(Arc::new(f));
        self
    }
    /// Refuse an approval whose responder is the request's own session.
    pub fn forbid_self_approval(mut self, yes: bool) -> Self {
        self.forbid_self = yes;
        self
    }
    /// May `approver` approve `request`?
    pub fn may_approve(&self, request: &ConfirmationRequest, approver: &str) -> Result<(), String> {
        if self.forbid_self && approver == &*request.session_id {
            return Err(format!("{approver:?} may not approve a request from its own session"));
        }
        if !self.rules.is_empty() {
            let listed = self.rules.iter().any(|(tool, who)| {
                tool.as_deref().is_none_or(|t| t == &*request.tool) && who.iter().any(|w| w == approver)
            });
            if !listed {
                return Err(format!("{approver:?} may not approve `{}`", request.tool));
            }
        }
        match &self.check {
            Some(f) => f(request, approver),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Approvers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvers")
            .field("rules", &self.rules)
            .field("check", &self.check.is_some())
            .field("forbid_self_approval", &self.forbid_self)
            .finish()
    }
}

impl ResponseAuthenticator for Approvers {
    fn authenticate(&self, request: &ConfirmationRequest, response: &ConfirmationResponse) -> Result<(), String> {
        if response.decision == ResponseDecision::Deny {
            return Ok(());
        }
        match &response.responder {
            Some(r) => self.may_approve(request, r),
            None => Err("an approval must name its responder".into()),
        }
    }
}
