//! A tight round-trip loop for profilers: `cargo run --release -p signoff --example profile_round_trip [N] [inline]`.
//! With `inline`, the approver is an inline one (called in the publishing poll); otherwise a
//! subscriber task answers.
use serde_json::json;
use signoff::{ConfirmationResponse, Event, Gate, Tool, ToolCall};
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let g = Gate::builder()
            .tool(
                Tool::builder("delete_file")
                    .parameters(json!({"type": "object", "properties": {"path": {"type": "string"}}}))
                    .build(),
            )
            .build()
            .unwrap();
        let inline = std::env::args().nth(2).as_deref() == Some("inline");
        let _guard = inline.then(|| {
            g.on_request_inline(|p| {
                p.approve().unwrap();
            })
        });
        if !inline {
            let mut sub = g.subscribe();
            let g2 = g.clone();
            tokio::spawn(async move {
                while let Some(Ok(e)) = sub.recv().await {
                    if let Event::ConfirmationRequest(r) = e {
                        g2.respond(ConfirmationResponse::approve(&r)).unwrap();
                    }
                }
            });
        }
        let args = json!({"path": "/tmp/a"});
        let t = std::time::Instant::now();
        for _ in 0..n {
            assert!(g.confirm(ToolCall::new("delete_file", args.clone())).await.unwrap().is_approved());
        }
        println!("{:.2} µs per round trip", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    });
}
