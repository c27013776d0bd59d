//! [`McpGate`]: the tools of upstream MCP servers, re-exposed under namespaced names and gated by
//! a signoff [`Gate`].

use crate::config::{Gating, NameSays, ProxyConfig, SEPARATOR, ToolOverride};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ClientRequest, ClientResult, ContentBlock, CustomResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, Implementation, InputRequest, InputRequests, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, RequestStateCodec, RequestStateError, ResultType,
    SealOptions, ServerCapabilities, ServerConfig, ServerRequest, ServerResult, Tool as McpTool,
};
use rmcp::service::{PeerRequestOptions, RequestContext, RunningService};
use rmcp::{ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use signoff::{
    ApproverGuard, Gate, MARKER_META_KEY, MarkerClaims, PendingRequest, Scope, TokenResponse, ToolCall, ToolResult,
    ToolSource, ToolStatus,
};
use std::collections::HashSet;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, Weak};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The key of our one input request in an `InputRequiredResult` and of its answer in the retry's
/// `inputResponses`.
pub const INPUT_KEY: &str = "signoff_approval";

/// The metadata key that routes a gate request back to the MCP call that made it.
const ROUTE_KEY: &str = "signoff_mcp_route";

/// A deferred call's end when it was approved but no retry came before the deadline (its
/// executor's error: the upstream was not contacted).
const NOT_RETRIED: &str = "approved, but the call was not retried before its deadline: the upstream was not contacted";

/// A deferred call's end when it was approved but released without an agreeing retry.
const RELEASED: &str = "approved, but released without an agreeing retry (the client declined or cancelled, or \
                        the tool's definition changed): the upstream was not contacted";

/// The start of an upstream call's error when the request never left this process (its
/// connection had closed, or sending it failed): the call did not run, and the model is told so.
const NOT_DELIVERED: &str = "the upstream server could not be reached, so the call was not delivered";

/// The start of an upstream call's error when sending failed after the request reached the
/// server (an HTTP error status, an unreadable or cut-off answer): whether the tool ran is not
/// known, and the model is told so.
const SENT_UNKNOWN: &str =
    "the upstream server received the call but its answer failed, so whether the tool ran is unknown";

/// The start of an upstream call's error when the server refused it with a JSON-RPC error that
/// comes before anything runs (invalid arguments, an unknown tool or method, a malformed request).
const REFUSED: &str = "the upstream server refused the call";

/// The start of an upstream call's error when the server answered with another JSON-RPC error
/// (an internal error, its own codes): whether the tool ran is not known.
const ERRED_UNKNOWN: &str = "the upstream server answered with an error, so whether the tool ran is unknown";

/// An upstream call's error when the request was handed to the connection, which then closed
/// before the upstream answered: whether the tool ran is not known, and the model is told so.
const OUTCOME_UNKNOWN: &str = "the upstream server went away during the call (its connection closed before it answered), so whether the \
     tool ran is unknown";

/// The start of an upstream call's error when the upstream did not answer within its
/// `call_timeout_ms`: the proxy stopped waiting and sent it `notifications/cancelled`; whether
/// the tool ran (in full or in part) is not known.
const TIMED_OUT_UNKNOWN: &str = "the upstream server did not answer in time, so the call was cancelled there and whether the tool \
     ran is unknown";

/// The start of an upstream call's error when the client cancelled the call while the upstream
/// had it: the upstream was sent `notifications/cancelled`; whether the tool ran is not known.
const CANCELLED_UNKNOWN: &str = "the client cancelled the call while the upstream server had it, so the call was cancelled there \
     and whether the tool ran is unknown";

/// An approved call's error when the upstream changed the tool's definition (or stopped offering
/// it) after the person was asked: what was shown is not what would run, so nothing is sent.
const DEFINITION_CHANGED: &str = "the upstream server changed the tool's definition (or stopped offering it) after approval was \
     asked for it, so what was approved is not what would run: the upstream was not contacted";

/// An approved call's end when its upstream announced a change to its tools that could not be
/// listed before the call would have run: what would run is not known.
const DEFINITION_UNKNOWN: &str = "the upstream server announced a change to its tools while this call waited for approval, \
     and they could not be listed again, so what would run is not known: the upstream was not contacted";

/// What the model reads of a call asked about inline (an `elicitation/create` inside the call)
/// whose request was cancelled because the upstream changed the tool's definition, stopped
/// offering it, or could not be listed again, while the person was being asked.
const VOIDED_WHILE_ASKED: &str = "the upstream server changed its tools while approval was being asked (the tool's definition \
     changed, it is no longer offered, or it could not be listed again), so the request was cancelled and the upstream \
     was not contacted";

/// The start-up warning of a proxy that has no approval page and no shared store.
pub const NOWHERE_ELSE: &str = "no \"console\", \"approval_url\" or shared store (gate.store_url) is configured, so \
     only clients that show approval forms (elicitation) can approve; calls from any other client are refused. \
     Add \"console\": {\"approver_keys_file\": \"...\"} to the configuration to approve them in a browser";

/// The same, in the words the model reads.
const NOWHERE_ELSE_TOLD: &str = "the signoff proxy has no approval console configured where a person could approve it";

/// What an unknown outcome's words for the model end with.
const CHECK_FIRST: &str = "Do not repeat it blindly: first check whether it took effect.";

/// An upstream server's client: a name (its tools' namespace), a running rmcp client, and how
/// long an approved call waits for its answer.
pub struct Upstream {
    /// The namespace of its tools (`<name>__<tool>`).
    pub name: String,
    /// The connected client (`UpstreamClient::default().serve(transport)`).
    pub client: RunningService<RoleClient, UpstreamClient>,
    /// How long an approved call waits for the server's answer before it is cancelled there
    /// (`notifications/cancelled`) and the client told that whether the tool ran is unknown.
    pub call_timeout: Duration,
    /// How long listing its tools (`tools/list`, every page) may take, at start and after it
    /// announces a change: at start, a listing that takes longer is an error naming the server;
    /// later, what it offers is then unknown (see [`McpGate`]). From 1 ms to an hour (checked by
    /// [`McpGate::new`]); default 10 seconds.
    pub list_timeout: Duration,
    /// Take the server's tool annotations as facts ([`UpstreamConfig::trust_annotations`](crate::UpstreamConfig::trust_annotations)):
    /// default false, so they may raise a tool's risk but never lower it ([`Gating::decide`]).
    pub trust_annotations: bool,
}

impl Upstream {
    /// An upstream whose calls wait [`DEFAULT_CALL_TIMEOUT_MS`](crate::config::DEFAULT_CALL_TIMEOUT_MS)
    /// for an answer.
    pub fn new(name: impl Into<String>, client: RunningService<RoleClient, UpstreamClient>) -> Upstream {
        let call_timeout = Duration::from_millis(crate::config::DEFAULT_CALL_TIMEOUT_MS);
        Upstream { name: name.into(), client, call_timeout, list_timeout: LIST_TIMEOUT, trust_annotations: false }
    }

    /// Sets how long an approved call waits for the server's answer.
    pub fn call_timeout(mut self, limit: Duration) -> Upstream {
        self.call_timeout = limit;
        self
    }

    /// Takes the server's tool annotations as facts ([`Upstream::trust_annotations`]).
    pub fn trust_annotations(mut self, trust: bool) -> Upstream {
        self.trust_annotations = trust;
        self
    }

    /// Sets how long listing the server's tools may take ([`Upstream::list_timeout`]).
    pub fn list_timeout(mut self, limit: Duration) -> Upstream {
        self.list_timeout = limit;
        self
    }
}

/// The client side of an upstream connection: notes `notifications/tools/list_changed`, so the
/// gate lists that server's tools again before the next call and compares their definitions
/// with the pinned ones.
#[derive(Clone, Default)]
pub struct UpstreamClient {
    /// `notifications/tools/list_changed` received so far.
    changes: Arc<AtomicU64>,
}

impl rmcp::ClientHandler for UpstreamClient {
    async fn on_tool_list_changed(&self, _cx: rmcp::service::NotificationContext<RoleClient>) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }
}

/// How long listing an upstream's tools may take by default ([`Upstream::list_timeout`]): at
/// start, longer is an error; after an announced change, what it offers is then taken as unknown
/// (every approval of its tools starts over, its tools are asked about, and it is listed again at
/// the next call).
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest [`Upstream::list_timeout`] accepted.
const MAX_LIST_TIMEOUT: Duration = Duration::from_secs(3600);

/// The most pages one listing of an upstream's tools may have: a server whose pages do not end
/// (every page naming a next one) fails to list rather than growing one list for ever.
const MAX_LIST_PAGES: usize = 1_000;

/// The most tools one upstream may list.
const MAX_LISTED_TOOLS: usize = 10_000;

/// The reason a call is asked about (and the note on its form) while its upstream has an
/// announced change to its tools that could not be listed: what it offers now is not known, so
/// even a tool whose last definition needed no approval is asked about.
const UNKNOWN_REASON: &str = "the upstream server announced a change to its tools that could not be listed, so the \
     tool's definition could not be read again: it is shown as last listed, and what runs may differ";

/// Lists an upstream's tools, every page, within `limit` and at most [`MAX_LIST_PAGES`] pages of
/// [`MAX_LISTED_TOOLS`] tools in all. The error says why (not the server: the caller names it).
async fn list_bounded(peer: &Peer<RoleClient>, limit: Duration) -> Result<Vec<McpTool>, String> {
    let listing = async {
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_LIST_PAGES {
            let page = peer
                .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                .await
                .map_err(|e| e.to_string())?;
            tools.extend(page.tools);
            if tools.len() > MAX_LISTED_TOOLS {
                return Err(format!("it lists more than {MAX_LISTED_TOOLS} tools, the most one upstream may offer"));
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(format!("its listing goes on past {MAX_LIST_PAGES} pages, the most one listing may have"))
    };
    tokio::time::timeout(limit, listing).await.unwrap_or_else(|_| Err(format!("no answer within {}", shown(limit))))
}

/// A limit as said in messages: whole seconds as such, anything else in milliseconds.
pub(crate) fn shown(limit: Duration) -> String {
    match limit.as_millis() {
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{ms} ms"),
    }
}

struct Up {
    name: String,
    client: RunningService<RoleClient, UpstreamClient>,
    /// How long an approved call waits for its answer ([`Upstream::call_timeout`]).
    call_timeout: Duration,
    /// How long listing its tools may take ([`Upstream::list_timeout`]).
    list_timeout: Duration,
    /// Its annotations are facts ([`Upstream::trust_annotations`]).
    trust_annotations: bool,
    /// Changes announced (`UpstreamClient::changes`), and how many of them the last listing saw.
    changes: Arc<AtomicU64>,
    listed: Arc<AtomicU64>,
    /// Held while listing: a call that comes meanwhile waits for the listing rather than going on
    /// with what may be stale (an old session grant for a changed tool).
    listing: tokio::sync::Mutex<()>,
    /// After a listing failed (its tools' approvals voided): not listed again before this, so
    /// calls queued behind a stalled upstream do not wait its `list_timeout` each in turn.
    retry_at: Mutex<Option<tokio::time::Instant>>,
}

#[derive(Clone)]
struct Exposed {
    server: String,
    upstream_tool: String,
    /// The definition the client sees (namespaced name).
    def: McpTool,
    /// `sha256:<hex>` of the upstream's definition (name, description, schema, annotations) as
    /// listed at start; bound into every `requestState`.
    def_hash: String,
    gating: Gating,
    /// Set when the upstream changed this definition or stopped offering the tool: the executor
    /// registered with it then refuses to run (a request asked about it is not what would run).
    stale: Arc<AtomicBool>,
}

/// Request id → the signal that the identical retry of an approved pending-elsewhere call came
/// (carrying the retry's cancellation), and the request's deadline (epoch ms).
type Deferred = Arc<Mutex<HashMap<Uuid, (oneshot::Receiver<CancellationToken>, u64)>>>;

/// A call waiting for its request: where to hand it, and (pending elsewhere) the signal its
/// executor waits for before running.
struct RouteEntry {
    tx: oneshot::Sender<PendingRequest>,
    defer: Option<oneshot::Receiver<CancellationToken>>,
}

type Routes = Arc<Mutex<HashMap<Uuid, RouteEntry>>>;

/// A call parked between the two rounds of a 2026-07-28 approval.
struct Parked {
    task: JoinHandle<ToolResult>,
    /// URL mode: the signal that lets the call run once approved (on the retry only).
    go: Option<oneshot::Sender<CancellationToken>>,
    pending: PendingRequest,
}

/// A deferred call's task, its request (held: dropping it unanswered fails the approval) and the
/// signal that lets it run (with the cancellation of the call that lets it: its run is cancelled
/// upstream when that call is).
type Started = (JoinHandle<ToolResult>, PendingRequest, oneshot::Sender<CancellationToken>);

/// A call that could not be asked, pending in the gate until someone approves it elsewhere.
struct Elsewhere {
    request_id: Uuid,
    task: JoinHandle<ToolResult>,
    go: Option<oneshot::Sender<CancellationToken>>,
    _pending: PendingRequest,
}

/// A call asking its client inline (an `elicitation/create` inside the call, form or URL mode),
/// by its request's id: voided (its request cancelled) when its tool's definition changes.
struct Asking {
    tool: String,
    voided: CancellationToken,
}

tokio::task_local! {
    /// The downstream `tools/call` whose approved run is polled in place (the executor reads it
    /// when it starts).
    static DOWNSTREAM: Downstream;
}

/// What an executor learns of the downstream call that runs it.
#[derive(Clone)]
struct Downstream {
    /// The call's cancellation: a client that cancels the call cancels it upstream.
    ct: CancellationToken,
    /// The changes each upstream had announced when the call came ([`Who::announced`]).
    announced: Arc<[u64]>,
    /// The call's upstream had an announced change that could not be listed ([`Who::unknown`]):
    /// the gate asks about the call whatever its tool's gating ([`UNKNOWN_REASON`]).
    unknown: bool,
}

impl Downstream {
    fn of(ct: &CancellationToken, who: &Who) -> Downstream {
        Downstream { ct: ct.clone(), announced: who.announced.clone(), unknown: who.unknown }
    }
}

pub(crate) struct Inner {
    gate: Gate,
    /// By the name the client sees; replaced when an upstream's definition changes.
    tools: RwLock<BTreeMap<String, Exposed>>,
    overrides: BTreeMap<String, ToolOverride>,
    codec: RequestStateCodec,
    routes: Routes,
    parked: Mutex<HashMap<Uuid, Parked>>,
    elsewhere: Mutex<HashMap<(String, String, String), Elsewhere>>,
    asking: Mutex<HashMap<Uuid, Asking>>,
    deferred: Deferred,
    /// The approval page URL-mode elicitations point at (`<page>#request-<id>`).
    approval_page: std::sync::OnceLock<String>,
    /// A console this gate started for its approval page, kept running while the gate lives.
    console: Mutex<Option<signoff_console::Console>>,
    /// Nothing but the client can approve ([`NOWHERE_ELSE`]): a call from a client that cannot be
    /// asked is refused at once instead of left pending where nobody can decide it.
    nowhere_else: AtomicBool,
    _approver: ApproverGuard,
    upstreams: Vec<Up>,
    /// This gate, for the executors of its tools (set once built): an approved call whose upstream
    /// announced a change not listed yet lists it before running ([`Listing::settle`]).
    this: Arc<OnceLock<Weak<Inner>>>,
}

/// The MCP gate: an rmcp [`ServerHandler`] whose tools are those of its upstream servers, each
/// registered in a signoff [`Gate`] and asked about through the client (see the crate's
/// documentation). Cheap to clone.
#[derive(Clone)]
pub struct McpGate {
    pub(crate) inner: Arc<Inner>,
    /// The gate session this connection's calls belong to (session grants never cross it).
    pub(crate) session: String,
    /// Served over Streamable HTTP: each call's session is chosen from its request
    /// ([`crate::http`]), not fixed by the connection.
    pub(crate) per_request: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The start's error for a configured tool name that no upstream offers: with the name it most
/// likely misspells, or the tools of the server it names.
fn unmatched_override(name: &str, tools: &BTreeMap<String, Exposed>, left_out: &HashSet<String>) -> String {
    if left_out.contains(name) {
        return format!(
            "tools: {name:?} is configured, but its upstream's definition of it was refused (see above), so it is \
             not offered"
        );
    }
    let offered: Vec<&str> = tools.keys().map(String::as_str).collect();
    if let Some(close) = signoff::config::nearest(name, &offered) {
        return format!("tools: {name:?} names no tool an upstream offers (did you mean {close:?}?)");
    }
    let server = name.split_once(SEPARATOR).map_or(name, |(s, _)| s);
    let prefix = format!("{server}{SEPARATOR}");
    let same: Vec<&str> = offered.iter().copied().filter(|t| t.starts_with(&prefix)).collect();
    if same.is_empty() {
        format!("tools: {name:?} names no tool an upstream offers ({server:?} offers none)")
    } else {
        format!("tools: {name:?} names no tool an upstream offers; {server:?} offers: {}", same.join(", "))
    }
}

/// What a person answered through the client.
enum Verdict {
    Approve(Scope),
    Deny(Option<String>),
}

impl McpGate {
    /// Lists the upstreams' tools and registers each in `gate` as `<server>__<tool>`, gated by its
    /// annotations and `overrides` ([`Gating::decide`]). The gate must have token keys (for the
    /// 2026-07-28 era's `requestState`).
    pub async fn new(
        gate: Gate,
        upstreams: Vec<Upstream>,
        overrides: &BTreeMap<String, ToolOverride>,
    ) -> Result<McpGate, String> {
        if !gate.can_issue_tokens() {
            return Err("the gate needs token keys (GateBuilder::tokens)".into());
        }
        let deferred: Deferred = Default::default();
        let this: Arc<OnceLock<Weak<Inner>>> = Default::default();
        let mut tools = BTreeMap::new();
        let mut left_out = HashSet::new();
        let before = last_pins(&gate);
        let mut clients = Vec::new();
        for up in upstreams {
            if up.list_timeout.is_zero() || up.list_timeout > MAX_LIST_TIMEOUT {
                return Err(format!(
                    "upstream {:?}: list timeout {:?}: give how long listing its tools may take, from 1 ms to {}",
                    up.name,
                    up.list_timeout,
                    shown(MAX_LIST_TIMEOUT)
                ));
            }
            // Changes announced from here on are listed again before a call runs.
            let changes = up.client.service().changes.clone();
            let listed = Arc::new(AtomicU64::new(changes.load(Ordering::SeqCst)));
            let listing = Listing {
                upstream: clients.len(),
                announced: changes.clone(),
                listed: listed.clone(),
                gate: this.clone(),
            };
            // Bounded: a server that never answers, lists without end, or answers what rmcp cannot
            // read (and drops) is an error naming it, not a proxy that never starts.
            let defs = list_bounded(up.client.peer(), up.list_timeout)
                .await
                .map_err(|e| format!("upstream {:?}: tools/list: {e}", up.name))?;
            let via = Via {
                peer: up.client.peer().clone(),
                call_timeout: up.call_timeout,
                trust_annotations: up.trust_annotations,
                deferred: deferred.clone(),
                listing,
            };
            for def in defs {
                // A tool that cannot be offered safely is left out (and said so), not the server.
                let ex = match expose(&gate, &up.name, &def, overrides, &via) {
                    Ok(ex) => ex,
                    Err(e) => {
                        signoff::report!("signoff mcp: {}: a tool is not offered: {e}", up.name);
                        left_out.insert(format!("{}{SEPARATOR}{}", up.name, def.name));
                        continue;
                    }
                };
                if before.get(&*ex.def.name) != Some(&ex.def_hash) {
                    pinned(&gate, &up.name, &def, &ex.def_hash);
                }
                if let Some(other) = tools.insert(ex.def.name.to_string(), ex) {
                    return Err(format!(
                        "{}: two tools have this name ({:?} of {:?} and one of {:?}); one would stand for the other",
                        other.def.name, other.upstream_tool, other.server, up.name
                    ));
                }
            }
            clients.push(Up {
                name: up.name,
                client: up.client,
                call_timeout: up.call_timeout,
                list_timeout: up.list_timeout,
                trust_annotations: up.trust_annotations,
                changes,
                listed,
                listing: Default::default(),
                retry_at: Mutex::new(None),
            });
        }
        // A name that matches nothing is a typo (or a tool the upstream no longer offers): refused,
        // never a warning, since the tool it meant would then run as if unconfigured.
        if let Some(name) = overrides.keys().find(|n| !tools.contains_key(*n)) {
            return Err(unmatched_override(name, &tools, &left_out));
        }
        let routes: Routes = Default::default();
        let (r, d) = (routes.clone(), deferred.clone());
        // Requests made by our calls go back to the call that made them (by a nonce in metadata);
        // anything else is left to the gate's other approvers (a console, a token link). Called
        // where the request is published, before any answer can reach the waiting call, so a
        // deferred run is in place before anyone can approve.
        let approver = gate.on_request_inline(move |p: PendingRequest| {
            let route = p.request().metadata.get(ROUTE_KEY).and_then(Value::as_str).and_then(|s| s.parse().ok());
            if let Some(entry) = route.and_then(|id: Uuid| lock(&r).remove(&id)) {
                if let Some(wait) = entry.defer {
                    lock(&d).insert(p.request().id, (wait, p.request().deadline_ms));
                }
                let _ = entry.tx.send(p);
            }
        });
        let key: [u8; 32] = rand::random();
        let codec = RequestStateCodec::try_new(key.to_vec()).map_err(|e| e.to_string())?;
        let session = format!("mcp-{}", Uuid::new_v4());
        let inner = Inner {
            gate,
            tools: RwLock::new(tools),
            overrides: overrides.clone(),
            codec,
            routes,
            parked: Default::default(),
            elsewhere: Default::default(),
            asking: Default::default(),
            deferred,
            approval_page: Default::default(),
            console: Default::default(),
            nowhere_else: AtomicBool::new(false),
            _approver: approver,
            upstreams: clients,
            this: this.clone(),
        };
        let inner = Arc::new(inner);
        let _ = this.set(Arc::downgrade(&inner));
        Ok(McpGate { inner, session, per_request: false })
    }

    /// Starts the configured upstreams as child processes (or connects to them over Streamable
    /// HTTP) and gates their tools with a gate built from the configuration.
    pub async fn from_config(config: &ProxyConfig) -> Result<McpGate, String> {
        let gate = build_gate(config)?;
        let mut upstreams = Vec::new();
        for u in &config.upstreams {
            // A child process over stdio or a Streamable HTTP endpoint.
            let client = crate::http::connect_upstream(u).await?;
            upstreams.push(
                Upstream::new(u.name.clone(), client)
                    .call_timeout(u.call_timeout())
                    .trust_annotations(u.trust_annotations),
            );
        }
        let mcp = McpGate::new(gate, upstreams, &config.tools).await?;
        if let Some(options) = &config.console {
            let mut options = signoff_console::ConsoleOptions::from_json(options, signoff::Naming::Snake)
                .map_err(|e| format!("console: {e}"))?;
            // A second proxy with the same configuration (two editor windows) gets a console of
            // its own on a free port, said below, instead of dying after its upstreams started.
            let wanted = options.bind;
            let taken = wanted.port() != 0
                && std::net::TcpListener::bind(wanted).is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse);
            if taken {
                options.bind.set_port(0);
            }
            let console =
                signoff_console::Console::start(mcp.gate().clone(), options).map_err(|e| format!("console: {e}"))?;
            if taken {
                signoff::report!(
                    "signoff mcp: {wanted} is in use (another proxy's console?), so this proxy's approval console \
                     is at {} instead",
                    console.url()
                );
            } else {
                signoff::report!("signoff mcp: approval console at {}", console.url());
            }
            // An explicit `approval_url` wins over the console's own URL.
            mcp.set_approval_page(config.approval_url.as_deref().unwrap_or(console.url()));
            *lock(&mcp.inner.console) = Some(console);
        }
        if let Some(page) = &config.approval_url {
            mcp.set_approval_page(page.clone());
        }
        Ok(mcp)
    }

    /// The signoff gate behind it (to attach a console, issue tokens, read the audit).
    pub fn gate(&self) -> &Gate {
        &self.inner.gate
    }

    /// A handle for a new downstream connection: its own gate session.
    pub fn connection(&self) -> McpGate {
        let session = format!("mcp-{}", Uuid::new_v4());
        McpGate { inner: self.inner.clone(), session, per_request: false }
    }

    fn exposed(&self, name: &str) -> Option<Exposed> {
        self.inner.tools.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Lists again the tools of every upstream that announced a change, and compares each
    /// definition with the one pinned: a changed tool is registered anew, its session grants are
    /// revoked in every session (audited), and calls pending elsewhere for it or parked between the
    /// two rounds of a 2026-07-28 approval are cancelled at once, so the next call asks afresh; a
    /// `requestState` issued for the old definition no longer opens.
    ///
    /// One listing per upstream at a time, and a call waits for one in progress. The upstreams
    /// are listed at the same time, so a slow one delays only what waits for it. A listing that
    /// fails or takes longer than its upstream's `list_timeout` leaves what the upstream offers
    /// unknown: every approval of its tools is voided as for a changed definition, its tools are
    /// asked about until it is listed again ([`McpGate::definition_unknown`]), and the first call
    /// after another `list_timeout` lists again.
    async fn refresh(&self) {
        let changed: Vec<usize> = (0..self.inner.upstreams.len())
            .filter(|&i| {
                let up = &self.inner.upstreams[i];
                up.changes.load(Ordering::SeqCst) != up.listed.load(Ordering::SeqCst)
            })
            .collect();
        if let [one] = changed[..] {
            return self.refresh_upstream(&self.inner.upstreams[one]).await;
        }
        let mut listings = tokio::task::JoinSet::new();
        for i in changed {
            let gate = self.clone();
            listings.spawn(async move { gate.refresh_upstream(&gate.inner.upstreams[i]).await });
        }
        while listings.join_next().await.is_some() {}
    }

    /// The upstream whose tools are `<server>__...`.
    fn upstream(&self, server: &str) -> Option<&Up> {
        self.inner.upstreams.iter().find(|u| u.name == server)
    }

    /// Whether an upstream announced a change to its tools that has not been listed (its listing
    /// failed, or the change came after it): what it offers now is not known, and a call to one
    /// of its tools is asked about, with [`UNKNOWN_REASON`], even when the tool's last definition
    /// needed no approval.
    fn definition_unknown(up: &Up) -> bool {
        up.changes.load(Ordering::SeqCst) > up.listed.load(Ordering::SeqCst)
    }

    /// [`refresh`](Self::refresh) for one upstream.
    async fn refresh_upstream(&self, up: &Up) {
        if up.changes.load(Ordering::SeqCst) == up.listed.load(Ordering::SeqCst) {
            return;
        }
        let failed_lately = || lock(&up.retry_at).is_some_and(|at| tokio::time::Instant::now() < at);
        if failed_lately() {
            return;
        }
        let _listing = up.listing.lock().await;
        let target = up.changes.load(Ordering::SeqCst);
        if target == up.listed.load(Ordering::SeqCst) || failed_lately() {
            return;
        }
        let listed = match list_bounded(up.client.peer(), up.list_timeout).await {
            Ok(l) => l,
            Err(why) => {
                signoff::report!(
                    "signoff mcp: {}: tools/list after a change: {why}; approvals of its tools start over, and its \
                     tools are asked about until it is listed",
                    up.name
                );
                *lock(&up.retry_at) = Some(tokio::time::Instant::now() + up.list_timeout);
                let names: Vec<String> = {
                    let tools = self.inner.tools.read().unwrap_or_else(|e| e.into_inner());
                    tools.iter().filter(|(_, t)| t.server == up.name).map(|(n, _)| n.clone()).collect()
                };
                for name in names {
                    self.inner.gate.audit_notice(
                        "definition-unknown",
                        Some(&name),
                        format!(
                            "upstream {:?} announced a change and could not be listed ({why}): session grants \
                             revoked, calls asking inline, pending elsewhere or parked between two rounds \
                             cancelled",
                            up.name
                        ),
                    );
                    self.void(&name);
                }
                return;
            }
        };
        let mut seen = HashSet::new();
        for def in listed {
            let name = format!("{}{SEPARATOR}{}", up.name, def.name);
            seen.insert(name.clone());
            let old = self.exposed(&name);
            let hash = definition_hash(&def);
            if old.as_ref().is_some_and(|o| o.def_hash == hash) {
                continue;
            }
            // Before anything else: a call approved for the old definition runs nothing now.
            if let Some(o) = &old {
                o.stale.store(true, Ordering::SeqCst);
            }
            let via = Via {
                peer: up.client.peer().clone(),
                call_timeout: up.call_timeout,
                trust_annotations: up.trust_annotations,
                deferred: self.inner.deferred.clone(),
                listing: Listing {
                    upstream: self.inner.upstreams.iter().position(|u| std::ptr::eq(u, up)).unwrap_or(usize::MAX),
                    announced: up.changes.clone(),
                    listed: up.listed.clone(),
                    gate: self.inner.this.clone(),
                },
            };
            match expose(&self.inner.gate, &up.name, &def, &self.inner.overrides, &via) {
                Ok(ex) => {
                    self.inner.tools.write().unwrap_or_else(|e| e.into_inner()).insert(name.clone(), ex);
                }
                Err(e) => {
                    // Not offered (the old definition is no longer what would run).
                    signoff::report!("signoff mcp: {name}: {e}; it is not offered");
                    self.inner.tools.write().unwrap_or_else(|e| e.into_inner()).remove(&name);
                    self.inner.gate.unregister(&name);
                }
            }
            match old.as_ref().map(|o| &o.def_hash) {
                Some(old) => {
                    signoff::report!(
                        "signoff mcp: {name}: the upstream changed its definition; approvals for it start over"
                    );
                    self.inner.gate.audit_notice(
                        "definition-changed",
                        Some(&name),
                        format!(
                            "upstream {:?} changed the definition of {:?} from {old} to {hash}: session grants \
                             revoked, calls asking inline, pending elsewhere or parked between two rounds \
                             cancelled, request states for the old definition void",
                            up.name, def.name
                        ),
                    );
                    self.void(&name);
                }
                None => pinned(&self.inner.gate, &up.name, &def, &hash),
            }
        }
        let gone: Vec<String> = {
            let tools = self.inner.tools.read().unwrap_or_else(|e| e.into_inner());
            tools.iter().filter(|(n, t)| t.server == up.name && !seen.contains(*n)).map(|(n, _)| n.clone()).collect()
        };
        for name in gone {
            signoff::report!("signoff mcp: {name}: the upstream no longer offers it");
            self.inner.gate.audit_notice(
                "definition-removed",
                Some(&name),
                format!("upstream {:?} no longer offers it; its approvals are void", up.name),
            );
            let removed = self.inner.tools.write().unwrap_or_else(|e| e.into_inner()).remove(&name);
            if let Some(t) = removed {
                t.stale.store(true, Ordering::SeqCst);
            }
            self.inner.gate.unregister(&name);
            self.void(&name);
        }
        up.listed.store(target, Ordering::SeqCst);
        *lock(&up.retry_at) = None;
    }

    /// Voids every approval of a tool: session grants, calls asking their client inline, calls
    /// pending elsewhere and calls parked between the two rounds of a 2026-07-28 approval. Their
    /// requests are cancelled and their runs released (dropping the signal: one approved meanwhile
    /// gives up without running).
    fn void(&self, name: &str) {
        self.inner.gate.revoke_tool_grants(name);
        let asking: Vec<Uuid> = {
            let asking = lock(&self.inner.asking);
            asking
                .iter()
                .filter(|(_, a)| a.tool == name)
                .map(|(id, a)| {
                    a.voided.cancel();
                    *id
                })
                .collect()
        };
        for id in asking {
            self.inner.gate.cancel_request(&id);
        }
        let mut elsewhere = lock(&self.inner.elsewhere);
        let stale: Vec<_> = elsewhere.keys().filter(|k| k.1 == name).cloned().collect();
        for k in stale {
            if let Some(e) = elsewhere.remove(&k) {
                self.inner.gate.cancel_request(&e.request_id);
            }
        }
        drop(elsewhere);
        let parked: Vec<Uuid> = {
            let parked = lock(&self.inner.parked);
            parked.iter().filter(|(_, p)| &*p.pending.request().tool == name).map(|(id, _)| *id).collect()
        };
        for id in parked {
            self.unpark(&id);
        }
    }

    /// Calls deferred to an identical retry whose run has not taken its signal yet (for tests:
    /// an entry stays only while its request can still run).
    #[doc(hidden)]
    pub fn deferred_count(&self) -> usize {
        lock(&self.inner.deferred).len()
    }

    /// How a tool (by the name the client sees) is gated.
    pub fn gating(&self, name: &str) -> Option<Gating> {
        self.exposed(name).map(|t| t.gating)
    }

    fn route(&self, defer: Option<oneshot::Receiver<CancellationToken>>) -> (Route, oneshot::Receiver<PendingRequest>) {
        let (tx, rx) = oneshot::channel();
        let id = Uuid::new_v4();
        lock(&self.inner.routes).insert(id, RouteEntry { tx, defer });
        (Route { id, routes: self.inner.routes.clone() }, rx)
    }

    fn call(&self, t: &Exposed, args: &Value, who: &Who, route: Option<Uuid>) -> ToolCall {
        let name = t.def.name.as_ref();
        let mut meta = json!({
            "risk": t.gating.shown.to_string(),
            "mcp": {"server": t.server, "tool": t.upstream_tool, "client": who.principal, "era": who.era},
        });
        if let Some(r) = route {
            meta[ROUTE_KEY] = json!(r.to_string());
        }
        if let Some(c) = &who.client {
            meta["client"] = json!(c);
        }
        // The call id reaches the audit: the client's identity and protocol era with every record.
        let call_id = format!("mcp {} {} #{}", who.era, who.principal, who.rpc_id);
        ToolCall::new(name, args.clone()).session(self.session.clone()).metadata(meta).call_id(call_id)
    }

    /// A call approved in process (its approval marker accepted): the request is made and approved
    /// at once by the marker's approver, so the gate's audit, store and authenticator see it like
    /// any approval; the marker's request is named in the request's metadata.
    async fn loopback(
        &self,
        t: &Exposed,
        args: &Value,
        who: &Who,
        claims: MarkerClaims,
        ct: &CancellationToken,
    ) -> ToolResult {
        let (route, rx) = self.route(None);
        let mut call = self.call(t, args, who, Some(route.id));
        call.metadata["loopback"] =
            json!({"request": claims.request_id, "approver": claims.approver, "key": claims.key_id});
        let exec = DOWNSTREAM.scope(Downstream::of(ct, who), self.inner.gate.execute(call));
        let approve = async {
            if let Ok(p) = rx.await
                && let Err(e) = p.approve_with(None, Scope::Once, Some(claims.approver.clone()))
            {
                // E.g. the gate's authenticator does not accept this approver: nothing runs.
                signoff::report!("signoff mcp: the approval marker's approver was refused: {e}");
                self.inner.gate.cancel_request(&p.request().id);
            }
            std::future::pending::<ToolResult>().await
        };
        tokio::select! {
            biased;
            r = exec => r,
            r = approve => r,
        }
    }

    /// Starts a gated call whose tool runs only once `go` is sent (the client's retry), in a task
    /// of its own, and waits until it has published its request. Returns the task, the request
    /// (the handle must be held: dropping it unanswered fails the approval) and `go`; or the
    /// call's result when it ended without a request (not gated after all, refused, closed). Run
    /// at once (a session grant), the run is cancelled upstream when `ct` (this call's) is.
    async fn start_deferred(
        &self,
        t: &Exposed,
        name: &str,
        args: &Value,
        who: &Who,
        ct: &CancellationToken,
    ) -> Result<Started, ToolResult> {
        let (go, wait) = oneshot::channel();
        let (route, rx) = self.route(Some(wait));
        let (gate, deferred) = (self.inner.gate.clone(), self.inner.deferred.clone());
        let call = self.call(t, args, who, Some(route.id));
        let mut task = tokio::spawn(DOWNSTREAM.scope(Downstream::of(ct, who), async move {
            let r = gate.execute(call).await;
            // Denied, timed out or cancelled, its run never took the signal: the entry goes too.
            if let Some(id) = r.request_id {
                lock(&deferred).remove(&id);
            }
            r
        }));
        let p = tokio::select! {
            p = rx => p,
            r = &mut task => return Err(ended(name, r)),
        };
        drop(route);
        match p {
            Ok(p) => Ok((task, p, go)),
            Err(_) => Err(ended(name, task.await)),
        }
    }

    /// Legacy era: `elicitation/create` inside the call.
    async fn ask_legacy(&self, t: &Exposed, args: &Value, who: &Who, cx: &RequestContext<RoleServer>) -> ToolResult {
        let (route, rx) = self.route(None);
        let exec = DOWNSTREAM
            .scope(Downstream::of(&cx.ct, who), self.inner.gate.execute(self.call(t, args, who, Some(route.id))));
        let voided = CancellationToken::new();
        let ask = async {
            if let Ok(p) = rx.await {
                let _asking = self.asking(t, p.request().id, &voided);
                self.elicit(p, who, cx).await;
            }
            std::future::pending::<ToolResult>().await
        };
        let r = tokio::select! {
            biased;
            r = exec => r,
            r = ask => r,
        };
        voided_while_asked(r, &voided)
    }

    /// Notes a call asking its client inline about request `id`, until the returned guard drops:
    /// [`McpGate::void`] then cancels its request (and `voided`) when the tool's definition
    /// changes. A definition that changed before it was noted is voided at once.
    fn asking(&self, t: &Exposed, id: Uuid, voided: &CancellationToken) -> AskingGuard {
        let tool = t.def.name.to_string();
        lock(&self.inner.asking).insert(id, Asking { tool, voided: voided.clone() });
        let guard = AskingGuard { id, inner: self.inner.clone() };
        // `refresh` marks a changed definition before it voids: either `void` saw this call, or
        // this sees the mark.
        if t.stale.load(Ordering::SeqCst) {
            voided.cancel();
            self.inner.gate.cancel_request(&id);
        }
        guard
    }

    async fn elicit(&self, p: PendingRequest, who: &Who, cx: &RequestContext<RoleServer>) {
        let req = p.request().clone();
        let left = Duration::from_millis(req.deadline_ms.saturating_sub(now_ms()));
        let asked = ask_client(&cx.peer, approval_form(&req), left);
        let answer = tokio::select! {
            r = asked => r,
            _ = cx.ct.cancelled() => {
                // The client gave up on the call: nothing runs.
                self.inner.gate.cancel_request(&req.id);
                return;
            }
        };
        let responder = Some(who.principal.clone());
        let done = match answer {
            Ok(res) => match verdict(&res) {
                Some(Verdict::Approve(scope)) => p.approve_with(None, scope, responder).map(drop),
                Some(Verdict::Deny(reason)) => p.deny(reason, responder).map(drop),
                None => {
                    self.inner.gate.cancel_request(&req.id);
                    Ok(())
                }
            },
            Err(e) => {
                p.fail(&format!("could not ask the MCP client: {e}"));
                Ok(())
            }
        };
        if let Err(e) = done {
            // Refused by the gate (e.g. its authenticator does not accept this client as an
            // approver): nothing runs, and the call does not wait for its deadline.
            signoff::report!("signoff mcp: the client's answer to request {} was refused: {e}", req.id);
            self.inner.gate.cancel_request(&req.id);
        }
    }

    /// 2026-07-28 era, first round: the request is made (and stays pending in the gate), the
    /// client gets an `InputRequiredResult` whose `requestState` carries a signed single-use
    /// approval token, sealed and bound to principal, server, tool and the arguments' digest.
    async fn input_required(
        &self,
        t: &Exposed,
        name: &str,
        args: &Value,
        who: &Who,
        ct: &CancellationToken,
    ) -> CallToolResponse {
        // The call runs only on the retry (an approval elsewhere meanwhile does not run it on its
        // own: the client might never come back for the result).
        let (task, p, go) = match self.start_deferred(t, name, args, who, ct).await {
            Ok(started) => started,
            Err(ended) => return finish(ended),
        };
        let req = p.request();
        let token = match self.inner.gate.issue_token(&req.id, &who.principal) {
            Ok(t) => t,
            Err(e) => {
                p.fail(&format!("could not issue an approval token: {e}"));
                return finish(ended(name, task.await));
            }
        };
        let ask = approval_form(req);
        self.park(t, name, who, (task, p, go), Answer::Form { token }, ask).await
    }

    /// 2026-07-28 era, first round's end: seals the `requestState` (the answer it carries, and the
    /// arguments and definition it is issued for), parks the call until the retry, and returns
    /// the `InputRequiredResult` asking `ask`.
    async fn park(
        &self,
        t: &Exposed,
        name: &str,
        who: &Who,
        (task, p, go): Started,
        answer: Answer,
        ask: ElicitRequestParams,
    ) -> CallToolResponse {
        let req = p.request();
        let state = State { arguments: req.arguments_digest.to_string(), definition: t.def_hash.clone(), answer };
        let ad = associated_data(&who.principal, t);
        let left = Duration::from_millis(req.deadline_ms.saturating_sub(now_ms()).max(1));
        let state = match self.inner.codec.seal_json_with(&state, &SealOptions::new().associated_data(&ad).ttl(left)) {
            Ok(s) => s,
            Err(e) => {
                p.fail(&format!("could not seal the request state: {e}"));
                return finish(ended(name, task.await));
            }
        };
        {
            let mut parked = lock(&self.inner.parked);
            parked.retain(|_, p| !p.task.is_finished());
            parked.insert(req.id, Parked { task, go: Some(go), pending: p });
        }
        let mut asks = InputRequests::new();
        asks.insert(INPUT_KEY.into(), InputRequest::Elicitation(ElicitRequest::new(ask)));
        InputRequiredResult::new(Some(asks), Some(state)).into()
    }

    /// Opens a retry's `requestState` for this client and tool, and checks that it was issued for
    /// the *retried* arguments (`digest`) and the tool's current definition.
    fn open_state(&self, sealed: &str, who: &Who, t: &Exposed, digest: &str) -> Result<Answer, Refusal> {
        let ad = associated_data(&who.principal, t);
        let state = self.inner.codec.open_json_with::<State>(sealed, &ad).map_err(|e| match e {
            RequestStateError::Expired => Refusal::Expired,
            _ => Refusal::Tampered,
        })?;
        if state.definition != t.def_hash {
            return Err(Refusal::DefinitionChanged);
        }
        if state.arguments != digest {
            return Err(Refusal::ArgumentsDiffer);
        }
        Ok(state.answer)
    }

    /// Refuses a 2026-07-28 retry (nothing runs, nothing is consumed) and records why in the
    /// audit: a `request-state-refused` notice naming the tool, the reason, the client and its
    /// era (never the state or its token).
    fn refuse(&self, name: &str, who: &Who, why: Refusal) -> CallToolResponse {
        signoff::report!("signoff mcp: a retry of {name} from {:?} was refused: {why}", who.principal);
        self.inner.gate.audit_notice(
            "request-state-refused",
            Some(name),
            format!("{why}; client {:?}, era {}, call #{}", who.principal, who.era, who.rpc_id),
        );
        refused(name, &why.to_string())
    }

    /// 2026-07-28 era, the retry: the state must open with the *retried* arguments' digest; the
    /// token inside answers the request once.
    async fn retry(
        &self,
        t: &Exposed,
        name: &str,
        args: &Value,
        who: &Who,
        req: &CallToolRequestParams,
        ct: &tokio_util::sync::CancellationToken,
    ) -> CallToolResponse {
        let sealed = req.request_state.as_deref().unwrap_or_default();
        let digest = signoff::display::arguments_digest(args);
        let state = match self.open_state(sealed, who, t, &digest) {
            Ok(Answer::Form { token }) => token,
            Ok(Answer::Url { request }) => return self.retry_url(name, who, request, req, ct).await,
            Err(why) => return self.refuse(name, who, why),
        };
        let claims = match self.inner.gate.inspect_token(&state) {
            Ok(c) if c.tool == name && c.arguments_digest == digest && c.session_id == self.session => c,
            Ok(_) => return self.refuse(name, who, Refusal::OtherCall),
            Err(e) => return self.refuse(name, who, Refusal::InvalidToken(e.to_string())),
        };
        let answer = req.input_responses.as_ref().and_then(|r| r.get(INPUT_KEY));
        let v = answer.and_then(|v| ElicitResult::deserialize(v).ok()).and_then(|r| verdict(&r));
        let approves = matches!(v, Some(Verdict::Approve(_)));
        let response = match v {
            Some(Verdict::Approve(scope)) => TokenResponse { scope, ..TokenResponse::approve(&who.principal) },
            Some(Verdict::Deny(reason)) => TokenResponse::deny(&who.principal, reason),
            // `cancel`, or no answer it can read: the request is cancelled, as in the legacy era
            // (nobody decided, so it is not recorded or told as a person's denial).
            None => return self.cancel_parked(name, who, claims.request_id).await,
        };
        // Recorded off this task's thread (a durable store commits to disk; a shared one asks
        // its database).
        if let Err(e) = self.inner.gate.respond_token_async(&state, response).await {
            // Approved elsewhere (the console) while the client was away: its own approval agrees,
            // so the call runs now, once. Any other refusal runs nothing.
            let approved_elsewhere = matches!(&e, signoff::Error::NotPending { state, .. } if state == "approved");
            if !(approved_elsewhere && approves) {
                if approved_elsewhere {
                    // The person here declined what someone approved elsewhere: release the call
                    // without running it (its executor gives up when the signal is dropped).
                    lock(&self.inner.parked).remove(&claims.request_id);
                }
                return refused(name, &format!("its approval cannot be used: {e}"));
            }
        }
        let parked = lock(&self.inner.parked).remove(&claims.request_id);
        match parked {
            Some(mut p) => {
                if let Some(go) = p.go.take() {
                    // The run is this retry's: cancelling it cancels the run upstream.
                    let _ = go.send(ct.clone());
                }
                finish(ended(name, p.task.await))
            }
            None => self.refuse(name, who, Refusal::NotHeld),
        }
    }

    /// 2026-07-28 era, a retry that cancels: the request is cancelled and the parked call ends
    /// without contacting the upstream (approved elsewhere meanwhile, it is released); the model
    /// reads the gate's words for its end. A state whose call is no longer parked is refused.
    async fn cancel_parked(&self, name: &str, who: &Who, request: Uuid) -> CallToolResponse {
        match self.unpark(&request) {
            Some(p) => finish(ended(name, p.task.await)),
            None => self.refuse(name, who, Refusal::Used),
        }
    }

    /// Ends a parked call that will not run: its request is cancelled (when still pending) and its
    /// run released (its signal dropped: approved meanwhile, it gives up without contacting the
    /// upstream). Returns it, to await its end; `None` when nothing is parked for `request`.
    fn unpark(&self, request: &Uuid) -> Option<Parked> {
        self.inner.gate.cancel_request(request);
        let mut p = lock(&self.inner.parked).remove(request)?;
        drop(p.go.take());
        Some(p)
    }

    /// Legacy era, URL mode: an `elicitation/create` pointing at the approval page, where a
    /// signed-in approver decides. The client's `accept` only says the person went there; the
    /// decision is the page's. `decline`, `cancel`, the client cancelling the call or a failed
    /// elicitation cancel the request.
    async fn ask_legacy_url(
        &self,
        t: &Exposed,
        args: &Value,
        who: &Who,
        cx: &RequestContext<RoleServer>,
        page: &str,
    ) -> ToolResult {
        let (route, rx) = self.route(None);
        let exec = DOWNSTREAM
            .scope(Downstream::of(&cx.ct, who), self.inner.gate.execute(self.call(t, args, who, Some(route.id))));
        let voided = CancellationToken::new();
        let ask = async {
            let Ok(p) = rx.await else { return std::future::pending::<ToolResult>().await };
            let _asking = self.asking(t, p.request().id, &voided);
            let req = p.request().clone();
            let left = Duration::from_millis(req.deadline_ms.saturating_sub(now_ms()));
            let asked = ask_client(&cx.peer, url_form(&req, page), left);
            let answer = tokio::select! {
                r = asked => r,
                _ = cx.ct.cancelled() => Ok(ElicitResult::new(ElicitationAction::Cancel)),
            };
            match answer {
                // Held until the page decides (dropping it unanswered would fail the request); a
                // client that gives up on the call meanwhile cancels it, so a later approval on the
                // page runs nothing.
                Ok(res) if res.action == ElicitationAction::Accept => {
                    cx.ct.cancelled().await;
                    self.inner.gate.cancel_request(&req.id);
                }
                Ok(_) => {
                    self.inner.gate.cancel_request(&req.id);
                }
                Err(e) => {
                    p.fail(&format!("could not ask the MCP client: {e}"));
                }
            }
            let _hold = p;
            std::future::pending::<ToolResult>().await
        };
        let r = tokio::select! {
            biased;
            r = exec => r,
            r = ask => r,
        };
        voided_while_asked(r, &voided)
    }

    /// 2026-07-28 era, URL mode, first round: the request is made and stays pending in the gate
    /// for the approval page; the client gets an `InputRequiredResult` with a URL elicitation and a
    /// sealed `requestState` naming the request. Approved on the page, the call still runs only on
    /// the client's retry, once.
    async fn input_required_url(
        &self,
        t: &Exposed,
        name: &str,
        args: &Value,
        who: &Who,
        page: &str,
        ct: &CancellationToken,
    ) -> CallToolResponse {
        let (task, p, go) = match self.start_deferred(t, name, args, who, ct).await {
            Ok(started) => started,
            Err(ended) => return finish(ended),
        };
        let (request, ask) = (p.request().id, url_form(p.request(), page));
        self.park(t, name, who, (task, p, go), Answer::Url { request }, ask).await
    }

    /// 2026-07-28 era, URL mode, the retry (its state already opened with the retried arguments):
    /// `accept` lets the call run once the page approves it (waiting for the decision until the
    /// deadline); anything else cancels the request. A replayed state finds nothing parked.
    async fn retry_url(
        &self,
        name: &str,
        who: &Who,
        request: Uuid,
        req: &CallToolRequestParams,
        ct: &tokio_util::sync::CancellationToken,
    ) -> CallToolResponse {
        let Some(mut parked) = lock(&self.inner.parked).remove(&request) else {
            return self.refuse(name, who, Refusal::Used);
        };
        let answer = req.input_responses.as_ref().and_then(|r| r.get(INPUT_KEY));
        let accepted = answer
            .and_then(|v| ElicitResult::deserialize(v).ok())
            .is_some_and(|r| r.action == ElicitationAction::Accept);
        if accepted {
            if let Some(go) = parked.go.take() {
                let _ = go.send(ct.clone());
            }
        } else {
            // The page may have approved already: the call is released without running (its
            // signal dropped), at once rather than at its deadline.
            self.inner.gate.cancel_request(&request);
            drop(parked.go.take());
        }
        tokio::select! {
            r = &mut parked.task => finish(ended(name, r)),
            _ = ct.cancelled() => {
                // The client gave up while the page had not decided: nothing runs. (Approved and
                // started already, the tool finishes, as any started call does.)
                self.inner.gate.cancel_request(&request);
                finish(ended(name, parked.task.await))
            }
        }
    }

    /// Points URL-mode elicitations at an approval page (a signoff console on this gate or on a
    /// store it shares): clients that declared URL elicitation are sent to
    /// `<page>#request-<id>` instead of answering in a form. Set once; later calls are ignored.
    pub fn set_approval_page(&self, page: impl Into<String>) {
        let page: String = page.into();
        let _ = self.inner.approval_page.set(page.split('#').next().unwrap_or_default().to_owned());
    }

    /// Declares that nothing but the clients themselves can approve this gate's calls (no
    /// console, approval page, shared store or other approver on the gate): a call from a client
    /// that cannot be asked is then refused at once, with words saying so, and audited as
    /// `call-refused`, instead of left pending where nobody can decide it. `signoff mcp-proxy`
    /// does this for a configuration without `console`, `approval_url` or `gate.store_url`
    /// ([`ProxyConfig::approvable_elsewhere`]), and says so at start ([`NOWHERE_ELSE`]).
    pub fn refuse_unaskable_calls(&self) {
        self.inner.nowhere_else.store(true, Ordering::SeqCst);
    }

    /// A client that can be asked in no way: the request stays pending in the gate (a console or an
    /// approval token can answer it); once approved, one identical retry before the deadline runs
    /// the call, exactly once.
    async fn elsewhere(&self, t: &Exposed, name: &str, args: &Value, who: &Who, ct: &CancellationToken) -> ToolResult {
        if self.inner.nowhere_else.load(Ordering::SeqCst) {
            self.inner.gate.audit_notice("call-refused", Some(name), format!("{}: {NOWHERE_ELSE_TOLD}", who.principal));
            let mut r = pending_elsewhere(name, Uuid::nil(), None);
            r.request_id = None;
            r.content = format!(
                "The call to `{name}` did not run: it needs a person's approval, this client cannot ask for it, \
                 and {NOWHERE_ELSE_TOLD}. Do not retry it; tell the user."
            );
            return r;
        }
        let key = (who.principal.clone(), name.to_owned(), signoff::display::arguments_digest(args));
        let existing = lock(&self.inner.elsewhere).remove(&key);
        if let Some(mut e) = existing {
            let still_pending = !e.task.is_finished() && self.inner.gate.pending_request(&e.request_id).is_some();
            if still_pending {
                let id = e.request_id;
                lock(&self.inner.elsewhere).insert(key, e);
                return pending_elsewhere(name, id, self.inner.approval_page.get());
            }
            if let Some(go) = e.go.take() {
                let _ = go.send(ct.clone());
            }
            // The task removes the request's deferred entry when it ends.
            return ended(name, e.task.await);
        }
        let (task, p, go) = match self.start_deferred(t, name, args, who, ct).await {
            Ok(started) => started,
            Err(ended) => return ended,
        };
        let id = p.request().id;
        signoff::report!(
            "signoff mcp: request {id} ({name}, from {}) is pending approval elsewhere (console or approval token)",
            who.principal
        );
        let mut all = lock(&self.inner.elsewhere);
        all.retain(|_, e| !e.task.is_finished());
        all.insert(key, Elsewhere { request_id: id, task, go: Some(go), _pending: p });
        pending_elsewhere(name, id, self.inner.approval_page.get())
    }
}

struct Route {
    id: Uuid,
    routes: Routes,
}

impl Drop for Route {
    fn drop(&mut self) {
        lock(&self.routes).remove(&self.id);
    }
}

/// A call noted as asking inline ([`McpGate::asking`]), forgotten when dropped.
struct AskingGuard {
    id: Uuid,
    inner: Arc<Inner>,
}

impl Drop for AskingGuard {
    fn drop(&mut self) {
        lock(&self.inner.asking).remove(&self.id);
    }
}

/// What the model reads of a call asked about inline whose request was cancelled because its
/// tool's definition changed meanwhile (not the gate's words for an aborted request, which say
/// not to retry: made again, the call asks about the current definition).
fn voided_while_asked(mut r: ToolResult, voided: &CancellationToken) -> ToolResult {
    if voided.is_cancelled() && r.status == ToolStatus::Cancelled {
        let name = &r.tool;
        r.content = format!(
            "The call to `{name}` did not run: {VOIDED_WHILE_ASKED}. If it is still needed, make it again: approval \
             will be asked for the tool as it is now."
        );
    }
    r
}

/// Who is calling and in which protocol era.
struct Who {
    principal: String,
    era: String,
    /// The JSON-RPC id of the `tools/call`.
    rpc_id: String,
    /// The changes each upstream had announced when the call came, before its listing: one
    /// announced later was not known when the person was asked ([`Listing::settle`]).
    announced: Arc<[u64]>,
    /// The call's upstream had, once listed for the call, an announced change not listed (its
    /// listing failed): the call is asked about whatever its tool's gating.
    unknown: bool,
    /// The client's own name and version (`clientInfo`), e.g. `claude-code 1.2.3`: request
    /// metadata `client`, the approval console's label for the session ([`client_label`]).
    client: Option<String>,
}

/// `clientInfo` as a person reads it: `<name> <version>` (trimmed, at most 200 characters);
/// `None` without a name.
fn client_label(info: &Implementation) -> Option<String> {
    let name = info.name.trim();
    let version = info.version.trim();
    let label = if version.is_empty() { name.to_owned() } else { format!("{name} {version}") };
    (!name.is_empty()).then(|| label.chars().take(200).collect())
}

/// What `requestState` carries (sealed: integrity-protected, bound by associated data to the
/// client, server and tool): what the retry answers with, and the arguments and definition it was
/// issued for (a retry whose own differ is refused, saying which).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    /// The digest of the arguments the request was made with.
    arguments: String,
    /// The hash of the upstream tool's definition when the request was made.
    definition: String,
    answer: Answer,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Answer {
    /// Form mode: the approval token the client's answer is submitted with.
    Form { token: String },
    /// URL mode: the request a person answers on the approval page.
    Url { request: Uuid },
}

/// Why a 2026-07-28 retry was refused: told to the model and recorded in the audit. Each reason
/// starts with a stable phrase; none carries the state or its token.
enum Refusal {
    /// The state does not verify.
    Tampered,
    /// The state outlived the request's deadline.
    Expired,
    /// The retried arguments are not those the state was issued for.
    ArgumentsDiffer,
    /// The upstream changed the tool's definition since the state was issued.
    DefinitionChanged,
    /// The token inside names another tool, arguments or session.
    OtherCall,
    /// The token inside does not verify (signoff's error).
    InvalidToken(String),
    /// URL mode: the call the state names is no longer parked (a replay, or it ended).
    Used,
    /// The approval was recorded, but the call is no longer parked here.
    NotHeld,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Tampered => f.write_str(
                "tampered: its requestState does not verify (altered, or issued for another client or tool, or by \
                 another proxy process)",
            ),
            Refusal::Expired => f.write_str("expired: its requestState outlived the request's deadline"),
            Refusal::ArgumentsDiffer => {
                f.write_str("arguments differ: the retried arguments are not those its requestState was issued for")
            }
            Refusal::DefinitionChanged => f.write_str(
                "definition changed: the upstream changed the tool's definition since its requestState was issued",
            ),
            Refusal::OtherCall => {
                f.write_str("another call: its approval token was issued for another tool, arguments or session")
            }
            Refusal::InvalidToken(e) => write!(f, "invalid token: its approval token is not valid ({e})"),
            Refusal::Used => f.write_str("already used: its requestState was used before, or the call it names ended"),
            Refusal::NotHeld => {
                f.write_str("not held: the approval was recorded, but this proxy is no longer holding the call")
            }
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Binds a sealed state to who asked and which server and tool (the state itself names the
/// definition and arguments, checked after it opens).
fn associated_data(principal: &str, tool: &Exposed) -> Vec<u8> {
    let (server, name) = (&tool.server, &tool.def.name);
    format!("signoff-mcp/2\n{principal}\n{server}\n{name}").into_bytes()
}

/// `sha256:<hex>` of an upstream tool's definition as listed (name, description, schema,
/// annotations, ...): its pin.
fn definition_hash(def: &McpTool) -> String {
    signoff::display::arguments_digest(&serde_json::to_value(def).unwrap_or_default())
}

/// Records in the audit the definition a tool is pinned to when first seen.
fn pinned(gate: &Gate, server: &str, def: &McpTool, hash: &str) {
    let name = format!("{server}{SEPARATOR}{}", def.name);
    gate.audit_notice("definition-pinned", Some(&name), format!("upstream {server:?} tool {:?} is {hash}", def.name));
}

/// How many of the audit's newest records a start reads for the definitions pinned before.
const PINS_READ: usize = 20_000;

/// The definition each tool had when the audit last recorded it (pinned, or changed to), from
/// its newest [`PINS_READ`] records: a start pins again only what is new or changed since, not
/// every tool of every upstream each time. Empty without a readable audit.
fn last_pins(gate: &Gate) -> HashMap<String, String> {
    let mut pins = HashMap::new();
    let Ok(Some(records)) = gate.recent_audit(None, PINS_READ) else { return pins };
    // Newest first: the first record seen for a tool is its latest definition.
    for r in records {
        let (Some(tool), Some(reason)) = (r.tool, r.reason) else { continue };
        let hash = match r.decision.as_deref() {
            Some("definition-pinned") => reason.rsplit(' ').next(),
            Some("definition-changed") => reason.split(" to ").nth(1).and_then(|h| h.split(": ").next()),
            _ => None,
        };
        if let Some(hash) = hash {
            pins.entry(tool).or_insert_with(|| hash.to_owned());
        }
    }
    pins
}

/// How a registered tool reaches its upstream: the connection, how long a call waits for its
/// answer, the signals of deferred runs, and what the upstream announced.
struct Via {
    peer: Peer<RoleClient>,
    call_timeout: Duration,
    /// The upstream's annotations are taken as facts ([`Upstream::trust_annotations`]).
    trust_annotations: bool,
    deferred: Deferred,
    listing: Listing,
}

/// An upstream's announced changes (`notifications/tools/list_changed`) against those its
/// gate has listed, for the executors of its tools.
#[derive(Clone)]
struct Listing {
    /// The upstream's place in [`Inner::upstreams`].
    upstream: usize,
    announced: Arc<AtomicU64>,
    listed: Arc<AtomicU64>,
    gate: Arc<OnceLock<Weak<Inner>>>,
}

impl Listing {
    /// Lists the upstream again when it announced a change its gate has not listed yet since the
    /// call that runs came (`seen`: what each upstream had announced then, [`Who::announced`]): an
    /// approval processed between the announcement and the next call would otherwise run the new
    /// definition of a tool the person was shown the old one of. `Err` when that listing fails
    /// (what would run is not known); a changed definition marks the tool's executors stale,
    /// which the caller checks next. A change announced before the call came was listed by the
    /// call itself, or, when that failed, the call was asked about the definition known then, as
    /// every call is until the upstream is listed again.
    async fn settle(&self, seen: Option<&[u64]>) -> Result<(), &'static str> {
        let announced = self.announced.load(Ordering::SeqCst);
        if announced == self.listed.load(Ordering::SeqCst) {
            return Ok(());
        }
        if seen.and_then(|s| s.get(self.upstream)).is_some_and(|&s| announced <= s) {
            return Ok(());
        }
        if let Some(inner) = self.gate.get().and_then(Weak::upgrade) {
            let gate = McpGate { inner: inner.clone(), session: String::new(), per_request: false };
            if let Some(up) = inner.upstreams.get(self.upstream) {
                gate.refresh_upstream(up).await;
            }
        }
        if self.listed.load(Ordering::SeqCst) < announced { Err(DEFINITION_UNKNOWN) } else { Ok(()) }
    }

    /// The upstream announced a change that has not been listed ([`McpGate::definition_unknown`]).
    fn unknown(&self) -> bool {
        self.announced.load(Ordering::SeqCst) > self.listed.load(Ordering::SeqCst)
    }
}

/// Registers (or replaces) an upstream tool in the gate and describes it as the client sees it.
fn expose(
    gate: &Gate,
    server: &str,
    def: &McpTool,
    overrides: &BTreeMap<String, ToolOverride>,
    via: &Via,
) -> Result<Exposed, String> {
    let name = format!("{server}{SEPARATOR}{}", def.name);
    let says = NameSays::of(gate.policy(), &def.name);
    let gating = Gating::decide(def.annotations.as_ref(), overrides.get(&name), says, via.trust_annotations);
    let stale = Arc::new(AtomicBool::new(false));
    register(gate, &name, def, gating, overrides.get(&name), via, &stale)?;
    let mut exposed = def.clone();
    exposed.name = name.into();
    Ok(Exposed {
        server: server.to_owned(),
        upstream_tool: def.name.to_string(),
        def: exposed,
        def_hash: definition_hash(def),
        gating,
        stale,
    })
}

fn register(
    gate: &Gate,
    name: &str,
    def: &McpTool,
    gating: Gating,
    over: Option<&ToolOverride>,
    via: &Via,
    stale: &Arc<AtomicBool>,
) -> Result<(), String> {
    let upstream_tool = def.name.to_string();
    let server = name.split_once(SEPARATOR).map_or("", |(s, _)| s).to_owned();
    let hints = def.annotations.as_ref();
    let configured = over.is_some_and(|o| o.approval.is_some() || o.risk.is_some());
    // Gated by configuration: `required`. Gated by default: the core's own default mode where
    // the core gates it too (a tool it is not told is read-only: an external one; or a name with
    // one of its keywords), so the request gives the real reason ("the tool comes from the
    // external server ...") instead of "always requires approval". A tool that claims to be
    // read-only, from a server whose hints are not trusted, is `required`: the core would take
    // the claim and run it.
    let core_gates_it =
        hints.and_then(|a| a.read_only_hint) != Some(true) || gate.policy().keyword_in(&def.name).is_some();
    let mode = match (gating.approval, configured || !core_gates_it) {
        (false, _) => signoff::ApprovalMode::NotRequired,
        (true, true) => signoff::ApprovalMode::Required,
        (true, false) => signoff::ApprovalMode::Default,
    };
    let build = |schema: Value| {
        let (peer, upstream_tool, deferred) = (via.peer.clone(), upstream_tool.clone(), via.deferred.clone());
        let (limit, stale, listing) = (via.call_timeout, stale.clone(), via.listing.clone());
        let mut b = signoff::Tool::builder(name)
            .description(def.description.as_deref().unwrap_or_default())
            .parameters(schema)
            .approval(mode)
            .source(ToolSource::External { server: server.clone() })
            .read_only(hints.and_then(|a| a.read_only_hint) == Some(true))
            .destructive(hints.and_then(|a| a.destructive_hint) != Some(false))
            .editable(over.and_then(|o| o.editable) == Some(true))
            // While its upstream's tools are unknown (an announced change that could not be
            // listed) every call is asked about, as the call decided when it came; evaluated
            // outside a call (the gate's `evaluate`), as the upstream is now.
            .custom_rule(UNKNOWN_REASON, {
                let listing = via.listing.clone();
                move |_| DOWNSTREAM.try_with(|d| d.unknown).unwrap_or_else(|_| listing.unknown())
            })
            .executor_with_context(move |args, cx| {
                let (peer, tool, stale, listing) =
                    (peer.clone(), upstream_tool.clone(), stale.clone(), listing.clone());
                let wait = cx.request_id.and_then(|id| lock(&deferred).remove(&id));
                // The call that runs it: its cancellation (run in place by the call that was
                // approved, not deferred), and what the upstream had announced when it came.
                let downstream = DOWNSTREAM.try_with(Downstream::clone).ok();
                let announced = downstream.as_ref().map(|d| d.announced.clone());
                let inline = downstream.map(|d| d.ct);
                async move {
                    let ct = match wait {
                        // Approved while the client was away: run only on its identical retry,
                        // before the request's deadline (a retry that comes later, even by a
                        // hair, runs nothing).
                        Some((wait, deadline_ms)) => {
                            let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms()));
                            let signal = tokio::time::timeout(left, wait).await;
                            if now_ms() >= deadline_ms {
                                return Err(NOT_RETRIED.into());
                            }
                            match signal {
                                Ok(Ok(ct)) => ct,
                                Ok(Err(_)) => return Err(RELEASED.into()),
                                Err(_) => return Err(NOT_RETRIED.into()),
                            }
                        }
                        None => inline.unwrap_or_default(),
                    };
                    // The upstream changed the definition the person was asked about (seen now
                    // if it announced the change and it was not listed yet).
                    listing.settle(announced.as_deref()).await?;
                    if stale.load(Ordering::SeqCst) {
                        return Err(DEFINITION_CHANGED.into());
                    }
                    forward(&peer, &tool, args, limit, &ct).await
                }
            });
        if let Some(ms) = over.and_then(|o| o.timeout_ms) {
            b = b.timeout(Duration::from_millis(ms));
        }
        b.build()
    };
    let schema = Value::Object((*def.input_schema).clone());
    if let Err(e) = gate.register(build(schema)) {
        // Refused with any schema (its name, say): that is the reason, not the schema.
        gate.register(build(json!({"type": "object"}))).map_err(|e| format!("{name:?}: {e}"))?;
        // Only the upstream's schema was refused by our validator: the upstream still validates
        // its input.
        signoff::report!(
            "signoff mcp: {name}: the upstream's input schema is not usable here ({e}); accepting any object"
        );
    }
    Ok(())
}

/// Asks the client (`elicitation/create`), waiting at most `left` for its answer. A question
/// whose answer no longer matters, because the call ended meanwhile (decided elsewhere, voided
/// by a changed definition, cancelled), is withdrawn: the client is sent `notifications/cancelled`
/// for it, so it can close the form or link it shows (rmcp sends one itself past `left`). An
/// answer that comes anyway is ignored.
async fn ask_client(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
    left: Duration,
) -> Result<ElicitResult, rmcp::ServiceError> {
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    let handle = peer.send_request_with_option(request, PeerRequestOptions::with_timeout(left)).await?;
    let mut unanswered = Withdraw(Some((peer.clone(), handle.id.clone())));
    let answer = handle.await_response().await;
    unanswered.0 = None;
    match answer? {
        ClientResult::ElicitResult(r) => Ok(r),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

/// A question to the client still unanswered: withdrawn (`notifications/cancelled`) when dropped.
struct Withdraw(Option<(Peer<RoleServer>, rmcp::model::RequestId)>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        rt.spawn(async move {
            let why = "signoff-mcp: the call this asked about ended (decided, voided or cancelled)";
            let notice = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), Some(why.to_owned())));
            let _ = tokio::time::timeout(CANCEL_SEND, notice).await;
        });
    }
}

/// How long sending `notifications/cancelled` for an abandoned upstream call may take.
const CANCEL_SEND: Duration = Duration::from_secs(5);

/// Calls the upstream (only ever after the gate let the call through), waiting at most `limit`
/// for its answer. Past `limit`, or when `ct` (the downstream call's cancellation) fires first,
/// the upstream is sent `notifications/cancelled` for the request and the call ends with an
/// error saying whether the tool ran is unknown.
async fn forward(
    peer: &Peer<RoleClient>,
    tool: &str,
    args: Value,
    limit: Duration,
    ct: &CancellationToken,
) -> signoff::ExecResult {
    let mut p = CallToolRequestParams::new(tool.to_owned());
    p.arguments = match args {
        Value::Object(m) => Some(m),
        _ => None,
    };
    // The client gave up on the call before it was sent: it is not.
    if ct.is_cancelled() {
        return Err(format!("{NOT_DELIVERED}: the client cancelled it before it was sent"));
    }
    // Closed already (the server exited or its connection dropped before this call): rmcp would
    // refuse the request before writing it, as `TransportClosed`, the same error it gives when the
    // connection closes while waiting for the answer; told apart here, before sending.
    if peer.is_transport_closed() {
        return Err(format!(
            "{NOT_DELIVERED}: its connection had already closed (the server exited or went away before this call)"
        ));
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(p));
    let mut handle = match peer.send_cancellable_request(request, PeerRequestOptions::no_options()).await {
        Ok(h) => h,
        // Not handed to the connection at all.
        Err(rmcp::ServiceError::TransportClosed) => {
            return Err(format!("{NOT_DELIVERED}: its connection closed before the call was sent"));
        }
        Err(e) => return Err(format!("{NOT_DELIVERED}: {e}")),
    };
    let (why, said) = tokio::select! {
        biased;
        answer = &mut handle.rx => {
            // The sender dropped without an answer: the connection closed.
            let answer = answer.unwrap_or(Err(rmcp::ServiceError::TransportClosed));
            return answered(answer.and_then(|r| tool_response(r).ok_or(rmcp::ServiceError::UnexpectedResponse)));
        }
        _ = tokio::time::sleep(limit) => (
            format!("signoff-mcp: no answer within {} ms", limit.as_millis()),
            format!("{TIMED_OUT_UNKNOWN} (no answer within {} ms)", limit.as_millis()),
        ),
        _ = ct.cancelled() => ("signoff-mcp: the client cancelled the call".to_owned(), CANCELLED_UNKNOWN.to_owned()),
    };
    // The notification waits for the connection, which may be as stuck as the call was: the
    // call ends within `CANCEL_SEND` of its bound either way.
    match tokio::time::timeout(CANCEL_SEND, handle.cancel(Some(why))).await {
        Ok(Ok(())) => Err(said),
        Ok(Err(e)) => Err(format!("{said}; sending notifications/cancelled failed: {e}")),
        Err(_) => Err(format!("{said}; notifications/cancelled could not be sent within {} s", CANCEL_SEND.as_secs())),
    }
}

/// A `tools/call` answer as rmcp's `call_tool_once` reads it (a result without content is an
/// empty result); `None` for an answer that is no tool result.
fn tool_response(r: ServerResult) -> Option<CallToolResponse> {
    let contentless = |result_type, meta| {
        let mut r = CallToolResult::default();
        (r.result_type, r.meta) = (result_type, meta);
        CallToolResponse::Complete(r)
    };
    Some(match r {
        ServerResult::CallToolResult(r) => CallToolResponse::Complete(r),
        ServerResult::InputRequiredResult(r) => CallToolResponse::InputRequired(r),
        ServerResult::CreateTaskResult(r) => CallToolResponse::Task(r),
        ServerResult::EmptyResult(_) => contentless(None, None),
        ServerResult::TaskAckResult(ack) => contentless(Some(ack.result_type), ack.meta),
        ServerResult::CustomResult(CustomResult(Value::Object(mut m))) if m.len() == 1 => {
            let meta = serde_json::from_value(m.remove("_meta")?).ok()?;
            contentless(None, Some(meta))
        }
        _ => return None,
    })
}

/// Words the upstream's answer to a call (or the failure to get one).
fn answered(answer: Result<CallToolResponse, rmcp::ServiceError>) -> signoff::ExecResult {
    match answer {
        Ok(CallToolResponse::Complete(r)) => serde_json::to_value(&r).map_err(|e| e.to_string()),
        Ok(_) => Err("the upstream server asked for input, which this proxy does not relay".into()),
        // The request never left: say so (the model and the person should not think it ran).
        // Over HTTP a send error may also come after the server had the request (an error
        // status, a broken answer): then it may have run.
        Err(rmcp::ServiceError::TransportSend(e)) => Err(format!("{}: {e}", send_failure(&e))),
        // Handed to a connection that then closed without an answer: it may or may not have run.
        Err(rmcp::ServiceError::TransportClosed) => Err(OUTCOME_UNKNOWN.into()),
        Err(rmcp::ServiceError::McpError(e)) => Err(rpc_error(&e)),
        Err(e) => Err(format!("the upstream server failed: {e}")),
    }
}

/// Words a JSON-RPC error from the upstream's `tools/call`: the codes a server sends before it runs
/// anything (the request, method, tool or arguments were refused) mean the call did not run; any
/// other (an internal error, a server's own code) leaves it unknown.
fn rpc_error(e: &rmcp::ErrorData) -> String {
    use rmcp::model::ErrorCode;
    let what = format!("{} (JSON-RPC error {})", e.message, e.code.0);
    match e.code {
        ErrorCode::INVALID_PARAMS
        | ErrorCode::METHOD_NOT_FOUND
        | ErrorCode::INVALID_REQUEST
        | ErrorCode::PARSE_ERROR => {
            format!("{REFUSED}: {what}")
        }
        _ => format!("{ERRED_UNKNOWN}: {what}"),
    }
}

/// What a failed send means for the call, as the start of its error: [`NOT_DELIVERED`] when it
/// never reached the server (a stdio upstream's failed write to its input; over Streamable HTTP
/// a failure to connect or to build the request, or the transport's own closed channel);
/// [`REFUSED`] when the server answered that it would not take it (authorization required or
/// insufficient, rate limited with 429, an unknown session with 404); otherwise
/// [`SENT_UNKNOWN`]: the server had it (an error status such as 500, a broken answer).
fn send_failure(e: &rmcp::transport::DynamicTransportError) -> &'static str {
    use rmcp::transport::streamable_http_client::StreamableHttpError as E;
    match e.error.downcast_ref::<E<reqwest::Error>>() {
        None => NOT_DELIVERED,
        Some(E::Client(r)) if r.is_connect() || r.is_builder() => NOT_DELIVERED,
        Some(E::TransportChannelClosed | E::ReservedHeaderConflict(_)) => NOT_DELIVERED,
        Some(E::AuthRequired(_) | E::InsufficientScope(_) | E::SessionExpired) => REFUSED,
        Some(E::HttpStatus(s)) if s.status == 429 => REFUSED,
        Some(_) => SENT_UNKNOWN,
    }
}

/// Turns signoff's result into the client's: the upstream's own result when it ran, otherwise an
/// error result with signoff's words for the model ([`told`]).
fn finish(r: ToolResult) -> CallToolResponse {
    to_mcp(told(r)).into()
}

/// What the model reads of a call whose executor gave up without reaching the upstream, or lost it
/// mid-call: signoff words every executor error as a run that failed, which these were not. An
/// approved call that gave up (no retry before the deadline, or released), was never delivered, or
/// whose tool's definition changed after the person was asked did not run; one whose upstream went
/// away during the call, did not answer in time or was cancelled by the client while it had the
/// call may or may not have run (and the model is told to check before repeating it). The audit's
/// `execution` record keeps the error as it is.
fn told(mut r: ToolResult) -> ToolResult {
    let (ToolStatus::Failed, Some(err)) = (&r.status, r.error.as_deref()) else { return r };
    let name = &r.tool;
    let said = match err {
        NOT_RETRIED | RELEASED => {
            format!(
                "The call to `{name}` did not run: it was {err}. Making the same call again asks for approval anew."
            )
        }
        DEFINITION_CHANGED | DEFINITION_UNKNOWN => format!(
            "The call to `{name}` did not run: {err}. If it is still needed, make it again: approval will be asked \
             for the tool as it is now."
        ),
        _ if err.starts_with(NOT_DELIVERED) || err.starts_with(REFUSED) => {
            format!("The call to `{name}` did not run: {err}.")
        }
        _ if err == OUTCOME_UNKNOWN
            || [SENT_UNKNOWN, ERRED_UNKNOWN, TIMED_OUT_UNKNOWN, CANCELLED_UNKNOWN]
                .iter()
                .any(|u| err.starts_with(u)) =>
        {
            format!("The call to `{name}` may or may not have run: {err}. {CHECK_FIRST}")
        }
        _ => return r,
    };
    // Arguments edited on the approval page: the model learns what was approved.
    let edited = r.arguments.as_ref().filter(|_| r.edited).map(|a| {
        format!(
            "Note: the user changed the arguments before approving them; approved: {}.\n",
            signoff::display::canonical_json(a)
        )
    });
    r.content = edited.unwrap_or_default() + &said;
    r
}

fn to_mcp(r: ToolResult) -> CallToolResult {
    let mut out = match (&r.status, r.output) {
        (ToolStatus::Executed, Some(v)) => serde_json::from_value::<CallToolResult>(v).unwrap_or_else(|e| {
            CallToolResult::error(vec![ContentBlock::text(format!("unreadable upstream result: {e}"))])
        }),
        _ => CallToolResult::error(vec![ContentBlock::text(r.content)]),
    };
    // An upstream on <= 2025-11-25 sends no `resultType`; 2026-07-28 clients require it.
    out.result_type = Some(ResultType::COMPLETE);
    out
}

fn refused(name: &str, why: &str) -> CallToolResponse {
    let text = format!("The call to `{name}` was refused and did not run: {why}. Do not retry the same call.");
    finish_text(text)
}

fn finish_text(text: String) -> CallToolResponse {
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.result_type = Some(ResultType::COMPLETE);
    r.into()
}

/// Where a request the client cannot show is approved: the approval page's URL for it, or any
/// approver on the gate (a console on a shared store, an approval token).
fn pending_elsewhere(name: &str, id: Uuid, page: Option<&String>) -> ToolResult {
    let at = match page {
        Some(page) => {
            format!("Approval is pending elsewhere, on the signoff console: {page}#request-{id} (request {id})")
        }
        None => format!("Approval is pending elsewhere (request {id})"),
    };
    ToolResult {
        call_id: None,
        tool: name.to_owned(),
        status: ToolStatus::Cancelled,
        output: None,
        error: None,
        error_kind: None,
        arguments: None,
        edited: false,
        request_id: Some(id),
        decision: None,
        content: format!(
            "The call to `{name}` did not run: it needs a person's approval, and this client cannot ask for it. \
             {at}. Once it is approved, the identical call may be made once more before the request's deadline; \
             otherwise continue without it."
        ),
    }
}

/// The end of a deferred call's task (its words for the model are [`told`] by [`finish`]).
fn ended(name: &str, joined: Result<ToolResult, tokio::task::JoinError>) -> ToolResult {
    joined.unwrap_or_else(|e| panicked(name, e))
}

fn panicked(name: &str, e: tokio::task::JoinError) -> ToolResult {
    let mut r = pending_elsewhere(name, Uuid::nil(), None);
    r.request_id = None;
    r.content = format!("The call to `{name}` did not run: the approval task ended unexpectedly ({e}).");
    r
}

/// The approval form: one choice and a reason (form elicitation carries flat fields only, so the
/// arguments are shown in the message, not edited).
fn approval_form(req: &signoff::ConfirmationRequest) -> ElicitRequestParams {
    let schema = json!({
        "type": "object",
        "properties": {
            "decision": {"type": "string", "title": "Decision", "oneOf": [
                {"const": "approve", "title": "Approve once"},
                {"const": "approve_session", "title": "Approve for this session"},
                {"const": "deny", "title": "Deny"}]},
            "reason": {"type": "string", "title": "Reason (told to the agent when you deny)"}
        },
        "required": ["decision"]
    });
    let Value::Object(schema) = schema else { unreachable!("an object literal") };
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "signoff: {}\n{}{}{}",
            req.prompt,
            why_and_when(req),
            unknown_note(req),
            req.display_arguments()
        ),
        requested_schema: ElicitationSchema::from_json_schema(schema).expect("a flat schema"),
    }
}

/// What a form says before the arguments, as the console's card does: why the call is asked
/// about (the request's reasons, escaped for display), the risk shown with it, and how long the
/// person has before it is denied.
fn why_and_when(req: &signoff::ConfirmationRequest) -> String {
    let why: Vec<String> = req.reasons.iter().map(|r| signoff::display::escape_for_display(r).into_owned()).collect();
    let why = if why.is_empty() { "approval is required".to_owned() } else { why.join("; ") };
    let risk = match req.metadata.get("risk").and_then(Value::as_str) {
        Some(r) => {
            format!("Risk: {} (L0 harmless to L5 highest). ", signoff::display::escape_for_display(r).into_owned())
        }
        None => String::new(),
    };
    let left = req.deadline_ms.saturating_sub(now_ms()).div_ceil(1000);
    format!(
        "Why: {why}.\n{risk}Answer within {}, or it is denied and does not run.\n",
        shown(Duration::from_secs(left))
    )
}

/// The line a form starts its arguments with when the request was made while the tool's upstream
/// could not be listed after a change ([`UNKNOWN_REASON`]); empty otherwise.
fn unknown_note(req: &signoff::ConfirmationRequest) -> String {
    match req.reasons.iter().any(|r| r == UNKNOWN_REASON) {
        true => format!("Note: {UNKNOWN_REASON}.\n"),
        false => String::new(),
    }
}

/// A URL-mode elicitation sending the person to the approval page for `req`.
fn url_form(req: &signoff::ConfirmationRequest, page: &str) -> ElicitRequestParams {
    ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: format!(
            "signoff: {}\n{}{}{}\nApprove or deny it on the approval page (sign in as an approver).",
            req.prompt,
            why_and_when(req),
            unknown_note(req),
            req.display_arguments()
        ),
        url: format!("{page}#request-{}", req.id),
        elicitation_id: req.id.to_string(),
    }
}

/// Only an explicit `accept` with `decision` `approve` or `approve_session` approves; `decline`
/// and any other accepted answer deny; `cancel` is `None` (the request is cancelled).
fn verdict(res: &ElicitResult) -> Option<Verdict> {
    let field = |k: &str| res.content.as_ref().and_then(|c| c.get(k)).and_then(Value::as_str);
    let reason = field("reason").map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned);
    match (&res.action, field("decision")) {
        (ElicitationAction::Accept, Some("approve")) => Some(Verdict::Approve(Scope::Once)),
        (ElicitationAction::Accept, Some("approve_session")) => Some(Verdict::Approve(Scope::Session)),
        (ElicitationAction::Accept, _) | (ElicitationAction::Decline, _) => Some(Verdict::Deny(reason)),
        _ => None,
    }
}

impl ServerHandler for McpGate {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("signoff-mcp", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.refresh().await;
        let tools = self.inner.tools.read().unwrap_or_else(|e| e.into_inner());
        Ok(ListToolsResult::with_all_items(tools.values().map(|t| t.def.clone()).collect()))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.per_request {
            // Over HTTP: the call's gate session comes from its request (crate::http).
            return crate::http::for_request(self, &cx).call_tool_in(req, cx).await;
        }
        self.call_tool_in(req, cx).await
    }
}

impl McpGate {
    async fn call_tool_in(
        &self,
        req: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = req.name.to_string();
        let announced: Arc<[u64]> = self.inner.upstreams.iter().map(|u| u.changes.load(Ordering::SeqCst)).collect();
        // Only the tool's own upstream is listed again (another's slow listing does not hold this
        // call up); a tool not known yet may be one a change added, so every changed one is.
        match self.exposed(&name).and_then(|t| self.upstream(&t.server)) {
            Some(up) => self.refresh_upstream(up).await,
            None => self.refresh().await,
        }
        let Some(tool) = self.exposed(&name) else {
            return Err(ErrorData::invalid_params(format!("unknown tool {name}"), None));
        };
        // Its upstream announced a change that could not be listed: what the tool is now is not
        // known, so the call is asked about even if its last definition needed no approval.
        let unknown = self.upstream(&tool.server).is_some_and(Self::definition_unknown);
        let args = Value::Object(req.arguments.clone().unwrap_or_default());
        let version = cx.protocol_version();
        let who = Who {
            // Over HTTP with bearer tokens, the token's name; otherwise the client's own name.
            principal: crate::http::authenticated(&cx).unwrap_or_else(|| {
                cx.client_info().map(|i| i.name).filter(|n| !n.is_empty()).unwrap_or_else(|| "mcp-client".into())
            }),
            era: version.as_ref().map_or_else(|| "unknown".into(), |v| v.as_str().to_owned()),
            rpc_id: cx.id.to_string(),
            announced,
            unknown,
            client: cx.client_info().as_ref().and_then(client_label),
        };
        let modern = version.as_ref().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        // A 2026-07-28 retry answers a request made in its first round (asked then because what
        // the tool was then was unknown): it goes on as a retry, whatever the tool needs now.
        let retried = modern && req.request_state.is_some();
        if !(tool.gating.approval || unknown || retried) {
            let exec = self.inner.gate.execute(self.call(&tool, &args, &who, None));
            return Ok(finish(DOWNSTREAM.scope(Downstream::of(&cx.ct, &who), exec).await));
        }
        let marker = cx.meta.get(MARKER_META_KEY).or_else(|| req.meta.as_ref().and_then(|m| m.get(MARKER_META_KEY)));
        // A marker approved the tool as it was listed before: while what it is now is unknown,
        // the person here is asked all the same.
        let marker = marker.filter(|_| !unknown);
        if let Some(marker) = marker {
            // Approved in process already: run without asking, once. Anything wrong with the marker
            // (forged, reused, another call's, expired) means the person is asked as usual.
            let accepted = match marker.as_str() {
                // Recorded in the gate's store when it keeps markers (a commit, a round trip):
                // off this worker.
                Some(m) => {
                    let (gate, m, name, args) = (self.inner.gate.clone(), m.to_owned(), name.clone(), args.clone());
                    tokio::task::spawn_blocking(move || gate.accept_approval_marker(&m, &name, &args))
                        .await
                        .unwrap_or_else(|e| Err(signoff::Error::Store(format!("the marker check stopped: {e}"))))
                }
                None => Err(signoff::Error::Malformed("the approval marker is not a string".into())),
            };
            match accepted {
                Ok(claims) => return Ok(finish(self.loopback(&tool, &args, &who, claims, &cx.ct).await)),
                Err(e) => {
                    // A key the proxy lacks, or one of the same id with another secret: most often
                    // the agent's gate and the proxy were given different keys, not a forgery.
                    let keys = match e.kind() {
                        signoff::ErrorKind::UnknownKey | signoff::ErrorKind::BadSignature => {
                            "; the agent's gate and this proxy must share token keys (`token_keys`, e.g. \
                             from `signoff keygen`)"
                        }
                        _ => "",
                    };
                    signoff::report!("signoff mcp: {name}: approval marker not accepted ({e}){keys}; asking")
                }
            }
        }
        let caps = cx.client_capabilities();
        let elicitation = caps.as_ref().and_then(|c| c.elicitation.as_ref());
        let can_form = elicitation.is_some_and(|e| e.form.is_some() || e.url.is_none());
        // With an approval page, clients that can open a URL are sent there (a signed-in
        // approver decides, not the client); others answer in a form.
        let page = self.inner.approval_page.get().filter(|_| elicitation.is_some_and(|e| e.url.is_some()));
        Ok(match (modern, req.request_state.as_deref(), page) {
            (true, Some(_), _) => self.retry(&tool, &name, &args, &who, &req, &cx.ct).await,
            (true, None, Some(page)) => self.input_required_url(&tool, &name, &args, &who, page, &cx.ct).await,
            (true, None, None) if can_form => self.input_required(&tool, &name, &args, &who, &cx.ct).await,
            (false, _, Some(page)) => finish(self.ask_legacy_url(&tool, &args, &who, &cx, page).await),
            (false, _, None) if can_form => finish(self.ask_legacy(&tool, &args, &who, &cx).await),
            _ => finish(self.elsewhere(&tool, &name, &args, &who, &cx.ct).await),
        })
    }
}

/// Serves an [`McpGate`] over this process's stdin and stdout until the client goes away. When
/// both are pipes (as MCP clients start servers) they are driven by the runtime's reactor
/// (`rmcp::transport::stdio_pipes`), not by a blocking thread per read and write: one thread
/// hand-off less each way, per message.
pub async fn serve_stdio(gate: McpGate) -> Result<(), String> {
    let running = gate.serve(rmcp::transport::stdio_pipes()).await.map_err(|e| format!("stdio: {e}"))?;
    running.waiting().await.map_err(|e| format!("stdio: {e}"))?;
    Ok(())
}

/// Builds the signoff gate a configuration describes (token keys made for the process when the
/// configuration has none).
pub fn build_gate(config: &ProxyConfig) -> Result<Gate, String> {
    let mut gate_config = match &config.gate {
        Some(v) => signoff::GateConfig::from_json(v, signoff::Naming::Snake).map_err(|e| format!("gate: {e}"))?,
        None => signoff::GateConfig::default(),
    };
    // Checked by the core with the rest (from 1 ms to 30 days).
    if let Some(ms) = config.default_timeout_ms {
        gate_config.default_timeout = Some(Duration::from_millis(ms));
    }
    let mut b = gate_config.builder().map_err(|e| format!("gate: {e}"))?;
    let keys = match (&config.token_keys, gate_config.token_keys.is_some()) {
        (Some(text), _) => Some(signoff::TokenKeys::parse(text).map_err(|e| format!("token_keys: {e}"))?),
        (None, true) => None,
        (None, false) => Some(
            signoff::TokenKeys::new("mcp-proxy", signoff::Secret::generate())
                .map_err(|e| format!("token keys: {e}"))?,
        ),
    };
    if let Some(k) = keys {
        b = b.tokens(k);
    }
    b.build().map_err(|e| format!("gate: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxy's `default_timeout_ms` is checked by the core like the gate's own: a zero (every
    /// call timed out at once) or a timeout of years used to be taken as given.
    #[test]
    fn the_default_timeout_is_checked_by_the_core() {
        for (ms, ok) in [("0", false), ("1", true), ("2592000000", true), ("2592000001", false)] {
            let text = format!(r#"{{"upstreams": [{{"name": "r", "command": "x"}}], "default_timeout_ms": {ms}}}"#);
            let config = ProxyConfig::from_json(&text, "c").unwrap();
            match build_gate(&config) {
                Ok(g) => {
                    assert!(ok, "{ms} accepted");
                    g.close();
                }
                Err(e) => assert!(!ok && e.contains("default_timeout_ms"), "{ms}: {e}"),
            }
        }
    }

    fn failed(error: &str, edited: bool) -> ToolResult {
        let mut r = pending_elsewhere("up__write", Uuid::nil(), None);
        (r.status, r.error, r.edited) = (ToolStatus::Failed, Some(error.into()), edited);
        r.arguments = Some(json!({"text": "b"}));
        r.content = "The tool `up__write` ran and failed: ...".into();
        r
    }

    #[test]
    fn what_the_model_reads_of_a_call_that_did_not_or_may_not_have_run() {
        let never = format!("{NOT_DELIVERED}: broken pipe");
        assert_eq!(told(failed(&never, false)).content, format!("The call to `up__write` did not run: {never}."));
        let lost = told(failed(OUTCOME_UNKNOWN, false)).content;
        assert_eq!(lost, format!("The call to `up__write` may or may not have run: {OUTCOME_UNKNOWN}. {CHECK_FIRST}"));
        // Over HTTP, a call the server received and then failed to answer.
        let answered_badly = format!("{SENT_UNKNOWN}: HTTP 500");
        assert_eq!(
            told(failed(&answered_badly, false)).content,
            format!("The call to `up__write` may or may not have run: {answered_badly}. {CHECK_FIRST}")
        );
        // No answer within the upstream's call timeout, or the client cancelled the call while the
        // upstream had it: cancelled there, outcome unknown.
        let late = format!("{TIMED_OUT_UNKNOWN} (no answer within 300 ms)");
        assert_eq!(
            told(failed(&late, false)).content,
            format!("The call to `up__write` may or may not have run: {late}. {CHECK_FIRST}")
        );
        assert_eq!(
            told(failed(CANCELLED_UNKNOWN, false)).content,
            format!("The call to `up__write` may or may not have run: {CANCELLED_UNKNOWN}. {CHECK_FIRST}")
        );
        let changed = told(failed(DEFINITION_CHANGED, false)).content;
        assert!(
            changed.starts_with(&format!("The call to `up__write` did not run: {DEFINITION_CHANGED}.")),
            "{changed}"
        );
        // Edited on the approval page: what was approved is said first.
        let edited = told(failed(OUTCOME_UNKNOWN, true)).content;
        assert_eq!(
            edited,
            format!(
                "Note: the user changed the arguments before approving them; approved: {{\"text\":\"b\"}}.\n{lost}"
            )
        );
        // JSON-RPC errors: refused before running, or unknown.
        let refused = rpc_error(&rmcp::ErrorData::invalid_params("text must be short", None));
        assert_eq!(
            told(failed(&refused, false)).content,
            "The call to `up__write` did not run: the upstream server refused the call: text must be short \
             (JSON-RPC error -32602)."
        );
        let erred = rpc_error(&rmcp::ErrorData::internal_error("disk full", None));
        assert_eq!(
            told(failed(&erred, false)).content,
            format!(
                "The call to `up__write` may or may not have run: {ERRED_UNKNOWN}: disk full (JSON-RPC error -32603). \
                 {CHECK_FIRST}"
            )
        );
        // Any other error is signoff's own words, untouched; so is an upstream's error that only
        // mentions these phrases.
        let other = failed(&format!("the tool said: {NOT_DELIVERED}"), false);
        assert_eq!(told(other).content, "The tool `up__write` ran and failed: ...");
    }
}
