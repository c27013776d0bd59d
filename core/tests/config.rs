//! GateConfig: one validation for every language; the shared vectors in tests/vectors/config.json.

use serde_json::{Value, json};
use signoff::*;

fn vectors() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/config.json")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["cases"].as_array().unwrap().clone()
}

fn camel_keys(v: &Value) -> Value {
    let Value::Object(m) = v else { return v.clone() };
    let camel = |k: &str| {
        let mut out = String::new();
        let mut up = false;
        for c in k.chars() {
            if c == '_' {
                up = true;
            } else if up {
                out.extend(c.to_uppercase());
                up = false;
            } else {
                out.push(c);
            }
        }
        out
    };
    // Only the option names are camelCased, not the tool names inside `approvers`.
    Value::Object(m.iter().map(|(k, v)| (camel(k), v.clone())).collect())
}

#[test]
fn the_shared_config_vectors_hold_in_both_namings() {
    let cases = vectors();
    assert!(cases.len() >= 20);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        // Without the `postgres` feature a store URL is refused before anything else is checked.
        if !cfg!(feature = "postgres") && case["options"].get("store_url").is_some() {
            continue;
        }
        for naming in [Naming::Snake, Naming::Camel] {
            let options = if naming == Naming::Camel { camel_keys(&case["options"]) } else { case["options"].clone() };
            let result = GateConfig::from_json(&options, naming).and_then(|c| c.build());
            match case.get("error").and_then(Value::as_str) {
                None => {
                    let gate = result.unwrap_or_else(|e| panic!("{name} ({naming:?}): {e}"));
                    gate.close();
                }
                Some(kind) => {
                    let e = result.err().unwrap_or_else(|| panic!("{name} ({naming:?}): built"));
                    assert_eq!(e.kind().as_str(), kind, "{name} ({naming:?}): {e}");
                    let mention = case["mentions"].as_str().unwrap();
                    let mention = if naming == Naming::Camel {
                        camel_keys(&json!({mention: 0})).as_object().unwrap().keys().next().unwrap().clone()
                    } else {
                        mention.to_owned()
                    };
                    assert!(e.to_string().contains(&mention), "{name} ({naming:?}): {e} should name {mention}");
                }
            }
        }
    }
}

#[test]
fn the_config_takes_effect() {
    let dir = tempfile::tempdir().unwrap();
    let options = json!({
        "default_timeout_ms": 1234,
        "keywords": ["zap"],
        "store_path": dir.path().join("s.db").to_str().unwrap(),
        "synchronous_full": true,
        "audit_path": dir.path().join("audit.jsonl").to_str().unwrap(),
        "audit_rotate_bytes": 100000,
    });
    let gate = GateConfig::from_json(&options, Naming::Snake).unwrap().build().unwrap();
    assert_eq!(gate.policy().default_timeout.as_millis(), 1234);
    assert_eq!(gate.policy().keywords, vec!["zap".to_owned()]);
    // The store holds the database: a second gate on it is refused until this one closes.
    let again = GateConfig::from_json(&options, Naming::Snake).unwrap();
    assert_eq!(again.build().unwrap_err().kind(), ErrorKind::Store);
    gate.close();
    again.build().unwrap().close();
    assert!(dir.path().join("audit.jsonl").exists());
}

#[test]
fn an_audit_log_that_cannot_be_opened_is_an_io_error() {
    let options = json!({"audit_path": "/nonexistent-dir/signoff/audit.jsonl"});
    let e = GateConfig::from_json(&options, Naming::Snake).unwrap().build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
}

#[test]
fn the_builder_refuses_an_absurd_bus_capacity_instead_of_aborting() {
    for n in [0, usize::MAX, 1_000_000_000] {
        assert_eq!(Gate::builder().bus_capacity(n).build().unwrap_err().kind(), ErrorKind::Config);
    }
}

/// The builder had no bound: `usize::MAX` panicked at the first answer (its table of resolved ids
/// overflowed) and `1 << 40` aborted the process (a 600 GB allocation).
#[test]
fn the_builder_refuses_absurd_counts_of_remembered_ids_and_answers_with_the_largest() {
    for n in [usize::MAX, 1 << 40, config::MAX_REMEMBERED + 1] {
        assert_eq!(Gate::builder().remember_resolved(n).build().unwrap_err().kind(), ErrorKind::Config);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    for n in [0, config::MAX_REMEMBERED] {
        let g = Gate::builder()
            .remember_resolved(n)
            .tool(Tool::builder("delete_file").approval(ApprovalMode::Required).build())
            .build()
            .unwrap();
        let _approver = g.on_request_inline(|p| drop(p.approve()));
        let d = rt.block_on(g.confirm(ToolCall::new("delete_file", json!({})))).unwrap();
        assert!(d.is_approved(), "{n}: {d:?}");
        let again = g.respond(ConfirmationResponse::by_id(d.request_id().unwrap(), ResponseDecision::Approve));
        let expected = if n == 0 { ErrorKind::UnknownRequest } else { ErrorKind::AlreadyResolved };
        assert_eq!(again.unwrap_err().kind(), expected, "{n}");
    }
}

#[test]
fn options_must_be_an_object() {
    assert_eq!(GateConfig::from_json(&json!([1]), Naming::Snake).unwrap_err().kind(), ErrorKind::Config);
}

#[test]
fn a_binding_can_add_objects_and_then_validate() {
    // token_ttl_ms needs token keys: read first, add the keys object, then validate.
    let mut c = GateConfig::read_json(&json!({"tokenTtlMs": 1000}), Naming::Camel).unwrap();
    assert_eq!(c.validate(Naming::Camel).unwrap_err().kind(), ErrorKind::Config);
    c.token_keys = Some(TokenKeys::new("k1", Secret::generate()).unwrap());
    c.validate(Naming::Camel).unwrap();
    c.build().unwrap().close();
}

#[test]
fn a_gate_dropped_without_close_releases_its_store_and_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let options = json!({
        "store_path": dir.path().join("s.db").to_str().unwrap(),
        "audit_path": dir.path().join("audit.jsonl").to_str().unwrap(),
    });
    let threads = || std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    let before = threads();
    for _ in 0..20 {
        let gate = GateConfig::from_json(&options, Naming::Snake).unwrap().build().unwrap();
        let _sub = gate.subscribe();
        drop(gate); // no close()
    }
    // Reopening works (the store's lock was released) and no writer thread was left behind.
    let gate = GateConfig::from_json(&options, Naming::Snake).unwrap().build().unwrap();
    gate.close();
    if before > 0 {
        // (Other tests in this binary run concurrently and may hold a writer thread each.)
        assert!(threads() <= before + 5, "threads grew from {before} to {}", threads());
    }
    assert!(verify_chain(dir.path().join("audit.jsonl")).unwrap().is_intact());
}
