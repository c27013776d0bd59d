//! Concurrency under load, on a multi-threaded runtime with real time.

mod common;
use common::*;
use rand::seq::SliceRandom;
use serde_json::json;
use signoff::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// 10,000 confirmations in flight at once, answered in random order: each gets its own answer.
/// The subscriber's bus is smaller than the burst, so it also exercises lag and re-sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_confirmations_each_get_their_own_answer() {
    const N: usize = 10_000;
    let g = gate_with(Gate::builder().bus_capacity(1024), Arc::new(AtomicUsize::new(0)));
    let mut sub = g.subscribe();
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move { g.confirm(del(&format!("/f/{i}")).call_id(i.to_string())).await })
        })
        .collect();
    let mut requests: HashMap<uuid::Uuid, Arc<ConfirmationRequest>> = HashMap::new();
    let mut lagged = 0;
    while requests.len() < N {
        match tokio::time::timeout(Duration::from_secs(30), sub.recv()).await.expect("stalled").unwrap() {
            Ok(Event::ConfirmationRequest(r)) => {
                requests.insert(r.id, r);
            }
            Ok(_) => {}
            Err(l) => {
                lagged += 1;
                assert!(l.pending.len() <= LAGGED_SNAPSHOT_LIMIT, "the re-sync snapshot is bounded");
                requests.extend(l.pending.into_iter().map(|r| (r.id, r)));
                let mut after = l.more;
                while let Some(a) = after {
                    let page = g.pending_page(Some(&a), 700);
                    requests.extend(page.requests.into_iter().map(|r| (r.id, r)));
                    after = page.next;
                }
            }
        }
    }
    let mut order: Vec<_> = requests.values().cloned().collect();
    order.shuffle(&mut rand::rng());
    // Answer from two threads at once: odd calls denied with their own number, even ones
    // approved with arguments edited to name their own number.
    let halves: Vec<Vec<_>> = order.chunks(N / 2).map(|c| c.to_vec()).collect();
    let answerers: Vec<_> = halves
        .into_iter()
        .map(|half| {
            let g = g.clone();
            std::thread::spawn(move || {
                for req in half {
                    let n: usize = req.tool_call_id.as_ref().unwrap().parse().unwrap();
                    let resp = if n % 2 == 1 {
                        ConfirmationResponse::deny(&req, Some(format!("no {n}")))
                    } else {
                        ConfirmationResponse::approve(&req).with_arguments(json!({"path": format!("/edited/{n}")}))
                    };
                    g.respond(resp).unwrap();
                }
            })
        })
        .collect();
    for a in answerers {
        a.join().unwrap();
    }
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap().unwrap() {
            Decision::Denied { reason, .. } => assert_eq!(reason.unwrap(), format!("no {i}")),
            Decision::Approved { arguments, edited: true, .. } => {
                assert_eq!(i % 2, 0);
                assert_eq!(arguments, json!({"path": format!("/edited/{i}")}));
            }
            d => panic!("call {i}: {d:?}"),
        }
    }
    assert!(g.pending().is_empty());
    eprintln!("10k: subscriber lagged {lagged} times and re-synced");
}

/// Two responses race for one request, many times over: exactly one takes effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_responses_exactly_one_takes_effect() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    let mut approvals_won = 0;
    for round in 0..500 {
        let exec = tokio::spawn({
            let g = g.clone();
            async move { g.execute(del("/x")).await }
        });
        let req = next_request(&mut sub).await;
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let racers: Vec<_> = [true, false]
            .into_iter()
            .map(|approve| {
                let (g, req, barrier) = (g.clone(), req.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let r = if approve {
                        ConfirmationResponse::approve(&req)
                    } else {
                        ConfirmationResponse::deny(&req, None)
                    };
                    g.respond(r)
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(ok.len(), 1, "round {round}: {results:?}");
        let loser = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert_eq!(loser.kind(), ErrorKind::AlreadyResolved);
        let r = exec.await.unwrap();
        if *ok[0] == Outcome::Approved {
            approvals_won += 1;
        }
        let expected = if *ok[0] == Outcome::Approved { ToolStatus::Executed } else { ToolStatus::Denied };
        assert_eq!(r.status, expected, "round {round}");
    }
    // Exactly the rounds the approval won ran, once each.
    assert_eq!(runs.load(Ordering::SeqCst), approvals_won);
}

/// An approval racing the timeout: one final state per request, and the tool runs iff the
/// approval was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_racing_the_timeout_has_one_final_state_and_at_most_one_execution() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder().default_timeout(Duration::from_millis(2)), runs.clone());
    let mut sub = g.subscribe();
    let mut accepted = 0;
    let mut rejected = 0;
    for _ in 0..300 {
        let exec = tokio::spawn({
            let g = g.clone();
            async move { g.execute(del("/x")).await }
        });
        let req = next_request(&mut sub).await;
        // Aim at the deadline.
        tokio::time::sleep(Duration::from_micros(1500 + rand::random_range(0..1000))).await;
        let answer = g.respond(ConfirmationResponse::approve(&req));
        let r = exec.await.unwrap();
        match answer {
            Ok(Outcome::Approved) => {
                accepted += 1;
                assert_eq!(r.status, ToolStatus::Executed);
            }
            Err(e) => {
                rejected += 1;
                assert_eq!(e.kind(), ErrorKind::Expired, "{e}");
                assert_eq!(r.status, ToolStatus::TimedOut);
            }
            other => panic!("{other:?}"),
        }
        // Exactly one resolved event for this request.
        let mut resolved = 0;
        while let Ok(Some(Ok(e))) = tokio::time::timeout(Duration::from_millis(5), sub.recv()).await {
            if let Event::ConfirmationResolved(x) = &e {
                assert_eq!(x.id, req.id);
                resolved += 1;
            }
        }
        assert_eq!(resolved, 1);
    }
    assert_eq!(runs.load(Ordering::SeqCst), accepted);
    eprintln!("approve vs timeout: {accepted} approvals won, {rejected} timeouts won");
}

/// Cancellation racing an approval: never both, never an execution after a cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_approve_never_runs_a_cancelled_call() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = gate_with(Gate::builder(), runs.clone());
    let mut sub = g.subscribe();
    let mut approved = 0;
    for _ in 0..300 {
        let exec = tokio::spawn({
            let g = g.clone();
            async move { g.execute(del("/x")).await }
        });
        let req = next_request(&mut sub).await;
        let g2 = g.clone();
        let r2 = req.clone();
        let t = std::thread::spawn(move || g2.respond(ConfirmationResponse::approve(&r2)));
        exec.abort();
        let answer = t.join().unwrap();
        let finished = exec.await;
        if let Ok(r) = &finished
            && r.status == ToolStatus::Executed
        {
            approved += 1;
            assert!(answer.is_ok());
        }
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(1), sub.recv()).await {}
    }
    assert_eq!(runs.load(Ordering::SeqCst), approved, "a tool ran without its execute completing");
    assert!(g.pending().is_empty());
}
