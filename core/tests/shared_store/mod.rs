//! Scenarios every store shared between processes must pass, run against each of them: the
//! shared SQLite store (`sqlite_shared.rs`) and PostgreSQL (`postgres.rs`). Each takes an
//! [`Open`] that opens the store under test once more, as another process (or host) would:
//! every gate gets its own store and connection.
#![allow(dead_code)]

use serde_json::{Value, json};
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Opens the shared store under test again, as another process would, with this owner name
/// (`None`: a new one).
pub type Open<'a> = &'a dyn Fn(Option<&str>) -> Arc<dyn PendingStore>;

pub fn delete_tool(runs: Arc<AtomicUsize>) -> Tool {
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

/// An agent's gate and an approver's gate on the same store (two processes, in one test).
pub fn pair(open: Open<'_>) -> (Gate, Gate, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Gate::builder().store(open(None)).tool(delete_tool(runs.clone())).build().unwrap();
    let approver = Gate::builder().store(open(None)).tool(delete_tool(Arc::new(AtomicUsize::new(0)))).build().unwrap();
    (agent, approver, runs)
}

/// Waits until `gate` lists `n` pending requests (made elsewhere).
pub async fn listed(gate: &Gate, n: usize) -> Vec<Arc<ConfirmationRequest>> {
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

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A request made through one gate is listed and approved through another; the waiting call
/// wakes at once and runs its tool once; a second answer, from either gate, is refused.
pub fn answered_elsewhere_runs_once(open: Open<'_>) {
    rt().block_on(async {
        let (agent, approver, runs) = pair(open);
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

/// A denial with its reason, an edit and a session grant, made elsewhere, reach the agent.
pub fn denial_edit_and_grant_made_elsewhere_reach_the_agent(open: Open<'_>) {
    rt().block_on(async {
        let (agent, approver, runs) = pair(open);
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

/// Racing approvals and denials from four gates resolve each of 30 requests once; each approved
/// call runs once, no denied call runs.
pub fn racing_answers_resolve_each_request_once(open: Open<'_>) {
    rt().block_on(async {
        let (agent, _, runs) = pair(open);
        let approvers: Vec<Gate> = (0..3)
            .map(|_| {
                Gate::builder().store(open(None)).tool(delete_tool(Arc::new(AtomicUsize::new(0)))).build().unwrap()
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

/// A request nobody answers times out at its deadline; a late answer is refused as expired.
pub fn deadlines_hold_and_late_answers_are_refused(open: Open<'_>) {
    rt().block_on(async {
        let runs = Arc::new(AtomicUsize::new(0));
        let agent = Gate::builder()
            .store(open(None))
            .default_timeout(Duration::from_millis(400))
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let approver = Gate::builder().store(open(None)).tool(delete_tool(runs.clone())).build().unwrap();
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

/// Requests made elsewhere reach subscribers here live, and their ends too; an inline approver
/// in another process answers requests made here.
pub fn requests_made_elsewhere_reach_subscribers_live(open: Open<'_>) {
    rt().block_on(async {
        let (agent, console, runs) = pair(open);
        let mut events = console.subscribe();
        let mut agent_events = agent.subscribe();
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
        // The agent's own bus shows its request once.
        let mut own = 0;
        while let Ok(Some(Ok(e))) = tokio::time::timeout(Duration::from_millis(200), agent_events.recv()).await {
            if matches!(e, Event::ConfirmationRequest(_)) {
                own += 1;
            }
        }
        assert_eq!(own, 1);

        // An inline approver in another process answers requests made here.
        let auto = Gate::builder().store(open(None)).tool(delete_tool(Arc::new(AtomicUsize::new(0)))).build().unwrap();
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

/// Stores `n` requests with 100 ms to wait straight into `store`, as an agent that then went
/// away leaves them (no gate waits for them): their ids.
pub fn left_by_a_gone_agent(store: &dyn PendingStore, n: usize) -> Vec<uuid::Uuid> {
    (0..n)
        .map(|i| {
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
            let id = req.id;
            store.insert(Arc::new(req)).unwrap();
            id
        })
        .collect()
}
