//! Behaviour of the gate: decisions, every fail-safe path, every rejected response.

mod common;
use common::*;
use serde_json::json;
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio_stream::Stream;

#[tokio::test(start_paused = true)]
async fn ungated_call_returns_at_once_without_touching_the_bus() {
    let g = gate();
    let mut sub = g.subscribe();
    let d = g.confirm(ToolCall::new("read_file", json!({"path": "/etc/hosts"}))).await.unwrap();
    assert_eq!(
        d,
        Decision::Approved {
            request_id: None,
            arguments: json!({"path": "/etc/hosts"}),
            edited: false,
            by: ApprovedBy::NotGated,
            scope: Scope::Once,
            responder: None
        }
    );
    assert!(drain(&mut sub).await.is_empty(), "nothing may be published for an ungated call");
}

#[tokio::test(start_paused = true)]
async fn approve_runs_the_original_arguments() {
    let g = gate();
    let mut sub = g.subscribe();
    let call = g.confirm(del("/home/a").call_id("call_1").metadata(json!({"turn": 3})));
    let answer = async {
        let req = next_request(&mut sub).await;
        assert_eq!(&*req.tool, "delete_file");
        assert_eq!(&*req.description, "Deletes a file");
        assert_eq!(req.arguments, json!({"path": "/home/a"}));
        assert_eq!(req.tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(&*req.session_id, DEFAULT_SESSION);
        assert_eq!(req.metadata, json!({"turn": 3}));
        assert_eq!(req.timeout_ms, 60_000);
        assert_eq!(req.deadline_ms, req.created_at_ms + 60_000);
        assert!(req.editable);
        assert_eq!(&*req.prompt, "Allow `delete_file` to run with these arguments?");
        assert_eq!(req.arguments_digest, display::arguments_digest(&json!({"path": "/home/a"})));
        assert!(req.reasons.iter().any(|r| r.contains("delete")));
        assert_eq!(g.pending().len(), 1);
        assert_eq!(g.respond(ConfirmationResponse::approve(&req).with_responder("alice")).unwrap(), Outcome::Approved);
        req.id
    };
    let (d, id) = tokio::join!(call, answer);
    let d = d.unwrap();
    assert_eq!(
        d,
        Decision::Approved {
            request_id: Some(id),
            arguments: json!({"path": "/home/a"}),
            edited: false,
            by: ApprovedBy::Person,
            scope: Scope::Once,
            responder: Some("alice".into())
        }
    );
    assert!(g.pending().is_empty());
    let kinds: Vec<_> = drain(&mut sub).await.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["confirmation-response", "confirmation-resolved"]);
}

#[tokio::test(start_paused = true)]
async fn deny_carries_the_reason_and_the_model_is_told_not_to_retry() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    let exec = g.execute(del("/home/a").call_id("c9"));
    let answer = async {
        let req = next_request(&mut sub).await;
        g.respond(ConfirmationResponse::deny(&req, Some("that is my thesis".into())).with_responder("bob")).unwrap();
    };
    let (r, ()) = tokio::join!(exec, answer);
    assert_eq!(r.status, ToolStatus::Denied);
    assert_eq!(r.call_id.as_deref(), Some("c9"));
    assert!(r.content.contains("declined"), "{}", r.content);
    assert!(r.content.contains("did not run"));
    assert!(r.content.contains("Do not retry"));
    assert!(r.content.contains("that is my thesis"));
    assert!(
        matches!(r.decision, Some(Decision::Denied { ref reason, ref responder, .. }) if reason.as_deref() == Some("that is my thesis") && responder.as_deref() == Some("bob"))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn timeout_denies_and_is_reported_as_a_timeout_not_a_denial() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    let start = tokio::time::Instant::now();
    let r = g.execute(del("/x")).await;
    assert_eq!(start.elapsed(), Duration::from_secs(60), "default timeout is 60 s");
    assert_eq!(r.status, ToolStatus::TimedOut);
    assert!(
        r.content.contains("Nobody approved") && r.content.contains("60 s") && r.content.contains("did not run"),
        "{}",
        r.content
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let events = drain(&mut sub).await;
    let kinds: Vec<_> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["confirmation-request", "confirmation-timeout", "confirmation-resolved"]);
    let Event::ConfirmationResolved(res) = &events[2] else { unreachable!() };
    assert_eq!(res.outcome, Outcome::TimedOut);
    assert_eq!(res.responder, None);
    // A response after the timeout is `expired`.
    let e = g.respond(ConfirmationResponse::by_id(res.id, ResponseDecision::Approve)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Expired);
}

#[tokio::test(start_paused = true)]
async fn timeouts_are_configurable_globally_and_per_tool() {
    let g = gate_with(Gate::builder().default_timeout(Duration::from_secs(2)), Arc::new(AtomicUsize::new(0)));
    let _sub = g.subscribe();
    let t = tokio::time::Instant::now();
    assert!(matches!(g.confirm(del("/x")).await.unwrap(), Decision::TimedOut { timeout_ms: 2000, .. }));
    assert_eq!(t.elapsed(), Duration::from_secs(2));
    let t = tokio::time::Instant::now();
    assert!(matches!(
        g.confirm(ToolCall::new("send_email", json!({}))).await.unwrap(),
        Decision::TimedOut { timeout_ms: 5000, .. }
    ));
    assert_eq!(t.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn an_earlier_deadline_queued_after_a_later_one_fires_on_time() {
    // The gate keeps one timer for every waiting call: a call with a shorter timeout that starts
    // while the timer sleeps until a later deadline must still end at its own.
    let g = gate_with(Gate::builder().default_timeout(Duration::from_secs(2)), Arc::new(AtomicUsize::new(0)));
    let _sub = g.subscribe();
    let t = tokio::time::Instant::now();
    let long = async {
        let d = g.confirm(ToolCall::new("send_email", json!({}))).await.unwrap();
        (d, t.elapsed())
    };
    let short = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let d = g.confirm(del("/x")).await.unwrap();
        (d, t.elapsed())
    };
    let ((long, long_at), (short, short_at)) = tokio::join!(long, short);
    assert!(matches!(short, Decision::TimedOut { timeout_ms: 2000, .. }), "{short:?}");
    assert_eq!(short_at, Duration::from_millis(2_500));
    assert!(matches!(long, Decision::TimedOut { timeout_ms: 5000, .. }), "{long:?}");
    assert_eq!(long_at, Duration::from_secs(5));
}

/// The decision of a call spawned on `rt`, which must end within 5 s (else `why`).
fn ended_within_5s(
    rt: &tokio::runtime::Runtime,
    call: tokio::task::JoinHandle<signoff::Result<Decision>>,
    why: &str,
) -> Decision {
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), call).await }).expect(why).unwrap().unwrap()
}

#[test]
fn deadlines_still_end_calls_after_the_runtime_that_ran_the_gates_timer_shut_down() {
    let g = gate_with(Gate::builder().default_timeout(Duration::from_millis(300)), Arc::new(AtomicUsize::new(0)));
    let _sub = g.subscribe();
    let wait_for_pending = |n: usize| {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while g.pending_count() < n {
            assert!(std::time::Instant::now() < until, "{} pending, expected {n}", g.pending_count());
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // The first call to wait starts the gate's timer on its runtime.
    let first = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let g1 = g.clone();
    first.spawn(async move { g1.confirm(ToolCall::new("send_email", json!({}))).await });
    wait_for_pending(1);
    let second = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let g2 = g.clone();
    let short = second.spawn(async move { g2.confirm(del("/x")).await });
    wait_for_pending(2);
    // That runtime goes away with the timer's task; the call waiting on the other must still end
    // at its deadline, not wait forever.
    drop(first);
    let d = ended_within_5s(&second, short, "the call waited past its deadline: nobody ran the timer");
    assert!(matches!(d, Decision::TimedOut { timeout_ms: 300, .. }), "{d:?}");
}

/// A runtime that is alive but not driven (a current-thread runtime between two `block_on`s, as
/// behind a synchronous facade) must not hold other runtimes' calls past their deadline: with one
/// timer task per gate living there, a call on another runtime waited until that runtime was
/// driven again or dropped (forever, in the first case below).
#[test]
fn deadlines_end_calls_while_the_runtime_that_first_needed_a_timer_sits_idle() {
    let g = gate_with(Gate::builder().default_timeout(Duration::from_millis(200)), Arc::new(AtomicUsize::new(0)));
    let _sub = g.subscribe();
    // Runtime A runs one call to its deadline, then stays alive, idle.
    let idle = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let d = idle.block_on(g.confirm(del("/a"))).unwrap();
    assert!(matches!(d, Decision::TimedOut { timeout_ms: 200, .. }), "{d:?}");
    // A call on runtime B (spawned: B's own worker drives it).
    let other = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let g2 = g.clone();
    let call = other.spawn(async move { g2.confirm(del("/b")).await });
    let d = ended_within_5s(&other, call, "the call on runtime B waited past its deadline while runtime A sat idle");
    assert!(matches!(d, Decision::TimedOut { timeout_ms: 200, .. }), "{d:?}");
    // A thread of its own with a current-thread runtime, while A's thread is not driving A.
    let g3 = g.clone();
    let took = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let t = std::time::Instant::now();
        let d = rt.block_on(g3.confirm(del("/c"))).unwrap();
        assert!(matches!(d, Decision::TimedOut { timeout_ms: 200, .. }), "{d:?}");
        t.elapsed()
    })
    .join()
    .unwrap();
    assert!(took < Duration::from_secs(2), "a 200 ms deadline ended the call after {took:?}");
    assert_eq!(g.pending_count(), 0);
    drop(idle);
}

#[tokio::test(start_paused = true)]
async fn response_just_before_the_deadline_wins_and_just_after_is_expired() {
    let g = gate_with(Gate::builder().default_timeout(Duration::from_secs(10)), Arc::new(AtomicUsize::new(0)));
    let mut sub = g.subscribe();
    let call = g.confirm(del("/x"));
    let answer = async {
        let req = next_request(&mut sub).await;
        tokio::time::sleep(Duration::from_millis(9_999)).await;
        g.respond(ConfirmationResponse::approve(&req)).unwrap()
    };
    let (d, o) = tokio::join!(call, answer);
    assert!(d.unwrap().is_approved());
    assert_eq!(o, Outcome::Approved);

    // At the deadline exactly, the response is expired even if the timer has not fired yet.
    let call = g.confirm(del("/y"));
    let answer = async {
        let req = next_request(&mut sub).await;
        tokio::time::advance(Duration::from_secs(10)).await;
        g.respond(ConfirmationResponse::approve(&req)).unwrap_err().kind()
    };
    let (d, k) = tokio::join!(call, answer);
    assert_eq!(k, ErrorKind::Expired);
    assert!(matches!(d.unwrap(), Decision::TimedOut { .. }));
}

#[tokio::test(start_paused = true)]
async fn no_subscriber_denies_at_once() {
    let g = gate();
    let r = g.execute(del("/x")).await;
    assert_eq!(r.status, ToolStatus::Cancelled);
    assert!(matches!(r.decision, Some(Decision::Cancelled { reason: CancelReason::NoApprover, .. })));
    assert!(r.content.contains("no one was available") && r.content.contains("did not run"), "{}", r.content);
    assert!(g.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn last_subscriber_leaving_denies_pending_requests() {
    let g = gate();
    let sub = g.subscribe();
    let sub2 = g.subscribe();
    let call = tokio::spawn({
        let g = g.clone();
        async move { g.confirm(del("/x")).await }
    });
    tokio::task::yield_now().await;
    while g.pending().is_empty() {
        tokio::task::yield_now().await;
    }
    drop(sub);
    assert_eq!(g.pending().len(), 1, "one subscriber is still there");
    drop(sub2);
    let d = call.await.unwrap().unwrap();
    assert!(matches!(d, Decision::Cancelled { reason: CancelReason::NoApprover, .. }), "{d:?}");
}

#[tokio::test(start_paused = true)]
async fn without_deny_when_unobserved_a_request_waits_for_a_remote_answer() {
    let g = gate_with(Gate::builder().deny_when_unobserved(false), Arc::new(AtomicUsize::new(0)));
    let call = tokio::spawn({
        let g = g.clone();
        async move { g.confirm(del("/x")).await }
    });
    while g.pending().is_empty() {
        tokio::task::yield_now().await;
    }
    let req = g.pending()[0].clone();
    g.respond(ConfirmationResponse::approve(&req)).unwrap();
    assert!(call.await.unwrap().unwrap().is_approved());
}

/// An edit of `null` is no edit, in every language (it reads so in the JSON form): a denial
/// carrying it is a denial, an approval of a tool that is not editable runs what was shown.
#[tokio::test(start_paused = true)]
async fn an_edit_of_null_is_no_edit() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    for (decision, expect) in
        [(ResponseDecision::Deny, Outcome::Denied), (ResponseDecision::Approve, Outcome::Approved)]
    {
        let call = tokio::spawn({
            let g = g.clone();
            async move { g.confirm(del("/x")).await }
        });
        let req = next_request(&mut sub).await;
        let bound = match decision {
            ResponseDecision::Approve => ConfirmationResponse::approve(&req),
            ResponseDecision::Deny => ConfirmationResponse::deny(&req, None),
        };
        let answer = ConfirmationResponse { arguments: Some(serde_json::Value::Null), ..bound };
        assert_eq!(g.respond(answer).unwrap(), expect);
        let d = call.await.unwrap().unwrap();
        if expect == Outcome::Approved {
            assert_eq!((d.arguments(), d.edited()), (Some(&json!({"path": "/x"})), false));
        }
    }
}

/// `mark_closed`, the first step of `close` (a host runs the rest off its thread): nothing that
/// needs approval gets through from then on, even before the rest of `close` has run.
#[tokio::test(start_paused = true)]
async fn marked_closed_nothing_gets_through_before_the_rest_of_close() {
    let (g, runs, exec, req, _sub) = one_waiting_execute().await;
    g.mark_closed();
    assert!(g.is_closed());
    assert_eq!(g.respond(ConfirmationResponse::approve(&req)).unwrap_err().kind(), ErrorKind::Closed);
    let later = g.confirm(del("/y")).await.unwrap();
    assert!(matches!(later, Decision::Cancelled { reason: CancelReason::Shutdown, .. }));
    g.close();
    assert_eq!(exec.await.unwrap().status, ToolStatus::Cancelled);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A gate whose gated `execute` of `/x` waits in a task: the gate, its executions so far, the
/// task, the request it waits on, and the approver's subscription (kept: without an approver
/// the request would be cancelled).
async fn one_waiting_execute()
-> (Gate, Arc<AtomicUsize>, tokio::task::JoinHandle<ToolResult>, Arc<ConfirmationRequest>, Subscription) {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    let exec = tokio::spawn({
        let g = g.clone();
        async move { g.execute(del("/x")).await }
    });
    let req = next_request(&mut sub).await;
    (g, runs, exec, req, sub)
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_pending_and_later_requests_and_rejects_responses() {
    let (g, runs, exec, req, _sub) = one_waiting_execute().await;
    g.close();
    let r = exec.await.unwrap();
    assert_eq!(r.status, ToolStatus::Cancelled);
    assert!(matches!(r.decision, Some(Decision::Cancelled { reason: CancelReason::Shutdown, .. })));
    assert!(r.content.contains("shutting down"));
    assert_eq!(g.respond(ConfirmationResponse::approve(&req)).unwrap_err().kind(), ErrorKind::Closed);
    let later = g.confirm(del("/y")).await.unwrap();
    assert!(matches!(later, Decision::Cancelled { reason: CancelReason::Shutdown, .. }));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Ungated calls are not gated: they still pass.
    assert!(g.confirm(ToolCall::new("read_file", json!({"path": "/a"}))).await.unwrap().is_approved());
}

#[tokio::test(start_paused = true)]
async fn a_closed_gate_runs_nothing_that_needs_approval_even_under_a_grant_or_with_gating_disabled() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    let call = g.confirm(del("/a").session("s1"));
    let answer = async {
        let req = next_request(&mut sub).await;
        g.respond(ConfirmationResponse::approve(&req).with_scope(Scope::Session)).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(d.unwrap().is_approved());
    assert!(matches!(
        g.confirm(del("/b").session("s1")).await.unwrap(),
        Decision::Approved { by: ApprovedBy::SessionGrant, .. }
    ));
    g.close();
    let r = g.execute(del("/c").session("s1")).await;
    assert_eq!(r.status, ToolStatus::Cancelled, "{}", r.content);
    assert!(matches!(r.decision, Some(Decision::Cancelled { reason: CancelReason::Shutdown, .. })));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let dev = gate_with(Gate::builder().dangerously_disable_gating(true), runs.clone());
    assert!(matches!(dev.confirm(del("/d")).await.unwrap(), Decision::Approved { by: ApprovedBy::GatingDisabled, .. }));
    dev.close();
    let r = dev.execute(del("/e")).await;
    assert!(matches!(r.decision, Some(Decision::Cancelled { reason: CancelReason::Shutdown, .. })), "{:?}", r.decision);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // A tool that needs no approval is not the gate's to stop.
    assert!(dev.confirm(ToolCall::new("read_file", json!({"path": "/a"}))).await.unwrap().is_approved());
}

#[tokio::test(start_paused = true)]
async fn cancelled_task_denies_and_is_reported() {
    let g = gate();
    let mut sub = g.subscribe();
    let task = tokio::spawn({
        let g = g.clone();
        async move { g.confirm(del("/x")).await }
    });
    let req = next_request(&mut sub).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let events = drain(&mut sub).await;
    let Some(Event::ConfirmationResolved(res)) = events.last() else { panic!("{events:?}") };
    assert_eq!((res.outcome, res.cancel_reason), (Outcome::Cancelled, Some(CancelReason::Aborted)));
    let e = g.respond(ConfirmationResponse::approve(&req)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyResolved);
    assert!(g.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_owned_confirmation_keeps_its_gate_and_still_cancels_when_dropped() {
    let g = gate();
    let mut sub = g.subscribe();
    // The handle it came from is gone at once: the future holds its own.
    let approved = tokio::spawn(g.clone().confirm_owned(del("/kept")));
    let req = next_request(&mut sub).await;
    assert_eq!(req.arguments.value(), json!({"path": "/kept"}));
    g.respond(ConfirmationResponse::approve(&req)).unwrap();
    let d = approved.await.unwrap().unwrap();
    assert_eq!(d.arguments(), Some(&json!({"path": "/kept"})));

    let dropped = tokio::spawn(g.confirm_owned(del("/dropped")));
    let req = next_request(&mut sub).await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    let e = g.respond(ConfirmationResponse::approve(&req)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyResolved);
    assert!(g.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn cancel_request_by_id_denies() {
    let g = gate();
    let mut sub = g.subscribe();
    let call = g.confirm(del("/x"));
    let cancel = async {
        let req = next_request(&mut sub).await;
        assert!(g.cancel_request(&req.id));
        assert!(!g.cancel_request(&req.id));
    };
    let (d, ()) = tokio::join!(call, cancel);
    assert!(matches!(d.unwrap(), Decision::Cancelled { reason: CancelReason::Aborted, .. }));
}

/// Every rejection kind, each followed by proof that the request is unchanged.
#[tokio::test(start_paused = true)]
async fn every_rejected_response_kind_leaves_the_request_as_it_was() {
    let g = gate_with(
        Gate::builder().authenticator(Arc::new(AllowedResponders(vec!["alice".into()]))),
        Arc::new(AtomicUsize::new(0)),
    );
    let mut sub = g.subscribe();
    let call = g.confirm(del("/home/a").session("s1"));
    let answer = async {
        let req = next_request(&mut sub).await;
        let ok = || ConfirmationResponse::approve(&req).with_responder("alice");
        let cases: Vec<(ConfirmationResponse, ErrorKind)> = vec![
            (ConfirmationResponse { id: uuid::Uuid::new_v4(), ..ok() }, ErrorKind::UnknownRequest),
            (ConfirmationResponse { tool: Some("read_file".into()), ..ok() }, ErrorKind::Mismatch),
            (
                ConfirmationResponse {
                    arguments_digest: Some(display::arguments_digest(&json!({"path": "/etc"}))),
                    ..ok()
                },
                ErrorKind::Mismatch,
            ),
            (ConfirmationResponse { session_id: Some("s2".into()), ..ok() }, ErrorKind::Mismatch),
            (ConfirmationResponse { responder: Some("mallory".into()), ..ok() }, ErrorKind::Unauthorized),
            (ConfirmationResponse { responder: None, ..ok() }, ErrorKind::Unauthorized),
            (ok().with_arguments(json!({"path": 7})), ErrorKind::InvalidArguments),
            (ok().with_arguments(json!({"path": "/a", "extra": 1})), ErrorKind::InvalidArguments),
            (
                ConfirmationResponse::deny(&req, None).with_responder("alice").with_arguments(json!({"path": "/b"})),
                ErrorKind::Malformed,
            ),
            (
                ConfirmationResponse::deny(&req, None).with_responder("alice").with_scope(Scope::Session),
                ErrorKind::Malformed,
            ),
        ];
        for (resp, kind) in cases {
            let e = g.respond(resp.clone()).unwrap_err();
            assert_eq!(e.kind(), kind, "{resp:?}: {e}");
            assert!(!e.to_string().is_empty());
            assert_eq!(g.pending().len(), 1, "rejected response changed the request");
        }
        for raw in ["", "not json", "[]", "{\"id\": 5}", "{\"type\": \"confirmation-request\"}"] {
            assert_eq!(g.respond_json(raw).unwrap_err().kind(), ErrorKind::Malformed, "{raw:?}");
        }
        let unknown_field = format!("{{\"id\":\"{}\",\"decision\":\"approve\",\"argument\":{{}}}}", req.id);
        assert_eq!(g.respond_json(&unknown_field).unwrap_err().kind(), ErrorKind::Malformed);
        // Still pending, and the first valid response wins.
        assert_eq!(g.respond(ok()).unwrap(), Outcome::Approved);
        assert_eq!(g.respond(ok()).unwrap_err().kind(), ErrorKind::AlreadyResolved);
        let deny = ConfirmationResponse::deny(&req, None).with_responder("alice");
        assert_eq!(g.respond(deny).unwrap_err().kind(), ErrorKind::AlreadyResolved);
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(matches!(d.unwrap(), Decision::Approved { edited: false, .. }));
}

#[tokio::test(start_paused = true)]
async fn edits_need_an_editable_tool_and_are_validated_then_run() {
    let g = gate();
    g.register(
        Tool::builder("pay")
            .description("Pays")
            .parameters(json!({"type": "object", "properties": {"amount": {"type": "number", "maximum": 100}}}))
            .build(),
    )
    .unwrap();
    let mut sub = g.subscribe();
    // Not editable.
    let call = g.confirm(ToolCall::new("pay", json!({"amount": 5})));
    let answer = async {
        let req = next_request(&mut sub).await;
        assert!(!req.editable);
        let e = g.respond(ConfirmationResponse::approve(&req).with_arguments(json!({"amount": 1}))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::EditsNotAllowed);
        // Echoing the same arguments is not an edit.
        g.respond(ConfirmationResponse::approve(&req).with_arguments(json!({"amount": 5}))).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(matches!(d.unwrap(), Decision::Approved { edited: false, .. }));

    // Editable: the edit runs, and the model is told.
    let exec = g.execute(del("/home/a/thesis.tex"));
    let answer = async {
        let req = next_request(&mut sub).await;
        g.respond(ConfirmationResponse::approve(&req).with_arguments(json!({"path": "/home/a/thesis.bak"}))).unwrap();
    };
    let (r, ()) = tokio::join!(exec, answer);
    assert_eq!(r.status, ToolStatus::Executed);
    assert!(r.edited);
    assert_eq!(r.arguments, Some(json!({"path": "/home/a/thesis.bak"})));
    assert_eq!(r.output, Some(json!({"deleted": "/home/a/thesis.bak"})));
    assert!(r.content.contains("changed the arguments"), "{}", r.content);
}

#[tokio::test(start_paused = true)]
async fn session_grants_skip_the_prompt_within_one_session_only() {
    let g = gate();
    g.register(
        Tool::builder("remove_dir")
            .parameters(path_schema())
            .rule(ArgRule::PathOutside { pointer: "/path".into(), prefixes: vec!["/tmp".into()] })
            .build(),
    )
    .unwrap();
    let mut sub = g.subscribe();
    let call = g.confirm(ToolCall::new("remove_dir", json!({"path": "/tmp/a"})).session("s1"));
    let answer = async {
        let req = next_request(&mut sub).await;
        g.respond(ConfirmationResponse::approve(&req).with_scope(Scope::Session).with_responder("alice")).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(matches!(d.unwrap(), Decision::Approved { by: ApprovedBy::Person, scope: Scope::Session, .. }));
    assert_eq!(g.grants("s1"), ["remove_dir"]);

    // Same session, same tool: no prompt.
    let d = g.confirm(ToolCall::new("remove_dir", json!({"path": "/tmp/b"})).session("s1")).await.unwrap();
    assert!(matches!(d, Decision::Approved { by: ApprovedBy::SessionGrant, request_id: None, .. }));
    assert!(drain(&mut sub).await.iter().all(|e| !matches!(e, Event::ConfirmationRequest(_))));

    // Another session: asks.
    let call = g.confirm(ToolCall::new("remove_dir", json!({"path": "/tmp/c"})).session("s2"));
    let answer = async {
        let req = next_request(&mut sub).await;
        assert_eq!(&*req.session_id, "s2");
        g.respond(ConfirmationResponse::deny(&req, None)).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(matches!(d.unwrap(), Decision::Denied { .. }));

    // A rule that forces approval is never overridden by the grant.
    let call = g.confirm(ToolCall::new("remove_dir", json!({"path": "/home"})).session("s1"));
    let answer = async {
        let req = next_request(&mut sub).await;
        assert!(req.reasons.iter().any(|r| r.contains("outside /tmp")), "{:?}", req.reasons);
        g.respond(ConfirmationResponse::deny(&req, None)).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(matches!(d.unwrap(), Decision::Denied { .. }));

    // Revoked: asks again (nobody answers; times out).
    assert!(g.revoke_grant("s1", "remove_dir"));
    assert!(!g.revoke_grant("s1", "remove_dir"));
    assert!(matches!(
        g.confirm(ToolCall::new("remove_dir", json!({"path": "/tmp/d"})).session("s1")).await.unwrap(),
        Decision::TimedOut { .. }
    ));
}

#[tokio::test]
async fn a_tools_grants_are_revoked_in_every_session_at_once() {
    let audit = MemoryAuditSink::new();
    let g = gate_with(Gate::builder().audit(audit.clone()), Arc::new(AtomicUsize::new(0)));
    let _approver = g.on_request_inline(|p| {
        let _ = p.approve_with(None, Scope::Session, Some("alice".into()));
    });
    for s in ["s1", "s2"] {
        assert!(g.confirm(del("/tmp/a").session(s)).await.unwrap().is_approved());
        assert!(g.confirm(ToolCall::new("send_email", json!({})).session(s)).await.unwrap().is_approved());
    }
    assert_eq!(g.revoke_tool_grants("delete_file"), ["s1", "s2"]);
    assert_eq!(g.revoke_tool_grants("delete_file"), Vec::<String>::new());
    // Other tools' grants stay.
    assert_eq!(g.grants("s1"), ["send_email"]);
    assert_eq!(g.grants("s2"), ["send_email"]);
    let revoked = audit
        .records()
        .into_iter()
        .filter(|r| r.kind == AuditKind::Grant && r.decision.as_deref() == Some("revoked"))
        .filter_map(|r| r.session_id)
        .collect::<Vec<_>>();
    assert_eq!(revoked, ["s1", "s2"]);
}

#[tokio::test(start_paused = true)]
async fn ending_a_session_drops_grants_and_cancels_its_requests() {
    let g = gate();
    let mut sub = g.subscribe();
    let call = g.confirm(del("/a").session("s1"));
    let answer = async {
        let req = next_request(&mut sub).await;
        g.respond(ConfirmationResponse::approve(&req).with_scope(Scope::Session)).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(d.unwrap().is_approved());
    let other = tokio::spawn({
        let g = g.clone();
        async move { g.confirm(del("/b").session("s2")).await }
    });
    let waiting = tokio::spawn({
        let g = g.clone();
        async move { g.confirm(ToolCall::new("send_email", json!({})).session("s1")).await }
    });
    while g.pending().len() < 2 {
        tokio::task::yield_now().await;
    }
    assert_eq!(g.end_session("s1"), 1);
    assert!(g.grants("s1").is_empty());
    assert!(matches!(waiting.await.unwrap().unwrap(), Decision::Cancelled { reason: CancelReason::SessionEnded, .. }));
    assert_eq!(g.pending().len(), 1, "the other session is untouched");
    g.close();
    assert!(matches!(other.await.unwrap().unwrap(), Decision::Cancelled { reason: CancelReason::Shutdown, .. }));
}

#[tokio::test(start_paused = true)]
async fn a_one_time_approval_cannot_be_reused() {
    let g = gate();
    let mut sub = g.subscribe();
    let call = g.confirm(del("/a"));
    let first = async {
        let req = next_request(&mut sub).await;
        g.respond(ConfirmationResponse::approve(&req)).unwrap();
        req
    };
    let (d, req) = tokio::join!(call, first);
    assert!(d.unwrap().is_approved());
    // The same call again makes a new request; the old approval answers nothing.
    let call = g.confirm(del("/a"));
    let second = async {
        let req2 = next_request(&mut sub).await;
        assert_ne!(req2.id, req.id);
        assert_eq!(req2.arguments_digest, req.arguments_digest);
        assert_eq!(g.respond(ConfirmationResponse::approve(&req)).unwrap_err().kind(), ErrorKind::AlreadyResolved);
        g.respond(ConfirmationResponse::deny(&req2, None)).unwrap();
    };
    let (d, ()) = tokio::join!(call, second);
    assert!(matches!(d.unwrap(), Decision::Denied { .. }));
}

#[tokio::test(start_paused = true)]
async fn refused_calls_never_run_silently() {
    let g = gate();
    let _sub = g.subscribe();
    assert_eq!(g.confirm(ToolCall::new("nope", json!({}))).await.unwrap_err().kind(), ErrorKind::UnknownTool);
    assert_eq!(
        g.confirm(ToolCall::new("delete_file", json!({"path": 1}))).await.unwrap_err().kind(),
        ErrorKind::InvalidArguments
    );
    assert_eq!(
        g.confirm(ToolCall::new("delete_file", json!("x"))).await.unwrap_err().kind(),
        ErrorKind::InvalidArguments
    );
    let r = g.execute(ToolCall::new("nope", json!({})).call_id("c1")).await;
    assert_eq!((r.status, r.error_kind), (ToolStatus::Rejected, Some(ErrorKind::UnknownTool)));
    assert!(r.content.contains("did not run"));
    let r = g.execute(ToolCall::new("send_email", json!({}))).await;
    assert_eq!((r.status, r.error_kind), (ToolStatus::Rejected, Some(ErrorKind::NoExecutor)));
    assert!(g.pending().is_empty(), "nobody is asked about a call that cannot run");
}

#[tokio::test(start_paused = true)]
async fn argument_rules_apply_to_not_required_tools() {
    let g = gate();
    let _sub = g.subscribe();
    let d = g.confirm(ToolCall::new("write_file", json!({"path": "/tmp/x"}))).await.unwrap();
    assert!(matches!(d, Decision::Approved { by: ApprovedBy::NotGated, .. }));
    let d = g.confirm(ToolCall::new("write_file", json!({"path": "/tmp/../etc/passwd"}))).await.unwrap();
    assert!(matches!(d, Decision::TimedOut { .. }));
}

#[tokio::test(start_paused = true)]
async fn gating_disabled_is_explicit_and_audited() {
    let audit = MemoryAuditSink::new();
    let g =
        gate_with(Gate::builder().dangerously_disable_gating(true).audit(audit.clone()), Arc::new(AtomicUsize::new(0)));
    assert!(g.gating_disabled());
    assert!(!Gate::new().gating_disabled(), "off by default");
    let d = g.confirm(del("/a")).await.unwrap();
    assert!(matches!(d, Decision::Approved { by: ApprovedBy::GatingDisabled, .. }));
    let recs = audit.records();
    assert_eq!(recs[0].kind, AuditKind::Notice);
    assert_eq!(recs[0].decision.as_deref(), Some("gating-disabled"));
    assert_eq!(recs[1].decision.as_deref(), Some("gating-disabled"));
}

#[tokio::test(start_paused = true)]
async fn displayed_text_escapes_deceptive_characters() {
    let g = gate();
    g.register(
        Tool::builder("send_file")
            .description("Sends \u{202E}elif")
            .prompt_template("Send {args} with {tool}?")
            .build(),
    )
    .unwrap();
    let mut sub = g.subscribe();
    let call =
        g.confirm(ToolCall::new("send_file", json!({"to": "ev\u{200B}il@x.com", "note": "a\u{0007}b\u{2066}c"})));
    let check = async {
        let req = next_request(&mut sub).await;
        let shown = req.display_arguments();
        for text in [&*req.prompt, shown.as_str(), &*req.description] {
            assert!(!text.chars().any(display::is_deceptive), "{text:?}");
        }
        assert!(shown.contains("ev\\u{200B}il@x.com"), "{shown}");
        assert!(req.prompt.starts_with("Send {") && req.prompt.ends_with("with send_file?"), "{}", req.prompt);
        assert_eq!(&*req.description, "Sends \\u{202E}elif");
        // The arguments themselves are untouched: what runs is exactly what the digest covers.
        assert_eq!(req.arguments.value()["to"], "ev\u{200B}il@x.com");
        g.respond(ConfirmationResponse::deny(&req, None)).unwrap();
    };
    let _ = tokio::join!(call, check);
}

#[tokio::test(start_paused = true)]
async fn handler_that_does_not_answer_or_fails_ends_the_request_as_approval_failed() {
    let audit = MemoryAuditSink::new();
    let g = gate_with(Gate::builder().audit(audit.clone()), Arc::new(AtomicUsize::new(0)));
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let guard = g.on_request(Arc::new(move |req: PendingRequest| {
        let c = c.clone();
        Box::pin(async move {
            match c.fetch_add(1, Ordering::SeqCst) {
                0 => Ok(()),                                 // returns without answering
                1 => Err("database unavailable".to_owned()), // fails
                2 => panic!("handler bug"),                  // panics
                _ => req.approve_with(None, Scope::Once, Some("auto".into())).map(|_| ()).map_err(|e| e.to_string()),
            }
        })
    }));
    for detail in [
        "the approval handler returned without answering",
        "the approval handler failed: database unavailable",
        "the approval handler panicked",
    ] {
        let d = g.confirm(del("/a")).await.unwrap();
        assert!(matches!(d, Decision::Cancelled { reason: CancelReason::ApprovalFailed, .. }), "{d:?}");
        // The detail is evidence: in the audit log, with who ended it.
        let id = d.request_id().unwrap();
        let recs = audit.records();
        let notice =
            recs.iter().find(|r| r.request_id == Some(id) && r.decision.as_deref() == Some("approval-failed")).unwrap();
        assert_eq!(notice.reason.as_deref(), Some(detail));
        assert_eq!(notice.responder.as_deref(), Some(HANDLER_RESPONDER));
    }
    let d = g.confirm(del("/a")).await.unwrap();
    assert!(matches!(d, Decision::Approved { ref responder, .. } if responder.as_deref() == Some("auto")));
    // Dropping the guard unsubscribes: with nobody listening, requests are cancelled.
    drop(guard);
    tokio::task::yield_now().await;
    let d = g.confirm(del("/a")).await.unwrap();
    assert!(matches!(d, Decision::Cancelled { reason: CancelReason::NoApprover, .. }), "{d:?}");
}

/// Issue 15.2: with responders restricted, a failing handler used to be refused as
/// `unauthorized` when signoff denied on its behalf, so the call waited for its deadline.
#[tokio::test(start_paused = true)]
async fn failing_handler_ends_the_request_at_once_when_responders_are_restricted() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder().authenticator(Arc::new(AllowedResponders(vec!["alice".into()]))), runs.clone());
    let _guard = g.on_request(Arc::new(|_req: PendingRequest| {
        Box::pin(async move { Err("RuntimeError: secret internals at 0x7f".to_owned()) })
    }));
    let started = tokio::time::Instant::now();
    let r = g.execute(del("/a").call_id("c1")).await;
    assert_eq!(r.status, ToolStatus::Cancelled, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the request waited {:?} instead of ending at once",
        started.elapsed()
    );
    assert!(matches!(r.decision, Some(Decision::Cancelled { reason: CancelReason::ApprovalFailed, .. })), "{r:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Issue 15.7: the model reads that the approval step failed, not that a person declined,
    // and never the handler's internals.
    assert!(r.content.contains("the approval step failed"), "{}", r.content);
    assert!(!r.content.contains("declined"), "{}", r.content);
    assert!(!r.content.contains("secret internals") && !r.content.contains("RuntimeError"), "{}", r.content);
    assert!(r.content.contains("Do not retry"), "{}", r.content);
}

#[tokio::test(start_paused = true)]
async fn handler_picks_up_requests_already_pending() {
    let g = gate_with(Gate::builder().deny_when_unobserved(false), Arc::new(AtomicUsize::new(0)));
    let call = tokio::spawn({
        let g = g.clone();
        async move { g.confirm(del("/a")).await }
    });
    while g.pending().is_empty() {
        tokio::task::yield_now().await;
    }
    let _guard = g.on_request(Arc::new(|req: PendingRequest| {
        Box::pin(async move { req.approve().map(|_| ()).map_err(|e| e.to_string()) })
    }));
    assert!(call.await.unwrap().unwrap().is_approved());
}

#[tokio::test(start_paused = true)]
async fn audit_jsonl_records_every_step() {
    let dir = std::env::temp_dir().join(format!("signoff-audit-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("audit.jsonl");
    let sink = JsonlAuditSink::open(&path).unwrap();
    let g = gate_with(Gate::builder().audit(sink.clone()), Arc::new(AtomicUsize::new(0)));
    let mut sub = g.subscribe();
    let exec = g.execute(del("/home/a").session("s1").call_id("c1"));
    let answer = async {
        let req = next_request(&mut sub).await;
        let _ = g.respond(ConfirmationResponse { tool: Some("x".into()), ..ConfirmationResponse::approve(&req) });
        g.respond(
            ConfirmationResponse::approve(&req).with_arguments(json!({"path": "/home/b"})).with_responder("alice"),
        )
        .unwrap();
    };
    let (r, ()) = tokio::join!(exec, answer);
    assert_eq!(r.status, ToolStatus::Executed);
    g.execute(ToolCall::new("read_file", json!({"path": "/r"}))).await;
    g.flush_audit();
    let recs = JsonlAuditSink::read(&path).unwrap();
    let kinds: Vec<_> = recs.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            AuditKind::Request,
            AuditKind::ResponseRejected,
            AuditKind::Response,
            AuditKind::Outcome,
            AuditKind::Execution,
            AuditKind::Bypass,
            AuditKind::Execution
        ]
    );
    let digest = display::arguments_digest(&json!({"path": "/home/a"}));
    assert!(recs[..4].iter().all(|r| r.session_id.as_deref() == Some("s1")
        && r.tool.as_deref() == Some("delete_file")
        && r.arguments_digest.as_deref() == Some(digest.as_str())));
    assert_eq!(recs[0].arguments, Some(json!({"path": "/home/a"})));
    assert_eq!(recs[1].error_kind, Some(ErrorKind::Mismatch));
    assert_eq!(recs[2].edited_arguments, Some(json!({"path": "/home/b"})));
    assert_eq!(recs[2].responder.as_deref(), Some("alice"));
    assert_eq!(recs[3].decision.as_deref(), Some("approved"));
    assert_eq!(recs[4].decision.as_deref(), Some("ok"));
    assert_eq!(recs[4].arguments_digest, Some(display::arguments_digest(&json!({"path": "/home/b"}))));
    assert_eq!(recs[5].decision.as_deref(), Some("not-gated"));
    // Append-only: a second sink on the same file adds, never truncates.
    drop(g);
    drop(sink);
    let again = JsonlAuditSink::open(&path).unwrap();
    again.record(AuditRecord::new(AuditKind::Notice));
    again.flush();
    assert_eq!(JsonlAuditSink::read(&path).unwrap().len(), 8);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(start_paused = true)]
async fn executor_failure_and_panic_are_results_not_crashes() {
    let g = Gate::builder()
        .tool(Tool::builder("flaky").executor(|_| async { Err("disk full".to_owned()) }).build())
        .tool(Tool::builder("buggy").executor(|_| async { panic!("bug") }).build())
        .build()
        .unwrap();
    let r = g.execute(ToolCall::new("flaky", json!({}))).await;
    assert_eq!((r.status, r.error.as_deref()), (ToolStatus::Failed, Some("disk full")));
    assert!(r.content.contains("failed: disk full"));
    assert!(r.is_error());
    let r = g.execute(ToolCall::new("buggy", json!({}))).await;
    assert_eq!((r.status, r.error.as_deref()), (ToolStatus::Failed, Some("the tool panicked")));
}

/// What a call context says: tool, call id, request, session, edited, gate closed.
type Facts = (String, Option<String>, Option<uuid::Uuid>, String, bool, bool);

fn facts(c: &CallContext) -> Facts {
    (c.tool.clone(), c.call_id.clone(), c.request_id, c.session_id.clone(), c.edited, c.gate_closed())
}

#[tokio::test(start_paused = true)]
async fn a_context_executor_sees_its_call_and_learns_that_the_gate_closed() {
    let seen: Arc<std::sync::Mutex<Vec<Facts>>> = Arc::default();
    let (s1, s2) = (seen.clone(), seen.clone());
    let delete =
        Tool::builder("delete_file").parameters(path_schema()).editable(true).executor_with_context(move |_, c| {
            s1.lock().unwrap().push(facts(&c));
            async { Ok(json!("ok")) }
        });
    let slow_read = Tool::builder("read_file").read_only(true).executor_with_context(move |_, c| {
        let s = s2.clone();
        async move {
            s.lock().unwrap().push(facts(&c));
            tokio::time::sleep(Duration::from_secs(1)).await; // the gate closes meanwhile
            s.lock().unwrap().push(facts(&c));
            Ok(json!("ok"))
        }
    });
    let g = Gate::builder().tool(delete.build()).tool(slow_read.build()).build().unwrap();
    let mut sub = g.subscribe();
    for edit in [None, Some(json!({"path": "/b"}))] {
        let call = g.execute(del("/a").call_id("c1").session("s1"));
        let answer = async {
            let req = next_request(&mut sub).await;
            let approve = ConfirmationResponse::approve(&req);
            g.respond(match edit.clone() {
                Some(a) => approve.with_arguments(a),
                None => approve,
            })
            .unwrap();
            req.id
        };
        let (r, id) = tokio::join!(call, answer);
        assert_eq!(r.status, ToolStatus::Executed);
        let last = seen.lock().unwrap().pop().unwrap();
        assert_eq!(last, ("delete_file".into(), Some("c1".into()), Some(id), "s1".into(), edit.is_some(), false));
    }
    let ungated = tokio::spawn({
        let g = g.clone();
        async move { g.execute(ToolCall::new("read_file", json!({})).call_id("c2")).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    g.close();
    assert_eq!(ungated.await.unwrap().status, ToolStatus::Executed);
    let read =
        |closed| ("read_file".to_owned(), Some("c2".to_owned()), None, DEFAULT_SESSION.to_owned(), false, closed);
    assert_eq!(*seen.lock().unwrap(), [read(false), read(true)], "the context reports the closed gate");
}

#[tokio::test(start_paused = true)]
async fn batch_runs_ungated_at_once_and_returns_in_model_order() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    let calls = vec![
        del("/a").call_id("1"),
        ToolCall::new("read_file", json!({"path": "/r"})).call_id("2"),
        del("/b").call_id("3"),
        ToolCall::new("nope", json!({})).call_id("4"),
    ];
    let batch = g.execute_batch(calls);
    let answer = async {
        let r1 = next_request(&mut sub).await;
        let r2 = next_request(&mut sub).await;
        // Answer in reverse order; each call gets its own answer.
        let (a, b) = if r1.arguments.value()["path"] == "/a" { (r1, r2) } else { (r2, r1) };
        g.respond(ConfirmationResponse::deny(&b, Some("not b".into()))).unwrap();
        g.respond(ConfirmationResponse::approve(&a)).unwrap();
    };
    let (results, ()) = tokio::join!(batch, answer);
    let ids: Vec<_> = results.iter().map(|r| r.call_id.clone().unwrap()).collect();
    assert_eq!(ids, ["1", "2", "3", "4"]);
    let st: Vec<_> = results.iter().map(|r| r.status).collect();
    assert_eq!(st, [ToolStatus::Executed, ToolStatus::Executed, ToolStatus::Denied, ToolStatus::Rejected]);
    assert!(results[2].content.contains("not b"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn lagging_subscriber_is_told_and_resyncs_without_losing_a_request() {
    let g = gate_with(Gate::builder().bus_capacity(4), Arc::new(AtomicUsize::new(0)));
    let mut slow = g.subscribe();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move { g.confirm(del(&format!("/f{i}")).call_id(i.to_string())).await })
        })
        .collect();
    while g.pending().len() < 20 {
        tokio::task::yield_now().await;
    }
    // The slow subscriber reads now: it must be told it lagged, with the full snapshot.
    let mut seen = std::collections::HashMap::new();
    let mut lagged = false;
    while seen.len() < 20 {
        match slow.recv().await.unwrap() {
            Ok(Event::ConfirmationRequest(r)) => {
                seen.insert(r.id, r);
            }
            Ok(_) => {}
            Err(l) => {
                lagged = true;
                assert!(l.missed > 0);
                for r in l.pending {
                    seen.insert(r.id, r);
                }
            }
        }
    }
    assert!(lagged, "a subscriber that fell behind must be told");
    for r in seen.values() {
        g.respond(ConfirmationResponse::deny(r, Some(r.tool_call_id.clone().unwrap()))).unwrap();
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let d = t.await.unwrap().unwrap();
        assert!(matches!(d, Decision::Denied { reason: Some(ref r), .. } if *r == i.to_string()), "{d:?}");
    }
}

/// A subscription for some event types gets exactly those, in bus order, whoever answers; the
/// other subscribers still get everything.
#[tokio::test(start_paused = true)]
async fn a_subscription_for_some_types_gets_only_those_in_order() {
    let g = gate();
    let mut all = g.observe();
    let mut some = g.subscribe().only(EventTypes::REQUEST | EventTypes::RESOLVED);
    assert_eq!(some.types(), EventTypes::REQUEST | EventTypes::RESOLVED);
    assert_eq!(all.types(), EventTypes::ALL);
    // Approved, denied, then timed out, each answered through the filtered subscription.
    for (i, answer) in ["approve", "deny", "none"].into_iter().enumerate() {
        let call = tokio::spawn({
            let g = g.clone();
            async move { g.confirm(del(&format!("/f{i}"))).await }
        });
        let req = next_request(&mut some).await;
        match answer {
            "approve" => g.respond(ConfirmationResponse::approve(&req)).map(drop).unwrap(),
            "deny" => g.respond(ConfirmationResponse::deny(&req, Some("no".into()))).map(drop).unwrap(),
            _ => {}
        }
        call.await.unwrap().unwrap();
        match some.recv().await.unwrap().unwrap() {
            Event::ConfirmationResolved(r) => assert_eq!(r.id, req.id),
            e => panic!("expected the resolution, got {}", e.kind()),
        }
    }
    assert!(drain(&mut some).await.is_empty());
    let kinds: Vec<_> = drain(&mut all).await.iter().map(|e| e.kind()).collect();
    let (q, p, t, r) =
        ("confirmation-request", "confirmation-response", "confirmation-timeout", "confirmation-resolved");
    assert_eq!(kinds, [q, p, r, q, p, r, q, t, r]);
    assert!(
        matches!(EventTypes::from_names(["confirmation-request", "lagged"]), Err(Error::Malformed(m)) if m.contains("\"lagged\""))
    );
    assert_eq!(EventTypes::from_names(Vec::<String>::new()).unwrap(), EventTypes::NONE);
}

/// A lag is reported to a filtered subscription whatever it asked for (the missed events may
/// have been of its types), and a long run of unwanted events does not stall it.
#[tokio::test(start_paused = true)]
async fn a_filtered_subscription_is_told_it_lagged_and_skips_long_runs_of_other_events() {
    let g = gate_with(Gate::builder().bus_capacity(4), Arc::new(AtomicUsize::new(0)));
    let mut none = g.observe().only(EventTypes::NONE);
    let mut answerer = g.subscribe();
    let waiting: Vec<_> = (0..8)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move { g.confirm(del(&format!("/l{i}"))).await })
        })
        .collect();
    while g.pending_count() < 8 {
        tokio::task::yield_now().await;
    }
    let lag = none.recv().await.unwrap().unwrap_err();
    assert!(lag.missed > 0 && lag.pending.len() == 8, "{lag:?}");
    for r in g.pending() {
        g.respond(ConfirmationResponse::deny(&r, None)).unwrap();
    }
    for w in waiting {
        w.await.unwrap().unwrap();
    }
    drop(answerer);

    // 600 events a timeout-only subscription does not want, then one it does: more than one
    // poll skips, so the reader is woken to go on rather than left waiting.
    let g = gate_with(Gate::builder().bus_capacity(1024), Arc::new(AtomicUsize::new(0)));
    let mut timeouts = g.observe().only(EventTypes::TIMEOUT);
    answerer = g.subscribe();
    for i in 0..200 {
        let call = tokio::spawn({
            let g = g.clone();
            async move { g.confirm(del(&format!("/a{i}"))).await }
        });
        let req = next_request(&mut answerer).await;
        g.respond(ConfirmationResponse::approve(&req)).unwrap();
        call.await.unwrap().unwrap();
    }
    let late = g.confirm(del("/late")).await.unwrap();
    assert!(matches!(late, Decision::TimedOut { .. }), "{late:?}");
    drop(answerer);
    // Polled as a host polls it, on a thread of its own (inside a tokio task, tokio's budget
    // would also yield): each poll that returns empty-handed has asked to be polled again.
    let polls = std::thread::spawn(move || {
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(count.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let mut polls = 0;
        let e = loop {
            polls += 1;
            match std::pin::Pin::new(&mut timeouts).poll_next(&mut cx) {
                std::task::Poll::Ready(e) => break e.unwrap().unwrap(),
                std::task::Poll::Pending => {
                    assert_eq!(count.0.swap(0, Ordering::SeqCst), 1, "an empty-handed poll must wake its reader");
                }
            }
        };
        assert_eq!(e.kind(), "confirmation-timeout");
        polls
    })
    .join()
    .unwrap();
    assert!(polls > 1, "600 unwanted events take more than one poll");
}

/// Issue 15.8: a lagging subscriber no longer receives every pending request at once; it gets
/// the oldest page and a cursor, and paging from it gives the rest, each exactly once.
#[tokio::test(start_paused = true)]
async fn lag_recovery_is_bounded_and_paging_gives_every_request_once() {
    const N: usize = 2_500;
    let g = gate_with(Gate::builder().bus_capacity(4), Arc::new(AtomicUsize::new(0)));
    let mut slow = g.subscribe();
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move { g.confirm(del(&format!("/f{i}")).call_id(i.to_string())).await })
        })
        .collect();
    while g.pending_count() < N {
        tokio::task::yield_now().await;
    }
    let lag = loop {
        if let Err(l) = slow.recv().await.unwrap() {
            break l;
        }
    };
    assert_eq!(lag.pending.len(), LAGGED_SNAPSHOT_LIMIT);
    let mut ids: Vec<uuid::Uuid> = lag.pending.iter().map(|r| r.id).collect();
    let mut after = lag.more.expect("more than a page is pending");
    // Half of the pending requests resolve while the subscriber pages: none is skipped or
    // repeated among those still pending.
    let all = g.pending();
    for r in all.iter().skip(1).step_by(2) {
        g.respond(ConfirmationResponse::deny(r, None)).unwrap();
    }
    loop {
        let page = g.pending_page(Some(&after), 333);
        assert!(page.requests.len() <= 333);
        ids.extend(page.requests.iter().map(|r| r.id));
        match page.next {
            Some(n) => after = n,
            None => break,
        }
    }
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "a request was repeated");
    let still: std::collections::HashSet<_> = g.pending().iter().map(|r| r.id).collect();
    assert!(still.iter().all(|id| unique.contains(id)), "a pending request was skipped");
    // Order: oldest first, as in the full list.
    let order: Vec<_> = all.iter().map(|r| r.id).filter(|id| unique.contains(id)).collect();
    assert_eq!(order, ids.iter().copied().filter(|id| order.contains(id)).collect::<Vec<_>>());
    g.close();
    for t in tasks {
        let _ = t.await;
    }
}

#[test]
fn pending_cursor_round_trips_and_refuses_garbage() {
    let c = PendingCursor { created_at_ms: 1_700_000_000_123, id: uuid::Uuid::new_v4() };
    assert_eq!(c.to_string().parse::<PendingCursor>().unwrap(), c);
    for bad in ["", "x", "12", "12-not-a-uuid", "-00000000-0000-4000-8000-000000000000"] {
        assert_eq!(bad.parse::<PendingCursor>().unwrap_err().kind(), ErrorKind::Malformed, "{bad}");
    }
}

#[test]
fn events_have_a_stable_json_form() {
    let req = ConfirmationRequest {
        id: uuid::Uuid::nil(),
        tool: "t".into(),
        description: "d".into(),
        arguments: json!({"a": 1}).into(),
        prompt: "p".into(),
        arguments_digest: Arguments::new(&json!({"a": 1})).digest(),
        session_id: "s".into(),
        tool_call_id: None,
        editable: false,
        reasons: [].into(),
        timeout_ms: 1,
        deadline_ms: 2,
        created_at_ms: 1,
        metadata: serde_json::Value::Null,
    };
    let e = Event::ConfirmationRequest(Arc::new(req));
    let v = e.to_json();
    assert_eq!(v["type"], "confirmation-request");
    assert_eq!(Event::from_json(v.clone()).unwrap(), e);
    assert_eq!(Event::from_json(json!({"type": "confirmation-nope"})).unwrap_err().kind(), ErrorKind::Malformed);
}

#[test]
fn error_kinds_are_stable_strings() {
    let names: Vec<_> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "unknown_tool",
            "invalid_tool",
            "invalid_arguments",
            "unknown_request",
            "already_resolved",
            "expired",
            "edits_not_allowed",
            "mismatch",
            "malformed",
            "unauthorized",
            "closed",
            "store",
            "no_executor",
            "bad_signature",
            "unknown_key",
            "token_expired",
            "wrong_approver",
            "already_used",
            "not_pending",
            "config",
            "io"
        ]
    );
    for k in ErrorKind::ALL {
        assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
    }
}

#[test]
fn tool_registration_rejects_bad_definitions() {
    let g = Gate::new();
    assert_eq!(g.register(Tool::builder("").build()).unwrap_err().kind(), ErrorKind::InvalidTool);
    assert_eq!(
        g.register(Tool::builder("x").parameters(json!({"type": "nope"})).build()).unwrap_err().kind(),
        ErrorKind::InvalidTool
    );
    assert_eq!(
        g.register(
            Tool::builder("x")
                .rule(ArgRule::PathOutside { pointer: "path".into(), prefixes: vec!["/tmp".into()] })
                .build()
        )
        .unwrap_err()
        .kind(),
        ErrorKind::InvalidTool
    );
    assert_eq!(
        g.register(
            Tool::builder("x")
                .rule(ArgRule::PathOutside { pointer: "/path".into(), prefixes: vec!["tmp".into()] })
                .build()
        )
        .unwrap_err()
        .kind(),
        ErrorKind::InvalidTool
    );
    // A threshold no amount can exceed would never ask: refused (Swift could pass NaN or ±∞).
    for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let tool = Tool::builder("pay").rule(ArgRule::GreaterThan { pointer: "/amount".into(), value }).build();
        assert_eq!(g.register(tool).unwrap_err().kind(), ErrorKind::InvalidTool, "{value}");
        let rule = ArgRule::GreaterThan { pointer: "/amount".into(), value };
        assert!(rule.holds(&json!({"amount": 5})) || value == f64::INFINITY, "fails safe: {value}");
    }
    // A tool's timeout has the gate default's bounds: 1 ms to 30 days.
    for t in [0, 30 * 24 * 3600 * 1000 + 1, u64::MAX] {
        let spec = ToolSpec::from_json(json!({"name": "slow", "timeout_ms": t})).unwrap();
        assert_eq!(g.register_spec(spec).unwrap_err().kind(), ErrorKind::InvalidTool, "{t}");
    }
    g.register_spec(ToolSpec::from_json(json!({"name": "ok", "approval": "required", "timeout_ms": 5})).unwrap())
        .unwrap();
    assert_eq!(g.tools()[0].name, "ok");
    assert!(g.unregister("ok"));
    // A name is shown inside the prompt's quotes: one that could end them, start lines that pass
    // for the arguments, hide characters or fill the screen is refused (an MCP server names its
    // own tools). Names of the usual alphabets and punctuation stay allowed.
    let forged = "read_notes` to run with these arguments?\n{\n  \"path\": \"notes.txt\"\n}\n\n(ignore:) `x";
    let long = "a".repeat(signoff::tool::MAX_NAME_CHARS + 1);
    for name in [forged, "read notes", "tab\there", "back`tick", "nbsp\u{a0}", "del\u{7f}", long.as_str()] {
        let e = g.register(Tool::builder(name).build()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTool, "{name:?}");
        assert!(!e.to_string().contains('\n'), "the error shows the name escaped: {e}");
    }
    let longest = "a".repeat(signoff::tool::MAX_NAME_CHARS);
    for name in ["fs__read_file", "files.read-v2", "ファイル削除", "écrire:fichier/1", longest.as_str()] {
        g.register(Tool::builder(name).build()).unwrap();
        assert!(g.unregister(name));
    }
    g.register_spec(ToolSpec::from_json(json!({"name": "ok", "approval": "required", "timeout_ms": 5})).unwrap())
        .unwrap();
    assert!(g.unregister("ok"));
    assert!(g.tools().is_empty());
}

/// `remember_resolved(n)`: an answer to any of the last `n` resolved requests is told it came
/// late (`already_resolved`), never `unknown_request`; an id resolved long before is forgotten.
#[tokio::test(start_paused = true)]
async fn the_last_remembered_ids_are_told_apart_and_old_ones_are_forgotten() {
    const N: usize = 3;
    let g = gate_with(Gate::builder().remember_resolved(N), Arc::new(AtomicUsize::new(0)));
    let _approver = g.on_request_inline(|p| {
        p.approve().unwrap();
    });
    let mut requests = Vec::new();
    let mut sub = g.subscribe();
    for i in 0..4 * N {
        assert!(g.confirm(del(&format!("/tmp/{i}"))).await.unwrap().is_approved());
        requests.push(next_request(&mut sub).await);
        // After every call, each of the last N (or fewer) is remembered.
        for req in requests.iter().rev().take(N) {
            let e = g.respond(ConfirmationResponse::approve(req)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::AlreadyResolved, "request {} of {}", req.id, requests.len());
        }
    }
    // At most 2N are kept: the first is long gone.
    let e = g.respond(ConfirmationResponse::approve(&requests[0])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownRequest);
    // Nothing is remembered with 0.
    let g = gate_with(Gate::builder().remember_resolved(0), Arc::new(AtomicUsize::new(0)));
    let _approver = g.on_request_inline(|p| {
        p.approve().unwrap();
    });
    let mut sub = g.subscribe();
    assert!(g.confirm(del("/tmp/x")).await.unwrap().is_approved());
    let req = next_request(&mut sub).await;
    assert_eq!(g.respond(ConfirmationResponse::approve(&req)).unwrap_err().kind(), ErrorKind::UnknownRequest);
}

/// A tool call's JSON form refuses a field it does not know: a misspelt `sessionId` would run the
/// call in the default session (whose grants are someone else's), a misspelt `args` with none.
#[test]
fn a_tool_call_with_an_unknown_field_is_refused() {
    let ok: ToolCall = serde_json::from_value(json!({"tool": "t", "arguments": {}, "session_id": "alice"})).unwrap();
    assert_eq!(ok.session_id, "alice");
    for bad in [json!({"tool": "t", "sessionId": "alice"}), json!({"tool": "t", "args": {"path": "/x"}})] {
        let e = serde_json::from_value::<ToolCall>(bad).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}

/// Arguments of `null` are no arguments, `{}`, however the call arrives (a model's call of a tool
/// without parameters may say either): what is shown, evaluated and run is `{}`.
#[tokio::test(start_paused = true)]
async fn null_arguments_are_no_arguments() {
    let g = Gate::builder()
        .tool(Tool::builder("list").executor(|a| async move { Ok(a) }).build())
        .tool(Tool::builder("wipe").requires_approval().executor(|a| async move { Ok(a) }).build())
        .build()
        .unwrap();
    let null = || serde_json::Value::Null;
    assert!(!g.evaluate(&ToolCall::new("list", null())).unwrap().required);
    let d = g.confirm(ToolCall::new("list", null())).await.unwrap();
    assert_eq!(d.arguments(), Some(&json!({})));
    let mut sub = g.subscribe();
    let call = tokio::spawn({
        let g = g.clone();
        async move { g.execute(ToolCall::new("wipe", serde_json::Value::Null)).await }
    });
    let req = next_request(&mut sub).await;
    assert_eq!(req.arguments.json(), "{}");
    g.respond(ConfirmationResponse::approve(&req)).unwrap();
    assert_eq!(call.await.unwrap().output, Some(json!({})));
    let batch = g.execute_batch(vec![ToolCall::new("list", null())]).await;
    assert_eq!(batch[0].output, Some(json!({})));
}
