#![allow(dead_code)]
use serde_json::{Value, json};
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn path_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false})
}

/// A gate with a few representative tools. `runs` counts executions of `delete_file`.
pub fn gate_with(builder: GateBuilder, runs: Arc<AtomicUsize>) -> Gate {
    let r = runs.clone();
    builder
        .tool(Tool::builder("read_file").description("Reads a file").parameters(path_schema()).executor(|a| async move { Ok(json!({"content": format!("contents of {}", a["path"].as_str().unwrap_or(""))})) }).build())
        .tool(
            Tool::builder("delete_file")
                .description("Deletes a file")
                .parameters(path_schema())
                .editable(true)
                .executor(move |a| {
                    let r = r.clone();
                    async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        Ok(json!({"deleted": a["path"]}))
                    }
                })
                .build(),
        )
        .tool(
            Tool::builder("write_file")
                .description("Writes a file")
                .parameters(json!({"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}, "required": ["path"]}))
                .approval(ApprovalMode::NotRequired)
                .rule(ArgRule::PathOutside { pointer: "/path".into(), prefixes: vec!["/tmp".into()] })
                .executor(|_| async { Ok(json!("written")) })
                .build(),
        )
        .tool(Tool::builder("send_email").description("Sends an email").timeout(std::time::Duration::from_secs(5)).build())
        .build()
        .unwrap()
}

pub fn gate() -> Gate {
    gate_with(Gate::builder(), Arc::new(AtomicUsize::new(0)))
}

/// The next confirmation request on the subscription (skipping other events).
pub async fn next_request(sub: &mut Subscription) -> Arc<ConfirmationRequest> {
    loop {
        match sub.recv().await.expect("bus closed") {
            Ok(Event::ConfirmationRequest(r)) => return r,
            Ok(_) => continue,
            Err(l) => panic!("unexpected lag: {l}"),
        }
    }
}

/// Collects every event currently buffered (without waiting for new ones).
pub async fn drain(sub: &mut Subscription) -> Vec<Event> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(std::time::Duration::from_millis(1), sub.recv()).await {
            Ok(Some(Ok(e))) => out.push(e),
            _ => return out,
        }
    }
}

pub fn del(path: &str) -> ToolCall {
    ToolCall::new("delete_file", json!({"path": path}))
}
