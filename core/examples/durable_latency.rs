//! Per-approval latency of a durable, signed approval: `cargo run --release -p signoff --example
//! durable_latency [N]`. Each approval is one `execute` (request stored) → token issued →
//! `respond_token` (verified, approval stored) → executing stored → tool → done stored.
//! Prints the median and tail over N approvals (default 20,000), per store configuration.

use serde_json::json;
use signoff::{Event, Gate, SqliteOptions, SqliteStore, TokenKeys, TokenResponse, Tool, ToolCall, ToolStatus};
use std::time::Instant;

fn gate(store: Option<std::sync::Arc<SqliteStore>>) -> Gate {
    let mut b = Gate::builder()
        .tokens(TokenKeys::parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap())
        .deny_when_unobserved(false)
        .tool(
            Tool::builder("delete_file")
                .parameters(json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
                .executor(|a| async move { Ok(json!({"deleted": a["path"]})) })
                .build(),
        );
    if let Some(s) = store {
        b = b.store(s);
    }
    b.build().unwrap()
}

fn run(name: &str, g: Gate, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut lat = rt.block_on(async {
        let mut sub = g.subscribe();
        let approver = g.clone();
        tokio::spawn(async move {
            while let Some(e) = sub.recv().await {
                if let Ok(Event::ConfirmationRequest(req)) = e {
                    let token = approver.issue_token(&req.id, "alice").unwrap();
                    approver.respond_token(&token, TokenResponse::approve("alice")).unwrap();
                }
            }
        });
        let mut lat = Vec::with_capacity(n);
        for i in 0..n + n / 10 {
            let call = ToolCall::new("delete_file", json!({"path": format!("/tmp/{i}")}));
            let t = Instant::now();
            let r = g.execute(call).await;
            let dt = t.elapsed();
            assert_eq!(r.status, ToolStatus::Executed);
            if i >= n / 10 {
                lat.push(dt.as_nanos() as f64 / 1000.0); // first 10% is warm-up
            }
        }
        lat
    });
    lat.sort_by(f64::total_cmp);
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    println!(
        "{name:<28} n={n}  median {:>7.1} µs  p90 {:>7.1}  p99 {:>8.1}  mean {:>7.1}",
        q(0.5),
        q(0.9),
        q(0.99),
        mean
    );
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    run("memory store", gate(None), n);
    run("sqlite (WAL, sync=NORMAL)", gate(Some(SqliteStore::open(dir.path().join("a.db")).unwrap())), n);
    let full = SqliteStore::open_with(dir.path().join("b.db"), SqliteOptions { synchronous_full: true }).unwrap();
    run("sqlite (WAL, sync=FULL)", gate(Some(full)), (n / 20).max(200));
}
