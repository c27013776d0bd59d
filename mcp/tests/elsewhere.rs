//! A client that cannot be asked, with rmcp's own client and an in-process rmcp upstream (over
//! in-memory pipes): the request stays pending in the gate, is approved with a signed token, and
//! then one identical retry runs the upstream exactly once.

mod common;
use common::{Counter, Erring, Shifty, Wired, keyed, text, wire, write};
use rmcp::RoleClient;
use rmcp::ServerHandler;
use rmcp::model::CallToolResult;
use rmcp::service::{ClientLifecycleMode, RunningService};
use signoff::{Gate, TokenResponse};
use signoff_mcp::Risk;
use std::sync::atomic::Ordering;
use std::time::Duration;

async fn call(client: &RunningService<RoleClient, ()>, text: &str) -> CallToolResult {
    client.call_tool(write(text)).await.expect("tools/call")
}

/// Calls `write("a")`, approves it for the session elsewhere (by token), and checks that its
/// identical retry runs.
async fn granted_for_the_session(client: &RunningService<RoleClient, ()>, gate: &Gate) {
    call(client, "a").await;
    let request = gate.pending()[0].clone();
    let token = gate.issue_token(&request.id, "alice").unwrap();
    gate.respond_token(&token, TokenResponse::approve("alice").for_session()).unwrap();
    let r = call(client, "a").await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
}

/// The upstream, the gate's proxy, and rmcp's client declaring no elicitation.
async fn wire_unaskable<S: ServerHandler + Clone>(upstream: S, gate: &Gate) -> Wired<S, ()> {
    wire(upstream, gate, (), ClientLifecycleMode::Initialize).await
}

fn keyed_gate() -> Gate {
    keyed().build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_elsewhere_then_approved_by_token_then_one_identical_retry_runs_once() {
    let runs = Counter::default();
    let gate = keyed().default_timeout(Duration::from_secs(30)).build().unwrap();
    // Downstream: rmcp's client, which declares no elicitation.
    let Wired { mcp, server: _server, proxy: _proxy, client } = wire_unaskable(runs.clone(), &gate).await;
    let gating = mcp.gating("up__write").unwrap();
    assert!(gating.approval);
    assert_eq!((gating.risk, gating.shown), (Risk::L4, Risk::L3));

    let r = call(&client, "a").await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("pending elsewhere"), "{}", text(&r));
    assert_eq!(runs.0.load(Ordering::SeqCst), 0);

    let pending = gate.pending();
    assert_eq!(pending.len(), 1);
    let request = pending[0].clone();
    assert_eq!(&*request.tool, "up__write");
    assert_eq!(request.metadata["risk"], "L3");
    // The client's own name and version (`clientInfo`): the console's label for the session.
    assert_eq!(request.metadata["client"], "rmcp 3.11.0");
    // Gated by default, not configured: the reason is the core's own, never "always requires".
    assert!(!request.reasons.iter().any(|r| r.contains("always requires")), "{:?}", request.reasons);
    assert_eq!(request.metadata["mcp"]["server"], "up");

    // Before approval, the identical retry is still pending and runs nothing.
    let r = call(&client, "a").await;
    assert!(text(&r).contains(&request.id.to_string()), "{}", text(&r));
    assert_eq!(gate.pending().len(), 1);
    assert_eq!(runs.0.load(Ordering::SeqCst), 0);

    // Approved elsewhere, with a signed token.
    let token = gate.issue_token(&request.id, "alice").unwrap();
    gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "approval alone runs nothing");

    // A retry with other arguments is another call: a new request, nothing runs.
    let r = call(&client, "b").await;
    assert!(text(&r).contains("pending elsewhere"));
    assert_eq!(runs.0.load(Ordering::SeqCst), 0);

    // The identical retry runs, once.
    let r = call(&client, "a").await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(text(&r), "wrote \"a\" (run 1)");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);

    // And only once: the next identical call is a new request.
    let r = call(&client, "a").await;
    assert!(text(&r).contains("pending elsewhere"));
    assert!(!text(&r).contains(&request.id.to_string()));
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_elsewhere_but_retried_after_the_deadline_runs_nothing() {
    let runs = Counter::default();
    let audit = signoff::MemoryAuditSink::new();
    let gate = keyed().default_timeout(Duration::from_millis(300)).audit(audit.clone()).build().unwrap();
    let Wired { mcp: _mcp, server: _server, proxy: _proxy, client } = wire_unaskable(runs.clone(), &gate).await;

    let r = call(&client, "a").await;
    assert!(text(&r).contains("pending elsewhere"), "{}", text(&r));
    let request = gate.pending()[0].clone();
    let token = gate.issue_token(&request.id, "alice").unwrap();
    gate.respond_token(&token, TokenResponse::approve("alice")).expect("approved before the deadline");

    // The deadline passes with the call approved and not retried.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let r = call(&client, "a").await;
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("did not run") && said.contains("deadline"), "{said}");
    assert!(!said.contains("ran and failed"), "{said}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "a retry after the deadline runs nothing");
    let ran = audit.records().into_iter().filter(|r| r.kind == signoff::AuditKind::Execution).collect::<Vec<_>>();
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0].decision.as_deref(), Some("error"));
    assert!(ran[0].reason.as_deref().is_some_and(|r| r.contains("not retried before its deadline")), "{ran:?}");

    // The next identical call is a new request, pending again.
    let r = call(&client, "a").await;
    assert!(text(&r).contains("pending elsewhere") && !text(&r).contains(&request.id.to_string()), "{}", text(&r));
    assert_eq!(runs.0.load(Ordering::SeqCst), 0);
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_elsewhere_then_denied_tells_the_reason_and_runs_nothing() {
    let runs = Counter::default();
    let gate = keyed_gate();
    let Wired { mcp, server: _server, proxy: _proxy, client } = wire_unaskable(runs.clone(), &gate).await;

    call(&client, "a").await;
    assert_eq!(mcp.deferred_count(), 1);
    let request = gate.pending()[0].clone();
    let token = gate.issue_token(&request.id, "alice").unwrap();
    gate.respond_token(&token, TokenResponse::deny("alice", Some("not today".into()))).unwrap();
    // Nothing is kept for a denied call, retried or not (its entry used to stay until a retry,
    // for the life of the proxy when none came).
    let t = std::time::Instant::now();
    while mcp.deferred_count() > 0 {
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "the denied call's entry is kept");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let r = call(&client, "a").await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("not today"), "{}", text(&r));
    assert_eq!(runs.0.load(Ordering::SeqCst), 0);
    gate.close();
}

/// Approves the one pending request by token, as someone elsewhere would.
fn approve_elsewhere(gate: &Gate) {
    let pending = gate.pending();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let token = gate.issue_token(&pending[0].id, "alice").unwrap();
    gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_dies_mid_call_gives_an_error_not_a_success() {
    let runs = Counter::hanging();
    let audit = signoff::MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let Wired { mcp: _mcp, server, proxy: _proxy, client } = wire_unaskable(runs.clone(), &gate).await;

    call(&client, "a").await;
    approve_elsewhere(&gate);
    let counter = runs.0.clone();
    let killer = tokio::spawn(async move {
        while counter.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The upstream has the call and dies before answering.
        let _ = server.cancel().await;
    });
    let r = call(&client, "a").await;
    killer.await.unwrap();
    assert_eq!(r.is_error, Some(true));
    // Delivered, then the connection died: whether it ran is not known, and that is what is said.
    let said = text(&r);
    assert!(said.contains("went away during the call") && said.contains("whether the tool ran is unknown"), "{said}");
    assert!(!said.contains("ran and failed") && !said.contains("did not run"), "{said}");

    // A later call to the upstream that is gone never leaves the proxy: it did not run, and says so.
    call(&client, "b").await;
    approve_elsewhere(&gate);
    let r = call(&client, "b").await;
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(
        said.contains("did not run") && said.contains("could not be reached, so the call was not delivered"),
        "{said}"
    );
    assert!(!said.contains("ran and failed") && !said.contains("unknown"), "{said}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1, "only the first call reached the upstream");

    // The audit: each an `error` execution with the true reason.
    let ran: Vec<_> = audit.records().into_iter().filter(|r| r.kind == signoff::AuditKind::Execution).collect();
    let reasons: Vec<_> =
        ran.iter().map(|r| (r.decision.as_deref(), r.reason.as_deref().unwrap_or_default())).collect();
    assert_eq!(reasons.len(), 2, "{ran:?}");
    assert!(reasons[0].0 == Some("error") && reasons[0].1.contains("whether the tool ran is unknown"), "{ran:?}");
    assert!(reasons[1].0 == Some("error") && reasons[1].1.contains("the call was not delivered"), "{ran:?}");
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_upstream_definition_voids_the_session_grant() {
    let up = Shifty::default();
    let audit = signoff::MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let Wired { mcp: _mcp, server, proxy: _proxy, client } = wire_unaskable(up.clone(), &gate).await;

    // Approved for the session (elsewhere, by token), then the identical retry runs.
    granted_for_the_session(&client, &gate).await;
    // The grant covers the next call of the tool in this session.
    let r = call(&client, "b").await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(up.runs.load(Ordering::SeqCst), 2);

    // The upstream changes the tool's definition and says so.
    up.version.store(1, Ordering::SeqCst);
    server.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let r = call(&client, "c").await;
    assert!(text(&r).contains("pending elsewhere"), "the grant was not voided: {}", text(&r));
    assert_eq!(up.runs.load(Ordering::SeqCst), 2);
    let listed = client.list_all_tools().await.unwrap();
    assert_eq!(listed[0].description.as_deref(), Some("Writes (version 1)"));
    // Pinned when first seen, the change recorded in the same audit, and the grant's revocation.
    let records = audit.records();
    let noted = |what: &str| records.iter().filter(|r| r.decision.as_deref() == Some(what)).count();
    assert_eq!(noted("definition-pinned"), 1, "{records:?}");
    assert_eq!(noted("definition-changed"), 1, "{records:?}");
    let changed = records.iter().find(|r| r.decision.as_deref() == Some("definition-changed")).unwrap();
    assert_eq!(changed.tool.as_deref(), Some("up__write"));
    assert!(records.iter().any(|r| r.kind == signoff::AuditKind::Grant && r.decision.as_deref() == Some("revoked")));
    gate.close();
}

/// A tool whose name a person could misread is not offered, and the rest of its server is: the
/// proxy used to refuse to start (blaming the tool's input schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_a_deceptive_name_is_left_out_not_its_server() {
    let up = Shifty::default();
    up.odd_name.store(true, Ordering::SeqCst);
    let gate = keyed().build().unwrap();
    let Wired { mcp: _mcp, server: _server, proxy: _proxy, client } = wire_unaskable(up.clone(), &gate).await;
    let listed: Vec<String> = client.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(listed, ["up__write"]);
    assert_eq!(gate.tools().len(), 1);
    gate.close();
}

/// A call that comes while the proxy lists a changed upstream's tools waits for that listing:
/// it used to find the change already taken (the flag cleared when the listing began) and run
/// the changed tool on the session grant given for the old definition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_during_the_listing_after_a_change_waits_for_it_and_the_old_grant_is_void() {
    let up = Shifty::default();
    let gate = keyed().build().unwrap();
    let Wired { mcp: _mcp, server, proxy: _proxy, client } = wire_unaskable(up.clone(), &gate).await;
    granted_for_the_session(&client, &gate).await;
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);

    // The definition changes; listing it again takes a while.
    up.version.store(1, Ordering::SeqCst);
    up.list_delay_ms.store(600, Ordering::SeqCst);
    server.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = call(&client, "c");
    let second = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        call(&client, "d").await
    };
    let (first, second) = tokio::join!(first, second);
    for r in [&first, &second] {
        assert!(text(r).contains("pending elsewhere"), "the old grant was used: {}", text(r));
    }
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_errors_from_the_upstream_say_whether_the_call_ran() {
    let up = Erring::default();
    let audit = signoff::MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let Wired { mcp: _mcp, server: _server, proxy: _proxy, client } = wire_unaskable(up.clone(), &gate).await;
    // Refused before it ran (invalid params): it did not run, and the model is told so.
    call(&client, "bad").await;
    approve_elsewhere(&gate);
    let r = call(&client, "bad").await;
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("did not run") && said.contains("refused the call") && said.contains("may not be"), "{said}");
    assert!(!said.contains("ran and failed"), "{said}");
    assert_eq!(up.0.load(Ordering::SeqCst), 0);
    // An internal error after it started: whether it ran is unknown, never "did not run".
    call(&client, "crash").await;
    approve_elsewhere(&gate);
    let r = call(&client, "crash").await;
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("may or may not have run") && said.contains("half way"), "{said}");
    assert!(!said.contains("did not run") && !said.contains("ran and failed"), "{said}");
    assert_eq!(up.0.load(Ordering::SeqCst), 1);
    let reasons: Vec<_> = audit
        .records()
        .into_iter()
        .filter(|r| r.kind == signoff::AuditKind::Execution)
        .map(|r| r.reason.unwrap_or_default())
        .collect();
    assert!(reasons.len() == 2 && reasons[0].contains("-32602") && reasons[1].contains("-32603"), "{reasons:?}");
    gate.close();
}
