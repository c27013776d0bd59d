//! Where the time of `gate/throughput_1000_pending` goes, per call: spawning the 1,000 calls until
//! the subscriber has seen every request, answering them, and the calls settling and being joined.
//! `cargo run --release -p signoff --example throughput_phases`.
use serde_json::json;
use signoff::{ConfirmationResponse, Event, Gate, Tool, ToolCall};
use std::time::{Duration, Instant};
fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
        let g = Gate::builder().tool(Tool::builder("delete_file").parameters(schema).build()).build().unwrap();
        let args = json!({"path": "/tmp/a"});
        let (mut a, mut b, mut c) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let iters = 2000;
        for _ in 0..iters {
            let mut sub = g.subscribe();
            let t0 = Instant::now();
            let calls: Vec<_> = (0..1000)
                .map(|_| {
                    let g = g.clone();
                    let a = args.clone();
                    tokio::spawn(async move { g.confirm(ToolCall::new("delete_file", a)).await })
                })
                .collect();
            let mut seen = 0;
            while seen < 1000 {
                if let Ok(Event::ConfirmationRequest(_)) = sub.recv().await.unwrap() {
                    seen += 1
                }
            }
            let t1 = Instant::now();
            for req in g.pending() {
                g.respond(ConfirmationResponse::approve(&req)).unwrap();
            }
            let t2 = Instant::now();
            for c in calls {
                assert!(c.await.unwrap().unwrap().is_approved());
            }
            let t3 = Instant::now();
            a += t1 - t0;
            b += t2 - t1;
            c += t3 - t2;
            drop(sub);
        }
        let per = |d: Duration| d.as_secs_f64() * 1e9 / (iters as f64 * 1000.0);
        println!(
            "per call: spawn+request+seen {:.0} ns, respond {:.0} ns, settle+join {:.0} ns, total {:.0} ns",
            per(a),
            per(b),
            per(c),
            per(a + b + c)
        );
    });
}
