//! Many gates on one shared SQLite file (`store_url = "sqlite:<path>"`), as agents and approvers
//! in several processes of one machine use it: the scenarios every shared store passes
//! (`shared_store/`: answered elsewhere and run once, racing answers, deadlines, live events),
//! and what is the SQLite store's own: a gone agent's requests time out, single use across
//! processes, the lock against a single-process store, `store_url = "sqlite:..."`. Each gate has
//! its own connection and its own thread following the file, exactly as a separate process does
//! (cli/tests/console.rs runs the same store across real processes).

mod shared_store;

use serde_json::json;
use shared_store::{delete_tool, listed, rt};
use signoff::*;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn store(path: &Path, owner: Option<&str>) -> Arc<SqliteSharedStore> {
    let options =
        SqliteSharedOptions { owner: owner.map(str::to_owned), sweep_interval: Some(Duration::from_millis(200)) };
    SqliteSharedStore::open(path, options).unwrap()
}

/// Runs a shared-store scenario on a fresh file.
fn on_a_file(scenario: fn(shared_store::Open<'_>)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    scenario(&|owner| store(&path, owner));
}

#[test]
fn a_request_made_in_one_process_is_answered_in_another_and_runs_once() {
    on_a_file(shared_store::answered_elsewhere_runs_once);
}

#[test]
fn a_denial_an_edit_and_a_session_grant_made_elsewhere_reach_the_agent() {
    on_a_file(shared_store::denial_edit_and_grant_made_elsewhere_reach_the_agent);
}

#[test]
fn racing_answers_from_many_processes_resolve_each_request_once() {
    on_a_file(shared_store::racing_answers_resolve_each_request_once);
}

#[test]
fn deadlines_hold_and_late_answers_are_refused() {
    on_a_file(shared_store::deadlines_hold_and_late_answers_are_refused);
}

#[test]
fn requests_made_elsewhere_reach_subscribers_and_approvers_here_live() {
    on_a_file(shared_store::requests_made_elsewhere_reach_subscribers_live);
}

#[test]
fn the_requests_of_an_agent_that_is_gone_time_out_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signoff.db");
    let gone = store(&path, Some("gone-agent"));
    let ids = shared_store::left_by_a_gone_agent(&*gone, 50);
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
