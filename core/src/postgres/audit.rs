//! The audit trail in a PostgreSQL table: one hash chain shared by every process (on any host)
//! that writes to the same table.
//!
//! Each row holds one record exactly as [`JsonlAuditSink`](crate::JsonlAuditSink) writes a line
//! (the same JSON, `seq`, `prev_hash` and `hash`), so the file verifier's record-by-record check
//! applies unchanged ([`verify_chain_postgres`]). Appends serialize on a transaction-level
//! advisory lock: a batch reads the last row and inserts after it while holding the lock, so two
//! processes never chain to the same record, even on an empty table.

use super::db::{Db, OPERATION_TIMEOUT, ident, pg_err};
use crate::audit::{AuditRecord, AuditSink, ChainProblem, ChainProblemKind, ChainReport, GENESIS_HASH};
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Client;

/// The table's name (in the connection's schema).
pub(crate) const AUDIT_TABLE: &str = "signoff_audit";

/// The first key of the advisory locks taken on the audit table (`"sgna"`); the second is the
/// hash of the table's qualified name, so tables in different schemas do not wait for each other.
/// The two-key form never conflicts with single-key (`bigint`) advisory locks.
const LOCK_CLASS: i32 = 0x7367_6e61;

/// Records written in one transaction at most.
const MAX_BATCH: usize = 1000;

/// The first and the longest wait before a failed batch is tried again.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

enum Msg {
    Record(Box<AuditRecord>),
    Flush(oneshot::Sender<()>),
}

/// Where the table is: its qualified name for SQL, and how reports name it.
#[derive(Clone)]
struct Table {
    /// `"schema".signoff_audit`, or `signoff_audit` (the connection's search path).
    sql: String,
    /// `postgres:schema.signoff_audit` or `postgres:signoff_audit`.
    display: String,
}

impl Table {
    fn new(schema: Option<&str>) -> Table {
        match schema {
            Some(s) => {
                Table { sql: format!("{}.{AUDIT_TABLE}", ident(s)), display: format!("postgres:{s}.{AUDIT_TABLE}") }
            }
            None => Table { sql: AUDIT_TABLE.to_owned(), display: format!("postgres:{AUDIT_TABLE}") },
        }
    }

    /// `SELECT pg_advisory_xact_lock(...)` for this table.
    fn lock_sql(&self) -> String {
        format!("SELECT pg_advisory_xact_lock({LOCK_CLASS}, hashtext('{}'))", self.sql.replace('\'', "''"))
    }
}

/// An append-only, hash-chained audit trail in the PostgreSQL table `signoff_audit`, shared by
/// every gate (in any process, on any host) that writes to the same database and schema:
///
/// ```sql
/// CREATE TABLE signoff_audit (
///     seq       bigint PRIMARY KEY,    -- the record's position in the chain, from 0
///     record    text NOT NULL,         -- the record, exactly as a JsonlAuditSink line
///     hash      text NOT NULL,         -- the record's hash (also inside `record`)
///     prev_hash text NOT NULL,         -- the previous record's hash (also inside `record`)
///     at        timestamptz NOT NULL DEFAULT now()
/// );
/// ```
///
/// The table (and the schema, when one is given) is created if missing. Each record is chained
/// exactly as [`JsonlAuditSink`](crate::JsonlAuditSink) chains its lines, so
/// [`verify_chain_postgres`] finds the first edited, missing or reordered record the way
/// [`verify_chain`](crate::verify_chain) does for files. Appends from many processes form one
/// chain: each batch is one transaction that takes an advisory lock on the table, reads the last
/// row and inserts after it.
///
/// [`record`](AuditSink::record) never waits for the database: records are queued and written in
/// batches by a task on the sink's own runtime thread. [`flush`](AuditSink::flush) (also run on
/// drop) waits until everything queued before it is committed, for at most 30 seconds. No record
/// is dropped: when a batch fails (the server is down or restarting), the records stay queued and
/// the batch is tried again with backoff (0.1 s doubling to 5 s) on a new connection, for as long
/// as the sink lives; a batch whose `COMMIT` went unanswered (the connection was lost) is not
/// written twice: the next attempt first asks the server whether that transaction committed
/// (`txid_status`). Failed attempts are counted ([`failures`](Self::failures)) and each streak
/// of failures is reported with one line on stderr. Records still queued when the sink is dropped
/// after the flush's 30 seconds are lost (and reported on stderr).
///
/// A gate's store anchor ([`AuditSink::set_anchor`]) is not used: rows removed from the end of
/// the table are not detectable by the chain alone (see [`verify_chain_postgres`]).
pub struct PostgresAuditSink {
    db: Arc<Db>,
    tx: Mutex<Option<mpsc::UnboundedSender<Msg>>>,
    /// Fires when the writer task has written everything and stopped.
    done: Mutex<Option<oneshot::Receiver<()>>>,
    failures: Arc<AtomicU64>,
    table: Table,
    /// Set when the sink is dropped and its records could not be written in time: the writer
    /// stops retrying.
    give_up: Arc<AtomicBool>,
    /// Whether the sink started `db` (and closes it when dropped).
    owns_db: bool,
}

impl std::fmt::Debug for PostgresAuditSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresAuditSink")
            .field("table", &self.table.display)
            .field("failures", &self.failures())
            .finish_non_exhaustive()
    }
}

impl PostgresAuditSink {
    /// Connects to `url` (`postgres://user:password@host:port/database?...` or
    /// `host=... user=...`), creates the table `signoff_audit` (and `schema`) if missing, and
    /// starts the writer. With `schema`, the table lives in that schema (1 to 63 ASCII letters,
    /// digits or underscores); without, in the connection's search path (usually `public`).
    ///
    /// Errors: `config` for a URL that is not a PostgreSQL connection string or a bad schema
    /// name, `store` when the server cannot be reached or the table cannot be created.
    pub fn connect(url: &str, schema: Option<&str>) -> Result<Arc<PostgresAuditSink>> {
        let db = Db::new(url, schema, None)?;
        Self::on(db, schema, true)
    }

    /// The sink on a connection target whose search path is `schema`. With `owns_db`, dropping
    /// the sink closes `db`; without, `db` (e.g. a store's) stays open and the sink only stops
    /// its writer.
    pub(crate) fn on(db: Arc<Db>, schema: Option<&str>, owns_db: bool) -> Result<Arc<PostgresAuditSink>> {
        let table = Table::new(schema);
        let schema_owned = schema.map(str::to_owned);
        let (db2, t2, s2) = (db.clone(), table.clone(), schema_owned.clone());
        let client = db.block(async move {
            let client = db2.connect().await?;
            ensure_table(&client, &t2, s2.as_deref()).await?;
            Ok(client)
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = oneshot::channel();
        let failures = Arc::new(AtomicU64::new(0));
        let give_up = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            db: db.clone(),
            client: Some(client),
            table: table.clone(),
            schema: schema_owned,
            failures: failures.clone(),
            give_up: give_up.clone(),
            uncertain: None,
        };
        db.handle().spawn(async move {
            writer.run(rx).await;
            let _ = done_tx.send(());
        });
        Ok(Arc::new(PostgresAuditSink {
            db,
            tx: Mutex::new(Some(tx)),
            done: Mutex::new(Some(done_rx)),
            failures,
            table,
            give_up,
            owns_db,
        }))
    }

    /// How many batch writes have failed (each is retried; see the type's documentation).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The table, as reports name it: `postgres:signoff_audit` or `postgres:<schema>.signoff_audit`.
    pub fn table(&self) -> &str {
        &self.table.display
    }

    /// [`flush`](AuditSink::flush), telling whether it worked: `Ok` once every record given so
    /// far is committed.
    ///
    /// Errors: `store` when they are not committed within 30 seconds (they stay queued and are
    /// still written when the server answers again) or the sink is closed.
    pub fn try_flush(&self) -> Result<()> {
        let (done_tx, done_rx) = oneshot::channel();
        let sent = {
            let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            guard.as_ref().is_some_and(|tx| tx.send(Msg::Flush(done_tx)).is_ok())
        };
        if !sent {
            return Err(Error::Store("the PostgreSQL audit writer has stopped".into()));
        }
        self.db.block(async move {
            done_rx.await.map_err(|_| Error::Store("the PostgreSQL audit writer has stopped".into()))
        })
    }
}

impl AuditSink for PostgresAuditSink {
    fn record(&self, record: AuditRecord) {
        let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = guard.as_ref()
            && tx.send(Msg::Record(Box::new(record))).is_ok()
        {
            return;
        }
        self.failures.fetch_add(1, Ordering::Relaxed);
        crate::report!("signoff: the audit writer for {} has stopped; a record was not written", self.table.display);
    }

    fn flush(&self) {
        if let Err(e) = self.try_flush() {
            crate::report!("signoff: audit table {}: flush: {e}", self.table.display);
        }
    }

    fn verify(&self) -> Option<Result<ChainReport>> {
        Some(read_and_verify(&self.db, &self.table))
    }

    fn recent(&self, before: Option<u64>, limit: usize) -> Option<Result<Vec<AuditRecord>>> {
        Some(read_recent(&self.db, &self.table, before, limit))
    }
}

/// The newest rows' records, newest first (see [`AuditSink::recent`]).
fn read_recent(db: &Arc<Db>, table: &Table, before: Option<u64>, limit: usize) -> Result<Vec<AuditRecord>> {
    let (db2, t2) = (db.clone(), table.clone());
    let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = db.block(async move {
        let client = db2.connect().await?;
        let rows = client
            .query(
                &format!("SELECT seq, record FROM {} WHERE seq < $1 ORDER BY seq DESC LIMIT $2", t2.sql),
                &[&before, &limit],
            )
            .await
            .map_err(|e| pg_err(&format!("cannot read the audit table {}", t2.display), e))?;
        Ok(rows.into_iter().map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1))).collect::<Vec<_>>())
    })?;
    rows.into_iter()
        .map(|(seq, record)| {
            serde_json::from_str(&record).map_err(|e| {
                Error::Malformed(format!("{} row with seq {seq}: not an audit record: {e}", table.display))
            })
        })
        .collect()
}

impl Drop for PostgresAuditSink {
    fn drop(&mut self) {
        // Closing the queue lets the writer write what is left and stop.
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(done) = self.done.lock().unwrap_or_else(|e| e.into_inner()).take()
            && let Err(e) = self.db.block(async move {
                let _ = done.await;
                Ok(())
            })
        {
            crate::report!("signoff: audit table {}: records still queued were not written: {e}", self.table.display);
        }
        self.give_up.store(true, Ordering::SeqCst);
        if self.owns_db {
            self.db.close();
        }
    }
}

/// Creates the schema and table if missing. Serialized across processes by the table's advisory
/// lock, and tried again on the catalog races that locks held by other code cannot exclude.
async fn ensure_table(client: &Client, table: &Table, schema: Option<&str>) -> Result<()> {
    let mut sql = String::from("BEGIN;\n");
    sql += &table.lock_sql();
    sql += ";\n";
    if let Some(s) = schema {
        sql += &format!("CREATE SCHEMA IF NOT EXISTS {};\n", ident(s));
    }
    sql += &format!(
        "CREATE TABLE IF NOT EXISTS {} (seq bigint PRIMARY KEY, record text NOT NULL, hash text NOT NULL, \
         prev_hash text NOT NULL, at timestamptz NOT NULL DEFAULT now());\nCOMMIT;",
        table.sql
    );
    let mut attempt = 0;
    loop {
        match client.batch_execute(&sql).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                // unique_violation on the catalog, duplicate_schema, duplicate_table: another
                // process created it at the same moment.
                let race = e.code().is_some_and(|c| matches!(c.code(), "23505" | "42P06" | "42P07"));
                attempt += 1;
                if !race || attempt >= 3 {
                    return Err(pg_err(&format!("cannot create the audit table {}", table.display), e));
                }
            }
        }
    }
}

/// The writer task's state.
struct Writer {
    db: Arc<Db>,
    client: Option<Client>,
    table: Table,
    schema: Option<String>,
    failures: Arc<AtomicU64>,
    give_up: Arc<AtomicBool>,
    /// The transaction of the last failed attempt, when it may have committed (the connection
    /// was lost around its `COMMIT`): its status decides whether the batch is written again.
    uncertain: Option<i64>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut failing = false;
        let mut needs_table = false;
        while let Some(first) = rx.recv().await {
            let mut batch: Vec<AuditRecord> = Vec::new();
            let mut waiters = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next.take() {
                match msg {
                    Msg::Record(r) => batch.push(*r),
                    Msg::Flush(w) => waiters.push(w),
                }
                if batch.len() < MAX_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            let mut wait = RETRY_FIRST;
            while !batch.is_empty() {
                let attempt = tokio::time::timeout(OPERATION_TIMEOUT, self.write(&batch, needs_table)).await;
                let err = match attempt {
                    Ok(Ok(())) => {
                        failing = false;
                        break;
                    }
                    Ok(Err(e)) => e,
                    Err(_) => Error::Store(format!("no answer from PostgreSQL within {OPERATION_TIMEOUT:?}")),
                };
                if self.give_up.load(Ordering::SeqCst) {
                    crate::report!(
                        "signoff: audit table {}: {} record(s) were not written: the sink was dropped while the \
                         database failed: {err}",
                        self.table.display,
                        batch.len()
                    );
                    return;
                }
                self.failures.fetch_add(1, Ordering::Relaxed);
                if !failing {
                    failing = true;
                    crate::report!(
                        "signoff: audit table {}: write failed, keeping the records and retrying: {err}",
                        self.table.display
                    );
                }
                // A new connection, and the table again in case it was what went missing.
                self.client = None;
                needs_table = true;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
            }
            needs_table = false;
            for w in waiters {
                let _ = w.send(());
            }
        }
    }

    /// Appends `batch` to the chain in one transaction.
    async fn write(&mut self, batch: &[AuditRecord], needs_table: bool) -> Result<()> {
        let client = match &self.client {
            Some(c) if !c.is_closed() => c,
            _ => {
                self.client = None;
                let c = self.db.connect().await?;
                if needs_table {
                    ensure_table(&c, &self.table, self.schema.as_deref()).await?;
                }
                self.client.insert(c)
            }
        };
        if let Some(xid) = self.uncertain {
            // Written already, if that transaction committed: never write a batch twice.
            let status = client
                .query_one("SELECT txid_status($1)", &[&xid])
                .await
                .map_err(|e| pg_err("cannot learn whether the last audit batch was committed", e))?;
            match status.get::<_, Option<String>>(0).as_deref() {
                Some("committed") => {
                    self.uncertain = None;
                    return Ok(());
                }
                Some("in progress") => {
                    return Err(Error::Store("the previous attempt's transaction is still in progress".into()));
                }
                _ => self.uncertain = None,
            }
        }
        // Set as soon as the transaction has an id, so an attempt cut short by the timeout
        // leaves it behind too.
        append(client, &self.table, batch, &mut self.uncertain).await
    }
}

/// Appends `batch` after the last row in one transaction. `xid` holds the transaction's id from
/// the moment it is known until the transaction is known to have committed.
async fn append(client: &Client, table: &Table, batch: &[AuditRecord], xid: &mut Option<i64>) -> Result<()> {
    let err = |e| pg_err(&format!("cannot append to the audit table {}", table.display), e);
    client.batch_execute("BEGIN").await.map_err(err)?;
    let result = async {
        let row = client.query_one(&format!("{}, txid_current()", table.lock_sql()), &[]).await.map_err(err)?;
        *xid = Some(row.get(1));
        let last = client
            .query_opt(&format!("SELECT seq, hash FROM {} ORDER BY seq DESC LIMIT 1", table.sql), &[])
            .await
            .map_err(err)?;
        let (mut seq, mut prev) = match last {
            Some(row) => {
                let s: i64 = row.get(0);
                let seq = u64::try_from(s)
                    .ok()
                    .and_then(|s| s.checked_add(1))
                    .ok_or_else(|| Error::Store(format!("the audit table {} ends at seq {s}", table.display)))?;
                (seq, row.get::<_, String>(1))
            }
            None => (0, GENESIS_HASH.to_owned()),
        };
        let mut seqs = Vec::with_capacity(batch.len());
        let mut records = Vec::with_capacity(batch.len());
        let mut hashes = Vec::with_capacity(batch.len());
        let mut prevs = Vec::with_capacity(batch.len());
        for r in batch {
            let (line, hash) = crate::audit::chained_line(r.clone(), seq, prev.clone())
                .map_err(|e| Error::Store(format!("cannot serialize an audit record: {e}")))?;
            let line =
                String::from_utf8(line).map_err(|e| Error::Store(format!("an audit record is not UTF-8: {e}")))?;
            seqs.push(seq as i64);
            records.push(line);
            prevs.push(std::mem::replace(&mut prev, hash.clone()));
            hashes.push(hash);
            seq += 1;
        }
        client
            .execute(
                &format!(
                    "INSERT INTO {} (seq, record, hash, prev_hash) \
                     SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])",
                    table.sql
                ),
                &[&seqs, &records, &hashes, &prevs],
            )
            .await
            .map_err(err)?;
        client.batch_execute("COMMIT").await.map_err(err)?;
        *xid = None;
        Ok(())
    }
    .await;
    if result.is_err() && !client.is_closed() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    result
}

/// Verifies the hash chain in the PostgreSQL table `signoff_audit` (written by
/// [`PostgresAuditSink`]) of the database at `url`, in `schema` or the connection's search path.
///
/// Reads every row in `seq` order (one consistent snapshot, so it may run while gates write)
/// and checks them as one chain with the same record-by-record check as
/// [`verify_chain`](crate::verify_chain): each record's JSON must hash to its `hash`, carry the
/// expected `seq` (from 0, no gaps) and the previous record's hash as `prev_hash`. A problem is
/// reported with `file` = `postgres:signoff_audit` (or `postgres:<schema>.signoff_audit`) and
/// `line` = the row's `seq`. It also checks that a row's `seq`, `hash` and `prev_hash` columns
/// agree with its record (writers chain new records to the `hash` column of the last row).
///
/// What it detects, as the first problem in `seq` order:
/// - a record whose text was edited ([`Edited`](ChainProblemKind::Edited) at that row);
/// - an edited record re-hashed (a forged `hash`): the next record chains to the old version
///   ([`Edited`](ChainProblemKind::Edited), at the forged row);
/// - rows deleted before the last one: a gap in `seq` ([`Missing`](ChainProblemKind::Missing) at
///   the row after the gap), or a `seq` column renumbered to close it
///   ([`Edited`](ChainProblemKind::Edited): the column no longer matches the record);
/// - rows swapped or renumbered ([`Reordered`](ChainProblemKind::Reordered) or
///   [`Edited`](ChainProblemKind::Edited));
/// - a `record` that is not a chained audit record ([`Malformed`](ChainProblemKind::Malformed)).
///
/// What it does not detect:
/// - rows deleted at the end (the last *n* rows, or all of them): what remains is still a valid
///   chain, so the report says intact with fewer records. The chain alone cannot show this; keep
///   the reported head (`records`, `head`) somewhere the database's writers cannot change, and
///   compare later;
/// - a rewrite of the whole table from some row on, with every later record re-chained (whoever
///   can write the table can compute the hashes, which are not keyed);
/// - the `at` column (it is not part of the chain; the record's own `at_ms` is).
///
/// An empty table is an intact chain of 0 records. The rows are read into memory (as
/// [`verify_chain`](crate::verify_chain) reads a file), about the size of the table's `record`
/// column.
///
/// Errors: `config` for a bad URL or schema name, `store` when the server cannot be reached or
/// the table does not exist. (A problem *in* the chain is a finding of the report, not an error.)
pub fn verify_chain_postgres(url: &str, schema: Option<&str>) -> Result<ChainReport> {
    let db = Db::new(url, schema, None)?;
    let report = read_and_verify(&db, &Table::new(schema));
    db.close();
    report
}

/// Reads the whole table through `db` and verifies it.
fn read_and_verify(db: &Arc<Db>, table: &Table) -> Result<ChainReport> {
    let (db2, t2) = (db.clone(), table.clone());
    let rows = db.block(async move {
        let client = db2.connect().await?;
        let exists = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&t2.sql])
            .await
            .map_err(|e| pg_err("cannot look up the audit table", e))?;
        if !exists.get::<_, bool>(0) {
            return Err(Error::Store(format!("there is no audit table {} in this database", t2.display)));
        }
        let rows = client
            .query(&format!("SELECT seq, record, hash, prev_hash FROM {} ORDER BY seq", t2.sql), &[])
            .await
            .map_err(|e| pg_err(&format!("cannot read the audit table {}", t2.display), e))?;
        Ok(rows
            .into_iter()
            .map(|r| Row { seq: r.get(0), record: r.get(1), hash: r.get(2), prev_hash: r.get(3) })
            .collect::<Vec<_>>())
    })?;
    Ok(verify_rows(&table.display, rows))
}

struct Row {
    seq: i64,
    record: String,
    hash: String,
    prev_hash: String,
}

fn verify_rows(display: &str, rows: Vec<Row>) -> ChainReport {
    let file = PathBuf::from(display);
    // The first row whose columns disagree with its record: checked only if the chain is
    // intact up to it.
    let mismatch = rows.iter().position(|r| {
        let Ok(rec) = serde_json::from_str::<AuditRecord>(&r.record) else { return false };
        rec.seq.and_then(|s| i64::try_from(s).ok()) != Some(r.seq)
            || rec.hash.as_deref() != Some(r.hash.as_str())
            || rec.prev_hash.as_deref() != Some(r.prev_hash.as_str())
    });
    let checked = mismatch.unwrap_or(rows.len());
    let line = |seq: i64| usize::try_from(seq).unwrap_or(0);
    let lines: Vec<(usize, usize, Vec<u8>)> =
        rows[..checked].iter().map(|r| (0, line(r.seq), r.record.clone().into_bytes())).collect();
    let mut report = crate::audit::verify_in_memory(vec![file.clone()], &lines);
    if let (None, Some(i)) = (&report.problem, mismatch) {
        let r = &rows[i];
        report.problem = Some(ChainProblem {
            kind: ChainProblemKind::Edited,
            file,
            line: line(r.seq),
            seq: u64::try_from(r.seq).ok(),
            message: format!(
                "the row with seq {} does not match its record (its seq, hash or prev_hash column was changed)",
                r.seq
            ),
        });
    }
    report
}
