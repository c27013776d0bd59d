//! The one cancellation rule, the same in every language: cancelling `execute` while it waits for a
//! decision cancels the request and the tool never runs; once the tool has started, it runs to the
//! end and its result is recorded, and only the cancelled caller does not receive it.

use serde_json::json;
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

struct Slow {
    started: Arc<Notify>,
    release: Arc<Notify>,
    runs: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
}

fn slow_gate(builder: GateBuilder) -> (Gate, Slow) {
    let s = Slow {
        started: Arc::new(Notify::new()),
        release: Arc::new(Notify::new()),
        runs: Arc::default(),
        finished: Arc::default(),
    };
    let (started, release, runs, finished) = (s.started.clone(), s.release.clone(), s.runs.clone(), s.finished.clone());
    let gate = builder
        .tool(
            Tool::builder("transfer")
                .description("Transfers money")
                .approval(ApprovalMode::Required)
                .executor(move |_| {
                    let (started, release, runs, finished) =
                        (started.clone(), release.clone(), runs.clone(), finished.clone());
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        started.notify_one();
                        release.notified().await;
                        finished.fetch_add(1, Ordering::SeqCst);
                        Ok(json!({"sent": true}))
                    }
                })
                .build(),
        )
        .build()
        .unwrap();
    (gate, s)
}

#[tokio::test]
async fn cancelled_while_waiting_for_a_decision_the_tool_never_runs() {
    let audit = Arc::new(MemoryAuditSink::default());
    let (gate, slow) = slow_gate(Gate::builder().audit(audit.clone()));
    let mut sub = gate.observe();
    let _approver = gate.subscribe();
    let g = gate.clone();
    let call = tokio::spawn(async move { g.execute(ToolCall::new("transfer", json!({}))).await });
    let Some(Ok(Event::ConfirmationRequest(req))) = sub.recv().await else { panic!("a request") };
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    let resolved = loop {
        if let Some(Ok(Event::ConfirmationResolved(r))) = sub.recv().await {
            break r;
        }
    };
    assert_eq!((resolved.outcome, resolved.cancel_reason), (Outcome::Cancelled, Some(CancelReason::Aborted)));
    assert_eq!(gate.respond(ConfirmationResponse::approve(&req)).unwrap_err().kind(), ErrorKind::AlreadyResolved);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(slow.runs.load(Ordering::SeqCst), 0);
    assert!(audit.records().iter().all(|r| r.kind != AuditKind::Execution));
}

#[tokio::test]
async fn cancelled_while_the_tool_runs_the_tool_finishes_and_its_result_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(MemoryAuditSink::default());
    let store = SqliteStore::open(dir.path().join("signoff.db")).unwrap();
    let (gate, slow) = slow_gate(Gate::builder().audit(audit.clone()).store(store));
    let _approver = gate.on_request_inline(|p| {
        p.approve().unwrap();
    });
    let g = gate.clone();
    let call = tokio::spawn(async move { g.execute(ToolCall::new("transfer", json!({}))).await });
    slow.started.notified().await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled(), "the caller was cancelled");
    assert_eq!(slow.finished.load(Ordering::SeqCst), 0, "still running");
    slow.release.notify_one();
    // The tool finishes on the runtime and its result is recorded.
    let record = loop {
        if let Some(r) = audit.records().into_iter().find(|r| r.kind == AuditKind::Execution) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(record.decision.as_deref(), Some("ok"));
    let id = record.request_id.expect("the request");
    let stored = gate.record(&id).expect("kept by the durable store");
    assert_eq!(stored.state, RecordState::Done);
    assert_eq!((slow.runs.load(Ordering::SeqCst), slow.finished.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test]
async fn a_dropped_execute_future_detaches_the_running_tool_too() {
    let (gate, slow) = slow_gate(Gate::builder());
    let _approver = gate.on_request_inline(|p| {
        p.approve().unwrap();
    });
    {
        let fut = gate.execute(ToolCall::new("transfer", json!({})));
        tokio::pin!(fut);
        tokio::select! {
            _ = &mut fut => panic!("the tool is held"),
            _ = slow.started.notified() => {}
        }
    } // dropped here, mid-run
    slow.release.notify_one();
    for _ in 0..200 {
        if slow.finished.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!((slow.runs.load(Ordering::SeqCst), slow.finished.load(Ordering::SeqCst)), (1, 1));
}

/// tests/vectors/execute.json, as every runner runs it.
#[tokio::test]
async fn the_shared_execute_vectors() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/execute.json")).unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    for case in file["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let audit = Arc::new(MemoryAuditSink::default());
        let (gate, slow) = slow_gate(Gate::builder().audit(audit.clone()));
        let mut events = gate.observe();
        let approver = gate.subscribe();
        let _auto = case["approve"].as_bool().unwrap().then(|| {
            gate.on_request_inline(|p| {
                p.approve().unwrap();
            })
        });
        let fields = ["name", "approve", "cancel", "close", "runs", "finished", "resolved", "execution", "result"];
        for k in case.as_object().unwrap().keys() {
            assert!(fields.contains(&k.as_str()), "{name}: unknown field {k}");
        }
        let g = gate.clone();
        let call = tokio::spawn(async move { g.execute(ToolCall::new("transfer", json!({}))).await });
        let (close, when) = match (case.get("cancel"), case.get("close")) {
            (Some(w), None) => (false, w.as_str().unwrap()),
            (None, Some(w)) => (true, w.as_str().unwrap()),
            _ => panic!("{name}: exactly one of cancel and close"),
        };
        match when {
            "while_waiting" => loop {
                if let Some(Ok(Event::ConfirmationRequest(_))) = events.recv().await {
                    break;
                }
            },
            "while_running" => slow.started.notified().await,
            other => panic!("{name}: {other}"),
        }
        if close {
            // The caller keeps waiting: it gets the tool's own result.
            gate.close();
            slow.release.notify_one();
            let r = tokio::time::timeout(Duration::from_secs(5), call).await.expect("the call returned").unwrap();
            assert_eq!(json!(r.status), case["result"], "{name}: {r:?}");
            if r.status == ToolStatus::Executed {
                assert_eq!(r.output, Some(json!({"sent": true})), "{name}");
            }
        } else {
            call.abort();
            assert!(call.await.unwrap_err().is_cancelled(), "{name}");
            slow.release.notify_one();
        }
        let resolved = loop {
            if let Some(Ok(Event::ConfirmationResolved(r))) = events.recv().await {
                break r;
            }
        };
        let exp = &case["resolved"];
        assert_eq!(json!(resolved.outcome), exp["outcome"], "{name}");
        if let Some(reason) = exp.get("cancel_reason") {
            assert_eq!(json!(resolved.cancel_reason), *reason, "{name}");
        }
        let want_finished = case["finished"].as_u64().unwrap() as usize;
        for _ in 0..400 {
            if slow.finished.load(Ordering::SeqCst) >= want_finished
                && (case["execution"].is_null() || audit.records().iter().any(|r| r.kind == AuditKind::Execution))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(slow.runs.load(Ordering::SeqCst) as u64, case["runs"].as_u64().unwrap(), "{name}: runs");
        assert_eq!(slow.finished.load(Ordering::SeqCst), want_finished, "{name}: finished");
        let execution = audit.records().into_iter().find(|r| r.kind == AuditKind::Execution).and_then(|r| r.decision);
        assert_eq!(json!(execution), case["execution"], "{name}: execution record");
        drop(approver);
    }
}

#[tokio::test]
async fn an_executor_learns_which_call_it_runs() {
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    let gate = Gate::builder()
        .tool(
            Tool::builder("transfer")
                .approval(ApprovalMode::Required)
                .editable(true)
                .executor_with_context(move |_, ctx| {
                    let s = s.clone();
                    async move {
                        s.lock().unwrap().push(format!(
                            "{} {:?} {} {} {} {}",
                            ctx.tool,
                            ctx.call_id,
                            ctx.request_id.is_some(),
                            ctx.session_id,
                            ctx.edited,
                            ctx.gate_closed()
                        ));
                        Ok(json!(null))
                    }
                })
                .build(),
        )
        .build()
        .unwrap();
    let _approver = gate.on_request_inline(|p| {
        p.approve_with(Some(json!({"amount": 1})), Scope::Once, None).unwrap();
    });
    let r = gate.execute(ToolCall::new("transfer", json!({"amount": 5})).session("s9").call_id("call_7")).await;
    assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
    assert_eq!(*seen.lock().unwrap(), vec![r#"transfer Some("call_7") true s9 true false"#.to_owned()]);
}

/// A host stopping after `close()` can wait for the tools still running (their callers gone)
/// before it exits, so their results are recorded: `running_tools` counts them and
/// `tools_finished` completes when the last one ends.
#[tokio::test]
async fn a_host_stopping_waits_for_the_tools_still_running() {
    let audit = Arc::new(MemoryAuditSink::default());
    let (gate, slow) = slow_gate(Gate::builder().audit(audit.clone()));
    let _approver = gate.on_request_inline(|p| {
        p.approve().unwrap();
    });
    assert_eq!(gate.running_tools(), 0);
    gate.tools_finished().await;
    let g = gate.clone();
    let call = tokio::spawn(async move { g.execute(ToolCall::new("transfer", json!({}))).await });
    slow.started.notified().await;
    call.abort();
    gate.close();
    assert_eq!(gate.running_tools(), 1);
    let finished = gate.tools_finished();
    tokio::pin!(finished);
    assert!(tokio::time::timeout(Duration::from_millis(50), finished.as_mut()).await.is_err(), "a tool still runs");
    slow.release.notify_one();
    tokio::time::timeout(Duration::from_secs(5), finished).await.expect("finished once the tool ended");
    assert_eq!(gate.running_tools(), 0);
    gate.flush_audit();
    assert!(audit.records().iter().any(|r| r.kind == AuditKind::Execution && r.decision.as_deref() == Some("ok")));
}
