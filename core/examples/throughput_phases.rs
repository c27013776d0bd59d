//! Where the time of `gate/throughput_1000_pending` goes, per call: spawning the 1,000 calls until
//! the subscriber has seen every request, answering them, and the calls settling and being joined.
//! `cargo run --release -p signoff --example throughput_phases`.
use serde_json::json;
use signoff::{ConfirmationResponse, Event, Gate, Tool, ToolCall};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Counts allocations, to tell each phase's count per call.
struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System.alloc` with `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: as for `dealloc`.
        unsafe { System.realloc(p, l, n) }
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;
fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
        let g = Gate::builder().tool(Tool::builder("delete_file").parameters(schema).build()).build().unwrap();
        let args = json!({"path": "/tmp/a"});
        let (mut a, mut b, mut c) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let iters = 2000;
        let (mut na, mut nb, mut nc) = (0u64, 0u64, 0u64);
        for _ in 0..iters {
            let mut sub = g.subscribe();
            let t0 = Instant::now();
            let n0 = ALLOCS.load(Relaxed);
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
            let n1 = ALLOCS.load(Relaxed);
            for req in g.pending() {
                g.respond(ConfirmationResponse::approve(&req)).unwrap();
            }
            let t2 = Instant::now();
            let n2 = ALLOCS.load(Relaxed);
            for c in calls {
                assert!(c.await.unwrap().unwrap().is_approved());
            }
            let t3 = Instant::now();
            let n3 = ALLOCS.load(Relaxed);
            na += n1 - n0;
            nb += n2 - n1;
            nc += n3 - n2;
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
        let n = |x: u64| x as f64 / (iters as f64 * 1000.0);
        println!("allocations per call: {:.1}, {:.1}, {:.1}", n(na), n(nb), n(nc));
    });
}
