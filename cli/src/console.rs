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
//! `--sign-in`, then serves until SIGINT, SIGTERM or SIGHUP ([`crate::stop`]): then it stops
//! listening, closes the gate, flushes the audit log and exits 0.

use crate::USAGE_OR_IO;
use signoff::{Gate, GateConfig, Naming};
use signoff_console::{Console, ConsoleOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

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
--tools: for other tools it accepts approvals and denials, and refuses edits (`unknown_tool`).

It serves until SIGINT, SIGTERM or SIGHUP: then it stops listening, closes the gate, flushes the
audit log and exits 0.";

pub(crate) fn main(args: &[OsString]) -> u8 {
    match run(args) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("signoff console: {message}");
            USAGE_OR_IO
        }
    }
}

fn run(args: &[OsString]) -> Result<(), String> {
    let mut gate_file: Option<PathBuf> = None;
    let mut options = ConsoleOptions { bind: "127.0.0.1:8080".parse().expect("a valid address"), ..Default::default() };
    let mut sign_ins = Vec::new();
    let mut tools_file: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        // File names are taken as given (they need not be UTF-8); everything else is text.
        let mut path =
            |name: &str| it.next().map(PathBuf::from).ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"));
        match crate::text(arg, "argument")? {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--gate" => gate_file = Some(path("--gate")?),
            "--approver-keys" => options.approver_keys_file = Some(path("--approver-keys")?),
            "--tools" => tools_file = Some(path("--tools")?),
            "--allow-remote" => options.allow_remote = true,
            flag @ ("--bind" | "--public-origin" | "--sign-in" | "--title") => {
                let value = it.next().ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))?;
                let value = crate::text(value, flag)?.to_owned();
                match flag {
                    "--bind" => {
                        options.bind = value.parse().map_err(|_| format!("--bind takes addr:port, got {value:?}"))?
                    }
                    "--public-origin" => options.public_origin = Some(value),
                    "--sign-in" => sign_ins.push(value),
                    _ => options.title = value,
                }
            }
            other => {
                let known = [
                    "--gate",
                    "--approver-keys",
                    "--tools",
                    "--allow-remote",
                    "--bind",
                    "--public-origin",
                    "--sign-in",
                    "--title",
                    "--help",
                ];
                return Err(format!("{}\n\n{USAGE}", crate::unknown("argument", other, &known)));
            }
        }
    }
    let gate_file = gate_file.ok_or_else(|| format!("--gate is required\n\n{USAGE}"))?;
    let gate_name = gate_file.display().to_string();
    let text = std::fs::read_to_string(&gate_file).map_err(|e| format!("cannot read {gate_name}: {e}"))?;
    let json = signoff::json::from_str(&text, &gate_name).map_err(|e| e.to_string())?;
    let config = GateConfig::from_json(&json, Naming::Snake).map_err(|e| e.to_string())?;
    if config.store_url.is_none() {
        return Err(format!(
            "{gate_name}: `store_url` is required: agents reach a console in another process only through a shared PostgreSQL store"
        ));
    }
    if config.token_keys.is_none() {
        return Err(format!("{gate_name}: `token_keys` is required (decisions and sign-in links are signed)"));
    }
    // Signals are taken over before anything is audited: from here SIGINT, SIGTERM or SIGHUP
    // closes the gate and flushes its audit log (crate::stop). One sent while the gate connects
    // to its store (bounded by the store's timeouts) stops the console as soon as it is up.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let stop = {
        let _entered = runtime.enter();
        crate::stop::signals()?
    };
    let gate = config.build().map_err(|e| e.to_string())?;
    let served = serve(&gate, options, tools_file, &sign_ins).map(|console| {
        runtime.block_on(stop);
        // The port first (nothing more is decided here), then the gate: its audit log is flushed.
        console.close();
    });
    gate.close();
    gate.flush_audit();
    served
}

/// Registers the tools, starts the console and prints where it is; the caller waits.
fn serve(gate: &Gate, options: ConsoleOptions, tools: Option<PathBuf>, sign_ins: &[String]) -> Result<Console, String> {
    if let Some(path) = tools {
        let name = path.display().to_string();
        for spec in read_tools(&path, &name)? {
            gate.register_spec(spec).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    let console = Console::start(gate.clone(), options).map_err(|e| e.to_string())?;
    println!("console: {}", console.url());
    for name in sign_ins {
        println!("sign-in link for {name}: {}", console.sign_in_link(name).map_err(|e| e.to_string())?);
    }
    // Scripts wait for this line.
    println!("ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    Ok(console)
}

/// A JSON list of tool specs (no executors: this process never runs them); `name` is the path
/// as shown in messages.
fn read_tools(path: &Path, name: &str) -> Result<Vec<signoff::ToolSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let list = match signoff::json::from_str(&text, name).map_err(|e| e.to_string())? {
        serde_json::Value::Array(list) => list,
        _ => return Err(format!("{name}: expected a JSON list of tool definitions")),
    };
    list.into_iter().map(|v| signoff::ToolSpec::from_json(v).map_err(|e| format!("{name}: {e}"))).collect()
}
