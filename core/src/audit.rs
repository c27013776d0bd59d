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
            decision: None,
            responder: None,
            reason: None,
            error_kind: None,
        }
    }
}

/// Where audit records go. `record` must not block for long: it is called on the gate's paths.
pub trait AuditSink: Send + Sync + 'static {
    /// Takes one record. Called synchronously on the gate's paths, so it must not block for long.
    fn record(&self, record: AuditRecord);
    /// Blocks until every record given so far is durable. The default does nothing.
    fn flush(&self) {}
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
}

#[allow(clippy::large_enum_variant)] // records are moved through the channel once; boxing would add an allocation
enum Msg {
    Record(AuditRecord),
    Flush(mpsc::SyncSender<()>),
}

/// An append-only JSON Lines file. Records are written by a dedicated thread, so the gate never
/// waits on the disk; [`flush`](AuditSink::flush) (also run on drop) waits until every record
/// handed over so far is written and synced. Write failures are counted and reported on stderr.
pub struct JsonlAuditSink {
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    failures: Arc<std::sync::atomic::AtomicU64>,
    path: PathBuf,
}

impl JsonlAuditSink {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Arc<Self>> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        let (tx, rx) = mpsc::channel::<Msg>();
        let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let f2 = failures.clone();
        let p2 = path.clone();
        let thread = std::thread::Builder::new().name("signoff-audit".into()).spawn(move || {
            let mut w = std::io::BufWriter::new(file);
            let fail = |e: std::io::Error| {
                f2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                eprintln!("signoff: audit log {} write failed: {e}", p2.display());
            };
            while let Ok(first) = rx.recv() {
                let mut next = Some(first);
                let mut waiters = Vec::new();
                // Write everything queued, then flush once.
                while let Some(msg) = next.take() {
                    match msg {
                        Msg::Record(r) => {
                            let res = serde_json::to_writer(&mut w, &r)
                                .map_err(std::io::Error::other)
                                .and_then(|_| w.write_all(b"\n"));
                            if let Err(e) = res {
                                fail(e);
                            }
                        }
                        Msg::Flush(done) => waiters.push(done),
                    }
                    next = rx.try_recv().ok();
                }
                if let Err(e) = w.flush() {
                    fail(e);
                }
                if !waiters.is_empty() {
                    if let Err(e) = w.get_ref().sync_data() {
                        fail(e);
                    }
                    for d in waiters {
                        let _ = d.send(());
                    }
                }
            }
            let _ = w.flush();
        })?;
        Ok(Arc::new(JsonlAuditSink {
            tx: Mutex::new(Some(tx)),
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

    /// Reads a JSON Lines audit file back.
    pub fn read(path: impl AsRef<Path>) -> std::io::Result<Vec<AuditRecord>> {
        let text = std::fs::read_to_string(path)?;
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
            .collect()
    }
}

impl AuditSink for JsonlAuditSink {
    fn record(&self, record: AuditRecord) {
        let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = guard.as_ref()
            && tx.send(Msg::Record(record)).is_err() {
                self.failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                eprintln!("signoff: audit writer for {} has stopped; a record was not written", self.path.display());
            }
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
