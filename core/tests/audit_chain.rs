//! The hash-chained audit log: verification finds the first edited, missing or reordered
//! record; re-opening and rotation keep one chain.

use signoff::audit::{AuditOptions, ChainProblemKind, GENESIS_HASH};
use signoff::*;
use std::path::{Path, PathBuf};

fn write_records(path: &Path, n: usize, options: AuditOptions) {
    let sink = JsonlAuditSink::open_with(path, options).unwrap();
    for i in 0..n {
        let mut r = AuditRecord::new(AuditKind::Notice);
        r.reason = Some(format!("record number {i}"));
        r.arguments = Some(serde_json::json!({"i": i, "x": 2.5e-7, "s": "é\u{202e}"}));
        sink.record(r);
    }
    sink.flush();
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_owned).collect()
}

fn rewrite(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

fn problem(path: &Path) -> (ChainProblemKind, usize, Option<u64>) {
    let p = verify_chain(path).unwrap().problem.expect("verification should fail");
    (p.kind, p.line, p.seq)
}

fn fresh(n: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_records(&path, n, AuditOptions::default());
    (dir, path)
}

#[test]
fn an_intact_chain_verifies_and_reopening_continues_it() {
    let (_d, path) = fresh(5);
    write_records(&path, 3, AuditOptions::default()); // a restart
    let report = verify_chain(&path).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records, 8);
    let recs = JsonlAuditSink::read(&path).unwrap();
    assert_eq!(recs[0].prev_hash.as_deref(), Some(GENESIS_HASH));
    assert_eq!(recs.iter().map(|r| r.seq.unwrap()).collect::<Vec<_>>(), (0..8).collect::<Vec<u64>>());
    assert_eq!(recs[5].prev_hash, recs[4].hash);
    assert_eq!(report.head, recs[7].hash.clone().unwrap());
}

#[test]
fn an_edited_record_is_found() {
    let (_d, path) = fresh(6);
    let mut l = lines(&path);
    l[3] = l[3].replace("record number 3", "record number 9");
    rewrite(&path, &l);
    assert_eq!(problem(&path), (ChainProblemKind::Edited, 4, Some(3)));
}

#[test]
fn an_edited_and_rehashed_record_is_found_by_the_next_link() {
    let (_d, path) = fresh(6);
    let mut l = lines(&path);
    // Edit record 2 and recompute its own hash, as a careful forger would.
    let edited = l[2].replace("record number 2", "record number X");
    let cut = edited.rfind(",\"hash\":\"").unwrap();
    let body = format!("{}}}", &edited[..cut]);
    l[2] = format!("{},\"hash\":\"{}\"}}", &edited[..cut], signoff::display::sha256_hex(body.as_bytes()));
    rewrite(&path, &l);
    assert_eq!(problem(&path), (ChainProblemKind::Edited, 3, Some(2)));
}

#[test]
fn a_deleted_record_is_found() {
    let (_d, path) = fresh(6);
    let mut l = lines(&path);
    l.remove(2);
    rewrite(&path, &l);
    let (kind, line, seq) = problem(&path);
    assert_eq!((kind, line, seq), (ChainProblemKind::Missing, 3, Some(3)));
    // Losing the head of the log is found too.
    let mut l = lines(&path);
    l.remove(0);
    rewrite(&path, &l);
    assert_eq!(problem(&path).0, ChainProblemKind::Missing);
}

#[test]
fn reordered_records_are_found() {
    let (_d, path) = fresh(6);
    let mut l = lines(&path);
    l.swap(1, 4);
    rewrite(&path, &l);
    assert_eq!(problem(&path), (ChainProblemKind::Reordered, 2, Some(4)));
}

#[test]
fn garbage_and_unchained_lines_are_malformed() {
    let (_d, path) = fresh(3);
    let mut l = lines(&path);
    l.insert(1, "{\"at_ms\":1,\"kind\":\"notice\"}".into());
    rewrite(&path, &l);
    assert_eq!(problem(&path).0, ChainProblemKind::Malformed);
}

#[test]
fn rotation_keeps_one_chain_and_a_missing_file_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let opts = AuditOptions { rotate_bytes: Some(600) };
    // Several writers (restarts), each rotating as it goes.
    for _ in 0..3 {
        write_records(&path, 7, opts);
    }
    let report = verify_chain(&path).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records, 21);
    assert!(report.files.len() >= 3, "{:?}", report.files);
    // A rotated file that disappears leaves a gap.
    std::fs::remove_file(dir.path().join("audit.jsonl.2")).unwrap();
    assert_eq!(problem(&path).0, ChainProblemKind::Missing);
}

#[test]
fn a_torn_last_line_is_reported_and_the_chain_continues_after_it() {
    let (_d, path) = fresh(3);
    // A crash mid-write leaves half a line.
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"at_ms\":1,\"kind\":\"no");
    std::fs::write(&path, text).unwrap();
    write_records(&path, 2, AuditOptions::default());
    let l = lines(&path);
    assert_eq!(l.len(), 6);
    let recs: Vec<AuditRecord> = [&l[4], &l[5]].iter().map(|x| serde_json::from_str(x).unwrap()).collect();
    assert_eq!(recs[0].seq, Some(3), "continues after the last complete record");
    assert_eq!((problem(&path).0, problem(&path).1), (ChainProblemKind::Malformed, 4));
}
