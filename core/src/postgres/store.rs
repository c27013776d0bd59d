//! [`PostgresStore`]: pending requests and their states in PostgreSQL, shared by every gate that
//! connects to the same database.

use super::db::{Connected, Db, Slot, ident, pg_err};
use crate::error::{Error, Result};
use crate::event::{ConfirmationRequest, Scope};
use crate::store::{
    OwnedStateChange, PendingCursor, PendingStore, RecordState, StateChange, StoreFuture, StoreWatcher, StoredRecord,
};
use rustc_hash::FxBuildHasher;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio_postgres::{Client, Row, Statement};
use uuid::Uuid;

/// The channel every state change is announced on (payload: request ids, comma-separated).
const CHANNEL: &str = "signoff_changed";
/// Serializes schema creation across processes.
const DDL_LOCK: i64 = 0x5167_6f66_6600_0001;
/// The schema version this code writes.
const SCHEMA_VERSION: i32 = 1;
/// How often a process re-reads what it waits for, whatever the notifications say.
const SAFETY_REREAD: Duration = Duration::from_secs(5);
/// Requests timed out per sweeper statement.
const SWEEP_BATCH: i64 = 200;
/// The most rows one batched write carries (see [`writer`]).
const WRITE_BATCH: usize = 128;
/// How long the notifier lets hints gather after it sent one, so a busy store sends one NOTIFY
/// for many changes (every listener wakes per NOTIFY). An idle store sends at once.
const NOTIFY_GATHER: Duration = Duration::from_millis(1);

const DDL: &str = "
CREATE TABLE IF NOT EXISTS signoff_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS signoff_requests (
    id uuid PRIMARY KEY,
    owner text NOT NULL,
    state text NOT NULL,
    request text NOT NULL,
    created_at_ms bigint NOT NULL,
    deadline_at timestamptz NOT NULL,
    arguments text,
    responder text,
    token text,
    result text,
    reason text,
    scope text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS signoff_single_use (id uuid PRIMARY KEY, expires_at_ms bigint NOT NULL);
CREATE INDEX IF NOT EXISTS signoff_requests_pending ON signoff_requests (created_at_ms, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS signoff_requests_deadline ON signoff_requests (deadline_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS signoff_requests_unfinished ON signoff_requests (owner)
    WHERE state IN ('pending', 'approved', 'executing');
";

/// The columns [`row_to_record`] reads, in order.
macro_rules! record_columns {
    () => {
        "request, state, arguments, responder, token, result, reason, scope, (extract(epoch FROM updated_at) * 1000)::bigint"
    };
}

/// How a [`PostgresStore`] connects and behaves.
#[derive(Debug, Clone, Default)]
pub struct PostgresOptions {
    /// Who owns the requests this store inserts: [`Gate::recover`](crate::Gate::recover) picks
    /// up only its owner's unfinished requests. Give each agent process a stable name of its own
    /// (`"billing-agent-1"`) to recover after a crash; two live processes must never share one.
    /// Default: a new random name per store, so nothing is recovered.
    pub owner: Option<String>,
    /// The PostgreSQL schema to keep the tables in (created if missing); default: the
    /// connection's search path (normally `public`). 1–63 ASCII letters, digits, underscores.
    pub schema: Option<String>,
    /// How often this process times out expired requests of every owner (deadlines by the
    /// database's clock). Default 1 s; `Some(Duration::ZERO)` turns this process's sweeper off.
    pub sweep_interval: Option<Duration>,
    /// How long one operation may wait for the server before it fails with `store` (default
    /// 30 s; more than zero, at most a day; it must exceed the time to open a connection:
    /// connecting, then about ten round trips to prepare its statements). A connection that was open when an operation got
    /// no answer in time is replaced at its next use, so a server or network that went silent
    /// without closing the connection (a dropped NAT entry, a partition) costs the operations
    /// waiting on it, not every operation after.
    pub operation_timeout: Option<Duration>,
}

/// Prepared statements of one connection.
struct Conn {
    client: Client,
    insert: Statement,
    insert_many: Statement,
    transition: Statement,
    transition_many: Statement,
    record: Statement,
    get: Statement,
    time_left: Statement,
    decided: Statement,
}

impl Connected for Conn {
    fn client(&self) -> &Client {
        &self.client
    }
}

/// What the background tasks share with the store.
struct Shared {
    db: Arc<Db>,
    owner: String,
    conn: Slot<Conn>,
    /// Requests this store inserted that are still pending as far as it knows.
    watched: Mutex<HashSet<Uuid, FxBuildHasher>>,
    /// Requests of other processes announced here, with their deadlines (epoch ms), until they end.
    shown: Mutex<HashMap<Uuid, u64, FxBuildHasher>>,
    watcher: Mutex<Option<Weak<dyn StoreWatcher>>>,
    closed: AtomicBool,
    /// Payloads for `NOTIFY signoff_changed`, sent after the changes they announce committed.
    notify: tokio::sync::mpsc::UnboundedSender<String>,
    /// New rows and state changes for the [`writer`].
    writes: tokio::sync::mpsc::UnboundedSender<Write>,
}

/// A new row for the [`writer`]: the request, its JSON text, whom to tell.
type NewRow = (Arc<ConfirmationRequest>, String, tokio::sync::oneshot::Sender<Result<()>>);
/// A guarded change for the [`writer`], and whom to tell how many rows moved.
type Change = (Uuid, OwnedStateChange, tokio::sync::oneshot::Sender<Result<u64>>);

/// A row to insert or a guarded change, queued for the [`writer`], with whom to tell.
enum Write {
    Insert { request: Arc<ConfirmationRequest>, text: String, done: tokio::sync::oneshot::Sender<Result<()>> },
    Change { id: Uuid, change: OwnedStateChange, done: tokio::sync::oneshot::Sender<Result<u64>> },
}

/// Why a batched statement did not commit.
enum BatchError {
    /// The server refused the statement (rolled back whole): the rows are tried one by one, so
    /// each caller learns its own answer.
    Refused,
    /// No answer, or the connection failed: whether it committed is unknown, or nothing can be
    /// written now. Every caller gets this error.
    Failed(Error),
}

fn stopped() -> Error {
    Error::Store("the PostgreSQL store stopped".into())
}

/// Pending requests and their states in PostgreSQL: many agents in many processes and hosts
/// create requests, any process lists and answers them, and the waiting call wakes on its own
/// host and runs its tool exactly once.
///
/// - Every state change is one statement with a guarded transition
///   ([`RecordState::predecessors`]): approved or denied only from pending and before the
///   deadline, executing only from approved, and so on. Of two racing answers, from any hosts,
///   exactly one wins; a token is consumed in the statement that claims the request. Changes
///   and new requests made at the same moment in one process share a statement (each row still
///   guarded on its own), so they share a commit and its disk flush.
/// - `executing` is committed before the tool starts, so a call found executing after a crash is
///   reported `interrupted` by [`Gate::recover`](crate::Gate::recover), never run again.
/// - Deadlines are judged by the database's clock. Every process runs a sweeper that times out
///   expired requests of every owner (`FOR UPDATE SKIP LOCKED`): each exactly once.
/// - Changes are announced with `NOTIFY signoff_changed`, a wake-up hint only: notifications
///   carry ids, are coalesced, and the row is always re-read. After a lost connection the store
///   re-reads every request it waits for.
///
/// Connecting needs no tokio runtime of the caller's: the store drives its connections on a
/// thread of its own. Its methods block the calling thread for one database round trip.
pub struct PostgresStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("owner", &self.shared.owner).finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`, or the key-value
    /// form), creates the tables if missing, and starts listening and sweeping.
    ///
    /// Errors: `config` (not a connection string, a bad schema name), `store` (the server
    /// cannot be reached or refuses).
    pub fn connect(url: &str, options: PostgresOptions) -> Result<Arc<PostgresStore>> {
        let db = Db::new(url, options.schema.as_deref(), options.operation_timeout)?;
        let owner = options.owner.clone().unwrap_or_else(|| format!("gate-{}", Uuid::new_v4()));
        if owner.is_empty() {
            return Err(Error::Config("the store's owner name is empty".into()));
        }
        let (notify, to_send) = tokio::sync::mpsc::unbounded_channel();
        let (writes, to_write) = tokio::sync::mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            notify,
            writes,
            db: db.clone(),
            owner,
            conn: Slot::default(),
            watched: Mutex::new(HashSet::default()),
            shown: Mutex::new(HashMap::default()),
            watcher: Mutex::new(None),
            closed: AtomicBool::new(false),
        });
        let schema = options.schema.clone();
        let s = shared.clone();
        db.block(async move {
            let client = s.db.connect().await?;
            let mut ddl = String::from("BEGIN; SELECT pg_advisory_xact_lock(");
            ddl.push_str(&DDL_LOCK.to_string());
            ddl.push_str(");");
            if let Some(schema) = &schema {
                ddl.push_str(&format!("CREATE SCHEMA IF NOT EXISTS {};", ident(schema)));
            }
            ddl.push_str(DDL);
            ddl.push_str(&format!(
                "INSERT INTO signoff_meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}') ON CONFLICT DO NOTHING; COMMIT;"
            ));
            client.batch_execute(&ddl).await.map_err(|e| pg_err("could not create the tables", e))?;
            let v: String = client
                .query_one("SELECT value FROM signoff_meta WHERE key = 'schema_version'", &[])
                .await
                .map_err(|e| pg_err("could not read the schema version", e))?
                .get(0);
            if v != SCHEMA_VERSION.to_string() {
                return Err(Error::Store(format!(
                    "the database holds signoff schema version {v}; this signoff writes version {SCHEMA_VERSION}"
                )));
            }
            Ok(())
        })?;
        db.handle().spawn(notifier(db.clone(), to_send));
        db.handle().spawn(writer(shared.clone(), to_write));
        // Listening before this returns: no change made after `connect` is missed.
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        db.handle().spawn(listen(shared.clone(), ready_tx));
        if ready_rx.recv_timeout(Duration::from_secs(15)).is_err() {
            shared.closed.store(true, Ordering::SeqCst);
            db.close();
            return Err(Error::Store("could not start listening for changes (LISTEN signoff_changed)".into()));
        }
        let every = options.sweep_interval.unwrap_or(Duration::from_secs(1));
        if !every.is_zero() {
            let s = Arc::downgrade(&shared);
            db.handle().spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(s) = s.upgrade() else { return };
                    if s.closed.load(Ordering::SeqCst) {
                        return;
                    }
                    // A failed sweep (server away) is retried at the next tick.
                    let _ = s.db.bounded("timing out expired requests", sweep(&s)).await;
                    s.prune_shown();
                }
            });
        }
        Ok(Arc::new(PostgresStore { shared }))
    }

    /// This store's owner name (see [`PostgresOptions::owner`]).
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Times out every pending request (of any owner) whose deadline passed by the database's
    /// clock, now, and announces each. Returns how many. The store does this every
    /// [`sweep_interval`](PostgresOptions::sweep_interval) by itself.
    pub fn sweep(&self) -> Result<usize> {
        let s = self.shared.clone();
        self.shared.db.block(async move { sweep(&s).await })
    }

    /// Deletes final records last changed more than `older_than` ago. Returns how many.
    pub fn purge_finished(&self, older_than: Duration) -> Result<u64> {
        let s = self.shared.clone();
        let ms = older_than.as_millis().min(i64::MAX as u128) as i64;
        self.shared.db.block(async move {
            let c = s.client().await?;
            c.client
                .execute(
                    "DELETE FROM signoff_requests WHERE state NOT IN ('pending', 'approved', 'executing')
                     AND updated_at < now() - ($1::bigint * interval '1 millisecond')",
                    &[&ms],
                )
                .await
                .map_err(|e| pg_err("could not purge", e))
        })
    }

    /// How a change to `state` ended: announced, refused (watched again when still pending), or
    /// unsure.
    fn changed(&self, id: Uuid, state: RecordState, watched: bool, changed: Result<u64>) -> Result<()> {
        match changed {
            Ok(1) => {
                self.shared.announce_change(id, state);
                Ok(())
            }
            Ok(_) => {
                let now = self.record(&id).map(|r| r.state);
                self.shared.refused_while_pending(id, watched, now);
                Err(crate::store::refusal(id, state, now))
            }
            Err(e) => Err(self.shared.unsure(id, state, e)),
        }
    }

    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(Arc<Shared>) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send>>,
    ) -> Result<T> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return Err(Error::Store("the PostgreSQL store is closed".into()));
        }
        self.shared.db.block(f(self.shared.clone()))
    }

    fn unwatch(&self, id: &Uuid) -> bool {
        self.shared.unwatch(id)
    }
}

impl Shared {
    async fn client(&self) -> Result<Arc<Conn>> {
        self.conn
            .get(&self.db, || async {
                let client = self.db.connect().await?;
                // The statements here find their rows by key or by a partial index. A generic
                // plan made while the table was nearly empty scans it whole, and stays cached as
                // the table grows (measured: 300-600 buffers per call instead of 10, and half the
                // throughput); planning every execution instead costs a quarter of it. So the
                // connection never chooses a table scan where an index serves.
                client
                    .batch_execute("SET enable_seqscan = off")
                    .await
                    .map_err(|e| pg_err("could not configure the connection", e))?;
                let prep = |sql: &'static str| {
                    let client = &client;
                    async move { client.prepare(sql).await.map_err(|e| pg_err("could not prepare a statement", e)) }
                };
                // No NOTIFY in these statements: PostgreSQL serializes notifying commits across the
                // server through their disk flush, so commits could not share a flush (measured:
                // 606 vs 3,966 updates/s). The notifier sends them after the commit instead.
                let insert = prep(
                    "INSERT INTO signoff_requests (id, owner, state, request, created_at_ms, deadline_at)
                     VALUES ($1, $2, 'pending', $3, $4, now() + ($5::bigint * interval '1 millisecond'))",
                )
                .await?;
                // The same for many rows: one statement, one commit, one disk flush.
                let insert_many = prep(
                    "INSERT INTO signoff_requests (id, owner, state, request, created_at_ms, deadline_at)
                     SELECT u.id, $1, 'pending', u.request, u.created, now() + (u.timeout * interval '1 millisecond')
                     FROM unnest($2::uuid[], $3::text[], $4::bigint[], $5::bigint[]) AS u(id, request, created, timeout)",
                )
                .await?;
                let transition = prep(
                    "UPDATE signoff_requests SET state = $2::text,
                        arguments = COALESCE($3, arguments), responder = COALESCE($4, responder),
                        token = COALESCE($5, token), result = COALESCE($6, result),
                        reason = COALESCE($7, reason), scope = COALESCE($8, scope), updated_at = now()
                     WHERE id = $1 AND state = ANY($9::text[])
                       AND CASE WHEN $2::text IN ('approved', 'denied') THEN deadline_at > now()
                                WHEN $2::text = 'timed-out' THEN deadline_at <= now()
                                ELSE true END",
                )
                .await?;
                // The same guard per row (allowed predecessors comma-separated); the rows that
                // moved come back. `r.id = ANY($1)` lets the planner find the rows by the primary
                // key (joined to `unnest` alone it scanned the table: 1.2 ms for 2 rows).
                let transition_many = prep(
                    "UPDATE signoff_requests r SET state = c.state,
                        arguments = COALESCE(c.arguments, r.arguments), responder = COALESCE(c.responder, r.responder),
                        token = COALESCE(c.token, r.token), result = COALESCE(c.result, r.result),
                        reason = COALESCE(c.reason, r.reason), scope = COALESCE(c.scope, r.scope), updated_at = now()
                     FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                                 $8::text[], $9::text[])
                          AS c(id, state, arguments, responder, token, result, reason, scope, preds)
                     WHERE r.id = ANY($1::uuid[]) AND r.id = c.id AND r.state = ANY(string_to_array(c.preds, ','))
                       AND CASE WHEN c.state IN ('approved', 'denied') THEN r.deadline_at > now()
                                WHEN c.state = 'timed-out' THEN r.deadline_at <= now()
                                ELSE true END
                     RETURNING r.id",
                )
                .await?;
                let record =
                    prep(concat!("SELECT ", record_columns!(), " FROM signoff_requests WHERE id = $1")).await?;
                let get = prep("SELECT request FROM signoff_requests WHERE id = $1 AND state = 'pending'").await?;
                let time_left = prep(
                    "SELECT GREATEST(0, extract(epoch FROM (deadline_at - now())) * 1000)::bigint
                     FROM signoff_requests WHERE id = $1 AND state = 'pending'",
                )
                .await?;
                let decided = prep(concat!(
                    "SELECT id, ",
                    record_columns!(),
                    " FROM signoff_requests WHERE id = ANY($1) AND state <> 'pending'"
                ))
                .await?;
                Ok(Conn { client, insert, insert_many, transition, transition_many, record, get, time_left, decided })
            })
            .await
    }

    fn watcher(&self) -> Option<Arc<dyn StoreWatcher>> {
        self.watcher.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(Weak::upgrade)
    }

    /// Every request this process waits for or shows.
    fn waited_for(&self) -> Vec<Uuid> {
        let mut all: Vec<Uuid> = self.watched.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
        all.extend(self.shown.lock().unwrap_or_else(|e| e.into_inner()).keys().copied());
        all
    }

    /// Re-reads `ids` (those watched or shown here) and hands the decided ones to the watcher.
    async fn reread(self: &Arc<Self>, ids: Vec<Uuid>) -> Result<()> {
        let ids: Vec<Uuid> = {
            let w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
            let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
            ids.into_iter()
                .filter(|id| w.contains(id) || shown.contains_key(id))
                .collect::<HashSet<_>>()
                .into_iter()
                .collect()
        };
        for chunk in ids.chunks(1000) {
            let read = async {
                let c = self.client().await?;
                c.client.query(&c.decided, &[&chunk]).await.map_err(|e| pg_err("could not re-read", e))
            };
            let rows = self.db.bounded("re-reading requests", read).await?;
            let (mut changed, mut ended) = (Vec::new(), Vec::new());
            {
                let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
                let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
                for row in rows {
                    let id: Uuid = row.get(0);
                    match row_to_record(&row, 1) {
                        Ok(r) => {
                            if w.remove(&id) {
                                changed.push(r);
                            } else if shown.remove(&id).is_some() {
                                ended.push(r);
                            }
                        }
                        Err(e) => crate::report!("signoff: request {id} in PostgreSQL is unreadable: {e}"),
                    }
                }
            }
            if (!changed.is_empty() || !ended.is_empty())
                && let Some(watcher) = self.watcher()
            {
                // The gate records and publishes on this thread: never on the store's own
                // runtime thread, which its store calls would wait for.
                let _ = tokio::task::spawn_blocking(move || {
                    if !changed.is_empty() {
                        watcher.changed(changed);
                    }
                    if !ended.is_empty() {
                        watcher.ended(ended);
                    }
                })
                .await;
            }
        }
        Ok(())
    }

    /// Hands requests other processes made to the watcher, when it wants them.
    async fn announce(self: &Arc<Self>, ids: Vec<Uuid>) -> Result<()> {
        let Some(watcher) = self.watcher() else { return Ok(()) };
        if ids.is_empty() || !watcher.wants_requests() {
            return Ok(());
        }
        let ids: Vec<Uuid> = {
            let w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
            ids.into_iter().filter(|id| !w.contains(id)).collect()
        };
        for chunk in ids.chunks(1000) {
            let read = async {
                let c = self.client().await?;
                c.client
                    .query("SELECT request FROM signoff_requests WHERE id = ANY($1) AND state = 'pending'", &[&chunk])
                    .await
                    .map_err(|e| pg_err("could not read new requests", e))
            };
            let rows = self.db.bounded("reading new requests", read).await?;
            let requests: Vec<Arc<ConfirmationRequest>> = rows.iter().filter_map(request_of).collect();
            if requests.is_empty() {
                continue;
            }
            {
                let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
                for r in &requests {
                    shown.insert(r.id, r.deadline_ms);
                }
            }
            let watcher = watcher.clone();
            let _ = tokio::task::spawn_blocking(move || watcher.appeared(requests)).await;
        }
        Ok(())
    }

    /// After a reconnect: announces pending requests not yet shown here (the oldest
    /// [`LAGGED_SNAPSHOT_LIMIT`](crate::LAGGED_SNAPSHOT_LIMIT)).
    async fn announce_pending(self: &Arc<Self>) -> Result<()> {
        if !self.watcher().is_some_and(|w| w.wants_requests()) {
            return Ok(());
        }
        let limit = crate::LAGGED_SNAPSHOT_LIMIT as i64;
        let read = async {
            let c = self.client().await?;
            c.client
                .query(
                    "SELECT id FROM signoff_requests WHERE state = 'pending' ORDER BY created_at_ms, id LIMIT $1",
                    &[&limit],
                )
                .await
                .map_err(|e| pg_err("could not list", e))
        };
        let rows = self.db.bounded("listing pending requests", read).await?;
        let ids: Vec<Uuid> = {
            let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
            rows.iter().map(|r| r.get::<_, Uuid>(0)).filter(|id| !shown.contains_key(id)).collect()
        };
        self.announce(ids).await
    }

    /// Forgets shown requests long past their deadline (their end was announced, or missed
    /// while disconnected).
    fn prune_shown(&self) {
        let horizon = crate::event::now_ms().saturating_sub(60_000);
        self.shown.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, deadline| *deadline > horizon);
    }
}

/// Listens for changes, re-reading what this store waits for; reconnects with backoff and
/// re-reads everything it waits for after each (re)connect.
async fn listen(shared: Arc<Shared>, ready: std::sync::mpsc::SyncSender<()>) {
    let mut backoff = Duration::from_millis(50);
    let mut first = true;
    loop {
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        let connected = shared.db.connect_listening().await;
        let (client, mut rx) = match connected {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        let db = &shared.db;
        if !matches!(db.timed_out(client.batch_execute(&format!("LISTEN {CHANNEL}"))).await, Some(Ok(()))) {
            tokio::time::sleep(backoff).await;
            continue;
        }
        backoff = Duration::from_millis(50);
        if first {
            first = false;
            let _ = ready.try_send(());
        } else {
            // Anything may have changed while nobody listened: what this process waits for or
            // shows is re-read, and requests made meanwhile are announced (the oldest
            // LAGGED_SNAPSHOT_LIMIT; a UI pages for the rest).
            let all = shared.waited_for();
            if shared.reread(all).await.is_err() || shared.announce_pending().await.is_err() {
                continue;
            }
        }
        // A safety net under the hints: a notification lost with the process that was to send
        // it (it crashed between its commit and the NOTIFY) delays a wake-up by this much.
        let mut safety = tokio::time::interval(SAFETY_REREAD);
        safety.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        safety.tick().await;
        loop {
            let n = tokio::select! {
                n = rx.recv() => match n {
                    Some(n) => n,
                    None => break,
                },
                _ = safety.tick() => {
                    // The listening connection answers too: one whose peer went silent would
                    // bring no notification, and nothing else would close it for hours.
                    if !matches!(db.timed_out(client.simple_query("")).await, Some(Ok(_))) {
                        break;
                    }
                    if shared.reread(shared.waited_for()).await.is_err() {
                        break;
                    }
                    continue;
                }
            };
            let (mut ids, mut new): (Vec<Uuid>, Vec<Uuid>) = (Vec::new(), Vec::new());
            let mut take = |payload: &str| {
                for part in payload.split(',') {
                    match part.trim().strip_prefix("new:") {
                        Some(id) => new.extend(id.parse::<Uuid>().ok()),
                        None => ids.extend(part.trim().parse::<Uuid>().ok()),
                    }
                }
            };
            take(n.payload());
            // Coalesce whatever else already arrived into one read.
            while let Ok(more) = rx.try_recv() {
                take(more.payload());
            }
            if shared.announce(new).await.is_err() || shared.reread(ids).await.is_err() {
                // A failed read: the connection is probably gone; the reconnect re-reads all.
                break;
            }
        }
        drop(client);
    }
}

/// Sends queued notifications, coalesced (up to 150 ids per NOTIFY, within its 8,000-byte limit),
/// on a connection of its own that does not wait for the disk: a notification is a hint, and its
/// transaction writes nothing worth a flush. A payload that cannot be sent is dropped (the waiting
/// side also re-reads what it waits for every few seconds).
async fn notifier(db: Arc<Db>, mut to_send: tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut client: Option<(tokio_postgres::Client, tokio_postgres::Statement)> = None;
    let mut last_sent: Option<tokio::time::Instant> = None;
    while let Some(first) = to_send.recv().await {
        // Busy (a NOTIFY went out a moment ago): let more hints gather for one NOTIFY.
        if let Some(wait) = last_sent.and_then(|t| NOTIFY_GATHER.checked_sub(t.elapsed()))
            && !wait.is_zero()
        {
            tokio::time::sleep(wait).await;
        }
        let mut payload = first;
        let mut n = 1;
        while n < 150 {
            match to_send.try_recv() {
                Ok(more) => {
                    payload.push(',');
                    payload.push_str(&more);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        for _attempt in 0..2 {
            if client.as_ref().is_none_or(|(c, _)| c.is_closed()) {
                let open = async {
                    let c = db.connect().await.ok()?;
                    c.batch_execute("SET synchronous_commit = off").await.ok()?;
                    let stmt = c.prepare("SELECT pg_notify('signoff_changed', $1)").await.ok()?;
                    Some((c, stmt))
                };
                client = db.timed_out(open).await.flatten();
            }
            let Some((c, stmt)) = &client else { break };
            if matches!(db.timed_out(c.execute(stmt, &[&payload])).await, Some(Ok(_))) {
                last_sent = Some(tokio::time::Instant::now());
                break;
            }
            client = None;
        }
    }
}

async fn sweep(shared: &Arc<Shared>) -> Result<usize> {
    let mut total = 0usize;
    loop {
        let c = shared.client().await?;
        let row = c
            .client
            .query_one(
                "WITH expired AS (
                    SELECT id FROM signoff_requests WHERE state = 'pending' AND deadline_at <= now()
                    ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED),
                 u AS (
                    UPDATE signoff_requests r SET state = 'timed-out', updated_at = now()
                    FROM expired WHERE r.id = expired.id RETURNING r.id),
                 n AS (
                    SELECT pg_notify('signoff_changed', ids) FROM (SELECT string_agg(id::text, ',') AS ids FROM u) s
                    WHERE ids IS NOT NULL)
                 SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM n)",
                &[&SWEEP_BATCH],
            )
            .await
            .map_err(|e| pg_err("could not sweep expired requests", e))?;
        let n: i64 = row.get(0);
        total += n as usize;
        if n < SWEEP_BATCH {
            return Ok(total);
        }
    }
}

fn row_to_record(row: &Row, at: usize) -> Result<StoredRecord> {
    let request: String = row.get(at);
    let state: String = row.get(at + 1);
    let arguments: Option<String> = row.get(at + 2);
    let result: Option<String> = row.get(at + 5);
    let scope: Option<String> = row.get(at + 7);
    let updated: i64 = row.get(at + 8);
    let parse = |what: &str, s: &str| -> Result<serde_json::Value> {
        serde_json::from_str(s).map_err(|e| Error::Store(format!("stored {what} is not valid JSON: {e}")))
    };
    Ok(StoredRecord {
        request: Arc::new(
            serde_json::from_str(&request).map_err(|e| Error::Store(format!("stored request unreadable: {e}")))?,
        ),
        state: RecordState::parse(&state).ok_or_else(|| Error::Store(format!("unknown stored state {state:?}")))?,
        arguments: arguments.as_deref().map(|a| parse("arguments", a)).transpose()?,
        responder: row.get(at + 3),
        token: row.get(at + 4),
        result: result.as_deref().map(|r| parse("result", r)).transpose()?,
        reason: row.get(at + 6),
        scope: match scope.as_deref() {
            Some("session") => Scope::Session,
            _ => Scope::Once,
        },
        updated_at_ms: updated.max(0) as u64,
    })
}

/// `read`, its error naming the request it could not read (a row written by hand, or by a
/// newer signoff), so that an operator can find and fix or remove it.
fn named(id: Uuid, read: Result<StoredRecord>) -> Result<StoredRecord> {
    read.map_err(|e| match e {
        Error::Store(m) => Error::Store(format!("request {id} in PostgreSQL is unreadable: {m}")),
        other => other,
    })
}

fn request_of(row: &Row) -> Option<Arc<ConfirmationRequest>> {
    let text: String = row.get(0);
    serde_json::from_str(&text).ok().map(Arc::new)
}

type Fut<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send>>;

impl Shared {
    /// Writes a new pending request (its deadline: now plus its timeout, by the database's clock),
    /// through the [`writer`], and announces it once committed.
    async fn insert_row(&self, request: Arc<ConfirmationRequest>, text: String) -> Result<()> {
        let id = request.id;
        let (done, rx) = tokio::sync::oneshot::channel();
        self.writes.send(Write::Insert { request, text, done }).map_err(|_| stopped())?;
        rx.await.unwrap_or_else(|_| Err(stopped()))?;
        let _ = self.notify.send(format!("new:{id}"));
        Ok(())
    }

    /// The guarded state change, through the [`writer`]: how many rows moved (1, or 0 when the
    /// request is not in a state that allows it).
    async fn change_row(&self, id: Uuid, change: OwnedStateChange) -> Result<u64> {
        let (done, rx) = tokio::sync::oneshot::channel();
        self.writes.send(Write::Change { id, change, done }).map_err(|_| stopped())?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// One row, its own statement.
    async fn insert_one(&self, request: &ConfirmationRequest, text: &str) -> Result<()> {
        let c = self.client().await?;
        let created = request.created_at_ms.min(i64::MAX as u64) as i64;
        let timeout = request.timeout_ms.min(i64::MAX as u64) as i64;
        c.client
            .execute(&c.insert, &[&request.id, &self.owner, &text, &created, &timeout])
            .await
            .map_err(|e| pg_err("could not store the request", e))?;
        Ok(())
    }

    /// One change, its own statement.
    async fn change_one(&self, id: Uuid, change: &OwnedStateChange) -> Result<u64> {
        self.change_one_from(id, change, change.state.predecessors()).await
    }

    /// [`change_one`](Self::change_one) from the states in `from` only (a subset of the legal
    /// predecessors).
    async fn change_one_from(&self, id: Uuid, change: &OwnedStateChange, from: &[&str]) -> Result<u64> {
        let c = self.client().await?;
        let p = ChangeParams::of(change);
        let from: Vec<&str> = from.to_vec();
        c.client
            .execute(
                &c.transition,
                &[
                    &id,
                    &change.state.as_str(),
                    &p.arguments,
                    &p.responder,
                    &p.token,
                    &p.result,
                    &p.reason,
                    &p.scope,
                    &from,
                ],
            )
            .await
            .map_err(|e| pg_err("could not record the state change", e))
    }

    /// Many rows, one statement.
    async fn insert_many(&self, rows: &[(Arc<ConfirmationRequest>, String)]) -> std::result::Result<(), BatchError> {
        let c = self.client().await.map_err(BatchError::Failed)?;
        let ids: Vec<Uuid> = rows.iter().map(|(r, _)| r.id).collect();
        let texts: Vec<&str> = rows.iter().map(|(_, t)| t.as_str()).collect();
        let created: Vec<i64> = rows.iter().map(|(r, _)| r.created_at_ms.min(i64::MAX as u64) as i64).collect();
        let timeouts: Vec<i64> = rows.iter().map(|(r, _)| r.timeout_ms.min(i64::MAX as u64) as i64).collect();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [&self.owner, &ids, &texts, &created, &timeouts];
        let run = c.client.execute(&c.insert_many, &params);
        match self.db.timed_out(run).await {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) if e.as_db_error().is_some() => Err(BatchError::Refused),
            Some(Err(e)) => Err(BatchError::Failed(pg_err("could not store the request", e))),
            None => Err(BatchError::Failed(Error::Store("no answer from PostgreSQL while storing the request".into()))),
        }
    }

    /// Many changes (distinct requests), one statement: the ids that moved.
    async fn change_many(&self, rows: &[(Uuid, OwnedStateChange)]) -> std::result::Result<HashSet<Uuid>, BatchError> {
        let c = self.client().await.map_err(BatchError::Failed)?;
        let params: Vec<ChangeParams> = rows.iter().map(|(_, ch)| ChangeParams::of(ch)).collect();
        let ids: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
        let states: Vec<&str> = rows.iter().map(|(_, ch)| ch.state.as_str()).collect();
        let column = |f: for<'a> fn(&'a ChangeParams<'a>) -> Option<&'a str>| -> Vec<Option<&str>> {
            params.iter().map(f).collect()
        };
        let (arguments, responders, tokens, results, reasons, scopes) = (
            column(|p| p.arguments.as_deref()),
            column(|p| p.responder),
            column(|p| p.token),
            column(|p| p.result.as_deref()),
            column(|p| p.reason),
            column(|p| p.scope),
        );
        let preds: Vec<String> = rows.iter().map(|(_, ch)| ch.state.predecessors().join(",")).collect();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] =
            [&ids, &states, &arguments, &responders, &tokens, &results, &reasons, &scopes, &preds];
        let run = c.client.query(&c.transition_many, &params);
        match self.db.timed_out(run).await {
            Some(Ok(moved)) => Ok(moved.iter().map(|r| r.get::<_, Uuid>(0)).collect()),
            Some(Err(e)) if e.as_db_error().is_some() => Err(BatchError::Refused),
            Some(Err(e)) => Err(BatchError::Failed(pg_err("could not record the state change", e))),
            None => Err(BatchError::Failed(Error::Store(
                "no answer from PostgreSQL while recording the state change".into(),
            ))),
        }
    }

    /// New rows the [`writer`] gathered: one statement for all, or one each when the server
    /// refused the shared one.
    async fn write_inserts(&self, inserts: Vec<NewRow>) {
        let (rows, dones): (Vec<_>, Vec<_>) = inserts.into_iter().map(|(r, t, d)| ((r, t), d)).unzip();
        let dones = match rows.len() {
            0 | 1 => dones,
            _ => match answer_batch(&rows, dones, self.insert_many(&rows).await.map(|()| |_: &_| ())) {
                Some(refused) => refused,
                None => return,
            },
        };
        for ((request, text), d) in rows.into_iter().zip(dones) {
            let _ = d.send(self.db.bounded("storing the request", self.insert_one(&request, &text)).await);
        }
    }

    /// Changes the [`writer`] gathered (distinct requests), likewise; a guarded row that did not
    /// move is reported as such to its caller alone.
    async fn write_changes(&self, changes: Vec<Change>) {
        let (rows, dones): (Vec<_>, Vec<_>) = changes.into_iter().map(|(id, c, d)| ((id, c), d)).unzip();
        let dones = match rows.len() {
            0 | 1 => dones,
            _ => {
                let moved = self.change_many(&rows).await;
                let answer = moved.map(|moved| move |(id, _): &(Uuid, OwnedStateChange)| u64::from(moved.contains(id)));
                match answer_batch(&rows, dones, answer) {
                    Some(refused) => refused,
                    None => return,
                }
            }
        };
        for ((id, change), d) in rows.into_iter().zip(dones) {
            let _ = d.send(self.db.bounded("recording the state change", self.change_one(id, &change)).await);
        }
    }

    /// Announces a change someone may wait for (a decision, a timeout, a cancellation); the
    /// execution states concern only the process that makes them.
    fn announce_change(&self, id: Uuid, state: RecordState) {
        if matches!(state, RecordState::Approved | RecordState::Denied | RecordState::TimedOut | RecordState::Cancelled)
        {
            let _ = self.notify.send(id.to_string());
        }
    }

    /// Stops watching `id`; whether it was watched.
    fn unwatch(&self, id: &Uuid) -> bool {
        self.watched.lock().unwrap_or_else(|e| e.into_inner()).remove(id)
    }

    /// Our change was refused and the row is still pending (its deadline, by the database's
    /// clock, has not passed: this host's clock runs ahead): watch it again, or an answer made
    /// elsewhere before that deadline would reach the waiting call only at the deadline.
    fn refused_while_pending(&self, id: Uuid, was_watched: bool, now: Option<RecordState>) {
        if was_watched && now == Some(RecordState::Pending) {
            self.watched.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        }
    }

    /// A change that may or may not have committed: keep listening for what the row says.
    fn unsure(&self, id: Uuid, state: RecordState, e: Error) -> Error {
        if state != RecordState::Pending {
            self.watched.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        }
        e
    }
}

/// A state change's optional columns as the statements take them.
struct ChangeParams<'a> {
    arguments: Option<String>,
    responder: Option<&'a str>,
    token: Option<&'a str>,
    result: Option<String>,
    reason: Option<&'a str>,
    scope: Option<&'static str>,
}

impl ChangeParams<'_> {
    fn of(change: &OwnedStateChange) -> ChangeParams<'_> {
        let json = |v: Option<&serde_json::Value>| v.map(|v| serde_json::to_string(v).unwrap_or_default());
        ChangeParams {
            arguments: json(change.arguments.as_ref()),
            responder: change.responder.as_deref(),
            token: change.token.as_deref(),
            result: json(change.result.as_ref()),
            reason: change.reason.as_deref(),
            scope: change.scope.map(|s| match s {
                Scope::Once => "once",
                Scope::Session => "session",
            }),
        }
    }
}

/// Tells each caller of a batch what the shared statement did: `answer(row)` when it committed,
/// its error when it failed. When the server refused it, nothing is told and the callers come
/// back, for their rows to be written one by one.
fn answer_batch<R, T>(
    rows: &[R],
    dones: Vec<tokio::sync::oneshot::Sender<Result<T>>>,
    shared: std::result::Result<impl Fn(&R) -> T, BatchError>,
) -> Option<Vec<tokio::sync::oneshot::Sender<Result<T>>>> {
    match shared {
        Ok(answer) => {
            for (row, d) in rows.iter().zip(dones) {
                let _ = d.send(Ok(answer(row)));
            }
            None
        }
        Err(BatchError::Failed(e)) => {
            for d in dones {
                let _ = d.send(Err(e.clone()));
            }
            None
        }
        Err(BatchError::Refused) => Some(dones),
    }
}

/// Writes new requests and state changes in batches: whatever callers queue while a statement
/// runs goes into the next one (one multi-row `INSERT`, then one multi-row guarded `UPDATE`), so
/// concurrent calls share a statement, a commit and its disk flush instead of queueing one
/// commit each on the store's connection. Each caller still learns its own outcome: the rows a
/// guarded change did not move are reported as refused, and a statement the server refuses is
/// retried row by row. A batch holds at most one change per request (a second waits for the
/// next batch), so the rows it reports are unambiguous. Measured (BENCHMARKS.md, issue 13):
/// 64 calls in flight per process write ~8 rows per statement.
async fn writer(shared: Arc<Shared>, mut queue: tokio::sync::mpsc::UnboundedReceiver<Write>) {
    let mut held: Option<Write> = None;
    loop {
        let first = match held.take() {
            Some(w) => w,
            None => match queue.recv().await {
                Some(w) => w,
                None => return,
            },
        };
        let (mut inserts, mut changes): (Vec<NewRow>, Vec<Change>) = (Vec::new(), Vec::new());
        let mut changing: HashSet<Uuid, FxBuildHasher> = HashSet::default();
        let mut next = Some(first);
        while let Some(w) = next.take() {
            match w {
                // A caller that stopped waiting (its operation timed out) was told it failed:
                // what it asked for is not written behind its back.
                Write::Insert { done, .. } if done.is_closed() => {}
                Write::Change { done, .. } if done.is_closed() => {}
                Write::Insert { request, text, done } => inserts.push((request, text, done)),
                Write::Change { id, change, done } => {
                    if !changing.insert(id) {
                        held = Some(Write::Change { id, change, done });
                        break;
                    }
                    changes.push((id, change, done));
                }
            }
            if inserts.len() + changes.len() < WRITE_BATCH {
                next = queue.try_recv().ok();
            }
        }
        // A request is inserted before anyone can change it: inserts first.
        shared.write_inserts(inserts).await;
        shared.write_changes(changes).await;
    }
}

/// How long past its expiry (by the database's clock) a single-use id is kept: hosts judge a
/// token's expiry by their own clocks, so an id is remembered for as long as a host whose clock
/// lags by up to this much may still accept what it was for.
const SINGLE_USE_GRACE: Duration = Duration::from_secs(3600);

impl PendingStore for PostgresStore {
    fn use_once(&self, id: &Uuid, expires_at_ms: u64) -> Result<bool> {
        let (id, until) = (*id, expires_at_ms.min(i64::MAX as u64) as i64);
        let grace = SINGLE_USE_GRACE.as_millis() as i64;
        self.run(move |s| -> Fut<bool> {
            Box::pin(async move {
                let c = s.client().await?;
                let err = |e| pg_err("could not record a single use", e);
                // Expired ids are forgotten (what they were for is refused by its expiry anyway),
                // by the database's clock and [`SINGLE_USE_GRACE`] after their expiry: each host
                // judges expiry by its own clock, and one whose clock ran ahead used to forget
                // ids that the others still accepted, so a marker could be used twice.
                c.client
                    .execute(
                        "DELETE FROM signoff_single_use
                         WHERE expires_at_ms <= (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - $1",
                        &[&grace],
                    )
                    .await
                    .map_err(err)?;
                // Of two hosts using the same id at once, the key lets one in.
                let added = c
                    .client
                    .execute(
                        "INSERT INTO signoff_single_use (id, expires_at_ms) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                        &[&id, &until],
                    )
                    .await
                    .map_err(err)?;
                Ok(added == 1)
            })
        })
    }

    fn insert(&self, request: Arc<ConfirmationRequest>) -> Result<()> {
        let id = request.id;
        let text =
            serde_json::to_string(&*request).map_err(|e| Error::Store(format!("unserializable request: {e}")))?;
        // Watched before it exists: a decision made the moment it is visible is not missed.
        self.shared.watched.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        let r = self.run(move |s| -> Fut<()> { Box::pin(async move { s.insert_row(request, text).await }) });
        if r.is_err() {
            self.unwatch(&id);
        }
        r
    }

    fn insert_async(&self, request: Arc<ConfirmationRequest>, abandoned: Arc<AtomicBool>) -> Option<StoreFuture<()>> {
        let id = request.id;
        let text = match serde_json::to_string(&*request) {
            Ok(t) => t,
            Err(e) => {
                return Some(Box::pin(std::future::ready(Err(Error::Store(format!("unserializable request: {e}"))))));
            }
        };
        if self.shared.closed.load(Ordering::SeqCst) {
            return Some(Box::pin(std::future::ready(Err(Error::Store("the PostgreSQL store is closed".into())))));
        }
        // Watched before it exists: a decision made the moment it is visible is not missed.
        self.shared.watched.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let s = self.shared.clone();
        self.shared.db.handle().spawn(async move {
            let r = s.db.bounded("storing the request", s.insert_row(request, text)).await;
            if r.is_err() {
                s.unwatch(&id);
            } else if abandoned.load(Ordering::SeqCst) {
                // The call went away while its request was being written: end the row too, from
                // `pending` only; one approved elsewhere meanwhile is released (nothing runs it).
                s.unwatch(&id);
                let cancel = OwnedStateChange::to(RecordState::Cancelled);
                let what = "cancelling an abandoned request";
                if matches!(s.db.bounded(what, s.change_one_from(id, &cancel, &["pending"])).await, Ok(1)) {
                    s.announce_change(id, RecordState::Cancelled);
                } else {
                    let release = s.change_row(id, OwnedStateChange::to(RecordState::Released));
                    let _ = s.db.bounded(what, release).await;
                }
            }
            let _ = tx.send(r);
        });
        Some(Box::pin(
            async move { rx.await.unwrap_or_else(|_| Err(Error::Store("the PostgreSQL store stopped".into()))) },
        ))
    }

    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        // The row stays, in its final state; this process stops watching it.
        self.unwatch(id);
        None
    }

    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        let id = *id;
        self.run(move |s| -> Fut<Option<Arc<ConfirmationRequest>>> {
            Box::pin(async move {
                let c = s.client().await?;
                let row = c.client.query_opt(&c.get, &[&id]).await.map_err(|e| pg_err("could not read", e))?;
                Ok(row.as_ref().and_then(request_of))
            })
        })
        .ok()
        .flatten()
    }

    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.run(|s| -> Fut<Vec<Arc<ConfirmationRequest>>> {
            Box::pin(async move {
                let c = s.client().await?;
                let rows = c
                    .client
                    .query(
                        "SELECT request FROM signoff_requests WHERE state = 'pending' ORDER BY created_at_ms, id",
                        &[],
                    )
                    .await
                    .map_err(|e| pg_err("could not list", e))?;
                Ok(rows.iter().filter_map(request_of).collect())
            })
        })
        .unwrap_or_default()
    }

    fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        let after = after.copied();
        let limit = limit.min(i64::MAX as usize) as i64;
        self.run(move |s| -> Fut<Vec<Arc<ConfirmationRequest>>> {
            Box::pin(async move {
                let c = s.client().await?;
                let rows = match after {
                    None => {
                        c.client
                            .query(
                                "SELECT request FROM signoff_requests WHERE state = 'pending'
                             ORDER BY created_at_ms, id LIMIT $1",
                                &[&limit],
                            )
                            .await
                    }
                    Some(a) => {
                        let t = a.created_at_ms.min(i64::MAX as u64) as i64;
                        c.client
                            .query(
                                "SELECT request FROM signoff_requests WHERE state = 'pending'
                                 AND (created_at_ms, id) > ($1, $2) ORDER BY created_at_ms, id LIMIT $3",
                                &[&t, &a.id, &limit],
                            )
                            .await
                    }
                }
                .map_err(|e| pg_err("could not list", e))?;
                Ok(rows.iter().filter_map(request_of).collect())
            })
        })
        .unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.run(|s| -> Fut<usize> {
            Box::pin(async move {
                let c = s.client().await?;
                let row = c
                    .client
                    .query_one("SELECT count(*) FROM signoff_requests WHERE state = 'pending'", &[])
                    .await
                    .map_err(|e| pg_err("could not count", e))?;
                Ok(row.get::<_, i64>(0) as usize)
            })
        })
        .unwrap_or(0)
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn transition(&self, id: &Uuid, change: StateChange<'_>) -> Result<()> {
        let id = *id;
        let state = change.state;
        let change = OwnedStateChange::from(change);
        // Our own change: the notification it causes needs no re-read here.
        let watched = state != RecordState::Pending && self.unwatch(&id);
        let changed = self.run(move |s| -> Fut<u64> { Box::pin(async move { s.change_row(id, change).await }) });
        self.changed(id, state, watched, changed)
    }

    fn cancel_pending(&self, id: &Uuid) -> Result<()> {
        let id = *id;
        let state = RecordState::Cancelled;
        let watched = self.unwatch(&id);
        let changed = self.run(move |s| -> Fut<u64> {
            Box::pin(async move { s.change_one_from(id, &OwnedStateChange::to(state), &["pending"]).await })
        });
        self.changed(id, state, watched, changed)
    }

    fn transition_async(&self, id: Uuid, change: OwnedStateChange) -> StoreFuture<()> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(Error::Store("the PostgreSQL store is closed".into()))));
        }
        let state = change.state;
        let watched = state != RecordState::Pending && self.unwatch(&id);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let s = self.shared.clone();
        self.shared.db.handle().spawn(async move {
            let r = match s.db.timed_out(s.change_row(id, change)).await {
                Some(Ok(1)) => {
                    s.announce_change(id, state);
                    Ok(())
                }
                Some(Ok(_)) => {
                    let read = async {
                        let c = s.client().await?;
                        c.client.query_opt(&c.record, &[&id]).await.map_err(|e| pg_err("could not read", e))
                    };
                    let now = s.db.bounded("reading the request", read).await.ok().flatten();
                    let now = now.and_then(|row| row_to_record(&row, 0).ok()).map(|r| r.state);
                    s.refused_while_pending(id, watched, now);
                    Err(crate::store::refusal(id, state, now))
                }
                Some(Err(e)) => Err(s.unsure(id, state, e)),
                None => {
                    let e = Error::Store("no answer from PostgreSQL while recording the state change".into());
                    Err(s.unsure(id, state, e))
                }
            };
            let _ = tx.send(r);
        });
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err(Error::Store("the PostgreSQL store stopped".into()))) })
    }

    fn record(&self, id: &Uuid) -> Option<StoredRecord> {
        self.try_record(id).ok().flatten()
    }

    fn try_record(&self, id: &Uuid) -> Result<Option<StoredRecord>> {
        let id = *id;
        self.run(move |s| -> Fut<Option<StoredRecord>> {
            Box::pin(async move {
                let c = s.client().await?;
                let row = c.client.query_opt(&c.record, &[&id]).await.map_err(|e| pg_err("could not read", e))?;
                row.map(|r| named(id, row_to_record(&r, 0))).transpose()
            })
        })
    }

    fn unfinished(&self) -> Result<Vec<StoredRecord>> {
        self.run(|s| -> Fut<Vec<StoredRecord>> {
            Box::pin(async move {
                let c = s.client().await?;
                let sql = concat!(
                    "SELECT id, ",
                    record_columns!(),
                    " FROM signoff_requests WHERE owner = $1
                     AND state IN ('pending', 'approved', 'executing') ORDER BY created_at_ms, id"
                );
                let rows = c.client.query(sql, &[&s.owner]).await.map_err(|e| pg_err("could not read", e))?;
                rows.iter().map(|r| named(r.get(0), row_to_record(r, 1))).collect()
            })
        })
    }

    fn restore(&self, request: Arc<ConfirmationRequest>) {
        self.shared.watched.lock().unwrap_or_else(|e| e.into_inner()).insert(request.id);
    }

    fn watch(&self, watcher: Weak<dyn StoreWatcher>) {
        *self.shared.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(watcher);
    }

    fn time_left(&self, id: &Uuid) -> Option<Duration> {
        let id = *id;
        self.run(move |s| -> Fut<Option<Duration>> {
            Box::pin(async move {
                let c = s.client().await?;
                let row = c.client.query_opt(&c.time_left, &[&id]).await.map_err(|e| pg_err("could not read", e))?;
                Ok(row.map(|r| Duration::from_millis(r.get::<_, i64>(0).max(0) as u64)))
            })
        })
        .ok()
        .flatten()
    }

    fn close(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.db.close();
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.db.close();
    }
}
