//! Many gates on one PostgreSQL database, as agents and approvers on many hosts use it: a
//! request made by one gate is listed and answered by another, the waiting call wakes and runs
//! its tool exactly once, racing answers from several gates resolve it once, deadlines follow
//! the database's clock, and a lost connection is survived.
//!
//! Needs a real server: `SIGNOFF_TEST_POSTGRES_URL` (set by `scripts/with-postgres.sh`, which
//! `make test` uses). Without it these tests are skipped, unless `SIGNOFF_REQUIRE_POSTGRES` is set.
#![cfg(feature = "postgres")]

mod shared_store;

use shared_store::{delete_tool, listed, rt};

use serde_json::{Value, json};
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The restart test stops the server every other test uses: it runs alone.
static SERVER: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn url() -> Option<String> {
    match std::env::var("SIGNOFF_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var_os("SIGNOFF_REQUIRE_POSTGRES").is_some() {
                panic!("SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not");
            }
            eprintln!("skipped: no SIGNOFF_TEST_POSTGRES_URL (run under scripts/with-postgres.sh)");
            None
        }
    }
}

fn schema() -> String {
    format!("t_{}", uuid::Uuid::new_v4().simple())
}

fn store(url: &str, schema: &str, owner: Option<&str>) -> Arc<PostgresStore> {
    PostgresStore::connect(
        url,
        PostgresOptions {
            owner: owner.map(str::to_owned),
            schema: Some(schema.to_owned()),
            sweep_interval: Some(Duration::from_millis(200)),
            ..Default::default()
        },
    )
    .unwrap()
}

/// An agent's gate and an approver's gate on the same database (two hosts, in one test).
fn pair(url: &str, schema: &str) -> (Gate, Gate, Arc<AtomicUsize>) {
    shared_store::pair(&|owner| store(url, schema, owner))
}

/// Approves `req` once the server is back: the first answers after a restart may meet a dead
/// connection (`store`); the next one reconnects.
async fn approve_once_back(approver: &Gate, req: &ConfirmationRequest) {
    let t = Instant::now();
    loop {
        match approver.respond(ConfirmationResponse::approve(req)) {
            Ok(_) => return,
            Err(e) if e.kind() == ErrorKind::Store && t.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_request_made_on_one_host_is_answered_on_another_and_runs_once() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    shared_store::answered_elsewhere_runs_once(&|owner| store(&url, &schema, owner));
}

#[test]
fn a_denial_an_edit_and_a_session_grant_made_on_another_host_reach_the_agent() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    shared_store::denial_edit_and_grant_made_elsewhere_reach_the_agent(&|owner| store(&url, &schema, owner));
}

#[test]
fn racing_answers_from_many_hosts_resolve_each_request_once() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    shared_store::racing_answers_resolve_each_request_once(&|owner| store(&url, &schema, owner));
}

#[test]
fn deadlines_follow_the_database_and_late_answers_are_refused() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    shared_store::deadlines_hold_and_late_answers_are_refused(&|owner| store(&url, &schema, owner));
}

#[test]
fn the_sweeper_times_out_requests_whose_agent_is_gone_exactly_once() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    // An agent's store that wrote requests and then went away (no gate waits for them).
    let gone = store(&url, &schema, Some("gone-agent"));
    let ids = shared_store::left_by_a_gone_agent(&*gone, 50);
    drop(gone);
    std::thread::sleep(Duration::from_millis(150));
    // Three hosts sweep at once: every request times out once.
    let sweepers: Vec<_> = (0..3).map(|_| store(&url, &schema, None)).collect();
    let counts: Vec<usize> = std::thread::scope(|s| {
        let hs: Vec<_> = sweepers.iter().map(|st| s.spawn(move || st.sweep().unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // The background sweepers may have taken some first; none twice.
    let later: usize = sweepers[0].sweep().unwrap();
    assert_eq!(later, 0);
    assert!(counts.iter().sum::<usize>() <= ids.len());
    for id in &ids {
        assert_eq!(sweepers[0].record(id).unwrap().state, RecordState::TimedOut);
    }
}

#[test]
fn tokens_issued_on_one_host_answer_once_on_another() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let keys = TokenKeys::parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let agent = Gate::builder()
            .store(store(&url, &schema, None))
            .tokens(keys.clone())
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let console = Gate::builder()
            .store(store(&url, &schema, None))
            .tokens(keys)
            .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
            .build()
            .unwrap();
        let a = agent.clone();
        let call = tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/t"}))).await });
        let req = listed(&console, 1).await.remove(0);
        let token = console.issue_token(&req.id, "dana").unwrap();
        // Used twice at once, from two hosts: one wins.
        let (c1, c2) = (console.clone(), agent.clone());
        let (t1, t2) = (token.clone(), token.clone());
        let h1 = std::thread::spawn(move || c1.respond_token(&t1, TokenResponse::approve("dana")));
        let h2 = std::thread::spawn(move || c2.respond_token(&t2, TokenResponse::approve("dana")));
        let results = [h1.join().unwrap(), h2.join().unwrap()];
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
        let loser = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert!(matches!(loser.kind(), ErrorKind::AlreadyUsed | ErrorKind::NotPending), "{loser}");
        assert_eq!(call.await.unwrap().status, ToolStatus::Executed);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let again = console.respond_token(&token, TokenResponse::approve("dana")).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::AlreadyUsed, "{again}");
    });
}

/// Finds the request for `path` among `reqs`.
fn for_path(reqs: &[Arc<ConfirmationRequest>], path: &str) -> Arc<ConfirmationRequest> {
    reqs.iter().find(|r| r.arguments.value()["path"] == path).unwrap().clone()
}

/// The first life of an agent process ends: its call for `run` was approved and had started
/// (`executing`), then the process dies. Its connections go first, so nothing it leaves behind
/// reaches the database (its waiting calls' clean-up finds the store closed).
fn dies_while_running(
    first: Arc<PostgresStore>,
    gate: Gate,
    calls: Vec<tokio::task::JoinHandle<()>>,
    run: &ConfirmationRequest,
) {
    first
        .transition(
            &run.id,
            StateChange { arguments: Some(&run.arguments.value()), ..StateChange::to(RecordState::Approved) },
        )
        .unwrap();
    first.transition(&run.id, StateChange::to(RecordState::Executing)).unwrap();
    first.close();
    for c in calls {
        c.abort();
    }
    std::mem::forget(gate);
    drop(first);
}

#[test]
fn an_owner_restarting_recovers_its_own_requests_and_reports_interrupted_calls() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let runs = Arc::new(AtomicUsize::new(0));
        // The first life: one call approved and started, one left pending.
        let first = store(&url, &schema, Some("agent-7"));
        let other = store(&url, &schema, Some("agent-8"));
        let g1 = Gate::builder()
            .store(first.clone())
            .deny_when_unobserved(false)
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let g_other = Gate::builder().store(other.clone()).tool(delete_tool(runs.clone())).build().unwrap();
        let mut pending_calls = Vec::new();
        for (g, p) in [(&g1, "/run"), (&g1, "/wait"), (&g_other, "/theirs")] {
            let g = g.clone();
            pending_calls.push(tokio::spawn(async move {
                let _ = g.confirm(ToolCall::new("delete_file", json!({"path": p}))).await;
            }));
        }
        let reqs = listed(&g1, 3).await;
        let (run, wait) = (for_path(&reqs, "/run"), for_path(&reqs, "/wait"));
        let mine: Vec<_> = pending_calls.drain(..2).collect();
        dies_while_running(first, g1, mine, &run);

        let second = store(&url, &schema, Some("agent-7"));
        let g2 =
            Gate::builder().store(second).deny_when_unobserved(false).tool(delete_tool(runs.clone())).build().unwrap();
        let report = g2.recover().unwrap();
        assert_eq!(report.interrupted.len(), 1, "{report:?}");
        assert_eq!(report.interrupted[0].request.id, run.id);
        assert_eq!(report.restored.len(), 1, "only this owner's pending request: {report:?}");
        assert_eq!(report.restored[0].id, wait.id);
        assert_eq!(g2.record(&run.id).unwrap().state, RecordState::Interrupted);
        // The restored request is approved from elsewhere and its tool runs once, here.
        g_other.respond(ConfirmationResponse::approve(&wait)).unwrap();
        let t = Instant::now();
        while g2.record(&wait.id).unwrap().state != RecordState::Done {
            assert!(t.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        g_other.close();
    });
}

#[test]
fn a_waiting_call_survives_a_server_restart() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let Ok(ctl) = std::env::var("SIGNOFF_TEST_POSTGRES_CTL") else {
        eprintln!("skipped: no SIGNOFF_TEST_POSTGRES_CTL to restart the server with");
        return;
    };
    drop(_server);
    let _alone = SERVER.write().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let (agent, approver, runs) = pair(&url, &schema());
        let a = agent.clone();
        let call = tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/r"}))).await });
        let req = listed(&approver, 1).await.remove(0);
        let status =
            std::process::Command::new("sh").arg("-c").arg(format!("{ctl} restart -w -m fast")).status().unwrap();
        assert!(status.success());
        approve_once_back(&approver, &req).await;
        let r = tokio::time::timeout(Duration::from_secs(10), call).await.expect("the call woke").unwrap();
        assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn what_runs_must_pass_the_agents_own_schema_whoever_approved_it() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let runs = Arc::new(AtomicUsize::new(0));
        let strict = Tool::builder("delete_file")
            .parameters(json!({"type": "object", "properties": {"path": {"type": "string", "maxLength": 8}}}))
            .approval(ApprovalMode::Required)
            .editable(true)
            .executor({
                let runs = runs.clone();
                move |_| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok(Value::Null)
                    }
                }
            })
            .build();
        let agent = Gate::builder().store(store(&url, &schema, None)).tool(strict).build().unwrap();
        // The approving process registered a looser version of the tool.
        let approver = Gate::builder()
            .store(store(&url, &schema, None))
            .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
            .build()
            .unwrap();
        let a = agent.clone();
        let call = tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/a"}))).await });
        let req = listed(&approver, 1).await.remove(0);
        approver
            .respond(ConfirmationResponse::approve(&req).with_arguments(json!({"path": "/a/much/longer/path"})))
            .unwrap();
        let r = call.await.unwrap();
        assert_eq!(r.status, ToolStatus::Cancelled, "{r:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let t = Instant::now();
        while agent.record(&req.id).unwrap().state != RecordState::Cancelled {
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", agent.record(&req.id));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

#[test]
fn an_abandoned_call_and_a_closed_gate_end_their_requests_in_the_database() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let (agent, approver, runs) = pair(&url, &schema());
        let a = agent.clone();
        let abandoned =
            tokio::spawn(async move { a.confirm(ToolCall::new("delete_file", json!({"path": "/gone"}))).await });
        let a = agent.clone();
        let open = tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/open"}))).await });
        let reqs = listed(&approver, 2).await;
        abandoned.abort();
        let gone = reqs.iter().find(|r| r.arguments.value()["path"] == "/gone").unwrap();
        let t = Instant::now();
        while approver.record(&gone.id).unwrap().state != RecordState::Cancelled {
            assert!(t.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let late = approver.respond(ConfirmationResponse::approve(gone)).unwrap_err();
        assert_eq!(late.kind(), ErrorKind::AlreadyResolved, "{late}");
        agent.close();
        assert_eq!(open.await.unwrap().status, ToolStatus::Cancelled);
        let other = reqs.iter().find(|r| r.arguments.value()["path"] == "/open").unwrap();
        assert_eq!(approver.record(&other.id).unwrap().state, RecordState::Cancelled);
        assert!(approver.pending().is_empty());
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    });
}

/// Runs SQL against the test database with `psql` (the server's own client), in `schema`.
fn psql(url: &str, schema: &str, sql: &str) {
    let out = std::process::Command::new("psql")
        .arg(url)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c"])
        .arg(format!("SET search_path = {schema}; {sql}"))
        .output()
        .expect("psql runs");
    assert!(out.status.success(), "psql: {}", String::from_utf8_lossy(&out.stderr));
}

/// A row recovery cannot read (written by hand, or by a newer signoff) fails recovery with an
/// error naming it, so that an operator can find it; it is not skipped, since nobody could say
/// whether its call ran. The error used to give the parser's message alone.
#[test]
fn an_unreadable_row_fails_recovery_naming_its_request() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    let owner = format!("owner-{}", uuid::Uuid::new_v4().simple());
    let make = || {
        Gate::builder()
            .store(store(&url, &schema, Some(&owner)))
            .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
            .build()
            .unwrap()
    };
    let gate = make();
    let id = uuid::Uuid::new_v4();
    psql(
        &url,
        &schema,
        &format!(
            "INSERT INTO signoff_requests (id, owner, state, request, created_at_ms, deadline_at)
             VALUES ('{id}', '{owner}', 'approved', '{{\"id\": 1', 0, now() + interval '1 hour')"
        ),
    );
    let e = rt().block_on(async { gate.recover() }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(e.to_string().contains(&id.to_string()), "{e}");
    gate.close();
}

#[test]
fn a_timeout_decided_by_another_hosts_sweeper_reaches_the_waiting_call_as_a_timeout() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let runs = Arc::new(AtomicUsize::new(0));
        let quiet = |owner| {
            PostgresStore::connect(
                &url,
                PostgresOptions {
                    owner: Some(owner),
                    schema: Some(schema.clone()),
                    sweep_interval: Some(Duration::ZERO),
                    ..Default::default()
                },
            )
            .unwrap()
        };
        let agent = Gate::builder()
            .store(quiet("agent".into()))
            .default_timeout(Duration::from_secs(600))
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let a = agent.clone();
        let call = tokio::spawn(async move { a.confirm(ToolCall::new("delete_file", json!({"path": "/slow"}))).await });
        let sweeper = quiet("sweeper".into());
        let t = Instant::now();
        while sweeper.list().is_empty() {
            assert!(t.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // By the database's clock the deadline has passed (this host's clock says 10 minutes are left).
        psql(&url, &schema, "UPDATE signoff_requests SET deadline_at = now() - interval '1 second'");
        assert_eq!(sweeper.sweep().unwrap(), 1);
        assert_eq!(sweeper.sweep().unwrap(), 0, "exactly once");
        let d = tokio::time::timeout(Duration::from_secs(5), call).await.expect("woken").unwrap().unwrap();
        assert_eq!(d.outcome(), Outcome::TimedOut, "{d:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn calls_abandoned_while_their_request_is_being_written_leave_nothing_pending() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let (agent, approver, runs) = pair(&url, &schema());
        let mut calls = Vec::new();
        for i in 0..40u64 {
            let a = agent.clone();
            let call = tokio::spawn(async move {
                a.execute(ToolCall::new("delete_file", json!({"path": format!("/a/{i}")}))).await
            });
            // Abort at different moments: before, during and after the row is written.
            tokio::time::sleep(Duration::from_micros(i * 50)).await;
            call.abort();
            calls.push(call);
        }
        for c in calls {
            let _ = c.await;
        }
        let t = Instant::now();
        loop {
            let left = approver.pending();
            if left.is_empty() {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "{} requests left pending by abandoned calls", left.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn requests_made_on_other_hosts_reach_subscribers_and_approvers_here_live() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    shared_store::requests_made_elsewhere_reach_subscribers_live(&|owner| store(&url, &schema, owner));
}

#[test]
fn a_gate_configured_with_a_store_url_keeps_its_audit_chain_in_the_same_database() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let config = GateConfig::from_json(
            &json!({"storeUrl": url, "storeSchema": schema, "storeOwner": "agent-a", "auditInStore": true}),
            Naming::Camel,
        )
        .unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let agent = config.builder().unwrap().tool(delete_tool(runs.clone())).build().unwrap();
        let approver =
            Gate::builder().store(store(&url, &schema, None)).tool(delete_tool(runs.clone())).build().unwrap();
        let a = agent.clone();
        let call =
            tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/audited"}))).await });
        let req = listed(&approver, 1).await.remove(0);
        approver.respond(ConfirmationResponse::approve(&req)).unwrap();
        assert_eq!(call.await.unwrap().status, ToolStatus::Executed);
        agent.flush_audit();
        let report = verify_chain_postgres(&url, Some(&schema)).unwrap();
        assert!(report.is_intact(), "{report:?}");
        // The request, its outcome and the execution, at least.
        assert!(report.records >= 3, "{report:?}");
        agent.close();
    });
}

#[test]
fn an_answer_while_the_server_is_away_is_refused_as_a_store_error_and_the_call_still_runs_once_after() {
    let Some(url) = url() else { return };
    let Ok(ctl) = std::env::var("SIGNOFF_TEST_POSTGRES_CTL") else {
        eprintln!("skipped: no SIGNOFF_TEST_POSTGRES_CTL to stop the server with");
        return;
    };
    let _alone = SERVER.write().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let (agent, approver, runs) = pair(&url, &schema());
        let a = agent.clone();
        let call = tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/away"}))).await });
        let req = listed(&approver, 1).await.remove(0);
        let sh = |cmd: &str| {
            let st = std::process::Command::new("sh").arg("-c").arg(format!("{ctl} {cmd}")).status().unwrap();
            assert!(st.success(), "{cmd}");
        };
        sh("stop -w -m fast");
        let e = approver.respond(ConfirmationResponse::approve(&req)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{e}");
        sh("start -w");
        approve_once_back(&approver, &req).await;
        let r = tokio::time::timeout(Duration::from_secs(10), call).await.expect("the call woke").unwrap();
        assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_server_that_accepts_and_never_answers_fails_connect_within_its_timeout() {
    // Not PostgreSQL: a socket that takes the connection and says nothing.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let _hold = std::thread::spawn(move || {
        let conns: Vec<_> = silent.incoming().take(4).collect();
        std::thread::sleep(Duration::from_secs(10));
        drop(conns);
    });
    let t = Instant::now();
    let e = PostgresStore::connect(
        &format!("postgres://signoff@127.0.0.1:{port}/signoff?connect_timeout=1"),
        PostgresOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
}

#[test]
fn an_approval_marker_is_accepted_once_across_hosts() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let keys =
        || TokenKeys::new("k1", Secret::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap()).unwrap();
    rt().block_on(async {
        // The agent's own gate, where a person approved the call.
        let local = Gate::builder()
            .deny_when_unobserved(false)
            .tokens(keys())
            .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
            .build()
            .unwrap();
        let _approver = local.on_request_inline(|p| {
            let _ = p.approve_with(None, Scope::Once, Some("alice".into()));
        });
        let d = local.confirm(ToolCall::new("delete_file", json!({"path": "/tmp/m"}))).await.unwrap();
        assert!(d.is_approved());
        let marker = local.approval_marker("fs__delete_file", &d).unwrap();
        // Two proxies on two hosts sharing the keys and the database.
        let schema = schema();
        let proxy = || {
            Gate::builder()
                .deny_when_unobserved(false)
                .tokens(keys())
                .store(store(&url, &schema, None))
                .build()
                .unwrap()
        };
        let (a, b) = (proxy(), proxy());
        let args = json!({"path": "/tmp/m"});
        let (ra, rb) = (
            a.accept_approval_marker(&marker, "fs__delete_file", &args),
            b.accept_approval_marker(&marker, "fs__delete_file", &args),
        );
        assert!(ra.is_ok(), "{ra:?}");
        assert_eq!(rb.unwrap_err().kind(), ErrorKind::AlreadyUsed);
        // Racing from both hosts at once: exactly one accepts.
        let d = local.confirm(ToolCall::new("delete_file", json!({"path": "/tmp/n"}))).await.unwrap();
        let marker = local.approval_marker("fs__delete_file", &d).unwrap();
        let args = json!({"path": "/tmp/n"});
        let race = |g: Gate, m: String, a: Value| {
            std::thread::spawn(move || g.accept_approval_marker(&m, "fs__delete_file", &a))
        };
        let (ta, tb) = (race(a.clone(), marker.clone(), args.clone()), race(b.clone(), marker, args));
        let accepted = [ta.join().unwrap(), tb.join().unwrap()].into_iter().filter(Result::is_ok).count();
        assert_eq!(accepted, 1);
        a.close();
        b.close();
    });
}

/// A PostgreSQL store seen from a host that differs: its `timed_out` changes take 300 ms more
/// (a slow database), or its clock runs `clock_ahead_ms` ahead (the deadlines of the requests
/// it reads back at recovery look that much earlier).
struct Tweaked {
    inner: Arc<PostgresStore>,
    slow_timeouts: bool,
    clock_ahead_ms: u64,
}

impl PendingStore for Tweaked {
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
    fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        self.inner.page(after, limit)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }
    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }
    fn transition(&self, id: &uuid::Uuid, change: StateChange<'_>) -> Result<()> {
        if self.slow_timeouts && change.state == RecordState::TimedOut {
            std::thread::sleep(Duration::from_millis(300));
        }
        self.inner.transition(id, change)
    }
    fn transition_async(&self, id: uuid::Uuid, change: OwnedStateChange) -> StoreFuture<()> {
        self.inner.transition_async(id, change)
    }
    fn cancel_pending(&self, id: &uuid::Uuid) -> Result<()> {
        self.inner.cancel_pending(id)
    }
    fn use_once(&self, id: &uuid::Uuid, expires_at_ms: u64) -> Result<bool> {
        self.inner.use_once(id, expires_at_ms)
    }
    fn record(&self, id: &uuid::Uuid) -> Option<StoredRecord> {
        self.inner.record(id)
    }
    fn try_record(&self, id: &uuid::Uuid) -> Result<Option<StoredRecord>> {
        self.inner.try_record(id)
    }
    fn unfinished(&self) -> Result<Vec<StoredRecord>> {
        let mut records = self.inner.unfinished()?;
        for rec in &mut records {
            let mut r = (*rec.request).clone();
            r.deadline_ms = r.deadline_ms.saturating_sub(self.clock_ahead_ms);
            rec.request = Arc::new(r);
        }
        Ok(records)
    }
    fn restore(&self, r: Arc<ConfirmationRequest>) {
        self.inner.restore(r)
    }
    fn watch(&self, watcher: std::sync::Weak<dyn StoreWatcher>) {
        self.inner.watch(watcher)
    }
    fn time_left(&self, id: &uuid::Uuid) -> Option<Duration> {
        self.inner.time_left(id)
    }
    fn close(&self) {
        self.inner.close()
    }
}

#[test]
fn a_deadline_decided_by_the_database_never_holds_the_calls_thread() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    // One thread: were the store's timeout made inside the call's poll, nothing else would run.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let agent = Gate::builder()
            // No sweeper: the deadline is this gate's to decide.
            .store(Arc::new(Tweaked {
                inner: PostgresStore::connect(
                    &url,
                    PostgresOptions {
                        schema: Some(schema()),
                        sweep_interval: Some(Duration::ZERO),
                        ..Default::default()
                    },
                )
                .unwrap(),
                slow_timeouts: true,
                clock_ahead_ms: 0,
            }))
            .deny_when_unobserved(false)
            .default_timeout(Duration::from_millis(200))
            .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
            .build()
            .unwrap();
        let ticks = Arc::new(AtomicUsize::new(0));
        let t = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                t.fetch_add(1, Ordering::SeqCst);
            }
        });
        let started = Instant::now();
        let d = agent.confirm(ToolCall::new("delete_file", json!({"path": "/x"}))).await.unwrap();
        let took = started.elapsed();
        ticker.abort();
        assert_eq!(d.outcome(), Outcome::TimedOut, "{d:?}");
        assert_eq!(agent.record(&d.request_id().unwrap()).unwrap().state, RecordState::TimedOut);
        assert!(took >= Duration::from_millis(450), "the slow store was used: {took:?}");
        // ~50 ticks in 500 ms; a thread held for 300 ms of them would leave at most ~20.
        let ticked = ticks.load(Ordering::SeqCst);
        assert!(ticked >= 35, "the runtime's only thread was held: {ticked} ticks in {took:?}");
        agent.close();
    });
}

/// Single-use ids are forgotten by the database's clock, an hour after their expiry. Each host
/// judges a token's expiry by its own clock; a host whose clock ran ahead used to delete ids
/// (by its clock, expired) that the other hosts still accepted, so a marker or link could be
/// used twice. Here: an id that expired ten minutes ago (as a host whose clock is ten minutes
/// ahead sees every live one) must outlive another host's next use.
#[test]
fn a_host_whose_clock_runs_ahead_does_not_forget_what_others_still_accept() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let schema = schema();
    let (one, other) = (store(&url, &schema, None), store(&url, &schema, None));
    let now = signoff::event::now_ms();
    let used = uuid::Uuid::new_v4();
    assert!(one.use_once(&used, now - 600_000).unwrap());
    // Another host uses another id: its clean-up runs.
    assert!(other.use_once(&uuid::Uuid::new_v4(), now + 60_000).unwrap());
    assert!(!one.use_once(&used, now + 60_000).unwrap(), "the id was forgotten and accepted again");
    assert!(!other.use_once(&used, now + 60_000).unwrap());
    // Long expired (by the database's clock, past the hour): forgotten.
    let old = uuid::Uuid::new_v4();
    assert!(one.use_once(&old, now - 2 * 3_600_000).unwrap());
    assert!(other.use_once(&uuid::Uuid::new_v4(), now + 60_000).unwrap());
    assert!(one.use_once(&old, now + 60_000).unwrap(), "what expired long ago is forgotten");
}

/// The agent's own authenticator judges approvals recorded by other processes too: another
/// gate on the same database, configured without approvers, used to let anyone's approval run
/// the agent's call past the agent's rule.
#[test]
fn an_approval_recorded_elsewhere_must_pass_the_agents_own_approvers() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let runs = Arc::new(AtomicUsize::new(0));
        let agent = Gate::builder()
            .store(store(&url, &schema, None))
            .deny_when_unobserved(false)
            .authenticator(Arc::new(Approvers::new().allow("delete_file", ["alice"])))
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let loose = Gate::builder()
            .store(store(&url, &schema, None))
            .deny_when_unobserved(false)
            .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
            .build()
            .unwrap();
        for (who, runs_after) in [("bob", 0), ("alice", 1)] {
            let a = agent.clone();
            let call =
                tokio::spawn(async move { a.execute(ToolCall::new("delete_file", json!({"path": "/tmp/p"}))).await });
            let req = listed(&loose, 1).await.pop().unwrap();
            let answer = ConfirmationResponse::approve(&req).with_responder(who);
            // The agent's own gate refuses bob at once; the loose one records his approval.
            if who == "bob" {
                assert_eq!(agent.respond(answer.clone()).unwrap_err().kind(), ErrorKind::Unauthorized);
            }
            assert_eq!(loose.respond(answer).unwrap(), Outcome::Approved);
            let r = call.await.unwrap();
            assert_eq!(runs.load(Ordering::SeqCst), runs_after, "{who}: {r:?}");
            if who == "bob" {
                assert_eq!(r.status, ToolStatus::Cancelled, "{r:?}");
                // Recorded off the call's path, a moment later.
                let t = Instant::now();
                while agent.record(&req.id).unwrap().state != RecordState::Cancelled {
                    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", agent.record(&req.id));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            } else {
                assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
            }
        }
        agent.close();
        loose.close();
    });
}

/// Polls `f` once: whether it is still waiting.
async fn still_waiting<F: std::future::Future + Unpin>(f: &mut F) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx).is_pending())).await
}

/// A cancel and an approval from another host, racing: exactly one of them holds, everywhere.
/// A cancel after the approval committed loses (the call gets the approval; `cancel_request`
/// says false) and the approval stays recorded. A cancel used to overwrite a committed approval
/// (`cancelled` in the store, the call cancelled) after its approver had been told `approved`,
/// or the store said `cancelled` while the call was told to run.
#[test]
fn a_cancel_and_an_approval_from_another_host_never_both_hold() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let (agent, approver, _runs) = pair(&url, &schema);
        // The approval committed first (the agent's call not polled since it wrote its request).
        let mut f: std::pin::Pin<Box<dyn std::future::Future<Output = Result<Decision>> + Send>> =
            Box::pin(agent.confirm(ToolCall::new("delete_file", json!({"path": "/tmp/b"}))));
        assert!(still_waiting(&mut f).await);
        let req = listed(&approver, 1).await.pop().unwrap();
        assert_eq!(approver.respond(ConfirmationResponse::approve(&req)).unwrap(), Outcome::Approved);
        assert!(!agent.cancel_request(&req.id), "the approval came first");
        assert!(f.await.unwrap().is_approved());
        // Racing.
        for i in 0..40u64 {
            let mut f: std::pin::Pin<Box<dyn std::future::Future<Output = Result<Decision>> + Send>> =
                Box::pin(agent.confirm(ToolCall::new("delete_file", json!({"path": format!("/tmp/c{i}")}))));
            assert!(still_waiting(&mut f).await);
            let req = listed(&approver, 1).await.pop().unwrap();
            let (ap, r) = (approver.clone(), req.clone());
            let answer = std::thread::spawn(move || ap.respond(ConfirmationResponse::approve(&r)));
            std::thread::sleep(Duration::from_micros((i % 20) * 50));
            let cancelled = agent.cancel_request(&req.id);
            let approved = answer.join().unwrap().is_ok();
            let d = f.await.unwrap();
            assert!(cancelled != approved, "{i}: cancel {cancelled}, approval {approved}");
            assert_eq!(d.is_approved(), approved, "{i}: {d:?}");
            // `confirm` hands the approved call to its caller: recorded `released`.
            let want = if approved { RecordState::Released } else { RecordState::Cancelled };
            let t = std::time::Instant::now();
            while approver.record(&req.id).map(|r| r.state) != Some(want) {
                assert!(t.elapsed() < Duration::from_secs(5), "{i}: {:?}", approver.record(&req.id));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        agent.close();
        approver.close();
    });
}

/// A TCP proxy in front of the server (see [`freezing_proxy`]).
struct Proxy {
    /// The server's URL through the proxy.
    url: String,
    /// Set: every connection, open or new, is kept open and forwards nothing more either way (a
    /// database that hangs).
    frozen: Arc<std::sync::atomic::AtomicBool>,
    /// Raised: the connections open then go silent that way, and later ones are forwarded (a
    /// dropped NAT entry, a partition: the peer neither answers nor closes).
    silenced: Arc<AtomicUsize>,
}

impl Proxy {
    fn silence_open_connections(&self) {
        self.silenced.fetch_add(1, Ordering::SeqCst);
    }
}

/// A TCP proxy in front of the server that can stop forwarding while keeping connections open.
fn freezing_proxy(url: &str) -> Proxy {
    use std::io::{Read, Write};
    let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let silenced = Arc::new(AtomicUsize::new(0));
    let (head, rest) = url.rsplit_once(':').unwrap();
    let (port, tail) = rest.split_once('/').unwrap();
    let target = format!("{}:{port}", head.rsplit_once('@').map_or(head, |(_, h)| h).trim_start_matches("postgres://"));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("{head}:{}/{tail}", listener.local_addr().unwrap().port());
    let (f, s) = (frozen.clone(), silenced.clone());
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = std::net::TcpStream::connect(&target) else { return };
            let epoch = s.load(Ordering::SeqCst);
            for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                let (f, s) = (f.clone(), s.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        // Frozen or silenced: swallowed, and the connection left open.
                        let quiet = f.load(Ordering::SeqCst) || s.load(Ordering::SeqCst) > epoch;
                        if !quiet && to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    Proxy { url: proxy_url, frozen, silenced }
}

/// A store with a short operation timeout, through `proxy`.
fn store_via(proxy: &Proxy, schema: &str) -> Arc<PostgresStore> {
    PostgresStore::connect(
        &proxy.url,
        PostgresOptions {
            schema: Some(schema.to_owned()),
            operation_timeout: Some(Duration::from_secs(1)),
            ..Default::default()
        },
    )
    .unwrap()
}

/// An agent's gate on `agent` and an approver's gate on `approver` (stores of one database)
/// that approves every request made elsewhere at once; the agent's tool counts its runs.
fn agent_and_approver(
    agent: Arc<PostgresStore>,
    approver: Arc<PostgresStore>,
) -> (Gate, Gate, ApproverGuard, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Gate::builder().store(agent).tool(delete_tool(runs.clone())).build().unwrap();
    let approver = Gate::builder().store(approver).tool(delete_tool(Arc::new(AtomicUsize::new(0)))).build().unwrap();
    let auto = approver.on_request_inline(|p| {
        let _ = p.approve();
    });
    (agent, approver, auto, runs)
}

/// `delete_file` of `path` through `agent`, which must end within 30 s.
async fn delete(agent: &Gate, path: &str) -> ToolResult {
    let call = agent.execute(ToolCall::new("delete_file", json!({ "path": path })));
    tokio::time::timeout(Duration::from_secs(30), call).await.expect("the call ends")
}

/// A store whose connections went silent (open, nothing answered or closed: a dropped NAT
/// entry, a partition) fails the operation waiting on one within its operation timeout, and the
/// next calls run on new connections: their requests are written and announced, and the
/// decision made on another host reaches them. The silent connection used to be handed to every
/// later operation, each failing after 30 s, for as long as the kernel kept it open (hours);
/// its notifications were never sent at all.
#[test]
fn a_store_whose_connections_went_silent_runs_the_next_calls_on_new_ones() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let proxy = freezing_proxy(&url);
    rt().block_on(async {
        let schema = schema();
        let (agent, approver, _auto, runs) = agent_and_approver(store_via(&proxy, &schema), store(&url, &schema, None));
        assert_eq!(delete(&agent, "/before").await.status, ToolStatus::Executed);

        proxy.silence_open_connections();
        let t = Instant::now();
        let r = delete(&agent, "/silent").await;
        assert_ne!(r.status, ToolStatus::Executed, "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(10), "failed after {:?}", t.elapsed());
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        let r = delete(&agent, "/after").await;
        assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        approver.close();
    });
}

/// An approver whose connections went silent while it waited for requests hears of new ones
/// again: its listening connection is checked, and replaced, every few seconds. Before, nothing
/// it waited for needed a read, so nothing noticed: requests made elsewhere never reached it.
#[test]
fn an_approver_whose_connections_went_silent_hears_of_new_requests_again() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let proxy = freezing_proxy(&url);
    rt().block_on(async {
        let schema = schema();
        let (agent, approver, _auto, runs) = agent_and_approver(store(&url, &schema, None), store_via(&proxy, &schema));
        assert_eq!(delete(&agent, "/before").await.status, ToolStatus::Executed);
        proxy.silence_open_connections();
        let r = delete(&agent, "/after").await;
        assert_eq!(r.status, ToolStatus::Executed, "{r:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        approver.close();
    });
}

/// Closing a gate whose database hangs (connections open, no answers) with calls waiting: each
/// call's cancellation waits for the database up to its timeout, side by side. They used to
/// wait one after the other, a minute each, so closing with many calls waiting took an hour.
#[test]
fn closing_with_a_hung_database_waits_one_timeout_not_one_per_call() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let proxy = freezing_proxy(&url);
    let (proxied, frozen) = (proxy.url.clone(), proxy.frozen.clone());
    rt().block_on(async {
        let gate = Gate::builder()
            .store(store(&proxied, &schema(), None))
            .deny_when_unobserved(false)
            .default_timeout(Duration::from_secs(3600))
            .tool(delete_tool(Arc::new(AtomicUsize::new(0))))
            .build()
            .unwrap();
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let g = gate.clone();
                tokio::spawn(async move {
                    g.execute(ToolCall::new("delete_file", json!({"path": format!("/tmp/h{i}")}))).await
                })
            })
            .collect();
        listed(&gate, 4).await;
        frozen.store(true, Ordering::SeqCst);
        let t = Instant::now();
        let g = gate.clone();
        tokio::task::spawn_blocking(move || g.close()).await.unwrap();
        let took = t.elapsed();
        for c in calls {
            assert_eq!(c.await.unwrap().status, ToolStatus::Cancelled);
        }
        // One database timeout is 30 s, and a failed cancellation reads the row once more: about
        // a minute in all, against four before.
        assert!(took < Duration::from_secs(100), "close took {took:?}");
    });
}

/// Recovery on a host whose clock runs ahead of the database's: a request whose deadline has
/// passed by this host's clock but not by the database's cannot be timed out yet. Recovery used
/// to stop there with a `store` error, leaving every later record (an interrupted call among
/// them) unhandled, and could not be run again. Now the request waits again, until its deadline
/// by the database's clock, and the rest is recovered.
#[test]
fn recovery_on_a_host_whose_clock_runs_ahead_restores_what_the_database_still_holds_open() {
    let Some(url) = url() else { return };
    let _server = SERVER.read().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        let schema = schema();
        let runs = Arc::new(AtomicUsize::new(0));
        let first = store(&url, &schema, Some("agent-9"));
        let g1 = Gate::builder()
            .store(first.clone())
            .deny_when_unobserved(false)
            .default_timeout(Duration::from_secs(60))
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let mut calls = Vec::new();
        for p in ["/wait", "/run", "/approved-meanwhile"] {
            let g = g1.clone();
            calls.push(tokio::spawn(async move {
                let _ = g.confirm(ToolCall::new("delete_file", json!({"path": p}))).await;
            }));
        }
        let reqs = listed(&g1, 3).await;
        let (run, wait) = (for_path(&reqs, "/run"), for_path(&reqs, "/wait"));
        dies_while_running(first, g1, calls, &run);
        // While the agent is down, someone approves one of its requests elsewhere.
        let meanwhile = for_path(&reqs, "/approved-meanwhile");
        let elsewhere =
            Gate::builder().store(store(&url, &schema, None)).tool(delete_tool(runs.clone())).build().unwrap();
        elsewhere.respond(ConfirmationResponse::approve(&meanwhile)).unwrap();

        // The process restarts on a host whose clock is 90 s ahead: both deadlines look passed.
        let second =
            Tweaked { inner: store(&url, &schema, Some("agent-9")), slow_timeouts: false, clock_ahead_ms: 90_000 };
        let g2 = Gate::builder()
            .store(Arc::new(second))
            .deny_when_unobserved(false)
            .tool(delete_tool(runs.clone()))
            .build()
            .unwrap();
        let report = g2.recover().unwrap();
        // The call that was running, and the one approved elsewhere while the process was down:
        // both interrupted, never run.
        assert_eq!(report.interrupted.len(), 2, "{report:?}");
        assert_eq!(g2.record(&run.id).unwrap().state, RecordState::Interrupted);
        assert_eq!(g2.record(&meanwhile.id).unwrap().state, RecordState::Interrupted);
        assert!(report.timed_out.is_empty(), "{report:?}");
        assert_eq!(report.restored.len(), 1, "{report:?}");
        assert_eq!(report.restored[0].id, wait.id);
        // Still waiting (by the database's clock), and approved from elsewhere it runs once.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(g2.record(&wait.id).unwrap().state, RecordState::Pending);
        elsewhere.respond(ConfirmationResponse::approve(&wait)).unwrap();
        let t = Instant::now();
        while g2.record(&wait.id).unwrap().state != RecordState::Done {
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", g2.record(&wait.id));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        elsewhere.close();
        g2.close();
    });
}
