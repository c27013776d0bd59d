//! Latency of `tools/call` over stdio, with rmcp's client: the upstream directly against
//! `signoff mcp-proxy` in front of it, for an ungated (read-only) call and for a gated call that
//! the client approves at once (legacy elicitation, and the 2026-07-28 era's two rounds).
//!
//! ```text
//! cargo build --release -p signoff-cli
//! cargo run --release -p signoff-mcp --example bench -- target/release/signoff \
//!     mcp/node_modules/.bin/mcp-server-filesystem [n]
//! ```

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, JsonObject, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde_json::json;
use std::time::Instant;

/// A client that approves every elicitation at once.
#[derive(Clone)]
struct AutoApprove {
    version: ProtocolVersion,
}

impl ClientHandler for AutoApprove {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::builder().enable_elicitation().build(), Implementation::new("bench", "0"))
            .with_protocol_version(self.version.clone())
    }

    async fn create_elicitation(
        &self,
        _req: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": "approve"})))
    }
}

fn percentiles(mut v: Vec<u128>) -> (f64, f64, f64) {
    v.sort_unstable();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
    (p(0.5), p(0.9), p(0.99))
}

async fn run(
    label: &str,
    version: ProtocolVersion,
    program: &str,
    args: &[&str],
    tool: &str,
    arguments: &JsonObject,
    n: usize,
) -> f64 {
    let lifecycle = if version.has_initialize() {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Discover { preferred_versions: vec![version.clone()] }
    };
    let mut command = tokio::process::Command::new(program);
    command.args(args).stderr(std::process::Stdio::null());
    let client = AutoApprove { version }
        .serve_with_lifecycle(TokioChildProcess::new(command).expect("spawn"), lifecycle)
        .await
        .expect("initialize");
    let mut times = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let started = Instant::now();
        let p = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
        let r = client.call_tool(p).await.expect("tools/call");
        if i >= 50 {
            times.push(started.elapsed().as_nanos());
        }
        assert_ne!(r.is_error, Some(true), "{label}: {r:?}");
    }
    let (p50, p90, p99) = percentiles(times);
    println!("{label:<50} p50 {p50:>8.1} µs  p90 {p90:>8.1} µs  p99 {p99:>8.1} µs");
    let _ = client.cancel().await;
    p50
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let (Some(signoff), Some(fs)) = (argv.get(1), argv.get(2)) else {
        eprintln!("usage: bench <signoff binary> <mcp-server-filesystem> [n]");
        std::process::exit(2);
    };
    let n: usize = argv.get(3).map_or(300, |s| s.parse().expect("n"));
    let dir = std::env::temp_dir().join(format!("signoff-mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let box_dir = dir.to_str().unwrap().to_owned();
    let config = dir.join("proxy.json");
    std::fs::write(
        &config,
        json!({"upstreams": [{"name": "fs", "command": fs, "args": [box_dir]}], "default_timeout_ms": 60000})
            .to_string(),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let proxy = ["mcp-proxy", "--config", config];
    let read = JsonObject::new();
    let write = json!({"path": format!("{box_dir}/bench.txt"), "content": "x"}).as_object().unwrap().clone();
    let (legacy, modern) = (ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28);
    println!("{n} calls each (after 50 warm-up calls), rmcp client over stdio");
    let direct_read =
        run("direct list_allowed_directories", legacy.clone(), fs, &[&box_dir], "list_allowed_directories", &read, n)
            .await;
    let proxied_read = run(
        "proxy  fs__list_allowed_directories (ungated)",
        legacy.clone(),
        signoff,
        &proxy,
        "fs__list_allowed_directories",
        &read,
        n,
    )
    .await;
    let direct_write = run("direct write_file", legacy.clone(), fs, &[&box_dir], "write_file", &write, n).await;
    let legacy_write = run(
        "proxy  fs__write_file (gated, legacy elicitation)",
        legacy.clone(),
        signoff,
        &proxy,
        "fs__write_file",
        &write,
        n,
    )
    .await;
    let modern_write = run(
        "proxy  fs__write_file (gated, 2026-07-28 two rounds)",
        modern.clone(),
        signoff,
        &proxy,
        "fs__write_file",
        &write,
        n,
    )
    .await;
    println!();
    println!("ungated proxy overhead (p50):                  {:>8.1} µs (target ≤ 200 µs)", proxied_read - direct_read);
    let ungated_overhead = proxied_read - direct_read;
    println!(
        "gated beyond the ungated proxy call, legacy:    {:>8.1} µs (target ≤ 1,000 µs)",
        legacy_write - direct_write - ungated_overhead
    );
    println!(
        "gated beyond the ungated proxy call, 2026-07-28: {:>7.1} µs (target ≤ 1,000 µs)",
        modern_write - direct_write - ungated_overhead
    );
    let _ = std::fs::remove_dir_all(&dir);
}
