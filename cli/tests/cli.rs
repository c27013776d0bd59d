//! The `signoff` binary, run as a user runs it: exit status and what it prints.
//!
//! The PostgreSQL cases need a server: `SIGNOFF_TEST_POSTGRES_URL` (scripts/with-postgres.sh sets
//! it); without it they skip, unless `SIGNOFF_REQUIRE_POSTGRES` is set.

use signoff::{AuditKind, AuditRecord, AuditSink, JsonlAuditSink, PostgresAuditSink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn signoff(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_signoff")).args(args).output().unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write_log(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("audit.jsonl");
    let sink = JsonlAuditSink::open(&path).unwrap();
    for i in 0..n {
        sink.record(AuditRecord::new(AuditKind::Notice).with_reason(format!("record number {i}")));
    }
    sink.flush();
    path
}

#[test]
fn an_intact_file_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 5);
    let out = signoff(&["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).starts_with("intact: 5 records in 1 file(s), head "), "{}", stdout(&out));
    assert!(stdout(&out).contains("no anchor checked"));
}

#[test]
fn a_tampered_file_exits_1_naming_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 5);
    let text = std::fs::read_to_string(&log).unwrap().replace("record number 2", "record number 7");
    std::fs::write(&log, text).unwrap();
    let out = signoff(&["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let want = format!("TAMPERED: edited record at {}:3 (seq 2): ", log.display());
    assert!(stdout(&out).starts_with(&want), "{}", stdout(&out));
    assert!(stdout(&out).contains("the 2 records before it verify"));
}

#[test]
fn a_missing_file_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing.jsonl");
    let out = signoff(&["audit", "verify", missing.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("nothing.jsonl"), "{}", stderr(&out));
    let log = write_log(dir.path(), 1);
    let out =
        signoff(&["audit", "verify", log.to_str().unwrap(), "--store", dir.path().join("no.db").to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no such database"), "{}", stderr(&out));
}

#[test]
fn the_store_anchor_finds_a_cut_end() {
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("signoff.db"), dir.path().join("audit.jsonl"));
    {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _runtime = rt.enter();
        let gate = signoff::Gate::builder()
            .store(signoff::SqliteStore::open(&db).unwrap())
            .audit(JsonlAuditSink::open(&log).unwrap())
            .build()
            .unwrap();
        gate.register(signoff::Tool::builder("delete_file").build()).unwrap();
        gate.recover().unwrap();
        rt.block_on(async {
            for i in 0..3 {
                let call = signoff::ToolCall::new("delete_file", serde_json::json!({"path": format!("/f{i}")}));
                assert!(!gate.confirm(call).await.unwrap().is_approved());
            }
        });
        gate.close();
    }
    let (log_s, db_s) = (log.to_str().unwrap(), db.to_str().unwrap());
    let out = signoff(&["audit", "verify", log_s, "--store", db_s]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("reaching the store's anchor"), "{}", stdout(&out));

    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    std::fs::write(&log, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    assert_eq!(code(&signoff(&["audit", "verify", log_s])), 0, "the chain alone cannot tell");
    let out = signoff(&["audit", "verify", &format!("--store={db_s}"), log_s]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).starts_with("TAMPERED: truncated record at"), "{}", stdout(&out));
}

#[test]
fn usage() {
    for args in [&["--help"][..], &["help"], &["audit", "--help"], &["audit", "verify", "--help"]] {
        let out = signoff(args);
        assert_eq!(code(&out), 0, "{args:?}");
        assert!(stdout(&out).contains("usage:"), "{args:?}: {}", stdout(&out));
    }
    let out = signoff(&["--version"]);
    assert_eq!((code(&out), stdout(&out).trim()), (0, concat!("signoff ", env!("CARGO_PKG_VERSION"))));
    let bad: [&[&str]; 10] = [
        &[],
        &["frobnicate"],
        &["audit"],
        &["audit", "check"],
        &["audit", "verify"],
        &["audit", "verify", "a.jsonl", "b.jsonl"],
        &["audit", "verify", "a.jsonl", "--store"],
        &["audit", "verify", "a.jsonl", "--bogus"],
        &["audit", "verify", "a.jsonl", "--postgres", "postgres://x@y/z"],
        &["audit", "verify", "--postgres", "postgres://x@y/z", "--store", "s.db"],
    ];
    for args in bad {
        let out = signoff(args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert!(stderr(&out).contains("usage:"), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{args:?}");
    }
    let out = signoff(&["frobnicate"]);
    assert!(stderr(&out).contains("unknown command \"frobnicate\""), "{}", stderr(&out));
}

/// A misspelt command or option is answered with the one it most likely meant (issue 42), in
/// every subcommand, and still exits 2.
#[test]
fn typos_get_a_suggestion() {
    let cases: [(&[&str], &str); 6] = [
        (&["mcp_proxy"], "unknown command \"mcp_proxy\" (did you mean \"mcp-proxy\"?)"),
        (&["consle"], "(did you mean \"console\"?)"),
        (&["mcp-proxy", "--confg", "p.json"], "unknown argument \"--confg\" (did you mean \"--config\"?)"),
        (&["console", "--gat", "g.json"], "(did you mean \"--gate\"?)"),
        (&["audit", "verify", "a.jsonl", "--stor", "s.db"], "unknown option \"--stor\" (did you mean \"--store\"?)"),
        (&["audit", "verfy"], "(did you mean \"verify\"?)"),
    ];
    for (args, expected) in cases {
        let out = signoff(args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
    }
    // Nothing close: no guess.
    assert!(!stderr(&signoff(&["frobnicate"])).contains("did you mean"));
}

/// `signoff keygen` prints a token key a gate reads (`TokenKeys::parse`, as from
/// SIGNOFF_TOKEN_KEYS), a new one each time, or an approver key line the console reads; only the
/// key goes to stdout (issue 42).
#[test]
fn keygen_prints_keys_gates_and_consoles_read() {
    let key = |args: &[&str]| {
        let out = signoff(args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{args:?}");
        let text = stdout(&out);
        assert_eq!(text.lines().count(), 1, "{text}");
        text.trim_end().to_owned()
    };
    let (one, two) = (key(&["keygen"]), key(&["keygen"]));
    assert!(one.starts_with("k1:") && one != two, "{one} {two}");
    let keys = signoff::TokenKeys::parse(&one).unwrap();
    assert_eq!(keys.current_key_id(), "k1");
    let rotated = key(&["keygen", "--id", "k2"]);
    assert_eq!(signoff::TokenKeys::parse(&format!("{rotated},{one}")).unwrap().current_key_id(), "k2");
    let line = key(&["keygen", "--approver", "alice"]);
    let approvers = signoff_console::ApproverKeys::parse(&line).unwrap();
    assert_eq!(approvers.names(), ["alice"]);
    for bad in [
        &["keygen", "--id", "a.b"][..],
        &["keygen", "--approver", "a:b"],
        &["keygen", "--id"],
        &["keygen", "--idd", "x"],
    ] {
        let out = signoff(bad);
        assert_eq!(code(&out), 2, "{bad:?}");
        assert!(stdout(&out).is_empty(), "{bad:?}");
    }
}

/// A log whose file name is not UTF-8 is verified like any other (reading the command line used
/// to panic on it, exit 101), with its store given either way.
#[cfg(target_os = "linux")] // macOS (APFS) refuses file names that are not UTF-8
#[test]
fn a_file_name_that_is_not_utf8_is_verified() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join(OsStr::from_bytes(b"audit-\xff.jsonl"));
    let sink = JsonlAuditSink::open(&log).unwrap();
    for i in 0..3 {
        sink.record(AuditRecord::new(AuditKind::Notice).with_reason(format!("record number {i}")));
    }
    sink.flush();
    drop(sink);
    let run = |args: &[&OsStr]| Command::new(env!("CARGO_BIN_EXE_signoff")).args(args).output().unwrap();
    let out = run(&["audit".as_ref(), "verify".as_ref(), log.as_os_str()]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).starts_with("intact: 3 records in 1 file(s)"), "{}", stdout(&out));
    // The store's name, not UTF-8 either, separate or after `=`: it is looked for (there is none).
    let store = dir.path().join(OsStr::from_bytes(b"signoff-\xfe.db"));
    let mut inline = std::ffi::OsString::from("--store=");
    inline.push(&store);
    for args in [
        vec!["audit".as_ref(), "verify".as_ref(), log.as_os_str(), "--store".as_ref(), store.as_os_str()],
        vec!["audit".as_ref(), "verify".as_ref(), inline.as_os_str(), log.as_os_str()],
    ] {
        let out = run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}{}", stdout(&out), stderr(&out));
        assert!(stderr(&out).contains("no such database"), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("signoff-\u{FFFD}.db"), "the store is named: {}", stderr(&out));
    }
    // With rotated files, found by the name's bytes: all of them are checked.
    let rotating = dir.path().join(OsStr::from_bytes(b"rotating-\xff.jsonl"));
    let sink = JsonlAuditSink::open_with(&rotating, signoff::audit::AuditOptions { rotate_bytes: Some(300) }).unwrap();
    for i in 0..6 {
        sink.record(AuditRecord::new(AuditKind::Notice).with_reason(format!("record number {i}")));
    }
    sink.flush();
    drop(sink);
    let out = run(&["audit".as_ref(), "verify".as_ref(), rotating.as_os_str()]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).starts_with("intact: 6 records in 2 file(s)"), "{}", stdout(&out));
}

/// Any other argument that is not UTF-8 is a usage error (exit 2, the bytes shown escaped),
/// never a panic.
#[cfg(unix)]
#[test]
fn other_arguments_that_are_not_utf8_are_usage_errors() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"x\xff");
    let cases: [(&[&OsStr], &str); 8] = [
        (&[bad], "unknown command \"x\\xFF\" (not valid UTF-8)"),
        (&["audit".as_ref(), bad], "unknown audit command \"x\\xFF\""),
        (&["audit".as_ref(), "verify".as_ref(), OsStr::from_bytes(b"--\xff")], "unknown option \"--\\xFF\""),
        (
            &["audit".as_ref(), "verify".as_ref(), "--postgres".as_ref(), bad],
            "--postgres \"x\\xFF\" is not valid UTF-8",
        ),
        (&["console".as_ref(), bad], "argument \"x\\xFF\" is not valid UTF-8"),
        (&["console".as_ref(), "--bind".as_ref(), bad], "--bind \"x\\xFF\" is not valid UTF-8"),
        (&["mcp-proxy".as_ref(), "--http".as_ref(), bad], "--http \"x\\xFF\" is not valid UTF-8"),
        (&["mcp-proxy".as_ref(), "--config".as_ref(), bad], "cannot read x\u{FFFD}: "),
    ];
    for (args, expected) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_signoff")).args(args).output().unwrap();
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}: {}", stderr(&out));
    }
}

/// The test server's URL, or `None` (skip) when there is none.
fn postgres_url() -> Option<String> {
    match std::env::var("SIGNOFF_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("SIGNOFF_REQUIRE_POSTGRES").is_some() => panic!(
            "SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not: run the tests through \
             scripts/with-postgres.sh, or point SIGNOFF_TEST_POSTGRES_URL at a server"
        ),
        _ => {
            eprintln!("skipped: SIGNOFF_TEST_POSTGRES_URL is not set (scripts/with-postgres.sh sets it)");
            None
        }
    }
}

/// A table of `n` records in a schema of its own.
fn postgres_table(url: &str, n: usize) -> String {
    let schema = format!("t_{}", std::process::id()) + &format!("_{}", rand_suffix());
    let sink = PostgresAuditSink::connect(url, Some(&schema)).unwrap();
    for i in 0..n {
        sink.record(AuditRecord::new(AuditKind::Notice).with_reason(format!("record number {i}")));
    }
    sink.try_flush().unwrap();
    schema
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{nanos}_{}", N.fetch_add(1, Ordering::Relaxed))
}

#[test]
fn an_intact_table_exits_0() {
    let Some(url) = postgres_url() else { return };
    let schema = postgres_table(&url, 6);
    let out = signoff(&["audit", "verify", "--postgres", &url, "--schema", &schema]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let want = format!("intact: 6 records in postgres:{schema}.signoff_audit, head ");
    assert!(stdout(&out).starts_with(&want), "{}", stdout(&out));
    // A schema without the table: an error, not a finding.
    let out = signoff(&["audit", "verify", "--postgres", &url, "--schema", "t_no_such_schema"]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    assert!(!stderr(&out).contains(&url), "the URL (it may hold a password) is not printed");
}

#[test]
fn a_tampered_table_exits_1() {
    let Some(url) = postgres_url() else { return };
    let schema = postgres_table(&url, 6);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let sql = format!(
            "UPDATE {schema}.signoff_audit SET record = replace(record, 'record number 3', 'record number 8') \
             WHERE seq = 3"
        );
        assert_eq!(client.execute(&sql, &[]).await.unwrap(), 1);
    });
    let out = signoff(&["audit", "verify", &format!("--postgres={url}"), &format!("--schema={schema}")]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let want = format!("TAMPERED: edited record at postgres:{schema}.signoff_audit:3 (seq 3): ");
    assert!(stdout(&out).starts_with(&want), "{}", stdout(&out));
}

#[test]
fn an_unreachable_server_exits_2() {
    let out = signoff(&["audit", "verify", "--postgres", "postgres://signoff@127.0.0.1:1/signoff?connect_timeout=2"]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    let out = signoff(&["audit", "verify", "--postgres", "not a url://"]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
}
