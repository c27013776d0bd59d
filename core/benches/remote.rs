//! `cargo bench -p signoff --bench remote`: approval tokens and the durable store.
//! Figures (median) are recorded in BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use signoff::{Event, Gate, SqliteOptions, SqliteStore, TokenKeys, TokenResponse, Tool, ToolCall, ToolStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn builder() -> signoff::GateBuilder {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
    Gate::builder().tokens(TokenKeys::parse(KEYS).unwrap()).deny_when_unobserved(false).tool(
        Tool::builder("delete_file")
            .parameters(schema)
            .executor(|a| async move { Ok(json!({"deleted": a["path"]})) })
            .build(),
    )
}

/// The remote approver: for each request, issue a token for alice and answer with it, as an
/// HTTP handler would when alice's phone posts the token back.
fn spawn_token_approver(g: &Gate) {
    let mut sub = g.subscribe();
    let g = g.clone();
    tokio::spawn(async move {
        while let Some(e) = sub.recv().await {
            if let Ok(Event::ConfirmationRequest(req)) = e {
                let token = g.issue_token(&req.id, "alice").unwrap();
                g.respond_token(&token, TokenResponse::approve("alice")).unwrap();
            }
        }
    });
}

fn round_trips(c: &mut Criterion, name: &str, gate: Gate) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { spawn_token_approver(&gate) });
    let args = json!({"path": "/tmp/a"});
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let r = gate.execute(ToolCall::new("delete_file", args.clone())).await;
                    assert_eq!(r.status, ToolStatus::Executed);
                }
                start.elapsed()
            })
        })
    });
}

/// 64 calls at once on a two-worker runtime, each approved with a token: the time for the whole
/// batch. With a synced store every call commits four times; whether those commits block the
/// runtime's workers decides how much of the batch overlaps.
fn concurrent(c: &mut Criterion, name: &str, gate: Gate) {
    const CALLS: usize = 64;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async { spawn_token_approver(&gate) });
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let calls: Vec<_> = (0..CALLS)
                        .map(|i| {
                            let g = gate.clone();
                            tokio::spawn(async move {
                                g.execute(ToolCall::new("delete_file", json!({"path": format!("/tmp/{i}")}))).await
                            })
                        })
                        .collect();
                    for call in calls {
                        assert_eq!(call.await.unwrap().status, ToolStatus::Executed);
                    }
                }
                start.elapsed()
            })
        })
    });
}

fn benches(c: &mut Criterion) {
    // Issue and verify alone.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let gate = builder().build().unwrap();
    let g = gate.clone();
    rt.spawn(async move { g.execute(ToolCall::new("delete_file", json!({"path": "/x"}))).await });
    let req = rt.block_on(async {
        loop {
            if let Some(r) = gate.pending().into_iter().next() {
                break r;
            }
            tokio::task::yield_now().await;
        }
    });
    c.bench_function("token/issue", |b| b.iter(|| gate.issue_token(&req.id, "alice").unwrap()));
    let token = gate.issue_token(&req.id, "alice").unwrap();
    c.bench_function("token/verify", |b| b.iter(|| gate.inspect_token(&token).unwrap()));

    // Whole signed approvals: execute → request → token issued → respond_token → executor → result.
    round_trips(c, "signed_approval/memory_store", builder().build().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("normal.db")).unwrap();
    round_trips(c, "signed_approval/sqlite_wal_normal", builder().store(store).build().unwrap());
    let store = SqliteStore::open_with(dir.path().join("full.db"), SqliteOptions { synchronous_full: true }).unwrap();
    round_trips(c, "signed_approval/sqlite_wal_full", builder().store(store as Arc<_>).build().unwrap());
    let store = SqliteStore::open_with(dir.path().join("full64.db"), SqliteOptions { synchronous_full: true }).unwrap();
    concurrent(c, "signed_approval_64_at_once/sqlite_wal_full", builder().store(store as Arc<_>).build().unwrap());
}

criterion_group! {
    name = remote_benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(remote_benches);
