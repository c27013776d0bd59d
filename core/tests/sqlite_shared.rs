//! Many gates on one shared SQLite file (`store_url = "sqlite:<path>"`), as agents and approvers
//! in several processes of one machine use it: a request made by one gate is listed and answered
//! by another, the waiting call wakes and runs its tool exactly once, racing answers from several
//! gates resolve it once, deadlines are kept, a gone agent's requests time out, and requests made
//! elsewhere reach subscribers here live. Each gate has its own connection and its own thread
//! following the file, exactly as a separate process does (cli/tests/console.rs runs the same
//! store across real processes).

use serde_json::{Value, json};
use signoff::*;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn store(path: &Path, owner: Option<&str>) -> Arc<SqliteSharedStore> {
    let options =
        SqliteSharedOptions { owner: owner.map(str::to_owned), sweep_interval: Some(Duration::from_millis(200)) };
    SqliteSharedStore::open(path, options).unwrap()
}

fn delete_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::builder("delete_file")
        .description("Deletes a file")
        .parameters(json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
        .approval(ApprovalMode::Required)
        .editable(true)
        .executor(move |a: Value| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"deleted": a["path"]}))
            }
        })
        .build()
}

/// An agent's gate and an approver's gate on the same file.
fn pair(path: &Path) -> (Gate, Gate, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Gate::builder().store(store(path, None)).tool(delete_tool(runs.clone())).build().unwrap();
    let approver =
        Gate::builder().store(store(path, None)).tool(delete_tool(Arc::new(AtomicUsize::new(0)))).build().unwrap();
    (agent, approver, runs)
}

/// Waits until `gate` lists `n` pending requests (made elsewhere).
async fn listed(gate: &Gate, n: usize) -> Vec<Arc<ConfirmationRequest>> {
    let t = Instant::now();
    loop {
        let p = gate.pending();
        if p.len() >= n {
            return p;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "only {} of {n} requests listed", p.len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn a_request_made_in_one_process_is_answered_in_another_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (agent, approver, runs) = pair(&dir.path().join("signoff.db"));
        let a = agent.clone();
        let call = tokio::spawn(async move {
            a.execute(ToolCall::new("delete_file", json!({"path": "/tmp/x"})).call_id("c1")).await
        });
        let req = listed(&approver, 1).await.remove(0);
        assert_eq!(req.arguments, json!({"path": "/tmp/x"}));
        let t = Instant::now();
        assert_eq!(
            approver.respond(ConfirmationResponse::approve(&req).with_responder("alice")).unwrap(),
            Outcome::Approved
        );
        let result = call.await.unwrap();
        assert_eq!(result.status, ToolStatus::Executed, "{result:?}");
        assert!(t.elapsed() < Duration::from_secs(2), "woke after {:?}", t.elapsed());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let rec = approver.record(&req.id).unwrap();
        assert_eq!(rec.state, RecordState::Done);
        assert_eq!(rec.responder.as_deref(), Some("alice"));
        // A second answer, from either gate, is refused and changes nothing.
        let again = approver.respond(ConfirmationResponse::approve(&req)).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::AlreadyResolved, "{again}");
        let again = agent.respond(ConfirmationResponse::deny(&req, None)).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::AlreadyResolved, "{again}");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(approver.pending().is_empty());
    });
}

#[test]
fn a_denial_an_edit_and_a_session_grant_made_elsewhere_reach_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (agent, approver, runs) = pair(&dir.path().join("signoff.db"));
        let a = agent.clone();
        let call = tokio::spawn(async move { a.confirm(ToolCall::new("delete_file", json!({"path": "/etc"}))).await });
        let req = listed(&approver, 1).await.remove(0);
        approver.respond(ConfirmationResponse::deny(&req, Some("not /etc".into())).with_responder("bob")).unwrap();
        let d = call.await.unwrap().unwrap();
        assert_eq!((d.outcome(), d.reason(), d.responder()), (Outcome::Denied, Some("not /etc"), Some("bob")));
        assert_eq!(runs.load(Ordering::SeqCst), 0);

        let a = agent.clone();
        let call = tokio::spawn(async move {
            a.confirm(ToolCall::new("delete_file", json!({"path": "/tmp/a"})).session("s1")).await
        });
        let req = listed(&approver, 1).await.remove(0);
        let bad = approver.respond(ConfirmationResponse::approve(&req).with_arguments(json!({"path": 7}))).unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::InvalidArguments, "{bad}");
        approver
            .respond(
                ConfirmationResponse::approve(&req)
                    .with_arguments(json!({"path": "/tmp/b"}))
                    .with_scope(Scope::Session)
                    .with_responder("carol"),
            )
            .unwrap();
        let d = call.await.unwrap().unwrap();
        assert!(d.edited());
        assert_eq!(d.arguments(), Some(&json!({"path": "/tmp/b"})));
        assert_eq!(d.scope(), Scope::Session);
        let next = agent.confirm(ToolCall::new("delete_file", json!({"path": "/tmp/c"})).session("s1")).await.unwrap();
        assert_eq!(next.approved_by(), Some(ApprovedBy::SessionGrant));
    });
}

#[test]
fn racing_answers_from_many_processes_resolve_each_request_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    rt().block_on(async {
        let (agent, _, runs) = pair(&path);
        let approvers: Vec<Gate> = (0..3)
            .map(|_| {
                Gate::builder()
                    .store(store(&path, None))
                    .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
                    .build()
                    .unwrap()
            })
            .collect();
        const N: usize = 30;
        let calls: Vec<_> = (0..N)
            .map(|i| {
                let a = agent.clone();
                tokio::spawn(async move {
                    a.execute(ToolCall::new("delete_file", json!({"path": format!("/tmp/{i}")}))).await
                })
            })
            .collect();
        let reqs = listed(&approvers[0], N).await;
        let wins = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = approvers
            .iter()
            .chain(std::iter::once(&agent))
            .enumerate()
            .map(|(k, g)| {
                let (g, reqs, wins) = (g.clone(), reqs.clone(), wins.clone());
                std::thread::spawn(move || {
                    for r in &reqs {
                        let resp = if k % 2 == 0 {
                            ConfirmationResponse::approve(r)
                        } else {
                            ConfirmationResponse::deny(r, Some(format!("no from {k}")))
                        };
                        match g.respond(resp) {
                            Ok(_) => {
                                wins.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => assert!(
                                matches!(e.kind(), ErrorKind::AlreadyResolved | ErrorKind::Expired),
                                "unexpected rejection: {e}"
                            ),
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(wins.load(Ordering::SeqCst), N, "every request is won exactly once");
        let mut approved = 0;
        for c in calls {
            if c.await.unwrap().status == ToolStatus::Executed {
                approved += 1;
            }
        }
        assert_eq!(runs.load(Ordering::SeqCst), approved, "each approved call ran once, no denied call ran");
    });
}

#[test]
fn deadlines_hold_and_late_answers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    rt().block_on(async {
        let runs = Arc::new(AtomicUsize::new(0));
        let agent = Gate::builder()
            .store(store(&path, None))
            .default_timeout(Duration::from_millis(400))
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let approver = Gate::builder().store(store(&path, None)).tool(delete_tool(runs.clone())).build().unwrap();
        let a = agent.clone();
        let call = tokio::spawn(async move { a.confirm(ToolCall::new("delete_file", json!({"path": "/x"}))).await });
        let req = listed(&approver, 1).await.remove(0);
        let d = call.await.unwrap().unwrap();
        assert_eq!(d.outcome(), Outcome::TimedOut);
        assert_eq!(agent.record(&req.id).unwrap().state, RecordState::TimedOut);
        let late = approver.respond(ConfirmationResponse::approve(&req)).unwrap_err();
        assert_eq!(late.kind(), ErrorKind::Expired, "{late}");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn the_requests_of_an_agent_that_is_gone_time_out_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    let gone = store(&path, Some("gone-agent"));
    let mut ids = Vec::new();
    for i in 0..50 {
        let now = signoff::event::now_ms();
        let args = json!({"path": format!("/{i}")});
        let req = ConfirmationRequest {
            id: uuid::Uuid::new_v4(),
            tool: "delete_file".into(),
            description: "".into(),
            arguments: args.clone().into(),
            prompt: "".into(),
            arguments_digest: signoff::Arguments::new(&args).digest(),
            session_id: "s".into(),
            tool_call_id: None,
            editable: false,
            reasons: [].into(),
            timeout_ms: 100,
            deadline_ms: now + 100,
            created_at_ms: now,
            metadata: Value::Null,
        };
        ids.push(req.id);
        gone.insert(Arc::new(req)).unwrap();
    }
    gone.close();
    std::thread::sleep(Duration::from_millis(150));
    let sweepers: Vec<_> = (0..3).map(|_| store(&path, None)).collect();
    let counts: Vec<usize> = std::thread::scope(|s| {
        let hs: Vec<_> = sweepers.iter().map(|st| s.spawn(move || st.sweep().unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sweepers[0].sweep().unwrap(), 0);
    assert!(counts.iter().sum::<usize>() <= ids.len());
    for id in &ids {
        assert_eq!(sweepers[0].record(id).unwrap().state, RecordState::TimedOut);
    }
    // The owner that left recovers nothing left open.
    let back = store(&path, Some("gone-agent"));
    assert!(back.unfinished().unwrap().is_empty());
}

#[test]
fn requests_made_elsewhere_reach_subscribers_and_approvers_here_live() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    rt().block_on(async {
        let (agent, console, runs) = pair(&path);
        let mut events = console.subscribe();
        let a = agent.clone();
        let call = tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/live"}))).await });
        let req = match tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("an event arrives") {
            Some(Ok(Event::ConfirmationRequest(r))) => r,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(req.arguments, json!({"path": "/live"}));
        console.respond(ConfirmationResponse::approve(&req).with_responder("erin")).unwrap();
        assert_eq!(call.await.unwrap().status, ToolStatus::Executed);
        let resolved = loop {
            match tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("an event arrives") {
                Some(Ok(Event::ConfirmationResolved(r))) => break r,
                Some(Ok(_)) => continue,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!((resolved.id, resolved.outcome), (req.id, Outcome::Approved));
        assert_eq!(resolved.responder.as_deref(), Some("erin"));

        // An inline approver in another process answers requests made here.
        let auto =
            Gate::builder().store(store(&path, None)).tool(delete_tool(Arc::new(AtomicUsize::new(0)))).build().unwrap();
        let _guard = auto.on_request_inline(|p| {
            let _ = p.approve();
        });
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            agent.execute(ToolCall::new("delete_file", json!({"path": "/auto"}))),
        )
        .await
        .expect("approved from the other process");
        assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn an_approval_marker_and_a_token_are_used_once_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    let keys = TokenKeys::new("k1", Secret::generate()).unwrap();
    let (a, b) = (store(&path, None), store(&path, None));
    let id = uuid::Uuid::new_v4();
    let until = signoff::event::now_ms() + 60_000;
    assert!(a.use_once(&id, until).unwrap());
    assert!(!b.use_once(&id, until).unwrap(), "a replay in another process is refused");
    assert!(!a.use_once(&id, until).unwrap());
    // A token issued in one process answers once in another.
    rt().block_on(async {
        let runs = Arc::new(AtomicUsize::new(0));
        let agent =
            Gate::builder().store(a.clone()).tokens(keys.clone()).tool(delete_tool(runs.clone())).build().unwrap();
        let other = Gate::builder().store(b.clone()).tokens(keys).tool(delete_tool(runs.clone())).build().unwrap();
        let g = agent.clone();
        let call = tokio::spawn(async move { g.execute(ToolCall::new("delete_file", json!({"path": "/t"}))).await });
        let req = listed(&other, 1).await.remove(0);
        let token = agent.issue_token(&req.id, "alice").unwrap();
        other.respond_token(&token, TokenResponse::approve("alice")).unwrap();
        let again = other.respond_token(&token, TokenResponse::approve("alice")).unwrap_err();
        assert!(matches!(again.kind(), ErrorKind::AlreadyUsed | ErrorKind::AlreadyResolved), "{again}");
        assert_eq!(call.await.unwrap().status, ToolStatus::Executed);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_single_process_store_and_shared_stores_never_open_one_file_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    let local = SqliteStore::open(&path).unwrap();
    let e = SqliteSharedStore::open(&path, Default::default()).unwrap_err().to_string();
    assert!(e.contains("single-process store") && e.contains("sqlite:"), "{e}");
    local.close();
    let shared = store(&path, None);
    let e = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(e.contains("in use by another process"), "{e}");
    shared.close();
    assert!(SqliteStore::open(&path).is_ok());
}

#[test]
fn a_gate_configured_with_a_sqlite_url_shares_its_requests() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("signoff.db").display());
    let config = |owner: &str| {
        GateConfig::from_json(&json!({"store_url": url, "store_owner": owner}), Naming::Snake).unwrap().build().unwrap()
    };
    rt().block_on(async {
        let (agent, console) = (config("agent-1"), config("console"));
        let runs = Arc::new(AtomicUsize::new(0));
        agent.register(delete_tool(runs.clone())).unwrap();
        let a = agent.clone();
        let call = tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/c"}))).await });
        let req = listed(&console, 1).await.remove(0);
        console.respond(ConfirmationResponse::approve(&req)).unwrap();
        assert_eq!(call.await.unwrap().status, ToolStatus::Executed);
    });
    // Options that only PostgreSQL has are refused for `sqlite:`, and so is a URL naming no file.
    for (options, expected) in [
        (json!({"store_url": url, "store_schema": "s"}), "`store_schema` applies to a PostgreSQL `store_url`"),
        (json!({"store_url": url, "audit_in_store": true}), "`audit_in_store` applies to a PostgreSQL"),
        (json!({"store_url": "sqlite:"}), "names no file"),
        (json!({"store_url": "mysql://x"}), "`sqlite:<path>` (one machine)"),
    ] {
        let e = GateConfig::from_json(&options, Naming::Snake).unwrap_err().to_string();
        assert!(e.contains(expected), "{options}: {e}");
    }
}
