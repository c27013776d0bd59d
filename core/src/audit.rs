//! The audit trail: every request, response (accepted or rejected), outcome and execution.

use crate::error::ErrorKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// What an audit record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditKind {
    /// A request was published and is waiting for a person.
    Request,
    /// A call ran without asking: the tool is not gated, a session grant covered it, or gating
    /// is disabled (`decision` says which).
    Bypass,
    /// A response was accepted.
    Response,
    /// A response was rejected (`error_kind` says why); the request is unchanged.
    ResponseRejected,
    /// A request reached its final state.
    Outcome,
    /// A session grant was created or revoked.
    Grant,
    /// A tool ran (`decision` is `ok` or `error`).
    Execution,
    /// A gate-wide notice, e.g. gating disabled.
    Notice,
}

/// One line of the audit log. Fields that do not apply to a record's kind are absent from its
/// JSON form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When it was recorded (epoch ms).
    pub at_ms: u64,
    /// What it is about; serialized kebab-case, e.g. `"response-rejected"`.
    pub kind: AuditKind,
    /// The confirmation request, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<Uuid>,
    /// The agent session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The model's id for the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// `sha256:<hex>` of the call's arguments (for `execution`, of the arguments that ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_digest: Option<String>,
    /// The call's arguments (`request` and `bypass`; the original arguments on an edited approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// A person's edited arguments (`response` when accepted, `response-rejected` when refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_arguments: Option<Value>,
    /// The call's metadata as the host gave it (`request`, when there is any): e.g. the MCP
    /// gate's client identity and protocol era under `mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// approve / deny / approved / denied / timed-out / cancelled / not-gated / ok / error ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Who answered (for a `grant`, who approved for the session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// Free text: why approval was needed (`request`), the person's reason (`response`,
    /// `outcome`), the cancel reason (`outcome`), the error (`response-rejected`, `execution`), or
    /// a note (`grant`, `notice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why a response was rejected (`response-rejected` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// Position in a hash-chained log, from 0 ([`JsonlAuditSink`] sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The previous record's `hash` (64 zeros for the first record of a chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_hash: Option<String>,
    /// SHA-256 (hex) of this record's line without its `hash` field; see [`verify_chain`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

impl AuditRecord {
    /// An empty record of `kind`, stamped now.
    pub fn new(kind: AuditKind) -> Self {
        AuditRecord {
            at_ms: crate::event::now_ms(),
            kind,
            request_id: None,
            session_id: None,
            tool: None,
            tool_call_id: None,
            arguments_digest: None,
            arguments: None,
            edited_arguments: None,
            metadata: None,
            decision: None,
            responder: None,
            reason: None,
            error_kind: None,
            seq: None,
            prev_hash: None,
            hash: None,
        }
    }

    /// A record of `kind` about a request: its id, session, tool, call id and argument digest.
    pub fn about(kind: AuditKind, request: &crate::ConfirmationRequest) -> Self {
        let mut r = AuditRecord::new(kind);
        r.request_id = Some(request.id);
        r.session_id = Some(request.session_id.to_string());
        r.tool = Some(request.tool.to_string());
        r.tool_call_id = request.tool_call_id.clone();
        r.arguments_digest = Some(request.arguments_digest.to_string());
        r
    }

    /// A record of `kind` about a call that made no request (a bypass, an execution): session,
    /// tool, call id and the arguments' digest.
    pub fn about_call(kind: AuditKind, session: &str, tool: &str, call_id: Option<&str>, arguments: &Value) -> Self {
        let mut r = AuditRecord::new(kind);
        r.session_id = Some(session.to_owned());
        r.tool = Some(tool.to_owned());
        r.tool_call_id = call_id.map(str::to_owned);
        r.arguments_digest = Some(crate::display::arguments_digest(arguments));
        r
    }

    /// A [`Notice`](AuditKind::Notice): something the gate itself reports (`decision` names it).
    pub fn notice(decision: &str, reason: impl Into<String>) -> Self {
        AuditRecord::new(AuditKind::Notice).with_decision(decision).with_reason(reason)
    }

    /// A [`Grant`](AuditKind::Grant) change for a session's tool (`granted` / `revoked`).
    pub fn grant(session: &str, tool: &str, decision: &str) -> Self {
        let mut r = AuditRecord::new(AuditKind::Grant).with_decision(decision);
        r.session_id = Some(session.to_owned());
        r.tool = Some(tool.to_owned());
        r
    }

    /// Sets `decision`.
    pub fn with_decision(mut self, decision: &str) -> Self {
        self.decision = Some(decision.to_owned());
        self
    }

    /// Sets `reason`.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Sets `responder` (when known).
    pub fn with_responder(mut self, responder: Option<String>) -> Self {
        self.responder = responder;
        self
    }

    /// Sets the error kind and message of a refusal.
    pub fn with_error(mut self, e: &crate::Error) -> Self {
        self.error_kind = Some(e.kind());
        self.reason = Some(e.to_string());
        self
    }
}

/// Where audit records go. `record` must not block for long: it is called on the gate's paths.
pub trait AuditSink: Send + Sync + 'static {
    /// Takes one record. Called synchronously on the gate's paths, so it must not block for long.
    fn record(&self, record: AuditRecord);
    /// Blocks until every record given so far is durable. The default does nothing.
    fn flush(&self) {}
    /// Keeps the chain's head in `anchor` from now on (see [`AuditAnchor`]). The gate calls this
    /// when it is built with a store that offers an anchor
    /// ([`PendingStore::audit_anchor`](crate::PendingStore::audit_anchor)). The default ignores it.
    fn set_anchor(&self, anchor: Arc<dyn AuditAnchor>) {
        let _ = anchor;
    }
    /// Reads the chain back and verifies it (after [`flush`](Self::flush)): what
    /// [`Gate::verify_audit`](crate::Gate::verify_audit) returns. `None` (the default) for a
    /// sink that cannot be read back.
    fn verify(&self) -> Option<crate::Result<ChainReport>> {
        None
    }
    /// The newest records, newest first: at most `limit`, and with `before` only those whose
    /// `seq` is below it (the page after one whose last record had `seq` `before`), read back
    /// after [`flush`](Self::flush): what [`Gate::recent_audit`](crate::Gate::recent_audit)
    /// returns, e.g. for an approval console's audit list. `None` (the default) for a sink that
    /// cannot be read back.
    fn recent(&self, before: Option<u64>, limit: usize) -> Option<crate::Result<Vec<AuditRecord>>> {
        let _ = (before, limit);
        None
    }
}

/// The newest record of a hash chain: its `seq` and `hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    /// The record's position (from 0).
    pub seq: u64,
    /// The record's hash.
    pub hash: String,
}

/// Somewhere other than the log file that remembers how far the log reached. The hash chain
/// alone shows an edited, reordered or missing record, but not records cut from the end: a log
/// truncated after any record is still a valid chain. With an anchor, [`verify_chain_anchored`]
/// also reports a log that ends before the anchored head, or whose record at the anchored
/// `seq` is not the anchored one. The durable store is the default anchor (an attacker who
/// edits the log file does not by default also control the database, which is where the
/// requests' states live).
pub trait AuditAnchor: Send + Sync + 'static {
    /// Records the head after it was written and synced to the log.
    fn save_head(&self, head: &ChainHead) -> crate::Result<()>;
    /// The head recorded last, if any.
    fn load_head(&self) -> crate::Result<Option<ChainHead>>;
}

/// Keeps records in memory (tests, small apps, UIs that show history).
#[derive(Debug, Default)]
pub struct MemoryAuditSink {
    records: Mutex<Vec<AuditRecord>>,
}

impl MemoryAuditSink {
    /// An empty sink, shared so the gate and the caller can both hold it.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    /// A copy of every record so far.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.records.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl AuditSink for MemoryAuditSink {
    fn record(&self, record: AuditRecord) {
        self.records.lock().unwrap_or_else(|e| e.into_inner()).push(record);
    }

    /// Records here carry no `seq`: a record's position (from 0) stands for it in `before`.
    fn recent(&self, before: Option<u64>, limit: usize) -> Option<crate::Result<Vec<AuditRecord>>> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let end = before.map_or(records.len(), |b| records.len().min(usize::try_from(b).unwrap_or(usize::MAX)));
        Some(Ok(records[..end].iter().rev().take(limit).cloned().collect()))
    }
}

#[allow(clippy::large_enum_variant)] // records are moved through the channel once; boxing would add an allocation
enum Msg {
    Record(AuditRecord),
    Flush(mpsc::SyncSender<()>),
    Anchor(Arc<dyn AuditAnchor>),
    /// Nothing new: try again to write what a failed write kept back.
    Retry,
}

/// How long the writer waits before writing again after a failed write; doubled per failure up
/// to [`RETRY_MAX`].
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(50);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// The `decision` of the notice a sink writes into a log it finds cut (it ends before the head
/// its anchor recorded) before it goes on; [`verify_chain`] reports that record as
/// [`Truncated`](ChainProblemKind::Truncated).
pub const TRUNCATED_NOTICE: &str = "audit-truncated";

/// The `prev_hash` of the first record of a chain.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Options for [`JsonlAuditSink::open_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AuditOptions {
    /// Rotate when the active file reaches this many bytes: it is renamed `<path>.<n>` (n = 1,
    /// 2, ... oldest first) and a new file continues the same chain.
    pub rotate_bytes: Option<u64>,
}

/// An append-only, hash-chained JSON Lines file. Each line carries `seq`, the previous line's
/// hash (`prev_hash`) and its own `hash` (SHA-256 of the line without the `hash` field), so
/// [`verify_chain`] finds the first edited, missing or reordered record. Re-opening the file
/// (after a restart) continues the chain; so does rotation ([`AuditOptions::rotate_bytes`]).
///
/// Records are written by a dedicated thread, so the gate never waits on the disk;
/// [`flush`](AuditSink::flush) (also run on drop) waits until every record handed over so far
/// is written and synced, or a write has failed. A write that fails (a full disk) drops
/// nothing: its records are kept in memory, in order, and written again every few seconds (and
/// at close); the first write that works adds an `audit-write-failed` notice saying records were
/// written late. Failures are counted ([`failures`](Self::failures)) and reported on stderr;
/// the gate goes on deciding calls meanwhile.
///
/// Several sinks may write one log (two gates, two processes): each writes its batches holding
/// `<path>.lock` and continues from the record another wrote last, so the log stays one chain.
pub struct JsonlAuditSink {
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    /// The anchor the writer keeps the head in, for [`AuditSink::verify`].
    anchor: Mutex<Option<Arc<dyn AuditAnchor>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    failures: Arc<std::sync::atomic::AtomicU64>,
    path: PathBuf,
}

/// The writer thread's end of the chain.
///
/// Several writers may append to one log (two gates, two processes): each batch is written
/// holding `<path>.lock`, after catching up with whatever another writer appended or rotated
/// since this one last wrote, so the chain goes on from the log's real last record.
struct Chain {
    path: PathBuf,
    file: std::fs::File,
    /// The file's length as this writer last left it, up to its last whole record: what a
    /// failed write is cut back to, and how another writer's appends are noticed.
    size: u64,
    /// The chain's head: the log's last record as this writer last saw or wrote it.
    next_seq: u64,
    prev: String,
    /// Records not yet on disk, in order, chained when written. A write that fails leaves them
    /// here (the file cut back to `size`) to be written, in the same order, when writing works
    /// again: nothing is dropped, and the chain stays whole.
    unwritten: Vec<AuditRecord>,
    /// Writes failed since the last one that worked: (how many, the first error, when).
    failing: Option<(u64, String, u64)>,
    /// A failed write may have left part of a record in the file, not yet cut away.
    torn: bool,
    rotate_bytes: Option<u64>,
    anchor: Option<Arc<dyn AuditAnchor>>,
    /// Records written since the anchor was last saved.
    unanchored: bool,
    /// `<path>.lock`, held while a batch is written.
    lock: std::fs::File,
}

/// Holds a log's lock until dropped.
struct Locked<'a>(&'a std::fs::File);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl Chain {
    /// The head of the chain, as far as this writer knows (`None` for an empty chain).
    fn head(&self) -> Option<ChainHead> {
        self.next_seq.checked_sub(1).map(|seq| ChainHead { seq, hash: self.prev.clone() })
    }

    /// Starts anchoring. A log that ends before the anchored head was cut while the gate was
    /// down: that is written into the chain itself (and to stderr) before it continues, so the
    /// evidence survives the anchor moving on.
    fn set_anchor(&mut self, anchor: Arc<dyn AuditAnchor>) -> std::io::Result<()> {
        // Compared with the log as it is now, not as it was opened (another writer may have
        // gone on since). Should that fail, with the log as last seen: the anchor is kept all
        // the same.
        if let Ok(lock) = self.lock.try_clone()
            && let Ok(_locked) = lock_within(&lock, LOCK_WAIT)
            && let Err(e) = self.catch_up()
        {
            crate::report!("signoff: audit log {}: cannot read its end before anchoring: {e}", self.path.display());
        }
        match anchor.load_head() {
            Ok(Some(anchored)) => {
                let ends = self.head();
                let cut = match &ends {
                    None => true,
                    Some(h) => h.seq < anchored.seq || (h.seq == anchored.seq && h.hash != anchored.hash),
                };
                if cut {
                    let ends_at = ends.map_or("it is empty".to_owned(), |h| format!("it ends at record {}", h.seq));
                    let msg = format!(
                        "audit log {} was cut: its anchor records record {} (hash {}), but {ends_at}",
                        self.path.display(),
                        anchored.seq,
                        anchored.hash
                    );
                    crate::report!("signoff: {msg}");
                    self.write(AuditRecord::notice(TRUNCATED_NOTICE, msg));
                    self.unanchored = true;
                }
            }
            Ok(None) => self.unanchored = self.next_seq > 0,
            Err(e) => crate::report!("signoff: cannot read the audit anchor: {e}"),
        }
        self.anchor = Some(anchor);
        Ok(())
    }

    /// Syncs what was written and records the head in the anchor.
    fn save_anchor(&mut self) -> std::io::Result<()> {
        let (Some(anchor), true) = (&self.anchor, self.unanchored) else { return Ok(()) };
        // The anchor must never be ahead of what the disk holds.
        if !self.unwritten.is_empty() {
            return Ok(());
        }
        let Some(head) = self.head() else { return Ok(()) };
        self.file.sync_data()?;
        anchor.save_head(&head).map_err(std::io::Error::other)?;
        self.unanchored = false;
        Ok(())
    }

    fn open(path: &Path, options: AuditOptions) -> std::io::Result<Chain> {
        let lock = open_lock(path)?;
        let file = std::fs::OpenOptions::new().create(true).read(true).append(true).open(path)?;
        let mut chain = Chain {
            path: path.to_path_buf(),
            file,
            size: 0,
            next_seq: 0,
            prev: GENESIS_HASH.to_owned(),
            unwritten: Vec::new(),
            failing: None,
            torn: false,
            rotate_bytes: options.rotate_bytes,
            anchor: None,
            unanchored: false,
            lock,
        };
        let lock = chain.lock.try_clone()?;
        let _locked = lock_within(&lock, LOCK_WAIT)?;
        chain.read_tail()?;
        Ok(chain)
    }

    /// Continues from the log's last whole record: of the file, or of the newest rotated one.
    /// Called holding the lock.
    fn read_tail(&mut self) -> std::io::Result<()> {
        let path = self.path.as_path();
        let mut size = self.file.metadata()?.len();
        let mut last = last_line(path)?;
        if last.is_none()
            && let Some((_, newest)) = rotated_files(path)?.pop()
        {
            last = last_line(&newest)?;
        }
        if size > 0 && !ends_with_newline(&mut self.file)? {
            // A final line without its newline: a whole record whose newline was lost (it is
            // continued from), or a torn one from a crash (verification reports it). Ended, so
            // the next record starts cleanly.
            self.file.write_all(b"\n")?;
            size += 1;
            let ended = last_line(path)?;
            if ended.as_deref().is_some_and(|l| chained_tail(l).is_some()) {
                last = ended;
            }
        }
        let (next_seq, prev) = match last.as_deref().map(|l| chained_tail(l).ok_or(())) {
            Some(Ok(t)) => t,
            None => (0, GENESIS_HASH.to_owned()),
            Some(Err(())) => {
                // Keep the gate running; `verify_chain` reports the unreadable record.
                crate::report!(
                    "signoff: the last record of {} is not a chained audit record; continuing after it",
                    path.display()
                );
                (0, GENESIS_HASH.to_owned())
            }
        };
        (self.size, self.next_seq, self.prev) = (size, next_seq, prev);
        Ok(())
    }

    /// After another writer appended to the log or rotated it: continue from where it left
    /// the log. Called holding the lock.
    fn catch_up(&mut self) -> std::io::Result<()> {
        let on_disk = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let mut ours = self.file.metadata()?;
        let moved = on_disk.as_ref().is_none_or(|m| !same_file(m, &ours));
        if moved {
            // Rotated (or removed) by someone else: the path names another file now.
            self.file = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&self.path)?;
            self.torn = false;
        } else if self.torn {
            // What a failed write of ours left: cut away before anything is compared.
            self.file.set_len(self.size)?;
            self.torn = false;
            ours = self.file.metadata()?;
        }
        if !moved && ours.len() == self.size {
            return Ok(());
        }
        let (was_seq, was_prev) = (self.next_seq, self.prev.clone());
        self.read_tail()?;
        // Other writers only append, or rotate (the newest record then is in a rotated file):
        // a log that now ends before the record this writer last saw was cut, or replaced,
        // while it was open. Said in the chain before anything else is written.
        if self.next_seq < was_seq || (self.next_seq == was_seq && self.prev != was_prev) {
            let ends_at =
                self.next_seq.checked_sub(1).map_or("it is empty".to_owned(), |s| format!("it ends at record {s}"));
            let msg = format!(
                "audit log {} was cut while it was open: its last record was record {} (hash {was_prev}), but {ends_at}",
                self.path.display(),
                was_seq.saturating_sub(1),
            );
            crate::report!("signoff: {msg}");
            self.unwritten.insert(0, AuditRecord::notice(TRUNCATED_NOTICE, msg));
        }
        Ok(())
    }

    /// Queues `r`; it is chained and reaches the disk with the next [`write_out`](Self::write_out).
    fn write(&mut self, r: AuditRecord) {
        self.unwritten.push(r);
    }

    /// Appends the queued records, all or none, holding the log's lock, then rotates if due. A
    /// failed write is cut back off the file and the records stay queued. After failures, the
    /// first write that works also records, in the chain, that the records before it were
    /// written late.
    fn write_out(&mut self) -> std::io::Result<()> {
        if self.unwritten.is_empty() {
            return Ok(());
        }
        let attempt = self.append_unwritten();
        match (attempt, self.failing.take()) {
            (Ok(()), Some((n, first, since))) => {
                let msg = format!(
                    "audit log {}: {n} write(s) failed from {since} (epoch ms) on ({first}); the records before this one \
                     were kept and written late",
                    self.path.display()
                );
                crate::report!("signoff: {msg}");
                self.write(AuditRecord::notice("audit-write-failed", msg));
                self.append_unwritten()
            }
            (Ok(()), None) => Ok(()),
            (Err(e), failing) => {
                let (n, first, since) = failing.unwrap_or_else(|| (0, e.to_string(), crate::event::now_ms()));
                self.failing = Some((n + 1, first, since));
                Err(e)
            }
        }
    }

    fn append_unwritten(&mut self) -> std::io::Result<()> {
        let lock = self.lock.try_clone()?;
        let _locked = lock_within(&lock, LOCK_WAIT)?;
        self.catch_up()?;
        if self.torn {
            self.file.set_len(self.size)?;
            self.torn = false;
        }
        let (mut seq, mut prev) = (self.next_seq, self.prev.clone());
        let mut lines = Vec::new();
        for r in &mut self.unwritten {
            let (line, hash) = chain_record(r, seq, prev).map_err(std::io::Error::other)?;
            lines.extend_from_slice(&line);
            lines.push(b'\n');
            seq += 1;
            prev = hash;
        }
        if let Err(e) = self.file.write_all(&lines) {
            // Part of it may be in the file: cut back to the last whole record (or, failing
            // that, before the next attempt), so no torn record sits inside the chain.
            self.torn = self.file.set_len(self.size).is_err();
            return Err(e);
        }
        self.size += lines.len() as u64;
        (self.next_seq, self.prev) = (seq, prev);
        self.unwritten.clear();
        self.unanchored = true;
        self.maybe_rotate()
    }

    /// Called holding the lock, after a write.
    fn maybe_rotate(&mut self) -> std::io::Result<()> {
        let Some(limit) = self.rotate_bytes else { return Ok(()) };
        if self.size < limit {
            return Ok(());
        }
        self.file.sync_data()?;
        // Numbered after the newest rotated file there is (another writer may have rotated).
        let next = rotated_files(&self.path)?.last().map_or(0, |(n, _)| *n) + 1;
        std::fs::rename(&self.path, rotated_path(&self.path, next))?;
        self.file = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// Whether two metadata describe the same file (by device and inode where there are such).
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        a.len() == b.len() && a.modified().ok() == b.modified().ok()
    }
}

/// The `seq` after a chained record's, and its hash: where a chain continues from it.
fn chained_tail(line: &[u8]) -> Option<(u64, String)> {
    let (body, hash) = split_hash(line).ok()?;
    let rec: AuditRecord = serde_json::from_slice(&hashed_bytes(body)).ok()?;
    Some((rec.seq? + 1, hash.to_owned()))
}

/// How long a writer waits for another to finish its batch before the write counts as failed
/// (and is tried again later).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `<path>.lock`, which writers of the log take while they write a batch.
fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)
}

/// Takes `lock`, waiting up to `wait` for another writer (in this process or another) to finish.
fn lock_within(lock: &std::fs::File, wait: std::time::Duration) -> std::io::Result<Locked<'_>> {
    let start = std::time::Instant::now();
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(Locked(lock)),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < wait => {
                std::thread::sleep(std::time::Duration::from_millis(1))
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!("another writer of the audit log held its lock for over {wait:?}"),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// `r` as the chained record `seq` after the record whose hash is `prev_hash`: the line (no
/// newline) with `seq`, `prev_hash` and, last, `hash` (SHA-256 hex of the line without its `hash`
/// field), and that hash. Every chained sink (the JSON Lines file, the PostgreSQL table) writes
/// records through this, so one verifier checks them all.
#[cfg(feature = "postgres")]
pub(crate) fn chained_line(mut r: AuditRecord, seq: u64, prev_hash: String) -> serde_json::Result<(Vec<u8>, String)> {
    chain_record(&mut r, seq, prev_hash)
}

/// [`chained_line`] of `r`, whose chain fields it sets.
fn chain_record(r: &mut AuditRecord, seq: u64, prev_hash: String) -> serde_json::Result<(Vec<u8>, String)> {
    r.seq = Some(seq);
    r.prev_hash = Some(prev_hash);
    r.hash = None;
    let mut line = serde_json::to_vec(&*r)?;
    let hash = crate::display::sha256_hex(&line);
    line.pop(); // the closing brace
    line.extend_from_slice(b",\"hash\":\"");
    line.extend_from_slice(hash.as_bytes());
    line.extend_from_slice(b"\"}");
    Ok((line, hash))
}

fn rotated_path(path: &Path, n: u64) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// `<path>.<n>` files next to `path`, by `n`.
fn rotated_files(path: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // By bytes: a file name need not be UTF-8.
    let Some(name) = path.file_name().map(|n| n.as_encoded_bytes().to_vec()) else { return Ok(Vec::new()) };
    let mut v = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(v),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let file_name = entry.file_name();
        if let Some(n) = file_name
            .as_encoded_bytes()
            .strip_prefix(name.as_slice())
            .and_then(|rest| rest.strip_prefix(b"."))
            .and_then(|rest| std::str::from_utf8(rest).ok())
            // Only the names rotation writes (`.1`, `.2`, ...): not `.01`, `.+1` or `.1.lock`.
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0'))
            .and_then(|n| n.parse::<u64>().ok())
        {
            v.push((n, entry.path()));
        }
    }
    v.sort();
    Ok(v)
}

fn ends_with_newline(f: &mut std::fs::File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    f.seek(SeekFrom::End(-1))?;
    let mut b = [0u8; 1];
    f.read_exact(&mut b)?;
    Ok(b[0] == b'\n')
}

/// The last complete (newline-terminated) line of a file, if any.
fn last_line(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let mut window: u64 = 64 * 1024;
    loop {
        let start = len.saturating_sub(window);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::with_capacity((len - start) as usize);
        f.read_to_end(&mut buf)?;
        // Drop a torn tail, then find the line before the final newline.
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            if start == 0 {
                return Ok(None);
            }
            window *= 4;
            continue;
        };
        let body = &buf[..end];
        match body.iter().rposition(|&b| b == b'\n') {
            Some(nl) => return Ok(Some(body[nl + 1..].to_vec())),
            None if start == 0 => return Ok(if body.is_empty() { None } else { Some(body.to_vec()) }),
            None => window *= 4,
        }
    }
}

/// Splits a chained line into the bytes that were hashed (the line without its `hash` field)
/// and the recorded hash.
fn split_hash(line: &[u8]) -> Result<(&[u8], &str), &'static str> {
    const TAIL: usize = 2; // `"}`
    const KEY: &[u8] = b",\"hash\":\"";
    let n = line.len();
    if n < KEY.len() + 64 + TAIL || &line[n - TAIL..] != b"\"}" {
        return Err("the record carries no hash");
    }
    let hash = &line[n - TAIL - 64..n - TAIL];
    if &line[n - TAIL - 64 - KEY.len()..n - TAIL - 64] != KEY || !hash.iter().all(|b| b.is_ascii_hexdigit()) {
        return Err("the record carries no hash");
    }
    Ok((&line[..n - TAIL - 64 - KEY.len()], std::str::from_utf8(hash).map_err(|_| "bad hash")?))
}

/// The bytes a line's hash covers: the line without its `hash` field (closing brace restored).
fn hashed_bytes(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len() + 1);
    v.extend_from_slice(body);
    v.push(b'}');
    v
}

impl JsonlAuditSink {
    /// Opens (creating if needed) `path` for appending, continuing its hash chain.
    ///
    /// Errors: `io` when the file cannot be opened or read, or its directory does not exist.
    pub fn open(path: impl AsRef<Path>) -> crate::Result<Arc<Self>> {
        Self::open_with(path, AuditOptions::default())
    }

    /// Opens with options (rotation).
    pub fn open_with(path: impl AsRef<Path>, options: AuditOptions) -> crate::Result<Arc<Self>> {
        let path = path.as_ref().to_path_buf();
        let opening = |e: std::io::Error| crate::Error::io("cannot open the audit log", &path, &e);
        let mut chain = Chain::open(&path, options).map_err(opening)?;
        let (tx, rx) = mpsc::channel::<Msg>();
        let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let f2 = failures.clone();
        let p2 = path.clone();
        let thread = std::thread::Builder::new()
            .name("signoff-audit".into())
            .spawn(move || {
                let fail = |e: std::io::Error| {
                    f2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    crate::report!("signoff: audit log {} write failed: {e}", p2.display());
                };
                let mut retry = RETRY_FIRST;
                loop {
                    // Records kept after a failed write are tried again after a while, even
                    // with nothing new to write.
                    let first = match chain.unwritten.is_empty() {
                        true => rx.recv().ok(),
                        false => match rx.recv_timeout(retry) {
                            Ok(m) => Some(m),
                            Err(mpsc::RecvTimeoutError::Timeout) => Some(Msg::Retry),
                            Err(mpsc::RecvTimeoutError::Disconnected) => None,
                        },
                    };
                    let Some(first) = first else { break };
                    let mut next = Some(first);
                    let mut waiters = Vec::new();
                    // Chain everything queued, then write it at once.
                    while let Some(msg) = next.take() {
                        match msg {
                            Msg::Record(r) => chain.write(r),
                            Msg::Flush(done) => waiters.push(done),
                            Msg::Anchor(a) => {
                                if let Err(e) = chain.set_anchor(a) {
                                    fail(e);
                                }
                            }
                            Msg::Retry => {}
                        }
                        next = rx.try_recv().ok();
                    }
                    match chain.write_out() {
                        Ok(()) => retry = RETRY_FIRST,
                        Err(e) => {
                            fail(e);
                            retry = (retry * 2).min(RETRY_MAX);
                        }
                    }
                    if let Err(e) = chain.save_anchor() {
                        fail(e);
                    }
                    if !waiters.is_empty() {
                        if let Err(e) = chain.file.sync_data() {
                            fail(e);
                        }
                        for d in waiters {
                            let _ = d.send(());
                        }
                    }
                }
                // Closing: a last few tries for records a failing disk kept back.
                for _ in 0..3 {
                    match chain.write_out() {
                        Ok(()) => break,
                        Err(_) => std::thread::sleep(RETRY_FIRST),
                    }
                }
                if !chain.unwritten.is_empty() {
                    // The last place left for them: stderr, whole, one JSON record per line.
                    let n = chain.unwritten.len();
                    f2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    crate::report!(
                        "signoff: audit log {}: {n} record(s) could not be written before it closed; they follow, \
                         one JSON record per line",
                        p2.display()
                    );
                    for r in &chain.unwritten {
                        if let Ok(line) = serde_json::to_string(r) {
                            crate::report!("signoff-audit-unwritten: {line}");
                        }
                    }
                }
                let _ = chain.save_anchor();
            })
            .map_err(|e| crate::Error::io("cannot start the writer thread of the audit log", &path, &e))?;
        Ok(Arc::new(JsonlAuditSink {
            tx: Mutex::new(Some(tx)),
            anchor: Mutex::new(None),
            thread: Mutex::new(Some(thread)),
            failures,
            path,
        }))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many writes have failed.
    pub fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads a JSON Lines audit file back (one file; see [`verify_chain`] for rotated sets).
    ///
    /// Errors: `io` when it cannot be read, `malformed` for a line that is not an audit record.
    pub fn read(path: impl AsRef<Path>) -> crate::Result<Vec<AuditRecord>> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|e| crate::Error::io("cannot read the audit log", path, &e))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(n, l)| {
                serde_json::from_str(l).map_err(|e| {
                    crate::Error::Malformed(format!("{} line {}: not an audit record: {e}", path.display(), n + 1))
                })
            })
            .collect()
    }
}

impl AuditSink for JsonlAuditSink {
    fn record(&self, record: AuditRecord) {
        let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = guard.as_ref()
            && tx.send(Msg::Record(record)).is_err()
        {
            self.failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            crate::report!("signoff: audit writer for {} has stopped; a record was not written", self.path.display());
        }
    }

    fn set_anchor(&self, anchor: Arc<dyn AuditAnchor>) {
        *self.anchor.lock().unwrap_or_else(|e| e.into_inner()) = Some(anchor.clone());
        let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = guard.as_ref() {
            let _ = tx.send(Msg::Anchor(anchor));
        }
    }

    fn recent(&self, before: Option<u64>, limit: usize) -> Option<crate::Result<Vec<AuditRecord>>> {
        Some(read_recent(&self.path, before, limit))
    }

    fn verify(&self) -> Option<crate::Result<ChainReport>> {
        let anchor = self.anchor.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(match anchor {
            Some(a) => verify_chain_anchored(&self.path, a.as_ref()),
            None => verify_chain(&self.path),
        })
    }

    fn flush(&self) {
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        let sent = {
            let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            guard.as_ref().is_some_and(|tx| tx.send(Msg::Flush(done_tx)).is_ok())
        };
        if sent {
            let _ = done_rx.recv();
        }
    }
}

impl Drop for JsonlAuditSink {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// What [`verify_chain`] found wrong first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChainProblemKind {
    /// The record's content no longer matches its hash, or a later record chained to a
    /// different version of it.
    Edited,
    /// Records are missing before this one (deleted lines, or a deleted rotated file).
    Missing,
    /// This record is out of order.
    Reordered,
    /// The line is not a chained audit record (unparseable, torn, or without a hash).
    Malformed,
    /// The log ends before the head its anchor recorded: records were cut from the end. Also
    /// reported at a record that says so: a gate that reopened the log found it cut (and
    /// continued it), so records before that one are gone.
    Truncated,
}

/// The first problem in an audit chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainProblem {
    /// What is wrong.
    pub kind: ChainProblemKind,
    /// The file.
    pub file: PathBuf,
    /// 1-based line number in `file`.
    pub line: usize,
    /// The record's `seq`, when readable.
    pub seq: Option<u64>,
    /// In words.
    pub message: String,
}

/// The result of [`verify_chain`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainReport {
    /// The files checked, oldest first.
    pub files: Vec<PathBuf>,
    /// Records checked (up to the first problem).
    pub records: u64,
    /// The last good record's hash (the chain head).
    pub head: String,
    /// The first problem, if any.
    pub problem: Option<ChainProblem>,
    /// The head the log was checked against ([`verify_chain_anchored`]); `None` when no anchor
    /// was checked (plain [`verify_chain`], or an anchor that has recorded nothing), in which
    /// case records cut from the end would not show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<ChainHead>,
}

impl ChainReport {
    /// No problem found.
    pub fn is_intact(&self) -> bool {
        self.problem.is_none()
    }
}

/// Verifies a hash-chained audit log written by [`JsonlAuditSink`]: its rotated files
/// (`<path>.1`, `<path>.2`, ...) then `path`, as one chain. Reports the first edited, missing
/// or reordered record.
///
/// ```
/// use signoff::audit::{verify_chain, AuditKind, AuditRecord, AuditSink, JsonlAuditSink};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("audit.jsonl");
/// let sink = JsonlAuditSink::open(&path).unwrap();
/// for _ in 0..3 { sink.record(AuditRecord::new(AuditKind::Notice)); }
/// sink.flush();
/// let report = verify_chain(&path).unwrap();
/// assert!(report.is_intact());
/// assert_eq!(report.records, 3);
/// ```
///
/// A chain cut after any record is still a valid chain: see [`verify_chain_anchored`] for the
/// check that catches records removed from the end.
///
/// Errors: `io` when the log cannot be read (a problem *in* the log is a finding of the report,
/// not an error).
pub fn verify_chain(path: impl AsRef<Path>) -> crate::Result<ChainReport> {
    let path = path.as_ref();
    verify(path, None).map_err(|e| crate::Error::io("cannot read the audit log", path, &e))
}

/// [`verify_chain`], and then against the head an [`AuditAnchor`] recorded: a log that ends
/// before the anchored record is [`Truncated`](ChainProblemKind::Truncated); one whose record at
/// the anchored `seq` has another hash is [`Edited`](ChainProblemKind::Edited). A log that goes
/// on past the anchored head is fine (the anchor is saved after each batch of records, so it
/// may lag the log by the records written since).
pub fn verify_chain_anchored(path: impl AsRef<Path>, anchor: &dyn AuditAnchor) -> crate::Result<ChainReport> {
    let head = anchor.load_head()?;
    verify_chain_against(path, head.as_ref())
}

/// [`verify_chain_anchored`] with the anchored head already read (`None`: no anchor recorded),
/// for callers that report an unreadable anchor in their own terms before reading the log.
pub fn verify_chain_against(path: impl AsRef<Path>, head: Option<&ChainHead>) -> crate::Result<ChainReport> {
    let path = path.as_ref();
    verify(path, head).map_err(|e| crate::Error::io("cannot read the audit log", path, &e))
}

/// What every binding and the command line run to verify a log: [`verify_chain`], or with
/// `store` (the SQLite database of the gate that wrote the log) [`verify_chain_anchored`] against
/// the head anchored there. A database that is not there is an `io` error (`ENOENT`, with its
/// path), never a silent unanchored check; one that cannot be read (a running gate holds it
/// locked, or it is not signoff's) is a `store` error that says to verify after the gate closed.
pub fn verify_chain_with_store(path: impl AsRef<Path>, store: Option<&Path>) -> crate::Result<ChainReport> {
    let Some(db) = store else {
        return verify_chain(path);
    };
    if !db.exists() {
        return Err(crate::Error::io("no such database", db, &std::io::ErrorKind::NotFound.into()));
    }
    let head = crate::SqliteAnchorReader::new(db).load_head().map_err(|e| match e {
        crate::Error::Store(detail) if detail.contains("locked") || detail.contains("busy") => {
            crate::Error::Store(format!(
                "cannot read the audit anchor in {}: {detail} (verify after the gate using it has closed: a \
                 running gate holds its database locked)",
                db.display()
            ))
        }
        crate::Error::Store(detail) => {
            crate::Error::Store(format!("cannot read the audit anchor in {}: {detail}", db.display()))
        }
        e => e,
    })?;
    verify_chain_against(path, head.as_ref())
}

fn verify(path: &Path, anchored: Option<&ChainHead>) -> std::io::Result<ChainReport> {
    let mut files: Vec<PathBuf> = rotated_files(path)?.into_iter().map(|(_, p)| p).collect();
    match std::fs::metadata(path) {
        Ok(_) => files.push(path.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        // A symbolic link loop, a permission: said as such, not as "not found".
        Err(e) => return Err(e),
    }
    // The caller's message names `path` already: only another file (a rotated one) is named here.
    if files.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "not found"));
    }
    // A pipe or a device would be read for ever.
    for f in &files {
        if !std::fs::metadata(f)?.is_file() {
            let what = if f == path {
                "not a regular file".to_owned()
            } else {
                format!("{} is not a regular file", f.display())
            };
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, what));
        }
    }
    verify_lines(files.clone(), &FileLines { files: &files, max: MAX_RECORD_LINE }, anchored)
}

/// The newest records of a JSON Lines audit log, its rotated files (`<path>.<n>`) included,
/// newest first: at most `limit`, and with `before` only the records whose `seq` is below it (the
/// next page after a page whose last record had `seq` `before`). The files are read backward
/// from their end, so a page costs about the size of its records, however long the log. The
/// records are not verified (see [`verify_chain`]); an unfinished last line (a record being
/// written by another process) is left out.
///
/// Errors: `io` when the log cannot be read (or does not exist), `malformed` for a line that is
/// not an audit record or is longer than [`MAX_RECENT_LINE`] bytes.
pub fn read_recent(path: impl AsRef<Path>, before: Option<u64>, limit: usize) -> crate::Result<Vec<AuditRecord>> {
    let path = path.as_ref();
    let reading = |p: &Path, e: std::io::Error| crate::Error::io("cannot read the audit log", p, &e);
    let mut files: Vec<PathBuf> = Vec::new();
    match std::fs::metadata(path) {
        Ok(_) => files.push(path.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(reading(path, e)),
    }
    files.extend(rotated_files(path).map_err(|e| reading(path, e))?.into_iter().rev().map(|(_, p)| p));
    if files.is_empty() {
        return Err(reading(path, std::io::Error::new(std::io::ErrorKind::NotFound, "not found")));
    }
    let mut out = Vec::new();
    for (i, file) in files.iter().enumerate() {
        if out.len() >= limit {
            break;
        }
        let mut f = std::fs::File::open(file).map_err(|e| reading(file, e))?;
        if !f.metadata().map_err(|e| reading(file, e))?.is_file() {
            return Err(reading(file, std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")));
        }
        let mut failed = None;
        lines_backward(&mut f, MAX_RECENT_LINE, &mut |line, terminated| {
            if line.iter().all(u8::is_ascii_whitespace) {
                return true;
            }
            let record: AuditRecord = match serde_json::from_slice(line) {
                Ok(r) => r,
                // The active file's unfinished last line: a record still being written.
                Err(_) if !terminated && i == 0 => return true,
                Err(e) => {
                    failed = Some(crate::Error::Malformed(format!("{}: not an audit record: {e}", file.display())));
                    return false;
                }
            };
            if before.is_some_and(|b| record.seq.is_some_and(|s| s >= b)) {
                return true;
            }
            out.push(record);
            out.len() < limit
        })
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => crate::Error::Malformed(format!("{}: {e}", file.display())),
            _ => reading(file, e),
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(out)
}

/// The longest line [`read_recent`] reads as a record.
pub const MAX_RECENT_LINE: usize = 16 * 1024 * 1024;

/// Calls `f` with each line of `file` from the last to the first (without its newline, and with
/// whether a newline ended it), until `f` returns `false`. A line longer than `max` bytes is an
/// `InvalidData` error.
fn lines_backward(file: &mut std::fs::File, max: usize, f: &mut dyn FnMut(&[u8], bool) -> bool) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    const CHUNK: u64 = 64 * 1024;
    let mut pos = file.seek(SeekFrom::End(0))?;
    // The bytes after the last newline found so far: the end of a line whose start is not read yet.
    let mut tail: Vec<u8> = Vec::new();
    let mut first = true;
    let too_long =
        || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a record is longer than {max} bytes"));
    while pos > 0 {
        let start = pos.saturating_sub(CHUNK);
        let mut chunk = vec![0u8; (pos - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk)?;
        pos = start;
        chunk.extend_from_slice(&tail);
        let mut end = chunk.len();
        while let Some(nl) = chunk[..end].iter().rposition(|&b| b == b'\n') {
            let line = &chunk[nl + 1..end];
            // The segment after the file's last newline is an unterminated line (empty when the
            // file ends with a newline).
            let terminated = !std::mem::take(&mut first);
            if line.len() > max {
                return Err(too_long());
            }
            if !f(line, terminated) {
                return Ok(());
            }
            end = nl;
        }
        if end > max {
            return Err(too_long());
        }
        chunk.truncate(end);
        tail = chunk;
    }
    if !tail.is_empty() {
        f(&tail, !first);
    }
    Ok(())
}

/// The longest line [`verify_chain`] reads as a record: a longer one is reported malformed
/// without being held in memory (a log is read line by line, twice, never whole).
const MAX_RECORD_LINE: usize = 256 * 1024 * 1024;

/// The records of a chain, in chain order, as (index into its files, line number, bytes); read
/// as many times as the check needs.
pub(crate) trait ChainLines {
    /// Calls `f` with each non-blank line, in order, until it returns `false`.
    fn each(&self, f: &mut dyn FnMut(usize, usize, &[u8]) -> bool) -> std::io::Result<()>;
}

impl ChainLines for Vec<(usize, usize, Vec<u8>)> {
    fn each(&self, f: &mut dyn FnMut(usize, usize, &[u8]) -> bool) -> std::io::Result<()> {
        for (fi, line, bytes) in self {
            if !f(*fi, *line, bytes) {
                break;
            }
        }
        Ok(())
    }
}

/// A log's files, read line by line, at most `max` bytes of a line kept ([`MAX_RECORD_LINE`]).
struct FileLines<'a> {
    files: &'a [PathBuf],
    max: usize,
}

impl ChainLines for FileLines<'_> {
    fn each(&self, f: &mut dyn FnMut(usize, usize, &[u8]) -> bool) -> std::io::Result<()> {
        use std::io::BufRead;
        for (fi, path) in self.files.iter().enumerate() {
            let mut r = std::io::BufReader::with_capacity(64 * 1024, std::fs::File::open(path)?);
            let mut buf = Vec::new();
            let mut n = 0;
            loop {
                buf.clear();
                let read = std::io::Read::take(&mut r, self.max as u64 + 1).read_until(b'\n', &mut buf)?;
                if read == 0 {
                    break;
                }
                n += 1;
                if buf.last() != Some(&b'\n') && buf.len() > self.max {
                    // Too long to be a record: the rest of the line is skipped, not kept.
                    loop {
                        let chunk = r.fill_buf()?;
                        if chunk.is_empty() {
                            break;
                        }
                        match chunk.iter().position(|&b| b == b'\n') {
                            Some(i) => {
                                r.consume(i + 1);
                                break;
                            }
                            None => {
                                let len = chunk.len();
                                r.consume(len);
                            }
                        }
                    }
                    buf.clear();
                    buf.extend_from_slice(b"(a line too long to be a record)");
                }
                let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
                if !line.iter().all(u8::is_ascii_whitespace) && !f(fi, n, line) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// [`verify_lines`] of records already in memory (rows of the PostgreSQL audit table).
#[cfg(feature = "postgres")]
pub(crate) fn verify_in_memory(files: Vec<PathBuf>, lines: &Vec<(usize, usize, Vec<u8>)>) -> ChainReport {
    match verify_lines(files.clone(), lines, None) {
        Ok(report) => report,
        // Reading from memory does not fail; said as a problem all the same, never intact.
        Err(e) => ChainReport {
            problem: Some(ChainProblem {
                kind: ChainProblemKind::Malformed,
                file: files.first().cloned().unwrap_or_default(),
                line: 1,
                seq: None,
                message: format!("could not be read: {e}"),
            }),
            files,
            records: 0,
            head: GENESIS_HASH.to_owned(),
            anchor: None,
        },
    }
}

/// One line read as a chained record: the record, its recorded hash, whether the hash matches.
fn chained_record(line: &[u8]) -> Option<(AuditRecord, String, bool)> {
    let (body, hash) = split_hash(line).ok()?;
    let hashed = hashed_bytes(body);
    // Strict: a repeated key would make the record say two things.
    let v = crate::json::from_slice(&hashed, "audit record").ok()?;
    let rec: AuditRecord = serde_json::from_value(v).ok()?;
    let ok = crate::display::sha256_hex(&hashed) == hash;
    Some((rec, hash.to_owned(), ok))
}

/// Checks chained records as one chain: `lines` gives (index into `files`, line number, the
/// record's bytes), in chain order; problems are reported at those files and line numbers. The
/// file verifier and the PostgreSQL table's verifier (a row's `seq` as its line) share it. Two
/// passes: every `seq` present first (to tell a record that moved from one that is gone), then
/// the chain; neither keeps the records.
pub(crate) fn verify_lines(
    files: Vec<PathBuf>,
    lines: &dyn ChainLines,
    anchored: Option<&ChainHead>,
) -> std::io::Result<ChainReport> {
    let mut present: std::collections::HashSet<u64> = std::collections::HashSet::new();
    lines.each(&mut |_, _, l| {
        if let Some(seq) = chained_record(l).and_then(|(r, _, _)| r.seq) {
            present.insert(seq);
        }
        true
    })?;
    let mut report = ChainReport {
        files: files.clone(),
        records: 0,
        head: GENESIS_HASH.to_owned(),
        problem: None,
        anchor: anchored.cloned(),
    };
    // Where the record before was, and where the last line is.
    let mut prev_at: Option<(usize, usize)> = None;
    let mut last_at: Option<(usize, usize)> = None;
    let mut truncation: Option<ChainProblem> = None;
    let mut i: u64 = 0;
    lines.each(&mut |fi, line, l| {
        last_at = Some((fi, line));
        // Every record before this one checked out, so this must be record `i`.
        let expected_seq = i;
        i += 1;
        let problem = |kind, seq, message: String| ChainProblem { kind, file: files[fi].clone(), line, seq, message };
        let Some((rec, hash, hash_ok)) = chained_record(l) else {
            report.problem = Some(problem(ChainProblemKind::Malformed, None, "not a chained audit record".into()));
            return false;
        };
        let Some(seq) = rec.seq else {
            report.problem = Some(problem(ChainProblemKind::Malformed, None, "the record has no seq".into()));
            return false;
        };
        if !hash_ok {
            report.problem =
                Some(problem(ChainProblemKind::Edited, Some(seq), format!("record {seq} does not match its hash")));
            return false;
        }
        if seq != expected_seq {
            let (kind, message) = if seq < expected_seq || present.contains(&expected_seq) {
                (
                    ChainProblemKind::Reordered,
                    format!("record {seq} is out of order (record {expected_seq} expected here)"),
                )
            } else {
                (
                    ChainProblemKind::Missing,
                    format!("records {expected_seq}..{} are missing before record {seq}", seq - 1),
                )
            };
            report.problem = Some(problem(kind, Some(seq), message));
            return false;
        }
        if rec.prev_hash.as_deref() != Some(report.head.as_str()) {
            // The previous record was edited and re-hashed: this one chained to its old version.
            let (pfi, pline) = prev_at.unwrap_or((fi, line));
            report.problem = Some(ChainProblem {
                kind: ChainProblemKind::Edited,
                file: files[pfi].clone(),
                line: pline,
                seq: seq.checked_sub(1),
                message: format!("record {seq} chains to a different version of the record before it"),
            });
            return false;
        }
        if let Some(a) = anchored
            && a.seq == seq
            && a.hash != hash
        {
            report.problem = Some(problem(
                ChainProblemKind::Edited,
                Some(seq),
                format!("record {seq} is not the record the anchor holds (hash {})", a.hash),
            ));
            return false;
        }
        report.head = hash;
        report.records += 1;
        prev_at = Some((fi, line));
        // A writer found this log cut and said so here before going on: the chain from here on
        // is whole, but records before this one are gone for good. Reported unless something
        // worse is found after it (the rest is checked all the same).
        if truncation.is_none() && rec.kind == AuditKind::Notice && rec.decision.as_deref() == Some(TRUNCATED_NOTICE) {
            let found = rec.reason.as_deref().unwrap_or("no detail");
            truncation = Some(problem(
                ChainProblemKind::Truncated,
                Some(seq),
                format!("record {seq} says the log was found cut: {found}"),
            ));
        }
        true
    })?;
    if report.problem.is_some() {
        return Ok(report);
    }
    if let Some(a) = anchored
        && report.records <= a.seq
    {
        let (file, line) = match last_at {
            Some((fi, line)) => (files[fi].clone(), line + 1),
            None => (files.last().cloned().unwrap_or_default(), 1),
        };
        let ends = match report.records {
            0 => "the log has no records".to_owned(),
            n => format!("the log ends at record {}", n - 1),
        };
        report.problem = Some(ChainProblem {
            kind: ChainProblemKind::Truncated,
            file,
            line,
            seq: Some(report.records),
            message: format!(
                "records {}..={} were cut from the end: {ends}, but the anchor holds record {}",
                report.records, a.seq, a.seq
            ),
        });
    }
    if report.problem.is_none() {
        report.problem = truncation;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest records first, across rotated files, paged by `seq`, without an unfinished
    /// last line; a longer log than one read chunk; a line that is no record is `malformed`.
    #[test]
    fn recent_records_are_read_backward_across_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let sink = JsonlAuditSink::open_with(&path, AuditOptions { rotate_bytes: Some(100_000) }).unwrap();
        for i in 0..600u64 {
            sink.record(AuditRecord::notice("n", format!("note {i} {}", "x".repeat(100))));
        }
        sink.flush();
        assert!(!rotated_files(&path).unwrap().is_empty(), "the log rotated");
        let seqs = |v: &[AuditRecord]| v.iter().map(|r| r.seq.unwrap()).collect::<Vec<_>>();
        let all = read_recent(&path, None, 10_000).unwrap();
        assert_eq!(seqs(&all), (0..600).rev().collect::<Vec<_>>());
        assert!(all[0].reason.as_deref().unwrap().starts_with("note 599 "));
        assert_eq!(seqs(&read_recent(&path, None, 3).unwrap()), [599, 598, 597]);
        assert_eq!(seqs(&read_recent(&path, Some(597), 2).unwrap()), [596, 595]);
        assert_eq!(seqs(&read_recent(&path, Some(1), 5).unwrap()), [0]);
        assert_eq!(seqs(&sink.recent(Some(10), 1).unwrap().unwrap()), [9]);
        drop(sink);
        // A record still being written by another process is left out.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"at_ms\":1,\"ki").unwrap();
        assert_eq!(seqs(&read_recent(&path, None, 1).unwrap()), [599]);
        // A line in the middle that is not a record is an error, not skipped.
        f.write_all(b"\nnot a record\n").unwrap();
        assert_eq!(read_recent(&path, None, 1).unwrap_err().kind(), ErrorKind::Malformed);
        let memory = MemoryAuditSink::new();
        for d in ["a", "b", "c"] {
            memory.record(AuditRecord::notice(d, "m"));
        }
        let got = memory.recent(Some(2), 5).unwrap().unwrap();
        assert_eq!(got.iter().map(|r| r.decision.as_deref().unwrap()).collect::<Vec<_>>(), ["b", "a"]);
    }

    /// A log that is not there, or is no regular file, is named once in the message.
    #[test]
    fn a_missing_or_irregular_log_names_its_path_once() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone.jsonl");
        let e = verify_chain(&missing).unwrap_err();
        let text = e.to_string();
        assert_eq!(text.matches(&*missing.display().to_string()).count(), 1, "{text}");
        assert!(text.contains("not found"), "{text}");
        assert_eq!(e.path(), Some(missing.as_path()));
        let e = verify_chain(dir.path()).unwrap_err().to_string();
        assert_eq!(e.matches(&*dir.path().display().to_string()).count(), 1, "{e}");
        assert!(e.contains("not a regular file"), "{e}");
    }

    /// A line longer than the cap is handed on as a short stand-in (a malformed record), its
    /// bytes skipped, not kept; the lines after it keep their numbers.
    #[test]
    fn a_line_past_the_cap_is_skipped_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        std::fs::write(&path, format!("short\n{}\n\nlast", "x".repeat(100))).unwrap();
        let files = [path];
        let mut seen = Vec::new();
        FileLines { files: &files, max: 16 }
            .each(&mut |fi, n, l| {
                seen.push((fi, n, String::from_utf8_lossy(l).into_owned()));
                true
            })
            .unwrap();
        let expected: Vec<(usize, usize, String)> =
            vec![(0, 1, "short".into()), (0, 2, "(a line too long to be a record)".into()), (0, 4, "last".into())];
        assert_eq!(seen, expected);
    }
}
