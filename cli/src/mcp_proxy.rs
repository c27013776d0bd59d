//! `signoff mcp-proxy`: the tools of upstream MCP servers, re-exposed over stdio under namespaced
//! names and gated by signoff (crate `signoff-mcp`).
//!
//! ```text
//! signoff mcp-proxy --config proxy.json
//! ```
//!
//! stdout carries the MCP protocol and nothing else; every message of ours goes to stderr.

use crate::USAGE_OR_IO;
use signoff_mcp::{McpGate, ProxyConfig};

const USAGE: &str = "\
usage: signoff mcp-proxy --config <proxy.json>

Starts the configured MCP servers as child processes and serves their tools over stdio as
`<server>__<tool>`. Tools without `readOnlyHint: true` ask for approval before the upstream is
contacted: through the client (elicitation, or the 2026-07-28 era's input requests), or, when the
client cannot be asked, through the gate's other approvers.

  --config <file>   JSON: {\"upstreams\": [{\"name\": \"fs\", \"command\": \"npx\", \"args\": [...]}],
                    \"tools\": {\"fs__write_file\": {\"approval\": \"required\", \"risk\": 3, \"timeout_ms\": 60000}},
                    \"default_timeout_ms\": 120000, \"token_keys\": \"id:base64\", \"gate\": {GateConfig options},
                    \"console\": {console options: approver_keys, bind, ...}, \"approval_url\": \"https://...\"}
                    With `console` or `approval_url`, clients that can open a URL approve on that page.";

pub(crate) fn main(args: &[String]) -> u8 {
    match run(args) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("signoff mcp-proxy: {message}");
            USAGE_OR_IO
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let mut config_file = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                // stdout may be a client's pipe; help goes where a person reads it.
                eprintln!("{USAGE}");
                return Ok(());
            }
            "--config" => {
                config_file = Some(it.next().cloned().ok_or_else(|| format!("--config needs a value\n\n{USAGE}"))?)
            }
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    let file = config_file.ok_or_else(|| format!("--config is required\n\n{USAGE}"))?;
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let config = ProxyConfig::from_json(&text, &file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let gate = McpGate::from_config(&config).await?;
        let result = signoff_mcp::serve_stdio(gate.clone()).await;
        gate.gate().close();
        gate.gate().flush_audit();
        result
    })
}
