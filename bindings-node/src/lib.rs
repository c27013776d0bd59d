//! The `_native` addon behind the `signoff` npm package.
//!
//! This crate only converts types and bridges async; every decision (policy, matching,
//! timeouts, "a handler that did not answer fails the approval step") is made by the `signoff`
//! core. The idiomatic API lives in the TypeScript facade (`lib/*.ts`).
//!
//! Async model (see `driver.rs`): the core's futures are polled on the JavaScript thread, inside
//! the tokio runtime's context, and woken through one threadsafe function per gate. A call that
//! needs no approval, or whose approval is given synchronously by a request listener, therefore
//! completes inside the call that started it, with no thread hop.
//!
//! Data crosses the boundary as JSON text (the facade's strict serializer, `lib/json.ts`, and
//! `JSON.parse` on the JavaScript side; the core's strict parser, `signoff::json`, here: see
//! `json.rs`): for the small objects involved this is several times cheaper than building or
//! reading JavaScript objects property by property through N-API, and it gives JSON's number
//! semantics (an integral `5000000000` reaches the core as an integer, as from every binding).
//! The shapes are the `#[napi(object)]` structs below (camelCase), which the generated `.d.ts`
//! describes for the facade.

#![deny(clippy::all)]

mod audit;
mod driver;
mod errors;
mod events;
mod executor;
mod gate;
mod handler;
mod json;
mod policy;
mod store;
mod token;
mod tools;

use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::Duration;

/// The runtime whose context the core's futures are polled in: its worker thread runs the timers
/// (deadlines) and blocking work (closing and flushing an audit log). Nothing else runs there.
pub(crate) static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(4)
        .thread_name("signoff-node")
        .enable_time()
        .build()
        .expect("signoff: cannot start the tokio runtime");
    // A timer registered while the timer thread sleeps past its deadline wakes that thread (a
    // syscall on every confirmation). A 1 s tick keeps the thread's planned wake-up close, so the
    // usual deadlines (seconds to minutes) register without waking it.
    rt.spawn(async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
        }
    });
    rt
});

thread_local! {
    /// Where the core's handler driver (`Gate::on_request` and the tasks it spawns) runs: a
    /// current-thread runtime driven by the JavaScript thread itself (`run_local`), so that a
    /// request published by a confirm, and the listener's answer, need no thread hop or wake-up.
    /// Those tasks are woken by events published on this thread, except while closing with an
    /// audit log (then they run at the next call into the gate). Its timers (the core's handler
    /// driver uses none today) would fire when the JavaScript thread next drives it.
    pub(crate) static LOCAL: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .event_interval(u32::MAX)
        .build()
        .expect("signoff: cannot start the local tokio runtime");
}

/// Ready once polled twice: the current-thread scheduler drains every ready task in between.
struct UntilIdle(bool);

impl Future for UntilIdle {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

thread_local! {
    /// `run_local` is running on this thread (it must not be entered again: a runtime cannot be
    /// driven from inside itself).
    static IN_LOCAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs the local runtime's ready tasks (and those they make ready) to completion or their next
/// wait. Returns without blocking. Called from inside a run (a task dropping what stops the
/// handler), it does nothing: the outer run reaches what was made ready.
pub(crate) fn run_local() {
    if IN_LOCAL.with(|f| f.replace(true)) {
        return;
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_LOCAL.with(|f| f.set(false));
        }
    }
    let _reset = Reset;
    LOCAL.with(|rt| rt.block_on(UntilIdle(false)));
}
