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
                    "events_after"
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
                let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
                let first = if parts[3].starts_with('A') { "B" } else { "A" };
                parts[3].replace_range(0..1, first);
                token = parts.join(".");
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
        }
        if let Some(exp) = case.get("events_after") {
            let kinds: Vec<_> = events.iter().map(|e| e.kind()).collect();
            assert_eq!(json!(kinds), *exp, "{name}");
        }
        assert!(g.pending().is_empty(), "{name}: left a request pending");
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
