//! rmcp's own client declaring elicitation and answering it, in each protocol era: in 2025-06-18
//! and 2025-11-25 the gate asks by `elicitation/create` inside the call; in 2026-07-28 it returns
//! an `InputRequiredResult`, which rmcp's `call_tool` answers through the same handler and retries
//! with `inputResponses` and the `requestState`. The upstream is an in-process rmcp server that
//! counts its runs.

mod common;
use common::client::{Answering, CLIENT_NAME, lifecycle};
use common::{Counter, Wired, keyed, text, wire, write};
use rmcp::model::{CallToolResult, ProtocolVersion};
use signoff::{AuditKind, Gate, MemoryAuditSink};
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

async fn cancel_denies_and_runs_nothing(version: ProtocolVersion) {
    let s = Setup::new(Answering::cancel(version)).await;
    let r = s.call("a").await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("did not run"), "{}", text(&r));
    assert_eq!((s.runs(), s.person.asked()), (0, 1));
    assert!(s.gate.pending().is_empty(), "nothing is left pending");
    let records = s.audit.records();
    let outcome = records.iter().find(|r| r.kind == AuditKind::Outcome).expect("an outcome");
    assert!(matches!(outcome.decision.as_deref(), Some("cancelled" | "denied")), "{outcome:?}");
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
            async fn cancel_denies_and_runs_nothing() {
                super::cancel_denies_and_runs_nothing($version).await
            }
        }
    };
}

in_era!(legacy_2025_06_18, ProtocolVersion::V_2025_06_18);
in_era!(legacy_2025_11_25, ProtocolVersion::V_2025_11_25);
in_era!(modern_2026_07_28, ProtocolVersion::V_2026_07_28);
