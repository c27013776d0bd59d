//! The audit chain in a PostgreSQL table: one chain across sinks and processes, verified like the
//! file chain. Needs a server: `SIGNOFF_TEST_POSTGRES_URL` (scripts/with-postgres.sh sets it);
//! without it the tests skip, unless `SIGNOFF_REQUIRE_POSTGRES` is set.
#![cfg(feature = "postgres")]

use signoff::audit::{ChainProblemKind, GENESIS_HASH};
use signoff::*;
use std::sync::{Arc, RwLock};

/// The test that stops the server holds this exclusively; the others share it.
static SERVER: RwLock<()> = RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    SERVER.read().unwrap_or_else(|e| e.into_inner())
}

/// The test server's URL, or `None` (skip) when there is none.
fn url() -> Option<String> {
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

/// A schema of the test's own.
fn schema() -> String {
    format!("t_{}", uuid::Uuid::new_v4().simple())
}

/// Runs SQL statements (in `schema`) on a connection of the test's own.
fn sql(url: &str, schema: &str, statements: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute(&format!("SET search_path TO {schema}; {statements}")).await.unwrap();
    });
}

/// Every row's `record` column, in `seq` order.
fn rows(url: &str, schema: &str) -> Vec<(i64, AuditRecord)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let q = format!("SELECT seq, record FROM {schema}.signoff_audit ORDER BY seq");
        client
            .query(&q, &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), serde_json::from_str(r.get::<_, &str>(1)).unwrap()))
            .collect()
    })
}

fn notices(sink: &PostgresAuditSink, tag: &str, n: usize) {
    for i in 0..n {
        sink.record(AuditRecord::notice("test", format!("{tag} {i}")));
    }
}

fn problem(url: &str, schema: &str) -> ChainProblem {
    let report = verify_chain_postgres(url, Some(schema)).unwrap();
    report.problem.expect("verification should fail")
}

#[test]
fn a_gates_records_form_an_intact_chain() {
    let Some(url) = url() else { return };
    let _server = shared();
    let s = schema();
    let sink = PostgresAuditSink::connect(&url, Some(&s)).unwrap();
    let gate = Gate::builder().audit(sink.clone()).build().unwrap();
    gate.register(
        Tool::builder("delete_file")
            .parameters(serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}))
            .build(),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        for i in 0..5 {
            let call = ToolCall::new("delete_file", serde_json::json!({"path": format!("/f{i}")}));
            // Nobody answers: each request is cancelled at once.
            assert!(!gate.confirm(call).await.unwrap().is_approved());
        }
    });
    gate.close();
    sink.try_flush().unwrap();
    assert_eq!(sink.failures(), 0);
    assert_eq!(sink.table(), format!("postgres:{s}.signoff_audit"));

    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    let rows = rows(&url, &s);
    assert!(rows.len() >= 10, "a request and an outcome per call: {}", rows.len());
    assert_eq!(report.records, rows.len() as u64);
    assert_eq!(report.files, vec![std::path::PathBuf::from(format!("postgres:{s}.signoff_audit"))]);
    assert_eq!(rows[0].1.prev_hash.as_deref(), Some(GENESIS_HASH));
    for (i, (seq, r)) in rows.iter().enumerate() {
        assert_eq!((*seq, r.seq), (i as i64, Some(i as u64)));
        if i > 0 {
            assert_eq!(r.prev_hash, rows[i - 1].1.hash);
        }
    }
    assert!(rows.iter().any(|(_, r)| r.kind == AuditKind::Request && r.tool.as_deref() == Some("delete_file")));
    assert_eq!(Some(report.head), rows.last().unwrap().1.hash.clone());

    // A new sink (a restart) continues the same chain.
    drop(sink);
    let again = PostgresAuditSink::connect(&url, Some(&s)).unwrap();
    notices(&again, "after restart", 3);
    again.try_flush().unwrap();
    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records, rows.len() as u64 + 3);
}

#[test]
fn concurrent_sinks_append_to_one_chain() {
    let Some(url) = url() else { return };
    let _server = shared();
    let s = schema();
    // The table is created by whichever sink comes first; they race for it too.
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let (url, s) = (url.clone(), s.clone());
            std::thread::spawn(move || {
                let sink = PostgresAuditSink::connect(&url, Some(&s)).unwrap();
                for i in 0..300 {
                    sink.record(AuditRecord::notice("test", format!("thread {t} record {i}")));
                    if i % 50 == 0 {
                        std::thread::yield_now();
                    }
                }
                sink.try_flush().unwrap();
                assert_eq!(sink.failures(), 0);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records, 900);
    // Each thread's records, once each and in its order.
    let rows = rows(&url, &s);
    for t in 0..3 {
        let mine: Vec<String> = rows
            .iter()
            .filter_map(|(_, r)| r.reason.clone())
            .filter(|r| r.starts_with(&format!("thread {t} ")))
            .collect();
        let want: Vec<String> = (0..300).map(|i| format!("thread {t} record {i}")).collect();
        assert_eq!(mine, want);
    }
}

fn filled(url: &str, n: usize) -> String {
    let s = schema();
    let sink = PostgresAuditSink::connect(url, Some(&s)).unwrap();
    notices(&sink, "record", n);
    sink.try_flush().unwrap();
    assert!(verify_chain_postgres(url, Some(&s)).unwrap().is_intact());
    s
}

#[test]
fn an_edited_record_is_reported_at_its_seq() {
    let Some(url) = url() else { return };
    let _server = shared();
    let s = filled(&url, 8);
    sql(&url, &s, "UPDATE signoff_audit SET record = replace(record, 'record 4', 'record 9') WHERE seq = 4");
    let p = problem(&url, &s);
    assert_eq!((p.kind, p.line, p.seq), (ChainProblemKind::Edited, 4, Some(4)));
    assert_eq!(p.file, std::path::PathBuf::from(format!("postgres:{s}.signoff_audit")));
    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert_eq!(report.records, 4);
}

#[test]
fn a_rehashed_record_is_reported_by_the_next_link() {
    let Some(url) = url() else { return };
    let _server = shared();
    let s = filled(&url, 8);
    // A careful forger recomputes the edited record's own hash (and the columns to match).
    let (_, rec) = rows(&url, &s).remove(3);
    let mut forged = rec.clone();
    forged.reason = Some("record X".into());
    let (line, hash) = {
        let mut r = forged.clone();
        r.hash = None;
        let body = serde_json::to_string(&r).unwrap();
        let hash = signoff::display::sha256_hex(body.as_bytes());
        (format!("{},\"hash\":\"{hash}\"}}", &body[..body.len() - 1]), hash)
    };
    sql(
        &url,
        &s,
        &format!("UPDATE signoff_audit SET record = '{}', hash = '{hash}' WHERE seq = 3", line.replace('\'', "''")),
    );
    let p = problem(&url, &s);
    assert_eq!((p.kind, p.line, p.seq), (ChainProblemKind::Edited, 3, Some(3)), "{}", p.message);
}

#[test]
fn a_deleted_middle_row_is_reported() {
    let Some(url) = url() else { return };
    let _server = shared();
    let s = filled(&url, 8);
    sql(&url, &s, "DELETE FROM signoff_audit WHERE seq = 5");
    let p = problem(&url, &s);
    assert_eq!((p.kind, p.line, p.seq), (ChainProblemKind::Missing, 6, Some(6)), "{}", p.message);

    // Renumbering the rows after it to close the gap does not hide it.
    sql(&url, &s, "UPDATE signoff_audit SET seq = seq - 1 WHERE seq > 5");
    let p = problem(&url, &s);
    assert_eq!((p.kind, p.line), (ChainProblemKind::Edited, 5), "{}", p.message);
}

#[test]
fn rows_deleted_at_the_end_are_not_detectable_by_the_chain() {
    let Some(url) = url() else { return };
    let _server = shared();
    let s = filled(&url, 6);
    sql(&url, &s, "DELETE FROM signoff_audit WHERE seq >= 4");
    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact(), "documented: the chain alone cannot show a cut end");
    assert_eq!(report.records, 4);
}

#[test]
fn errors_are_config_or_store() {
    let Some(url) = url() else { return };
    let _server = shared();
    assert_eq!(PostgresAuditSink::connect("not a url://", None).unwrap_err().kind(), ErrorKind::Config);
    assert_eq!(PostgresAuditSink::connect(&url, Some("bad-schema")).unwrap_err().kind(), ErrorKind::Config);
    let nobody = "postgres://signoff@127.0.0.1:1/signoff?connect_timeout=2";
    assert_eq!(PostgresAuditSink::connect(nobody, None).unwrap_err().kind(), ErrorKind::Store);
    // A schema without the table.
    assert_eq!(verify_chain_postgres(&url, Some(&schema())).unwrap_err().kind(), ErrorKind::Store);
    // An empty table is an intact chain of nothing.
    let s = schema();
    let sink = PostgresAuditSink::connect(&url, Some(&s)).unwrap();
    sink.flush();
    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact());
    assert_eq!(report.records, 0);
}

/// Runs `pg_ctl <args>` through `SIGNOFF_TEST_POSTGRES_CTL`.
fn pg_ctl(ctl: &str, args: &[&str]) {
    let mut words = ctl.split_whitespace();
    let status = std::process::Command::new(words.next().unwrap())
        .args(words)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "pg_ctl {args:?} failed");
}

#[test]
fn records_written_while_the_server_is_down_arrive_once() {
    let Some(url) = url() else { return };
    let _server = shared();
    let Ok(ctl) = std::env::var("SIGNOFF_TEST_POSTGRES_CTL") else {
        eprintln!("skipped: SIGNOFF_TEST_POSTGRES_CTL is not set");
        return;
    };
    drop(_server);
    let _server = SERVER.write().unwrap_or_else(|e| e.into_inner());
    let s = schema();
    let sink: Arc<PostgresAuditSink> = PostgresAuditSink::connect(&url, Some(&s)).unwrap();
    notices(&sink, "before", 20);
    sink.try_flush().unwrap();

    pg_ctl(&ctl, &["stop", "-w", "-m", "immediate"]);
    // The server is down: records queue (record never blocks) and their batches fail.
    let started = std::time::Instant::now();
    notices(&sink, "during", 20);
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    std::thread::sleep(std::time::Duration::from_millis(700));
    pg_ctl(&ctl, &["start", "-w"]);
    notices(&sink, "after", 20);
    sink.try_flush().unwrap();
    assert!(sink.failures() > 0, "the batches written while the server was down failed");

    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    let reasons: Vec<String> = rows(&url, &s).into_iter().filter_map(|(_, r)| r.reason).collect();
    let want: Vec<String> =
        ["before", "during", "after"].iter().flat_map(|tag| (0..20).map(move |i| format!("{tag} {i}"))).collect();
    assert_eq!(reasons, want);

    // A restart while idle: the writer reconnects on the next batch.
    pg_ctl(&ctl, &["restart", "-w", "-m", "fast"]);
    notices(&sink, "later", 5);
    sink.try_flush().unwrap();
    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    assert_eq!(report.records, 65);
}

/// Runs `statements` one by one (each its own transaction) on a connection of the test's own;
/// `false` when the server refused one.
fn try_sql(url: &str, statements: &[&str]) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        for s in statements {
            if let Err(e) = client.batch_execute(s).await {
                eprintln!("{s}: {e}");
                return false;
            }
        }
        true
    })
}

/// Turns synchronous replication to a standby that never comes off again, whatever happens.
struct SyncRepOff(String);

impl Drop for SyncRepOff {
    fn drop(&mut self) {
        try_sql(&self.0, &["ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()"]);
    }
}

/// The connection is lost after the server committed a batch but before the sink heard so: the
/// batch is not written a second time.
#[test]
fn a_batch_whose_commit_was_not_acknowledged_is_not_written_twice() {
    let Some(url) = url() else { return };
    let _server = SERVER.write().unwrap_or_else(|e| e.into_inner());
    let s = schema();
    let sink = PostgresAuditSink::connect(&url, Some(&s)).unwrap();
    notices(&sink, "before", 5);
    sink.try_flush().unwrap();

    // With a synchronous standby that does not exist, COMMIT is written locally and then waits.
    if !try_sql(&url, &["ALTER SYSTEM SET synchronous_standby_names = 'nobody'", "SELECT pg_reload_conf()"]) {
        eprintln!("skipped: the test server's user cannot ALTER SYSTEM");
        return;
    }
    let reset = SyncRepOff(url.clone());
    std::thread::sleep(std::time::Duration::from_millis(200)); // the reload reaches the backends
    notices(&sink, "ambiguous", 3);
    // Wait for the writer's COMMIT to hang, then cut its connection: the transaction stays
    // committed, the sink sees only a lost connection.
    let started = std::time::Instant::now();
    loop {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let cut = rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            let q = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
            !client.query(q, &[]).await.unwrap().is_empty()
        });
        if cut {
            break;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the commit never waited");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(reset);
    notices(&sink, "after", 2);
    sink.try_flush().unwrap();
    assert!(sink.failures() > 0);

    let report = verify_chain_postgres(&url, Some(&s)).unwrap();
    assert!(report.is_intact(), "{:?}", report.problem);
    let reasons: Vec<String> = rows(&url, &s).into_iter().filter_map(|(_, r)| r.reason).collect();
    let want: Vec<String> = [("before", 5), ("ambiguous", 3), ("after", 2)]
        .iter()
        .flat_map(|(tag, n)| (0..*n).map(move |i| format!("{tag} {i}")))
        .collect();
    assert_eq!(reasons, want);
}
