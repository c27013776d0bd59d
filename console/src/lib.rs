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
//! // It serves on its own thread of this process: say so to whoever reads the link.
//! println!("the console stops when this program exits");
//! # Ok::<(), signoff::Error>(())
//! ```
//!
//! ## Security
//! - Binds to loopback unless [`ConsoleOptions::allow_remote`] is set, and then answers only
//!   the `Host` of [`ConsoleOptions::public_origin`] when one is given (DNS rebinding).
//! - People sign in with a per-approver sign-in link signed by the gate's [`TokenKeys`](signoff::TokenKeys)
//!   (single use, the token in the URL fragment, which browsers never send to a server or log)
//!   or with a name and key from [`ApproverKeys`].
//! - The session cookie is `HttpOnly; SameSite=Strict` (plus `Secure` behind an `https` public
//!   origin) and opens nothing by itself, since browsers send it to every port of the host: every
//!   read and change also needs the page key the sign-in answers with (kept by the page in its
//!   origin's storage, never put in a page) and a same-origin `Origin`;
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

use signoff::config::{Naming, OptionReader};
use signoff::{Error, Gate, Result};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// `host:port` to an address (a name is resolved; IPv4 first).
fn resolve(name: &str, bind: &str) -> Result<SocketAddr> {
    let wrong = || Error::Config(format!("`{name}` must be a host and port, like \"127.0.0.1:8080\" (got {bind:?})"));
    if let Ok(a) = bind.parse::<SocketAddr>() {
        return Ok(a);
    }
    let all: Vec<SocketAddr> = bind.to_socket_addrs().map_err(|_| wrong())?.collect();
    all.iter().find(|a| a.is_ipv4()).or(all.first()).copied().ok_or_else(wrong)
}

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
    /// The same, read from a file ([`ApproverKeys::from_file`]) when the console starts; not
    /// with `approver_keys`.
    pub approver_keys_file: Option<PathBuf>,
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
            approver_keys_file: None,
            sign_in_ttl: Duration::from_secs(15 * 60),
            session_ttl: Duration::from_secs(12 * 3600),
            history: 500,
            title: "signoff".into(),
        }
    }
}

impl ConsoleOptions {
    /// Reads the options from a JSON object whose keys are spelled per `naming` (`bind`,
    /// `allow_remote`, `public_origin`, `approver_keys` (an object of name to key),
    /// `approver_keys_file`, `sign_in_ttl_ms`, `session_ttl_ms`, `history`, `title`; camelCase
    /// for [`Naming::Camel`]); `null` means the default. What every binding calls, so all
    /// languages accept and refuse the same options with the same messages. `bind` is
    /// `"host:port"`; a host name is resolved (`localhost:8080`).
    ///
    /// ```
    /// use signoff::config::Naming;
    /// use signoff_console::ConsoleOptions;
    /// let o = ConsoleOptions::from_json(&serde_json::json!({"bind": "localhost:0", "signInTtlMs": 60000}), Naming::Camel).unwrap();
    /// assert!(o.bind.ip().is_loopback());
    /// let e = ConsoleOptions::from_json(&serde_json::json!({"allowRemotely": true}), Naming::Camel).unwrap_err();
    /// assert!(e.to_string().contains("did you mean `allowRemote`"));
    /// ```
    ///
    /// Errors: `config`, naming the option.
    pub fn from_json(options: &serde_json::Value, naming: Naming) -> Result<ConsoleOptions> {
        let known = [
            "bind",
            "allow_remote",
            "public_origin",
            "approver_keys",
            "approver_keys_file",
            "sign_in_ttl_ms",
            "session_ttl_ms",
            "history",
            "title",
        ];
        let r = OptionReader::new(options, naming, "console option", &known)?;
        let mut o = ConsoleOptions::default();
        if let Some(bind) = r.text("bind")? {
            o.bind = resolve(&r.name("bind"), &bind)?;
        }
        o.allow_remote = r.bool("allow_remote")?.unwrap_or(false);
        o.public_origin = r.text("public_origin")?;
        if let Some(keys) = r.string_map("approver_keys")? {
            let mut all = ApproverKeys::new();
            for (name, key) in &keys {
                all = all.add(name, key).map_err(|e| Error::Config(format!("`{}`: {}", r.name("approver_keys"), e)))?;
            }
            o.approver_keys = Some(all);
        }
        o.approver_keys_file = r.path("approver_keys_file")?;
        if o.approver_keys.is_some() && o.approver_keys_file.is_some() {
            return Err(Error::Config(format!(
                "pass either `{}` or `{}`",
                r.name("approver_keys"),
                r.name("approver_keys_file")
            )));
        }
        if let Some(d) = r.millis("sign_in_ttl_ms")? {
            o.sign_in_ttl = d;
        }
        if let Some(d) = r.millis("session_ttl_ms")? {
            o.session_ttl = d;
        }
        if let Some(h) = r.count("history", 1, 1_000_000)? {
            o.history = h as usize;
        }
        if let Some(t) = r.text("title")? {
            o.title = t;
        }
        Ok(o)
    }

    /// Checks the options and reads `approver_keys_file`.
    fn prepare(mut self) -> Result<Self> {
        if let Some(path) = self.approver_keys_file.take() {
            if self.approver_keys.is_some() {
                return Err(Error::Config("pass either approver_keys or approver_keys_file".into()));
            }
            self.approver_keys = Some(ApproverKeys::from_file(path)?);
        }
        self.check()?;
        Ok(self)
    }

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
/// It answers only the `Host` names it expects: loopback names (`localhost`, `127.0.0.1`,
/// `[::1]`) when `options.bind` is a loopback address (the default), the host of
/// `options.public_origin` when one is set (do set it when the service is reached under a public
/// name), and any host for a non-loopback `bind` without a public origin.
///
/// Serve it with the client's address (`router.into_make_service_with_connect_info::<SocketAddr>()`)
/// so that wrong approver keys lock out the address that sent them, not the approver; without it
/// every client counts as one address.
///
/// The router bounds each request's body (its size, and 10 s to arrive). The limits
/// [`Console::start`] puts on connections are its server's, not the router's: at most
/// [`Console::MAX_CONNECTIONS`] at once, a request head within [`Console::HEADER_READ_TIMEOUT`],
/// a connection closed after 30 s without write progress. A server of your own that mounts this
/// router sets its own (hyper's and tower's settings): without them, one client can hold
/// connections open for ever.
///
/// Errors: `config` when the gate has no token keys (decisions are submitted as signed tokens)
/// or an option is out of range.
pub fn router(gate: Gate, options: ConsoleOptions) -> Result<axum::Router> {
    api::router(gate, options, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: serde_json::Value, naming: Naming) -> String {
        let e = ConsoleOptions::from_json(&v, naming).unwrap_err();
        assert_eq!(e.kind(), signoff::ErrorKind::Config, "{e}");
        e.to_string()
    }

    #[test]
    fn options_from_json_in_both_namings() {
        let o = ConsoleOptions::from_json(
            &json!({"bind": "127.0.0.1:8080", "allow_remote": true, "approver_keys": {"alice": "a-long-enough-key"},
                    "sign_in_ttl_ms": 1000, "session_ttl_ms": 2000, "history": 7, "title": "t", "public_origin": null}),
            Naming::Snake,
        )
        .unwrap();
        assert_eq!((o.bind.port(), o.allow_remote, o.history, o.title.as_str()), (8080, true, 7, "t"));
        assert_eq!((o.sign_in_ttl.as_millis(), o.session_ttl.as_millis()), (1000, 2000));
        assert_eq!(o.approver_keys.unwrap().names(), ["alice"]);
        assert!(err(json!({"bind": "nowhere"}), Naming::Camel).contains("`bind` must be a host and port"));
        assert!(err(json!({"signInTtlMs": 0}), Naming::Camel).contains("`signInTtlMs`"));
        assert!(err(json!({"sign_in_ttl_ms": 1.5}), Naming::Snake).contains("`sign_in_ttl_ms`"));
        assert!(err(json!({"history": 0}), Naming::Snake).contains("`history`"));
        assert!(err(json!({"allowRemote": "yes"}), Naming::Camel).contains("true or false"));
        assert!(err(json!({"approverKeys": {"a": "short"}}), Naming::Camel).contains("too short"));
        assert!(err(json!({"approverKeys": {"a": 5}}), Naming::Camel).contains("`approverKeys`"));
        let both = json!({"approverKeys": {"alice": "a-long-enough-key"}, "approverKeysFile": "/k"});
        assert!(err(both, Naming::Camel).contains("either `approverKeys` or `approverKeysFile`"));
        assert!(err(json!({"allow_remote": true}), Naming::Camel).contains("did you mean `allowRemote`"));
        assert!(err(json!([1]), Naming::Camel).contains("must be an object"));
    }

    #[test]
    fn a_keys_file_is_read_when_the_console_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, "dana:dana-has-a-long-key\n").unwrap();
        let o = ConsoleOptions { approver_keys_file: Some(path), ..Default::default() }.prepare().unwrap();
        assert_eq!(o.approver_keys.unwrap().names(), ["dana"]);
        let missing = ConsoleOptions { approver_keys_file: Some(dir.path().join("nope")), ..Default::default() };
        assert_eq!(missing.prepare().unwrap_err().kind(), signoff::ErrorKind::Config);
    }
}
