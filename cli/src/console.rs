//! `signoff console`: the browser approval console as a process of its own, for agents that run
//! in other processes and share a store with it.
//!
//! ```text
//! signoff console [--gate gate.json] [--bind 127.0.0.1:8080] [--allow-remote]
//!                 [--public-origin https://approve.example.com] [--approver-keys FILE]
//!                 [--sign-in NAME]... [--title TEXT] [--tools specs.json]
//! ```
//!
//! `gate.json` holds the core's gate options (`GateConfig`, snake_case, as in every signoff
//! language). Its `store_url` is the store the agents share: `sqlite:<path>` for agents on this
//! machine, `postgres://...` for agents on many hosts. Without one (or without `--gate`) it is
//! the one-machine store [`default_store`], which agents reach with the same `store_url`. Without
//! `token_keys` the console signs its sign-in links and decisions with a key made for the
//! process. The console prints its address, its store and one sign-in link per `--sign-in` (for
//! the user running it when neither `--sign-in` nor `--approver-keys` is given), then serves until
//! SIGINT, SIGTERM or SIGHUP ([`crate::stop`]): then it stops listening, closes the gate, flushes
//! the audit log and exits 0.

use crate::USAGE_OR_IO;
use signoff::{Gate, GateConfig, Naming};
use signoff_console::{Console, ConsoleOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

const USAGE: &str = "\
usage: signoff console [--gate <gate.json>] [--bind <addr:port>] [--allow-remote]
                       [--public-origin <url>] [--approver-keys <file>] [--sign-in <name>]...
                       [--title <text>] [--tools <specs.json>]

Serves the browser approval console for the agents that share its store: agents in other
processes of this machine through one SQLite file (the default), agents on other hosts through
PostgreSQL.

  --gate <file>           the gate's options as JSON (GateConfig, snake_case): `store_url` is the
                          agents' store, `sqlite:<path>` or `postgres://...` (default: the
                          one-machine store below); `token_keys`, `approvers`, `audit_path` ...
                          as for any gate
  --bind <addr:port>      where to listen (default 127.0.0.1:8080, or a free port when that one
                          is taken; port 0 picks a free one)
  --allow-remote          allow a non-loopback --bind (put it behind TLS)
  --public-origin <url>   the origin people reach it at behind a proxy (https://... sets Secure cookies)
  --approver-keys <file>  people who sign in with a name and key (`name:key` or `name:sha256:<hex>` lines;
                          `signoff keygen --approver <name>` prints one)
  --sign-in <name>        print a single-use sign-in link for this person (repeatable; without it and
                          without --approver-keys, one for the user running the console)
  --title <text>          the page title
  --tools <specs.json>    the agents' tool definitions (a JSON list of ToolSpec objects, as
                          `register_spec` takes them): the console shows their descriptions and
                          hints, and checks edited arguments against their schemas

The one-machine store is $XDG_STATE_HOME/signoff/signoff.db (~/.local/state/signoff/signoff.db):
agents on this machine give their gates `store_url = \"sqlite:<that path>\"` (the console prints
it). Edits are checked against the tool's schema, which a console process has only for the tools
in --tools: for other tools it accepts approvals and denials, and refuses edits (`unknown_tool`).

It serves until SIGINT, SIGTERM or SIGHUP: then it stops listening, closes the gate, flushes the
audit log and exits 0.";

/// The one-machine store's file: `$XDG_STATE_HOME/signoff/signoff.db`, else
/// `$HOME/.local/state/signoff/signoff.db`; its directory is made when missing.
pub(crate) fn default_store() -> Result<PathBuf, String> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local/state"),
            None => return Err("neither XDG_STATE_HOME nor HOME is set: give a `store_url` with --gate".into()),
        },
    };
    let dir = state.join("signoff");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    Ok(dir.join("signoff.db"))
}

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
    let mut bind_given = false;
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
                        options.bind = value.parse().map_err(|_| format!("--bind takes addr:port, got {value:?}"))?;
                        bind_given = true;
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
    let mut config = match &gate_file {
        Some(file) => {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {name}: {e}"))?;
            let json = signoff::json::from_str(&text, &name).map_err(|e| e.to_string())?;
            GateConfig::from_json(&json, Naming::Snake).map_err(|e| format!("{name}: {e}"))?
        }
        None => GateConfig::default(),
    };
    if config.store_path.is_some() {
        return Err(
            "`store_path` is a single-process store, which no agent in another process can reach: give `store_url`, \
             `sqlite:<path>` for agents on this machine"
                .into(),
        );
    }
    if config.store_url.is_none() {
        config.store_url = Some(format!("sqlite:{}", default_store()?.display()));
    }
    // The console's own: it signs the sign-in links it prints and the decisions people make in
    // it, and checks them itself (agents read the decisions from the store).
    if config.token_keys.is_none() {
        config.token_keys =
            Some(signoff::TokenKeys::new("console", signoff::Secret::generate()).map_err(|e| e.to_string())?);
    }
    if sign_ins.is_empty() && options.approver_keys_file.is_none() {
        let user = std::env::var("USER").ok().filter(|u| !u.is_empty() && !u.contains(char::is_whitespace));
        sign_ins.push(user.unwrap_or_else(|| "me".into()));
    }
    let store_url = config.store_url.clone().unwrap_or_default();
    // The default port taken (another console, another program): a free one, said on stderr; a
    // --bind given is used as given.
    if !bind_given
        && std::net::TcpListener::bind(options.bind).is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
    {
        eprintln!("signoff console: {} is in use, so the console takes a free port", options.bind);
        options.bind.set_port(0);
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
    let served = serve(&gate, options, tools_file, &sign_ins, &store_url).map(|console| {
        runtime.block_on(stop);
        // The port first (nothing more is decided here), then the gate: its audit log is flushed.
        console.close();
    });
    gate.close();
    gate.flush_audit();
    served
}

/// Registers the tools, starts the console and prints where it is; the caller waits.
fn serve(
    gate: &Gate,
    options: ConsoleOptions,
    tools: Option<PathBuf>,
    sign_ins: &[String],
    store_url: &str,
) -> Result<Console, String> {
    if let Some(path) = tools {
        let name = path.display().to_string();
        for spec in read_tools(&path, &name)? {
            gate.register_spec(spec).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    let console = Console::start(gate.clone(), options).map_err(|e| e.to_string())?;
    println!("console: {}", console.url());
    // Where agents find it; a PostgreSQL URL may carry a password, so only `sqlite:` is printed.
    if store_url.starts_with("sqlite:") {
        println!("store: {store_url} (agents on this machine: store_url = {store_url:?})");
    }
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
