//! # signoff-mcp
//!
//! Gates the tools of MCP servers with signoff. [`McpGate`] re-exposes the tools of one or more
//! upstream rmcp clients as `<server>__<tool>`; each is registered in a signoff [`Gate`](signoff::Gate)
//! with its approval flag from its name and annotations ([`Gating::decide`]: a name that reads
//! runs without asking, and so does `readOnlyHint: true` from an upstream whose hints are
//! trusted; anything else asks) and per-tool overrides ([`ToolOverride`]), and a risk level L0–L5
//! ([`Risk`]) shown in each request's `metadata.risk`.
//!
//! A gated call goes through the gate, so timeouts, the audit, the store and any console apply,
//! and the upstream is contacted only after an explicit approval. The client is asked, per call:
//! - **2025-06-18 / 2025-11-25 clients that declared elicitation**: `elicitation/create` inside
//!   the call (approve once, approve for the session, deny with a reason);
//! - **2026-07-28 clients that declared elicitation**: an `InputRequiredResult` whose
//!   `requestState` carries a signed, single-use signoff approval token for the request, sealed
//!   with rmcp's `RequestStateCodec` and bound to the principal, server, tool and the arguments'
//!   digest; the retry's arguments are digested again, so swapped arguments are refused, and a
//!   replayed state is refused (each refused retry is a `request-state-refused` audit notice);
//! - **clients that cannot be asked**: a denial saying approval is pending elsewhere; the request
//!   stays pending in the gate, and once approved (a console, an approval token) one identical
//!   retry before the deadline runs the call, exactly once.
//!
//! Every other outcome (the client cancels, the request times out, the transport fails, the person
//! declines) denies, and the model reads signoff's words for it.
//!
//! Once approved, a call waits at most its upstream's call timeout
//! ([`UpstreamConfig::call_timeout_ms`]) for the answer; past it, or when the client cancels the
//! call meanwhile, the upstream is sent `notifications/cancelled` for it and the model is told
//! whether the tool ran is unknown. A call whose tool's definition changed while the person was
//! being asked runs nothing. While an upstream has announced a change to its tools that could not
//! be listed, every call to its tools is asked about, even one whose tool's last definition needed
//! no approval.
//!
//! At start, each upstream must answer `initialize` within 60 seconds and list its tools within
//! its [`Upstream::list_timeout`] (10 seconds by default), in at most 1000 pages and 10000 tools;
//! otherwise starting fails with an error naming it.
//!
//! Upstreams are child processes over stdio or Streamable HTTP endpoints ([`UpstreamConfig`]);
//! the gate is served over stdio ([`serve_stdio`]) or Streamable HTTP ([`HttpServer`], with the
//! session design described in [`http`]).

#![warn(missing_docs)]

pub mod config;
mod gate;
pub mod http;
pub mod risk;

pub use config::{
    ApprovalOverride, Gating, HttpConfig, NameSays, ProxyConfig, ToolOverride, UpstreamConfig, UpstreamTransport,
};
pub use gate::{INPUT_KEY, McpGate, NOWHERE_ELSE, Upstream, UpstreamClient, build_gate, serve_stdio};
pub use http::HttpServer;
pub use risk::Risk;
