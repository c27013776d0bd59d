//! Latency of `tools/call` over stdio, with rmcp's client: the upstream directly against
//! `signoff mcp-proxy` in front of it, for an ungated (read-only) call and for a gated call that
//! the client approves at once (legacy elicitation, and the 2026-07-28 era's two rounds).
//!
//! ```text
//! make bench-mcp
//! # or: cargo build --release -p signoff-cli -p signoff-mcp --example bench
//! #     target/release/examples/bench target/release/signoff mcp/node_modules/.bin/mcp-server-filesystem [n]
//! ```

#[path = "../tests/common/client.rs"]
mod client;

use client::Answering;
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, JsonObject, ProtocolVersion};
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use std::time::Instant;

fn percentiles(mut v: Vec<u128>) -> (f64, f64, f64) {
    v.sort_unstable();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
    (p(0.5), p(0.9), p(0.99))
}

type Client = rmcp::service::RunningService<RoleClient, Answering>;

/// A client that approves every elicitation at once, speaking `version` to `program`.
async fn connect(version: ProtocolVersion, program: &str, args: &[&str]) -> Client {
    let mut command = tokio::process::Command::new(program);
    command.args(args).stderr(std::process::Stdio::null());
    Answering::approve(version).connect(TokioChildProcess::new(command).expect("spawn")).await.expect("initialize")
}

/// One case: a client and the call it makes.
struct Case {
    label: &'static str,
    client: Client,
    tool: &'static str,
    arguments: JsonObject,
    times: Vec<u128>,
}

impl Case {
    async fn call(&mut self, record: bool) {
        let started = Instant::now();
        let p = CallToolRequestParams::new(self.tool).with_arguments(self.arguments.clone());
        let r = self.client.call_tool(p).await.expect("tools/call");
        if record {
            self.times.push(started.elapsed().as_nanos());
        }
        assert_ne!(r.is_error, Some(true), "{}: {r:?}", self.label);
    }

    fn p50(&self) -> f64 {
        let (p50, p90, p99) = percentiles(self.times.clone());
        println!("{:<52} p50 {p50:>8.1} µs  p90 {p90:>8.1} µs  p99 {p99:>8.1} µs", self.label);
        p50
    }
}

/// Prints each case's percentiles under a heading; returns the p50s.
fn summary(heading: &str, cases: &[Case; 5]) -> [f64; 5] {
    println!("{heading}:");
    cases.each_ref().map(Case::p50)
}

/// The median of per-round differences `a[i] - b[i]` (µs): the two cases measured back to back.
fn paired(a: &Case, b: &Case) -> f64 {
    let mut d: Vec<i128> = a.times.iter().zip(&b.times).map(|(x, y)| *x as i128 - *y as i128).collect();
    d.sort_unstable();
    d[d.len() / 2] as f64 / 1000.0
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
    println!("{n} calls per case (after 50 warm-up calls), rmcp client over stdio");
    let fs_args = [box_dir.as_str()];
    let case = |label, client, tool, arguments: &JsonObject| Case {
        label,
        client,
        tool,
        arguments: arguments.clone(),
        times: Vec::with_capacity(n),
    };
    let mut cases = [
        case(
            "direct list_allowed_directories",
            connect(legacy.clone(), fs, &fs_args).await,
            "list_allowed_directories",
            &read,
        ),
        case(
            "proxy  fs__list_allowed_directories (ungated)",
            connect(legacy.clone(), signoff, &proxy).await,
            "fs__list_allowed_directories",
            &read,
        ),
        case("direct write_file", connect(legacy.clone(), fs, &fs_args).await, "write_file", &write),
        case(
            "proxy  fs__write_file (gated, legacy elicitation)",
            connect(legacy.clone(), signoff, &proxy).await,
            "fs__write_file",
            &write,
        ),
        case(
            "proxy  fs__write_file (gated, 2026-07-28 two rounds)",
            connect(modern.clone(), signoff, &proxy).await,
            "fs__write_file",
            &write,
        ),
    ];
    // First each case on its own, n calls back to back (a client busy with one server); then the
    // cases interleaved, one call each per round, so that drift in the machine's load hits every
    // case alike and the proxy can be compared with the upstream round by round.
    for c in cases.iter_mut() {
        for i in 0..n + 50 {
            c.call(i >= 50).await;
        }
    }
    let back_to_back = summary("back to back", &cases);
    for c in cases.iter_mut() {
        c.times.clear();
    }
    for round in 0..n + 50 {
        for c in cases.iter_mut() {
            c.call(round >= 50).await;
        }
    }
    let interleaved = summary("interleaved", &cases);
    println!();
    for (what, [direct_read, proxied_read, direct_write, legacy_write, modern_write]) in
        [("back to back", back_to_back), ("interleaved", interleaved)]
    {
        let ungated = proxied_read - direct_read;
        println!("{what}:");
        println!("  ungated proxy overhead (p50 - p50):               {ungated:>8.1} µs (target ≤ 200 µs)");
        println!(
            "  gated beyond the ungated proxy call, legacy:      {:>8.1} µs (target ≤ 1,000 µs)",
            legacy_write - direct_write - ungated
        );
        println!(
            "  gated beyond the ungated proxy call, 2026-07-28:  {:>8.1} µs (target ≤ 1,000 µs)",
            modern_write - direct_write - ungated
        );
    }
    println!(
        "interleaved, ungated proxy overhead as the median of paired rounds: {:>8.1} µs",
        paired(&cases[1], &cases[0])
    );
    for c in cases {
        let _ = c.client.cancel().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
