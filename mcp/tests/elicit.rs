//! rmcp's own client declaring elicitation and answering it, in each protocol era: in 2025-06-18
//! and 2025-11-25 the gate asks by `elicitation/create` inside the call; in 2026-07-28 it returns
//! an `InputRequiredResult`, which rmcp's `call_tool` answers through the same handler and retries
//! with `inputResponses` and the `requestState`. The upstream is an in-process rmcp server that
//! counts its runs. Then the 2026-07-28 retries the gate refuses (swapped arguments, a tampered
//! state, an expired one, a changed definition), each recorded in the audit.

mod common;
use common::client::{Answering, CLIENT_NAME, lifecycle};
use common::{Counter, Shifty, Wired, keyed, text, wire, write};
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, InputResponses, ProtocolVersion};
use rmcp::service::RunningService;
use signoff::{AuditKind, AuditRecord, Gate, MemoryAuditSink, TokenResponse};
use signoff_mcp::INPUT_KEY;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A gate with an in-memory audit, the counting upstream, and `person` connected in its era.
struct Setup {
    gate: Gate,
    audit: Arc<MemoryAuditSink>,
    runs: Counter,
    person: Answering,
    wired: Wired<Counter, Answering>,
}

async fn setup(person: Answering, timeout: Duration) -> Setup {
    let audit = MemoryAuditSink::new();
    let gate = keyed().default_timeout(timeout).audit(audit.clone()).build().unwrap();
    let runs = Counter::default();
    let wired = wire(runs.clone(), &gate, person.clone(), lifecycle(&person.version)).await;
    Setup { gate, audit, runs, person, wired }
}

impl Setup {
    async fn new(person: Answering) -> Setup {
        setup(person, Duration::from_secs(30)).await
    }

    /// A call as a client makes it (rmcp's `call_tool`, which drives 2026-07-28 input rounds).
    async fn call(&self, text: &str) -> CallToolResult {
        self.wired.client.call_tool(write(text)).await.expect("tools/call")
    }

    fn runs(&self) -> usize {
        self.runs.0.load(Ordering::SeqCst)
    }

    /// Every request the gate published came from this client in its era (so the era under
    /// test is the one the gate saw).
    fn assert_era(&self) {
        let records = self.audit.records();
        let requests: Vec<_> = records.iter().filter(|r| r.kind == AuditKind::Request).collect();
        assert!(!requests.is_empty(), "{records:?}");
        for r in requests {
            let mcp = &r.metadata.as_ref().expect("request metadata")["mcp"];
            assert_eq!(mcp["era"], self.person.version.as_str(), "{r:?}");
            assert_eq!(mcp["client"], CLIENT_NAME, "{r:?}");
        }
    }
}

async fn approve_once_runs_once(version: ProtocolVersion) {
    let s = Setup::new(Answering::approve(version)).await;
    let r = s.call("a").await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(text(&r), "wrote \"a\" (run 1)");
    assert_eq!((s.runs(), s.person.asked()), (1, 1));
    // Once: the next call asks again.
    let r = s.call("a").await;
    assert_eq!(text(&r), "wrote \"a\" (run 2)");
    assert_eq!((s.runs(), s.person.asked()), (2, 2));
    assert!(s.gate.pending().is_empty());
    s.assert_era();
    s.gate.close();
}

async fn approve_for_the_session_asks_once(version: ProtocolVersion) {
    let s = Setup::new(Answering::approve_session(version)).await;
    let r = s.call("a").await;
    assert_eq!(text(&r), "wrote \"a\" (run 1)");
    assert_eq!((s.runs(), s.person.asked()), (1, 1));
    // Another call of the tool in the same session runs without asking.
    let r = s.call("b").await;
    assert_eq!(text(&r), "wrote \"b\" (run 2)");
    assert_eq!((s.runs(), s.person.asked()), (2, 1));
    let records = s.audit.records();
    assert!(records.iter().any(|r| r.kind == AuditKind::Grant && r.decision.as_deref() == Some("granted")));
    assert!(records.iter().any(|r| r.kind == AuditKind::Bypass), "the second call ran under the grant");
    s.assert_era();
    s.gate.close();
}

async fn deny_with_a_reason_runs_nothing_and_tells_the_reason(version: ProtocolVersion) {
    let s = Setup::new(Answering::deny(version, "not on a Friday")).await;
    let r = s.call("a").await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("declined") && text(&r).contains("not on a Friday"), "{}", text(&r));
    assert_eq!((s.runs(), s.person.asked()), (0, 1));
    let records = s.audit.records();
    let outcome = records.iter().find(|r| r.kind == AuditKind::Outcome).expect("an outcome");
    assert_eq!(outcome.decision.as_deref(), Some("denied"), "{outcome:?}");
    assert!(!records.iter().any(|r| r.kind == AuditKind::Execution));
    s.assert_era();
    s.gate.close();
}

/// `cancel` (the person dismissed the form) cancels the request: not a person's denial, in the
/// audit or in what the model reads.
async fn cancel_cancels_the_request_and_runs_nothing(version: ProtocolVersion) {
    let s = Setup::new(Answering::cancel(version)).await;
    let r = s.call("a").await;
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("was cancelled") && said.contains("did not run"), "{said}");
    assert!(!said.contains("declined"), "a cancellation is not a person's denial: {said}");
    assert_eq!((s.runs(), s.person.asked()), (0, 1));
    assert!(s.gate.pending().is_empty(), "nothing is left pending");
    let records = s.audit.records();
    let outcomes: Vec<_> = records.iter().filter(|r| r.kind == AuditKind::Outcome).collect();
    assert_eq!(outcomes.len(), 1, "{records:?}");
    assert_eq!(outcomes[0].decision.as_deref(), Some("cancelled"), "{records:?}");
    assert!(!records.iter().any(|r| r.kind == AuditKind::Response), "nobody answered it: {records:?}");
    assert!(!records.iter().any(|r| r.kind == AuditKind::Execution));
    s.assert_era();
    s.gate.close();
}

/// Each scenario as a test in one era.
macro_rules! in_era {
    ($era:ident, $version:expr) => {
        mod $era {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn approve_once_runs_once() {
                super::approve_once_runs_once($version).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn approve_for_the_session_asks_once() {
                super::approve_for_the_session_asks_once($version).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn deny_with_a_reason_runs_nothing_and_tells_the_reason() {
                super::deny_with_a_reason_runs_nothing_and_tells_the_reason($version).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cancel_cancels_the_request_and_runs_nothing() {
                super::cancel_cancels_the_request_and_runs_nothing($version).await
            }
        }
    };
}

in_era!(legacy_2025_06_18, ProtocolVersion::V_2025_06_18);
in_era!(legacy_2025_11_25, ProtocolVersion::V_2025_11_25);
in_era!(modern_2026_07_28, ProtocolVersion::V_2026_07_28);

// Refused 2026-07-28 retries: the first round by hand (`call_tool_once`), the retry carrying the
// client's own answer and a state the test changes, swaps or lets expire.

/// The first round of a 2026-07-28 call: the `requestState` and the client's answer to the form.
async fn first_round(client: &RunningService<RoleClient, Answering>, text: &str) -> (String, InputResponses) {
    let CallToolResponse::InputRequired(r) = client.call_tool_once(write(text)).await.expect("tools/call") else {
        panic!("a 2026-07-28 client with elicitation gets an InputRequiredResult");
    };
    let asks = r.input_requests.expect("input requests");
    assert_eq!(asks.keys().collect::<Vec<_>>(), [INPUT_KEY]);
    let answer = serde_json::to_value(&client.service().answer).unwrap();
    (r.request_state.expect("a requestState"), InputResponses::from([(INPUT_KEY.to_owned(), answer)]))
}

async fn retry(client: &RunningService<RoleClient, Answering>, p: CallToolRequestParams) -> CallToolResult {
    match client.call_tool_once(p).await.expect("tools/call") {
        CallToolResponse::Complete(r) => r,
        other => panic!("a retry gets a final result: {other:?}"),
    }
}

fn retried(text: &str, state: &str, answer: &InputResponses) -> CallToolRequestParams {
    let mut p = write(text).with_request_state(state);
    p.input_responses = Some(answer.clone());
    p
}

/// The one `request-state-refused` notice: for `up__write`, starting with `why`, naming the
/// client and the era, and carrying neither the state nor anything of it.
fn refusal(records: &[AuditRecord], why: &str, state: &str) -> AuditRecord {
    let refusals: Vec<_> =
        records.iter().filter(|r| r.decision.as_deref() == Some("request-state-refused")).cloned().collect();
    assert_eq!(refusals.len(), 1, "{records:?}");
    let r = refusals.into_iter().next().unwrap();
    assert_eq!(r.kind, AuditKind::Notice);
    assert_eq!(r.tool.as_deref(), Some("up__write"));
    let detail = r.reason.clone().unwrap_or_default();
    assert!(detail.starts_with(why), "{detail}");
    assert!(detail.contains(&format!("client {CLIENT_NAME:?}")) && detail.contains("era 2026-07-28"), "{detail}");
    let sealed_parts = state.split('.').filter(|p| p.len() > 8);
    assert!(sealed_parts.clone().all(|p| !detail.contains(p)), "the state leaked into the audit: {detail}");
    assert!(!detail.contains("so1"), "a token leaked into the audit: {detail}");
    r
}

fn refused(r: &CallToolResult, why: &str) {
    assert_eq!(r.is_error, Some(true));
    assert!(text(r).contains("refused and did not run") && text(r).contains(why), "{}", text(r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_swapped_arguments_is_refused_and_audited() {
    let s = Setup::new(Answering::approve(ProtocolVersion::V_2026_07_28)).await;
    let client = &s.wired.client;
    let (state, answer) = first_round(client, "benign").await;
    let r = retry(client, retried("evil", &state, &answer)).await;
    refused(&r, "arguments differ");
    assert_eq!(s.runs(), 0);
    refusal(&s.audit.records(), "arguments differ", &state);
    assert!(!s.audit.records().iter().any(|r| r.kind == AuditKind::Execution));
    // The refusal consumed nothing: the honest retry still runs, once.
    let r = retry(client, retried("benign", &state, &answer)).await;
    assert_eq!(text(&r), "wrote \"benign\" (run 1)");
    s.gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_request_state_is_refused_and_audited() {
    let s = Setup::new(Answering::approve(ProtocolVersion::V_2026_07_28)).await;
    let client = &s.wired.client;
    let (state, answer) = first_round(client, "a").await;
    // One character of the tag changed (the first, all of whose bits count).
    let at = state.rfind('.').unwrap() + 1;
    let flipped = if &state[at..=at] == "A" { "B" } else { "A" };
    let tampered = format!("{}{flipped}{}", &state[..at], &state[at + 1..]);
    let r = retry(client, retried("a", &tampered, &answer)).await;
    refused(&r, "tampered");
    assert_eq!(s.runs(), 0);
    refusal(&s.audit.records(), "tampered", &tampered);
    assert!(!s.audit.records().iter().any(|r| r.kind == AuditKind::Execution));
    assert_eq!(s.gate.pending().len(), 1, "the request is still pending, untouched");
    s.gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_request_state_is_refused_and_audited() {
    let s = setup(Answering::approve(ProtocolVersion::V_2026_07_28), Duration::from_millis(300)).await;
    let client = &s.wired.client;
    let (state, answer) = first_round(client, "a").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let r = retry(client, retried("a", &state, &answer)).await;
    refused(&r, "expired");
    assert_eq!(s.runs(), 0);
    refusal(&s.audit.records(), "expired", &state);
    assert!(!s.audit.records().iter().any(|r| r.kind == AuditKind::Execution));
    s.gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_parked_when_the_definition_changes_is_cancelled_and_its_state_refused() {
    let up = Shifty::default();
    let audit = MemoryAuditSink::new();
    let gate = keyed().audit(audit.clone()).build().unwrap();
    let person = Answering::approve(ProtocolVersion::V_2026_07_28);
    let w = wire(up.clone(), &gate, person.clone(), lifecycle(&person.version)).await;
    let (state, answer) = first_round(&w.client, "a").await;
    let request = gate.pending()[0].id;
    up.version.store(1, Ordering::SeqCst);
    w.server.peer().notify_tool_list_changed().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The proxy lists the upstream again (here for tools/list): the call parked between the two
    // rounds is cancelled at once, not left pending until its deadline.
    let listed = w.client.list_all_tools().await.unwrap();
    assert_eq!(listed[0].description.as_deref(), Some("Writes (version 1)"));
    assert!(gate.pending().is_empty(), "the parked call's request is still pending: {:?}", gate.pending());
    let records = audit.records();
    let ended: Vec<_> =
        records.iter().filter(|r| r.request_id == Some(request) && r.kind == AuditKind::Outcome).collect();
    assert_eq!(ended.len(), 1, "{records:?}");
    assert_eq!(ended[0].decision.as_deref(), Some("cancelled"), "{records:?}");
    // Its retry is refused as before, and nothing runs.
    let r = retry(&w.client, retried("a", &state, &answer)).await;
    refused(&r, "definition changed");
    assert_eq!(up.runs.load(Ordering::SeqCst), 0);
    refusal(&audit.records(), "definition changed", &state);
    assert!(!audit.records().iter().any(|r| r.kind == AuditKind::Execution));
    gate.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelling_retry_of_a_call_approved_elsewhere_releases_it_and_runs_nothing() {
    let s = Setup::new(Answering::cancel(ProtocolVersion::V_2026_07_28)).await;
    let client = &s.wired.client;
    let (state, answer) = first_round(client, "a").await;
    // Someone approves it elsewhere (a console, by token) while the client is away.
    let request = s.gate.pending()[0].clone();
    let token = s.gate.issue_token(&request.id, "alice").unwrap();
    s.gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
    // The person here dismisses the form: the call is released now, not held until its deadline
    // (30 s), and runs nothing.
    let r = tokio::time::timeout(Duration::from_secs(10), retry(client, retried("a", &state, &answer)))
        .await
        .expect("released at once");
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("did not run") && said.contains("released"), "{said}");
    assert_eq!(s.runs(), 0);
    let ran: Vec<_> = s.audit.records().into_iter().filter(|r| r.kind == AuditKind::Execution).collect();
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0].decision.as_deref(), Some("error"));
    assert!(ran[0].reason.as_deref().is_some_and(|r| r.contains("the upstream was not contacted")), "{ran:?}");
    // The state is spent: a replay is refused and runs nothing.
    let r = retry(client, retried("a", &state, &answer)).await;
    refused(&r, "already used");
    assert_eq!(s.runs(), 0);
    s.gate.close();
}
