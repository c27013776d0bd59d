//! The shared SQLite store: agents and approvers in several processes of one machine share their
//! pending requests through one database file, as [`PostgresStore`](crate::PostgresStore) lets
//! processes on many hosts share them. What `signoff console` and a proxy's or an agent's gate
//! use on one machine (`store_url = "sqlite:<path>"`), with nothing to install or run.
//!
//! - One row per request, as the single-process [`SqliteStore`](crate::SqliteStore) keeps it,
//!   plus its owner (the process that recovers it), a denial's reason and an approval's scope;
//!   every change is guarded in SQL (approved or denied only from pending and before the
//!   deadline, timed out only after it, executing only from approved, ...) inside a
//!   `BEGIN IMMEDIATE` transaction: of two processes answering at once, exactly one wins.
//! - Every change is also appended to a change log in the same transaction. Each store reads the
//!   log when another connection has committed (`PRAGMA data_version`, checked every
//!   [`POLL`]), and tells its gate of the requests it waits for that were decided elsewhere, and
//!   (when someone here shows them) of requests other processes made and of their ends. Every
//!   [`SAFETY_REREAD`] it re-reads what it waits for, whatever the log says.
//! - Each store times out the pending requests of every owner whose deadline passed (a process
//!   that died leaves none pending for ever), and forgets log entries after [`LOG_KEPT`].
//! - The file is WAL, `synchronous = NORMAL`, `busy_timeout` 5 s. Its `<path>.lock` is held in
//!   shared mode by every shared store on it, so a single-process `SqliteStore` (which holds it
//!   exclusively) and shared stores never open the same file at once.

use crate::error::{Error, Result};
use crate::event::{ConfirmationRequest, Scope, now_ms};
use crate::store::{PendingCursor, PendingStore, RecordState, StateChange, StoreWatcher, StoredRecord};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use rustc_hash::FxBuildHasher;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How often a store checks whether another process changed the database.
pub const POLL: Duration = Duration::from_millis(50);

/// How often a store re-reads every request it waits for or shows, whatever the change log says.
pub const SAFETY_REREAD: Duration = Duration::from_secs(2);

/// How often a store times out expired requests of every owner unless configured
/// ([`SqliteSharedOptions::sweep_interval`]).
const SWEEP: Duration = Duration::from_secs(1);

/// How long the change log keeps an entry (epoch ms): a store that has not read it for longer
/// finds what it waits for by its [`SAFETY_REREAD`].
pub const LOG_KEPT: Duration = Duration::from_secs(600);

/// How long past its expiry a single-use id is kept (as the PostgreSQL store keeps them).
const SINGLE_USE_GRACE: Duration = Duration::from_secs(3600);

const DDL: &str = "
CREATE TABLE IF NOT EXISTS signoff_shared_requests (
    seq INTEGER PRIMARY KEY,
    id BLOB UNIQUE NOT NULL,
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    request TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    deadline_ms INTEGER NOT NULL,
    arguments TEXT,
    responder TEXT,
    token TEXT,
    result TEXT,
    reason TEXT,
    scope TEXT,
    updated_at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS signoff_shared_pending ON signoff_shared_requests (created_at_ms, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS signoff_shared_deadline ON signoff_shared_requests (deadline_ms) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS signoff_shared_unfinished ON signoff_shared_requests (owner)
    WHERE state IN ('pending', 'approved', 'executing');
CREATE TABLE IF NOT EXISTS signoff_shared_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id BLOB NOT NULL,
    new INTEGER NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS signoff_shared_single_use (id BLOB PRIMARY KEY, expires_at_ms INTEGER NOT NULL);
";

/// The columns [`record_of`] reads, in order.
const RECORD_COLUMNS: &str = "request, state, arguments, responder, token, result, reason, scope, updated_at_ms";

/// Options for [`SqliteSharedStore::open`].
#[derive(Debug, Clone, Default)]
pub struct SqliteSharedOptions {
    /// This process's name in the store: [`Gate::recover`](crate::Gate::recover) picks up only its
    /// owner's unfinished requests. Give each agent process a stable name of its own (it
    /// recovers its requests after a restart); default a new name per store, which recovers
    /// nothing an earlier process left.
    pub owner: Option<String>,
    /// How often this store times out expired requests of every owner (default 1 s; zero: never,
    /// for tests that time requests out themselves).
    pub sweep_interval: Option<Duration>,
}

/// A [`PendingStore`] that processes of one machine share through one SQLite file (see the
/// module's documentation).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use signoff::{Gate, SqliteSharedStore};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("signoff.db");
/// // An agent's gate and a console's, as two processes would open them.
/// let agent = Gate::builder().store(SqliteSharedStore::open(&path, Default::default()).unwrap()).build().unwrap();
/// let console = Gate::builder().store(SqliteSharedStore::open(&path, Default::default()).unwrap()).build().unwrap();
/// assert!(agent.pending().is_empty() && console.pending().is_empty());
/// # });
/// ```
pub struct SqliteSharedStore {
    inner: Arc<Inner>,
    poller: Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct Inner {
    /// `None` once closed.
    conn: Mutex<Option<Connection>>,
    path: PathBuf,
    owner: String,
    /// Requests this store inserted (or restored) that are pending as far as it knows.
    watched: Mutex<HashSet<Uuid, FxBuildHasher>>,
    /// Requests of other processes announced here, with their deadlines, until they end.
    shown: Mutex<HashMap<Uuid, u64, FxBuildHasher>>,
    watcher: Mutex<Option<Weak<dyn StoreWatcher>>>,
    closed: AtomicBool,
    /// A change made here moved a row: the poller reads the log at its next tick even though
    /// `data_version` (which counts other connections' commits only) did not move, so a request
    /// shown here and answered here is told ended without waiting for the safety re-read.
    nudged: AtomicBool,
    /// Wakes the poller to stop.
    stop: (Mutex<bool>, Condvar),
    /// Held in shared mode while open.
    lock_file: Mutex<Option<std::fs::File>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn db_err(e: rusqlite::Error) -> Error {
    Error::Store(format!("sqlite: {e}"))
}

fn closed() -> Error {
    Error::Store("the shared SQLite store is closed".into())
}

fn as_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Reads [`RECORD_COLUMNS`] from `row`, starting at column `at`.
fn record_of(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Result<StoredRecord>> {
    let text = |i| row.get::<_, Option<String>>(at + i);
    Ok(crate::sqlite::StoredColumns {
        request: row.get(at)?,
        state: row.get(at + 1)?,
        arguments: text(2)?,
        responder: text(3)?,
        token: text(4)?,
        result: text(5)?,
        reason: text(6)?,
        scope: text(7)?,
        updated_at_ms: row.get(at + 8)?,
    }
    .record())
}

/// `read`, its error naming the request it could not read.
fn named(id: Uuid, read: Result<StoredRecord>) -> Result<StoredRecord> {
    read.map_err(|e| match e {
        Error::Store(m) => Error::Store(format!("request {id} in the shared SQLite store is unreadable: {m}")),
        other => other,
    })
}

fn uuid_of(bytes: Vec<u8>) -> Option<Uuid> {
    Uuid::from_slice(&bytes).ok()
}

impl SqliteSharedStore {
    /// Opens (creating if needed) the shared database at `path` and starts the thread that
    /// follows other processes' changes.
    ///
    /// Errors: `store` when the file cannot be opened, or a single-process
    /// [`SqliteStore`](crate::SqliteStore) has it open; `config` for an empty owner name.
    pub fn open(path: impl AsRef<Path>, options: SqliteSharedOptions) -> Result<Arc<Self>> {
        let path = path.as_ref().to_path_buf();
        let owner = options.owner.clone().unwrap_or_else(|| format!("gate-{}", Uuid::new_v4()));
        if owner.is_empty() {
            return Err(Error::Config("the store's owner name is empty".into()));
        }
        let lock_file = crate::sqlite::lock_file(&path, crate::sqlite::Lock::Shared).map_err(|e| {
            e.unwrap_or_else(|| {
                Error::Store(format!(
                    "{} is open in a single-process store (SqliteStore, `store_path`): give every process that \
                     shares it `store_url = \"sqlite:<its path>\"`",
                    path.display()
                ))
            })
        })?;
        let conn = Connection::open(&path).map_err(|e| Error::Store(format!("{}: sqlite: {e}", path.display())))?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(db_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(db_err)?;
        conn.execute_batch(DDL).map_err(db_err)?;
        let inner = Arc::new(Inner {
            conn: Mutex::new(Some(conn)),
            path,
            owner,
            watched: Default::default(),
            shown: Default::default(),
            watcher: Mutex::new(None),
            closed: AtomicBool::new(false),
            nudged: AtomicBool::new(false),
            stop: (Mutex::new(false), Condvar::new()),
            lock_file: Mutex::new(Some(lock_file)),
        });
        let from = inner.with(|c| {
            c.query_row("SELECT COALESCE(MAX(seq), 0) FROM signoff_shared_changes", [], |r| r.get::<_, i64>(0))
                .map_err(db_err)
        })?;
        let weak = Arc::downgrade(&inner);
        let sweep = options.sweep_interval.unwrap_or(SWEEP);
        let poller = std::thread::Builder::new()
            .name("signoff-sqlite-shared".into())
            .spawn(move || poll(weak, from, sweep))
            .map_err(|e| Error::Store(format!("could not start the shared SQLite store's thread: {e}")))?;
        Ok(Arc::new(SqliteSharedStore { inner, poller: Mutex::new(Some(poller)) }))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// This store's owner name (see [`SqliteSharedOptions::owner`]).
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Times out every pending request (of any owner) whose deadline passed: what the store's
    /// thread does every second. Returns how many it ended.
    pub fn sweep(&self) -> Result<usize> {
        self.inner.sweep()
    }

    fn stop_polling(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        *lock(&self.inner.stop.0) = true;
        self.inner.stop.1.notify_all();
        if let Some(t) = lock(&self.poller).take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

impl Inner {
    /// Runs `f` on the connection (`store` once closed).
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let mut conn = lock(&self.conn);
        match conn.as_mut() {
            Some(c) if !self.closed.load(Ordering::SeqCst) => f(c),
            _ => Err(closed()),
        }
    }

    fn unwatch(&self, id: &Uuid) -> bool {
        lock(&self.watched).remove(id)
    }

    fn watcher(&self) -> Option<Arc<dyn StoreWatcher>> {
        lock(&self.watcher).as_ref().and_then(Weak::upgrade)
    }

    /// The guarded change, with its log entry, in one immediate transaction: how many rows moved.
    /// `from`: the states it may move from (default: the state's
    /// [`predecessors`](RecordState::predecessors)).
    fn change(&self, id: &Uuid, change: StateChange<'_>, from: Option<&[&str]>) -> Result<usize> {
        let json = |v: Option<&serde_json::Value>| v.map(|v| serde_json::to_string(v).unwrap_or_default());
        let from = from.unwrap_or(change.state.predecessors());
        let pad = from.first().copied().unwrap_or("");
        let allowed = [pad, from.get(1).copied().unwrap_or(pad), from.get(2).copied().unwrap_or(pad)];
        let scope = change.scope.map(|s| if s == Scope::Session { "session" } else { "once" });
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
            let now = as_i64(now_ms());
            let moved = tx
                .prepare_cached(
                    "UPDATE signoff_shared_requests SET state = ?2,
                        arguments = COALESCE(?3, arguments), responder = COALESCE(?4, responder),
                        token = COALESCE(?5, token), result = COALESCE(?6, result),
                        reason = COALESCE(?7, reason), scope = COALESCE(?8, scope), updated_at_ms = ?9
                     WHERE id = ?1 AND state IN (?10, ?11, ?12)
                       AND CASE WHEN ?2 IN ('approved', 'denied') THEN deadline_ms > ?9
                                WHEN ?2 = 'timed-out' THEN deadline_ms <= ?9
                                ELSE 1 END",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        id.as_bytes(),
                        change.state.as_str(),
                        json(change.arguments),
                        change.responder,
                        change.token,
                        json(change.result),
                        change.reason,
                        scope,
                        now,
                        allowed[0],
                        allowed[1],
                        allowed[2],
                    ])
                })
                .map_err(db_err)?;
            if moved == 1 {
                tx.execute(
                    "INSERT INTO signoff_shared_changes (id, new, at_ms) VALUES (?1, 0, ?2)",
                    params![id.as_bytes(), now],
                )
                .map_err(db_err)?;
            }
            tx.commit().map_err(db_err)?;
            if moved == 1 {
                self.nudged.store(true, Ordering::SeqCst);
            }
            Ok(moved)
        })
    }

    fn record(&self, id: &Uuid) -> Result<Option<StoredRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM signoff_shared_requests WHERE id = ?1");
        let read = self.with(|c| {
            c.prepare_cached(&sql)
                .and_then(|mut s| s.query_row([id.as_bytes()], |r| record_of(r, 0)).optional())
                .map_err(db_err)
        })?;
        read.map(|r| named(*id, r)).transpose()
    }

    /// Pending requests by `sql` (selecting `request`), with `p`.
    fn requests<P: rusqlite::Params>(&self, sql: &str, p: P) -> Result<Vec<Arc<ConfirmationRequest>>> {
        self.with(|c| {
            let mut s = c.prepare_cached(sql).map_err(db_err)?;
            let rows = s.query_map(p, |r| r.get::<_, String>(0)).map_err(db_err)?;
            let mut out = Vec::new();
            for text in rows {
                let text = text.map_err(db_err)?;
                match serde_json::from_str(&text) {
                    Ok(r) => out.push(Arc::new(r)),
                    Err(e) => crate::report!("signoff: a request in the shared SQLite store is unreadable: {e}"),
                }
            }
            Ok(out)
        })
    }

    /// The records of `ids` that are no longer pending.
    fn decided(&self, ids: &[Uuid]) -> Result<Vec<StoredRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM signoff_shared_requests WHERE id = ?1 AND state <> 'pending'");
        self.with(|c| {
            let mut s = c.prepare_cached(&sql).map_err(db_err)?;
            let mut out = Vec::new();
            for id in ids {
                if let Some(r) = s.query_row([id.as_bytes()], |r| record_of(r, 0)).optional().map_err(db_err)? {
                    match named(*id, r) {
                        Ok(r) => out.push(r),
                        Err(e) => crate::report!("signoff: {e}"),
                    }
                }
            }
            Ok(out)
        })
    }

    fn sweep(&self) -> Result<usize> {
        // Most ticks find nothing expired: a read, not a write lock on the file every second.
        let due = self.with(|c| {
            c.prepare_cached(
                "SELECT 1 FROM signoff_shared_requests WHERE state = 'pending' AND deadline_ms <= ?1 LIMIT 1",
            )
            .and_then(|mut s| s.exists([as_i64(now_ms())]))
            .map_err(db_err)
        })?;
        let horizon = as_i64(now_ms()).saturating_sub(as_i64(LOG_KEPT.as_millis() as u64));
        let stale = self.with(|c| {
            c.prepare_cached("SELECT 1 FROM signoff_shared_changes WHERE at_ms < ?1 LIMIT 1")
                .and_then(|mut s| s.exists([horizon]))
                .map_err(db_err)
        })?;
        if !due && !stale {
            return Ok(0);
        }
        let swept = self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
            let now = as_i64(now_ms());
            let ids: Vec<Vec<u8>> = {
                let mut s = tx
                    .prepare_cached(
                        "UPDATE signoff_shared_requests SET state = 'timed-out', updated_at_ms = ?1
                         WHERE state = 'pending' AND deadline_ms <= ?1 RETURNING id",
                    )
                    .map_err(db_err)?;
                s.query_map([now], |r| r.get(0)).map_err(db_err)?.collect::<rusqlite::Result<_>>().map_err(db_err)?
            };
            for id in &ids {
                tx.execute("INSERT INTO signoff_shared_changes (id, new, at_ms) VALUES (?1, 0, ?2)", params![id, now])
                    .map_err(db_err)?;
            }
            let horizon = now.saturating_sub(as_i64(LOG_KEPT.as_millis() as u64));
            tx.execute("DELETE FROM signoff_shared_changes WHERE at_ms < ?1", [horizon]).map_err(db_err)?;
            tx.commit().map_err(db_err)?;
            Ok(ids.into_iter().filter_map(uuid_of).collect::<Vec<_>>())
        })?;
        let n = swept.len();
        // Our own commit does not move `data_version`: what this process waits for is told now.
        self.reread(&swept)?;
        Ok(n)
    }

    /// Re-reads `ids` (those watched or shown here) and hands the decided ones to the watcher.
    fn reread(&self, ids: &[Uuid]) -> Result<()> {
        let ids: Vec<Uuid> = {
            let (w, shown) = (lock(&self.watched), lock(&self.shown));
            let set: HashSet<Uuid> =
                ids.iter().filter(|id| w.contains(*id) || shown.contains_key(*id)).copied().collect();
            set.into_iter().collect()
        };
        if ids.is_empty() {
            return Ok(());
        }
        let records = self.decided(&ids)?;
        let (mut changed, mut ended) = (Vec::new(), Vec::new());
        {
            let (mut w, mut shown) = (lock(&self.watched), lock(&self.shown));
            for r in records {
                let id = r.request.id;
                if w.remove(&id) {
                    changed.push(r);
                } else if shown.remove(&id).is_some() {
                    ended.push(r);
                }
            }
        }
        if let Some(watcher) = self.watcher() {
            if !changed.is_empty() {
                watcher.changed(changed);
            }
            if !ended.is_empty() {
                watcher.ended(ended);
            }
        }
        Ok(())
    }

    /// Hands requests other processes made to the watcher, when it wants them.
    fn announce(&self, ids: &[Uuid]) -> Result<()> {
        let Some(watcher) = self.watcher() else { return Ok(()) };
        if ids.is_empty() || !watcher.wants_requests() {
            return Ok(());
        }
        let fresh: Vec<Uuid> = {
            let (w, shown) = (lock(&self.watched), lock(&self.shown));
            ids.iter().filter(|id| !w.contains(*id) && !shown.contains_key(*id)).copied().collect()
        };
        let mut requests = Vec::new();
        for id in fresh {
            requests.extend(self.requests(
                "SELECT request FROM signoff_shared_requests WHERE id = ?1 AND state = 'pending'",
                [id.as_bytes()],
            )?);
        }
        if requests.is_empty() {
            return Ok(());
        }
        {
            let mut shown = lock(&self.shown);
            for r in &requests {
                shown.insert(r.id, r.deadline_ms);
            }
        }
        watcher.appeared(requests);
        Ok(())
    }

    /// One look at the change log past `from`: what changed and what is new, and the last seq.
    fn read_log(&self, from: i64) -> Result<(Vec<Uuid>, Vec<Uuid>, i64)> {
        self.with(|c| {
            let mut s = c
                .prepare_cached(
                    "SELECT seq, id, new FROM signoff_shared_changes WHERE seq > ?1 ORDER BY seq LIMIT 10000",
                )
                .map_err(db_err)?;
            let rows = s
                .query_map([from], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?, r.get::<_, i64>(2)?)))
                .map_err(db_err)?;
            let (mut changed, mut new, mut last) = (Vec::new(), Vec::new(), from);
            for row in rows {
                let (seq, id, is_new) = row.map_err(db_err)?;
                last = seq;
                if let Some(id) = uuid_of(id) {
                    if is_new == 1 { new.push(id) } else { changed.push(id) }
                }
            }
            Ok((changed, new, last))
        })
    }

    fn data_version(&self) -> Result<i64> {
        self.with(|c| c.query_row("PRAGMA data_version", [], |r| r.get(0)).map_err(db_err))
    }

    /// Forgets shown requests long past their deadline (their end was announced, or missed).
    fn prune_shown(&self) {
        let horizon = now_ms().saturating_sub(60_000);
        lock(&self.shown).retain(|_, deadline| *deadline > horizon);
    }

    fn waited_for(&self) -> Vec<Uuid> {
        let mut all: Vec<Uuid> = lock(&self.watched).iter().copied().collect();
        all.extend(lock(&self.shown).keys().copied());
        all
    }
}

/// The store's thread: follows the change log while the store lives (see the module's
/// documentation). A failed read is reported once and tried again at the next tick.
fn poll(inner: Weak<Inner>, mut from: i64, sweep: Duration) {
    let (mut version, mut last_sweep, mut last_safety) = (None, Instant::now(), Instant::now());
    let mut failing = false;
    loop {
        let Some(me) = inner.upgrade() else { return };
        {
            let stopped = lock(&me.stop.0);
            let (stopped, _) = me.stop.1.wait_timeout_while(stopped, POLL, |s| !*s).unwrap_or_else(|e| e.into_inner());
            if *stopped || me.closed.load(Ordering::SeqCst) {
                return;
            }
        }
        let mut tick = || -> Result<()> {
            let now = me.data_version()?;
            if version != Some(now) || me.nudged.swap(false, Ordering::SeqCst) {
                version = Some(now);
                loop {
                    let (changed, new, last) = me.read_log(from)?;
                    if last == from {
                        break;
                    }
                    from = last;
                    me.announce(&new)?;
                    me.reread(&changed)?;
                }
            }
            if !sweep.is_zero() && last_sweep.elapsed() >= sweep {
                last_sweep = Instant::now();
                me.sweep()?;
            }
            if last_safety.elapsed() >= SAFETY_REREAD {
                last_safety = Instant::now();
                me.prune_shown();
                me.reread(&me.waited_for())?;
            }
            Ok(())
        };
        match tick() {
            Ok(()) => failing = false,
            Err(_) if me.closed.load(Ordering::SeqCst) => return,
            Err(e) => {
                if !failing {
                    crate::report!("signoff: the shared SQLite store {}: {e}; trying again", me.path.display());
                }
                failing = true;
            }
        }
    }
}

impl SqliteSharedStore {
    /// How a change to `state` ended: done, refused (watched again while the row is still
    /// pending: its deadline decides, and an answer made elsewhere before it must still reach the
    /// waiting call), or unsure (a busy database, a full disk: what the row says is followed).
    fn settle(&self, id: &Uuid, state: RecordState, watched: bool, moved: Result<usize>) -> Result<()> {
        match moved {
            Ok(1) => Ok(()),
            Ok(_) => {
                let now = self.inner.record(id).ok().flatten().map(|r| r.state);
                if watched && now == Some(RecordState::Pending) {
                    lock(&self.inner.watched).insert(*id);
                }
                Err(crate::store::refusal(*id, state, now))
            }
            Err(e) => {
                if watched {
                    lock(&self.inner.watched).insert(*id);
                }
                Err(e)
            }
        }
    }
}

impl PendingStore for SqliteSharedStore {
    fn insert(&self, request: Arc<ConfirmationRequest>) -> Result<()> {
        let id = request.id;
        let text =
            serde_json::to_string(&*request).map_err(|e| Error::Store(format!("unserializable request: {e}")))?;
        // Watched before it exists: a decision made the moment it is visible is not missed.
        lock(&self.inner.watched).insert(id);
        let written = self.inner.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
            let now = as_i64(now_ms());
            tx.prepare_cached(
                "INSERT INTO signoff_shared_requests (id, owner, state, request, created_at_ms, deadline_ms, updated_at_ms)
                 VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    id.as_bytes(),
                    self.inner.owner,
                    text,
                    as_i64(request.created_at_ms),
                    // As the PostgreSQL store: its timeout from when it is stored.
                    as_i64(now_ms().saturating_add(request.timeout_ms)),
                    now
                ])
            })
            .map_err(db_err)?;
            tx.execute("INSERT INTO signoff_shared_changes (id, new, at_ms) VALUES (?1, 1, ?2)", params![id.as_bytes(), now])
                .map_err(db_err)?;
            tx.commit().map_err(db_err)
        });
        if written.is_err() {
            self.inner.unwatch(&id);
        }
        written
    }

    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        // The row stays, in its final state; this process stops watching it.
        self.inner.unwatch(id);
        None
    }

    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner
            .requests(
                "SELECT request FROM signoff_shared_requests WHERE id = ?1 AND state = 'pending'",
                [id.as_bytes()],
            )
            .ok()
            .and_then(|mut v| v.pop())
    }

    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.inner
            .requests(
                "SELECT request FROM signoff_shared_requests WHERE state = 'pending' ORDER BY created_at_ms, id",
                [],
            )
            .unwrap_or_default()
    }

    fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let read = match after {
            None => self.inner.requests(
                "SELECT request FROM signoff_shared_requests WHERE state = 'pending' ORDER BY created_at_ms, id LIMIT ?1",
                [limit],
            ),
            Some(a) => self.inner.requests(
                "SELECT request FROM signoff_shared_requests WHERE state = 'pending'
                 AND (created_at_ms > ?1 OR (created_at_ms = ?1 AND id > ?2)) ORDER BY created_at_ms, id LIMIT ?3",
                params![as_i64(a.created_at_ms), a.id.as_bytes(), limit],
            ),
        };
        read.unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.inner
            .with(|c| {
                c.query_row("SELECT count(*) FROM signoff_shared_requests WHERE state = 'pending'", [], |r| {
                    r.get::<_, i64>(0)
                })
                .map_err(db_err)
            })
            .map_or(0, |n| n.max(0) as usize)
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn transition(&self, id: &Uuid, change: StateChange<'_>) -> Result<()> {
        let state = change.state;
        // Our own change: the log entry it writes needs no re-read here.
        let watched = state != RecordState::Pending && self.inner.unwatch(id);
        self.settle(id, state, watched, self.inner.change(id, change, None))
    }

    fn cancel_pending(&self, id: &Uuid) -> Result<()> {
        let watched = self.inner.unwatch(id);
        let state = RecordState::Cancelled;
        self.settle(id, state, watched, self.inner.change(id, StateChange::to(state), Some(&["pending"])))
    }

    fn use_once(&self, id: &Uuid, expires_at_ms: u64) -> Result<bool> {
        self.inner.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
            let horizon = as_i64(now_ms()).saturating_sub(SINGLE_USE_GRACE.as_millis() as i64);
            tx.execute("DELETE FROM signoff_shared_single_use WHERE expires_at_ms <= ?1", [horizon]).map_err(db_err)?;
            let added = tx
                .execute(
                    "INSERT OR IGNORE INTO signoff_shared_single_use (id, expires_at_ms) VALUES (?1, ?2)",
                    params![id.as_bytes(), as_i64(expires_at_ms)],
                )
                .map_err(db_err)?;
            tx.commit().map_err(db_err)?;
            Ok(added == 1)
        })
    }

    fn record(&self, id: &Uuid) -> Option<StoredRecord> {
        self.inner.record(id).ok().flatten()
    }

    fn try_record(&self, id: &Uuid) -> Result<Option<StoredRecord>> {
        self.inner.record(id)
    }

    fn unfinished(&self) -> Result<Vec<StoredRecord>> {
        let sql = format!(
            "SELECT id, {RECORD_COLUMNS} FROM signoff_shared_requests WHERE owner = ?1
             AND state IN ('pending', 'approved', 'executing') ORDER BY created_at_ms, id"
        );
        let rows = self.inner.with(|c| {
            let mut s = c.prepare_cached(&sql).map_err(db_err)?;
            let rows = s
                .query_map([&self.inner.owner], |r| Ok((r.get::<_, Vec<u8>>(0)?, record_of(r, 1)?)))
                .map_err(db_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db_err)
        })?;
        rows.into_iter()
            .map(|(id, r)| {
                let id = uuid_of(id).ok_or_else(|| Error::Store("a stored request id is not a UUID".into()))?;
                named(id, r)
            })
            .collect()
    }

    fn restore(&self, request: Arc<ConfirmationRequest>) {
        lock(&self.inner.watched).insert(request.id);
    }

    fn watch(&self, watcher: Weak<dyn StoreWatcher>) {
        *lock(&self.inner.watcher) = Some(watcher);
    }

    fn time_left(&self, id: &Uuid) -> Option<Duration> {
        let deadline = self
            .inner
            .with(|c| {
                c.query_row(
                    "SELECT deadline_ms FROM signoff_shared_requests WHERE id = ?1 AND state = 'pending'",
                    [id.as_bytes()],
                    |r| r.get::<_, i64>(0),
                )
                .optional()
                .map_err(db_err)
            })
            .ok()
            .flatten()?;
        Some(Duration::from_millis((deadline.max(0) as u64).saturating_sub(now_ms())))
    }

    fn close(&self) {
        self.stop_polling();
        if let Some(c) = lock(&self.inner.conn).take()
            && let Err((_, e)) = c.close()
        {
            crate::report!("signoff: closing {} failed: {e}", self.inner.path.display());
        }
        lock(&self.inner.lock_file).take();
    }
}

impl Drop for SqliteSharedStore {
    fn drop(&mut self) {
        self.stop_polling();
    }
}

impl std::fmt::Debug for SqliteSharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSharedStore")
            .field("path", &self.inner.path)
            .field("owner", &self.inner.owner)
            .finish_non_exhaustive()
    }
}
