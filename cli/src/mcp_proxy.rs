//! `signoff mcp-proxy`: the tools of upstream MCP servers, re-exposed under namespaced names and
//! gated by signoff (crate `signoff-mcp`), over stdio or Streamable HTTP.
//!
//! ```text
//! signoff mcp-proxy --config proxy.json
//! signoff mcp-proxy --config proxy.json --http 127.0.0.1:8931
//! ```
//!
//! Over stdio, stdout carries the MCP protocol and nothing else; every message of ours goes to
//! stderr. Over HTTP, the endpoint's URL is printed on stderr once it listens.

use crate::USAGE_OR_IO;
use signoff_mcp::{HttpServer, McpGate, ProxyConfig};

const USAGE: &str = "\
usage: signoff mcp-proxy --config <proxy.json> [--http <host:port>]

Starts or connects to the configured MCP servers and serves their tools as `<server>__<tool>`,
over stdio (the default) or Streamable HTTP. Tools without `readOnlyHint: true` ask for approval
before the upstream is contacted: through the client (elicitation, or the 2026-07-28 era's input
requests), or, when the client cannot be asked, through the gate's other approvers.

  --config <file>   JSON: {\"upstreams\": [{\"name\": \"fs\", \"command\": \"npx\", \"args\": [...]},
                               {\"name\": \"remote\", \"url\": \"https://host/mcp\", \"headers\": {...}}],
                    \"tools\": {\"fs__write_file\": {\"approval\": \"required\", \"risk\": 3, \"timeout_ms\": 60000}},
                    \"default_timeout_ms\": 120000, \"token_keys\": \"id:base64\", \"gate\": {GateConfig options},
                    \"http\": {\"listen\": \"127.0.0.1:8931\", \"path\": \"/mcp\", \"allowed_origins\": [...],
                              \"allowed_hosts\": [...], \"bearer_tokens\": {\"name\": \"token\"},
                              \"allow_non_loopback\": false},
                    \"console\": {console options: approver_keys, bind, ...}, \"approval_url\": \"https://...\"}
                    With `console` or `approval_url`, clients that can open a URL approve on that page.
  --http <addr>     Serve over Streamable HTTP on <addr> (sets http.listen; port 0 picks a free
                    port). Loopback only unless http.allow_non_loopback; requests carrying an
                    Origin not in http.allowed_origins, or a Host not allowed, are refused (403).
                    The URL is printed on stderr: \"listening on http://127.0.0.1:8931/mcp\".";

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
    let mut listen = None;
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
            "--http" => listen = Some(it.next().cloned().ok_or_else(|| format!("--http needs a value\n\n{USAGE}"))?),
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    let file = config_file.ok_or_else(|| format!("--config is required\n\n{USAGE}"))?;
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let mut config = ProxyConfig::from_json(&text, &file)?;
    if let Some(l) = listen {
        config.http.get_or_insert_with(Default::default).listen = Some(l);
    }
    // Refuse a bad address before starting any upstream.
    let http = config.http.clone().filter(|h| h.listen.is_some());
    if let Some(h) = &http {
        h.check()?;
    }
    // Over stdio one client talks to us one line at a time: a single-threaded runtime answers it
    // without waking another thread per message (latency; BENCHMARKS.md). HTTP serves many.
    let runtime = match &http {
        Some(_) => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        None => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    }
    .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let gate = McpGate::from_config(&config).await?;
        let result = match &http {
            Some(h) => {
                let server = HttpServer::bind(gate.clone(), h.listen.as_deref().unwrap_or_default(), h).await?;
                eprintln!("signoff mcp-proxy: listening on {}", server.url());
                server.serve(stopped()).await
            }
            None => signoff_mcp::serve_stdio(gate.clone()).await,
        };
        gate.gate().close();
        gate.gate().flush_audit();
        result
    })
}

/// Ctrl-C or SIGTERM: the HTTP server stops, and the audit is flushed.
async fn stopped() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
