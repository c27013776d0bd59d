//! `signoff-audit verify <audit.jsonl> [--store <signoff.db>]`: checks a hash-chained audit log
//! (and its rotated files `<path>.1`, `<path>.2`, ...) and reports the first edited, missing or
//! reordered record. With `--store`, also checks the log against the head the durable store
//! anchored, which finds records cut from the end (the chain alone cannot). Run it after the gate
//! has stopped: a running gate holds its database locked.
//! Exit status: 0 intact, 1 tampered, 2 usage or I/O error.
//!
//! Superseded by `signoff audit verify` (the `signoff` program, `cli/`), which also checks the
//! PostgreSQL audit table; this spelling is kept for `examples/check-remote.sh`.

const USAGE: &str = "usage: signoff-audit verify <audit.jsonl> [--store <signoff.db>]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, store) = match args.as_slice() {
        [cmd, path] if cmd == "verify" => (path, None),
        [cmd, path, flag, db] if cmd == "verify" && flag == "--store" => (path, Some(db)),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    match signoff::verify_chain_with_store(path, store.map(std::path::Path::new)) {
        Err(e) => {
            eprintln!("signoff-audit: {path}: {e}");
            std::process::exit(2);
        }
        Ok(report) => match &report.problem {
            None => println!(
                "intact: {} records in {} file(s), head {}{}",
                report.records,
                report.files.len(),
                report.head,
                match (&report.anchor, store) {
                    (Some(a), _) => format!(", reaching the store's anchor (record {})", a.seq),
                    (None, Some(_)) => " (the store holds no anchor: a cut end would not show)".to_owned(),
                    (None, None) => " (no anchor checked: a cut end would not show)".to_owned(),
                }
            ),
            Some(p) => {
                println!(
                    "TAMPERED: {} record at {}:{}{}: {}",
                    serde_json::to_value(p.kind).unwrap().as_str().unwrap(),
                    p.file.display(),
                    p.line,
                    p.seq.map(|s| format!(" (seq {s})")).unwrap_or_default(),
                    p.message
                );
                println!("the {} records before it verify", report.records);
                std::process::exit(1);
            }
        },
    }
}
