//! `signoff console` as a process of its own: an agent in this process makes a gated call through
//! the shared PostgreSQL store, a person signs in to the console process and approves, and the
//! agent's call runs once. Needs `SIGNOFF_TEST_POSTGRES_URL` (scripts/with-postgres.sh sets it);
//! skipped without it unless `SIGNOFF_REQUIRE_POSTGRES` is set.

use serde_json::json;
use signoff::{GateConfig, Naming, PendingStore, Tool, ToolCall, ToolStatus};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const KEYS: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn postgres_url() -> Option<String> {
    match std::env::var("SIGNOFF_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("SIGNOFF_REQUIRE_POSTGRES").is_some() => {
            panic!("SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not")
        }
        _ => {
            eprintln!("skipped: SIGNOFF_TEST_POSTGRES_URL is not set (scripts/with-postgres.sh sets it)");
            None
        }
    }
}

/// One request over a fresh connection; returns (status, headers and body as text).
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nOrigin: http://{addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).unwrap().parse().unwrap();
    (status, out)
}

/// Whether the console's event stream shows `needle` within 10 s.
fn streamed(addr: &str, cookie: &str, key: &str, needle: &str) -> bool {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!("GET /events HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nX-Signoff-Key: {key}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let (mut seen, mut buf) = (Vec::new(), [0u8; 65536]);
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&seen).contains(needle) {
            return true;
        }
    }
    false
}

/// The agent's tool, as data both processes register.
fn email_spec() -> serde_json::Value {
    json!({
        "name": "send_email",
        "description": "Sends an email",
        "approval": "required",
        "editable": true,
        "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "cc": {"type": "string"}},
                       "required": ["to"], "additionalProperties": false}
    })
}

struct Killed(Child);

/// `signoff console` with the gate in `gate_json`, on a free loopback port, printing a sign-in
/// link for alice: the process and the lines it prints.
fn console_signing_in_alice(
    gate_json: &std::path::Path,
) -> (Killed, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signoff"))
        .args(["console", "--gate"])
        .arg(gate_json)
        .args(["--bind", "127.0.0.1:0", "--sign-in", "alice"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    (Killed(child), BufReader::new(stdout).lines())
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_console_process_answers_an_agent_in_another_process() {
    let Some(url) = postgres_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let schema = format!("console_{}", std::process::id());
    let gate_json = dir.path().join("gate.json");
    std::fs::write(&gate_json, json!({"store_url": url, "store_schema": schema, "token_keys": KEYS}).to_string())
        .unwrap();

    let (_guard, mut lines) = console_signing_in_alice(&gate_json);
    let (mut base, mut link) = (String::new(), String::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(u) = line.strip_prefix("console: ") {
            base = u.to_owned();
        } else if let Some(l) = line.strip_prefix("sign-in link for alice: ") {
            link = l.to_owned();
        } else if line == "ready" {
            break;
        }
    }
    let addr = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{base}");

    // The agent: another gate on the same store, with the tool.
    let config = GateConfig::from_json(
        &json!({"store_url": url, "store_schema": schema, "store_owner": "agent-host-1", "default_timeout_ms": 20000}),
        Naming::Snake,
    )
    .unwrap();
    let agent = config.build().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r2 = runs.clone();
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = sent.clone();
    agent
        .register(Tool::from_spec(signoff::ToolSpec::from_json(email_spec()).unwrap()).with_executor(Arc::new(
            move |args: serde_json::Value| {
                let (r, s) = (r2.clone(), s2.clone());
                Box::pin(async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    s.lock().unwrap().push(args);
                    Ok(json!("sent"))
                })
            },
        )))
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let a2 = agent.clone();
    let call = rt.spawn(async move { a2.execute(ToolCall::new("send_email", json!({"to": "cfo@example.com"}))).await });
    let request = (0..2000)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(5));
            agent.pending().into_iter().next()
        })
        .expect("the call is pending");

    // A person signs in to the console process and approves.
    let token = link.split_once("#token=").unwrap().1;
    let (status, reply) = http(&addr, "POST", "/login", &[], Some(&json!({"token": token}).to_string()));
    assert_eq!(status, 200, "{reply}");
    let cookie =
        reply.lines().find_map(|l| l.strip_prefix("set-cookie: ")).unwrap().split(';').next().unwrap().to_owned();
    // The page key comes in the sign-in's answer (the body is the last line).
    let answer: serde_json::Value = serde_json::from_str(reply.lines().last().unwrap()).unwrap();
    let key = answer["key"].as_str().unwrap().to_owned();
    // The console's stream shows the request made by the agent's process.
    assert!(streamed(&addr, &cookie, &key, &request.id.to_string()), "the console shows the agent's request");
    let body = json!({"id": request.id, "digest": request.arguments_digest, "decision": "approve"}).to_string();
    let (status, reply) =
        http(&addr, "POST", "/api/decide", &[("Cookie", &cookie), ("X-Signoff-Key", &key)], Some(&body));
    assert_eq!(status, 200, "{reply}");
    let result = rt.block_on(call).unwrap();
    assert_eq!(result.status, ToolStatus::Executed);
    assert_eq!(result.decision.as_ref().and_then(|d| d.responder()), Some("alice"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Without `--gate`, or without a `store_url`, the console serves on the one-machine store (a
/// SQLite file under XDG_STATE_HOME) with a key of its own, and prints a sign-in link for the user
/// running it: `signoff console` alone used to demand PostgreSQL (issue 42). What cannot work is
/// still refused: a single-process `store_path`, an unknown option.
#[test]
fn the_console_alone_serves_on_the_one_machine_store() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_signoff")).args(args).env("XDG_STATE_HOME", &state).output().unwrap()
    };
    let gate = dir.path().join("gate.json");
    std::fs::write(&gate, json!({"store_path": dir.path().join("x.db")}).to_string()).unwrap();
    let out = run(&["console", "--gate", gate.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`store_path` is a single-process store"), "{out:?}");
    std::fs::write(&gate, json!({"store_url": "postgres://x@127.0.0.1:1/x", "bogus": 1}).to_string()).unwrap();
    let out = run(&["console", "--gate", gate.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"), "{out:?}");
    let out = run(&["console", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--sign-in"));

    let mut child = Command::new(env!("CARGO_BIN_EXE_signoff"))
        .args(["console", "--bind", "127.0.0.1:0"])
        .env("XDG_STATE_HOME", &state)
        .env("USER", "dana")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _guard = Killed(child);
    let said: Vec<String> = lines.map_while(Result::ok).take_while(|l| l != "ready").collect();
    let db = state.join("signoff").join("signoff.db");
    let store = format!("sqlite:{}", db.display());
    assert!(
        said.iter().any(|l| l == &format!("store: {store} (agents on this machine: store_url = {store:?})")),
        "{said:?}"
    );
    assert!(said.iter().any(|l| l.starts_with("sign-in link for dana: http://127.0.0.1:")), "{said:?}");
    assert!(db.exists());
}

/// An agent process for [`agents_in_two_processes_are_answered_by_the_console_process`]: with
/// `SIGNOFF_TEST_AGENT_STORE` set, it makes one gated `send_email` call on that store as owner
/// `SIGNOFF_TEST_AGENT`, appends a line to `SIGNOFF_TEST_AGENT_RUNS` when the tool runs, and
/// prints the call's status. Without it, nothing.
#[test]
#[ignore = "a child process of another test"]
fn agent_process() {
    let (Ok(store), Ok(owner), Ok(runs)) = (
        std::env::var("SIGNOFF_TEST_AGENT_STORE"),
        std::env::var("SIGNOFF_TEST_AGENT"),
        std::env::var("SIGNOFF_TEST_AGENT_RUNS"),
    ) else {
        return;
    };
    let timeout: u64 =
        std::env::var("SIGNOFF_TEST_AGENT_TIMEOUT_MS").ok().and_then(|t| t.parse().ok()).unwrap_or(30000);
    let config =
        json!({"store_url": store, "store_owner": owner, "default_timeout_ms": timeout, "deny_when_unobserved": false});
    let gate = GateConfig::from_json(&config, Naming::Snake).unwrap().build().unwrap();
    let me = owner.clone();
    gate.register(Tool::from_spec(signoff::ToolSpec::from_json(email_spec()).unwrap()).with_executor(Arc::new(
        move |args: serde_json::Value| {
            let (runs, me) = (runs.clone(), me.clone());
            Box::pin(async move {
                let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&runs).unwrap();
                writeln!(f, "{me} {}", args["to"]).unwrap();
                Ok(json!("sent"))
            })
        },
    )))
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = rt.block_on(gate.execute(ToolCall::new("send_email", json!({"to": format!("{owner}@example.com")}))));
    gate.close();
    println!("status: {:?} {}", r.status, r.content.replace('\n', " "));
}

/// `signoff console` on the one-machine store and two agents, each a process of its own, on the
/// same file (issue 42): both requests appear on the console, a person approves one and denies
/// the other there, and each agent's call ends accordingly, the approved tool run exactly once.
#[test]
fn agents_in_two_processes_are_answered_by_the_console_process() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut child = Command::new(env!("CARGO_BIN_EXE_signoff"))
        .args(["console", "--bind", "127.0.0.1:0", "--sign-in", "alice"])
        .env("XDG_STATE_HOME", &state)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _console = Killed(child);
    let (mut base, mut link, mut store) = (String::new(), String::new(), String::new());
    for line in lines.map_while(Result::ok) {
        if let Some(u) = line.strip_prefix("console: ") {
            base = u.to_owned();
        } else if let Some(l) = line.strip_prefix("sign-in link for alice: ") {
            link = l.to_owned();
        } else if let Some(s) = line.strip_prefix("store: ") {
            store = s.split(' ').next().unwrap().to_owned();
        } else if line == "ready" {
            break;
        }
    }
    assert!(store.starts_with("sqlite:"), "{store}");
    let addr = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let runs = dir.path().join("runs.txt");
    let agents: Vec<Killed> = ["agent-1", "agent-2"]
        .iter()
        .map(|owner| {
            Killed(
                Command::new(std::env::current_exe().unwrap())
                    .args(["--ignored", "--exact", "agent_process", "--nocapture", "--test-threads", "1"])
                    .env("SIGNOFF_TEST_AGENT_STORE", &store)
                    .env("SIGNOFF_TEST_AGENT", owner)
                    .env("SIGNOFF_TEST_AGENT_RUNS", &runs)
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();

    let token = link.split_once("#token=").unwrap().1;
    let (status, reply) = http(&addr, "POST", "/login", &[], Some(&json!({"token": token}).to_string()));
    assert_eq!(status, 200, "{reply}");
    let cookie =
        reply.lines().find_map(|l| l.strip_prefix("set-cookie: ")).unwrap().split(';').next().unwrap().to_owned();
    let key = serde_json::from_str::<serde_json::Value>(reply.lines().last().unwrap()).unwrap()["key"]
        .as_str()
        .unwrap()
        .to_owned();
    // Both agents' requests, read from the console's own snapshot of its store.
    let reader = signoff::SqliteSharedStore::open(store.strip_prefix("sqlite:").unwrap(), Default::default()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let pending = loop {
        let p = reader.list();
        if p.len() == 2 {
            break p;
        }
        assert!(std::time::Instant::now() < deadline, "{} of 2 requests pending", p.len());
        std::thread::sleep(Duration::from_millis(20));
    };
    for r in &pending {
        assert!(streamed(&addr, &cookie, &key, &r.id.to_string()), "the console shows {}", r.id);
    }
    let of = |who: &str| pending.iter().find(|r| r.arguments.value()["to"] == format!("{who}@example.com")).unwrap();
    let decide = |r: &signoff::ConfirmationRequest, decision: &str| {
        let body = json!({"id": r.id, "digest": r.arguments_digest, "decision": decision, "reason": "not today"});
        let (status, reply) = http(
            &addr,
            "POST",
            "/api/decide",
            &[("Cookie", &cookie), ("X-Signoff-Key", &key)],
            Some(&body.to_string()),
        );
        assert_eq!(status, 200, "{reply}");
    };
    decide(of("agent-1"), "approve");
    decide(of("agent-2"), "deny");
    let mut said = Vec::new();
    for mut agent in agents {
        let mut out = String::new();
        agent.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(agent.0.wait().unwrap().success(), "{out}");
        said.push(out);
    }
    assert!(said[0].contains("status: Executed"), "{}", said[0]);
    assert!(said[1].contains("status: Denied") && said[1].contains("not today"), "{}", said[1]);
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "agent-1 \"agent-1@example.com\"\n", "run once, by agent-1");
    let decided = reader.record(&of("agent-1").id).unwrap();
    assert_eq!((decided.state, decided.responder.as_deref()), (signoff::RecordState::Done, Some("alice")));
}

/// SIGTERM or SIGINT to the console: it stops listening, closes its gate and flushes the audit
/// log (here the notice of the sign-in link it issued), and exits 0. The signals used to end it
/// at once, with records still queued for the log's writer.
#[cfg(unix)]
#[test]
fn a_signal_stops_the_console_with_its_audit_log_written() {
    let Some(url) = postgres_url() else { return };
    for signal in ["TERM", "INT"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let gate_json = dir.path().join("gate.json");
        let schema = format!("console_stop_{}", std::process::id());
        let gate = json!({"store_url": url, "store_schema": schema, "token_keys": KEYS, "audit_path": log});
        std::fs::write(&gate_json, gate.to_string()).unwrap();
        let (mut console, mut lines) = console_signing_in_alice(&gate_json);
        assert!(lines.by_ref().map_while(Result::ok).any(|l| l == "ready"), "the console starts");

        let sent = Command::new("kill").args([&format!("-{signal}"), &console.0.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = console.0.try_wait().unwrap() {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "still running 10 s after SIG{signal}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "SIG{signal}: {status:?}");
        let text = std::fs::read_to_string(&log).unwrap();
        let issued = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .any(|r| r["decision"] == "sign-in-issued" && r["responder"] == "alice");
        assert!(issued, "the sign-in link's notice is in the log: {text:?}");
        let out = Command::new(env!("CARGO_BIN_EXE_signoff")).arg("audit").arg("verify").arg(&log).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
}

/// An agent SIGKILLed while its call waits on the one-machine store: nothing runs, and its
/// request does not stay pending for ever: another process on the file times it out at its
/// deadline (each shared store sweeps every owner's expired requests).
#[cfg(unix)]
#[test]
fn a_killed_agents_request_times_out_on_the_shared_store_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("signoff.db");
    let store = format!("sqlite:{}", db.display());
    let runs = dir.path().join("runs.txt");
    let mut agent = Killed(
        Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "agent_process", "--nocapture", "--test-threads", "1"])
            .env("SIGNOFF_TEST_AGENT_STORE", &store)
            .env("SIGNOFF_TEST_AGENT", "doomed")
            .env("SIGNOFF_TEST_AGENT_RUNS", &runs)
            .env("SIGNOFF_TEST_AGENT_TIMEOUT_MS", "1500")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let watcher = signoff::SqliteSharedStore::open(&db, Default::default()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let request = loop {
        if let Some(r) = watcher.list().pop() {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "the agent's request never appeared");
        std::thread::sleep(Duration::from_millis(10));
    };
    let killed = Command::new("kill").args(["-KILL", &agent.0.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let _ = agent.0.wait();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let state = watcher.record(&request.id).unwrap().state;
        if state == signoff::RecordState::TimedOut {
            break;
        }
        assert_eq!(state, signoff::RecordState::Pending);
        assert!(std::time::Instant::now() < deadline, "still {state:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(watcher.list().is_empty());
    assert!(!runs.exists(), "nothing ran");
    // The same owner, back, finds nothing of its own left open.
    let back = signoff::SqliteSharedStore::open(
        &db,
        signoff::SqliteSharedOptions { owner: Some("doomed".into()), ..Default::default() },
    )
    .unwrap();
    assert!(back.unfinished().unwrap().is_empty());
}

/// console/README.md's one-machine step, as written: its `sh` block's command, run from a fresh
/// home, prints what the block's comments say it prints (the console's address, the store agents
/// give their gates, a sign-in link for the user). The default port taken (here: held by the test
/// itself) is said on stderr and a free one served instead.
#[test]
fn the_console_readmes_one_machine_step_works_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../console/README.md")).unwrap();
    let block = readme
        .split("As a process of its own, for agents in other processes")
        .nth(1)
        .and_then(|r| r.split("```sh\n").nth(1))
        .and_then(|r| r.split("```").next())
        .expect("the one-machine block in console/README.md");
    let mut lines = block.lines();
    let first = lines.next().unwrap();
    let (command, said) = first.split_once('#').unwrap();
    assert_eq!(command.trim(), "signoff console", "{block}");
    let mut expected: Vec<String> = vec![said.trim().to_owned()];
    expected.extend(lines.filter_map(|l| l.split_once('#')).map(|(_, c)| c.trim().to_owned()));
    // What each printed line starts with, as the comments show it.
    let prefixes: Vec<&str> =
        expected.iter().map(|e| e.split("http").next().unwrap().split("sqlite:").next().unwrap()).collect();
    assert_eq!(prefixes, ["console: ", "store: ", "sign-in link for me: "], "{expected:?}");

    let dir = tempfile::tempdir().unwrap();
    let _held = std::net::TcpListener::bind("127.0.0.1:8080"); // whoever holds it, it is taken
    let mut child = Command::new(env!("CARGO_BIN_EXE_signoff"))
        .args(command.split_whitespace().skip(1))
        .env("XDG_STATE_HOME", dir.path())
        .env("USER", "me")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let _guard = Killed(child);
    let printed: Vec<String> = BufReader::new(out).lines().map_while(Result::ok).take_while(|l| l != "ready").collect();
    assert_eq!(printed.len(), 3, "{printed:?}");
    for (line, prefix) in printed.iter().zip(&prefixes) {
        assert!(line.starts_with(prefix), "{line:?} does not start as the README shows: {prefix:?}");
    }
    assert!(printed[0].starts_with("console: http://127.0.0.1:") && !printed[0].ends_with(":8080/"), "{printed:?}");
    assert!(printed[1].contains(&format!("sqlite:{}", dir.path().join("signoff/signoff.db").display())), "{printed:?}");
    let warned = BufReader::new(err).lines().map_while(Result::ok).next().unwrap_or_default();
    assert_eq!(warned, "signoff console: 127.0.0.1:8080 is in use, so the console takes a free port");
}
