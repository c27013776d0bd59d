//! `signoff`: the command-line program. `main` only dispatches: each subcommand lives in a module
//! of its own (`audit`, `console`, `mcp_proxy`) with an entry point taking the arguments
//! after its name and returning the exit status.
//!
//! Exit status, for every subcommand: 0 success, 1 the check found a problem, 2 usage or I/O
//! error.

mod audit;
mod console;
mod mcp_proxy;

use std::process::ExitCode;

const USAGE: &str = "\
usage: signoff <command> [<args>...]

commands:
  audit      checks hash-chained audit trails (a JSON Lines file or a PostgreSQL table)
  console    serves the browser approval console for agents sharing a PostgreSQL store
  mcp-proxy  serves the tools of MCP servers over stdio or HTTP, each call gated by signoff

options:
  -h, --help       this help
  -V, --version    the version

`signoff <command> --help` shows a command's usage.";

/// Exit status 2: the command line is wrong, or a file or server could not be read.
pub(crate) const USAGE_OR_IO: u8 = 2;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(run(&args))
}

fn run(args: &[String]) -> u8 {
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return USAGE_OR_IO;
    };
    match command.as_str() {
        "audit" => audit::main(rest),
        "console" => console::main(rest),
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
            eprintln!("signoff: unknown command {other:?}\n\n{USAGE}");
            USAGE_OR_IO
        }
    }
}
