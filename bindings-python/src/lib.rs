//! `signoff._native`: the thin native layer of the Python package. It converts types between
//! Python and the `signoff` core and bridges asyncio and tokio; every decision (policy, matching,
//! timeouts, fail-safe denials) is the core's. One file per core module:
//!
//! | file | core module |
//! |---|---|
//! | `gate.rs` | `gate` with `gate::tokens`, `gate::recovery` (Gate, Decision, ToolCall, Recovery) |
//! | `token.rs` | `token` (Secret, TokenKeys, TokenClaims) |
//! | `store.rs` | `store` + `sqlite` (SqliteStore, Approvers, StoredRecord) |
//! | `audit.rs` | `audit` (JsonlAuditSink with rotation, verify_chain) |
//! | `console.rs` | crate `signoff-console` (Console: the browser approval console) |
//! | `events.rs` | `event` (events, Subscription, Lagged) |
//! | `handler.rs` | `handler` (on_request, PendingRequest) |
//! | `executor.rs` | `executor` + `tool::ContextExecutor` (Python executors, CallContext, ToolResult) |
//! | `tools.rs` | `tool` (ToolSpec from a dict) |
//! | `errors.rs` | `error` (one exception class per `ErrorKind`) |
//! | `bridge.rs` | asyncio <-> tokio glue (no core counterpart) |
//! | `convert.rs` | JSON <-> Python values (one strict converter for every value entering the core) |

use pyo3::prelude::*;

mod audit;
mod bridge;
mod console;
mod convert;
mod errors;
mod events;
mod executor;
mod gate;
mod handler;
mod store;
mod token;
mod tools;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MARKER_META_KEY", signoff::MARKER_META_KEY)?;
    errors::register(m)?;
    events::register(m)?;
    gate::register(m)?;
    handler::register(m)?;
    executor::register(m)?;
    tools::register(m)?;
    token::register(m)?;
    store::register(m)?;
    audit::register(m)?;
    console::register(m)?;
    bridge::register(m)?;
    Ok(())
}
