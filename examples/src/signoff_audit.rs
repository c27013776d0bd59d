//! `signoff-audit verify <audit.jsonl>`: checks a hash-chained audit log (and its rotated files
//! `<path>.1`, `<path>.2`, ...) and reports the first edited, missing or reordered record.
//! Exit status: 0 intact, 1 tampered, 2 usage or I/O error.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cmd, path] = args.as_slice() else {
        eprintln!("usage: signoff-audit verify <audit.jsonl>");
        std::process::exit(2);
    };
    if cmd != "verify" {
        eprintln!("usage: signoff-audit verify <audit.jsonl>");
        std::process::exit(2);
    }
    match signoff::verify_chain(path) {
        Err(e) => {
            eprintln!("signoff-audit: {path}: {e}");
            std::process::exit(2);
        }
        Ok(report) => match &report.problem {
            None => println!(
                "intact: {} records in {} file(s), head {}",
                report.records,
                report.files.len(),
                report.head
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
