//! The console over real HTTP on a real socket: sign-in, sessions, CSRF and origin checks,
//! decisions through the gate's token path, edits, the live stream with resume, audit, close.
//! (The same flows in a real browser: `console/tests-browser/`.)

use serde_json::{Value, json};
use signoff::*;
use signoff_console::{ApproverKeys, Console, ConsoleOptions};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`).
async fn http(console: &Console, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Reply {
    http_from(None, console, method, path, headers, body).await
}

/// [`http`] from the source address `from` (another loopback address, e.g. 127.0.0.2: Linux
/// routes all of 127/8 to the loopback interface), as a client on another host would connect.
async fn http_from(
    from: Option<std::net::IpAddr>,
    console: &Console,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Reply {
    let addr = console.local_addr();
    let mut s = match from {
        None => TcpStream::connect(addr).await.unwrap(),
        Some(ip) => {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(std::net::SocketAddr::new(ip, 0)).unwrap();
            socket.connect(addr).await.unwrap()
        }
    };
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    if let Some(b) = body {
        req.push_str(b);
    }
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    Reply { status, headers, body: body.to_owned() }
}

/// A browser that signed in: its cookie, the page key from the sign-in's answer, and its origin.
struct Browser {
    cookie: String,
    key: String,
    origin: String,
}

impl Browser {
    async fn sign_in(console: &Console, approver: &str) -> Browser {
        let origin = format!("http://{}", console.local_addr());
        let link = console.sign_in_link(approver).unwrap();
        let token = link.split_once("#token=").unwrap().1;
        let r =
            http(console, "POST", "/login", &[("Origin", &origin)], Some(&json!({"token": token}).to_string())).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let cookie = r.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
        let key = r.json()["key"].as_str().unwrap().to_owned();
        Browser { cookie, key, origin }
    }

    /// What the console's own script sends: the cookie, the page key, the origin.
    fn headers(&self) -> [(&str, &str); 3] {
        [("Cookie", self.cookie.as_str()), ("Origin", self.origin.as_str()), ("X-Signoff-Key", self.key.as_str())]
    }

    async fn get(&self, console: &Console, path: &str) -> Reply {
        http(console, "GET", path, &self.headers(), None).await
    }

    async fn post(&self, console: &Console, path: &str, body: Value) -> Reply {
        http(console, "POST", path, &self.headers(), Some(&body.to_string())).await
    }

    async fn decide(&self, console: &Console, req: &ConfirmationRequest, body: Value) -> Reply {
        let mut b = json!({"id": req.id, "digest": req.arguments_digest});
        b.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
        self.post(console, "/api/decide", b).await
    }
}

const SECRET: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn keys() -> TokenKeys {
    TokenKeys::new("k1", Secret::from_base64(SECRET).unwrap()).unwrap()
}

/// A gate with token keys and one editable tool that needs approval and records its runs.
fn gate(builder: GateBuilder, runs: Arc<std::sync::Mutex<Vec<Value>>>) -> Gate {
    let gate = builder.tokens(keys()).build().unwrap();
    gate.register(
        Tool::builder("write_file")
            .description("Writes a file")
            .parameters(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "mode": {"type": "integer", "minimum": 0}},
                "required": ["path"],
                "additionalProperties": false
            }))
            .requires_approval()
            .editable(true)
            .executor(move |args| {
                let runs = runs.clone();
                async move {
                    runs.lock().unwrap().push(args.clone());
                    Ok(json!({"written": args["path"]}))
                }
            })
            .build(),
    )
    .unwrap();
    gate
}

fn start(gate: &Gate) -> Console {
    Console::start(gate.clone(), ConsoleOptions::default()).unwrap()
}

fn call(gate: &Gate, path: &str, session: &str) -> tokio::task::JoinHandle<ToolResult> {
    let g = gate.clone();
    let c = ToolCall::new("write_file", json!({"path": path})).session(session);
    tokio::spawn(async move { g.execute(c).await })
}

type Runs = Arc<std::sync::Mutex<Vec<Value>>>;

/// The gate (built from `builder`, with the tool), a console for it, and the tool's runs.
fn world(builder: GateBuilder) -> (Gate, Console, Runs) {
    let runs: Runs = Default::default();
    let gate = gate(builder, runs.clone());
    let console = start(&gate);
    (gate, console, runs)
}

/// Starts a call and returns it with its request, once pending.
async fn ask(
    gate: &Gate,
    path: &str,
    session: &str,
) -> (tokio::task::JoinHandle<ToolResult>, Arc<ConfirmationRequest>) {
    let before: Vec<_> = gate.pending().iter().map(|r| r.id).collect();
    let task = call(gate, path, session);
    for _ in 0..3000 {
        if let Some(r) = gate.pending().into_iter().find(|r| !before.contains(&r.id)) {
            return (task, r);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the call to {path} never became pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_once_through_the_console_runs_the_tool_exactly_once_and_a_second_answer_says_who_won() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let bob = Browser::sign_in(&console, "bob").await;
    let (task, req) = ask(&gate, "/tmp/a", "s1").await;
    let r = alice.decide(&console, &req, json!({"decision": "approve", "scope": "once"})).await;
    assert_eq!((r.status, r.json()["outcome"].clone()), (200, json!("approved")), "{}", r.body);
    let result = task.await.unwrap();
    assert_eq!(result.status, ToolStatus::Executed);
    assert_eq!(result.decision.as_ref().and_then(|d| d.responder()), Some("alice"));
    let lost = bob.decide(&console, &req, json!({"decision": "approve"})).await;
    assert_eq!(lost.status, 409, "{}", lost.body);
    assert_eq!(lost.json()["decided_by"], "alice");
    assert!(lost.json()["message"].as_str().unwrap().contains("already decided by alice: approved"));
    assert_eq!(runs.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvers_racing_on_one_request_exactly_one_wins() {
    let (gate, console, runs) = world(Gate::builder());
    let browsers = [
        Browser::sign_in(&console, "alice").await,
        Browser::sign_in(&console, "bob").await,
        Browser::sign_in(&console, "carol").await,
    ];
    for round in 0..10 {
        let (task, req) = ask(&gate, &format!("/tmp/race{round}"), "s1").await;
        let answers = futures_util::future::join_all(browsers.iter().enumerate().map(|(i, b)| {
            let decision =
                if i == 2 { json!({"decision": "deny", "reason": "no"}) } else { json!({"decision": "approve"}) };
            b.decide(&console, &req, decision)
        }))
        .await;
        let won: Vec<_> = answers.iter().filter(|a| a.status == 200).collect();
        assert_eq!(won.len(), 1, "{:?}", answers.iter().map(|a| &a.body).collect::<Vec<_>>());
        for a in answers.iter().filter(|a| a.status != 200) {
            assert_eq!(a.status, 409, "{}", a.body);
            assert!(a.json()["decided_by"].is_string(), "{}", a.body);
        }
        task.await.unwrap();
    }
    assert!(runs.lock().unwrap().len() <= 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_needs_a_reason_and_the_model_is_told_it() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let (task, req) = ask(&gate, "/etc/passwd", "s1").await;
    for body in [json!({"decision": "deny"}), json!({"decision": "deny", "reason": "   "})] {
        let r = alice.decide(&console, &req, body).await;
        assert_eq!(r.status, 422, "{}", r.body);
    }
    let r = alice.decide(&console, &req, json!({"decision": "deny", "reason": "not that file"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let result = task.await.unwrap();
    assert_eq!(result.status, ToolStatus::Denied);
    assert!(result.content.contains("not that file"), "{}", result.content);
    assert!(runs.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_grant_and_edits_checked_against_the_schema() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;

    // An edit: a schema error first, then a valid one; the tool runs with the edit.
    let (task, req) = ask(&gate, "/tmp/draft", "s1").await;
    let bad =
        alice.post(&console, "/api/check", json!({"id": req.id, "arguments": {"path": "/tmp/x", "mode": -1}})).await;
    assert_eq!((bad.status, bad.json()["kind"].clone()), (422, json!("invalid_arguments")), "{}", bad.body);
    let edit = json!({"path": "/tmp/final", "mode": 420});
    let ok = alice.post(&console, "/api/check", json!({"id": req.id, "arguments": edit})).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let changes = ok.json()["changes"].clone();
    assert_eq!(
        changes,
        json!([{"path": "/mode", "before": null, "after": "420"}, {"path": "/path", "before": "\"/tmp/draft\"", "after": "\"/tmp/final\""}])
    );
    let r =
        alice.decide(&console, &req, json!({"decision": "approve", "arguments": {"path": "/tmp/x", "extra": 1}})).await;
    assert_eq!(r.status, 422, "an unchecked invalid edit is refused by the gate too: {}", r.body);
    let r = alice.decide(&console, &req, json!({"decision": "approve", "arguments": edit})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(task.await.unwrap().status, ToolStatus::Executed);
    assert_eq!(runs.lock().unwrap().last().unwrap(), &edit);

    // Approve for the session: the next call in that session runs without asking.
    let (task, req) = ask(&gate, "/tmp/one", "s2").await;
    let r = alice.decide(&console, &req, json!({"decision": "approve", "scope": "session"})).await;
    assert_eq!((r.status, r.json()["scope"].clone()), (200, json!("session")), "{}", r.body);
    assert_eq!(task.await.unwrap().status, ToolStatus::Executed);
    assert_eq!(gate.grants("s2"), vec!["write_file".to_owned()]);
    let again = call(&gate, "/tmp/two", "s2").await.unwrap();
    assert_eq!(again.status, ToolStatus::Executed);
    assert_eq!(runs.lock().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_shown_is_what_is_answered() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let (task, req) = ask(&gate, "/tmp/a", "s1").await;
    let mut forged = (*req).clone();
    forged.arguments_digest = signoff::Arguments::new(&json!({"path": "/tmp/b"})).digest();
    let r = alice.decide(&console, &forged, json!({"decision": "approve"})).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (409, json!("mismatch")), "{}", r.body);
    for body in [
        json!({"id": req.id, "digest": req.arguments_digest, "decision": "approve", "approver": "root"}),
        json!({"id": req.id, "digest": req.arguments_digest, "decision": "always"}),
        json!({"id": req.id, "digest": req.arguments_digest, "decision": "approve", "scope": "always"}),
    ] {
        let r = alice.post(&console, "/api/decide", body).await;
        assert_eq!(r.status, 400, "{}", r.body);
    }
    // A repeated key in the raw text.
    let raw = format!(
        r#"{{"id":"{}","digest":"{}","decision":"deny","reason":"x","decision":"approve"}}"#,
        req.id, req.arguments_digest
    );
    let r = http(&console, "POST", "/api/decide", &alice.headers(), Some(&raw)).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("duplicate key"), "{}", r.body);
    assert_eq!(gate.pending().len(), 1, "nothing was answered");
    gate.cancel_request(&req.id);
    task.await.unwrap();
    assert!(runs.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_decides_who_may_approve_not_the_console() {
    let runs: Runs = Default::default();
    let gate =
        gate(Gate::builder().authenticator(Arc::new(Approvers::new().allow("write_file", ["alice"]))), runs.clone());
    let console = start(&gate);
    let mallory = Browser::sign_in(&console, "mallory").await;
    let alice = Browser::sign_in(&console, "alice").await;
    let (task, req) = ask(&gate, "/tmp/a", "s1").await;
    let r = mallory.decide(&console, &req, json!({"decision": "approve"})).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (403, json!("unauthorized")), "{}", r.body);
    assert_eq!(gate.pending().len(), 1);
    let r = alice.decide(&console, &req, json!({"decision": "approve"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(task.await.unwrap().status, ToolStatus::Executed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_cross_site_and_forged_requests_are_refused() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let (task, req) = ask(&gate, "/tmp/a", "s1").await;
    let body = json!({"id": req.id, "digest": req.arguments_digest, "decision": "approve"}).to_string();

    let r = http(&console, "GET", "/", &[], None).await;
    assert_eq!((r.status, r.header("location")), (303, Some("login")));
    assert_eq!(http(&console, "GET", "/events", &[], None).await.status, 401);
    assert_eq!(http(&console, "GET", "/api/audit", &[], None).await.status, 401);
    let r = http(&console, "POST", "/api/decide", &[("Origin", &alice.origin)], Some(&body)).await;
    assert_eq!(r.status, 401, "no session: {}", r.body);
    // A cross-site page that somehow has the cookie and the token: refused on its Origin.
    let cross =
        [("Cookie", alice.cookie.as_str()), ("Origin", "http://evil.example"), ("X-Signoff-Key", alice.key.as_str())];
    let r = http(&console, "POST", "/api/decide", &cross, Some(&body)).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (403, json!("cross_site")));
    let r = http(
        &console,
        "POST",
        "/api/decide",
        &[("Cookie", &alice.cookie), ("Sec-Fetch-Site", "cross-site")],
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 403);
    // Same origin, no page key, or a wrong one.
    let r = http(&console, "POST", "/api/decide", &[("Cookie", &alice.cookie), ("Origin", &alice.origin)], Some(&body))
        .await;
    assert_eq!((r.status, r.json()["kind"].clone()), (401, json!("key")));
    let wrong = [("Cookie", alice.cookie.as_str()), ("Origin", alice.origin.as_str()), ("X-Signoff-Key", "guess")];
    assert_eq!(http(&console, "POST", "/api/decide", &wrong, Some(&body)).await.status, 401);
    // A forged cookie.
    let name = alice.cookie.split_once('=').unwrap().0;
    let forged = format!("{name}=forged");
    let forged =
        [("Cookie", forged.as_str()), ("Origin", alice.origin.as_str()), ("X-Signoff-Key", alice.key.as_str())];
    assert_eq!(http(&console, "POST", "/api/decide", &forged, Some(&body)).await.status, 401);
    // Login from another site (login CSRF), and DNS rebinding (a foreign Host).
    let link = console.sign_in_link("alice").unwrap();
    let token = link.split_once("#token=").unwrap().1;
    let r = http(
        &console,
        "POST",
        "/login",
        &[("Origin", "http://evil.example")],
        Some(&json!({"token": token}).to_string()),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = http(&console, "GET", "/login", &[("Host", "evil.example:80")], None).await;
    assert_eq!(r.status, 421);
    assert_eq!(gate.pending().len(), 1, "nothing was answered");
    // Signing out ends the session.
    assert_eq!(alice.post(&console, "/logout", json!({})).await.status, 200);
    assert_eq!(alice.decide(&console, &req, json!({"decision": "approve"})).await.status, 401);
    gate.cancel_request(&req.id);
    task.await.unwrap();
    assert!(runs.lock().unwrap().is_empty());
}

/// Browsers do not keep cookies apart by port: any other server on 127.0.0.1 the person opens
/// (an agent's dev server, say) receives the console's cookie. With it, a script used to read the
/// CSRF token from `GET /` and approve. The cookie alone now opens nothing: the page is a shell,
/// and every read or change needs the page key handed over only in the sign-in's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_cookie_alone_reads_and_approves_nothing() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let (task, req) = ask(&gate, "/tmp/secret-plans", "s1").await;
    // What a script holding only the cookie sees: a page with no request and no key in it...
    let page = http(&console, "GET", "/", &[("Cookie", &alice.cookie)], None).await;
    assert_eq!(page.status, 200);
    for hidden in [alice.key.as_str(), "secret-plans", &req.id.to_string(), &req.arguments_digest.to_string()] {
        assert!(!page.body.contains(hidden), "the page shows {hidden:?}: {}", page.body);
    }
    // ... no stream, no audit, no decision.
    for path in ["/events", "/api/audit"] {
        let r = http(&console, "GET", path, &[("Cookie", &alice.cookie)], None).await;
        assert_eq!((r.status, r.json()["kind"].clone()), (401, json!("key")), "{path}: {}", r.body);
    }
    let body = json!({"id": req.id, "digest": req.arguments_digest, "decision": "approve"}).to_string();
    let r = http(&console, "POST", "/api/decide", &[("Cookie", &alice.cookie)], Some(&body)).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (401, json!("key")), "{}", r.body);
    assert_eq!(gate.pending().len(), 1, "nothing was answered");
    // The page's own script, with the key, does.
    assert_eq!(alice.decide(&console, &req, json!({"decision": "approve"})).await.status, 200);
    assert_eq!(task.await.unwrap().status, ToolStatus::Executed);
    assert_eq!(runs.lock().unwrap().len(), 1);
}

/// Two consoles on one host, on different ports: a browser sends both their cookies to each.
/// They used to share one cookie name, so signing in to one signed the person out of the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consoles_on_one_host_keep_their_own_sessions() {
    let (_g1, one, _) = world(Gate::builder());
    let (_g2, two, _) = world(Gate::builder());
    let a = Browser::sign_in(&one, "alice").await;
    let b = Browser::sign_in(&two, "bob").await;
    let jar = format!("{}; {}", a.cookie, b.cookie);
    for (console, who) in [(&one, &a), (&two, &b)] {
        let headers = [("Cookie", jar.as_str()), ("X-Signoff-Key", who.key.as_str())];
        let r = http(console, "GET", "/api/audit", &headers, None).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_links_work_once_keys_work_and_cookies_are_strict() {
    let runs: Runs = Default::default();
    let gate = gate(Gate::builder(), runs);
    let options = ConsoleOptions {
        approver_keys: Some(ApproverKeys::new().add("dana", "dana-has-a-long-key").unwrap()),
        sign_in_ttl: Duration::from_millis(300),
        ..ConsoleOptions::default()
    };
    let console = Console::start(gate.clone(), options).unwrap();
    let origin = format!("http://{}", console.local_addr());
    let login = |body: Value| {
        let origin = origin.clone();
        let console = &console;
        async move { http(console, "POST", "/login", &[("Origin", &origin)], Some(&body.to_string())).await }
    };
    let link = console.sign_in_link("alice").unwrap();
    assert!(link.starts_with(console.url()) && link.contains("/login#token=so1s."), "{link}");
    let token = link.split_once("#token=").unwrap().1.to_owned();
    let r = login(json!({"token": token})).await;
    assert_eq!(r.status, 200);
    let cookie = r.header("set-cookie").unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http on loopback: {cookie}");
    let again = login(json!({"token": token})).await;
    assert_eq!((again.status, again.json()["kind"].clone()), (401, json!("already_used")));
    // An expired link, an approval token, a tampered link.
    let old = console.sign_in_link("alice").unwrap().split_once("#token=").unwrap().1.to_owned();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(login(json!({"token": old})).await.json()["kind"], "token_expired");
    let mut tampered = console.sign_in_link("alice").unwrap().split_once("#token=").unwrap().1.to_owned();
    tampered.pop();
    assert_eq!(login(json!({"token": tampered})).await.status, 401);
    // Keys.
    assert_eq!(login(json!({"approver": "dana", "key": "dana-has-a-long-key"})).await.status, 200);
    assert_eq!(login(json!({"approver": "dana", "key": "wrong-key-of-dana"})).await.json()["kind"], "bad_key");
    assert_eq!(login(json!({"approver": "eve", "key": "dana-has-a-long-key"})).await.status, 401);
    assert_eq!(login(json!({"approver": "dana"})).await.status, 400);
    // Guessing never locks anything (issue 44): on loopback every local process is 127.0.0.1,
    // the supervised agent included, and 5 wrong keys used to lock dana's own right key out of
    // her own address for 5 minutes (100 from anywhere: out of every address).
    let from = |ip: &str| Some(ip.parse::<std::net::IpAddr>().unwrap());
    let login_from = |ip: Option<std::net::IpAddr>, body: Value| {
        let origin = origin.clone();
        let console = &console;
        async move { http_from(ip, console, "POST", "/login", &[("Origin", &origin)], Some(&body.to_string())).await }
    };
    let guesser = from("127.0.0.2");
    for _ in 0..6 {
        assert_eq!(login_from(guesser, json!({"approver": "dana", "key": "a-wrong-key-for-dana"})).await.status, 401);
    }
    // Past the free ones, a wrong key's answer waits longer: guessing is slowed, not the approver.
    let t = std::time::Instant::now();
    assert_eq!(login_from(guesser, json!({"approver": "dana", "key": "a-wrong-key-for-dana"})).await.status, 401);
    assert!(t.elapsed() >= Duration::from_millis(1200), "{:?}", t.elapsed());
    assert_eq!(login_from(guesser, json!({"approver": "dana", "key": "dana-has-a-long-key"})).await.status, 200);
    // Hammering from dana's own address and twenty others, 120 wrong keys at once: while they
    // wait, dana signs in with her key from her own address, and decides.
    let hammer: Vec<_> = (1..=21)
        .flat_map(|i| std::iter::repeat_n(from(&format!("127.0.0.{i}")), 6))
        .map(|ip| login_from(ip, json!({"approver": "dana", "key": "another-wrong-key"})))
        .collect();
    let dana = async {
        let r = login_from(from("127.0.0.1"), json!({"approver": "dana", "key": "dana-has-a-long-key"})).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let cookie = r.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
        (cookie, r.json()["key"].as_str().unwrap().to_owned())
    };
    let (statuses, (cookie, key)) = tokio::join!(futures_util::future::join_all(hammer), dana);
    assert!(statuses.iter().all(|r| r.status == 401), "{:?}", statuses.iter().map(|r| r.status).collect::<Vec<_>>());
    let c = gate.clone();
    let call = tokio::spawn(async move { c.execute(ToolCall::new("write_file", json!({"path": "/tmp/d"}))).await });
    let request = loop {
        if let Some(r) = gate.pending().pop() {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let body = json!({"id": request.id, "digest": request.arguments_digest, "decision": "approve"}).to_string();
    let headers = [("Cookie", cookie.as_str()), ("X-Signoff-Key", key.as_str()), ("Origin", origin.as_str())];
    let decided = http(&console, "POST", "/api/decide", &headers, Some(&body)).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(call.await.unwrap().status, signoff::ToolStatus::Executed);
    // Sign-in links still work.
    let link = console.sign_in_link("dana").unwrap();
    assert_eq!(login(json!({"token": link.split_once("#token=").unwrap().1})).await.status, 200);
    // Pages carry a strict CSP.
    let page = http(&console, "GET", "/login", &[], None).await;
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_link_from_before_the_console_started_is_refused() {
    // Used links are remembered in the console's memory: a link issued before a (re)start could
    // have been used by the console that ran then, so it never signs anyone in.
    let runs: Runs = Default::default();
    let gate = gate(Gate::builder(), runs);
    let earlier = gate.issue_sign_in("alice", Duration::from_secs(900)).unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let console = start(&gate);
    let origin = format!("http://{}", console.local_addr());
    let login = |token: String| {
        let (origin, console) = (origin.clone(), &console);
        async move {
            let body = json!({ "token": token }).to_string();
            http(console, "POST", "/login", &[("Origin", &origin)], Some(&body)).await
        }
    };
    let refused = login(earlier).await;
    assert_eq!((refused.status, refused.json()["kind"].clone()), (401, json!("token_expired")));
    assert!(refused.header("set-cookie").is_none());
    let fresh = console.sign_in_link("alice").unwrap().split_once("#token=").unwrap().1.to_owned();
    assert_eq!(login(fresh).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_durable_store_a_sign_in_link_works_once_across_a_restart() {
    // The gate's store keeps used links: a link from before a restart is not refused for its
    // age, and one used before the restart stays used after it.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("console.db");
    let open = || gate(Gate::builder().store(SqliteStore::open(&db).unwrap()), Default::default());
    async fn login(console: &Console, token: &str) -> Reply {
        let origin = format!("http://{}", console.local_addr());
        let body = json!({ "token": token }).to_string();
        http(console, "POST", "/login", &[("Origin", &origin)], Some(&body)).await
    }
    let first = open();
    let console = start(&first);
    let used = console.sign_in_link("alice").unwrap().split_once("#token=").unwrap().1.to_owned();
    let unused = console.sign_in_link("bob").unwrap().split_once("#token=").unwrap().1.to_owned();
    assert_eq!(login(&console, &used).await.status, 200);
    console.close();
    first.close();
    drop(first);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = open();
    let console = start(&second);
    let replay = login(&console, &used).await;
    assert_eq!((replay.status, replay.json()["kind"].clone()), (401, json!("already_used")));
    assert_eq!(login(&console, &unused).await.status, 200, "a link from before the restart, unused");
    let again = login(&console, &unused).await;
    assert_eq!((again.status, again.json()["kind"].clone()), (401, json!("already_used")));
    console.close();
    second.close();
}

/// Reads SSE frames until `until` says stop; returns (event, id, data) triples.
async fn sse(
    console: &Console,
    who: &Browser,
    path: &str,
    last_event_id: Option<&str>,
    until: impl Fn(&[(String, String, String)]) -> bool,
) -> Vec<(String, String, String)> {
    let addr = console.local_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {}\r\nX-Signoff-Key: {}\r\nAccept: text/event-stream\r\n",
        who.cookie, who.key
    );
    if let Some(id) = last_event_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = String::new();
    let mut frames = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut chunk = [0u8; 65536];
        let n = tokio::time::timeout_at(deadline, s.read(&mut chunk)).await.expect("SSE timed out").unwrap();
        if n == 0 {
            return frames;
        }
        buf.push_str(&String::from_utf8_lossy(&chunk[..n]));
        // The response ended (its last chunk) on a connection kept alive.
        let ended = buf.ends_with("\r\n0\r\n\r\n") || buf == "0\r\n\r\n";
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let (mut ev, mut id, mut data) = (String::new(), String::new(), String::new());
            for line in frame.lines() {
                // The chunked encoding's size lines are not SSE fields.
                if let Some(v) = line.strip_prefix("event:") {
                    ev = v.trim().into();
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().into();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if !ev.is_empty() {
                frames.push((ev, id, data));
                if until(&frames) {
                    return frames;
                }
            }
        }
        if ended {
            return frames;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_starts_with_a_snapshot_and_resumes_after_a_reconnect() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let (first, r1) = ask(&gate, "/tmp/one", "s1").await;

    // The console follows the gate's bus on its own thread, so a request made a moment ago is in
    // the snapshot or in the first event after it.
    let r1_id = r1.id.to_string();
    let frames = sse(&console, &alice, "/events", None, |f| f.iter().any(|(_, _, d)| d.contains(&r1_id))).await;
    assert_eq!(frames[0].0, "snapshot");
    let snap: Value = serde_json::from_str(&frames[0].2).unwrap();
    let cards: Vec<Value> = match frames.len() {
        1 => snap["pending"].as_array().unwrap().clone(),
        _ => {
            assert_eq!(snap["pending"], json!([]), "{frames:?}");
            let kinds: Vec<&str> = frames[1..].iter().map(|f| f.0.as_str()).collect();
            assert_eq!(kinds, ["request"], "{frames:?}");
            vec![serde_json::from_str(&frames[1].2).unwrap()]
        }
    };
    assert_eq!(cards.len(), 1, "{frames:?}");
    assert_eq!(cards[0]["id"], json!(r1.id));
    assert!(cards[0]["html"].as_str().unwrap().contains("/tmp/one"));
    let id = &frames.last().unwrap().1;

    // Missed while away: a new request and a decision. Resuming replays exactly those.
    let (second, r2) = ask(&gate, "/tmp/two", "s2").await;
    let r = alice.decide(&console, &r1, json!({"decision": "approve"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let result = first.await.unwrap();
    assert_eq!(result.status, ToolStatus::Executed, "{result:?}");
    assert_eq!(runs.lock().unwrap().len(), 1);
    let frames = sse(&console, &alice, "/events", Some(id), |f| f.len() >= 2).await;
    let kinds: Vec<&str> = frames.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(kinds, ["request", "resolved"], "{frames:?}");
    assert!(frames[0].2.contains(&r2.id.to_string()));
    let resolved: Value = serde_json::from_str(&frames[1].2).unwrap();
    assert_eq!(
        (resolved["id"].clone(), resolved["outcome"].clone(), resolved["responder"].clone()),
        (json!(r1.id), json!("approved"), json!("alice"))
    );
    // An id from another console run (or garbage) gets a snapshot.
    for stale in ["0123456789ab-3", "nonsense"] {
        let frames = sse(&console, &alice, "/events", Some(stale), |f| !f.is_empty()).await;
        assert_eq!(frames[0].0, "snapshot");
        let snap: Value = serde_json::from_str(&frames[0].2).unwrap();
        assert_eq!(snap["pending"][0]["id"], json!(r2.id));
        assert_eq!(snap["history"][0]["id"], json!(r1.id));
    }
    // Closing the console ends open streams and releases the port.
    let live = {
        let (c, who) = (&console, &alice);
        async move { sse(c, who, "/events", None, |_| false).await }
    };
    let closer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let c = &console;
        tokio::task::block_in_place(|| c.close());
    };
    let (frames, ()) = tokio::join!(live, closer);
    assert_eq!(frames[0].0, "snapshot", "the stream ended when the console closed");
    assert!(TcpStream::connect(console.local_addr()).await.is_err());
    console.close();
    gate.cancel_request(&r2.id);
    second.await.unwrap();
}

/// A stream opened before signing out ends there: it used to go on showing every later request
/// (its arguments included) to whoever held it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_when_its_session_does() {
    let (gate, console, runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let live = sse(&console, &alice, "/events", None, |_| false);
    let act = async {
        // Time for the stream to attach (its snapshot is asserted below).
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(alice.post(&console, "/logout", json!({})).await.status, 200);
        ask(&gate, "/tmp/after-sign-out", "s").await
    };
    let (frames, (task, req)) = tokio::join!(live, act);
    let kinds: Vec<&str> = frames.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(kinds, ["snapshot"], "{frames:?}");
    assert!(!frames.iter().any(|f| f.2.contains("after-sign-out")), "{frames:?}");
    gate.cancel_request(&req.id);
    task.await.unwrap();
    assert!(runs.lock().unwrap().is_empty());
    console.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_requests_cannot_be_approved_and_show_as_timed_out() {
    let (gate, console, runs) = world(Gate::builder().default_timeout(Duration::from_millis(400)));
    let alice = Browser::sign_in(&console, "alice").await;
    let (task, req) = ask(&gate, "/tmp/late", "s1").await;
    let result = task.await.unwrap();
    assert_eq!(result.status, ToolStatus::TimedOut);
    let r = alice.decide(&console, &req, json!({"decision": "approve"})).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.json()["outcome"], "timed-out");
    assert!(runs.lock().unwrap().is_empty());
    let frames = sse(&console, &alice, "/events", None, |f| !f.is_empty()).await;
    let snap: Value = serde_json::from_str(&frames[0].2).unwrap();
    let row = snap["history"][0]["html"].as_str().unwrap();
    assert!(row.contains(r#"data-outcome="timed-out""#) && row.contains("timed out"), "history shows a timeout: {row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_view_verifies_the_gates_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (gate, console, runs) = world(Gate::builder().audit(JsonlAuditSink::open(&path).unwrap()));
    let alice = Browser::sign_in(&console, "alice").await;
    let (task, req) = ask(&gate, "/tmp/a", "s1").await;
    alice.decide(&console, &req, json!({"decision": "approve"})).await;
    assert_eq!(task.await.unwrap().status, ToolStatus::Executed);
    assert_eq!(runs.lock().unwrap().len(), 1);
    let r = alice.get(&console, "/api/audit").await;
    let report = &r.json()["report"];
    assert!(report["problem"].is_null() && report["records"].as_u64().unwrap() >= 4, "{}", r.body);
    assert!(r.json()["html"].as_str().unwrap().contains(r#"data-ok="true""#), "{}", r.body);
    // The cookie alone reads nothing.
    let r = http(&console, "GET", "/api/audit", &[("Cookie", &alice.cookie)], None).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (401, json!("key")));
    // Someone edits the log: the view says so.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("alice", "mallory", 1)).unwrap();
    let r = alice.get(&console, "/api/audit").await;
    assert!(r.json()["html"].as_str().unwrap().contains(r#"data-ok="false""#), "{}", r.body);
}

#[test]
fn options_are_checked() {
    let no_keys = Gate::new();
    assert_eq!(Console::start(no_keys, ConsoleOptions::default()).unwrap_err().kind(), ErrorKind::Config);
    let g = Gate::builder().tokens(keys()).build().unwrap();
    let remote = ConsoleOptions { bind: "0.0.0.0:0".parse().unwrap(), ..ConsoleOptions::default() };
    assert_eq!(Console::start(g.clone(), remote).unwrap_err().kind(), ErrorKind::Config);
    let bad_origin = ConsoleOptions { public_origin: Some("approve.example.com".into()), ..ConsoleOptions::default() };
    assert_eq!(Console::start(g.clone(), bad_origin).unwrap_err().kind(), ErrorKind::Config);
    let c = Console::start(g.clone(), ConsoleOptions::default()).unwrap();
    assert!(c.url().starts_with("http://127.0.0.1:") && c.url().ends_with('/'));
    assert_eq!(c.sign_in_link("").unwrap_err().kind(), ErrorKind::Malformed);
    // The port is taken while it runs, and free after close (which is idempotent).
    let taken = ConsoleOptions { bind: c.local_addr(), ..ConsoleOptions::default() };
    assert!(Console::start(g.clone(), taken.clone()).is_err());
    c.close();
    c.close();
    assert!(c.is_closed());
    Console::start(g, taken).unwrap().close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_counts_as_an_approver_until_it_closes() {
    let (gate, console, runs) = world(Gate::builder());
    // Someone could answer: the call waits.
    let (task, req) = ask(&gate, "/tmp/a", "s1").await;
    gate.cancel_request(&req.id);
    task.await.unwrap();
    tokio::task::block_in_place(|| console.close());
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Nobody can: cancelled at once, visibly.
    let result = call(&gate, "/tmp/b", "s1").await.unwrap();
    assert_eq!(result.status, ToolStatus::Cancelled, "{result:?}");
    assert_eq!(result.decision.and_then(|d| d.cancel_reason()), Some(CancelReason::NoApprover));
    assert!(runs.lock().unwrap().is_empty());
}

/// A call of `write_file` with request metadata, as the MCP gate makes one (`client` is the
/// client's own name and version).
async fn ask_with(
    gate: &Gate,
    path: &str,
    session: &str,
    metadata: Value,
) -> (tokio::task::JoinHandle<ToolResult>, Arc<ConfirmationRequest>) {
    let g = gate.clone();
    let c = ToolCall::new("write_file", json!({"path": path})).session(session).metadata(metadata);
    let task = tokio::spawn(async move { g.execute(c).await });
    for _ in 0..3000 {
        if let Some(r) = gate.pending().into_iter().find(|r| r.arguments.value()["path"] == path) {
            return (task, r);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the call to {path} never became pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_shows_a_neutral_badge_without_hints_and_the_clients_name_with_its_session() {
    let (gate, console, _runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let session = "mcp-0e5c1a2b-1111-4222-8333-444455556666";
    let (_t1, plain) = ask(&gate, "/tmp/plain", "s1").await;
    let (_t2, mcp) =
        ask_with(&gate, "/tmp/mcp", session, json!({"risk": "L3", "client": "claude-code 1.2.3 <b>x</b>"})).await;
    let frames = sse(&console, &alice, "/events", None, |f| !f.is_empty()).await;
    let snap: Value = serde_json::from_str(&frames[0].2).unwrap();
    let html = |id: uuid::Uuid| {
        snap["pending"].as_array().unwrap().iter().find(|c| c["id"] == json!(id)).unwrap()["html"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // No hint (neither destructive nor read-only): a neutral badge, not an alarming one.
    let card = html(plain.id);
    assert!(card.contains(r#"class="risk risk-none" data-risk="none""#) && card.contains(">no risk hint<"), "{card}");
    assert!(!card.contains("not marked destructive"), "{card}");
    assert!(card.contains(r#"<dd class="session">s1</dd>"#), "a session without a client shows its id: {card}");
    // An MCP session: the client's name (escaped), with the whole session id beside it.
    let card = html(mcp.id);
    assert!(card.contains(r#"class="risk risk-l3" data-risk="l3""#) && card.contains(">L3<"), "{card}");
    assert!(card.contains(r#"<span class="client">claude-code 1.2.3 &lt;b&gt;x&lt;/b&gt;</span>"#), "{card}");
    assert!(card.contains(&format!(r#"<small class="session-id">{session}</small>"#)), "{card}");
    assert!(card.contains(&format!(r#"title="session id: {session}""#)), "{card}");
    assert!(!card.contains("<b>x</b>"), "the client's name is escaped: {card}");
    // The badge and the session button name it by the client, with the id's start.
    assert!(card.contains(r#"data-session-shown="claude-code 1.2.3 &lt;b&gt;x&lt;/b&gt; · mcp-0e5c1a2b…""#), "{card}");
    // The legend is on the page.
    let page = http(&console, "GET", "/", &[("Cookie", &alice.cookie)], None).await;
    assert!(
        page.body.contains(r#"id="risk-legend""#) && page.body.contains("one band lower, never below L1"),
        "{}",
        page.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_records_say_who_decided_what_and_whether_the_tool_ran() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (gate, console, runs) = world(Gate::builder().audit(JsonlAuditSink::open(&path).unwrap()));
    gate.register(
        Tool::builder("boom")
            .requires_approval()
            .executor(|_| async { Err::<Value, _>("disk full".to_owned()) })
            .build(),
    )
    .unwrap();
    let alice = Browser::sign_in(&console, "alice").await;
    let bob = Browser::sign_in(&console, "bob").await;

    let (approved, a) = ask(&gate, "/tmp/approved", "s1").await;
    assert_eq!(alice.decide(&console, &a, json!({"decision": "approve"})).await.status, 200);
    assert_eq!(approved.await.unwrap().status, ToolStatus::Executed);
    let (denied, d) = ask(&gate, "/tmp/denied", "s1").await;
    let r = bob.decide(&console, &d, json!({"decision": "deny", "reason": "not <that> file"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    denied.await.unwrap();
    let g = gate.clone();
    let failing = tokio::spawn(async move { g.execute(ToolCall::new("boom", json!({})).session("s2")).await });
    let f = loop {
        if let Some(r) = gate.pending().into_iter().find(|r| &*r.tool == "boom") {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert_eq!(alice.decide(&console, &f, json!({"decision": "approve"})).await.status, 200);
    failing.await.unwrap();
    let (_waiting, w) = ask_with(&gate, "/tmp/waiting", "mcp-1", json!({"client": "claude-code 1.2.3"})).await;
    assert_eq!(runs.lock().unwrap().len(), 1);

    // Signed in only: no key, no records; the cookie alone reads nothing.
    assert_eq!(http(&console, "GET", "/api/audit/records", &[], None).await.status, 401);
    let r = http(&console, "GET", "/api/audit/records", &[("Cookie", &alice.cookie)], None).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (401, json!("key")));

    let r = alice.get(&console, "/api/audit/records").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json();
    assert_eq!(body["configured"], true);
    let records = body["records"].as_array().unwrap();
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] == w[1] + 1) && *seqs.last().unwrap() == 0, "newest first: {seqs:?}");
    assert!(body["next"].is_null(), "all of them fit one page");
    let find = |kind: &str, id: uuid::Uuid| {
        records
            .iter()
            .find(|r| r["kind"] == kind && r["request_id"] == json!(id))
            .unwrap_or_else(|| panic!("no {kind} record for {id}: {records:?}"))
            .clone()
    };
    let o = find("outcome", a.id);
    assert_eq!(
        (&o["decision"], &o["responder"], &o["result"], &o["tool"]),
        (&json!("approved"), &json!("alice"), &json!("ran"), &json!("write_file"))
    );
    assert!(o["time"].as_str().unwrap().ends_with('Z') && o["at_ms"].as_u64().unwrap() > 0);
    assert_eq!(find("execution", a.id)["result"], "ran");
    let o = find("outcome", d.id);
    assert_eq!((&o["decision"], &o["responder"], &o["result"]), (&json!("denied"), &json!("bob"), &json!("not run")));
    assert_eq!(o["reason"], "not <that> file");
    assert_eq!(find("response", d.id)["result"], "not run");
    let o = find("outcome", f.id);
    assert_eq!((&o["responder"], &o["result"]), (&json!("alice"), &json!("failed")));
    assert_eq!(find("execution", f.id)["reason"], "disk full");
    let q = find("request", w.id);
    assert_eq!(
        (&q["result"], &q["client"], &q["session_id"]),
        (&json!("waiting"), &json!("claude-code 1.2.3"), &json!("mcp-1"))
    );
    // The rows the page shows: one per record, escaped.
    let html = body["html"].as_str().unwrap();
    assert_eq!(html.matches("<tr ").count(), records.len());
    assert!(html.contains("not &lt;that&gt; file") && !html.contains("<that>"), "{html}");
    assert!(
        html.contains(&format!(
            r#"data-kind="outcome" data-seq="{}" data-request="{}" data-result="not run""#,
            find("outcome", d.id)["seq"],
            d.id
        )),
        "{html}"
    );

    // Paged: a small page says where the next starts, and the next goes on from there.
    let r = alice.get(&console, "/api/audit/records?limit=2").await.json();
    assert_eq!(r["records"].as_array().unwrap().len(), 2);
    assert_eq!(r["next"], json!(seqs[1]));
    let r = alice.get(&console, &format!("/api/audit/records?limit=3&before={}", seqs[1])).await.json();
    let page: Vec<u64> = r["records"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(page, seqs[2..5]);
    // An approved call's result is found in the records after its page, too.
    let o = records.iter().position(|r| r["kind"] == "outcome" && r["request_id"] == json!(a.id)).unwrap();
    let r = alice.get(&console, &format!("/api/audit/records?limit=1&before={}", seqs[o - 1])).await.json();
    assert_eq!((&r["records"][0]["kind"], &r["records"][0]["result"]), (&json!("outcome"), &json!("ran")));

    // Bounded: at most 200 a page, whatever is asked.
    gate.register(Tool::builder("free").executor(|_| async { Ok(json!(1)) }).build()).unwrap();
    for _ in 0..110 {
        gate.execute(ToolCall::new("free", json!({})).session("s3")).await;
    }
    for q in ["", "?limit=100000"] {
        let r = alice.get(&console, &format!("/api/audit/records{q}")).await.json();
        assert_eq!(r["records"].as_array().unwrap().len(), 200, "{q}");
        assert!(r["next"].as_u64().is_some(), "{q}");
    }
    assert_eq!(alice.get(&console, "/api/audit/records?limit=nope").await.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_without_a_readable_audit_log_says_so() {
    let (_gate, console, _runs) = world(Gate::builder());
    let alice = Browser::sign_in(&console, "alice").await;
    let r = alice.get(&console, "/api/audit/records").await;
    assert_eq!((r.status, r.json()["configured"].clone(), r.json()["records"].clone()), (200, json!(false), json!([])));
}

/// Wrong keys are in the gate's audit (issue 44): the first for a name from an address in the
/// window, then every 100th, so a guessing attack shows without one record per guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_keys_are_audited() {
    let audit = Arc::new(MemoryAuditSink::default());
    let gate = Gate::builder().tokens(keys()).audit(audit.clone()).build().unwrap();
    let options = ConsoleOptions {
        approver_keys: Some(ApproverKeys::new().add("dana", "dana-has-a-long-key").unwrap()),
        ..ConsoleOptions::default()
    };
    let console = Console::start(gate.clone(), options).unwrap();
    let origin = format!("http://{}", console.local_addr());
    for _ in 0..2 {
        let body = json!({"approver": "dana", "key": "not-the-key-of-dana"}).to_string();
        assert_eq!(http(&console, "POST", "/login", &[("Origin", &origin)], Some(&body)).await.status, 401);
    }
    gate.flush_audit();
    let failed: Vec<String> = audit
        .records()
        .into_iter()
        .filter(|r| r.decision.as_deref() == Some("sign-in-failed"))
        .map(|r| r.reason.unwrap_or_default())
        .collect();
    assert_eq!(failed, ["a wrong key for approver \"dana\" from 127.0.0.1 (1 in the last 5 minutes)"]);
}
