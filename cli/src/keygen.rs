//! `signoff keygen`: prints a new secret, made from the system's random source.
//!
//! - `signoff keygen [--id <key id>]` prints a token key, `<key id>:<base64 secret>` (key id
//!   `k1` by default): the value of `SIGNOFF_TOKEN_KEYS` (`TokenKeys::from_env`), of a gate's
//!   `token_keys` option, or of `token_keys` in an `mcp-proxy` configuration. Gates that must
//!   accept each other's tokens and approval markers (an agent's gate and `signoff mcp-proxy`)
//!   are given the same keys.
//! - `signoff keygen --approver <name>` prints an approver key line, `<name>:<key>`, for the
//!   file the console's `approver_keys_file` (`signoff console --approver-keys`) reads.
//!
//! Only the key goes to stdout (`export SIGNOFF_TOKEN_KEYS="$(signoff keygen)"`); exit 0, or
//! 2 for a wrong argument.

use crate::USAGE_OR_IO;
use std::ffi::OsString;

const USAGE: &str = "\
usage: signoff keygen [--id <key id>]
       signoff keygen --approver <name>

Prints a new random secret on stdout, nothing else:
  (no option)        a token key, `k1:<base64 secret>`: SIGNOFF_TOKEN_KEYS, or `token_keys` in a
                     gate's or mcp-proxy's configuration; gates that accept each other's tokens
                     and approval markers (an agent's gate and signoff mcp-proxy) share it
  --id <key id>      the token key's id instead of k1 (for rotation: the new key first,
                     `k2:<new>,k1:<old>`)
  --approver <name>  an approver key line, `<name>:<key>`, for the console's approver keys file

  export SIGNOFF_TOKEN_KEYS=\"$(signoff keygen)\"
  signoff keygen --approver alice >> approvers.txt";

pub(crate) fn main(args: &[OsString]) -> u8 {
    match run(args) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(message) => {
            eprintln!("signoff keygen: {message}");
            USAGE_OR_IO
        }
    }
}

fn run(args: &[OsString]) -> Result<String, String> {
    let (mut id, mut approver) = (None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let flag = crate::text(arg, "argument")?;
        let slot = match flag {
            "-h" | "--help" => return Ok(USAGE.to_owned()),
            "--id" => &mut id,
            "--approver" => &mut approver,
            other => return Err(format!("{}\n\n{USAGE}", crate::unknown("argument", other, &["--id", "--approver"]))),
        };
        let value = it.next().ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))?;
        *slot = Some(crate::text(value, flag)?.to_owned());
    }
    let secret = signoff::Secret::generate();
    match (id, approver) {
        (Some(_), Some(_)) => Err(format!("--id names a token key, --approver an approver key: give one\n\n{USAGE}")),
        (None, Some(name)) => {
            if name.is_empty() || name.contains([':', '\n', '\r']) || name.trim() != name {
                return Err(format!("--approver {name:?}: give a name without `:`, line breaks or outer spaces"));
            }
            let line = format!("{name}:{}", secret.to_base64());
            // Read back as the console will read the file.
            signoff_console::ApproverKeys::parse(&line).map_err(|e| format!("--approver {name:?}: {e}"))?;
            Ok(line)
        }
        (id, None) => {
            let id = id.unwrap_or_else(|| "k1".to_owned());
            // Checked as a gate will read it.
            signoff::TokenKeys::new(&id, secret.clone()).map_err(|e| e.to_string())?;
            Ok(format!("{id}:{}", secret.to_base64()))
        }
    }
}
