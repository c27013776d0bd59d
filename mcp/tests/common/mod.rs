//! What the MCP gate's Rust tests share: an in-process upstream that counts its runs.
#![allow(dead_code)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The text of a result's content.
pub fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join(" ")
}
