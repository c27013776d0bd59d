//! The connection layer under [`PostgresStore`](super::PostgresStore) and the PostgreSQL audit
//! table: a runtime on a thread of its own, connections that reconnect after a lost server, and a
//! blocking bridge for the store's synchronous seam.
//!
//! Why `tokio-postgres` (not `sqlx`): LISTEN/NOTIFY arrives as plain connection messages
//! (`Connection::poll_message`), queries on one connection pipeline without a pool, there are no
//! compile-time checked queries that need a database at build time, and the dependency tree is a
//! third of `sqlx`'s. The blocking `postgres` crate is not used: it starts a runtime per call and
//! refuses to run inside another runtime, which is where a gate's callers are.

use crate::error::{Error, Result};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::{Client, Config, NoTls};

/// How long one operation may take before it fails (`store`), whatever the network does, unless
/// the store's options say otherwise.
pub(crate) const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

thread_local! {
    static ON_DB_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A PostgreSQL connection target plus the runtime that drives its connections.
pub(crate) struct Db {
    config: Config,
    handle: tokio::runtime::Handle,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    closed: AtomicBool,
    /// How long one operation may take ([`OPERATION_TIMEOUT`] unless configured).
    op_timeout: Duration,
    /// When the latest operation that got no answer in time started (nanoseconds since `epoch`,
    /// plus one; 0: none yet). A connection opened before that is replaced at its next use (see
    /// [`Slot::get`]): a connection whose peer went silent (a dropped NAT entry, a partition, a
    /// stopped server) is not closed by anything else for hours, and every operation on it
    /// would wait out its timeout. One opened after that operation started is not suspected.
    stalled: AtomicU64,
    epoch: std::time::Instant,
}

pub(crate) fn pg_err(what: &str, e: tokio_postgres::Error) -> Error {
    // The server's own message (constraint, syntax, connection) is what a user needs.
    match e.as_db_error() {
        Some(db) => Error::Store(format!("{what}: {} ({})", db.message(), db.code().code())),
        None => Error::Store(format!("{what}: {e}")),
    }
}

/// Where a connection goes, as a user would say it: `host:port` for each host the URL names
/// (`127.0.0.1:5432`, `[::1]:5433`, a socket directory), the database's name after a slash.
fn target(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            // One port for every host, or one per host; PostgreSQL's default otherwise.
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                tokio_postgres::config::Host::Tcp(h) if h.contains(':') => format!("[{h}]:{port}"),
                tokio_postgres::config::Host::Tcp(h) => format!("{h}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(dir) => format!("{} (port {port})", dir.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() { "localhost:5432".to_owned() } else { hosts.join(", ") };
    match config.get_dbname() {
        Some(db) => format!("{hosts}/{db}"),
        None => hosts,
    }
}

/// Quotes an identifier for SQL (`"a""b"`).
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Db {
    /// Parses `url` (`postgres://user@host:port/db?...` or `host=... user=...`), with `schema` as
    /// the search path of every connection, and starts the runtime thread. Connects nothing yet.
    pub(crate) fn new(url: &str, schema: Option<&str>, op_timeout: Option<Duration>) -> Result<Arc<Db>> {
        let op_timeout = op_timeout.unwrap_or(OPERATION_TIMEOUT);
        if op_timeout.is_zero() || op_timeout > Duration::from_secs(24 * 3600) {
            return Err(Error::Config(format!(
                "operation_timeout {op_timeout:?}: use more than zero and at most a day"
            )));
        }
        let mut config: Config =
            url.parse().map_err(|e| Error::Config(format!("store_url is not a PostgreSQL connection string: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.application_name("signoff");
        if let Some(s) = schema {
            if !crate::store::is_schema_name(s) {
                return Err(Error::Config(format!("schema {s:?}: use 1 to 63 ASCII letters, digits or underscores")));
            }
            config.options(format!("-c search_path={s}"));
        }
        let (htx, hrx) = std::sync::mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("signoff-postgres".into())
            .spawn(move || {
                // The flag marks this thread only: the runtime's blocking threads (where the
                // gate is told of changes) may call the store, since this thread stays free.
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = htx.send(Err(e.to_string()));
                        return;
                    }
                };
                ON_DB_THREAD.with(|f| f.set(true));
                let _ = htx.send(Ok(rt.handle().clone()));
                rt.block_on(async move {
                    let _ = stop_rx.await;
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(|e| Error::Store(format!("could not start the PostgreSQL thread: {e}")))?;
        let handle = hrx
            .recv()
            .map_err(|_| Error::Store("the PostgreSQL thread did not start".into()))?
            .map_err(|e| Error::Store(format!("could not start the PostgreSQL runtime: {e}")))?;
        Ok(Arc::new(Db {
            config,
            handle,
            stop: Mutex::new(Some(stop_tx)),
            thread: Mutex::new(Some(thread)),
            closed: AtomicBool::new(false),
            op_timeout,
            stalled: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        }))
    }

    /// The runtime the connections live on.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Opens a connection, driven on the store's runtime until it ends. Call on that runtime.
    pub(crate) async fn connect(&self) -> Result<Client> {
        let (client, connection) = self.timed(self.config.connect(NoTls)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Opens a connection and hands back its message stream (for LISTEN).
    pub(crate) async fn connect_listening(
        &self,
    ) -> Result<(Client, tokio::sync::mpsc::UnboundedReceiver<tokio_postgres::Notification>)> {
        let (client, mut connection) = self.timed(self.config.connect(NoTls)).await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            use futures_util::StreamExt;
            while let Some(m) = messages.next().await {
                match m {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        if tx.send(n).is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        Ok((client, rx))
    }

    /// A connection attempt bounded by the connect timeout as a whole (TCP, start-up and
    /// authentication: a server that accepts and never answers fails it too).
    async fn timed<T>(
        &self,
        connect: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        let limit = self.config.get_connect_timeout().copied().unwrap_or(Duration::from_secs(10));
        let to = target(&self.config);
        match tokio::time::timeout(limit, connect).await {
            Ok(r) => r.map_err(|e| pg_err(&format!("could not connect to {to}"), e)),
            Err(_) => {
                Err(Error::Store(format!("could not connect to {to}: no answer from the server within {limit:?}")))
            }
        }
    }

    /// Now, in nanoseconds since this `Db` was made.
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether an operation that started after `opened_ns` (see [`now_ns`](Self::now_ns)) got no
    /// answer in time.
    fn stalled_since(&self, opened_ns: u64) -> bool {
        self.stalled.load(Ordering::SeqCst) > opened_ns
    }

    /// `fut` bounded by the operation timeout: `None` when it got no answer in time, and then
    /// the connections opened before it started are replaced at their next use.
    pub(crate) async fn timed_out<T>(&self, fut: impl Future<Output = T>) -> Option<T> {
        let started = self.now_ns();
        match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(r) => Some(r),
            Err(_) => {
                self.stalled.fetch_max(started.saturating_add(1), Ordering::SeqCst);
                None
            }
        }
    }

    /// `fut` bounded by the operation timeout, or a `store` error naming `what` it was doing.
    pub(crate) async fn bounded<T>(&self, what: &str, fut: impl Future<Output = Result<T>>) -> Result<T> {
        self.timed_out(fut).await.unwrap_or_else(|| {
            Err(Error::Store(format!("no answer from PostgreSQL within {:?} while {what}", self.op_timeout)))
        })
    }

    /// Runs `fut` on the store's runtime and waits for it on this thread. For the synchronous
    /// store seam; never called from the store's own thread (that would wait for itself).
    pub(crate) fn block<T: Send + 'static>(
        self: &Arc<Self>,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Store("the PostgreSQL store is closed".into()));
        }
        if ON_DB_THREAD.with(|f| f.get()) {
            return Err(Error::Store("a PostgreSQL store operation was called from the store's own thread".into()));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let db = self.clone();
        self.handle.spawn(async move {
            let _ = tx.send(db.bounded("waiting for an answer", fut).await);
        });
        rx.recv().map_err(|_| Error::Store("the PostgreSQL store stopped".into()))?
    }

    /// Stops the runtime: connections close, later operations fail with `store`. Idempotent.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(stop) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = stop.send(());
        }
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.close();
    }
}

/// One reconnecting connection: the live client, replaced when it is found closed.
pub(crate) struct Slot<C> {
    /// The connection, and when it was opened ([`Db::now_ns`]).
    current: tokio::sync::Mutex<Option<(Arc<C>, u64)>>,
}

impl<C> Default for Slot<C> {
    fn default() -> Self {
        Slot { current: tokio::sync::Mutex::new(None) }
    }
}

/// A connection with whatever it prepared.
pub(crate) trait Connected: Send + Sync + 'static {
    fn client(&self) -> &Client;
}

impl<C: Connected> Slot<C> {
    /// The live connection, reconnecting (with `open`) when there is none, it closed, or an
    /// operation of `db` that started after it was opened got no answer in time (it may be the
    /// silent one; the operations still waiting on it end at their own timeouts).
    pub(crate) async fn get<F, Fut>(&self, db: &Db, open: F) -> Result<Arc<C>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C>>,
    {
        let mut cur = self.current.lock().await;
        if let Some((c, opened)) = cur.as_ref()
            && !c.client().is_closed()
            && !db.stalled_since(*opened)
        {
            return Ok(c.clone());
        }
        *cur = None;
        // Bounded as a whole (the connect has its own timeout; the statements prepared after it
        // have none), and stamped once open: an operation that waited for this open is not
        // taken to have stalled on the new connection.
        let c = Arc::new(db.bounded("opening a connection", open()).await?);
        *cur = Some((c.clone(), db.now_ns()));
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_named_as_a_user_writes_it() {
        let t = |url: &str| target(&url.parse().unwrap());
        assert_eq!(t("postgres://u@db.example.com:6432/signoff"), "db.example.com:6432/signoff");
        assert_eq!(t("postgres://u@127.0.0.1/x"), "127.0.0.1:5432/x");
        assert_eq!(t("host=a,b port=1,2 user=u dbname=d"), "a:1, b:2/d");
        assert_eq!(t("postgres://u@[::1]:5433"), "[::1]:5433");
    }

    /// A store that cannot be reached names where it was looked for (issue 42): "could not
    /// connect: error connecting to server" alone left a user guessing which URL was read.
    #[test]
    fn a_server_that_cannot_be_reached_is_named() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e = crate::PostgresStore::connect(&format!("postgres://u@127.0.0.1:{port}/signoff"), Default::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&format!("could not connect to 127.0.0.1:{port}/signoff")), "{e}");
    }
}
