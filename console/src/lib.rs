//! # signoff-console
//!
//! A browser approval console for a signoff [`Gate`]: a person signs in, sees every pending
//! tool call live (Server-Sent Events, a countdown each, a "waiting" badge per agent session, a
//! browser notification when the tab is hidden), and approves once, approves for the session,
//! edits the arguments (checked against the tool's schema, with a diff) or denies with a reason.
//! Decided requests and the verified audit chain are one click away.
//!
//! Two ways to run it:
//! - [`router`]: an [`axum::Router`] to mount in your own service (call it inside a tokio
//!   runtime; serve it at a path that ends in `/`, since the page uses relative links).
//! - [`Console::start`]: its own server on its own thread, what the Python, Node and Swift
//!   bindings and `signoff console` use.
//!
//! ```no_run
//! use signoff::{Gate, Secret, TokenKeys};
//! use signoff_console::{Console, ConsoleOptions};
//!
//! let gate = Gate::builder().tokens(TokenKeys::new("k1", Secret::generate())?).build()?;
//! let console = Console::start(gate, ConsoleOptions::default())?;
//! println!("open {}", console.sign_in_link("alice")?);
//! # Ok::<(), signoff::Error>(())
//! ```
//!
//! ## Security
//! - Binds to loopback unless [`ConsoleOptions::allow_remote`] is set, and then answers only
//!   the `Host` of [`ConsoleOptions::public_origin`] when one is given (DNS rebinding).
//! - People sign in with a per-approver sign-in link signed by the gate's [`TokenKeys`]
//!   (single use, the token in the URL fragment, which browsers never send to a server or log)
//!   or with a name and key from [`ApproverKeys`].
//! - The session cookie is `HttpOnly; SameSite=Strict` (plus `Secure` behind an `https` public
//!   origin); every state change needs the session's CSRF token and a same-origin `Origin`;
//!   a strict Content Security Policy allows only the console's own script and style files.
//! - The console never decides who may approve: each decision is submitted as a signed,
//!   single-use approval token issued to the signed-in person, and the gate's authenticator
//!   (e.g. [`signoff::Approvers`]) accepts or refuses it.

#![warn(missing_docs)]

mod api;
mod auth;
mod feed;
mod render;
mod server;

pub use auth::{ApproverKeys, MIN_KEY_LEN};
pub use server::Console;

use signoff::{Error, Gate, Result};
use std::net::SocketAddr;
use std::time::Duration;

/// How a console runs. `Default` is a loopback-only console on a free port, with sign-in links
/// only.
#[derive(Clone, Debug)]
pub struct ConsoleOptions {
    /// Where [`Console::start`] listens (default `127.0.0.1:0`, a free port).
    pub bind: SocketAddr,
    /// Allow a non-loopback `bind` (default false: refused with `config`).
    pub allow_remote: bool,
    /// The origin people reach the console at when it is behind a proxy, e.g.
    /// `https://approve.example.com`: sign-in links use it, only its `Host` is answered, and an
    /// `https` origin makes the cookie `Secure`.
    pub public_origin: Option<String>,
    /// People who sign in with a name and a key. Sign-in links work either way.
    pub approver_keys: Option<ApproverKeys>,
    /// How long a sign-in link stays valid (default 15 minutes).
    pub sign_in_ttl: Duration,
    /// How long a browser stays signed in (default 12 hours).
    pub session_ttl: Duration,
    /// How many decided requests the history keeps (default 500).
    pub history: usize,
    /// The page title (default "signoff").
    pub title: String,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        ConsoleOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            allow_remote: false,
            public_origin: None,
            approver_keys: None,
            sign_in_ttl: Duration::from_secs(15 * 60),
            session_ttl: Duration::from_secs(12 * 3600),
            history: 500,
            title: "signoff".into(),
        }
    }
}

impl ConsoleOptions {
    fn check(&self) -> Result<()> {
        if !self.bind.ip().is_loopback() && !self.allow_remote {
            return Err(Error::Config(format!(
                "the console binds to loopback unless allowed: {} is not a loopback address (set allow_remote, and put it behind TLS)",
                self.bind
            )));
        }
        if let Some(origin) = &self.public_origin {
            let rest = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            if rest.is_none_or(|r| r.trim_end_matches('/').is_empty() || r.trim_end_matches('/').contains('/')) {
                return Err(Error::Config(format!(
                    "public_origin must be a scheme and host, like https://approve.example.com (got {origin:?})"
                )));
            }
        }
        if self.sign_in_ttl.is_zero() || self.session_ttl.is_zero() {
            return Err(Error::Config("sign_in_ttl and session_ttl must be above zero".into()));
        }
        if self.approver_keys.as_ref().is_some_and(ApproverKeys::is_empty) {
            return Err(Error::Config("approver_keys lists no approver".into()));
        }
        Ok(())
    }
}

/// The console as a router to mount in an axum service, with the task that feeds it from the
/// gate's bus (it stops when the router and every clone of it are dropped). Call it inside a
/// tokio runtime.
///
/// The console counts as an approver on the gate's bus (it can answer), so with it mounted,
/// gated calls wait for a person until their deadline.
///
/// Errors: `config` when the gate has no token keys (decisions are submitted as signed tokens)
/// or an option is out of range.
pub fn router(gate: Gate, options: ConsoleOptions) -> Result<axum::Router> {
    api::router(gate, options, None)
}
