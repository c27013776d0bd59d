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

/// A gate with a durable store and a JSONL audit log: the store anchors the chain's head.
fn anchored_gate(dir: &Path) -> (Gate, PathBuf, PathBuf) {
    let db = dir.join("signoff.db");
    let log = dir.join("audit.jsonl");
    let gate = Gate::builder()
        .store(SqliteStore::open(&db).unwrap())
        .audit(JsonlAuditSink::open(&log).unwrap())
        .build()
        .unwrap();
    gate.register(
        Tool::builder("delete_file")
            .parameters(serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}))
            .build(),
    )
    .unwrap();
    gate.recover().unwrap();
    (gate, db, log)
}

/// Runs `n` gated calls nobody answers (each is cancelled at once: no subscriber), then closes.
async fn run_calls(gate: &Gate, n: usize) {
    for i in 0..n {
        let d =
            gate.confirm(ToolCall::new("delete_file", serde_json::json!({"path": format!("/f{i}")}))).await.unwrap();
        assert!(!d.is_approved());
    }
    gate.close();
}

/// Issue 15.6: deleting the last lines of the log left a valid chain. The durable store keeps
/// the head, so a cut log is reported, and so is a rewritten last record.
#[tokio::test]
async fn records_cut_from_the_end_are_found_through_the_store_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let (gate, db, log) = anchored_gate(dir.path());
    run_calls(&gate, 3).await;
    drop(gate);
    let anchor = SqliteAnchorReader::new(&db);
    let whole = lines(&log);
    let report = verify_chain_anchored(&log, &anchor).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records as usize, whole.len());
    assert_eq!(anchor.load_head().unwrap().unwrap().seq as usize, whole.len() - 1, "the anchor holds the last record");

    // Cut the last two records: the chain alone still verifies (what the README says it cannot
    // see), the anchored check does not.
    rewrite(&log, &whole[..whole.len() - 2]);
    assert!(verify_chain(&log).unwrap().is_intact());
    let p = verify_chain_anchored(&log, &anchor).unwrap().problem.expect("a cut log must be reported");
    assert_eq!(p.kind, ChainProblemKind::Truncated, "{p:?}");
    assert_eq!(p.seq, Some(whole.len() as u64 - 2));
    assert!(p.message.contains("cut from the end"), "{}", p.message);

    // Everything deleted.
    rewrite(&log, &[]);
    assert_eq!(verify_chain_anchored(&log, &anchor).unwrap().problem.unwrap().kind, ChainProblemKind::Truncated);

    // The last record replaced by a re-chained forgery: the chain verifies, the anchor does not.
    let mut forged = whole.clone();
    forged.pop();
    rewrite(&log, &forged);
    {
        let sink = JsonlAuditSink::open(&log).unwrap();
        let mut r = AuditRecord::new(AuditKind::Notice);
        r.reason = Some("nothing happened here".into());
        sink.record(r);
        sink.flush();
    }
    assert!(verify_chain(&log).unwrap().is_intact());
    let p = verify_chain_anchored(&log, &anchor).unwrap().problem.expect("a forged last record must be reported");
    assert_eq!(p.kind, ChainProblemKind::Edited, "{p:?}");
}

/// A log cut while its gate was down: the next gate writes that into the chain before it goes
/// on, so the evidence outlives the anchor moving forward.
#[tokio::test]
async fn a_gate_that_finds_its_log_cut_records_it_in_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (gate, _db, log) = anchored_gate(dir.path());
    run_calls(&gate, 2).await;
    drop(gate);
    let whole = lines(&log);
    rewrite(&log, &whole[..whole.len() - 3]);

    let (gate, db, log) = anchored_gate(dir.path());
    run_calls(&gate, 1).await;
    drop(gate);
    let recs = JsonlAuditSink::read(&log).unwrap();
    let notice = recs.iter().find(|r| r.decision.as_deref() == Some("audit-truncated")).expect("a truncation notice");
    assert!(
        notice.reason.as_deref().unwrap().contains(&format!("anchor records record {}", whole.len() - 1)),
        "{notice:?}"
    );
    // The continued log verifies against the moved anchor, with the notice in it.
    assert!(verify_chain_anchored(&log, &SqliteAnchorReader::new(&db)).unwrap().is_intact());
}

/// A log without an anchor (no durable store) still verifies; the anchor reader of a database
/// that never anchored anything has no head.
#[test]
fn no_anchor_means_the_chain_check_only() {
    let (_d, log) = fresh(3);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("plain.db");
    drop(SqliteStore::open(&db).unwrap());
    let report = verify_chain_anchored(&log, &SqliteAnchorReader::new(&db)).unwrap();
    assert!(report.is_intact());
}

#[test]
fn file_errors_are_signoff_errors_of_kind_io() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("audit.jsonl");
    let Err(e) = JsonlAuditSink::open(&missing) else { panic!("opened a file in a missing directory") };
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("no-such-dir"), "{e}");
    assert_eq!(e.os_error(), Some(2), "ENOENT");
    assert_eq!(verify_chain(&missing).unwrap_err().kind(), ErrorKind::Io);
    assert_eq!(JsonlAuditSink::read(&missing).unwrap_err().kind(), ErrorKind::Io);
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, "not json\n").unwrap();
    assert_eq!(JsonlAuditSink::read(&garbage).unwrap_err().kind(), ErrorKind::Malformed);
}

/// What every binding and the command line run: a missing database is `io` with its path (never
/// an unanchored check), one a running gate holds is `store` saying to verify after it closed,
/// and a cut log is found through the anchor.
#[tokio::test]
async fn verifying_with_the_store_is_one_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (gate, db, log) = anchored_gate(dir.path());
    let missing = dir.path().join("nope.db");
    let e = verify_chain_with_store(&log, Some(&missing)).unwrap_err();
    assert_eq!((e.kind(), e.os_error(), e.path()), (ErrorKind::Io, Some(2), Some(missing.as_path())));
    assert!(e.to_string().contains("no such database"), "{e}");
    gate.confirm(ToolCall::new("delete_file", serde_json::json!({"path": "/f"}))).await.unwrap();
    gate.flush_audit();
    let e = verify_chain_with_store(&log, Some(&db)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(e.to_string().contains("after the gate using it has closed"), "{e}");
    run_calls(&gate, 1).await;
    drop(gate);
    let whole = lines(&log);
    assert!(verify_chain_with_store(&log, Some(&db)).unwrap().is_intact());
    rewrite(&log, &whole[..whole.len() - 1]);
    assert!(verify_chain_with_store(&log, None).unwrap().is_intact());
    let p = verify_chain_with_store(&log, Some(&db)).unwrap().problem.expect("a cut log through the anchor");
    assert_eq!(p.kind, ChainProblemKind::Truncated);
}
