//! # signoff
//!
//! A person between an AI agent and the tools it calls. The [`Gate`] decides whether a tool call
//! needs approval ([`Policy`], [`ToolSpec`], [`ArgRule`]); if so it publishes a
//! [`ConfirmationRequest`] on a broadcast bus ([`Gate::subscribe`]), waits for a
//! [`ConfirmationResponse`] bound to that request ([`Gate::respond`]), and denies on every other
//! outcome: timeout, no subscriber, shutdown, cancellation. [`Gate::execute`] and
//! [`Gate::execute_batch`] run approved calls at most once and tell the model, in words it will
//! not retry, when a call was declined.
//!
//! ```
//! use signoff::{Gate, Tool, ToolCall, ConfirmationResponse, Event};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let gate = Gate::new();
//! gate.register(
//!     Tool::builder("delete_file")
//!         .description("Deletes a file")
//!         .parameters(json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
//!         .executor(|args| async move { Ok(json!({"deleted": args["path"]})) })
//!         .build(),
//! ).unwrap();
//!
//! // The host app: show each request to a person and answer it.
//! let mut events = gate.subscribe();
//! let approver = gate.clone();
//! tokio::spawn(async move {
//!     while let Some(Ok(event)) = events.recv().await {
//!         if let Event::ConfirmationRequest(req) = event {
//!             approver.respond(ConfirmationResponse::approve(&req).with_responder("alice")).unwrap();
//!         }
//!     }
//! });
//!
//! let result = gate.execute(ToolCall::new("delete_file", json!({"path": "/tmp/x"})).call_id("call_1")).await;
//! assert_eq!(result.output, Some(json!({"deleted": "/tmp/x"})));
//! # });
//! ```

#![warn(missing_docs)]

/// Writes a diagnostic line to stderr without ever panicking. `eprintln!` panics when stderr
/// cannot be written (closed, a full disk, a file-size limit on the file it goes to), and a
/// panic on one of the library's threads (the audit writer, a store's runtime) would stop it:
/// its work must outlive a broken stderr.
#[doc(hidden)]
#[macro_export]
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `Eq` and `Ord` for a type that is compared by a key it computes (`$key`: a method returning
/// something `Ord`), for tables that hold pointers and order them by what they point to.
macro_rules! ord_by_key {
    ($t:ty, $key:ident) => {
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.$key() == other.$key()
            }
        }
        impl Eq for $t {}
        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for $t {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.$key().cmp(&other.$key())
            }
        }
    };
}

/// `Hash`, `Eq` and `Borrow<Uuid>` for a pointer to something with an `id: Uuid` (the fields
/// that lead to it: `found_by_id!(Waiter, 0.request)` for `self.0.request.id`), so that a hash set
/// of them is looked up by the id without storing it twice.
macro_rules! found_by_id {
    ($t:ty, $($field:tt).+) => {
        impl std::hash::Hash for $t {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.$($field).+.id.hash(h)
            }
        }
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.$($field).+.id == other.$($field).+.id
            }
        }
        impl Eq for $t {}
        impl std::borrow::Borrow<uuid::Uuid> for $t {
            fn borrow(&self) -> &uuid::Uuid {
                &self.$($field).+.id
            }
        }
    };
}

mod arguments;
pub mod audit;
pub mod config;
mod dispatch;
pub mod display;
mod error;
pub mod event;
mod executor;
mod gate;
pub mod json;
pub mod policy;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;
mod sqlite_shared;
pub mod store;
pub mod token;
pub mod tool;

pub use arguments::{Arguments, Digest};
pub use audit::{
    AuditAnchor, AuditKind, AuditOptions, AuditRecord, AuditSink, ChainHead, ChainProblem, ChainProblemKind,
    ChainReport, JsonlAuditSink, MemoryAuditSink, verify_chain, verify_chain_against, verify_chain_anchored,
    verify_chain_with_store,
};
pub use config::{GateConfig, Host, Naming, OptionReader};
pub use dispatch::{ApproverGuard, HANDLER_RESPONDER, HandlerGuard, InlineApprover, PendingRequest, RequestHandler};
pub use error::{Error, ErrorKind, Result};
pub use event::{
    CancelReason, ConfirmationRequest, ConfirmationResolved, ConfirmationResponse, ConfirmationTimeout, Event,
    EventTypes, Outcome, RequestDetails, ResponseDecision, Scope, parse_request_id,
};
pub use executor::{ToolResult, ToolStatus};
pub use gate::{
    ApprovedBy, Confirm, DEFAULT_SESSION, Decision, Gate, GateBuilder, LAGGED_SNAPSHOT_LIMIT, Lagged, MARKER_META_KEY,
    MARKER_TTL, NotRestored, PendingPage, Recovery, Subscription, SubscriptionCloser, ToolCall,
};
pub use policy::{DEFAULT_KEYWORDS, Evaluation, Policy, READ_WORDS};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresAuditSink, PostgresOptions, PostgresStore, verify_chain_postgres};
pub use sqlite::{SqliteAnchorReader, SqliteOptions, SqliteStore};
pub use sqlite_shared::{SqliteSharedOptions, SqliteSharedStore};
pub use store::{
    AcceptAll, AllowedResponders, ApproverCheck, Approvers, Completion, MemoryPendingStore, OwnedStateChange,
    PendingCursor, PendingStore, RecordState, ResponseAuthenticator, StateChange, StoreFuture, StoreWatcher,
    StoredRecord,
};
pub use token::{MarkerClaims, Secret, SignInClaims, TokenClaims, TokenKeys, TokenResponse};
pub use tool::{
    ApprovalMode, ArgRule, CallContext, ContextExecutor, ExecResult, Executor, Tool, ToolBuilder, ToolSource, ToolSpec,
};

/// The README's Rust quickstart, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

// The bindings spawn these onto multi-threaded runtimes: keep them thread-safe.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<Gate>();
    send::<Confirm<'static>>();
    send::<Subscription>();
    send::<PendingRequest>();
    send::<HandlerGuard>();
    send_sync::<ApproverGuard>();
    send_sync::<SubscriptionCloser>();
};
