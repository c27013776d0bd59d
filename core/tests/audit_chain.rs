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
    // The continued log chains, but is not intact: the notice says records were cut, with or
    // without the anchor (which has moved on).
    let notice_line = lines(&log).iter().position(|l| l.contains("audit-truncated")).unwrap() + 1;
    for report in [verify_chain(&log).unwrap(), verify_chain_anchored(&log, &SqliteAnchorReader::new(&db)).unwrap()] {
        let p = report.problem.expect("a log that was cut is not reported intact");
        assert_eq!((p.kind, p.file.as_path(), p.line), (ChainProblemKind::Truncated, log.as_path(), notice_line));
        assert!(p.message.contains("found cut") && p.message.contains("anchor records record"), "{p:?}");
    }
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

/// The anchor of a database that is not signoff's (an empty file, another program's) is an
/// error, not "nothing anchored": a log cut at its end would otherwise pass for whole. The hint
/// to verify after the gate closed is given only for a database in use.
#[test]
fn an_anchor_in_a_database_that_is_not_signoffs_is_an_error() {
    let (dir, log) = fresh(3);
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other).unwrap().execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
    for db in [&empty, &other] {
        let e = verify_chain_with_store(&log, Some(db)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{e}");
        assert!(e.to_string().contains("not a signoff database"), "{e}");
        assert!(!e.to_string().contains("after the gate"), "{e}");
    }
}

/// The writer of [`a_full_disk_delays_records_and_drops_none`], run in a child process whose
/// file size limit stands in for a full disk (this test does nothing unless that test started
/// it): ten records while the limit holds, then five more once the parent has lifted it.
#[cfg(target_os = "linux")]
#[test]
fn audit_writer_child_under_a_file_size_limit() {
    use std::io::BufRead;
    let Some(path) = std::env::var_os("SIGNOFF_AUDIT_CHILD") else { return };
    let sink = JsonlAuditSink::open(&path).unwrap();
    let write = |range: std::ops::Range<usize>| {
        for i in range {
            let mut r = AuditRecord::new(AuditKind::Notice);
            r.reason = Some(format!("record number {i}"));
            sink.record(r);
        }
        sink.flush();
    };
    write(0..10);
    println!("failures {}", sink.failures());
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go).unwrap();
    write(10..15);
    println!("failures {}", sink.failures());
}

/// A write that fails (the disk is full) drops nothing and forks nothing: the records are kept
/// and written, in order, once writing works again, the chain is whole, and a notice says that
/// records were written late. A failed write used to lose its records and leave the next one
/// chained to nothing, so the log reported an edit that never happened, for ever. The child's
/// stderr is a file past the limit too, as a log on the same full disk would be: reporting the
/// failure there must not stop the writer (`eprintln!` panics when it cannot write).
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_delays_records_and_drops_none() {
    use std::io::{BufRead, Write};
    use std::os::unix::process::CommandExt;
    if std::env::var_os("SIGNOFF_AUDIT_CHILD").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let stderr_log = dir.path().join("stderr.log");
    std::fs::write(&stderr_log, vec![b'.'; 4096]).unwrap();
    let stderr = std::fs::OpenOptions::new().append(true).open(&stderr_log).unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "audit_writer_child_under_a_file_size_limit", "--nocapture", "--test-threads=1"])
        .env("SIGNOFF_AUDIT_CHILD", &log)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr);
    // SAFETY: between fork and exec the closure only makes two system calls (setrlimit, signal),
    // both async-signal-safe, touching no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            // Room for about two records: writes past it fail (EFBIG) instead of killing.
            let limit = libc::rlimit { rlim_cur: 600, rlim_max: libc::RLIM_INFINITY };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut failures = || -> u64 {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the child ended early");
            // (libtest's "test ... " may begin the same line)
            if let Some((_, n)) = line.trim().rsplit_once("failures ") {
                return n.parse().unwrap();
            }
        }
    };
    assert!(failures() > 0, "the limit did not make writes fail");
    // The disk has room again.
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: `unlimited` is a valid rlimit for the call's duration; the old value is not asked for.
    let lifted =
        unsafe { libc::prlimit(child.id() as libc::pid_t, libc::RLIMIT_FSIZE, &unlimited, std::ptr::null_mut()) };
    assert_eq!(lifted, 0, "{}", std::io::Error::last_os_error());
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    failures();
    assert!(child.wait().unwrap().success());

    let report = verify_chain(&log).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    let records = JsonlAuditSink::read(&log).unwrap();
    let reasons: Vec<&str> = records.iter().filter_map(|r| r.reason.as_deref()).collect();
    let numbered: Vec<&str> = reasons.iter().copied().filter(|r| r.starts_with("record number")).collect();
    let expected: Vec<String> = (0..15).map(|i| format!("record number {i}")).collect();
    assert_eq!(numbered, expected, "every record, once, in order");
    let late: Vec<_> = records.iter().filter(|r| r.decision.as_deref() == Some("audit-write-failed")).collect();
    assert_eq!(late.len(), 1, "{records:?}");
}

/// Two writers on one log (two gates, two processes sharing an audit path) keep one chain:
/// each writes its batches holding the log's lock and goes on from the record the other wrote
/// last, rotation included. They used to continue from the same record and fork the chain.
#[test]
fn two_writers_on_one_log_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let options = AuditOptions { rotate_bytes: Some(4000) };
    let a = JsonlAuditSink::open_with(&log, options).unwrap();
    let b = JsonlAuditSink::open_with(&log, options).unwrap();
    std::thread::scope(|s| {
        for (name, sink) in [("a", &a), ("b", &b)] {
            s.spawn(move || {
                for i in 0..200 {
                    let mut r = AuditRecord::new(AuditKind::Notice);
                    r.reason = Some(format!("{name} {i}"));
                    sink.record(r);
                    if i % 7 == 0 {
                        sink.flush();
                    }
                }
                sink.flush();
            });
        }
    });
    drop((a, b));
    let report = verify_chain(&log).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records, 400);
    assert!(report.files.len() > 3, "rotated by both: {:?}", report.files);
    // Each writer's records, every one once, in its own order.
    let mut all = Vec::new();
    for f in &report.files {
        all.extend(JsonlAuditSink::read(f).unwrap());
    }
    for name in ["a", "b"] {
        let mine: Vec<String> =
            all.iter().filter_map(|r| r.reason.clone()).filter(|r| r.starts_with(&format!("{name} "))).collect();
        let expected: Vec<String> = (0..200).map(|i| format!("{name} {i}")).collect();
        assert_eq!(mine, expected);
    }
}

/// A last record whose newline was lost is continued from, not written again under its `seq`.
#[test]
fn a_last_record_without_its_newline_is_continued_from() {
    let (_d, log) = fresh(3);
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, text.trim_end_matches('\n')).unwrap();
    write_records(&log, 2, AuditOptions::default());
    let report = verify_chain(&log).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records, 5);
}

/// Only the names rotation writes are read as rotated files, and what is not a regular file is
/// refused rather than read for ever (a pipe).
#[cfg(unix)]
#[test]
fn verification_reads_only_rotated_files_and_regular_files() {
    let (dir, log) = fresh(3);
    for junk in ["audit.jsonl.01", "audit.jsonl.+6", "audit.jsonl.1.bak"] {
        std::fs::write(dir.path().join(junk), "not a record\n").unwrap();
    }
    let report = verify_chain(&log).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.files, vec![log.clone()]);
    let pipe = dir.path().join("pipe.jsonl");
    let c_path = std::ffi::CString::new(pipe.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c_path` is a NUL-terminated path that lives through the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "{}", std::io::Error::last_os_error());
    let e = verify_chain(&pipe).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

/// A log cut while its writer has it open (by hand, by a tool): the writer says so in the chain
/// before its next record, and verification reports the log truncated there. It used to go on
/// from the cut end, and the log verified as whole.
#[test]
fn a_log_cut_while_open_is_reported_not_continued_silently() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let sink = JsonlAuditSink::open(&log).unwrap();
    let write = |from: usize, to: usize| {
        for i in from..to {
            let mut r = AuditRecord::new(AuditKind::Notice);
            r.reason = Some(format!("record number {i}"));
            sink.record(r);
        }
        sink.flush();
    };
    write(0, 5);
    let whole = lines(&log);
    rewrite(&log, &whole[..3]);
    write(5, 7);
    drop(sink);
    let all = lines(&log);
    let notice = all.iter().position(|l| l.contains("audit-truncated")).expect("a notice") + 1;
    assert_eq!(notice, 4, "the notice comes first, right after the cut: {all:?}");
    let p = verify_chain(&log).unwrap().problem.expect("a log cut while open is not intact");
    assert_eq!((p.kind, p.line), (ChainProblemKind::Truncated, notice), "{p:?}");
    assert!(p.message.contains("cut while it was open") && p.message.contains("record 4"), "{p:?}");
}

/// A later edit is not hidden behind an earlier cut: verification goes on past the notice and
/// reports what is worse.
#[test]
fn an_edit_after_a_cut_notice_is_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    {
        let sink = JsonlAuditSink::open(&log).unwrap();
        sink.record(AuditRecord::new(AuditKind::Notice));
        sink.flush();
        rewrite(&log, &[]);
        for _ in 0..3 {
            sink.record(AuditRecord::new(AuditKind::Notice).with_reason("after"));
        }
        sink.flush();
    }
    assert_eq!(problem(&log).0, ChainProblemKind::Truncated);
    let mut edited = lines(&log);
    edited[2] = edited[2].replace("after", "AFTER");
    rewrite(&log, &edited);
    assert_eq!(problem(&log), (ChainProblemKind::Edited, 3, Some(2)));
}
