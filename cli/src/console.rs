//! `signoff console`: the browser approval console as a process of its own, for agents that run
//! elsewhere and share a PostgreSQL store with it.
//!
//! ```text
//! signoff console --gate gate.json [--bind 127.0.0.1:8080] [--allow-remote]
//!                 [--public-origin https://approve.example.com] [--approver-keys FILE]
//!                 [--sign-in NAME]... [--title TEXT] [--tools specs.json]
//! ```
//!
//! `gate.json` holds the core's gate options (`GateConfig`, snake_case, as in every signoff
//! language); it must name the shared store (`store_url`) and token keys (`token_keys`, the
//! `key_id:base64secret` text). The console prints its address and one sign-in link per
//! `--sign-in`, then serves until it is stopped.

use crate::USAGE_OR_IO;
use signoff::{GateConfig, Naming};
use signoff_console::{Console, ConsoleOptions};

const USAGE: &str = "\
usage: signoff console --gate <gate.json> [--bind <addr:port>] [--allow-remote]
                       [--public-origin <url>] [--approver-keys <file>] [--sign-in <name>]...
                       [--title <text>] [--tools <specs.json>]

Serves the browser approval console for the agents that share the gate's PostgreSQL store.

  --gate <file>           the gate's options as JSON (GateConfig, snake_case): `store_url` (the
                          shared store) and `token_keys` are required; `approvers`,
                          `audit_in_store`, `store_schema` ... as for any gate
  --bind <addr:port>      where to listen (default 127.0.0.1:8080; port 0 picks a free one)
  --allow-remote          allow a non-loopback --bind (put it behind TLS)
  --public-origin <url>   the origin people reach it at behind a proxy (https://... sets Secure cookies)
  --approver-keys <file>  people who sign in with a name and key (`name:key` or `name:sha256:<hex>` lines)
  --sign-in <name>        print a single-use sign-in link for this person (repeatable)
  --title <text>          the page title
  --tools <specs.json>    the agents' tool definitions (a JSON list of ToolSpec objects, as
                          `register_spec` takes them): the console shows their descriptions and
                          hints, and checks edited arguments against their schemas

Edits are checked against the tool's schema, which a console process has only for the tools in
--tools: for other tools it accepts approvals and denials, and refuses edits (`unknown_tool`).";

pub(crate) fn main(args: &[String]) -> u8 {
    match run(args) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("signoff console: {message}");
            USAGE_OR_IO
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let mut gate_file = None;
    let mut options = ConsoleOptions { bind: "127.0.0.1:8080".parse().expect("a valid address"), ..Default::default() };
    let mut sign_ins = Vec::new();
    let mut tools_file = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"));
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--gate" => gate_file = Some(value("--gate")?),
            "--bind" => {
                let v = value("--bind")?;
                options.bind = v.parse().map_err(|_| format!("--bind takes addr:port, got {v:?}"))?;
            }
            "--allow-remote" => options.allow_remote = true,
            "--public-origin" => options.public_origin = Some(value("--public-origin")?),
            "--approver-keys" => options.approver_keys_file = Some(value("--approver-keys")?.into()),
            "--sign-in" => sign_ins.push(value("--sign-in")?),
            "--title" => options.title = value("--title")?,
            "--tools" => tools_file = Some(value("--tools")?),
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    let gate_file = gate_file.ok_or_else(|| format!("--gate is required\n\n{USAGE}"))?;
    let text = std::fs::read_to_string(&gate_file).map_err(|e| format!("cannot read {gate_file}: {e}"))?;
    let json = signoff::json::from_str(&text, &gate_file).map_err(|e| e.to_string())?;
    let config = GateConfig::from_json(&json, Naming::Snake).map_err(|e| e.to_string())?;
    if config.store_url.is_none() {
        return Err(format!(
            "{gate_file}: `store_url` is required: agents reach a console in another process only through a shared PostgreSQL store"
        ));
    }
    if config.token_keys.is_none() {
        return Err(format!("{gate_file}: `token_keys` is required (decisions and sign-in links are signed)"));
    }
    let gate = config.build().map_err(|e| e.to_string())?;
    if let Some(path) = tools_file {
        for spec in read_tools(&path)? {
            gate.register_spec(spec).map_err(|e| format!("{path}: {e}"))?;
        }
    }
    let console = Console::start(gate, options).map_err(|e| e.to_string())?;
    println!("console: {}", console.url());
    for name in &sign_ins {
        println!("sign-in link for {name}: {}", console.sign_in_link(name).map_err(|e| e.to_string())?);
    }
    // Scripts wait for this line.
    println!("ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        std::thread::park();
    }
}

/// A JSON list of tool specs (no executors: this process never runs them).
fn read_tools(path: &str) -> Result<Vec<signoff::ToolSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let list = match signoff::json::from_str(&text, path).map_err(|e| e.to_string())? {
        serde_json::Value::Array(list) => list,
        _ => return Err(format!("{path}: expected a JSON list of tool definitions")),
    };
    list.into_iter().map(|v| signoff::ToolSpec::from_json(v).map_err(|e| format!("{path}: {e}"))).collect()
}
