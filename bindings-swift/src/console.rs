//! The browser approval console (crate `signoff-console`): `Gate.serveConsole(options:)` starts a
//! console on its own thread and returns the running `Console`. Every rule (sign-in, sessions,
//! CSRF, who may approve) is the console's and the core's; this file converts the options.

use crate::{Gate, SignoffError};
use signoff as core;
use std::collections::HashMap;
use std::sync::Arc;

/// How `Gate.serveConsole(options:)` runs the console. Every field has a default: a loopback-only
/// console on a free port, with sign-in links only. nil options take the console's defaults.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, uniffi::Record)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleOptions {
    /// `"host:port"` to listen on (`"127.0.0.1:0"`: loopback, a free port). A non-loopback
    /// address needs `allowRemote`.
    #[uniffi(default = "127.0.0.1:0")]
    pub bind: String,
    /// Allow a non-loopback `bind` (put the console behind TLS then).
    #[uniffi(default = false)]
    pub allow_remote: bool,
    /// The origin people reach the console at behind a proxy, e.g.
    /// `"https://approve.example.com"`: sign-in links use it, only its host is answered, and an
    /// `https` origin makes the session cookie `Secure`.
    #[uniffi(default = None)]
    pub public_origin: Option<String>,
    /// People who may also sign in with a name and a key: name → key (at least 16 characters).
    /// Sign-in links work either way.
    #[uniffi(default = None)]
    pub approver_keys: Option<HashMap<String, String>>,
    /// The same from a file of `name:key` or `name:sha256:<hex>` lines (`#` comments); not with
    /// `approverKeys`.
    #[uniffi(default = None)]
    pub approver_keys_file: Option<String>,
    /// How long a sign-in link stays valid, in milliseconds (15 minutes).
    #[uniffi(default = None)]
    pub sign_in_ttl_ms: Option<u64>,
    /// How long a browser stays signed in, in milliseconds (12 hours).
    #[uniffi(default = None)]
    pub session_ttl_ms: Option<u64>,
    /// How many decided requests the page's history keeps (500).
    #[uniffi(default = None)]
    pub history: Option<u64>,
    /// The page title (`"signoff"`).
    #[uniffi(default = None)]
    pub title: Option<String>,
}

impl ConsoleOptions {
    /// The console crate's options, checked there (`ConsoleOptions::from_json`, camelCase names
    /// in messages), as every language does.
    fn into_console(self) -> Result<signoff_console::ConsoleOptions, core::Error> {
        let v = serde_json::to_value(self).unwrap_or_default();
        signoff_console::ConsoleOptions::from_json(&v, core::Naming::Camel)
    }
}

/// A running browser approval console: a person signs in (`signInLink(approver:)`) and approves
/// pending calls from a web page, live. It runs on its own thread until `close()` (or until the
/// last reference to it goes away). The console never decides who may approve: each decision is
/// submitted as a signed approval token issued to the signed-in person, and the gate's
/// `approvers` accept or refuse it.
#[derive(uniffi::Object)]
pub struct Console {
    inner: signoff_console::Console,
}

#[uniffi::export]
impl Console {
    /// The console's address, ending in `/`, e.g. `http://127.0.0.1:49152/` (or the
    /// `publicOrigin`).
    pub fn url(&self) -> String {
        self.inner.url().to_owned()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    /// A single-use sign-in link for `approver`, valid for `signInTtlMs`:
    /// `{url}login#token=...`. Send it to that person only. The token is in the URL fragment,
    /// which browsers never send to a server, so it does not end up in access logs. Errors:
    /// `malformed` (an empty approver).
    pub fn sign_in_link(&self, approver: String) -> Result<String, SignoffError> {
        Ok(self.inner.sign_in_link(&approver)?)
    }

    /// Stops the server: open pages' event streams end and the port is released. Waits for the
    /// server's thread (briefly: call it off the main thread if in doubt). Pending requests are
    /// not touched. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Whether `close()` has run.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
}

#[uniffi::export]
impl Gate {
    /// Starts the browser approval console for this gate on its own thread and returns once it
    /// listens (by default on `127.0.0.1`, a free port). The gate needs token keys
    /// (`Gate.open(config:keys:)`): every decision made in the page is submitted as a signed
    /// approval token. The console counts as an approver: while it runs, gated calls wait for a
    /// person until their deadline. Errors: `config` (no token keys; `bind` is not an address,
    /// or not loopback without `allowRemote`, or cannot be bound; a bad `publicOrigin`; a zero
    /// TTL; short or duplicate approver keys; both `approverKeys` and `approverKeysFile`; an
    /// unreadable keys file).
    #[uniffi::method(default(options))]
    pub fn serve_console(&self, options: ConsoleOptions) -> Result<Arc<Console>, SignoffError> {
        let inner = signoff_console::Console::start(self.inner.clone(), options.into_console()?)?;
        Ok(Arc::new(Console { inner }))
    }
}
