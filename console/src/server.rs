//! A console with its own server: one thread, one small runtime, stopped by [`Console::close`]
//! or on drop. The bindings and `signoff console` use this.
//!
//! The server runs inside the agent's own process, so a client must not be able to use up that
//! process's file descriptors: connections are served one by one with hyper, at most
//! [`Console::MAX_CONNECTIONS`] at a time, and a connection that does not deliver a complete
//! request head within [`Console::HEADER_READ_TIMEOUT`] (a slow or silent client, or a kept-alive
//! connection left idle) is closed.

use crate::ConsoleOptions;
use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use signoff::{Error, Gate, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service;

/// After [`Console::close`], how long connections still busy (a response being written, a
/// request head half received) get to finish before they are dropped. Event streams end at once
/// on close, so this only bounds the odd slow client: `close` never waits longer than this.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How long the accept loop pauses after an error that is not about one connection (typically
/// `EMFILE`: the process is out of file descriptors), instead of spinning on it.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

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
    /// The most connections the console holds open at once. Beyond it, new connections are not
    /// accepted until one of the open ones ends: they wait in the kernel's listen queue, which
    /// costs this process no file descriptor, and are then served in the order they arrived.
    /// (Accepting and closing them at once would fail the real person's browser outright,
    /// whereas a queued connection is served as soon as a slot frees, within
    /// [`HEADER_READ_TIMEOUT`](Self::HEADER_READ_TIMEOUT) when the slots are held by idle or
    /// slow connections.) A browser tab holds one connection for its live view and opens a few
    /// more while loading, so 256 is far above what people signed in to one console use, and
    /// far below a process's usual descriptor limit (1024 or more).
    pub const MAX_CONNECTIONS: usize = 256;

    /// How long a connection may take to deliver a complete request head (request line and
    /// headers): counted from when the connection is accepted, and again from the end of each
    /// response on a kept-alive connection, so it is also the idle timeout between requests.
    /// A connection that misses it is closed. It does not apply while a response is being
    /// written: a live view (`/events`, a response that lasts as long as the page is open,
    /// with a keep-alive comment every 15 s) is never cut by it. 10 s is ample for any browser
    /// or script on a working network, and bounds how long a silent connection holds a slot.
    pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

    /// Starts a console for `gate` on `options.bind` and returns once it listens.
    ///
    /// Errors: `config` (no token keys on the gate, a non-loopback address without
    /// `allow_remote`, an option out of range), `io` (the address cannot be bound).
    pub fn start(gate: Gate, options: ConsoleOptions) -> Result<Console> {
        Self::start_with_header_read_timeout(gate, options, Self::HEADER_READ_TIMEOUT)
    }

    /// [`start`](Self::start) with another header-read timeout than
    /// [`HEADER_READ_TIMEOUT`](Self::HEADER_READ_TIMEOUT): for tests, which need not wait 10 s
    /// to see it work. Errors as `start`, and `config` for a zero timeout.
    #[doc(hidden)]
    pub fn start_with_header_read_timeout(
        gate: Gate,
        options: ConsoleOptions,
        header_read_timeout: Duration,
    ) -> Result<Console> {
        if header_read_timeout.is_zero() {
            return Err(Error::Config("the console's header-read timeout must be above zero".into()));
        }
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
                    serve(listener, router, stopped, header_read_timeout).await;
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

/// Accepts connections until the console closes, at most [`Console::MAX_CONNECTIONS`] open at
/// once, each served on its own task; then lets busy ones finish (up to [`SHUTDOWN_GRACE`]).
/// Whatever is still open when this returns is dropped with the runtime.
async fn serve(listener: TcpListener, router: Router, stopped: watch::Receiver<bool>, header_read_timeout: Duration) {
    let slots = Arc::new(Semaphore::new(Console::MAX_CONNECTIONS));
    let mut stop = stopped.clone();
    loop {
        // A slot first, then `accept`: at the cap, new connections wait in the listen queue.
        let slot = tokio::select! {
            biased;
            _ = closed(&mut stop) => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            biased;
            _ = closed(&mut stop) => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                tokio::spawn(connection(stream, peer, router.clone(), stopped.clone(), header_read_timeout, slot));
            }
            // This one connection failed before it was accepted: on to the next.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                ) => {}
            // Out of file descriptors (the agent's, or the system's) or the like: wait for some
            // to be released rather than spin, and keep serving the connections already open.
            Err(_) => {
                drop(slot);
                tokio::select! {
                    biased;
                    _ = closed(&mut stop) => break,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
    // Stop listening (the port is released at once); open connections finish: event streams end
    // on `stopped` by themselves, the rest get `SHUTDOWN_GRACE`.
    drop(listener);
    let all = u32::try_from(Console::MAX_CONNECTIONS).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, slots.acquire_many(all)).await;
}

/// Serves one connection (HTTP/1.1, kept alive between requests, closed when a request head
/// takes longer than `header_read_timeout` to arrive) until it ends, or until the
/// console closes: then the request in progress is finished and the connection closed. Holds
/// its `slot` as long as it is open.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    mut stopped: watch::Receiver<bool>,
    header_read_timeout: Duration,
    slot: OwnedSemaphorePermit,
) {
    // The handlers read the peer's address as `ConnectInfo<SocketAddr>` (as `axum::serve` with
    // `into_make_service_with_connect_info` would provide it).
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        // A router is always ready (`poll_ready` is `Ready(Ok)`), so it is called directly.
        router.clone().call(request)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(WriteStall::new(stream, header_read_timeout * 3)), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        // Ended: closed by the client, or an error (a header timeout, a malformed request).
        _ = conn.as_mut() => {}
        _ = closed(&mut stopped) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
    drop(slot);
}

/// Resolves once the console is closing (or its handle is gone).
async fn closed(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// A connection whose writes must make progress: a write (or flush) that cannot complete for
/// `limit` (three header-read timeouts, 30 s) fails, and the connection is closed. A client that
/// sends requests and never reads the answers would otherwise hold its slot for ever, and enough
/// of them would lock people out of the console. A live view is written a keep-alive every 15 s,
/// which a reading browser takes at once.
struct WriteStall {
    io: TcpStream,
    limit: Duration,
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl WriteStall {
    fn new(io: TcpStream, limit: Duration) -> Self {
        WriteStall { io, limit, stalled: None }
    }

    /// After a write that could not complete: pending until `limit` passes without progress.
    fn stalled<T>(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<T>> {
        let limit = self.limit;
        let sleep = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading what it was sent",
            ))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        polled: std::task::Poll<std::io::Result<T>>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<T>> {
        match polled {
            std::task::Poll::Ready(r) => {
                self.stalled = None;
                std::task::Poll::Ready(r)
            }
            std::task::Poll::Pending => self.stalled(cx),
        }
    }
}

impl tokio::io::AsyncRead for WriteStall {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for WriteStall {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.io).poll_write(cx, buf);
        this.progress(polled, cx)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.io).poll_flush(cx);
        this.progress(polled, cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
