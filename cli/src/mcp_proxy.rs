//! `signoff mcp-proxy`: the tools of upstream MCP servers, re-exposed under namespaced names and
//! gated by signoff (crate `signoff-mcp`), over stdio or Streamable HTTP.
//!
//! ```text
//! signoff mcp-proxy --config proxy.json
//! signoff mcp-proxy --config proxy.json --http 127.0.0.1:8931
//! ```
//!
//! Over stdio, stdout carries the MCP protocol and nothing else; every message of ours goes to
//! stderr. Over HTTP, the endpoint's URL is printed on stderr once it listens. It serves until
//! the client goes away (stdio) or a signal stops it (SIGINT, SIGTERM, SIGHUP: [`crate::stop`]);
//! then the gate is closed and its audit log flushed, and it exits 0.

use crate::USAGE_OR_IO;
use signoff_mcp::{HttpServer, McpGate, ProxyConfig};
use std::ffi::OsString;
use std::path::PathBuf;

/// How long a stopping proxy waits for the tool calls still running.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

const USAGE: &str = "\
usage: signoff mcp-proxy --config <proxy.json> [--http <host:port>]

Starts or connects to the configured MCP servers and serves their tools as `<server>__<tool>`,
over stdio (the default) or Streamable HTTP. Tools whose names do not say they read (or, from an
upstream with \"trust_annotations\": true, that are not marked `readOnlyHint: true`) ask for approval
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
                    The URL is printed on stderr: \"listening on http://127.0.0.1:8931/mcp\".

It serves until the client closes stdin (stdio), or SIGINT, SIGTERM or SIGHUP: then pending calls
are cancelled (`shutdown`), the audit log is flushed, and it exits 0.";

pub(crate) fn main(args: &[OsString]) -> u8 {
    match run(args) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("signoff mcp-proxy: {message}");
            USAGE_OR_IO
        }
    }
}

fn run(args: &[OsString]) -> Result<(), String> {
    let mut config_file: Option<PathBuf> = None;
    let mut listen = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match crate::text(arg, "argument")? {
            "-h" | "--help" => {
                // stdout may be a client's pipe; help goes where a person reads it.
                eprintln!("{USAGE}");
                return Ok(());
            }
            "--config" => {
                config_file = Some(it.next().ok_or_else(|| format!("--config needs a value\n\n{USAGE}"))?.into())
            }
            "--http" => {
                let value = it.next().ok_or_else(|| format!("--http needs a value\n\n{USAGE}"))?;
                listen = Some(crate::text(value, "--http")?.to_owned())
            }
            other => {
                return Err(format!(
                    "{}\n\n{USAGE}",
                    crate::unknown("argument", other, &["--config", "--http", "--help"])
                ));
            }
        }
    }
    let file = config_file.ok_or_else(|| format!("--config is required\n\n{USAGE}"))?;
    let name = file.display().to_string();
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut config = ProxyConfig::from_json(&text, &name)?;
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
        // SIGINT, SIGTERM or SIGHUP from here on: stop serving, then close the gate and flush
        // the audit log below, as when the client goes away (crate::stop).
        let mut stop = crate::stop::signals()?;
        let gate = tokio::select! {
            gate = McpGate::from_config(&config) => gate?,
            () = &mut stop => {
                signoff::report!("signoff mcp-proxy: stopped while starting the upstreams");
                return Ok(());
            }
        };
        if !config.approvable_elsewhere() {
            // Only clients that show forms can approve: for the others a request would wait where
            // nobody can see it. Said now, and to the model at each such call.
            gate.refuse_unaskable_calls();
            signoff::report!("signoff mcp: warning: {}", signoff_mcp::NOWHERE_ELSE);
        }
        let result = match &http {
            Some(h) => {
                let server = HttpServer::bind(gate.clone(), h.listen.as_deref().unwrap_or_default(), h).await?;
                signoff::report!("signoff mcp-proxy: listening on {}", server.url());
                server.serve(stop).await
            }
            None => tokio::select! {
                served = signoff_mcp::serve_stdio(gate.clone()) => served,
                () = &mut stop => Ok(()),
            },
        };
        // Pending calls are cancelled (`shutdown`) and audited. Tools already running are not
        // interrupted: they get a grace period to end, so their results are recorded (a second
        // signal stops the wait). Then the audit log is written out.
        gate.gate().close();
        let running = gate.gate().running_tools();
        if running > 0 {
            signoff::report!("signoff mcp-proxy: waiting up to {STOP_GRACE:?} for {running} running tool call(s) to end");
            let mut again = crate::stop::signals()?;
            tokio::select! {
                ended = tokio::time::timeout(STOP_GRACE, gate.gate().tools_finished()) => if ended.is_err() {
                    signoff::report!("signoff mcp-proxy: stopped with tool calls still running (not recorded as ended)");
                },
                () = &mut again => signoff::report!("signoff mcp-proxy: stopped without waiting for the running tool calls"),
            }
        }
        gate.gate().flush_audit();
        result
    })
}
