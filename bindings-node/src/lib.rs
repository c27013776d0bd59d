//! The `_native` addon behind the `signoff` npm package.
//!
//! This crate only converts types and bridges async; every decision (policy, matching,
//! timeouts, "a handler that did not answer fails the approval step") is made by the `signoff`
//! core. The idiomatic API lives in the TypeScript facade (`lib/*.ts`).
//!
//! Async model (see `driver.rs`): the core's futures are polled on the JavaScript thread, inside
//! the tokio runtime's context, and woken through one threadsafe function per gate. Request
//! listeners are the core's inline approver, called inside that poll (`handler.rs`). A call that
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
mod camel;
mod console;
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

use std::sync::LazyLock;
use std::time::Duration;

/// The runtime whose context the core's futures are polled in: its worker thread runs the timers
/// (deadlines), restored requests (`Gate::recover`), the rest of a tool run whose caller stopped
/// waiting, and blocking work (closing and flushing an audit log).
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
