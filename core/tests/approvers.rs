//! Approvers and observers; inline dispatch; closable subscriptions; subscriptions ended by close.

mod common;
use common::*;
use futures_util::FutureExt;
use serde_json::json;
use signoff::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn cancelled(d: &Decision) -> Option<CancelReason> {
    match d {
        Decision::Cancelled { reason, .. } => Some(*reason),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn an_observer_alone_is_no_approver_the_call_is_cancelled_at_once() {
    let g = gate();
    let mut watch = g.observe();
    assert!(!watch.is_approver());
    assert_eq!(g.approver_count(), 0);
    let d = g.confirm(del("/home/a")).await.unwrap();
    assert_eq!(cancelled(&d), Some(CancelReason::NoApprover));
    // The observer saw all of it.
    let events = drain(&mut watch).await;
    assert!(matches!(events.first(), Some(Event::ConfirmationRequest(_))), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ConfirmationResolved(r) if r.cancel_reason == Some(CancelReason::NoApprover))),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_observer_beside_an_approver_does_not_change_anything() {
    let g = gate();
    let _watch = g.observe();
    let mut sub = g.subscribe();
    assert_eq!(g.approver_count(), 1);
    let call = g.confirm(del("/home/a"));
    let answer = async {
        let req = next_request(&mut sub).await;
        g.respond(ConfirmationResponse::approve(&req)).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(d.unwrap().is_approved());
}

#[tokio::test(start_paused = true)]
async fn the_last_approver_leaving_cancels_even_with_observers_left() {
    let g = gate();
    let _watch = g.observe();
    let mut sub = g.subscribe();
    let call = g.confirm(del("/home/a"));
    let leave = async {
        next_request(&mut sub).await;
        drop(sub);
    };
    let (d, ()) = tokio::join!(call, leave);
    assert_eq!(cancelled(&d.unwrap()), Some(CancelReason::NoApprover));
    assert_eq!(g.approver_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_inline_approver_answers_in_the_publishing_poll_with_no_task() {
    let g = gate();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let _guard = g.on_request_inline(move |p| {
        s.fetch_add(1, Ordering::SeqCst);
        assert_eq!(&*p.request().tool, "delete_file");
        p.approve_with(None, Scope::Once, Some("policy".into())).unwrap();
    });
    assert_eq!(g.approver_count(), 1);
    // Resolved within the first poll: no task ran, no thread was crossed.
    let d = g.confirm(del("/home/a")).now_or_never().expect("decided in the first poll").unwrap();
    match d {
        Decision::Approved { by, responder, request_id, .. } => {
            assert_eq!(by, ApprovedBy::Person);
            assert_eq!(responder.as_deref(), Some("policy"));
            assert!(request_id.is_some());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(g.pending_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_inline_approver_may_keep_the_handle_and_answer_later() {
    let g = gate();
    let held: Arc<Mutex<Option<PendingRequest>>> = Arc::default();
    let h = held.clone();
    let _guard = g.on_request_inline(move |p| *h.lock().unwrap() = Some(p));
    let call = g.confirm(del("/home/a"));
    let answer = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let p = held.lock().unwrap().take().expect("the approver got the request");
        assert!(p.is_pending());
        p.deny(Some("not today".into()), None).unwrap();
    };
    let (d, ()) = tokio::join!(call, answer);
    assert!(matches!(d.unwrap(), Decision::Denied { reason: Some(r), .. } if r == "not today"));
}

#[tokio::test(start_paused = true)]
async fn an_inline_approver_that_lets_go_without_answering_fails_the_step_at_once() {
    let g = gate();
    let _guard = g.on_request_inline(|_p| {});
    let d = g.confirm(del("/home/a")).now_or_never().expect("ended at once").unwrap();
    assert_eq!(cancelled(&d), Some(CancelReason::ApprovalFailed));
}

#[tokio::test(start_paused = true)]
async fn an_inline_approver_that_panics_fails_the_step_and_the_gate_lives_on() {
    let g = gate();
    let audit = Arc::new(MemoryAuditSink::default());
    let g2 = gate_with(Gate::builder().audit(audit.clone()), Arc::default());
    for gate in [&g, &g2] {
        let _guard = gate.on_request_inline(|_p| panic!("approver bug"));
        let d = gate.confirm(del("/home/a")).now_or_never().expect("ended at once").unwrap();
        assert_eq!(cancelled(&d), Some(CancelReason::ApprovalFailed));
    }
    let notice = audit
        .records()
        .into_iter()
        .find(|r| r.kind == AuditKind::Notice && r.decision.as_deref() == Some("approval-failed"))
        .expect("a notice");
    assert_eq!(notice.reason.as_deref(), Some("the approver panicked"));
}

#[tokio::test(start_paused = true)]
async fn an_inline_failure_ends_at_once_even_when_responders_are_restricted() {
    let g = gate_with(Gate::builder().authenticator(Arc::new(AllowedResponders(vec!["alice".into()]))), Arc::default());
    let _guard = g.on_request_inline(|p| {
        p.fail("the host approver raised");
    });
    let d = g.confirm(del("/home/a")).now_or_never().expect("ended at once").unwrap();
    assert_eq!(cancelled(&d), Some(CancelReason::ApprovalFailed));
}

#[tokio::test(start_paused = true)]
async fn an_inline_approver_attached_late_receives_what_is_already_pending() {
    let g = gate_with(Gate::builder().deny_when_unobserved(false), Arc::default());
    let call = g.confirm(del("/home/a"));
    let attach = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(g.pending_count(), 1);
        g.on_request_inline(|p| {
            p.approve().unwrap();
        })
    };
    let (d, _guard) = tokio::join!(call, attach);
    assert!(d.unwrap().is_approved());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_inline_approver_cancels_what_it_held() {
    let g = gate();
    let held: Arc<Mutex<Vec<PendingRequest>>> = Arc::default();
    let h = held.clone();
    let guard = g.on_request_inline(move |p| h.lock().unwrap().push(p));
    let call = g.confirm(del("/home/a"));
    let detach = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(guard);
    };
    let (d, ()) = tokio::join!(call, detach);
    assert_eq!(cancelled(&d.unwrap()), Some(CancelReason::NoApprover));
    assert_eq!(g.approver_count(), 0);
    // The handle it still holds can no longer answer.
    let p = held.lock().unwrap().pop().unwrap();
    assert_eq!(p.approve().unwrap_err().kind(), ErrorKind::AlreadyResolved);
}

#[tokio::test(start_paused = true)]
async fn a_closer_wakes_a_waiting_receiver_and_detaches_the_approver() {
    let g = gate_with(Gate::builder().deny_when_unobserved(false), Arc::default());
    let mut sub = g.subscribe();
    let closer = sub.closer();
    assert_eq!(g.approver_count(), 1);
    let waiting = tokio::spawn(async move { sub.recv().await.is_none() });
    tokio::time::sleep(Duration::from_secs(1)).await;
    closer.close();
    closer.close(); // idempotent
    assert!(tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("woken").unwrap());
    assert_eq!(g.approver_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn closing_the_last_approver_subscription_cancels_pending_requests() {
    let g = gate();
    let mut sub = g.subscribe();
    let closer = sub.closer();
    let call = g.confirm(del("/home/a"));
    let close = async {
        next_request(&mut sub).await;
        closer.close();
        assert!(sub.recv().await.is_none(), "a closed subscription ends at once");
    };
    let (d, ()) = tokio::join!(call, close);
    assert_eq!(cancelled(&d.unwrap()), Some(CancelReason::NoApprover));
}

#[tokio::test(start_paused = true)]
async fn close_ends_every_subscription_after_the_cancellations() {
    let g = gate();
    let mut sub = g.subscribe();
    let mut watch = g.observe();
    let call = g.confirm(del("/home/a"));
    let close = async {
        next_request(&mut sub).await;
        g.close();
        let mut outcomes = Vec::new();
        while let Some(e) = sub.recv().await {
            if let Ok(Event::ConfirmationResolved(r)) = e {
                outcomes.push(r.cancel_reason);
            }
        }
        assert_eq!(outcomes, vec![Some(CancelReason::Shutdown)], "delivered, then ended");
        let mut n = 0;
        while watch.recv().await.is_some() {
            n += 1;
        }
        assert!(n >= 2, "the observer saw the request and its end");
        // Subscribing after the close ends at once.
        assert!(g.subscribe().recv().await.is_none());
    };
    let (d, ()) = tokio::join!(call, close);
    assert_eq!(cancelled(&d.unwrap()), Some(CancelReason::Shutdown));
}

#[tokio::test(start_paused = true)]
async fn a_handler_counts_as_an_approver_until_stopped() {
    let g = gate();
    let guard = g.on_request(Arc::new(|p: PendingRequest| {
        async move { p.approve().map(|_| ()).map_err(|e| e.to_string()) }.boxed()
    }));
    assert_eq!(g.approver_count(), 1);
    assert!(g.confirm(del("/home/a")).await.unwrap().is_approved());
    guard.stop();
    tokio::task::yield_now().await;
    assert_eq!(g.approver_count(), 0);
    assert_eq!(cancelled(&g.confirm(del("/home/b")).await.unwrap()), Some(CancelReason::NoApprover));
}

#[test]
fn lagged_serializes_for_bindings() {
    let l = Lagged { missed: 3, pending: vec![], more: None };
    assert_eq!(serde_json::to_value(&l).unwrap(), json!({"missed": 3, "pending": [], "more": null}));
}

#[test]
fn decision_accessors_read_every_variant() {
    let id = uuid::Uuid::new_v4();
    let a = Decision::Approved {
        request_id: Some(id),
        arguments: json!({}),
        edited: true,
        by: ApprovedBy::Person,
        scope: Scope::Session,
        responder: Some("alice".into()),
    };
    assert_eq!(
        (a.responder(), a.scope(), a.approved_by(), a.edited()),
        (Some("alice"), Scope::Session, Some(ApprovedBy::Person), true)
    );
    assert_eq!((a.reason(), a.cancel_reason(), a.timeout_ms()), (None, None, None));
    let d = Decision::Denied { request_id: id, reason: Some("no".into()), responder: Some("bob".into()) };
    assert_eq!(
        (d.responder(), d.reason(), d.scope(), d.approved_by(), d.edited()),
        (Some("bob"), Some("no"), Scope::Once, None, false)
    );
    let t = Decision::TimedOut { request_id: id, timeout_ms: 5 };
    assert_eq!((t.timeout_ms(), t.responder()), (Some(5), None));
    let c = Decision::Cancelled { request_id: None, reason: CancelReason::Shutdown };
    assert_eq!((c.cancel_reason(), c.request_id()), (Some(CancelReason::Shutdown), None));
}

/// An inline approver answering in the publishing poll: approved as shown, the call gets exactly
/// the arguments it came with (numbers, escapes and all); approved with an edit, the edit. A
/// durable store records what was approved either way, as it does for any other approver.
#[tokio::test]
async fn an_inline_approval_hands_back_the_arguments_as_shown_and_the_store_records_them() {
    let args = json!({
        "to": ["a@example.com", "b@example.com"],
        "amount": 0.30000000000000004,
        "big": u64::MAX,
        "small": i64::MIN,
        "tiny": 2.5e-300,
        "negative_zero": -0.0,
        "text": "naïve \u{202e} \"quoted\" \n",
        "nested": {"z": [1, null, true, {}], "a": []}
    });
    let edit = json!({"to": ["c@example.com"], "amount": 1});
    let dir = tempfile::tempdir().unwrap();
    for durable in [false, true] {
        for edited in [false, true] {
            let mut b = Gate::builder()
                .tool(Tool::builder("send_email").editable(true).approval(ApprovalMode::Required).build());
            if durable {
                let db = dir.path().join(format!("edited-{edited}.db"));
                b = b.store(SqliteStore::open(db).unwrap());
            }
            let g = b.build().unwrap();
            let answer = edited.then(|| edit.clone());
            let _approver = g.on_request_inline(move |p| {
                p.approve_with(answer.clone(), Scope::Once, None).unwrap();
            });
            let d = g.confirm(ToolCall::new("send_email", args.clone())).await.unwrap();
            let Decision::Approved { arguments, edited: was_edited, request_id: Some(id), .. } = d else {
                panic!("{d:?}")
            };
            let expected = if edited { &edit } else { &args };
            assert_eq!(was_edited, edited);
            assert_eq!(&arguments, expected, "durable {durable}, edited {edited}");
            assert_eq!(arguments.to_string(), expected.to_string());
            if durable {
                let rec = g.record(&id).expect("recorded");
                assert_eq!(rec.arguments.as_ref(), Some(expected), "edited {edited}");
            }
        }
    }
}

/// A handle's answer is bound by the request it holds, so it is made without copies of the
/// binding fields; whoever reads the answer still sees them: the published response event, an
/// authenticator, and the audit record of a late answer that is refused.
#[tokio::test]
async fn a_handles_answer_shows_its_binding_wherever_it_is_read() {
    struct Seen(Mutex<Vec<ConfirmationResponse>>);
    impl ResponseAuthenticator for Seen {
        fn authenticate(&self, _: &ConfirmationRequest, r: &ConfirmationResponse) -> Result<(), String> {
            self.0.lock().unwrap().push(r.clone());
            Ok(())
        }
    }
    let seen = Arc::new(Seen(Mutex::new(Vec::new())));
    let audit = MemoryAuditSink::new();
    let g = gate_with(Gate::builder().authenticator(seen.clone()).audit(audit.clone()), Arc::new(AtomicUsize::new(0)));
    let kept = Arc::new(Mutex::new(None));
    let k = kept.clone();
    let _approver = g.on_request_inline(move |p| {
        p.approve_with(None, Scope::Once, Some("alice".into())).unwrap();
        *k.lock().unwrap() = Some(p);
    });
    let mut sub = g.subscribe();
    assert!(g.confirm(del("/home/a").session("s1")).await.unwrap().is_approved());
    let events = drain(&mut sub).await;
    let (Some(Event::ConfirmationRequest(req)), Some(Event::ConfirmationResponse(published))) =
        (events.first(), events.get(1))
    else {
        panic!("{events:?}")
    };
    let bound = |r: &ConfirmationResponse, what: &str| {
        assert_eq!(r.id, req.id, "{what}");
        assert_eq!(r.tool.as_deref(), Some("delete_file"), "{what}");
        assert_eq!(r.arguments_digest.as_deref(), Some(req.arguments_digest.to_string().as_str()), "{what}");
        assert_eq!(r.session_id.as_deref(), Some("s1"), "{what}");
        assert_eq!(r.responder.as_deref(), Some("alice"), "{what}");
    };
    bound(published, "published");
    bound(&seen.0.lock().unwrap()[0], "authenticator");
    // A late answer through the same handle: refused, and audited with its binding.
    let late = kept.lock().unwrap().take().unwrap();
    assert_eq!(late.deny(None, Some("alice".into())).unwrap_err().kind(), ErrorKind::AlreadyResolved);
    let rejected = audit.records().into_iter().rfind(|r| r.kind == AuditKind::ResponseRejected).expect("audited");
    assert_eq!(rejected.request_id, Some(req.id));
    assert_eq!(rejected.tool.as_deref(), Some("delete_file"));
    assert_eq!(rejected.arguments_digest.as_deref(), Some(req.arguments_digest.to_string().as_str()));
    assert_eq!(rejected.session_id.as_deref(), Some("s1"));

    // Without an authenticator (nothing filled in before publishing), the event still shows it.
    let g = gate();
    let _approver = g.on_request_inline(|p| {
        p.approve().unwrap();
    });
    let mut sub = g.subscribe();
    assert!(g.confirm(del("/home/b").session("s2")).await.unwrap().is_approved());
    let events = drain(&mut sub).await;
    let Some(Event::ConfirmationRequest(req)) = events.first() else { panic!("{events:?}") };
    let Some(Event::ConfirmationResponse(published)) = events.get(1) else { panic!("{events:?}") };
    assert_eq!(published.tool.as_deref(), Some("delete_file"));
    assert_eq!(published.arguments_digest.as_deref(), Some(req.arguments_digest.to_string().as_str()));
    assert_eq!(published.session_id.as_deref(), Some("s2"));
}

/// A closed gate asks nothing: nobody attached before or after `close` counts as an approver,
/// in every language (each binding reads this count).
#[tokio::test]
async fn a_closed_gate_has_no_approvers() {
    let g = gate();
    let sub = g.subscribe();
    let inline = g.on_request_inline(|p| drop(p.approve()));
    assert_eq!(g.approver_count(), 2);
    g.close();
    assert_eq!(g.approver_count(), 0);
    let late = g.subscribe();
    let late_inline = g.on_request_inline(|p| drop(p.approve()));
    assert_eq!(g.approver_count(), 0);
    drop((sub, inline, late, late_inline));
    assert_eq!(g.approver_count(), 0);
}
