//! `signoff audit`: checks hash-chained audit trails.
//!
//! - `signoff audit verify <audit.jsonl> [--store <signoff.db>]` checks a log written by
//!   `JsonlAuditSink` (and its rotated files `<path>.1`, `<path>.2`, ...) and reports the first
//!   edited, missing or reordered record. With `--store`, it also checks the log against the head
//!   the durable store anchored, which finds records cut from the end (the chain alone cannot).
//!   Run it after the gate has stopped: a running gate holds its database locked.
//! - `signoff audit verify --postgres <url> [--schema <name>]` checks the table `signoff_audit`
//!   written by `PostgresAuditSink` the same way (rows deleted at the end do not show).
//!
//! Exit status: 0 intact, 1 tampered, 2 usage or I/O error.

use crate::USAGE_OR_IO;
use signoff::ChainReport;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

const USAGE: &str = "\
usage:
  signoff audit verify <audit.jsonl> [--store <signoff.db>]
  signoff audit verify --postgres <url> [--schema <name>]

Checks a hash-chained audit trail and reports the first edited, missing or reordered record.

  <audit.jsonl>        a log written by JsonlAuditSink, with its rotated files (<path>.1, ...)
  --store <signoff.db> also check the log against the head the durable store anchored, which
                       finds records cut from the end (run it after the gate has stopped)
  --postgres <url>     check the table signoff_audit written by PostgresAuditSink instead
                       (postgres://user[:password]@host[:port]/database or \"host=... user=...\")
  --schema <name>      the table's schema (default: the connection's search path)

Exit status: 0 intact, 1 tampered, 2 usage or I/O error.";

/// Exit status 1: the trail was tampered with.
const TAMPERED: u8 = 1;

/// `signoff audit <args>`.
pub(crate) fn main(args: &[OsString]) -> u8 {
    let Some((cmd, rest)) = args.split_first() else { return usage_error("missing audit command") };
    match cmd.to_str() {
        Some("verify") => verify(rest),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            0
        }
        Some(other) => usage_error(&crate::unknown("audit command", other, &["verify"])),
        None => usage_error(&format!("unknown audit command {cmd:?}")),
    }
}

fn usage_error(message: &str) -> u8 {
    eprintln!("signoff audit: {message}\n\n{USAGE}");
    USAGE_OR_IO
}

/// What `verify` checks. File names are kept as given: they need not be UTF-8.
enum Target {
    File { path: PathBuf, store: Option<PathBuf> },
    Postgres { url: String, schema: Option<String> },
}

fn parse(args: &[OsString]) -> Result<Option<Target>, String> {
    let (mut path, mut store, mut url, mut schema) = (None::<OsString>, None, None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match crate::inline_value(arg) {
            Some((f, v)) => (f, Some(v?)),
            None => match arg.to_str() {
                Some(a) => (a, None),
                None if arg.as_encoded_bytes().starts_with(b"-") => return Err(format!("unknown option {arg:?}")),
                // The log's file name, which need not be UTF-8.
                None => ("", None),
            },
        };
        let slot = match flag {
            "-h" | "--help" => return Ok(None),
            "--store" => &mut store,
            "--postgres" => &mut url,
            "--schema" => &mut schema,
            f if f.starts_with('-') && f.len() > 1 => {
                return Err(crate::unknown("option", f, &["--store", "--postgres", "--schema", "--help"]));
            }
            _ => {
                if path.is_some() {
                    return Err("give one audit log".into());
                }
                path = Some(arg.clone());
                continue;
            }
        };
        if slot.is_some() {
            return Err(format!("{flag} is given twice"));
        }
        *slot = Some(match inline {
            Some(v) => v,
            None => it.next().ok_or_else(|| format!("{flag} needs a value"))?.clone(),
        });
    }
    let text = |value: Option<OsString>, flag: &str| match value {
        Some(v) => v.into_string().map(Some).map_err(|v| format!("{flag} {v:?} is not valid UTF-8")),
        None => Ok(None),
    };
    let (url, schema) = (text(url, "--postgres")?, text(schema, "--schema")?);
    match (path, url) {
        (Some(path), None) if schema.is_none() => {
            Ok(Some(Target::File { path: path.into(), store: store.map(PathBuf::from) }))
        }
        (None, Some(url)) if store.is_none() => Ok(Some(Target::Postgres { url, schema })),
        (Some(_), Some(_)) => Err("give either an audit log or --postgres, not both".into()),
        (Some(_), None) => Err("--schema goes with --postgres".into()),
        (None, Some(_)) => Err("--store goes with an audit log file".into()),
        (None, None) => Err("give an audit log, or --postgres <url>".into()),
    }
}

fn verify(args: &[OsString]) -> u8 {
    let target = match parse(args) {
        Ok(Some(t)) => t,
        Ok(None) => {
            println!("{USAGE}");
            return 0;
        }
        Err(message) => return usage_error(&message),
    };
    match target {
        Target::File { path, store } => verify_file(&path, store.as_deref()),
        Target::Postgres { url, schema } => verify_postgres(&url, schema.as_deref()),
    }
}

fn verify_file(path: &Path, store: Option<&Path>) -> u8 {
    let report = match signoff::verify_chain_with_store(path, store) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("signoff: {}: {e}", path.display());
            return USAGE_OR_IO;
        }
    };
    let caveat = match (&report.anchor, store) {
        (Some(a), _) => format!(", reaching the store's anchor (record {})", a.seq),
        (None, Some(_)) => " (the store holds no anchor: a cut end would not show)".to_owned(),
        (None, None) => " (no anchor checked: a cut end would not show)".to_owned(),
    };
    print_report(&report, &format!("in {} file(s)", report.files.len()), &caveat)
}

fn verify_postgres(url: &str, schema: Option<&str>) -> u8 {
    let report = match signoff::verify_chain_postgres(url, schema) {
        Ok(r) => r,
        Err(e) => {
            // Not the URL: it may hold a password. A `store` error's own words.
            match e {
                signoff::Error::Store(m) => eprintln!("signoff: PostgreSQL audit table: {m}"),
                e => eprintln!("signoff: PostgreSQL audit table: {e}"),
            }
            return USAGE_OR_IO;
        }
    };
    let table = report.files.first().map(|f| f.display().to_string()).unwrap_or_default();
    print_report(
        &report,
        &format!("in {table}"),
        " (rows deleted at the end would not show: the chain alone cannot tell)",
    )
}

fn print_report(report: &ChainReport, place: &str, caveat: &str) -> u8 {
    match &report.problem {
        None => {
            println!("intact: {} records {place}, head {}{caveat}", report.records, report.head);
            0
        }
        Some(p) => {
            let kind = serde_json::to_value(p.kind).ok().and_then(|v| v.as_str().map(str::to_owned));
            println!(
                "TAMPERED: {} record at {}:{}{}: {}",
                kind.as_deref().unwrap_or("bad"),
                p.file.display(),
                p.line,
                p.seq.map(|s| format!(" (seq {s})")).unwrap_or_default(),
                p.message
            );
            println!("the {} records before it verify", report.records);
            TAMPERED
        }
    }
}
