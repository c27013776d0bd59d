//! `cargo bench -p signoff --bench gate`. Figures are recorded in BENCHMARKS.md.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use signoff::{ConfirmationResponse, Event, Gate, Tool, ToolCall};
use std::time::{Duration, Instant};

fn gate() -> Gate {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
    Gate::builder()
        .tool(Tool::builder("read_file").parameters(schema.clone()).build())
        .tool(Tool::builder("delete_file").parameters(schema).build())
        .build()
        .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

/// A subscriber that approves every request as soon as it sees it.
fn spawn_approver(g: &Gate) {
    let mut sub = g.subscribe();
    let g = g.clone();
    tokio::spawn(async move {
        while let Some(e) = sub.recv().await {
            match e {
                Ok(Event::ConfirmationRequest(req)) => {
                    g.respond(ConfirmationResponse::approve(&req)).unwrap();
                }
                Ok(_) => {}
                Err(lagged) => {
                    for req in lagged.pending {
                        let _ = g.respond(ConfirmationResponse::approve(&req));
                    }
                }
            }
        }
    });
}

/// Times `run` over `iters` calls. The caller's `ToolCall`s are built, and the decisions
/// dropped, outside the timed region, in chunks small enough to stay in cache: this measures
/// the gate, not the caller's allocations.
fn timed_in_chunks<'g, F>(
    rt: &tokio::runtime::Runtime,
    iters: u64,
    make: impl Fn() -> ToolCall,
    run: impl Fn(ToolCall) -> F,
) -> Duration
where
    F: std::future::Future<Output = signoff::Result<signoff::Decision>> + 'g,
{
    const CHUNK: u64 = 256;
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(CHUNK);
        left -= n;
        let calls: Vec<_> = (0..n).map(|_| make()).collect();
        let mut out = Vec::with_capacity(n as usize);
        total += rt.block_on(async {
            let start = Instant::now();
            for c in calls {
                out.push(run(c).await.unwrap());
            }
            start.elapsed()
        });
        assert!(out.iter().all(|d| d.is_approved()));
    }
    total
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate");
    let rt = rt();

    let g = gate();
    let args = json!({"path": "/tmp/a"});
    group.bench_function("ungated", |b| {
        b.iter_custom(|iters| {
            timed_in_chunks(&rt, iters, || ToolCall::new("read_file", args.clone()), |c| g.confirm(c))
        })
    });

    let g = gate();
    rt.block_on(async { spawn_approver(&g) });
    group.bench_function("round_trip", |b| {
        b.iter_custom(|iters| {
            timed_in_chunks(&rt, iters, || ToolCall::new("delete_file", args.clone()), |c| g.confirm(c))
        })
    });

    // The same, with an approver the core calls in the publishing poll: no task, no wake-up.
    let g = gate();
    let _inline = g.on_request_inline(|p| {
        p.approve().unwrap();
    });
    group.bench_function("round_trip_inline", |b| {
        b.iter_custom(|iters| {
            timed_in_chunks(&rt, iters, || ToolCall::new("delete_file", args.clone()), |c| g.confirm(c))
        })
    });

    // 1,000 requests pending at once, then all approved.
    let g = gate();
    group.throughput(Throughput::Elements(1000));
    group.bench_function("throughput_1000_pending", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut sub = g.subscribe();
                    let start = Instant::now();
                    let calls: Vec<_> = (0..1000)
                        .map(|_| {
                            let g = g.clone();
                            let a = args.clone();
                            tokio::spawn(async move { g.confirm(ToolCall::new("delete_file", a)).await })
                        })
                        .collect();
                    let mut seen = 0;
                    while seen < 1000 {
                        match sub.recv().await.unwrap() {
                            Ok(Event::ConfirmationRequest(_)) => seen += 1,
                            Ok(_) => {}
                            Err(l) => panic!("lagged: {l}"),
                        }
                    }
                    for req in g.pending() {
                        g.respond(ConfirmationResponse::approve(&req)).unwrap();
                    }
                    for c in calls {
                        assert!(c.await.unwrap().unwrap().is_approved());
                    }
                    total += start.elapsed();
                    drop(sub);
                }
                total
            })
        })
    });
    group.finish();
}

criterion_group! {
    name = gate_benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(gate_benches);
