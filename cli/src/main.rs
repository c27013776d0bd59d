//! `signoff`: the command-line program. `main` only dispatches: each subcommand lives in a module
//! of its own (`audit`, `console`, `mcp_proxy`) with an entry point taking the arguments
//! after its name and returning the exit status.
//!
//! Exit status, for every subcommand: 0 success, 1 the check found a problem, 2 usage or I/O
//! error.

mod audit;
mod console;
mod keygen;
mod mcp_proxy;
mod stop;

use std::ffi::{OsStr, OsString};
use std::process::ExitCode;

const USAGE: &str = "\
usage: signoff <command> [<args>...]

commands:
  audit      checks hash-chained audit trails (a JSON Lines file or a PostgreSQL table)
  console    serves the browser approval console for agents sharing a PostgreSQL store
  keygen     prints a new token key (SIGNOFF_TOKEN_KEYS, `token_keys`) or approver key
  mcp-proxy  serves the tools of MCP servers over stdio or HTTP, each call gated by signoff

options:
  -h, --help       this help
  -V, --version    the version

`signoff <command> --help` shows a command's usage.";

/// Exit status 2: the command line is wrong, or a file or server could not be read.
pub(crate) const USAGE_OR_IO: u8 = 2;

fn main() -> ExitCode {
    // As the system gave them: a file name need not be UTF-8 (`std::env::args` panics on one).
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    ExitCode::from(run(&args))
}

fn run(args: &[OsString]) -> u8 {
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return USAGE_OR_IO;
    };
    let Some(command) = command.to_str() else {
        eprintln!("signoff: unknown command {command:?} (not valid UTF-8)\n\n{USAGE}");
        return USAGE_OR_IO;
    };
    match command {
        "audit" => audit::main(rest),
        "console" => console::main(rest),
        "keygen" => keygen::main(rest),
        "mcp-proxy" => mcp_proxy::main(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            0
        }
        "-V" | "--version" => {
            println!("signoff {}", env!("CARGO_PKG_VERSION"));
            0
        }
        other => {
            eprintln!("signoff: {}\n\n{USAGE}", unknown("command", other, COMMANDS));
            USAGE_OR_IO
        }
    }
}

/// The subcommands, for suggestions.
const COMMANDS: &[&str] = &["audit", "console", "keygen", "mcp-proxy"];

/// "unknown <what> <got>", with the one of `known` it most likely misspells (the core's rule for
/// every "did you mean").
pub(crate) fn unknown(what: &str, got: &str, known: &[&str]) -> String {
    match signoff::config::nearest(got, known) {
        Some(close) => format!("unknown {what} {got:?} (did you mean {close:?}?)"),
        None => format!("unknown {what} {got:?}"),
    }
}

/// An argument as text, for everything but file names: `what` names it in the error (e.g.
/// `"--bind"`, `"argument"`), which shows the bytes that are not UTF-8 escaped.
pub(crate) fn text<'a>(arg: &'a OsStr, what: &str) -> Result<&'a str, String> {
    arg.to_str().ok_or_else(|| format!("{what} {arg:?} is not valid UTF-8"))
}

/// `--name=value` split at its first `=`, the value kept as given (it may be a file name, which
/// need not be UTF-8); `None` for anything else. The name must be UTF-8.
pub(crate) fn inline_value(arg: &OsStr) -> Option<(&str, Result<OsString, String>)> {
    let bytes = arg.as_encoded_bytes();
    let at = bytes.iter().position(|&b| b == b'=')?;
    let name = std::str::from_utf8(&bytes[..at]).ok().filter(|n| n.starts_with("--"))?;
    Some((name, value_after(arg, at + 1).ok_or_else(|| format!("{name}'s value in {arg:?} is not valid UTF-8"))))
}

#[cfg(unix)]
fn value_after(arg: &OsStr, from: usize) -> Option<OsString> {
    use std::os::unix::ffi::OsStrExt;
    Some(OsStr::from_bytes(&arg.as_bytes()[from..]).to_owned())
}

#[cfg(not(unix))]
fn value_after(arg: &OsStr, from: usize) -> Option<OsString> {
    // Elsewhere the encoded bytes are rebuilt only from UTF-8 (`--name value`, two arguments,
    // takes any file name).
    std::str::from_utf8(&arg.as_encoded_bytes()[from..]).ok().map(OsString::from)
}
