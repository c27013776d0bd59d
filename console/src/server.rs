//! A console with its own server: one thread, one small runtime, stopped by [`Console::close`]
//! or on drop. The bindings and `signoff console` use this.

use crate::ConsoleOptions;
use signoff::{Error, Gate, Result};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// A running console. Cheap to keep; [`close`](Self::close) (or drop) stops the server, ends
/// every open page's event stream and releases the port.
pub struct Console {
    gate: Gate,
    url: String,
    local_addr: SocketAddr,
    sign_in_ttl: Duration,
    stop: watch::Sender<bool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Console {
    /// Starts a console for `gate` on `options.bind` and returns once it listens.
    ///
    /// Errors: `config` (no token keys on the gate, a non-loopback address without
    /// `allow_remote`, an option out of range), `io` (the address cannot be bound).
    pub fn start(gate: Gate, options: ConsoleOptions) -> Result<Console> {
        let options = options.prepare()?;
        let listener = std::net::TcpListener::bind(options.bind)
            .map_err(|e| Error::Config(format!("the console cannot listen on {}: {e}", options.bind)))?;
        listener.set_nonblocking(true).map_err(|e| Error::Config(format!("console socket: {e}")))?;
        let local_addr = listener.local_addr().map_err(|e| Error::Config(format!("console socket: {e}")))?;
        let url = match &options.public_origin {
            Some(origin) => format!("{}/", origin.trim_end_matches('/')),
            None if local_addr.ip().is_unspecified() => format!("http://127.0.0.1:{}/", local_addr.port()),
            None => format!("http://{local_addr}/"),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("the console cannot start its runtime: {e}")))?;
        let (stop, stopped) = watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let sign_in_ttl = options.sign_in_ttl;
        let g = gate.clone();
        let thread = std::thread::Builder::new()
            .name("signoff-console".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let router = match crate::api::router(g, options, Some(stopped.clone())) {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(Error::Config(format!("console socket: {e}"))));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let mut stopped = stopped;
                    let served =
                        axum::serve(listener, router.into_make_service_with_connect_info::<std::net::SocketAddr>())
                            .with_graceful_shutdown(async move {
                                let _ = stopped.wait_for(|s| *s).await;
                            })
                            .await;
                    if let Err(e) = served {
                        eprintln!("signoff: the console stopped: {e}");
                    }
                });
            })
            .map_err(|e| Error::Config(format!("the console cannot start its thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Config("the console thread stopped while starting".into()));
            }
        }
        Ok(Console { gate, url, local_addr, sign_in_ttl, stop, thread: Mutex::new(Some(thread)) })
    }

    /// The console's address, ending in `/`, e.g. `http://127.0.0.1:49152/`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The socket address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A single-use sign-in link for `approver`, valid for the console's `sign_in_ttl`. The
    /// signed token is in the URL fragment (`#token=`), which browsers never send to a server,
    /// so it does not end up in access logs; the page removes it from the address bar and the
    /// history once it has signed in.
    ///
    /// Errors: `malformed` (empty approver).
    pub fn sign_in_link(&self, approver: &str) -> Result<String> {
        let token = self.gate.issue_sign_in(approver, self.sign_in_ttl)?;
        Ok(format!("{}login#token={token}", self.url))
    }

    /// Whether [`close`](Self::close) has run.
    pub fn is_closed(&self) -> bool {
        *self.stop.borrow()
    }

    /// Stops the server: open event streams end, the port is released. Waits for the server's
    /// thread. Idempotent. Pending requests are not touched (they stay pending for other
    /// approvers, or time out).
    pub fn close(&self) {
        self.stop.send_replace(true);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.close();
    }
}
