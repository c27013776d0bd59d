//! The routes: pages, the event stream, and the JSON endpoints the page's script calls.

use crate::auth::{self, Hosts, Session, Sessions};
use crate::feed::{Change, Feed, Item, Snapshot, Start};
use crate::{ConsoleOptions, render};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use signoff::display::display_arguments;
use signoff::{Error, ErrorKind, Gate, ResponseDecision, Result, Scope, TokenResponse};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) struct App {
    gate: Gate,
    opts: ConsoleOptions,
    feed: Arc<Feed>,
    sessions: Sessions,
    hosts: Hosts,
    secure: bool,
    shutdown: Option<watch::Receiver<bool>>,
    /// When this console was built (epoch ms). Without a store that keeps used sign-in links
    /// (`Gate::keeps_single_use`), they are remembered in memory only, so a link issued before
    /// then may have been used by an earlier console: it is refused.
    started_at_ms: u64,
}

type Shared = State<Arc<App>>;

pub(crate) fn router(gate: Gate, opts: ConsoleOptions, shutdown: Option<watch::Receiver<bool>>) -> Result<Router> {
    let opts = opts.prepare()?;
    if !gate.can_issue_tokens() {
        return Err(Error::Config(
            "the console needs a gate with token keys (GateBuilder::tokens / token_keys): every decision is submitted as a signed token".into(),
        ));
    }
    let hosts = match &opts.public_origin {
        Some(origin) => {
            let host = origin.split_once("://").map_or(origin.as_str(), |(_, h)| h).trim_end_matches('/');
            Hosts::Only(vec![host.to_owned()])
        }
        None if opts.bind.ip().is_loopback() => Hosts::Loopback,
        None => Hosts::Any,
    };
    let secure = opts.public_origin.as_deref().is_some_and(|o| o.starts_with("https://"));
    let feed = Feed::start(gate.clone(), opts.history);
    let app = Arc::new(App {
        sessions: auth::Sessions::new(opts.session_ttl),
        gate,
        opts,
        feed,
        hosts,
        secure,
        shutdown,
        started_at_ms: signoff::event::now_ms(),
    });
    Ok(Router::new()
        .route("/", get(index))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/events", get(events))
        .route("/audit", get(audit_page))
        .route("/api/audit", get(audit_json))
        .route("/api/audit/records", get(audit_records))
        .route("/api/decide", post(decide))
        .route("/api/check", post(check))
        .route("/assets/console.js", get(|| asset("text/javascript", include_str!("../assets/console.js"))))
        .route("/assets/login.js", get(|| asset("text/javascript", include_str!("../assets/login.js"))))
        .route("/assets/audit.js", get(|| asset("text/javascript", include_str!("../assets/audit.js"))))
        .route("/assets/console.css", get(|| asset("text/css", include_str!("../assets/console.css"))))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app))
}

/// Every response: the Host check first, then the security headers.
async fn guard(State(app): Shared, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    if !app.hosts.allows(host) {
        return (StatusCode::MISDIRECTED_REQUEST, "this console does not answer that host name").into_response();
    }
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    res
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// How long a client may take to send a request's body once its head has arrived: a client that
/// trickles a body would otherwise hold one of the server's connections for as long as it likes.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request body read (a decision with edited arguments is the largest there is).
const MAX_BODY: usize = 2 << 20;

/// A request's body, within [`BODY_READ_TIMEOUT`] and [`MAX_BODY`].
async fn read_body(body: axum::body::Body) -> std::result::Result<axum::body::Bytes, Response> {
    match tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            Err(problem(StatusCode::BAD_REQUEST, "malformed", format!("request body: {e} (at most {MAX_BODY} bytes)")))
        }
        Err(_) => Err(problem(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!("the request body did not arrive within {} s", BODY_READ_TIMEOUT.as_secs()),
        )),
    }
}

/// Strict JSON (a repeated key is refused), then the body's shape (an unknown field is refused).
fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let v = signoff::json::from_slice(bytes, "request body")?;
    serde_json::from_value(v).map_err(|e| Error::Malformed(format!("request body: {e}")))
}

fn problem(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    (status, Json(json!({"kind": kind, "message": message.into()}))).into_response()
}

fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotPending
        | ErrorKind::AlreadyUsed
        | ErrorKind::AlreadyResolved
        | ErrorKind::UnknownRequest
        | ErrorKind::Mismatch => StatusCode::CONFLICT,
        ErrorKind::Expired | ErrorKind::TokenExpired => StatusCode::GONE,
        ErrorKind::Unauthorized | ErrorKind::WrongApprover => StatusCode::FORBIDDEN,
        ErrorKind::InvalidArguments | ErrorKind::EditsNotAllowed | ErrorKind::Malformed | ErrorKind::UnknownTool => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        ErrorKind::Closed | ErrorKind::Store | ErrorKind::Io => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn error_response(e: &Error) -> Response {
    problem(status_of(e.kind()), e.kind().as_str(), e.to_string())
}

/// Why a state-changing request was refused before it was looked at.
struct Refused(StatusCode, &'static str, &'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        problem(self.0, self.1, self.2)
    }
}

const CROSS_SITE: Refused = Refused(StatusCode::FORBIDDEN, "cross_site", "cross-site requests are refused");

/// The header that carries the session's page key ([`Session::key`]).
const KEY_HEADER: &str = "x-signoff-key";

/// The signed-in session behind a request that reads or changes anything: a live session cookie
/// *and* that session's page key. The cookie alone is not enough: browsers send it to every
/// server on the same host, whatever the port, while the key lives in this origin's storage.
fn signed_in(app: &App, headers: &HeaderMap) -> std::result::Result<Session, Refused> {
    if !auth::same_origin(headers, app.opts.public_origin.as_deref()) {
        return Err(CROSS_SITE);
    }
    let session = app.sessions.get(headers).ok_or(Refused(StatusCode::UNAUTHORIZED, "signed_out", "sign in first"))?;
    let sent = headers.get(KEY_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !auth::constant_time_eq(sent.as_bytes(), session.key.as_bytes()) {
        return Err(Refused(
            StatusCode::UNAUTHORIZED,
            "key",
            "missing or wrong page key (the session cookie alone opens nothing): sign in again",
        ));
    }
    Ok(session)
}

/// The page: a shell without data. Its script reads the page key from this origin's storage
/// and fetches everything else, so a request with the cookie alone learns nothing.
async fn index(State(app): Shared, headers: HeaderMap) -> Response {
    if app.sessions.get(&headers).is_none() {
        return Redirect::to("login").into_response();
    }
    Html(render::page(&app.opts.title)).into_response()
}

async fn login_page(State(app): Shared) -> Response {
    Html(render::login_page(&app.opts.title, app.opts.approver_keys.is_some(), None)).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    token: Option<String>,
    approver: Option<String>,
    key: Option<String>,
}

async fn login(
    State(app): Shared,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // The client's address: `Console` serves with it; a router mounted elsewhere may not.
    let source = peer.map(|axum::Extension(axum::extract::ConnectInfo(a))| a.ip());
    // Login CSRF: only the console's own page may sign a browser in.
    if !auth::same_origin(&headers, app.opts.public_origin.as_deref()) {
        return CROSS_SITE.into_response();
    }
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let body: LoginBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return problem(StatusCode::BAD_REQUEST, "malformed", format!("sign-in body: {e}")),
    };
    let approver = match (body.token, body.approver, body.key) {
        (Some(token), None, None) => match app.gate.verify_sign_in(&token) {
            // Without a store that keeps used links, this console knows only the links used since
            // it started: one from before (a restart, or another console sharing the keys) may
            // have been used already.
            Ok(claims) if claims.issued_at_ms < app.started_at_ms && !app.gate.keeps_single_use() => {
                return problem(
                    StatusCode::UNAUTHORIZED,
                    "token_expired",
                    "this sign-in link was issued before the console (re)started: ask for a new one",
                );
            }
            Ok(_) => {
                // Used up in the gate's store too, where it keeps them (a commit, a round trip).
                let gate = app.gate.clone();
                let used = tokio::task::spawn_blocking(move || gate.use_sign_in(&token))
                    .await
                    .unwrap_or_else(|e| Err(signoff::Error::Store(format!("the sign-in check stopped: {e}"))));
                match used {
                    Ok(claims) => claims.approver,
                    Err(e) if e.kind() == ErrorKind::AlreadyUsed => {
                        return problem(StatusCode::UNAUTHORIZED, "already_used", "this sign-in link was already used");
                    }
                    Err(e) if e.kind() == ErrorKind::TokenExpired => {
                        return problem(StatusCode::UNAUTHORIZED, "token_expired", "this sign-in link has expired");
                    }
                    Err(e) if e.kind() == ErrorKind::Store => {
                        return problem(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "store",
                            format!("the sign-in could not be recorded, so it was refused: {e}"),
                        );
                    }
                    Err(_) => {
                        return problem(StatusCode::UNAUTHORIZED, "bad_link", "this sign-in link is not valid here");
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::TokenExpired => {
                return problem(StatusCode::UNAUTHORIZED, "token_expired", "this sign-in link has expired");
            }
            Err(_) => return problem(StatusCode::UNAUTHORIZED, "bad_link", "this sign-in link is not valid here"),
        },
        (None, Some(approver), Some(key)) => {
            // The right key always signs in: nothing is locked, wrong keys only wait
            // (`Sessions::failed`), so nobody can keep an approver out by guessing.
            let ok = app.opts.approver_keys.as_ref().is_some_and(|k| k.check(&approver, &key));
            if !ok {
                let (delay, n) = app.sessions.failed(&approver, source);
                // The first wrong key of a name from an address in the window, then every 100th:
                // a guessing attack is in the audit without one record per guess.
                if n == 1 || n % 100 == 0 {
                    let from = source.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
                    app.gate.audit_notice(
                        "sign-in-failed",
                        None,
                        format!("a wrong key for approver {approver:?} from {from} ({n} in the last 5 minutes)"),
                    );
                }
                // Slows guessing; the answer does not say which half was wrong.
                tokio::time::sleep(delay).await;
                return problem(StatusCode::UNAUTHORIZED, "bad_key", "unknown approver or wrong key");
            }
            approver
        }
        _ => {
            return problem(StatusCode::BAD_REQUEST, "malformed", "send either a sign-in token or an approver and key");
        }
    };
    // The page key goes to the signing-in page only, in this answer (see `Session::key`).
    let (cookie, key) = app.sessions.start(approver.clone());
    (
        [(header::SET_COOKIE, app.sessions.cookie_header(&cookie, app.secure))],
        Json(json!({"approver": approver, "key": key})),
    )
        .into_response()
}

async fn logout(State(app): Shared, headers: HeaderMap) -> Response {
    if let Err(r) = signed_in(&app, &headers) {
        return r.into_response();
    }
    app.sessions.end(&headers);
    ([(header::SET_COOKIE, app.sessions.clear_cookie_header(app.secure))], Json(json!({}))).into_response()
}

#[derive(Deserialize)]
struct EventsQuery {
    after: Option<String>,
}

fn snapshot_event(feed: &Feed, s: &Snapshot) -> SseEvent {
    SseEvent::default()
        .event("snapshot")
        .id(feed.event_id(s.seq))
        .data(serde_json::to_string(s).unwrap_or_else(|_| "{}".into()))
}

fn item_event(feed: &Feed, item: &Item) -> SseEvent {
    let e = SseEvent::default().id(feed.event_id(item.seq));
    match &item.change {
        Change::Request(c) => e.event("request").data(serde_json::to_string(&**c).unwrap_or_default()),
        Change::Resolved(d) => e.event("resolved").data(serde_json::to_string(&**d).unwrap_or_default()),
        Change::Resync => snapshot_event(feed, &feed.snapshot()),
    }
}

async fn events(State(app): Shared, headers: HeaderMap, Query(q): Query<EventsQuery>) -> Response {
    if let Err(r) = signed_in(&app, &headers) {
        return r.into_response();
    }
    let resume = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_owned).or(q.after);
    let (start, rx) = app.feed.attach(resume.as_deref());
    // A short reconnect delay: a page that lost its connection catches up within half a second.
    let hello = SseEvent::default().retry(Duration::from_millis(500)).comment("signoff");
    let first: Vec<SseEvent> = match start {
        Start::Snapshot(s) => vec![hello, snapshot_event(&app.feed, &s)],
        // The id alone (no data: not dispatched) sets the page's last event id, so a reconnect
        // before any new event still resumes from here.
        Start::Replay { after, items } => std::iter::once(hello.id(app.feed.event_id(after)))
            .chain(items.iter().map(|i| item_event(&app.feed, i)))
            .collect(),
    };
    // The stream lasts as long as its session: signed out or expired, it ends at the next event
    // (before sending it), instead of showing every later request to whoever holds it open.
    let Some(key) = app.sessions.key(&headers) else {
        return problem(StatusCode::UNAUTHORIZED, "signed_out", "sign in first");
    };
    let live = futures_util::stream::unfold((rx, app.clone()), move |(mut rx, app)| async move {
        let ev = match rx.recv().await {
            Ok(item) => item_event(&app.feed, &item),
            // This page fell behind: a fresh snapshot (the page applies it idempotently).
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => snapshot_event(&app.feed, &app.feed.snapshot()),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
        };
        if !app.sessions.is_live(&key) {
            return None;
        }
        Some((ev, (rx, app)))
    });
    let stream = futures_util::stream::iter(first).chain(live).map(Ok::<_, Infallible>);
    let mut shutdown = app.shutdown.clone();
    let stop = async move {
        match shutdown.as_mut() {
            Some(rx) => {
                let _ = rx.wait_for(|stop| *stop).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let stream = stream.take_until(Box::pin(stop));
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    id: Uuid,
    /// The arguments digest the page showed: a request is answered only as it was seen.
    digest: String,
    decision: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

async fn decide(State(app): Shared, headers: HeaderMap, body: axum::body::Body) -> Response {
    let session = match signed_in(&app, &headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let body: DecideBody = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return problem(StatusCode::BAD_REQUEST, "malformed", e.to_string()),
    };
    let decision = match body.decision.as_str() {
        "approve" => ResponseDecision::Approve,
        "deny" => ResponseDecision::Deny,
        other => return problem(StatusCode::BAD_REQUEST, "malformed", format!("unknown decision {other:?}")),
    };
    let scope = match body.scope.as_deref() {
        None | Some("once") => Scope::Once,
        Some("session") => Scope::Session,
        Some(other) => return problem(StatusCode::BAD_REQUEST, "malformed", format!("unknown scope {other:?}")),
    };
    let reason = body.reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
    if decision == ResponseDecision::Deny && reason.is_none() {
        return problem(StatusCode::UNPROCESSABLE_ENTITY, "malformed", "a denial needs a reason");
    }
    let gate = app.gate.clone();
    let approver = session.approver.clone();
    let id = body.id;
    let (digest, arguments) = (body.digest, body.arguments);
    // The gate may wait on its store (PostgreSQL): off the async workers.
    let answered = tokio::task::spawn_blocking(move || -> Result<signoff::Outcome> {
        let request =
            gate.pending_request(&id).ok_or_else(|| Error::NotPending { id, state: "no longer pending".into() })?;
        if request.arguments_digest != digest {
            return Err(Error::Mismatch {
                id,
                field: "arguments_digest",
                expected: request.arguments_digest.to_string(),
                got: digest,
            });
        }
        let token = gate.issue_token(&id, &approver)?;
        let response = TokenResponse { approver: approver.clone(), decision, arguments, scope, reason };
        gate.respond_token(&token, response)
    })
    .await;
    match answered {
        Ok(Ok(outcome)) => Json(json!({"outcome": outcome.as_str(), "scope": scope})).into_response(),
        Ok(Err(e)) if status_of(e.kind()) == StatusCode::CONFLICT || e.kind() == ErrorKind::Expired => {
            lost(&app, id, &e).await
        }
        Ok(Err(e)) => error_response(&e),
        Err(_) => problem(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the decision task failed"),
    }
}

/// A request that someone else (or the deadline) decided first: say who and how, once the
/// console has seen the outcome. The feed follows the gate's bus on this thread and normally
/// has it at once; on a loaded machine it may take a moment (up to 5 s is waited for).
async fn lost(app: &App, id: Uuid, e: &Error) -> Response {
    for _ in 0..500 {
        if let Some(d) = app.feed.decided(&id) {
            let who = d.responder.as_deref().map(|r| format!(" by {r}")).unwrap_or_default();
            let message = format!("already decided{who}: {}", d.outcome);
            return (
                StatusCode::CONFLICT,
                Json(json!({"kind": e.kind().as_str(), "message": message, "outcome": d.outcome, "decided_by": d.responder})),
            )
                .into_response();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    error_response(e)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    id: Uuid,
    arguments: Value,
}

/// Validates an edit as the gate will when it is submitted, and lists what changed.
async fn check(State(app): Shared, headers: HeaderMap, body: axum::body::Body) -> Response {
    if let Err(r) = signed_in(&app, &headers) {
        return r.into_response();
    }
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let body: CheckBody = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return problem(StatusCode::BAD_REQUEST, "malformed", e.to_string()),
    };
    let gate = app.gate.clone();
    let checked = tokio::task::spawn_blocking(move || -> Result<Vec<Value>> {
        gate.check_edit(&body.id, &body.arguments)?;
        let request = gate
            .pending_request(&body.id)
            .ok_or_else(|| Error::NotPending { id: body.id, state: "no longer pending".into() })?;
        let mut changes = Vec::new();
        diff(&request.arguments.value(), &body.arguments, &mut String::new(), &mut changes);
        Ok(changes)
    })
    .await;
    match checked {
        Ok(Ok(changes)) => Json(json!({"ok": true, "changes": changes})).into_response(),
        Ok(Err(e)) => error_response(&e),
        Err(_) => problem(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the check failed"),
    }
}

/// What changed between `a` and `b`, by JSON Pointer, each value shown as the person sees
/// arguments (the core's display escaping).
fn diff(a: &Value, b: &Value, path: &mut String, out: &mut Vec<Value>) {
    let shown = |v: &Value| display_arguments(v);
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => diff(p, q, path, out),
                    (Some(p), None) => out.push(json!({"path": path.clone(), "before": shown(p), "after": null})),
                    (None, Some(q)) => out.push(json!({"path": path.clone(), "before": null, "after": shown(q)})),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                match (x.get(i), y.get(i)) {
                    (Some(p), Some(q)) => diff(p, q, path, out),
                    (Some(p), None) => out.push(json!({"path": path.clone(), "before": shown(p), "after": null})),
                    (None, Some(q)) => out.push(json!({"path": path.clone(), "before": null, "after": shown(q)})),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (p, q) if p != q => out.push(json!({"path": if path.is_empty() { "/".to_owned() } else { path.clone() }, "before": shown(p), "after": shown(q)})),
        _ => {}
    }
}

async fn verify(app: &App) -> Result<Option<signoff::ChainReport>> {
    let gate = app.gate.clone();
    tokio::task::spawn_blocking(move || gate.verify_audit())
        .await
        .unwrap_or_else(|_| Err(Error::Store("the audit check failed".into())))
}

/// The audit chain's verification, with the fragment the audit page shows.
async fn audit_json(State(app): Shared, headers: HeaderMap) -> Response {
    if let Err(r) = signed_in(&app, &headers) {
        return r.into_response();
    }
    let verified = verify(&app).await;
    let html = audit_fragment(&verified);
    match verified {
        Ok(Some(report)) => Json(json!({"configured": true, "report": report, "html": html})).into_response(),
        Ok(None) => Json(json!({"configured": false, "html": html})).into_response(),
        Err(e) => error_response(&e),
    }
}

/// The most records one page of the audit list holds (and its default).
pub(crate) const AUDIT_PAGE: usize = 200;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsQuery {
    /// The page after one whose last record had this `seq` (`next` in the previous answer).
    before: Option<u64>,
    /// At most this many records (1 to [`AUDIT_PAGE`], the default).
    limit: Option<usize>,
}

/// The newest audit records, newest first, at most [`AUDIT_PAGE`] a page: each with when, what,
/// which tool, session and request, who answered, the decision, the call's result (ran, failed,
/// not run, from the records around it) and the reason; with the rows the audit page shows.
async fn audit_records(State(app): Shared, headers: HeaderMap, Query(q): Query<RecordsQuery>) -> Response {
    if let Err(r) = signed_in(&app, &headers) {
        return r.into_response();
    }
    let limit = q.limit.unwrap_or(AUDIT_PAGE).clamp(1, AUDIT_PAGE);
    let gate = app.gate.clone();
    // The gate may wait on its store (PostgreSQL): off the async workers.
    let read = tokio::task::spawn_blocking(move || audit_page_of(&gate, q.before, limit))
        .await
        .unwrap_or_else(|_| Err(Error::Store("the audit read failed".into())));
    match read {
        Ok(Some(page)) => Json(page).into_response(),
        Ok(None) => Json(json!({"configured": false, "records": [], "next": null, "html": ""})).into_response(),
        Err(e) => error_response(&e),
    }
}

/// One page of [`audit_records`]' answer.
fn audit_page_of(gate: &Gate, before: Option<u64>, limit: usize) -> Result<Option<Value>> {
    // One more than the page (is there an older page?).
    let Some(mut page) = gate.recent_audit(before, limit + 1)? else { return Ok(None) };
    let more = page.len() > limit;
    page.truncate(limit);
    let next = if more { page.last().and_then(|r| r.seq) } else { None };
    // For a page after the first, the records just after it too: its calls' results are there.
    let mut around = match before {
        Some(b) => gate.recent_audit(Some(b.saturating_add(AUDIT_PAGE as u64)), AUDIT_PAGE)?.unwrap_or_default(),
        None => Vec::new(),
    };
    around.extend(page.iter().cloned());
    // The client label of each session, from the records that carry the call's metadata.
    let mut clients = std::collections::HashMap::new();
    for r in &around {
        let client = r.metadata.as_ref().and_then(|m| m.get("client")).and_then(Value::as_str).map(str::trim);
        if let (Some(s), Some(c)) = (&r.session_id, client.filter(|c| !c.is_empty())) {
            clients.entry(s.clone()).or_insert_with(|| c.to_owned());
        }
    }
    let pending = |id: &Uuid| gate.pending_request(id).is_some();
    let mut html = String::new();
    let records: Vec<Value> = page
        .iter()
        .map(|r| {
            let result = render::audit_result(r, &around, pending);
            let client = r.session_id.as_ref().and_then(|s| clients.get(s)).map(String::as_str);
            html.push_str(&render::audit_row(r, result, client));
            json!({
                "seq": r.seq,
                "at_ms": r.at_ms,
                "time": render::iso8601(r.at_ms),
                "kind": r.kind,
                "tool": r.tool,
                "session_id": r.session_id,
                "client": client,
                "request_id": r.request_id,
                "responder": r.responder,
                "decision": r.decision,
                "result": result,
                "reason": r.reason,
            })
        })
        .collect();
    Ok(Some(json!({"configured": true, "records": records, "next": next, "html": html})))
}

/// The audit page: a shell whose script fetches [`audit_json`] with the page key.
async fn audit_page(State(app): Shared, headers: HeaderMap) -> Response {
    if app.sessions.get(&headers).is_none() {
        return Redirect::to("login").into_response();
    }
    Html(render::audit_page(&app.opts.title)).into_response()
}

fn audit_fragment(verified: &Result<Option<signoff::ChainReport>>) -> String {
    match verified {
        Ok(Some(r)) => {
            let files = r.files.iter().map(|f| render::text(&f.display().to_string())).collect::<Vec<_>>().join(", ");
            match &r.problem {
                None => format!(
                    r#"<p id="audit-result" class="ok" data-ok="true">Verified: {n} records, hash chain intact{anchor}.</p><p>Head: <code>{head}</code></p><p>Files: {files}</p>"#,
                    n = r.records,
                    anchor = if r.anchor.is_some() {
                        ", up to the head the store anchored"
                    } else {
                        " (no anchor: records cut from the end would not show)"
                    },
                    head = render::html(&r.head),
                ),
                Some(p) => format!(
                    r#"<p id="audit-result" class="bad" data-ok="false">Problem: {kind:?} at record {seq}: {detail}</p><p>{n} records before it verify.</p><p>Files: {files}</p>"#,
                    kind = p.kind,
                    seq = p.seq.map_or("?".into(), |s| s.to_string()),
                    detail = render::text(&p.message),
                    n = r.records,
                ),
            }
        }
        Ok(None) => r#"<p id="audit-result" data-ok="none">This gate keeps no readable audit log.</p>"#.to_owned(),
        Err(e) => format!(r#"<p id="audit-result" class="bad" data-ok="false">{}</p>"#, render::text(&e.to_string())),
    }
}
