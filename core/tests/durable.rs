//! The durable store across real process deaths: a child process is killed (SIGKILL) between
//! approve and execute, another is restarted on the same database; nothing pending is lost,
//! nothing runs twice, the interruption is reported.
//!
//! The child is this same test binary, re-run with `SIGNOFF_DURABLE_CHILD` set (see
//! `child_process_entry`).

use serde_json::json;
use signoff::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Every execution appends one line to the side-effect file: the only witness that survives a kill.
fn side_effect(dir: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("side-effects")).unwrap();
    writeln!(f, "{line}").unwrap();
    f.sync_all().unwrap();
}

fn side_effects(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("side-effects")).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// The gate both processes build: same database, keys, tools and audit log.
fn build_gate(dir: &Path) -> Gate {
    let d1 = dir.to_path_buf();
    let d2 = dir.to_path_buf();
    let d3 = dir.to_path_buf();
    Gate::builder()
        .store(SqliteStore::open(dir.join("signoff.db")).unwrap())
        .tokens(TokenKeys::parse(KEYS).unwrap())
        .audit(JsonlAuditSink::open(dir.join("audit.jsonl")).unwrap())
        .deny_when_unobserved(false)
        .tool(
            Tool::builder("delete_file")
                .description("Deletes a file")
                .approval(ApprovalMode::Required)
                .executor(move |a| {
                    let d = d1.clone();
                    async move {
                        side_effect(&d, &format!("deleted {}", a["path"].as_str().unwrap()));
                        Ok(json!({"deleted": a["path"]}))
                    }
                })
                .build(),
        )
        .tool(
            // Starts, leaves its mark, and never finishes: the process is killed mid-execution.
            Tool::builder("slow_delete")
                .description("Deletes a file slowly")
                .approval(ApprovalMode::Required)
                .executor(move |a| {
                    let d = d2.clone();
                    async move {
                        side_effect(&d, &format!("started {}", a["path"].as_str().unwrap()));
                        std::future::pending::<()>().await;
                        Ok(json!(null))
                    }
                })
                .build(),
        )
        .tool(
            Tool::builder("quick_delete")
                .description("Deletes a file, if approved within a second")
                .approval(ApprovalMode::Required)
                .timeout(Duration::from_secs(1))
                .executor(move |a| {
                    let d = d3.clone();
                    async move {
                        side_effect(&d, &format!("deleted {}", a["path"].as_str().unwrap()));
                        Ok(json!({"deleted": a["path"]}))
                    }
                })
                .build(),
        )
        .build()
        .unwrap()
}

/// Child process body: makes four requests, approves two of them, and waits to be killed.
/// Not a test of its own (ignored): `run_child` runs it in a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the restart tests; run by them"]
async fn child_process_entry() {
    let Ok(dir) = std::env::var("SIGNOFF_DURABLE_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let gate = build_gate(&dir);
    assert!(gate.recover().unwrap().restored.is_empty());
    let calls = [
        ("keep", ToolCall::new("delete_file", json!({"path": "/keep"})).call_id("c-keep")),
        ("slow", ToolCall::new("slow_delete", json!({"path": "/slow"}))),
        ("abort", ToolCall::new("delete_file", json!({"path": "/abort"}))),
    ];
    for (name, call) in calls {
        let g = gate.clone();
        tokio::spawn(async move { g.execute(call).await });
        let req = loop {
            if let Some(r) =
                gate.pending().into_iter().find(|r| r.arguments.value()["path"] == json!(format!("/{name}")))
            {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let token = gate.issue_token(&req.id, "alice").unwrap();
        println!("CHILD {}", json!({"name": name, "id": req.id, "deadline_ms": req.deadline_ms, "token": token}));
    }
    // A request whose deadline passes while the process is down.
    let g = gate.clone();
    tokio::spawn(
        async move { g.confirm(ToolCall::new("quick_delete", json!({"path": "/short"})).session("s2")).await },
    );
    let short = loop {
        if let Some(r) = gate.pending().into_iter().find(|r| &*r.session_id == "s2") {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    println!("CHILD {}", json!({"name": "short", "id": short.id, "deadline_ms": short.deadline_ms}));

    let by_name =
        |n: &str| gate.pending().into_iter().find(|r| r.arguments.value()["path"] == json!(format!("/{n}"))).unwrap();
    // Approve `slow`: recorded as approved, then executing, then the tool starts and hangs.
    let slow = by_name("slow");
    let slow_token = gate.issue_token(&slow.id, "alice").unwrap();
    gate.respond_token(&slow_token, TokenResponse::approve("alice")).unwrap();
    while !side_effects(&dir).iter().any(|l| l == "started /slow") {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    println!("CHILD {}", json!({"name": "slow-token", "token": slow_token}));
    gate.flush_audit();
    println!("CHILD READY");
    // Approve `abort` and die on the spot: between approve and execute.
    if std::env::var("SIGNOFF_DURABLE_ABORT").is_ok() {
        let abort = by_name("abort");
        gate.respond(ConfirmationResponse::approve(&abort).with_responder("alice")).unwrap();
        std::process::abort();
    }
    std::future::pending::<()>().await;
}

struct Child {
    lines: Vec<serde_json::Value>,
}

impl Child {
    fn get(&self, name: &str) -> &serde_json::Value {
        self.lines.iter().find(|l| l["name"] == name).unwrap_or_else(|| panic!("child did not report {name}"))
    }
    fn id(&self, name: &str) -> uuid::Uuid {
        serde_json::from_value(self.get(name)["id"].clone()).unwrap()
    }
}

/// Runs the child until it is READY, then kills it (SIGKILL), or lets it abort itself.
fn run_child(dir: &Path, abort: bool) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_process_entry", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env("SIGNOFF_DURABLE_CHILD", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if abort {
        cmd.env("SIGNOFF_DURABLE_ABORT", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        // The harness's own "test ... " prefix may share the first line.
        let Some(at) = line.find("CHILD ") else { continue };
        let msg = &line[at + 6..];
        if msg == "READY" {
            break;
        }
        lines.push(serde_json::from_str(msg).unwrap());
    }
    if !abort {
        child.kill().unwrap(); // SIGKILL: no destructor, no flush, no goodbye
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child must die, not exit: {status:?}");
    Child { lines }
}

#[test]
fn killed_between_approve_and_execute_nothing_lost_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let child = run_child(dir, false);
    assert_eq!(side_effects(dir), ["started /slow"]);

    // Restart after the short request's deadline has passed.
    let short_deadline = child.get("short")["deadline_ms"].as_u64().unwrap();
    while signoff::event::now_ms() <= short_deadline + 20 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let gate = build_gate(dir);
        // Nothing is listed before recovery: recovered requests need their tools registered.
        assert!(gate.pending().is_empty());
        let report = gate.recover().unwrap();
        let ids = |v: &[Arc<ConfirmationRequest>]| v.iter().map(|r| r.id).collect::<Vec<_>>();
        let mut restored = ids(&report.restored);
        restored.sort();
        let mut expected = vec![child.id("keep"), child.id("abort")];
        expected.sort();
        assert_eq!(restored, expected, "every pending request is back");
        assert_eq!(ids(&report.timed_out), [child.id("short")], "its deadline passed while the process was down");
        assert_eq!(gate.record(&child.id("short")).unwrap().state, RecordState::TimedOut);
        assert_eq!(report.interrupted.len(), 1);
        assert_eq!(report.interrupted[0].request.id, child.id("slow"));
        assert_eq!(report.interrupted[0].state, RecordState::Executing);
        assert_eq!(report.interrupted[0].responder.as_deref(), Some("alice"));

        // Original deadlines, not new ones.
        let keep = gate.pending_request(&child.id("keep")).unwrap();
        assert_eq!(keep.deadline_ms, child.get("keep")["deadline_ms"].as_u64().unwrap());
        assert_eq!(gate.record(&child.id("slow")).unwrap().state, RecordState::Interrupted);

        // An approval given after the restart executes exactly once.
        let token = child.get("keep")["token"].as_str().unwrap().to_owned();
        gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
        let rec = wait_state(&gate, child.id("keep"), RecordState::Done).await;
        assert_eq!(rec.result.as_ref().unwrap()["output"], json!({"deleted": "/keep"}));
        assert_eq!(rec.result.as_ref().unwrap()["call_id"], json!("c-keep"));
        assert_eq!(kind(gate.respond_token(&token, TokenResponse::approve("alice"))), ErrorKind::AlreadyUsed);
        // The interrupted call's token was used before the crash.
        let slow_token = child.get("slow-token")["token"].as_str().unwrap().to_owned();
        assert_eq!(kind(gate.respond_token(&slow_token, TokenResponse::approve("alice"))), ErrorKind::AlreadyUsed);
        // Deny the rest so the second restart finds nothing pending.
        for r in gate.pending() {
            gate.respond(ConfirmationResponse::deny(&r, None).with_responder("alice")).unwrap();
        }
        gate.close();
    });

    // Restart again: nothing re-runs, the chain of the audit log is intact across three processes.
    rt.block_on(async {
        let gate = build_gate(dir);
        let report = gate.recover().unwrap();
        assert!(
            report.restored.is_empty() && report.interrupted.is_empty() && report.timed_out.is_empty(),
            "{report:?}"
        );
        gate.close();
    });
    assert_eq!(side_effects(dir), ["started /slow", "deleted /keep"], "each tool ran at most once");
    let audit = verify_chain(dir.join("audit.jsonl")).unwrap();
    assert!(audit.is_intact(), "{:?}", audit.problem);
    let records: Vec<AuditRecord> = JsonlAuditSink::read(dir.join("audit.jsonl")).unwrap();
    assert!(records.iter().any(|r| r.kind == AuditKind::Execution
        && r.decision.as_deref() == Some("interrupted")
        && r.request_id == Some(child.id("slow"))));
}

#[test]
fn aborted_right_after_an_approval_is_reported_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let child = run_child(dir, true);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let gate = build_gate(dir);
        let report = gate.recover().unwrap();
        let abort = child.id("abort");
        let ran_before_abort = side_effects(dir).iter().any(|l| l == "deleted /abort");
        match report.interrupted.iter().find(|r| r.request.id == abort) {
            // The approval was recorded; the tool may have started (executing) or not (approved).
            Some(r) => assert!(matches!(r.state, RecordState::Approved | RecordState::Executing)),
            // Or it finished before the abort, and is done.
            None => {
                assert!(ran_before_abort, "{report:?}");
                assert_eq!(gate.record(&abort).unwrap().state, RecordState::Done);
            }
        }
        assert!(!report.restored.iter().any(|r| r.id == abort), "an approved call is never waiting again");
        gate.close();
    });
    let runs = side_effects(dir).iter().filter(|l| *l == "deleted /abort").count();
    assert!(runs <= 1);
    // And a second restart changes nothing.
    rt.block_on(async {
        let gate = build_gate(dir);
        gate.recover().unwrap();
        gate.close();
    });
    assert_eq!(side_effects(dir).iter().filter(|l| *l == "deleted /abort").count(), runs);
}

#[test]
fn a_deadline_that_passed_while_down_resolves_as_timed_out_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let id = rt.block_on(async {
        let gate = simple_gate(Gate::builder().default_timeout(Duration::from_millis(50)), &dir.join("signoff.db"));
        let fut = gate.confirm(ToolCall::new("delete_file", json!({"path": "/x"})));
        let mut fut = Box::pin(fut);
        poll_until_listed(&gate, fut.as_mut(), 1);
        let id = gate.pending()[0].id;
        // Simulate a crash: the future is leaked, not dropped (dropping would cancel it).
        std::mem::forget(fut);
        id
    });
    std::thread::sleep(Duration::from_millis(80));
    rt.block_on(async {
        let gate = simple_gate(Gate::builder(), &dir.join("signoff.db"));
        let report = gate.recover().unwrap();
        assert_eq!(report.timed_out.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);
        assert_eq!(gate.record(&id).unwrap().state, RecordState::TimedOut);
        assert!(matches!(
            gate.respond(ConfirmationResponse::by_id(id, ResponseDecision::Approve)).unwrap_err(),
            Error::Expired(_)
        ));
        // recover runs once, and never after the first request.
        assert_eq!(gate.recover().unwrap_err().kind(), ErrorKind::Config);
    });
}

#[test]
fn recovery_refuses_what_it_cannot_run_as_shown() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ids = rt.block_on(async {
        let gone = Tool::builder("gone_tool")
            .description("g")
            .approval(ApprovalMode::Required)
            .executor(|_| async { Ok(json!(1)) })
            .build();
        let gate = simple_gate(Gate::builder().tool(gone), &dir.join("signoff.db"));
        let mut ids = Vec::new();
        for call in [ToolCall::new("delete_file", json!({"path": "/tampered"})), ToolCall::new("gone_tool", json!({}))]
        {
            let listed = gate.pending_count() + 1;
            let mut fut = Box::pin(gate.confirm(call));
            poll_until_listed(&gate, fut.as_mut(), listed);
            std::mem::forget(fut);
        }
        for r in gate.pending() {
            ids.push(r.id);
        }
        ids
    });
    // Someone edits the stored arguments behind the gate's back.
    let conn = rusqlite::Connection::open(dir.join("signoff.db")).unwrap();
    conn.execute(
        "UPDATE signoff_requests SET request = replace(request, '/tampered', '/etc/shadow') WHERE request LIKE '%/tampered%'",
        [],
    )
    .unwrap();
    drop(conn);
    rt.block_on(async {
        let gate = simple_gate(Gate::builder(), &dir.join("signoff.db"));
        let report = gate.recover().unwrap();
        assert!(report.restored.is_empty());
        let mut reasons: Vec<String> = report.not_restored.iter().map(|n| n.reason.clone()).collect();
        reasons.sort();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons.iter().any(|r| r.contains("digest")), "{reasons:?}");
        assert!(reasons.iter().any(|r| r.contains("gone_tool")), "{reasons:?}");
        for id in &ids {
            assert_eq!(gate.record(id).unwrap().state, RecordState::Cancelled);
        }
    });
}

/// A durable gate on `db` with a trivial `delete_file` tool (start from `b`).
fn simple_gate(b: GateBuilder, db: &Path) -> Gate {
    b.store(SqliteStore::open(db).unwrap())
        .deny_when_unobserved(false)
        .tool(Tool::builder("delete_file").description("d").executor(|_| async { Ok(json!(1)) }).build())
        .build()
        .unwrap()
}

/// The newest pending request, once there is one.
async fn some_pending(gate: &Gate) -> Arc<ConfirmationRequest> {
    loop {
        if let Some(r) = gate.pending().pop() {
            return r;
        }
        tokio::task::yield_now().await;
    }
}

/// Polls a confirmation until its request is stored and listed (the store writes it on a thread
/// of its own), `listed` requests in all.
fn poll_until_listed<F: std::future::Future>(gate: &Gate, mut f: std::pin::Pin<&mut F>, listed: usize) {
    let start = Instant::now();
    while gate.pending_count() < listed {
        assert!(futures_poll_once(f.as_mut()).is_none(), "resolved before it was listed");
        assert!(start.elapsed() < Duration::from_secs(5), "never listed");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Once more: the stored request is published.
    assert!(futures_poll_once(f.as_mut()).is_none());
}

fn futures_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match f.poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

async fn wait_state(gate: &Gate, id: uuid::Uuid, state: RecordState) -> StoredRecord {
    let start = Instant::now();
    loop {
        if let Some(r) = gate.record(&id)
            && r.state == state
        {
            return r;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{id} never reached {state:?}: {:?}", gate.record(&id));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn kind<T: std::fmt::Debug>(r: Result<T>) -> ErrorKind {
    r.unwrap_err().kind()
}

#[test]
fn one_gate_per_database_until_it_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("signoff.db");
    let first = Gate::builder().store(SqliteStore::open(&db).unwrap()).build().unwrap();
    // A second user of the same file could recover, and run, the same requests: refused.
    let err = SqliteStore::open(&db).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store);
    assert!(err.to_string().contains("in use"), "{err}");
    // Closing the gate releases the database even while clones of the gate are alive.
    let clone = first.clone();
    first.close();
    let second = SqliteStore::open(&db).unwrap();
    drop(second);
    drop(clone);
}

/// A store that refuses to record one state: the gate must fail safe.
struct Refusing {
    inner: MemoryPendingStore,
    refuse: RecordState,
}

impl PendingStore for Refusing {
    fn insert(&self, r: Arc<ConfirmationRequest>) -> Result<()> {
        self.inner.insert(r)
    }
    fn remove(&self, id: &uuid::Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.remove(id)
    }
    fn get(&self, id: &uuid::Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.get(id)
    }
    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.inner.list()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn transition(&self, _: &uuid::Uuid, change: StateChange<'_>) -> Result<()> {
        if change.state == self.refuse { Err(Error::Store("disk full".into())) } else { Ok(()) }
    }
}

#[test]
fn a_state_that_cannot_be_recorded_never_runs_the_tool() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for refuse in [RecordState::Approved, RecordState::Executing] {
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = runs.clone();
        let gate = Gate::builder()
            .store(Arc::new(Refusing { inner: MemoryPendingStore::new(), refuse }))
            .deny_when_unobserved(false)
            .tool(
                Tool::builder("delete_file")
                    .description("d")
                    .executor(move |_| {
                        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        async { Ok(json!(1)) }
                    })
                    .build(),
            )
            .build()
            .unwrap();
        let result = rt.block_on(async {
            let g = gate.clone();
            let task =
                tokio::spawn(async move { g.execute(ToolCall::new("delete_file", json!({"path": "/x"}))).await });
            let req = some_pending(&gate).await;
            let answer = gate.respond(ConfirmationResponse::approve(&req).with_responder("alice"));
            if refuse == RecordState::Approved {
                assert_eq!(
                    answer.unwrap_err().kind(),
                    ErrorKind::Store,
                    "an approval that was not recorded does not count"
                );
            }
            task.await.unwrap()
        });
        assert!(!result.status.ran(), "{refuse:?}: {result:?}");
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0, "{refuse:?}");
    }
}

#[test]
fn an_approval_handed_to_a_confirm_caller_is_released_not_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("signoff.db");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let open = || simple_gate(Gate::builder(), &db);
    let id = rt.block_on(async {
        let gate = open();
        gate.recover().unwrap();
        let g = gate.clone();
        let task = tokio::spawn(async move { g.confirm(ToolCall::new("delete_file", json!({"path": "/x"}))).await });
        let req = some_pending(&gate).await;
        gate.respond(ConfirmationResponse::approve(&req).with_responder("alice")).unwrap();
        assert!(task.await.unwrap().unwrap().is_approved());
        let rec = gate.record(&req.id).unwrap();
        assert_eq!((rec.state, rec.responder.as_deref()), (RecordState::Released, Some("alice")));
        gate.close();
        req.id
    });
    rt.block_on(async {
        let gate = open();
        let report = gate.recover().unwrap();
        assert!(report.interrupted.is_empty(), "{report:?}");
        assert_eq!(gate.record(&id).unwrap().state, RecordState::Released);
    });
}

/// Notes on which thread the gate recorded each answer (its `response` audit record is
/// written where the answer is made, right after the store recorded it).
#[derive(Default)]
struct AnswerThreads(std::sync::Mutex<Vec<std::thread::ThreadId>>);

impl AuditSink for AnswerThreads {
    fn record(&self, record: AuditRecord) {
        if record.kind == AuditKind::Response {
            self.0.lock().unwrap().push(std::thread::current().id());
        }
    }
}

/// A gate from `b` with a `delete_file` tool, noting where answers are recorded in `threads`.
fn answering_gate(b: GateBuilder, threads: &Arc<AnswerThreads>) -> Gate {
    b.audit(threads.clone())
        .deny_when_unobserved(false)
        .tool(Tool::builder("delete_file").description("d").executor(|_| async { Ok(json!("deleted")) }).build())
        .build()
        .unwrap()
}

#[test]
fn respond_async_records_a_durable_answer_off_the_callers_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with(dir.path().join("s.db"), SqliteOptions { synchronous_full: true }).unwrap();
    let threads = Arc::new(AnswerThreads::default());
    let gate = answering_gate(Gate::builder().store(store), &threads);
    // One thread only: if the answer were committed on it, nothing else could run meanwhile.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let caller = std::thread::current().id();
        let call = tokio::spawn({
            let g = gate.clone();
            async move { g.execute(ToolCall::new("delete_file", json!({"path": "/tmp/a"}))).await }
        });
        let req = some_pending(&gate).await;
        // A response that does not match is refused with the same typed error as `respond`.
        let mut wrong = ConfirmationResponse::approve(&req);
        wrong.arguments_digest = Some("sha256:0".into());
        assert_eq!(gate.respond_async(wrong).await.unwrap_err().kind(), ErrorKind::Mismatch);
        let outcome = gate.respond_async(ConfirmationResponse::approve(&req).with_responder("alice")).await;
        assert_eq!(outcome.unwrap(), Outcome::Approved);
        let r = call.await.unwrap();
        assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
        assert_eq!(gate.record(&req.id).unwrap().state, RecordState::Done);
        // A second answer is refused as `respond` refuses it.
        let again = gate.respond_async(ConfirmationResponse::deny(&req, None)).await;
        assert_eq!(again.unwrap_err().kind(), ErrorKind::AlreadyResolved);
        let recorded = threads.0.lock().unwrap().clone();
        assert_eq!(recorded.len(), 1, "one answer recorded");
        assert_ne!(recorded[0], caller, "the durable answer was committed on the caller's thread");
    });
    // Outside a tokio runtime it answers on a thread of its own.
    let agent = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let call = agent.spawn({
        let g = gate.clone();
        async move { g.confirm(ToolCall::new("delete_file", json!({"path": "/tmp/b"}))).await }
    });
    let req = agent.block_on(some_pending(&gate));
    assert!(tokio::runtime::Handle::try_current().is_err());
    let outcome = block_on_plain(gate.respond_async(ConfirmationResponse::deny(&req, Some("no".into()))));
    assert_eq!(outcome.unwrap(), Outcome::Denied);
    assert_eq!(agent.block_on(call).unwrap().unwrap().outcome(), Outcome::Denied);
    let recorded = threads.0.lock().unwrap().clone();
    assert_eq!(recorded.len(), 2);
    assert_ne!(recorded[1], std::thread::current().id());
}

#[test]
fn respond_async_with_the_in_memory_store_answers_at_once() {
    let threads = Arc::new(AnswerThreads::default());
    let gate = answering_gate(Gate::builder(), &threads);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let call = tokio::spawn({
            let g = gate.clone();
            async move { g.confirm(ToolCall::new("delete_file", json!({"path": "/tmp/a"}))).await }
        });
        let req = some_pending(&gate).await;
        // Nothing to wait for: the first poll answers.
        let answered = futures_poll_once(std::pin::pin!(gate.respond_async(ConfirmationResponse::approve(&req))));
        assert_eq!(answered.expect("answered on the first poll").unwrap(), Outcome::Approved);
        assert!(call.await.unwrap().unwrap().is_approved());
        assert_eq!(threads.0.lock().unwrap().as_slice(), &[std::thread::current().id()]);
    });
}

/// Drives a future on this thread, with no runtime.
fn block_on_plain<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// SQLite with `synchronous_full`, noting which state changes were committed on the caller's
/// thread (`transition`) and which were handed to the store (`transition_async`).
struct Spy {
    inner: Arc<SqliteStore>,
    inline: std::sync::Mutex<Vec<RecordState>>,
    handed: std::sync::Mutex<Vec<RecordState>>,
    /// Set: the first approval's completion is dropped uncalled (and the thread noted).
    completed_on: Option<std::sync::Mutex<Vec<std::thread::ThreadId>>>,
}

impl PendingStore for Spy {
    fn insert(&self, r: Arc<ConfirmationRequest>) -> Result<()> {
        self.inner.insert(r)
    }
    fn insert_async(
        &self,
        r: Arc<ConfirmationRequest>,
        abandoned: Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<StoreFuture<()>> {
        self.inner.insert_async(r, abandoned)
    }
    fn remove(&self, id: &uuid::Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.remove(id)
    }
    fn get(&self, id: &uuid::Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.get(id)
    }
    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.inner.list()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn is_durable(&self) -> bool {
        true
    }
    fn transition(&self, id: &uuid::Uuid, change: StateChange<'_>) -> Result<()> {
        self.inline.lock().unwrap().push(change.state);
        self.inner.transition(id, change)
    }
    fn transition_async(&self, id: uuid::Uuid, change: OwnedStateChange) -> StoreFuture<()> {
        self.handed.lock().unwrap().push(change.state);
        self.inner.transition_async(id, change)
    }
    fn transition_then(&self, id: uuid::Uuid, change: OwnedStateChange, done: Completion) {
        if let Some(threads) = &self.completed_on {
            // Forgets the completion instead (a writer that stopped with the change queued).
            if change.state == RecordState::Approved && threads.lock().unwrap().is_empty() {
                threads.lock().unwrap().push(std::thread::current().id());
                drop(done);
                return;
            }
        }
        self.handed.lock().unwrap().push(change.state);
        self.inner.transition_then(id, change, done)
    }
    fn record(&self, id: &uuid::Uuid) -> Option<StoredRecord> {
        self.inner.record(id)
    }
    fn close(&self) {
        self.inner.close()
    }
}

/// `delete_file`, counting its runs in `runs`.
fn counted_delete(runs: &Arc<std::sync::atomic::AtomicUsize>) -> ToolBuilder {
    let r = runs.clone();
    Tool::builder("delete_file").description("d").executor(move |_| {
        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok(json!("deleted")) }
    })
}

fn spy(db: &Path, drops_first_approval: bool) -> Arc<Spy> {
    Arc::new(Spy {
        inner: SqliteStore::open_with(db, SqliteOptions { synchronous_full: true }).unwrap(),
        inline: Default::default(),
        handed: Default::default(),
        completed_on: drops_first_approval.then(Default::default),
    })
}

#[test]
fn answers_are_not_committed_on_the_responding_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let spy = spy(&db, false);
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = Gate::builder()
        .store(spy.clone())
        .deny_when_unobserved(false)
        .tool(counted_delete(&runs).build())
        .build()
        .unwrap();
    let call = |path: &str| ToolCall::new("delete_file", json!({ "path": path }));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ids = rt.block_on(async {
        let mut ids = Vec::new();
        for decision in [ResponseDecision::Approve, ResponseDecision::Deny] {
            let running = tokio::spawn({
                let (g, c) = (gate.clone(), call("/a"));
                async move { g.execute(c).await }
            });
            let req = some_pending(&gate).await;
            // Answered on this (the runtime's only) thread, as a UI or an approver callback would.
            let answer = match decision {
                ResponseDecision::Approve => ConfirmationResponse::approve(&req).with_responder("alice"),
                ResponseDecision::Deny => ConfirmationResponse::deny(&req, Some("no".into())),
            };
            let outcome = gate.respond(answer).unwrap();
            // A second answer is refused at once, as before.
            assert_eq!(
                gate.respond(ConfirmationResponse::approve(&req)).unwrap_err().kind(),
                ErrorKind::AlreadyResolved
            );
            let result = running.await.unwrap();
            match decision {
                ResponseDecision::Approve => {
                    assert_eq!(outcome, Outcome::Approved);
                    assert_eq!(result.status, ToolStatus::Executed, "{result:?}");
                    assert_eq!(gate.record(&req.id).unwrap().state, RecordState::Done);
                    assert_eq!(gate.record(&req.id).unwrap().responder.as_deref(), Some("alice"));
                }
                ResponseDecision::Deny => {
                    assert_eq!(outcome, Outcome::Denied);
                    assert_eq!(result.status, ToolStatus::Denied, "{result:?}");
                    assert_eq!(gate.record(&req.id).unwrap().state, RecordState::Denied);
                }
            }
            ids.push(req.id);
        }
        // An inline approver answers inside the call's own poll.
        let guard = gate.on_request_inline(|p| {
            p.approve().unwrap();
        });
        let result = gate.execute(call("/b")).await;
        assert_eq!(result.status, ToolStatus::Executed, "{result:?}");
        drop(guard);
        ids.push(result.request_id.unwrap());
        ids
    });
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    let inline = spy.inline.lock().unwrap().clone();
    for state in [RecordState::Approved, RecordState::Denied] {
        assert!(!inline.contains(&state), "{state:?} was committed on the responding thread: {inline:?}");
        assert!(spy.handed.lock().unwrap().contains(&state), "{state:?} was never recorded");
    }
    gate.close();
    let reopened = SqliteStore::open(&db).unwrap();
    let state = |id| reopened.record(&id).map(|r| r.state);
    assert_eq!(state(ids[0]), Some(RecordState::Done));
    assert_eq!(state(ids[1]), Some(RecordState::Denied));
    assert_eq!(state(ids[2]), Some(RecordState::Done));
}

#[test]
fn an_answer_the_store_never_records_cancels_the_call_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let spy = spy(&dir.path().join("s.db"), true);
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let audit = MemoryAuditSink::new();
    let gate = Gate::builder()
        .store(spy.clone())
        .audit(audit.clone())
        .deny_when_unobserved(false)
        .tool(counted_delete(&runs).timeout(Duration::from_secs(60)).build())
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let running = tokio::spawn({
            let g = gate.clone();
            async move { g.execute(ToolCall::new("delete_file", json!({"path": "/a"}))).await }
        });
        let req = some_pending(&gate).await;
        let started = Instant::now();
        // Accepted (the store's writer was handed the answer and then dropped it)...
        let outcome = gate.respond(ConfirmationResponse::approve(&req));
        // ...but never recorded: the call does not run, and it does not wait for its deadline.
        let result = tokio::time::timeout(Duration::from_secs(10), running).await.expect("the call hung").unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(result.status, ToolStatus::Cancelled, "{result:?} after {outcome:?}");
        // The `cancelled` record is committed by the store's writer.
        let mut state = gate.record(&req.id).unwrap().state;
        for _ in 0..500 {
            if state != RecordState::Pending {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            state = gate.record(&req.id).unwrap().state;
        }
        assert_eq!(state, RecordState::Cancelled);
        // The request is over: a second answer is refused.
        assert!(gate.respond(ConfirmationResponse::approve(&req)).is_err());
    });
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0, "an unrecorded approval ran the tool");
    // Its responder may have been told it was accepted: the audit says why it did not count.
    let notes: Vec<_> =
        audit.records().into_iter().filter(|r| r.decision.as_deref() == Some("answer-not-recorded")).collect();
    assert_eq!(notes.len(), 1, "{:?}", audit.records());
    assert_eq!(notes[0].error_kind, Some(ErrorKind::Store), "{notes:?}");
    assert!(notes[0].reason.as_deref().unwrap_or_default().contains("stopped"), "{notes:?}");
    gate.close();
}

#[test]
fn timeouts_cancellations_and_releases_are_not_committed_inside_the_calls_poll() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let spy = spy(&db, false);
    let gate = Gate::builder()
        .store(spy.clone())
        .deny_when_unobserved(false)
        .tool(Tool::builder("delete_file").description("d").timeout(Duration::from_millis(100)).build())
        .build()
        .unwrap();
    let call = |path: &str| ToolCall::new("delete_file", json!({ "path": path }));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (timed_out, cancelled, released) = rt.block_on(async {
        // Times out inside the call's poll.
        let d = gate.confirm(call("/a")).await.unwrap();
        let timed_out = d.request_id().unwrap();
        assert_eq!(d.outcome(), Outcome::TimedOut);
        // What the call returned is what the store says.
        assert_eq!(gate.record(&timed_out).unwrap().state, RecordState::TimedOut);
        // Cancelled by dropping the waiting call.
        let waiting = tokio::spawn({
            let g = gate.clone();
            async move { g.confirm(ToolCall::new("delete_file", json!({"path": "/b"}))).await }
        });
        let req = some_pending(&gate).await;
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        let cancelled = req.id;
        // Approved and handed to the `confirm` caller.
        let handed = tokio::spawn({
            let g = gate.clone();
            async move { g.confirm(ToolCall::new("delete_file", json!({"path": "/c"}))).await }
        });
        let req = some_pending(&gate).await;
        gate.respond(ConfirmationResponse::approve(&req)).unwrap();
        assert!(handed.await.unwrap().unwrap().is_approved());
        assert_eq!(gate.record(&req.id).unwrap().state, RecordState::Released);
        (timed_out, cancelled, req.id)
    });
    let inline = spy.inline.lock().unwrap().clone();
    for state in [RecordState::TimedOut, RecordState::Cancelled, RecordState::Released] {
        assert!(!inline.contains(&state), "{state:?} was committed on the caller's thread: {inline:?}");
        assert!(spy.handed.lock().unwrap().contains(&state), "{state:?} was never recorded");
    }
    // Recorded all the same: closing the gate waits for the store's writer.
    gate.close();
    let reopened = SqliteStore::open(&db).unwrap();
    let state = |id| reopened.record(&id).map(|r| r.state);
    assert_eq!(state(timed_out), Some(RecordState::TimedOut));
    assert_eq!(state(cancelled), Some(RecordState::Cancelled));
    assert_eq!(state(released), Some(RecordState::Released));
}

/// A host that keeps its process alive while a call is in flight (Node) does the same for
/// restored requests: the gate counts them until each has finished (decided and, if approved,
/// run), whichever store keeps them, and says when the last one has.
#[test]
fn restored_requests_are_counted_until_they_finish() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("signoff.db");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let gate = simple_gate(Gate::builder(), &db);
        for path in ["/a", "/b"] {
            let listed = gate.pending_count() + 1;
            let mut fut = Box::pin(gate.confirm(ToolCall::new("delete_file", json!({ "path": path }))));
            poll_until_listed(&gate, fut.as_mut(), listed);
            std::mem::forget(fut); // a crash: neither call is cancelled
        }
    });
    rt.block_on(async {
        let gate = simple_gate(Gate::builder(), &db);
        let idle = Arc::new(AtomicUsize::new(0));
        let seen = idle.clone();
        gate.on_restored_idle(move || {
            seen.fetch_add(1, SeqCst);
        });
        assert_eq!(gate.restored_running(), 0);
        let report = gate.recover().unwrap();
        assert_eq!((report.restored.len(), gate.restored_running()), (2, 2));
        let until = |n: usize| {
            let gate = gate.clone();
            async move {
                let start = Instant::now();
                while gate.restored_running() != n {
                    assert!(start.elapsed() < Duration::from_secs(10), "still {} running", gate.restored_running());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        gate.respond(ConfirmationResponse::approve(&report.restored[0])).unwrap();
        until(1).await;
        assert_eq!(gate.record(&report.restored[0].id).unwrap().state, RecordState::Done, "counted until it ran");
        assert_eq!(idle.load(SeqCst), 0);
        gate.respond(ConfirmationResponse::deny(&report.restored[1], None)).unwrap();
        until(0).await;
        assert_eq!(idle.load(SeqCst), 1);
    });
}

/// A cancel that comes after the request was approved, while the call had not yet seen its
/// request written (its future not polled since), loses: `cancel_request` says so. It used to
/// flag the row anyway, and the store then ended the approved row as `cancelled` while the
/// caller was told to run the tool: the record said the call never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_loses_to_an_approval_leaves_the_approval_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with(dir.path().join("s.db"), SqliteOptions { synchronous_full: true }).unwrap();
    let gate = Gate::builder()
        .store(store)
        .deny_when_unobserved(false)
        .tool(Tool::builder("delete_file").description("d").executor(|_| async { Ok(json!("deleted")) }).build())
        .build()
        .unwrap();
    gate.recover().unwrap();
    for confirm_only in [true, false] {
        let call = ToolCall::new("delete_file", json!({"path": "/tmp/x"}));
        let mut run: std::pin::Pin<Box<dyn std::future::Future<Output = Option<Outcome>> + Send>> = if confirm_only {
            let g = gate.clone();
            Box::pin(async move { g.confirm(call).await.ok().map(|d| d.outcome()) })
        } else {
            let g = gate.clone();
            Box::pin(async move {
                let r = g.execute(call).await;
                Some(if r.status == ToolStatus::Executed { Outcome::Approved } else { Outcome::Cancelled })
            })
        };
        // Polled once: its request is being written.
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(run.as_mut().poll(cx).is_pending())).await;
        assert!(first, "still waiting");
        let req = some_pending(&gate).await;
        assert_eq!(gate.respond(ConfirmationResponse::approve(&req)).unwrap(), Outcome::Approved);
        assert!(!gate.cancel_request(&req.id), "the approval came first");
        assert_eq!(run.await, Some(Outcome::Approved));
        let want = if confirm_only { RecordState::Released } else { RecordState::Done };
        let t = Instant::now();
        while gate.record(&req.id).map(|r| r.state) != Some(want) {
            let state = gate.record(&req.id).map(|r| r.state);
            assert!(state != Some(RecordState::Cancelled), "an approved call recorded as cancelled");
            assert!(t.elapsed() < Duration::from_secs(5), "recorded as {state:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
