//! The console's server against clients that hold connections: it runs inside the agent's
//! process, so no client may use up that process's file descriptors. Over real sockets: a
//! connection that stalls before its request head is complete (slowloris), or sits idle, is
//! closed after `Console::HEADER_READ_TIMEOUT`; no more than `Console::MAX_CONNECTIONS` are held
//! at once, and a connection beyond them is served once a slot frees; a live view (`/events`)
//! outlives that timeout. The first test uses the real timeout (10 s); the others a shorter one,
//! so that the file runs in about as long.

use serde_json::json;
use signoff::*;
use signoff_console::{Console, ConsoleOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A gate with token keys (a console needs them) and one tool that needs approval.
fn gate() -> Gate {
    let keys = TokenKeys::new("k1", Secret::from_base64(SECRET).unwrap()).unwrap();
    let gate = Gate::builder().tokens(keys).build().unwrap();
    gate.register(
        Tool::builder("write_file")
            .description("Writes a file")
            .parameters(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
                "additionalProperties": false
            }))
            .requires_approval()
            .executor(|args| async move { Ok(json!({"written": args["path"]})) })
            .build(),
    )
    .unwrap();
    gate
}

/// The header-read timeout of the consoles [`start_short`] starts.
const SHORT: Duration = Duration::from_secs(4);

/// A console with the default settings, the real header-read timeout included.
fn start(gate: &Gate) -> Console {
    Console::start(gate.clone(), ConsoleOptions::default()).unwrap()
}

/// A console whose header-read timeout is [`SHORT`].
fn start_short(gate: &Gate) -> Console {
    Console::start_with_header_read_timeout(gate.clone(), ConsoleOptions::default(), SHORT).unwrap()
}

/// Reads `stream` until the server closes it (end of stream or a reset), for at most `limit`.
/// `Some((when, what was received))` once closed, `None` if still open after `limit`.
async fn until_closed(mut stream: TcpStream, limit: Duration) -> Option<(Duration, Vec<u8>)> {
    let since = Instant::now();
    let mut received = Vec::new();
    let read = async {
        let mut chunk = [0u8; 16384];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(limit, read).await.ok()?;
    Some((since.elapsed(), received))
}

/// `GET path` on a fresh connection (`Connection: close`): the whole response, or a panic if
/// it takes longer than `limit`.
async fn get(addr: SocketAddr, path: &str, limit: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(limit, s.read_to_end(&mut raw))
        .await
        .unwrap_or_else(|_| panic!("GET {path} was not answered within {limit:?}"))
        .unwrap();
    String::from_utf8_lossy(&raw).into_owned()
}

/// Signs `approver` in as the page does (`POST /login` with the link's token and the console's
/// origin). The session cookie (`name=value`) and the page key from the answer, which the page
/// sends (as `X-Signoff-Key`) with the cookie to open its live view.
async fn sign_in(console: &Console, approver: &str) -> (String, String) {
    let addr = console.local_addr();
    let link = console.sign_in_link(approver).unwrap();
    let token = link.split_once("#token=").unwrap().1;
    let body = json!({"token": token}).to_string();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nOrigin: http://{addr}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let cookie = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.trim())
        .unwrap_or_else(|| panic!("no session cookie: {text}"));
    let answer: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    let key = answer["key"].as_str().unwrap_or_else(|| panic!("no page key: {body}"));
    (cookie.split(';').next().unwrap().to_owned(), key.to_owned())
}

/// A client that stops in the middle of its request head, one that never sends a byte, and one
/// left idle on a kept-alive connection after a response: each is closed by the server after
/// the header-read timeout (they used to be held open for ever, one descriptor each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stalls_before_its_request_head_is_complete_is_closed() {
    let console = start(&gate());
    let addr = console.local_addr();
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(format!("GET /login HTTP/1.1\r\nHost: {addr}\r\nX-Slow: abc").as_bytes()).await.unwrap();
    let silent = TcpStream::connect(addr).await.unwrap();
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(format!("GET /login HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();

    let limit = Console::HEADER_READ_TIMEOUT + Duration::from_secs(4);
    let (partial, silent, kept) =
        tokio::join!(until_closed(partial, limit), until_closed(silent, limit), until_closed(kept, limit));
    let at_least = Console::HEADER_READ_TIMEOUT - Duration::from_millis(500);
    for (name, closed) in [("partial head", &partial), ("silent", &silent), ("kept alive", &kept)] {
        let (when, _) =
            closed.as_ref().unwrap_or_else(|| panic!("the {name} connection is still open after {limit:?}"));
        assert!(*when >= at_least, "the {name} connection was closed after {when:?}, before the timeout");
    }
    let answer = String::from_utf8_lossy(&kept.unwrap().1).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "the kept-alive connection was served first: {answer}");
    // The console still serves, and still closes promptly.
    assert!(get(addr, "/login", Duration::from_secs(5)).await.starts_with("HTTP/1.1 200"));
    tokio::task::block_in_place(|| console.close());
    assert!(TcpStream::connect(addr).await.is_err());
}

/// `MAX_CONNECTIONS + 50` idle connections, then a real request: the server holds no more than
/// `MAX_CONNECTIONS` (the 50 beyond them wait in the listen queue, no descriptor in this process,
/// and are accepted only as the first ones time out), and the real request, queued behind
/// them, is served once slots free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_connection_cap_connections_wait_for_a_slot_and_a_real_request_is_then_served() {
    let console = start_short(&gate());
    let addr = console.local_addr();
    let extra = 50;
    let closed = Arc::new(AtomicUsize::new(0));
    let mut idle = Vec::new();
    for _ in 0..Console::MAX_CONNECTIONS + extra {
        let stream = TcpStream::connect(addr).await.unwrap();
        let closed = closed.clone();
        idle.push(tokio::spawn(async move {
            if until_closed(stream, Duration::from_secs(60)).await.is_some() {
                closed.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let opened = Instant::now();

    let page = get(addr, "/login", SHORT + Duration::from_secs(5)).await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("<html"), "{page}");

    // The first MAX_CONNECTIONS were accepted at once and have timed out by now; the 50 beyond
    // them were accepted only then, and are still within their own timeout.
    let check_at = opened + SHORT + SHORT / 2;
    tokio::time::sleep_until(check_at.into()).await;
    let n = closed.load(Ordering::SeqCst);
    assert!(
        n >= extra,
        "{n} idle connections closed: the real request needed at least {extra} slots freed by the timeout"
    );
    assert!(
        n <= Console::MAX_CONNECTIONS,
        "{n} idle connections closed by now: more than {} were held at once",
        Console::MAX_CONNECTIONS
    );
    for task in idle {
        task.abort();
    }
    tokio::task::block_in_place(|| console.close());
    assert!(TcpStream::connect(addr).await.is_err());
}

/// A live view is a response that lasts as long as the page is open: the header-read timeout,
/// which closes an idle connection opened alongside it, does not cut it, and it still delivers
/// the next request afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_view_outlasts_the_timeout_that_closes_idle_connections() {
    let gate = gate();
    let console = start_short(&gate);
    let addr = console.local_addr();
    let (cookie, key) = sign_in(&console, "alice").await;

    let mut events = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /events HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nX-Signoff-Key: {key}\r\n\
         Accept: text/event-stream\r\n\r\n"
    );
    events.write_all(req.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let mut chunk = [0u8; 65536];
    // Reads the stream until `seen` contains `what`, within `limit`: false if it did not come
    // in time, a panic if the stream ended.
    async fn read_until(
        events: &mut TcpStream,
        seen: &mut String,
        chunk: &mut [u8],
        what: &str,
        limit: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while !seen.contains(what) {
            match tokio::time::timeout_at(deadline, events.read(chunk)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => panic!("the live view ended: {seen}"),
                Ok(Ok(n)) => seen.push_str(&String::from_utf8_lossy(&chunk[..n])),
            }
        }
        true
    }
    assert!(read_until(&mut events, &mut seen, &mut chunk, "snapshot", Duration::from_secs(5)).await, "{seen}");
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");

    let idle = TcpStream::connect(addr).await.unwrap();
    let past = SHORT + Duration::from_secs(2);
    let (idle, quiet) =
        tokio::join!(until_closed(idle, past), read_until(&mut events, &mut seen, &mut chunk, "never sent", past));
    assert!(idle.is_some(), "the idle connection is still open after {past:?}");
    assert!(!quiet);

    let g = gate.clone();
    let task = tokio::spawn(async move {
        g.execute(ToolCall::new("write_file", json!({"path": "/tmp/after-the-timeout"})).session("s")).await
    });
    assert!(
        read_until(&mut events, &mut seen, &mut chunk, "/tmp/after-the-timeout", Duration::from_secs(5)).await,
        "the live view did not deliver the new request: {seen}"
    );
    for r in gate.pending() {
        gate.cancel_request(&r.id);
    }
    task.await.unwrap();
    tokio::task::block_in_place(|| console.close());
    assert!(TcpStream::connect(addr).await.is_err());
}

/// Closing the console does not wait out a client that stalled in the middle of its request
/// head (or one that never sent a byte): `close` returns within a couple of seconds, well
/// before the header-read timeout, the port is released and the stalled connections end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_does_not_wait_for_a_stalled_client() {
    let console = start(&gate());
    let addr = console.local_addr();
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(format!("GET /login HTTP/1.1\r\nHost: {addr}\r\nX-Slow: abc").as_bytes()).await.unwrap();
    let silent = TcpStream::connect(addr).await.unwrap();
    // Time for the server to accept both and read the partial head.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closing = Instant::now();
    tokio::task::block_in_place(|| console.close());
    let took = closing.elapsed();
    assert!(took < Duration::from_secs(4), "close took {took:?}");
    assert!(TcpStream::connect(addr).await.is_err());
    let (partial, silent) =
        tokio::join!(until_closed(partial, Duration::from_secs(1)), until_closed(silent, Duration::from_secs(1)));
    assert!(partial.is_some() && silent.is_some(), "a connection outlived the console");
}

/// A client that sends a complete head and then trickles its body: the body must arrive within
/// 10 s, then the request is refused (`408`) and the connection closed. It used to hold its
/// connection, one of the server's few, for as long as it kept sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_is_refused_and_its_connection_closed() {
    let console = start(&gate());
    let addr = console.local_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let since = Instant::now();
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let limit = Duration::from_secs(16);
    // A byte a second, as long as the connection takes them.
    loop {
        tokio::select! {
            read = s.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
            },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                assert!(since.elapsed() < limit, "still reading the body after {limit:?}");
                if s.write_all(b" ").await.is_err() {
                    break;
                }
            }
        }
    }
    let answer = String::from_utf8_lossy(&raw).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""kind":"timeout""#), "{answer}");
    assert!(since.elapsed() >= Duration::from_secs(9), "refused after {:?}", since.elapsed());
    // The console still serves.
    assert!(get(addr, "/login", Duration::from_secs(5)).await.starts_with("HTTP/1.1 200"));
    console.close();
}

/// A client that sends requests and never reads the answers: once the server's writes make no
/// progress for three header-read timeouts, the connection is closed. It used to hold its slot
/// for ever (256 such clients, and the console was unreachable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_is_closed() {
    let console = start_short(&gate());
    let addr = console.local_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    // Far more answers than the sockets' buffers hold (each about 20 kB).
    let asked = 2000;
    let one = format!("GET /assets/console.js HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.write_all(one.repeat(asked).as_bytes()).await.unwrap();
    tokio::time::sleep(SHORT * 3 + Duration::from_secs(3)).await;
    // Read what was sent before the server gave up: then the end, not more answers.
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut chunk = [0u8; 65536];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection is still open");
    let answered = String::from_utf8_lossy(&raw).matches("HTTP/1.1 200").count();
    assert!(answered < asked, "all {asked} answered: the server waited for the reader");
    assert!(get(addr, "/login", Duration::from_secs(5)).await.starts_with("HTTP/1.1 200"));
    console.close();
}
