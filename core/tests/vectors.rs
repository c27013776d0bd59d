//! Runs the shared test vectors in `tests/vectors/*.json` (format: tests/vectors/README.md).
//! The Python, Node and Swift suites run the same files.

mod common;
use common::{drain, next_request};
use serde_json::{Value, json};
use signoff::*;
use std::path::PathBuf;
use std::time::Duration;

fn vectors(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn obj_keys(v: &Value) -> Vec<&str> {
    v.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default()
}

fn build_gate(tools: &Value, opts: &Value) -> Gate {
    // The vectors' gate options are GateConfig options (tests/vectors/config.json).
    let b = GateConfig::from_json(opts, Naming::Snake).unwrap().builder().unwrap();
    let g = b.build().unwrap();
    for t in tools.as_array().unwrap() {
        g.register_spec(ToolSpec::from_json(t.clone()).unwrap()).unwrap();
    }
    g
}

/// `"$request"` placeholders replaced by the request's fields.
fn bind(mut r: Value, req: &ConfirmationRequest) -> Value {
    let req_json = serde_json::to_value(req).unwrap();
    for k in ["id", "tool", "arguments_digest", "session_id"] {
        if r.get(k) == Some(&json!("$request")) {
            r[k] = req_json[k].clone();
        }
    }
    r
}

fn assert_subset(case: &str, what: &str, expected: &Value, actual: &Value) {
    for k in obj_keys(expected) {
        assert_eq!(actual.get(k), Some(&expected[k]), "{case}: {what}.{k} (actual {what}: {actual})");
    }
}

fn check_decision(case: &str, expected: &Value, d: &Decision) {
    let mut actual = serde_json::to_value(d).unwrap();
    if d.outcome() == Outcome::Cancelled {
        actual["cancel_reason"] = actual["reason"].take();
    }
    assert_subset(case, "decision", expected, &actual);
}

#[tokio::test(start_paused = true)]
async fn flows() {
    let file = vectors("flows.json");
    let cases = file["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        for k in obj_keys(case) {
            assert!(
                [
                    "name",
                    "tools",
                    "gate",
                    "subscribe",
                    "call",
                    "confirm_error",
                    "expect_request",
                    "request",
                    "steps",
                    "decision",
                    "events_after",
                    "after_decision"
                ]
                .contains(&k),
                "{name}: unknown field {k}"
            );
        }
        let g = build_gate(case.get("tools").unwrap_or(&file["tools"]), case.get("gate").unwrap_or(&json!({})));
        let call: ToolCall = serde_json::from_value(case["call"].clone()).unwrap();
        let mut sub = match case.get("subscribe") {
            None | Some(Value::Bool(true)) => Some(g.subscribe()),
            Some(Value::Bool(false)) => None,
            Some(v) if v == "observer" => Some(g.observe()),
            Some(other) => panic!("{name}: subscribe {other}"),
        };
        if let Some(kind) = case.get("confirm_error") {
            let e = g.confirm(call).await.unwrap_err();
            assert_eq!(json!(e.kind().as_str()), *kind, "{name}");
            assert!(g.pending().is_empty(), "{name}");
            continue;
        }
        let task = tokio::spawn({
            let g = g.clone();
            async move { g.confirm(call).await }
        });
        let expect_request = case.get("expect_request").and_then(Value::as_bool).unwrap_or(true);
        let Some(s) = sub.as_mut().filter(|_| expect_request) else {
            let d = task.await.unwrap().unwrap();
            check_decision(name, &case["decision"], &d);
            after_decision(name, &g, &d, case, None);
            if let Some(s) = sub.as_mut() {
                assert!(drain(s).await.is_empty(), "{name}: no event expected");
            }
            continue;
        };
        let req = next_request(s).await;
        if let Some(exp) = case.get("request") {
            assert_subset(name, "request", exp, &serde_json::to_value(&*req).unwrap());
        }
        let mut events = Vec::new();
        let mut cancelled = false;
        let mut token = String::new();
        for step in case["steps"].as_array().unwrap() {
            if let Some(r) = step.get("respond") {
                let resp = ConfirmationResponse::from_json(bind(r.clone(), &req)).unwrap();
                match (g.respond(resp), step.get("error"), step.get("outcome")) {
                    (Err(e), Some(k), None) => assert_eq!(json!(e.kind().as_str()), *k, "{name}: {e}"),
                    (Ok(o), None, Some(exp)) => assert_eq!(json!(o.as_str()), *exp, "{name}"),
                    (res, ..) => panic!("{name}: step {step} gave {res:?}"),
                }
            } else if step.get("wait_past_deadline").is_some() {
                tokio::time::sleep(Duration::from_millis(req.timeout_ms + 1)).await;
            } else if step.get("close").is_some() {
                g.close();
            } else if step.get("unsubscribe").is_some() {
                if let Some(s) = sub.as_mut() {
                    events.extend(drain(s).await);
                }
                sub = None;
            } else if step.get("cancel").is_some() {
                task.abort();
                cancelled = true;
            } else if let Some(s) = step.get("end_session") {
                g.end_session(s.as_str().unwrap());
            } else if let Some(who) = step.get("issue_token") {
                match (g.issue_token(&req.id, who.as_str().unwrap()), step.get("error")) {
                    (Ok(t), None) => token = t,
                    (Err(e), Some(k)) => assert_eq!(json!(e.kind().as_str()), *k, "{name}: {e}"),
                    (res, _) => panic!("{name}: step {step} gave {res:?}"),
                }
            } else if step.get("tamper_token").is_some() {
                token = tamper(&token);
            } else if let Some(kid) = step.get("rekey_token") {
                let mut parts: Vec<&str> = token.split('.').collect();
                parts[1] = kid.as_str().unwrap();
                token = parts.join(".");
            } else if let Some(ms) = step.get("sleep_ms") {
                std::thread::sleep(Duration::from_millis(ms.as_u64().unwrap()));
            } else if let Some(r) = step.get("respond_token") {
                let tr: TokenResponse = serde_json::from_value(r.clone()).unwrap();
                match (g.respond_token(&token, tr), step.get("error"), step.get("outcome")) {
                    (Err(e), Some(k), None) => assert_eq!(json!(e.kind().as_str()), *k, "{name}: {e}"),
                    (Ok(o), None, Some(exp)) => assert_eq!(json!(o.as_str()), *exp, "{name}"),
                    (res, ..) => panic!("{name}: step {step} gave {res:?}"),
                }
            } else {
                panic!("{name}: unknown step {step}");
            }
            tokio::task::yield_now().await;
        }
        if let Some(s) = sub.as_mut() {
            events.extend(drain(s).await);
        }
        if cancelled {
            assert!(
                case.get("after_decision").is_none(),
                "{name}: a cancelled call has no decision for after_decision"
            );
            let resolved = events
                .iter()
                .find_map(|e| match e {
                    Event::ConfirmationResolved(r) if r.id == req.id => Some(r.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{name}: no resolved event"));
            let exp = &case["decision"];
            assert_eq!(json!(resolved.outcome), exp["outcome"], "{name}");
            assert_eq!(json!(resolved.cancel_reason), exp["cancel_reason"], "{name}");
        } else {
            let d = task.await.unwrap().unwrap();
            check_decision(name, &case["decision"], &d);
            after_decision(name, &g, &d, case, Some(&req));
        }
        if let Some(exp) = case.get("events_after") {
            let kinds: Vec<_> = events.iter().map(|e| e.kind()).collect();
            assert_eq!(json!(kinds), *exp, "{name}");
        }
        assert!(g.pending().is_empty(), "{name}: left a request pending");
    }
}

/// Replaces the first character of a token's (or marker's) signature, its fourth part.
fn tamper(token: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let first = if parts[3].starts_with('A') { "B" } else { "A" };
    parts[3].replace_range(0..1, first);
    parts.join(".")
}

/// A flow case's `after_decision` steps: approval markers for the decision `d`.
fn after_decision(name: &str, g: &Gate, d: &Decision, case: &Value, req: Option<&ConfirmationRequest>) {
    let Some(steps) = case.get("after_decision") else { return };
    assert!(!case["decision"]["outcome"].is_null(), "{name}: after_decision needs a decision");
    let mut marker = String::new();
    for step in steps.as_array().unwrap() {
        let expected_error = step.get("error");
        if let Some(tool) = step.get("approval_marker") {
            for k in obj_keys(step) {
                assert!(["approval_marker", "error"].contains(&k), "{name}: unknown field {k} in {step}");
            }
            match (g.approval_marker(tool.as_str().unwrap(), d), expected_error) {
                (Ok(m), None) => marker = m,
                (Err(e), Some(k)) => assert_eq!(json!(e.kind().as_str()), *k, "{name}: {e}"),
                (res, _) => panic!("{name}: step {step} gave {res:?}"),
            }
        } else if let Some(t) = step.get("tamper_marker") {
            assert!(t == &json!(true) && obj_keys(step).len() == 1, "{name}: bad step {step}");
            marker = tamper(&marker);
        } else if let Some(kid) = step.get("rekey_marker") {
            assert_eq!(obj_keys(step).len(), 1, "{name}: bad step {step}");
            let mut parts: Vec<&str> = marker.split('.').collect();
            parts[1] = kid.as_str().unwrap();
            marker = parts.join(".");
        } else if let Some(call) = step.get("accept_approval_marker") {
            for k in obj_keys(step) {
                assert!(
                    ["accept_approval_marker", "error", "claims"].contains(&k),
                    "{name}: unknown field {k} in {step}"
                );
            }
            for k in obj_keys(call) {
                assert!(["tool", "arguments"].contains(&k), "{name}: unknown field {k} in {step}");
            }
            let tool = call["tool"].as_str().unwrap();
            match (g.accept_approval_marker(&marker, tool, &call["arguments"]), expected_error) {
                (Ok(c), None) => {
                    let mut exp = step.get("claims").cloned().unwrap_or(json!({}));
                    for k in obj_keys(&exp.clone()) {
                        assert!(
                            ["tool", "arguments_digest", "approver", "request_id"].contains(&k),
                            "{name}: unknown claim {k}"
                        );
                    }
                    if exp.get("request_id") == Some(&json!("$request")) {
                        exp["request_id"] = json!(req.expect("a request").id);
                    }
                    assert_subset(name, "claims", &exp, &serde_json::to_value(&c).unwrap());
                }
                (Err(e), Some(k)) => {
                    assert!(step.get("claims").is_none(), "{name}: claims with an error");
                    assert_eq!(json!(e.kind().as_str()), *k, "{name}: {e}")
                }
                (res, _) => panic!("{name}: step {step} gave {res:?}"),
            }
        } else {
            panic!("{name}: unknown after_decision step {step}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn subscriptions() {
    let file = vectors("subscriptions.json");
    let cases = file["cases"].as_array().unwrap();
    assert!(cases.len() >= 8);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        for k in obj_keys(case) {
            assert!(["name", "gate", "types", "calls", "expect", "error"].contains(&k), "{name}: unknown field {k}");
        }
        let g = build_gate(&file["tools"], case.get("gate").unwrap_or(&json!({})));
        let names: Vec<&str> = case["types"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        let types = match (EventTypes::from_names(names), case.get("error")) {
            (Ok(t), None) => t,
            (Err(e), Some(k)) => {
                assert_eq!(json!(e.kind().as_str()), *k, "{name}: {e}");
                continue;
            }
            (res, _) => panic!("{name}: {res:?}"),
        };
        let mut sub = g.subscribe().only(types);
        for c in case["calls"].as_array().unwrap() {
            for k in obj_keys(c) {
                assert!(["call", "answer", "outcome"].contains(&k), "{name}: unknown call field {k}");
            }
            let call: ToolCall = serde_json::from_value(c["call"].clone()).unwrap();
            let task = tokio::spawn({
                let g = g.clone();
                async move { g.confirm(call).await }
            });
            let id = loop {
                match g.pending().first() {
                    Some(r) => break r.id,
                    None => tokio::task::yield_now().await,
                }
            };
            let response = match c["answer"].as_str().unwrap() {
                "approve" => Some(json!({"id": id, "decision": "approve"})),
                "deny" => Some(json!({"id": id, "decision": "deny", "reason": "no"})),
                "wait" => None,
                other => panic!("{name}: answer {other}"),
            };
            if let Some(r) = response {
                g.respond(ConfirmationResponse::from_json(r).unwrap()).unwrap();
            }
            let d = task.await.unwrap().unwrap();
            assert_eq!(json!(d.outcome().as_str()), c["outcome"], "{name}");
        }
        g.close();
        let mut seen = Vec::new();
        while let Some(item) = sub.recv().await {
            seen.push(match item {
                Ok(e) => e.kind().to_owned(),
                Err(_) => "lagged".to_owned(),
            });
        }
        assert_eq!(json!(seen), case["expect"], "{name}");
    }
}

#[test]
fn events_round_trip() {
    let file = vectors("events.json");
    for ev in file["events"].as_array().unwrap() {
        let parsed = Event::from_json(ev.clone()).unwrap_or_else(|e| panic!("{ev}: {e}"));
        assert_eq!(parsed.to_json(), *ev);
    }
}

#[test]
fn malformed_responses() {
    let g = Gate::new();
    for case in vectors("malformed_responses.json")["cases"].as_array().unwrap() {
        let e = g.respond_json(case["json"].as_str().unwrap()).unwrap_err();
        assert_eq!(json!(e.kind().as_str()), case["error"], "{}: {e}", case["name"]);
    }
}

// ---- durable.json ----------------------------------------------------------------------------

/// Counts the runs of every tool of a gate; while `hold` is set, a run waits until released.
#[derive(Clone, Default)]
struct Runs {
    runs: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    started: std::sync::Arc<tokio::sync::Notify>,
    release: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Runs {
    fn count(&self) -> usize {
        self.runs.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn register(&self, g: &Gate, tools: &Value, hold: bool) {
        for t in tools.as_array().unwrap() {
            let me = self.clone();
            let executor: Executor = std::sync::Arc::new(move |_args| {
                let me = me.clone();
                Box::pin(async move {
                    me.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    me.started.notify_one();
                    while hold && !me.release.load(std::sync::atomic::Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Ok(json!({"sent": true}))
                })
            });
            g.register(Tool::from_spec(ToolSpec::from_json(t.clone()).unwrap()).with_executor(executor)).unwrap();
        }
    }
}

fn durable_gate(db: &std::path::Path) -> Gate {
    Gate::builder().store(SqliteStore::open(db).unwrap()).build().unwrap()
}

/// Copies the database as it is on disk now (with its write-ahead log): what a new process
/// would find if this one went away at this moment.
fn snapshot(from: &std::path::Path, to: &std::path::Path) {
    std::fs::copy(from, to).unwrap();
    let wal = |p: &std::path::Path| PathBuf::from(format!("{}-wal", p.display()));
    if wal(from).exists() {
        std::fs::copy(wal(from), wal(to)).unwrap();
    }
}

fn sleep_until_ms(deadline_ms: u64) -> Duration {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    Duration::from_millis(deadline_ms.saturating_sub(now) + 50)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_restart() {
    let file = vectors("durable.json");
    for k in obj_keys(&file) {
        assert!(["description", "tools", "cases"].contains(&k), "durable.json: unknown field {k}");
    }
    let tools = &file["tools"];
    let cases = file["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        for k in obj_keys(case) {
            assert!(
                [
                    "name",
                    "call",
                    "before_restart",
                    "down_past_deadline",
                    "register_after_restart",
                    "recovered_as",
                    "found_state",
                    "steps",
                    "record",
                    "runs"
                ]
                .contains(&k),
                "{name}: unknown field {k}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let (a_db, b_db) = (dir.path().join("a.db"), dir.path().join("b.db"));

        // The first process: the call is published and left pending, or approved and running.
        let before = Runs::default();
        let a = durable_gate(&a_db);
        before.register(&a, tools, true);
        let mut sub_a = a.subscribe();
        let call: ToolCall = serde_json::from_value(case["call"].clone()).unwrap();
        let task = tokio::spawn({
            let a = a.clone();
            async move { a.execute(call).await }
        });
        let req = next_request(&mut sub_a).await;
        let executing = match case["before_restart"].as_str() {
            Some("pending") => false,
            Some("executing") => {
                let started = before.started.notified();
                let approve = json!({"id": req.id, "decision": "approve", "responder": "alice"});
                a.respond(ConfirmationResponse::from_json(approve).unwrap()).unwrap();
                tokio::time::timeout(Duration::from_secs(5), started).await.expect("the tool did not start");
                true
            }
            other => panic!("{name}: before_restart {other:?}"),
        };
        // It goes away: the store as it is on disk now is what the next process finds.
        snapshot(&a_db, &b_db);
        before.release.store(true, std::sync::atomic::Ordering::SeqCst);
        a.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await.expect("the first gate's call did not end");
        assert_eq!(before.count(), usize::from(executing), "{name}: runs before the restart");
        match case.get("down_past_deadline") {
            None | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => tokio::time::sleep(sleep_until_ms(req.deadline_ms)).await,
            Some(other) => panic!("{name}: down_past_deadline {other}"),
        }

        // The next process: same store, tools registered, recover().
        let after = Runs::default();
        let b = durable_gate(&b_db);
        match case.get("register_after_restart") {
            None | Some(Value::Bool(true)) => after.register(&b, tools, false),
            Some(Value::Bool(false)) => {}
            Some(other) => panic!("{name}: register_after_restart {other}"),
        }
        let mut sub_b = b.subscribe();
        let recovery = serde_json::to_value(b.recover().unwrap()).unwrap();
        let req_json = serde_json::to_value(&*req).unwrap();
        let lists = ["restored", "timed_out", "interrupted", "not_restored"];
        let list = case["recovered_as"].as_str().unwrap();
        assert!(lists.contains(&list), "{name}: recovered_as {list}");
        for l in lists {
            let n = recovery[l].as_array().unwrap().len();
            assert_eq!(n, usize::from(l == list), "{name}: recovery.{l} ({recovery})");
        }
        let entry = &recovery[list][0];
        let found = match list {
            "restored" | "timed_out" => entry,
            "interrupted" => {
                assert_eq!(entry["state"], case["found_state"], "{name}: the state found");
                &entry["request"]
            }
            _ => {
                assert!(!entry["reason"].as_str().unwrap().is_empty(), "{name}: a reason");
                &entry["request"]
            }
        };
        if list != "interrupted" {
            assert!(case.get("found_state").is_none(), "{name}: found_state is for interrupted calls");
        }
        for k in ["id", "tool", "arguments", "arguments_digest", "session_id", "deadline_ms"] {
            assert_eq!(found[k], req_json[k], "{name}: the recovered request's {k}");
        }
        if list == "restored" {
            let again = tokio::time::timeout(Duration::from_secs(5), next_request(&mut sub_b)).await.unwrap();
            assert_eq!(again.id, req.id, "{name}: the restored request is published again");
        }
        for step in case["steps"].as_array().unwrap() {
            if let Some(r) = step.get("respond") {
                for k in obj_keys(step) {
                    assert!(["respond", "error", "outcome"].contains(&k), "{name}: unknown field {k} in {step}");
                }
                let resp = ConfirmationResponse::from_json(bind(r.clone(), &req)).unwrap();
                match (b.respond(resp), step.get("error"), step.get("outcome")) {
                    (Err(e), Some(k), None) => assert_eq!(json!(e.kind().as_str()), *k, "{name}: {e}"),
                    (Ok(o), None, Some(exp)) => assert_eq!(json!(o.as_str()), *exp, "{name}"),
                    (res, ..) => panic!("{name}: step {step} gave {res:?}"),
                }
            } else if step.get("wait_past_deadline") == Some(&json!(true)) && obj_keys(step).len() == 1 {
                tokio::time::sleep(sleep_until_ms(req.deadline_ms)).await;
            } else {
                panic!("{name}: unknown step {step}");
            }
        }
        // Settled: the record is final, and the tool ran as many times as it must.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let record = loop {
            let r = b.record(&req.id).unwrap_or_else(|| panic!("{name}: no record"));
            if r.state.is_final() {
                break r;
            }
            assert!(tokio::time::Instant::now() < deadline, "{name}: the record stays {}", r.state.as_str());
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let exp = &case["record"];
        for k in obj_keys(exp) {
            assert!(["state", "responder", "arguments"].contains(&k), "{name}: unknown record field {k}");
        }
        assert_subset(name, "record", exp, &serde_json::to_value(&record).unwrap());
        assert_eq!(json!(after.count()), case["runs"], "{name}: runs after the restart");
        assert_eq!(before.count(), usize::from(executing), "{name}: runs before the restart");
        b.close();

        // Another restart: a settled request is never picked up again.
        let later = Runs::default();
        let c = durable_gate(&b_db);
        later.register(&c, tools, false);
        let again = serde_json::to_value(c.recover().unwrap()).unwrap();
        for l in lists {
            assert_eq!(again[l], json!([]), "{name}: recovery.{l} after another restart");
        }
        assert_eq!(c.record(&req.id).unwrap().state, record.state, "{name}: the record after another restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(later.count(), 0, "{name}: runs after another restart");
        c.close();
    }
}
