//! The browser approval console (crate `signoff-console`): `Gate.serveConsole` starts a console
//! on its own thread; `NativeConsole` is the running server. Every rule (sign-in, sessions, CSRF,
//! who may approve) is the console's and the core's; this file converts the options.
//!
//! Starting and closing run off the JavaScript thread, as tasks of the gate's executor (see
//! `driver.rs`): they keep the process alive while they run. The server itself runs on its own
//! thread and never keeps the process alive, like an event stream.

use crate::driver::{JsState, Settle, TaskFuture};
use crate::errors;
use crate::gate::NativeGate;
use napi::bindgen_prelude::*;
use napi::{Env, sys};
use napi_derive::napi;
use signoff::{Error, Naming};
use signoff_console::{Console, ConsoleOptions};
use std::rc::{Rc, Weak};
use std::sync::Arc;

/// The console's options from the facade's JSON (camelCase), checked by the console crate
/// (`ConsoleOptions::from_json`); the approver keys file is read when the console starts, off the
/// JavaScript thread.
fn options(json: &str) -> signoff::Result<ConsoleOptions> {
    let v = signoff::json::from_str(json, "the console options")?;
    ConsoleOptions::from_json(&v, Naming::Camel)
}

/// Where a console listens.
#[napi(object)]
pub struct ConsoleAddress {
    pub host: String,
    pub port: u32,
}

/// A running approval console (the crate `signoff-console`'s `Console`).
#[napi]
pub struct NativeConsole {
    inner: Arc<Console>,
    /// The gate's executor, which runs `close` off the JavaScript thread while the gate lives.
    state: Weak<JsState>,
}

fn undefined(env: &Env) -> Result<sys::napi_value> {
    Ok(().into_unknown(env)?.raw())
}

#[napi]
impl NativeGate {
    /// Starts the approval console for this gate (`signoff_console::Console::start`) off the
    /// JavaScript thread, from the console options as JSON (camelCase). Resolves once it listens.
    /// Rejects with `config` (no token keys, a bad option, an address that cannot be bound, an
    /// unreadable keys file).
    #[napi(ts_return_type = "NativeConsole | Promise<NativeConsole>")]
    pub fn serve_console<'env>(&self, env: &'env Env, options_json: String) -> Result<Unknown<'env>> {
        let options = options(&options_json).map_err(|e| errors::throw(env, &e))?;
        let gate = self.state.gate.clone();
        let weak = Rc::downgrade(&self.state);
        let settle = move |r: signoff::Result<Console>| -> Settle {
            Box::new(move |env: &Env| match r {
                Ok(c) => Ok(NativeConsole { inner: Arc::new(c), state: weak }.into_instance(env)?.value),
                Err(e) => Err(errors::throw(env, &e)),
            })
        };
        let fut: TaskFuture = if self.state.is_released() {
            // A released gate drives no more tasks from other threads: start here (binding a
            // socket and starting a thread are quick).
            let r = Console::start(gate, options);
            Box::pin(async move { settle(r) })
        } else {
            Box::pin(async move {
                let r = tokio::task::spawn_blocking(move || Console::start(gate, options))
                    .await
                    .unwrap_or_else(|_| Err(Error::Config("the console failed to start".into())));
                settle(r)
            })
        };
        self.run(env, fut, true, None)
    }
}

#[napi]
impl NativeConsole {
    /// The console's address, ending in `/`, e.g. `http://127.0.0.1:49152/`.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.inner.url().to_owned()
    }

    /// The address it listens on.
    #[napi(getter)]
    pub fn address(&self) -> ConsoleAddress {
        let a = self.inner.local_addr();
        ConsoleAddress { host: a.ip().to_string(), port: u32::from(a.port()) }
    }

    /// A single-use sign-in link for `approver` (the signed token in the URL fragment).
    /// Throws `malformed` for an empty approver.
    #[napi]
    pub fn sign_in_link(&self, env: Env, approver: String) -> Result<String> {
        self.inner.sign_in_link(&approver).map_err(|e| errors::throw(&env, &e))
    }

    /// Whether `close` has run.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Stops the server and releases the port, off the JavaScript thread while the gate lives
    /// (at once, on this thread, once it was closed and released). Idempotent. Returns
    /// `undefined` when done at once, else a promise.
    #[napi(ts_return_type = "undefined | Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        let inner = self.inner.clone();
        match self.state.upgrade().filter(|s| !s.is_released() && !inner.is_closed()) {
            Some(state) => {
                let fut: TaskFuture = Box::pin(async move {
                    let _ = tokio::task::spawn_blocking(move || inner.close()).await;
                    Box::new(undefined) as Settle
                });
                let (_, v) = state.run(env, fut, true, None)?;
                v.into_unknown(env)
            }
            None => {
                inner.close();
                ().into_unknown(env)
            }
        }
    }
}
