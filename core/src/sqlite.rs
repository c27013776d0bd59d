//! The durable pending store: SQLite (bundled, through `rusqlite`).
//!
//! One table, one row per request, holding the request as published and its state
//! (`pending → approved → executing → done`, see [`RecordState`]). Every state change is its own
//! transaction, committed before the gate acts on it. The journal is WAL; by default
//! `synchronous = NORMAL`, which survives any crash of the process (the case this store exists
//! for) and may lose the last commits on a power failure or kernel crash; [`SqliteOptions::
//! synchronous_full`] makes every commit wait for the disk as well. With it, new requests are
//! committed by a thread of the store's, in batches (one sync for every request that arrived
//! meanwhile), so the task that makes a request never waits for the disk; answers and execution
//! states are still committed on the thread that makes them.
//!
//! State changes are guarded in SQL (`executing` only from `approved`, `done` only from
//! `executing`, ...), so even a bug in a caller cannot run a request twice through this store.

use crate::audit::{AuditAnchor, ChainHead};
use crate::error::{Error, Result};
use crate::event::{ConfirmationRequest, now_ms};
use crate::store::{
    Completion, OwnedStateChange, PendingCursor, PendingIndex, PendingStore, RecordState, StateChange, StoreFuture,
    StoredRecord,
};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use uuid::Uuid;

/// New requests written per transaction at most (one commit, one sync for all of them).
const WRITE_BATCH: usize = 256;

/// Work for the writer thread.
enum Job {
    Insert(InsertJob),
    Transition(TransitionJob),
}

/// A state change for the writer thread ([`PendingStore::transition_async`]).
struct TransitionJob {
    id: Uuid,
    change: OwnedStateChange,
    done: Completion,
}

/// A new request for the writer thread.
struct InsertJob {
    request: Arc<ConfirmationRequest>,
    json: String,
    /// Set when its call went away: the row is written (or ended) as cancelled.
    abandoned: Arc<AtomicBool>,
    done: tokio::sync::oneshot::Sender<Result<()>>,
}

/// Options for [`SqliteStore::open_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SqliteOptions {
    /// `synchronous = FULL`: every commit waits for the disk, so state survives power loss too
    /// (slower: one fsync per state change).
    pub synchronous_full: bool,
}

/// A [`PendingStore`] on an SQLite file. Pending requests, their deadlines and their states
/// survive a restart; call [`Gate::recover`](crate::Gate::recover) after registering tools.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let gate = signoff::Gate::builder()
///     .store(signoff::SqliteStore::open(dir.path().join("signoff.db")).unwrap())
///     .build()
///     .unwrap();
/// let report = gate.recover().unwrap();
/// assert!(report.restored.is_empty());
/// # });
/// ```
pub struct SqliteStore {
    /// `None` once closed.
    conn: Mutex<Option<Connection>>,
    /// The pending requests, for fast listing (the table is the source of truth).
    pending: Mutex<PendingIndex>,
    path: PathBuf,
    /// The one-process lock; released by `close`.
    lock_file: Mutex<Option<std::fs::File>>,
    /// With `synchronous_full`, new requests go to a thread of the store's, which commits them
    /// in batches: the caller's task never waits for the disk (see
    /// [`PendingStore::insert_async`]). `None` without it, and once closed.
    writer: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// New requests are handed to the writer thread (`synchronous_full`).
    hand_off: bool,
}

/// The guarded state change: how many rows moved (1, or 0 when the request is not in a state
/// that allows it).
fn update_state(conn: &Connection, id: &Uuid, change: StateChange<'_>) -> Result<usize> {
    let json = |v: Option<&serde_json::Value>| v.map(|v| serde_json::to_string(v).unwrap_or_default());
    let from = change.state.predecessors();
    // Up to three allowed predecessors, padded with the first ("" matches nothing).
    let pad = from.first().copied().unwrap_or("");
    let allowed = [pad, from.get(1).copied().unwrap_or(pad), from.get(2).copied().unwrap_or(pad)];
    let mut stmt = conn
        .prepare_cached(
            "UPDATE signoff_requests SET state = ?2,
                arguments = COALESCE(?3, arguments), responder = COALESCE(?4, responder),
                token = COALESCE(?5, token), result = COALESCE(?6, result), updated_at_ms = ?7
             WHERE id = ?1 AND state IN (?8, ?9, ?10)",
        )
        .map_err(db_err)?;
    stmt.execute(params![
        id.as_bytes(),
        change.state.as_str(),
        json(change.arguments),
        change.responder,
        change.token,
        json(change.result),
        now_ms() as i64,
        allowed[0],
        allowed[1],
        allowed[2],
    ])
    .map_err(db_err)
}

/// How a store holds a database's `<path>.lock`: the single-process store exclusively, shared
/// stores ([`SqliteSharedStore`](crate::SqliteSharedStore)) in shared mode, so neither opens a
/// file the other has open.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock {
    Exclusive,
    Shared,
}

/// Opens `<path>.lock` and takes it as `how`: `Err(Some(_))` when the file cannot be opened,
/// `Err(None)` when another process holds the lock in a way that excludes `how`. The lock is held
/// while the file stays open and released by the OS if the process dies.
pub(crate) fn lock_file(path: &Path, how: Lock) -> std::result::Result<std::fs::File, Option<Error>> {
    let mut lock_path = path.to_path_buf().into_os_string();
    lock_path.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Some(Error::Store(format!("cannot open {}: {e}", PathBuf::from(&lock_path).display()))))?;
    // A lock just released can still be held for a moment: a child process this process forks
    // (any thread's `Command::spawn`) shares the lock file's descriptor until it execs. Asked
    // again for up to ~200 ms before the database is reported in use.
    for _ in 0..=20 {
        let taken = match how {
            Lock::Exclusive => file.try_lock(),
            Lock::Shared => file.try_lock_shared(),
        };
        if taken.is_ok() {
            return Ok(file);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(None)
}

fn db_err(e: rusqlite::Error) -> Error {
    Error::Store(format!("sqlite: {e}"))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Self>> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens with options.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Arc<Self>> {
        let path = path.as_ref().to_path_buf();
        // One process per database: a second process would recover, and could run, the same
        // requests. The lock is held while the store is open and released by the OS if the
        // process dies.
        let lock_file = lock_file(&path, Lock::Exclusive).map_err(|e| {
            e.unwrap_or_else(|| {
                Error::Store(format!(
                    "{} is in use by another process (one process per signoff database)",
                    path.display()
                ))
            })
        })?;
        let conn = Connection::open(&path).map_err(db_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(db_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db_err)?;
        conn.pragma_update(None, "synchronous", if options.synchronous_full { "FULL" } else { "NORMAL" })
            .map_err(db_err)?;
        // The file lock above already makes this process the only user: SQLite's own locks can
        // be taken once instead of per transaction (no shared-memory index, no lock calls).
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE").map_err(db_err)?;
        // Checkpoint every ~16k pages (64 MB of WAL) instead of 1,000: most commits rewrite
        // the same few pages, so a longer WAL means far fewer pages copied and synced per
        // approval. The WAL file is truncated back to 16 MB after each checkpoint.
        conn.pragma_update(None, "wal_autocheckpoint", 16_384).map_err(db_err)?;
        conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024).map_err(db_err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS signoff_requests (
                seq INTEGER PRIMARY KEY,
                id BLOB UNIQUE NOT NULL,
                created_at_ms INTEGER NOT NULL,
                deadline_ms INTEGER NOT NULL,
                state TEXT NOT NULL,
                request TEXT NOT NULL,
                arguments TEXT,
                responder TEXT,
                token TEXT,
                result TEXT,
                updated_at_ms INTEGER NOT NULL
            );
            CREATE TABLE IF NOT EXISTS signoff_single_use (
                id BLOB PRIMARY KEY,
                expires_at_ms INTEGER NOT NULL
            );
            CREATE TABLE IF NOT EXISTS signoff_audit_head (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                seq INTEGER NOT NULL,
                hash TEXT NOT NULL,
                updated_at_ms INTEGER NOT NULL
            );",
        )
        .map_err(db_err)?;
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        // Only where a commit waits for the disk (~1 ms): with `NORMAL` a commit costs less
        // than the two thread wake-ups a hand-off adds (measured: 72 µs → 210 µs per approval).
        let hand_off = options.synchronous_full;
        let store = Arc::new_cyclic(|me: &Weak<SqliteStore>| {
            let me = me.clone();
            let thread = hand_off
                .then(|| {
                    std::thread::Builder::new()
                        .name("signoff-sqlite".into())
                        .spawn(move || {
                            while let Ok(first) = rx.recv() {
                                let mut batch = vec![first];
                                while batch.len() < WRITE_BATCH {
                                    match rx.try_recv() {
                                        Ok(job) => batch.push(job),
                                        Err(_) => break,
                                    }
                                }
                                match me.upgrade() {
                                    Some(store) => store.write_batch(batch),
                                    None => {
                                        for job in batch {
                                            let gone = Err(Error::Store("the SQLite store is gone".into()));
                                            match job {
                                                Job::Insert(j) => drop(j.done.send(gone)),
                                                Job::Transition(j) => j.done.complete(gone),
                                            }
                                        }
                                    }
                                }
                            }
                        })
                        .ok()
                })
                .flatten();
            SqliteStore {
                conn: Mutex::new(Some(conn)),
                pending: Mutex::new(PendingIndex::default()),
                path,
                lock_file: Mutex::new(Some(lock_file)),
                writer: Mutex::new(thread.as_ref().map(|_| tx)),
                hand_off: thread.is_some(),
                writer_thread: Mutex::new(thread),
            }
        });
        Ok(store)
    }

    /// Writes what the writer thread was handed: new requests in one transaction, then state
    /// changes in another (a change never concerns a request of the same batch: its caller
    /// waited for the insert).
    fn write_batch(&self, batch: Vec<Job>) {
        let (mut inserts, mut changes) = (Vec::new(), Vec::new());
        for job in batch {
            match job {
                Job::Insert(j) => inserts.push(j),
                Job::Transition(j) => changes.push(j),
            }
        }
        if !inserts.is_empty() {
            self.write_inserts(inserts);
        }
        if !changes.is_empty() {
            self.write_transitions(changes);
        }
    }

    /// Runs `write` for every job in one transaction; if that fails, for each job on its own
    /// (autocommit), so one bad row does not fail the others and each caller gets its own answer.
    fn in_one_transaction<J, T>(&self, batch: &[J], write: impl Fn(&Connection, &J) -> Result<T>) -> Vec<Result<T>> {
        let guard = lock(&self.conn);
        let Some(conn) = guard.as_ref() else {
            return batch.iter().map(|_| Err(Error::Store(format!("{} is closed", self.path.display())))).collect();
        };
        let together = (|| -> Result<Vec<T>> {
            let tx = conn.unchecked_transaction().map_err(db_err)?;
            let written = batch.iter().map(|job| write(conn, job)).collect::<Result<Vec<T>>>()?;
            tx.commit().map_err(db_err)?;
            Ok(written)
        })();
        match together {
            Ok(written) => written.into_iter().map(Ok).collect(),
            Err(_) => batch.iter().map(|job| write(conn, job)).collect(),
        }
    }

    /// Commits state changes together (each on its own if that fails), then answers each caller.
    fn write_transitions(&self, batch: Vec<TransitionJob>) {
        let results = self.in_one_transaction(&batch, |conn, j| update_state(conn, &j.id, j.change.as_change()));
        for (job, result) in batch.into_iter().zip(results) {
            let reply = result.and_then(|changed| self.after_update(&job.id, job.change.state, changed));
            // What the gate does once an answer is recorded runs here; a panic in it must not
            // stop this thread (every later change would then be refused).
            let done = job.done;
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| done.complete(reply))).is_err() {
                crate::report!("signoff: {}: the completion of a recorded change panicked", self.path.display());
            }
        }
    }

    /// Writes new requests in one transaction (one by one if that fails, so one bad row does
    /// not fail the others), lists the pending ones, then answers each caller.
    fn write_inserts(&self, batch: Vec<InsertJob>) {
        let insert = |conn: &Connection, job: &InsertJob| -> Result<bool> {
            let cancelled = job.abandoned.load(Ordering::SeqCst);
            let mut stmt = conn
                .prepare_cached(
                    "INSERT INTO signoff_requests (id, created_at_ms, deadline_ms, state, request, updated_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?2)",
                )
                .map_err(db_err)?;
            stmt.execute(params![
                job.request.id.as_bytes(),
                job.request.created_at_ms as i64,
                job.request.deadline_ms.min(i64::MAX as u64) as i64,
                if cancelled { "cancelled" } else { "pending" },
                job.json
            ])
            .map_err(db_err)?;
            Ok(!cancelled)
        };
        let results = self.in_one_transaction(&batch, insert);
        for (job, result) in batch.into_iter().zip(results) {
            let reply = match result {
                Ok(true) => {
                    lock(&self.pending).insert(job.request.clone());
                    // Cancelled between the write and now: the gate saw it unlisted and left
                    // the row to this thread.
                    if job.abandoned.load(Ordering::SeqCst) {
                        let _ = self.transition(&job.request.id, StateChange::to(RecordState::Cancelled));
                    }
                    Ok(())
                }
                Ok(false) => Ok(()),
                Err(e) => Err(e),
            };
            let _ = job.done.send(reply);
        }
    }

    /// After a guarded update (the connection released): the listing, and the refusal's words.
    fn after_update(&self, id: &Uuid, state: RecordState, changed: usize) -> Result<()> {
        if changed != 1 {
            let now = self.record(id).map(|r| r.state.as_str()).unwrap_or("missing");
            return Err(Error::Store(format!("request {id} cannot move to {} from {now}", state.as_str())));
        }
        // Only a change that happened ends the listing (a refused one leaves it as it was).
        if state != RecordState::Pending {
            lock(&self.pending).remove(id);
        }
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every stored record (any state), oldest first: history for a UI or an operator.
    pub fn records(&self) -> Result<Vec<StoredRecord>> {
        self.query("SELECT request, state, arguments, responder, token, result, updated_at_ms FROM signoff_requests ORDER BY seq", [])
    }

    /// Deletes final records last changed before `before_ms` (epoch ms). Returns how many.
    /// Used-token detection for those requests then reports `not_pending` instead of
    /// `already_used`; their tokens have long expired in practice.
    pub fn purge_finished(&self, before_ms: u64) -> Result<usize> {
        self.conn()?
            .as_ref()
            .expect("checked by conn()")
            .execute(
                "DELETE FROM signoff_requests WHERE state NOT IN ('pending','approved','executing') AND updated_at_ms < ?1",
                params![before_ms as i64],
            )
            .map_err(db_err)
    }

    /// The connection, or `store` error once closed.
    fn conn(&self) -> Result<MutexGuard<'_, Option<Connection>>> {
        let g = lock(&self.conn);
        if g.is_none() {
            return Err(Error::Store(format!("{} is closed", self.path.display())));
        }
        Ok(g)
    }

    fn query<P: rusqlite::Params>(&self, sql: &str, p: P) -> Result<Vec<StoredRecord>> {
        let guard = self.conn()?;
        let conn = guard.as_ref().expect("checked by conn()");
        let mut stmt = conn.prepare_cached(sql).map_err(db_err)?;
        let rows = stmt.query_map(p, row_to_record).map_err(db_err)?;
        rows.map(|r| r.map_err(db_err).and_then(|r| r)).collect()
    }
}

type RawRecord = Result<StoredRecord>;

fn row_to_record(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRecord> {
    let text = |i| row.get::<_, Option<String>>(i);
    Ok(StoredColumns {
        request: row.get(0)?,
        state: row.get(1)?,
        arguments: text(2)?,
        responder: text(3)?,
        token: text(4)?,
        result: text(5)?,
        reason: None,
        scope: None,
        updated_at_ms: row.get(6)?,
    }
    .record())
}

/// A stored record's columns as SQLite keeps them (text), for both SQLite stores.
pub(crate) struct StoredColumns {
    pub request: String,
    pub state: String,
    pub arguments: Option<String>,
    pub responder: Option<String>,
    pub token: Option<String>,
    pub result: Option<String>,
    pub reason: Option<String>,
    pub scope: Option<String>,
    pub updated_at_ms: i64,
}

impl StoredColumns {
    /// The record, or a `store` error naming the column that cannot be read.
    pub fn record(self) -> Result<StoredRecord> {
        let parse = |what: &str, s: &str| -> Result<serde_json::Value> {
            serde_json::from_str(s).map_err(|e| Error::Store(format!("stored {what} is not valid JSON: {e}")))
        };
        let state = &self.state;
        Ok(StoredRecord {
            request: Arc::new(
                serde_json::from_str(&self.request)
                    .map_err(|e| Error::Store(format!("stored request unreadable: {e}")))?,
            ),
            state: RecordState::parse(state).ok_or_else(|| Error::Store(format!("unknown stored state {state:?}")))?,
            arguments: self.arguments.as_deref().map(|a| parse("arguments", a)).transpose()?,
            responder: self.responder,
            token: self.token,
            result: self.result.as_deref().map(|r| parse("result", r)).transpose()?,
            reason: self.reason,
            scope: if self.scope.as_deref() == Some("session") { crate::Scope::Session } else { crate::Scope::Once },
            updated_at_ms: self.updated_at_ms.max(0) as u64,
        })
    }
}

const LOAD_HEAD: &str = "SELECT seq, hash FROM signoff_audit_head WHERE id = 1";

fn load_head(conn: &Connection) -> Result<Option<ChainHead>> {
    conn.query_row(LOAD_HEAD, [], |r| Ok(ChainHead { seq: r.get::<_, i64>(0)? as u64, hash: r.get(1)? }))
        .optional()
        .map_err(db_err)
}

/// The store anchors the audit chain's head (see [`AuditAnchor`]): the gate connects them when
/// it is built with both.
impl AuditAnchor for SqliteStore {
    fn save_head(&self, head: &ChainHead) -> Result<()> {
        let guard = lock(&self.conn);
        // Closed: records written after the gate closed stay beyond the anchor, which is fine
        // (a log may run past its anchor, never short of it).
        let Some(conn) = guard.as_ref() else { return Ok(()) };
        conn.execute(
            "INSERT INTO signoff_audit_head (id, seq, hash, updated_at_ms) VALUES (1, ?1, ?2, ?3)
             ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, updated_at_ms = excluded.updated_at_ms",
            params![head.seq as i64, head.hash, now_ms() as i64],
        )
        .map_err(db_err)?;
        Ok(())
    }

    fn load_head(&self) -> Result<Option<ChainHead>> {
        let guard = self.conn()?;
        load_head(guard.as_ref().expect("checked by conn()"))
    }
}

/// The audit anchor of a signoff database, read without opening the store: for verifying a log
/// ([`verify_chain_anchored`](crate::audit::verify_chain_anchored)) after its gate has stopped,
/// e.g. by `signoff-audit verify`. While a gate has the database open it is locked; verify from
/// that process instead.
pub struct SqliteAnchorReader {
    path: PathBuf,
}

impl SqliteAnchorReader {
    /// The database at `path` (it must exist).
    pub fn new(path: impl AsRef<Path>) -> Self {
        SqliteAnchorReader { path: path.as_ref().to_path_buf() }
    }
}

impl AuditAnchor for SqliteAnchorReader {
    fn save_head(&self, _head: &ChainHead) -> Result<()> {
        Err(Error::Store("a SqliteAnchorReader only reads".into()))
    }

    fn load_head(&self) -> Result<Option<ChainHead>> {
        let conn = Connection::open_with_flags(&self.path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| Error::Store(format!("cannot open {}: {e}", self.path.display())))?;
        let has_table = |name: &str| -> Result<bool> {
            conn.query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |_| Ok(()))
                .optional()
                .map(|found| found.is_some())
                .map_err(|e| Error::Store(format!("{} is in use or not a signoff database: {e}", self.path.display())))
        };
        if has_table("signoff_audit_head")? {
            return load_head(&conn);
        }
        // Every signoff database has its requests table (and, since anchoring, the head's): an
        // empty file or another program's database would otherwise read as "nothing anchored",
        // and a log cut at its end would pass for whole.
        if !has_table("signoff_requests")? {
            return Err(Error::Store(format!("{} is not a signoff database", self.path.display())));
        }
        Ok(None)
    }
}

impl PendingStore for SqliteStore {
    fn insert(&self, request: Arc<ConfirmationRequest>) -> Result<()> {
        let json = serde_json::to_string(&*request).map_err(|e| Error::Store(e.to_string()))?;
        {
            let guard = self.conn()?;
            let conn = guard.as_ref().expect("checked by conn()");
            let mut stmt = conn
                .prepare_cached(
                    "INSERT INTO signoff_requests (id, created_at_ms, deadline_ms, state, request, updated_at_ms)
                     VALUES (?1, ?2, ?3, 'pending', ?4, ?2)",
                )
                .map_err(db_err)?;
            stmt.execute(params![
                request.id.as_bytes(),
                request.created_at_ms as i64,
                request.deadline_ms.min(i64::MAX as u64) as i64,
                json
            ])
            .map_err(db_err)?;
        }
        lock(&self.pending).insert(request);
        Ok(())
    }

    fn insert_async(&self, request: Arc<ConfirmationRequest>, abandoned: Arc<AtomicBool>) -> Option<StoreFuture<()>> {
        if !self.hand_off {
            return None;
        }
        let json = match serde_json::to_string(&*request) {
            Ok(j) => j,
            Err(e) => return Some(Box::pin(std::future::ready(Err(Error::Store(e.to_string()))))),
        };
        let (done, rx) = tokio::sync::oneshot::channel();
        let sent = match lock(&self.writer).as_ref() {
            Some(w) => w.send(Job::Insert(InsertJob { request, json, abandoned, done })).is_ok(),
            None => false,
        };
        if !sent {
            return Some(Box::pin(std::future::ready(Err(Error::Store(format!("{} is closed", self.path.display()))))));
        }
        Some(Box::pin(async move {
            rx.await.unwrap_or_else(|_| Err(Error::Store("the SQLite store's writer stopped".into())))
        }))
    }

    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        lock(&self.pending).remove(id)
    }

    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        lock(&self.pending).get(id)
    }

    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        lock(&self.pending).list()
    }

    fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        lock(&self.pending).page(after, limit)
    }

    fn len(&self) -> usize {
        lock(&self.pending).len()
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn transition(&self, id: &Uuid, change: StateChange<'_>) -> Result<()> {
        let changed = {
            let guard = self.conn()?;
            update_state(guard.as_ref().expect("checked by conn()"), id, change)?
        };
        self.after_update(id, change.state, changed)
    }

    fn transition_async(&self, id: Uuid, change: OwnedStateChange) -> StoreFuture<()> {
        if !self.hand_off {
            return Box::pin(std::future::ready(self.transition(&id, change.as_change())));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.transition_then(
            id,
            change,
            Completion::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        Box::pin(
            async move { rx.await.unwrap_or_else(|_| Err(Error::Store("the SQLite store's writer stopped".into()))) },
        )
    }

    fn transition_then(&self, id: Uuid, change: OwnedStateChange, done: Completion) {
        if !self.hand_off {
            return done.complete(self.transition(&id, change.as_change()));
        }
        let job = Job::Transition(TransitionJob { id, change, done });
        // Sent under the lock; a refused job is completed after it is released (the completion
        // may use this store).
        let refused = match lock(&self.writer).as_ref() {
            Some(w) => w.send(job).err().map(|std::sync::mpsc::SendError(job)| job),
            None => Some(job),
        };
        if let Some(Job::Transition(job)) = refused {
            job.done.complete(Err(Error::Store(format!("{} is closed", self.path.display()))));
        }
    }

    fn use_once(&self, id: &Uuid, expires_at_ms: u64) -> Result<bool> {
        let guard = self.conn()?;
        let conn = guard.as_ref().expect("checked by conn()");
        // One commit. Expired ids are forgotten (what they were for is refused by its expiry
        // anyway), so the table holds only the uses still in force.
        let tx = conn.unchecked_transaction().map_err(db_err)?;
        tx.prepare_cached("DELETE FROM signoff_single_use WHERE expires_at_ms <= ?1")
            .and_then(|mut s| s.execute(params![now_ms().min(i64::MAX as u64) as i64]))
            .map_err(db_err)?;
        let added = tx
            .prepare_cached(
                "INSERT INTO signoff_single_use (id, expires_at_ms) VALUES (?1, ?2) ON CONFLICT (id) DO NOTHING",
            )
            .and_then(|mut s| s.execute(params![id.as_bytes(), expires_at_ms.min(i64::MAX as u64) as i64]))
            .map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        Ok(added == 1)
    }

    fn record(&self, id: &Uuid) -> Option<StoredRecord> {
        let guard = self.conn().ok()?;
        let conn = guard.as_ref()?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT request, state, arguments, responder, token, result, updated_at_ms FROM signoff_requests WHERE id = ?1",
            )
            .ok()?;
        stmt.query_row(params![id.as_bytes()], row_to_record).optional().ok().flatten().and_then(Result::ok)
    }

    fn unfinished(&self) -> Result<Vec<StoredRecord>> {
        self.query(
            "SELECT request, state, arguments, responder, token, result, updated_at_ms FROM signoff_requests
             WHERE state IN ('pending', 'approved', 'executing') ORDER BY created_at_ms, seq",
            // (A scan, once per start-up: an index on `state` would cost a page write on every
            // state change; `purge_finished` keeps the table short.)
            [],
        )
    }

    fn restore(&self, request: Arc<ConfirmationRequest>) {
        lock(&self.pending).insert(request);
    }

    fn audit_anchor(self: Arc<Self>) -> Option<Arc<dyn AuditAnchor>> {
        Some(self)
    }

    fn close(&self) {
        // New requests already handed to the writer are written first (those of cancelled
        // calls as cancelled).
        lock(&self.writer).take();
        let thread = lock(&self.writer_thread).take();
        if let Some(t) = thread
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
        // Checkpoints the WAL, closes the database, then lets another process (or a new
        // store in this one) open it.
        if let Some(conn) = lock(&self.conn).take() {
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
            if let Err((_, e)) = conn.close() {
                crate::report!("signoff: closing {} failed: {e}", self.path.display());
            }
        }
        lock(&self.lock_file).take();
        lock(&self.pending).clear();
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).field("pending", &self.len()).finish()
    }
}

/// Opens a store read-only-ish for inspection; kept crate-private for tests.
#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: Uuid) -> Arc<ConfirmationRequest> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "id": id, "tool": "t", "description": "", "prompt": "p", "arguments": {"a": 1},
                "display_arguments": "{\"a\":1}", "arguments_digest": format!("sha256:{}", "0".repeat(64)), "session_id": "s",
                "editable": false, "reasons": [], "timeout_ms": 1000, "deadline_ms": 2000, "created_at_ms": 1000
            }))
            .unwrap(),
        )
    }

    #[test]
    fn guarded_transitions() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path().join("db")).unwrap();
        let id = Uuid::new_v4();
        s.insert(request(id)).unwrap();
        assert_eq!(s.len(), 1);
        // executing straight from pending is refused: nothing runs without a recorded approval.
        assert!(s.transition(&id, StateChange::to(RecordState::Executing)).is_err());
        s.transition(&id, StateChange::to(RecordState::Approved)).unwrap();
        s.transition(&id, StateChange::to(RecordState::Executing)).unwrap();
        assert!(s.transition(&id, StateChange::to(RecordState::Executing)).is_err(), "executes at most once");
        s.transition(
            &id,
            StateChange { result: Some(&serde_json::json!({"ok": 1})), ..StateChange::to(RecordState::Done) },
        )
        .unwrap();
        let r = s.record(&id).unwrap();
        assert_eq!((r.state, r.result), (RecordState::Done, Some(serde_json::json!({"ok": 1}))));
        assert!(s.unfinished().unwrap().is_empty());
        drop(s);
        let s = SqliteStore::open(dir.path().join("db")).unwrap();
        assert_eq!(s.record(&id).unwrap().state, RecordState::Done);
    }
}
