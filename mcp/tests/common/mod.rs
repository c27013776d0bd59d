//! What the MCP gate's Rust tests share: in-process upstreams that count their runs, rmcp's
//! client answering elicitations ([`client`]), and the wiring of upstream, gate and client.
#![allow(dead_code)]

pub mod client;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use signoff::{Gate, Secret, TokenKeys};
use signoff_mcp::{McpGate, Upstream, UpstreamClient};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// An upstream with one tool, `write` (no annotations: destructive and open-world by the spec),
/// that counts its runs.
#[derive(Clone, Default)]
pub struct Counter(pub Arc<AtomicUsize>, pub bool);

impl Counter {
    /// An upstream whose tool never answers (the test then kills it mid-call).
    pub fn hanging() -> Self {
        Counter(Default::default(), true)
    }
}

impl ServerHandler for Counter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let Value::Object(schema) = schema else { unreachable!() };
        Ok(ListToolsResult::with_all_items(vec![Tool::new("write", "Writes", Arc::new(schema))]))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        if self.1 {
            std::future::pending::<()>().await;
        }
        let text = req.arguments.and_then(|a| a.get("text").cloned()).unwrap_or_default();
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("wrote {text} (run {n})"))]).into())
    }
}

/// An upstream whose `write` never answers by itself: it counts its runs, and the calls the
/// proxy cancelled (`notifications/cancelled`, which rmcp turns into the handler's cancellation).
#[derive(Clone, Default)]
pub struct Stuck {
    pub runs: Arc<AtomicUsize>,
    pub cancelled: Arc<AtomicUsize>,
}

impl ServerHandler for Stuck {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        req: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Counter::default().list_tools(req, cx).await
    }

    async fn call_tool(
        &self,
        _req: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        cx.ct.cancelled().await;
        self.cancelled.fetch_add(1, Ordering::SeqCst);
        Err(ErrorData::internal_error("cancelled", None))
    }
}

/// Waits (up to 10 s) until `n` reads `want`; false if it never does.
pub async fn reaches(n: &AtomicUsize, want: usize) -> bool {
    for _ in 0..1000 {
        if n.load(Ordering::SeqCst) == want {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

/// An upstream whose `write` answers with JSON-RPC errors: `"bad"` is refused as invalid params
/// before anything runs; `"crash"` runs (counted) and then fails with an internal error.
#[derive(Clone, Default)]
pub struct Erring(pub Arc<AtomicUsize>);

impl ServerHandler for Erring {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        req: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Counter::default().list_tools(req, cx).await
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = req.arguments.and_then(|a| a.get("text").cloned()).unwrap_or_default();
        if text == "bad" {
            return Err(ErrorData::invalid_params("text may not be \"bad\"", None));
        }
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(ErrorData::internal_error("the disk filled up half way", None))
    }
}

/// The text of a result's content.
pub fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join(" ")
}

/// An upstream whose one tool's description changes when told to (`version`), announcing it
/// with `notifications/tools/list_changed` when the test says so.
#[derive(Clone, Default)]
pub struct Shifty {
    pub runs: Arc<AtomicUsize>,
    pub version: Arc<AtomicUsize>,
    /// How long `tools/list` takes, in milliseconds.
    pub list_delay_ms: Arc<AtomicUsize>,
    /// Also lists a tool whose name hides a zero-width space (`wr\u{200b}ite`).
    pub odd_name: Arc<AtomicBool>,
    /// No longer lists `write`.
    pub gone: Arc<AtomicBool>,
}

impl ServerHandler for Shifty {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let delay = self.list_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay as u64)).await;
        }
        let Value::Object(schema) = json!({"type": "object"}) else { unreachable!() };
        let description = format!("Writes (version {})", self.version.load(Ordering::SeqCst));
        let schema = Arc::new(schema);
        let mut tools = vec![Tool::new("write", description, schema.clone())];
        if self.gone.load(Ordering::SeqCst) {
            tools.clear();
        }
        if self.odd_name.load(Ordering::SeqCst) {
            tools.push(Tool::new("wr\u{200b}ite", "Looks like write", schema));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        _req: CallToolRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]).into())
    }
}

/// A gate with token keys (which the MCP gate needs).
pub fn keyed() -> signoff::GateBuilder {
    Gate::builder().tokens(TokenKeys::new("k1", Secret::generate()).unwrap())
}

/// `tools/call` of the upstream's `write` (as the client sees it, `up__write`) with `{"text": text}`.
pub fn write(text: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("up__write").with_arguments(json!({"text": text}).as_object().unwrap().clone())
}

type Running<R, S> = RunningService<R, S>;

/// An upstream served in process, the gate's proxy over it (upstream `up`), and a client
/// connected to the proxy (over in-memory pipes).
pub struct Wired<S: ServerHandler, C: rmcp::Service<RoleClient>> {
    pub mcp: McpGate,
    pub server: Running<RoleServer, S>,
    /// The proxy's connection, served until the client goes away.
    pub proxy: tokio::task::JoinHandle<()>,
    pub client: Running<RoleClient, C>,
}

/// Wires `upstream`, an [`McpGate`] on `gate`, and `client` speaking through `lifecycle`.
pub async fn wire<S, C>(upstream: S, gate: &Gate, client: C, lifecycle: ClientLifecycleMode) -> Wired<S, C>
where
    S: ServerHandler + Clone,
    C: rmcp::Service<RoleClient>,
{
    wire_timed(upstream, gate, client, lifecycle, None).await
}

/// [`wire`], the upstream's calls waiting `call_timeout` for an answer (the default otherwise).
pub async fn wire_timed<S, C>(
    upstream: S,
    gate: &Gate,
    client: C,
    lifecycle: ClientLifecycleMode,
    call_timeout: Option<std::time::Duration>,
) -> Wired<S, C>
where
    S: ServerHandler + Clone,
    C: rmcp::Service<RoleClient>,
{
    let (up_server, up_client) = tokio::io::duplex(64 * 1024);
    let (server, up) = tokio::join!(upstream.serve(up_server), UpstreamClient::default().serve(up_client));
    let mut up = Upstream::new("up", up.unwrap());
    if let Some(limit) = call_timeout {
        up = up.call_timeout(limit);
    }
    let mcp = McpGate::new(gate.clone(), vec![up], &BTreeMap::new()).await.unwrap();
    let (down_server, down_client) = tokio::io::duplex(64 * 1024);
    // Served in a task of its own: in the 2026-07-28 era rmcp's server answers `server/discover`
    // and returns only with the first call, after the client has connected.
    let connection = mcp.connection();
    let proxy = tokio::spawn(async move {
        let running = connection.serve(down_server).await.expect("the proxy serves");
        let _ = running.waiting().await;
    });
    let client = client.serve_with_lifecycle(down_client, lifecycle).await.expect("the client connects");
    Wired { mcp, server: server.unwrap(), proxy, client }
}
