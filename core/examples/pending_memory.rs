//! Bytes per pending request with 100,000 pending (or `--n N`), counted by a global allocator,
//! and what listing them costs: one page of 1,000 against the whole list.
//! `cargo run --release -p signoff --example pending_memory [-- --n 1000000] [--owned]`
//!
//! By default each call is awaited in a tokio task of its own, as a Rust application would.
//! `--owned` holds each call as the bindings do: its `confirm_owned` future boxed and polled
//! once, no task: what signoff itself allocates per pending call.

use serde_json::json;
use signoff::{Gate, Tool, ToolCall};
use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged;
// the counter is bookkeeping only, so `System`'s guarantees carry over.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `l`; passed through as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` was allocated by `System` (through `alloc`/`realloc` above) with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` was allocated by `System` with layout `l`; the caller upholds `realloc`'s contract for `n`.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let owned = args.iter().any(|a| a == "--owned");
    let n: usize = match args.iter().position(|a| a == "--n") {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).expect("--n takes a count"),
        None => 100_000,
    };
    #[allow(non_snake_case)]
    let N = n;
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let g = Gate::builder()
            .tool(Tool::builder("delete_file").description("Deletes a file").parameters(json!({"type": "object", "properties": {"path": {"type": "string"}}})).build())
            .deny_when_unobserved(false)
            .build()
            .unwrap();
        // Warm up the maps' and runtime's first allocations.
        let warm: Vec<_> = (0..1000).map(|i| { let g = g.clone(); tokio::spawn(async move { g.confirm(ToolCall::new("delete_file", json!({"path": format!("/w/{i}")})).call_id(format!("w{i}"))).await }) }).collect();
        while g.pending_count() < 1000 { tokio::task::yield_now().await; }
        g.close();
        for w in warm { let _ = w.await; }
        drop(g);

        let g = Gate::builder()
            .tool(Tool::builder("delete_file").description("Deletes a file").parameters(json!({"type": "object", "properties": {"path": {"type": "string"}}})).build())
            .deny_when_unobserved(false)
            .build()
            .unwrap();
        let b0 = LIVE.load(Ordering::SeqCst);
        let args: Vec<_> = (0..N).map(|i| json!({"path": format!("/home/user/file-{i:06}.txt")})).collect();
        let args_bytes = (LIVE.load(Ordering::SeqCst) - b0) as f64 / N as f64;
        drop(args);
        let before = LIVE.load(Ordering::SeqCst);
        let call = |i: usize| ToolCall::new("delete_file", json!({"path": format!("/home/user/file-{i:06}.txt")})).call_id(format!("call_{i:06}"));
        let mut held = Vec::new();
        let tasks: Vec<_> = if owned {
            let waker = futures_util::task::noop_waker();
            held = (0..N)
                .map(|i| {
                    let mut f = Box::pin(g.confirm_owned(call(i)));
                    assert!(f.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_pending());
                    f
                })
                .collect();
            Vec::new()
        } else {
            (0..N)
                .map(|i| {
                    let g = g.clone();
                    let c = call(i);
                    tokio::spawn(async move { g.confirm(c).await })
                })
                .collect()
        };
        while g.pending_count() < N {
            tokio::task::yield_now().await;
        }
        let during = LIVE.load(Ordering::SeqCst);
        let per = (during - before) as f64 / N as f64;
        // The JoinHandles vector is the benchmark's own bookkeeping, not the gate's.
        let handles = (N * std::mem::size_of::<tokio::task::JoinHandle<()>>()) as f64 / N as f64;
        let t = std::time::Instant::now();
        let page = g.pending_page(None, 1000);
        let first_page = t.elapsed();
        let t = std::time::Instant::now();
        let mid = g.pending_page(Some(&signoff::PendingCursor::of(&page.requests[999])), 1000);
        let next_page = t.elapsed();
        assert_eq!(mid.requests.len(), 1000.min(N - 1000));
        let t = std::time::Instant::now();
        let all = g.pending();
        let whole = t.elapsed();
        assert_eq!(all.len(), N);
        drop(all);
        let sample = page.requests[0].clone();
        let shown = serde_json::to_string(&*sample).unwrap().len();
        println!("pending requests:              {N}");
        if owned {
            println!("bytes per pending request:     {per:.0} (all live heap growth / N: the boxed future, the request, the waiter, store, paging and timer-queue entries; 8 B of it is the bench's vector of futures)");
        } else {
            println!("bytes per pending request:     {:.0} (all live heap growth / N, incl. the tokio task awaiting it, the request, the waiter, store, paging and timer-queue entries; {handles:.0} B of it is the bench's JoinHandle vector)", per);
        }
        println!("of which the caller's own arguments value (a 1-key JSON object): {args_bytes:.0} bytes");
        println!("of which the request's JSON:   {shown} bytes when serialized (tool, description, args, prompt, digest, ids)");
        println!("pending_page(None, 1000):      {first_page:?}; the next page: {next_page:?}; pending() (all {N}): {whole:?}");
        g.close();
        for t in tasks {
            let _ = t.await;
        }
        drop(held);
    });
}
