//! An approved call while the upstream has it, and an approval asked while the upstream changes,
//! with rmcp's own clients and in-process rmcp upstreams (over in-memory pipes): an upstream that
//! never answers is cancelled there (`notifications/cancelled`) at its call timeout and the model
//! is told the outcome is unknown; a client that cancels its `tools/call` while the upstream runs
//! it has the upstream's request cancelled too, in every way of asking (in the call, on a
//! 2026-07-28 retry, on the identical retry of a call approved elsewhere), and the audit records
//! how the call ended; and a definition that changes (or a tool that goes away) while the person's
//! form is still open in a 2025-era call cancels the request, so a later approve runs nothing; one
//! announced and not listed yet when the person approves is listed before the call would run, which
//! then runs only if its tool did not change.

mod common;
use common::client::{Answering, Slow, lifecycle};
use common::{Shifty, Stuck, Wired, keyed, reaches, text, wire, wire_timed, write};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest, InputResponses,
    ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, PeerRequestOptions, RequestHandle, RunningService};
use signoff::{AuditKind, AuditRecord, Gate, MemoryAuditSink, TokenResponse};
use signoff_mcp::INPUT_KEY;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A `tools/call` the client can cancel (`notifications/cancelled`), as a person pressing stop.
async fn cancellable<C: rmcp::Service<RoleClient>>(
    client: &RunningService<RoleClient, C>,
    p: CallToolRequestParams,
) -> RequestHandle<RoleClient> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(p));
    client.peer().send_cancellable_request(request, PeerRequestOptions::no_options()).await.expect("tools/call sent")
}

/// A 2026-07-28 call's first round (an `InputRequiredResult`), then its retry carrying the
/// person's answer, sent so that it can be cancelled.
async fn approved_retry<C: rmcp::Service<RoleClient>>(
    client: &RunningService<RoleClient, C>,
    person: &Answering,
) -> RequestHandle<RoleClient> {
    let CallToolResponse::InputRequired(first) = client.call_tool_once(write("a")).await.expect("tools/call") else {
        panic!("a 2026-07-28 client with elicitation gets an InputRequiredResult");
    };
    let answer = serde_json::to_value(&person.answer).unwrap();
    let mut retry = write("a").with_request_state(first.request_state.expect("a requestState"));
    retry.input_responses = Some(InputResponses::from([(INPUT_KEY.to_owned(), answer)]));
    cancellable(client, retry).await
}

/// The audit's `execution` records, waiting (up to 10 s) until there are `n`.
async fn executions(audit: &MemoryAuditSink, n: usize) -> Vec<AuditRecord> {
    for _ in 0..1000 {
        let ran: Vec<_> = audit.records().into_iter().filter(|r| r.kind == AuditKind::Execution).collect();
        if ran.len() >= n {
            return ran;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {n} execution records: {:?}", audit.records());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_answers_is_cancelled_at_its_call_timeout_and_the_outcome_told_unknown() {
    let up = Stuck::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let person = Answering::approve(ProtocolVersion::V_2025_06_18);
    let lifecycle = lifecycle(&person.version);
    let w = wire_timed(up.clone(), &gate, person.clone(), lifecycle, Some(Duration::from_millis(400))).await;
    // Without a bound the call (and the client) would wait forever.
    let r = tokio::time::timeout(Duration::from_secs(10), w.client.call_tool(write("a")))
        .await
        .expect("the call ends at the upstream's call timeout, not never")
        .expect("tools/call");
    assert_eq!((person.asked(), up.runs.load(Ordering::SeqCst)), (1, 1));
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("may or may not have run") && said.contains("did not answer in time"), "{said}");
    assert!(said.contains("400 ms") && said.contains("Do not repeat it blindly"), "{said}");
    assert!(!said.contains("did not run") && !said.contains("ran and failed"), "{said}");
    // The upstream was told: its handler's request was cancelled.
    assert!(reaches(&up.cancelled, 1).await, "the upstream was not sent notifications/cancelled");
    let ran = executions(&audit, 1).await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0].decision.as_deref(), Some("error"));
    let reason = ran[0].reason.as_deref().unwrap_or_default();
    assert!(reason.contains("did not answer in time") && reason.contains("whether the tool ran is unknown"), "{ran:?}");
    assert!(gate.pending().is_empty());
    gate.close();
}

/// The last `tools/call` of an approved call (`handle`) is cancelled by the
/// client once the upstream has it: the upstream's request is cancelled too, and the audit
/// records the call's end as an `error` saying whether the tool ran is unknown.
async fn cancelled_while_running(up: &Stuck, gate: &Gate, audit: &MemoryAuditSink, handle: RequestHandle<RoleClient>) {
    assert!(reaches(&up.runs, 1).await, "the approved call never reached the upstream");
    handle.cancel(Some("the user pressed stop".into())).await.expect("notifications/cancelled sent");
    assert!(
        reaches(&up.cancelled, 1).await,
        "the client cancelled the call, but the upstream's request was not cancelled"
    );
    let ran = executions(audit, 1).await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0].decision.as_deref(), Some("error"), "{ran:?}");
    let reason = ran[0].reason.as_deref().unwrap_or_default();
    assert!(reason.contains("the client cancelled the call") && reason.contains("unknown"), "{ran:?}");
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);
    assert!(gate.pending().is_empty());
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancelling_a_call_approved_in_the_call_cancels_it_upstream() {
    let up = Stuck::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let person = Answering::approve(ProtocolVersion::V_2025_11_25);
    let w = wire(up.clone(), &gate, person.clone(), lifecycle(&person.version)).await;
    let handle = cancellable(&w.client, write("a")).await;
    cancelled_while_running(&up, &gate, &audit, handle).await;
    assert_eq!(person.asked(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancelling_a_2026_retry_while_it_runs_cancels_it_upstream() {
    let up = Stuck::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let person = Answering::approve(ProtocolVersion::V_2026_07_28);
    let w = wire(up.clone(), &gate, person.clone(), lifecycle(&person.version)).await;
    let handle = approved_retry(&w.client, &person).await;
    cancelled_while_running(&up, &gate, &audit, handle).await;
}

/// Under a session grant a 2026-07-28 call runs at once, in its first round: cancelled by the
/// client, it is cancelled upstream too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancelling_a_2026_call_run_under_a_session_grant_cancels_it_upstream() {
    let up = Stuck::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let person = Answering::approve_session(ProtocolVersion::V_2026_07_28);
    let w = wire(up.clone(), &gate, person.clone(), lifecycle(&person.version)).await;
    // Approved for the session (the first call is then cancelled while it runs).
    let handle = approved_retry(&w.client, &person).await;
    assert!(reaches(&up.runs, 1).await);
    handle.cancel(None).await.unwrap();
    assert!(reaches(&up.cancelled, 1).await);
    // The next call runs under the grant, without asking.
    let handle = cancellable(&w.client, write("b")).await;
    assert!(reaches(&up.runs, 2).await, "the call under the grant never reached the upstream");
    assert!(audit.records().iter().any(|r| r.kind == AuditKind::Bypass), "{:?}", audit.records());
    handle.cancel(Some("the user pressed stop".into())).await.unwrap();
    assert!(reaches(&up.cancelled, 2).await, "the call under the grant was not cancelled upstream");
    let ran = executions(&audit, 2).await;
    assert!(ran.iter().all(|r| r.decision.as_deref() == Some("error")), "{ran:?}");
    assert!(ran.iter().all(|r| r.reason.as_deref().is_some_and(|r| r.contains("the client cancelled"))), "{ran:?}");
    let requests = audit.records().into_iter().filter(|r| r.kind == AuditKind::Request).count();
    assert_eq!(requests, 1, "the call under the grant asked again");
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancelling_the_identical_retry_of_a_call_approved_elsewhere_cancels_it_upstream() {
    let up = Stuck::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let w = wire(up.clone(), &gate, (), ClientLifecycleMode::Initialize).await;
    let r = w.client.call_tool(write("a")).await.expect("tools/call");
    assert!(text(&r).contains("pending elsewhere"), "{}", text(&r));
    let request = gate.pending()[0].clone();
    let token = gate.issue_token(&request.id, "alice").unwrap();
    gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
    let handle = cancellable(&w.client, write("a")).await;
    cancelled_while_running(&up, &gate, &audit, handle).await;
}

/// A proxy over `up` with `gate`, asked through a [`Slow`] person.
async fn slow_person(up: &Shifty, gate: &Gate) -> (Wired<Shifty, Slow>, Slow) {
    let person = Slow::default();
    (wire(up.clone(), gate, person.clone(), ClientLifecycleMode::Initialize).await, person)
}

/// Calls `write` through `w`; once `person` is asked (within 30 s: a call may list its upstream
/// first for up to 10 s), does `then`, which decides whether and when the person answers.
async fn call_asked_then<T>(
    w: &Wired<Shifty, Slow>,
    person: &Slow,
    then: impl Future<Output = T>,
) -> (CallToolResult, T) {
    let call = w.client.call_tool(write("a"));
    let meanwhile = async {
        let asked = async {
            while person.asked.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), asked).await.expect("the person was never asked");
        then.await
    };
    let (r, t) = tokio::join!(call, meanwhile);
    (r.expect("tools/call"), t)
}

/// The person's form is open when the upstream changes `write` (`change`), announces it, and the
/// proxy lists it again; the person then approves. Nothing runs: the request was cancelled when
/// the change was seen, the model is told why, and the audit records the change (`notice`) and
/// the request's end (`cancelled`), with no execution.
async fn changed_while_the_form_is_open(change: impl FnOnce(&Shifty), notice: &str) {
    let up = Shifty::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let (w, person) = slow_person(&up, &gate).await;
    let (r, request) = call_asked_then(&w, &person, async {
        let request = gate.pending()[0].id;
        change(&up);
        w.server.peer().notify_tool_list_changed().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The proxy lists the upstream again (here for tools/list) while the form is open.
        w.client.list_all_tools().await.unwrap();
        // The client is told to close the form (`notifications/cancelled`).
        assert!(reaches(&person.withdrawn, 1).await, "the voided question was not withdrawn");
        // The person approves what they were shown all the same.
        person.release.notify_one();
        request
    })
    .await;
    // The approve may still be on its way: give it the time to (not) run the call.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.runs.load(Ordering::SeqCst), 0, "a call approved for the old definition ran");
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(
        said.contains("did not run") && said.contains("changed its tools while approval was being asked"),
        "{said}"
    );
    assert!(said.contains("make it again"), "{said}");
    let records = audit.records();
    let noted: Vec<_> = records.iter().filter(|r| r.decision.as_deref() == Some(notice)).collect();
    assert_eq!(noted.len(), 1, "{records:?}");
    let ended: Vec<_> =
        records.iter().filter(|r| r.request_id == Some(request) && r.kind == AuditKind::Outcome).collect();
    assert_eq!(ended.len(), 1, "{records:?}");
    assert_eq!(ended[0].decision.as_deref(), Some("cancelled"), "{records:?}");
    assert!(!records.iter().any(|r| r.kind == AuditKind::Execution), "{records:?}");
    assert!(!records.iter().any(|r| r.kind == AuditKind::Response), "nobody's answer counted: {records:?}");
    assert!(gate.pending().is_empty());
    gate.close();
}

/// The person's form is open when someone approves the request elsewhere (a console, a token):
/// the call runs once, and the client is told to close the form (`notifications/cancelled` for
/// its `elicitation/create`), whose later answer counts for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_still_open_when_the_request_is_decided_elsewhere_is_withdrawn() {
    let up = Shifty::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let (w, person) = slow_person(&up, &gate).await;
    let (r, ()) = call_asked_then(&w, &person, async {
        let request = gate.pending()[0].clone();
        gate.respond(signoff::ConfirmationResponse::approve(&request).with_responder("alice")).unwrap();
    })
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert!(reaches(&person.withdrawn, 1).await, "the question was not withdrawn");
    // The person's late answer changes nothing.
    person.release.notify_one();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);
    let responses = audit.records().into_iter().filter(|r| r.kind == AuditKind::Response).count();
    assert_eq!(responses, 1, "only alice's answer counted");
    gate.close();
}

/// A form answered in time is not withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_answered_is_not_withdrawn() {
    let up = Shifty::default();
    let gate = keyed().build().unwrap();
    let (w, person) = slow_person(&up, &gate).await;
    let (r, ()) = call_asked_then(&w, &person, async { person.release.notify_one() }).await;
    assert_eq!(r.is_error, Some(false));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(person.withdrawn.load(Ordering::SeqCst), 0);
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_changed_while_the_form_is_open_runs_nothing_when_approved() {
    changed_while_the_form_is_open(|up| up.version.store(1, Ordering::SeqCst), "definition-changed").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_gone_while_the_form_is_open_runs_nothing_when_approved() {
    changed_while_the_form_is_open(|up| up.gone.store(true, Ordering::SeqCst), "definition-removed").await
}

/// One call to `write` whose person, once asked, waits while `change` is made to the upstream
/// and announced (`notifications/tools/list_changed`, which reaches the proxy; nothing makes it
/// list the upstream again), then approves. The call's result, and the proxy's client.
async fn approved_after_an_announced_change(
    up: &Shifty,
    gate: &Gate,
    change: impl FnOnce(&Shifty),
) -> (CallToolResult, Wired<Shifty, Slow>) {
    let (w, person) = slow_person(up, gate).await;
    let (r, ()) = call_asked_then(&w, &person, async {
        change(up);
        w.server.peer().notify_tool_list_changed().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        person.release.notify_one();
    })
    .await;
    (r, w)
}

/// The upstream changes `write` while the person's form is open; the approved call lists it
/// first, sees the change and runs nothing (before, it ran the new definition of a tool the
/// person had been shown the old one of).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_after_an_announced_change_not_yet_listed_runs_nothing() {
    let up = Shifty::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let (r, w) = approved_after_an_announced_change(&up, &gate, |up| up.version.store(1, Ordering::SeqCst)).await;
    assert_eq!(up.runs.load(Ordering::SeqCst), 0, "a call approved for the old definition ran");
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("did not run") && said.contains("changed the tool's definition"), "{said}");
    let records = audit.records();
    assert!(records.iter().any(|r| r.decision.as_deref() == Some("definition-changed")), "{records:?}");
    // The proxy now offers the tool as it is.
    let tools = w.client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.description.as_deref() == Some("Writes (version 1)")), "{tools:?}");
    gate.close();
}

/// An announced change that leaves `write` as it was: the call approved meanwhile runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_after_an_announced_change_that_left_the_tool_alone_runs() {
    let up = Shifty::default();
    let gate = keyed().build().unwrap();
    let (r, _w) = approved_after_an_announced_change(&up, &gate, |_| {}).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);
    gate.close();
}

/// An announced change whose listing fails (the upstream takes longer than the proxy waits for a
/// listing, 10 s): the call approved meanwhile runs nothing, and the model is told what would run
/// is not known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_after_an_announced_change_that_cannot_be_listed_runs_nothing() {
    let up = Shifty::default();
    let gate = keyed().build().unwrap();
    let (r, _w) =
        approved_after_an_announced_change(&up, &gate, |up| up.list_delay_ms.store(12_000, Ordering::SeqCst)).await;
    assert_eq!(up.runs.load(Ordering::SeqCst), 0, "a call ran though what would run was not known");
    let said = text(&r);
    assert!(said.contains("did not run") && said.contains("could not be listed again"), "{said}");
    gate.close();
}

/// A change announced before the call came, whose listing fails: the call is asked about the
/// definition known then (every approval given before was voided), and, approved, it runs, as
/// every call does until the upstream is listed again; only a change announced while a call
/// waits keeps it from running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_made_after_a_listing_failed_runs_when_approved() {
    let up = Shifty::default();
    let gate = keyed().build().unwrap();
    let (w, person) = slow_person(&up, &gate).await;
    // Longer than the proxy waits for a listing (10 s): the call's own listing fails.
    up.list_delay_ms.store(12_000, Ordering::SeqCst);
    w.server.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (r, ()) = call_asked_then(&w, &person, async { person.release.notify_one() }).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);
    gate.close();
}
