//! Signed approval tokens: every rejection, single use under concurrency, rotation, approvers.

mod common;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use serde_json::{Value, json};
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const SECRET_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const SECRET_B: &str = "ISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A=";

fn keys(kid: &str, secret: &str) -> TokenKeys {
    TokenKeys::new(kid, Secret::from_base64(secret).unwrap()).unwrap()
}

fn remote_gate(b: GateBuilder, runs: Arc<AtomicUsize>) -> Gate {
    gate_with(b.deny_when_unobserved(false).tokens(keys("k1", SECRET_A)), runs)
}

async fn wait_pending(gate: &Gate, n: usize) -> Vec<Arc<ConfirmationRequest>> {
    for _ in 0..2000 {
        let p = gate.pending();
        if p.len() >= n {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("expected {n} pending requests");
}

/// Starts `execute(del(path))` in a task and returns it with its pending request.
async fn pending_delete(
    gate: &Gate,
    call: ToolCall,
) -> (tokio::task::JoinHandle<ToolResult>, Arc<ConfirmationRequest>) {
    let before: Vec<_> = gate.pending().iter().map(|r| r.id).collect();
    let g = gate.clone();
    let task = tokio::spawn(async move { g.execute(call).await });
    loop {
        if let Some(r) = wait_pending(gate, before.len() + 1).await.into_iter().find(|r| !before.contains(&r.id)) {
            return (task, r);
        }
    }
}

fn kind<T: std::fmt::Debug>(r: Result<T>) -> ErrorKind {
    r.unwrap_err().kind()
}

#[tokio::test]
async fn a_token_approval_runs_the_stored_arguments_exactly_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let audit = MemoryAuditSink::new();
    let gate = remote_gate(Gate::builder().audit(audit.clone()), runs.clone());
    let (task, req) = pending_delete(&gate, del("/etc/passwd").call_id("c1")).await;
    let token = gate.issue_token(&req.id, "alice").unwrap();
    assert!(token.starts_with("so1.k1."), "{token}");

    let claims = gate.inspect_token(&token).unwrap();
    assert_eq!((claims.request_id, claims.approver.as_str(), claims.tool.as_str()), (req.id, "alice", "delete_file"));
    assert_eq!(claims.arguments_digest, req.arguments_digest);
    assert_eq!(claims.expires_at_ms, req.deadline_ms, "expires with the request by default");

    assert_eq!(gate.respond_token(&token, TokenResponse::approve("alice")).unwrap(), Outcome::Approved);
    let result = task.await.unwrap();
    assert_eq!(result.status, ToolStatus::Executed);
    assert_eq!(result.output, Some(json!({"deleted": "/etc/passwd"})));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Replay: refused, nothing runs again.
    assert_eq!(kind(gate.respond_token(&token, TokenResponse::approve("alice"))), ErrorKind::AlreadyUsed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The audit shows the issue (never the token itself), the response by alice, and the rejected replay.
    let records = audit.records();
    let text = serde_json::to_string(&records).unwrap();
    assert!(!text.contains(&token), "a token must never be logged");
    assert!(
        records
            .iter()
            .any(|r| r.decision.as_deref() == Some("token-issued") && r.responder.as_deref() == Some("alice"))
    );
    assert!(records.iter().any(|r| r.kind == AuditKind::Response && r.responder.as_deref() == Some("alice")));
    assert!(
        records.iter().any(|r| r.kind == AuditKind::ResponseRejected && r.error_kind == Some(ErrorKind::AlreadyUsed))
    );
}

fn split(token: &str) -> (String, String, Value, String) {
    let p: Vec<&str> = token.split('.').collect();
    assert_eq!(p.len(), 4);
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p[2]).unwrap()).unwrap();
    (p[0].to_owned(), p[1].to_owned(), claims, p[3].to_owned())
}

fn join(prefix: &str, kid: &str, claims: &Value, sig: &str) -> String {
    format!("{prefix}.{kid}.{}.{sig}", URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap()))
}

#[tokio::test]
async fn a_token_tampered_in_any_field_is_rejected_and_changes_nothing() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = remote_gate(Gate::builder(), runs.clone());
    let (task, req) = pending_delete(&gate, del("/a")).await;
    let (_other_task, other) = pending_delete(&gate, del("/b")).await;
    let token = gate.issue_token(&req.id, "alice").unwrap();
    let (prefix, kid, claims, sig) = split(&token);

    let tampered: Vec<(&str, Value)> = vec![
        ("rid", json!(other.id)),
        ("tool", json!("read_file")),
        ("dig", json!(other.arguments_digest)),
        ("sid", json!("another-session")),
        ("apr", json!("mallory")),
        ("iat", json!(claims["iat"].as_u64().unwrap() - 1)),
        ("exp", json!(claims["exp"].as_u64().unwrap() + 3_600_000)),
    ];
    for (field, value) in tampered {
        let mut c = claims.clone();
        c[field] = value;
        let forged = join(&prefix, &kid, &c, &sig);
        let approver = if field == "apr" { "mallory" } else { "alice" };
        assert_eq!(
            kind(gate.respond_token(&forged, TokenResponse::approve(approver))),
            ErrorKind::BadSignature,
            "{field}"
        );
    }
    // The signature itself, one character off.
    let mut bad_sig = sig.clone().into_bytes();
    bad_sig[3] = if bad_sig[3] == b'A' { b'B' } else { b'A' };
    let forged = join(&prefix, &kid, &claims, std::str::from_utf8(&bad_sig).unwrap());
    assert_eq!(kind(gate.respond_token(&forged, TokenResponse::approve("alice"))), ErrorKind::BadSignature);
    // A token signed with a different secret under the same key id: forged.
    let mut c: TokenClaims = gate.inspect_token(&token).unwrap();
    let forged = keys("k1", SECRET_B).sign(&mut c);
    assert_eq!(kind(gate.respond_token(&forged, TokenResponse::approve("alice"))), ErrorKind::BadSignature);
    // Another key id: unknown.
    let forged = keys("k9", SECRET_A).sign(&mut c);
    assert_eq!(kind(gate.respond_token(&forged, TokenResponse::approve("alice"))), ErrorKind::UnknownKey);
    // Structure.
    for junk in ["", "so1", "so1.k1.x", "so2.k1.e30.AAAA", &format!("{token}.x"), "so1.k1.e30.!!!"] {
        assert_eq!(kind(gate.respond_token(junk, TokenResponse::approve("alice"))), ErrorKind::Malformed, "{junk:?}");
    }

    // Nothing above changed the request: the genuine token still works, once.
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(gate.pending().len(), 2);
    gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
    assert_eq!(task.await.unwrap().output, Some(json!({"deleted": "/a"})));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn wrong_approver_is_refused_without_using_up_the_token() {
    let gate = remote_gate(Gate::builder(), Arc::new(AtomicUsize::new(0)));
    let (task, req) = pending_delete(&gate, del("/a")).await;
    let token = gate.issue_token(&req.id, "alice").unwrap();
    match gate.respond_token(&token, TokenResponse::approve("bob")).unwrap_err() {
        Error::WrongApprover { expected, got, .. } => assert_eq!((expected.as_str(), got.as_str()), ("alice", "bob")),
        e => panic!("{e:?}"),
    }
    // Not even a denial from the wrong person.
    assert_eq!(kind(gate.respond_token(&token, TokenResponse::deny("bob", None))), ErrorKind::WrongApprover);
    gate.respond_token(&token, TokenResponse::deny("alice", Some("not today".into()))).unwrap();
    let r = task.await.unwrap();
    assert_eq!(r.status, ToolStatus::Denied);
    assert!(r.content.contains("not today"));
}

#[tokio::test]
async fn an_expired_token_is_refused_and_the_request_stays_pending() {
    let gate = remote_gate(Gate::builder().token_ttl(Duration::from_millis(30)), Arc::new(AtomicUsize::new(0)));
    let (task, req) = pending_delete(&gate, del("/a")).await;
    let token = gate.issue_token(&req.id, "alice").unwrap();
    let claims = gate.inspect_token(&token).unwrap();
    assert!(claims.expires_at_ms <= claims.issued_at_ms + 30);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(kind(gate.respond_token(&token, TokenResponse::approve("alice"))), ErrorKind::TokenExpired);
    assert_eq!(gate.pending().len(), 1);
    // A fresh token works.
    let fresh = gate.issue_token(&req.id, "alice").unwrap();
    gate.respond_token(&fresh, TokenResponse::approve("alice")).unwrap();
    assert_eq!(task.await.unwrap().status, ToolStatus::Executed);
}

#[tokio::test]
async fn rotated_keys_keep_verifying_tokens_issued_before_the_rotation() {
    // Tokens issued under k1 (before the rotation) are still out there.
    let old = keys("k1", SECRET_A);
    let rotated = old.clone().rotate("k2", Secret::from_base64(SECRET_B).unwrap()).unwrap();
    assert_eq!(rotated.key_ids(), ["k2", "k1"]);
    let gate = gate_with(Gate::builder().deny_when_unobserved(false).tokens(rotated), Arc::new(AtomicUsize::new(0)));
    let (t1, r1) = pending_delete(&gate, del("/a")).await;
    let (t2, r2) = pending_delete(&gate, del("/b")).await;
    let new_token = gate.issue_token(&r1.id, "alice").unwrap();
    assert!(new_token.starts_with("so1.k2."));
    let mut c = gate.inspect_token(&new_token).unwrap();
    c.request_id = r2.id;
    c.arguments_digest = r2.arguments_digest.to_string();
    let old_token = old.sign(&mut c);
    assert!(old_token.starts_with("so1.k1."));
    gate.respond_token(&old_token, TokenResponse::approve("alice")).unwrap();
    gate.respond_token(&new_token, TokenResponse::approve("alice")).unwrap();
    assert_eq!(t1.await.unwrap().status, ToolStatus::Executed);
    assert_eq!(t2.await.unwrap().status, ToolStatus::Executed);

    // Once k1 is dropped from the configuration, its tokens name an unknown key.
    let gate2 = gate_with(
        Gate::builder().deny_when_unobserved(false).tokens(keys("k2", SECRET_B)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (_t3, r3) = pending_delete(&gate2, del("/c")).await;
    c.request_id = r3.id;
    c.arguments_digest = r3.arguments_digest.to_string();
    let old_token = old.sign(&mut c);
    assert_eq!(kind(gate2.respond_token(&old_token, TokenResponse::approve("alice"))), ErrorKind::UnknownKey);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_submissions_of_one_token_execute_exactly_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = remote_gate(Gate::builder(), runs.clone());
    const ROUNDS: usize = 300;
    for round in 0..ROUNDS {
        let (task, req) = pending_delete(&gate, del(&format!("/r{round}"))).await;
        let token = Arc::new(gate.issue_token(&req.id, "alice").unwrap());
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let submit = |g: Gate, t: Arc<String>, b: Arc<std::sync::Barrier>| {
            std::thread::spawn(move || {
                b.wait();
                g.respond_token(&t, TokenResponse::approve("alice"))
            })
        };
        let a = submit(gate.clone(), token.clone(), barrier.clone());
        let b = submit(gate.clone(), token.clone(), barrier.clone());
        let results = [a.join().unwrap(), b.join().unwrap()];
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let used = results.iter().filter(|r| matches!(r, Err(e) if e.kind() == ErrorKind::AlreadyUsed)).count();
        assert_eq!((ok, used), (1, 1), "round {round}: {results:?}");
        assert_eq!(task.await.unwrap().status, ToolStatus::Executed);
    }
    assert_eq!(runs.load(Ordering::SeqCst), ROUNDS);
}

#[tokio::test]
async fn a_token_for_a_request_that_is_not_pending_is_refused() {
    let gate = remote_gate(Gate::builder(), Arc::new(AtomicUsize::new(0)));
    let (task, req) = pending_delete(&gate, del("/a")).await;
    let token = gate.issue_token(&req.id, "alice").unwrap();
    gate.respond(ConfirmationResponse::deny(&req, None).with_responder("carol")).unwrap();
    assert_eq!(task.await.unwrap().status, ToolStatus::Denied);
    match gate.respond_token(&token, TokenResponse::approve("alice")).unwrap_err() {
        Error::NotPending { state, .. } => assert_eq!(state, "denied"),
        e => panic!("{e:?}"),
    }
    // Tokens are issued for pending requests only.
    assert_eq!(kind(gate.issue_token(&req.id, "alice")), ErrorKind::NotPending);
    assert_eq!(kind(gate.issue_token(&uuid::Uuid::new_v4(), "alice")), ErrorKind::NotPending);
    // A gate without keys cannot issue or verify.
    let plain = gate_with(Gate::builder().deny_when_unobserved(false), Arc::new(AtomicUsize::new(0)));
    let (_t, r) = pending_delete(&plain, del("/x")).await;
    assert_eq!(kind(plain.issue_token(&r.id, "alice")), ErrorKind::Config);
    assert_eq!(kind(plain.respond_token(&token, TokenResponse::approve("alice"))), ErrorKind::Config);
}

#[tokio::test]
async fn edits_travel_separately_and_are_validated_before_they_can_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let audit = MemoryAuditSink::new();
    let gate = remote_gate(Gate::builder().audit(audit.clone()), runs.clone());
    let (task, req) = pending_delete(&gate, del("/etc/passwd")).await;
    let token = gate.issue_token(&req.id, "alice").unwrap();
    // An edit that fails the schema is refused and does not use up the token.
    let bad = TokenResponse::approve("alice").with_arguments(json!({"path": 42}));
    assert_eq!(kind(gate.respond_token(&token, bad)), ErrorKind::InvalidArguments);
    let good = TokenResponse::approve("alice").with_arguments(json!({"path": "/tmp/safe"}));
    gate.respond_token(&token, good).unwrap();
    let r = task.await.unwrap();
    assert_eq!((r.edited, r.output), (true, Some(json!({"deleted": "/tmp/safe"}))));
    let resp = audit.records().into_iter().find(|r| r.kind == AuditKind::Response).unwrap();
    assert_eq!(resp.arguments, Some(json!({"path": "/etc/passwd"})));
    assert_eq!(resp.edited_arguments, Some(json!({"path": "/tmp/safe"})));

    // A tool that is not editable refuses edits through a token too.
    gate.register(
        Tool::builder("send_payment")
            .description("Pays")
            .approval(ApprovalMode::Required)
            .executor(|_| async { Ok(json!("paid")) })
            .build(),
    )
    .unwrap();
    let (_t, req) = pending_delete(&gate, ToolCall::new("send_payment", json!({"to": "x"}))).await;
    let token = gate.issue_token(&req.id, "alice").unwrap();
    let edit = TokenResponse::approve("alice").with_arguments(json!({"to": "y"}));
    assert_eq!(kind(gate.respond_token(&token, edit)), ErrorKind::EditsNotAllowed);
}

#[tokio::test]
async fn approvers_decide_who_may_approve_which_tool() {
    let approvers =
        Approvers::new().allow("delete_file", ["alice"]).allow_all_tools(["root"]).forbid_self_approval(true);
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = remote_gate(Gate::builder().authenticator(Arc::new(approvers)), runs.clone());

    let (t1, r1) = pending_delete(&gate, del("/a")).await;
    let bob = gate.issue_token(&r1.id, "bob").unwrap();
    assert_eq!(kind(gate.respond_token(&bob, TokenResponse::approve("bob"))), ErrorKind::Unauthorized);
    // Plain responses go through the same check.
    assert_eq!(kind(gate.respond(ConfirmationResponse::approve(&r1).with_responder("bob"))), ErrorKind::Unauthorized);
    assert_eq!(
        kind(gate.respond(ConfirmationResponse::approve(&r1))),
        ErrorKind::Unauthorized,
        "approvals must name a responder"
    );
    // Anyone may refuse: that is the safe side.
    let alice = gate.issue_token(&r1.id, "alice").unwrap();
    gate.respond_token(&alice, TokenResponse::approve("alice")).unwrap();
    assert_eq!(t1.await.unwrap().status, ToolStatus::Executed);

    // `root` may approve any tool, but not a request from its own session.
    let (t2, r2) = pending_delete(&gate, del("/b").session("root")).await;
    let root = gate.issue_token(&r2.id, "root").unwrap();
    match gate.respond_token(&root, TokenResponse::approve("root")).unwrap_err() {
        Error::Unauthorized { reason, .. } => assert!(reason.contains("own session"), "{reason}"),
        e => panic!("{e:?}"),
    }
    gate.respond(ConfirmationResponse::deny(&r2, Some("no self-approval".into())).with_responder("mallory")).unwrap();
    assert_eq!(t2.await.unwrap().status, ToolStatus::Denied);

    // A callback can refuse too.
    let checked = Approvers::new().check(|req, who| {
        if req.arguments.value()["path"].as_str().is_some_and(|p| p.starts_with("/etc")) && who != "sre" {
            Err("only sre may approve changes under /etc".into())
        } else {
            Ok(())
        }
    });
    let gate = remote_gate(Gate::builder().authenticator(Arc::new(checked)), runs.clone());
    let (t3, r3) = pending_delete(&gate, del("/etc/hosts")).await;
    assert_eq!(kind(gate.respond(ConfirmationResponse::approve(&r3).with_responder("alice"))), ErrorKind::Unauthorized);
    gate.respond(ConfirmationResponse::approve(&r3).with_responder("sre")).unwrap();
    assert_eq!(t3.await.unwrap().status, ToolStatus::Executed);
}

#[test]
fn keys_come_from_configuration_and_are_never_printed() {
    let text = format!("# current first\nk2:{SECRET_B}\nk1:{SECRET_A}\n");
    let k = TokenKeys::parse(&text).unwrap();
    assert_eq!(k.key_ids(), ["k2", "k1"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    std::fs::write(&path, &text).unwrap();
    assert_eq!(TokenKeys::from_file(&path).unwrap().current_key_id(), "k2");
    assert_eq!(TokenKeys::from_file(dir.path().join("missing")).unwrap_err().kind(), ErrorKind::Config);
    // SAFETY: this test binary sets this variable nowhere else.
    unsafe { std::env::set_var("SIGNOFF_TEST_TOKEN_KEYS", format!("k1:{SECRET_A}")) };
    assert_eq!(TokenKeys::from_env("SIGNOFF_TEST_TOKEN_KEYS").unwrap().current_key_id(), "k1");
    assert_eq!(TokenKeys::from_env("SIGNOFF_TEST_UNSET_VAR").unwrap_err().kind(), ErrorKind::Config);
    let shown = format!("{k:?} {:?}", Secret::from_base64(SECRET_A).unwrap());
    assert!(!shown.contains(SECRET_A) && !shown.contains(SECRET_B) && !shown.contains("[0, 1, 2"), "{shown}");
    // Short secrets are refused.
    assert_eq!(TokenKeys::parse("k:AAEC").unwrap_err().kind(), ErrorKind::Config);
}

#[tokio::test]
async fn sign_in_tokens_name_a_person_expire_and_never_answer_a_request() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = remote_gate(Gate::builder(), runs.clone());
    let link = gate.issue_sign_in("alice", Duration::from_secs(60)).unwrap();
    let claims = gate.verify_sign_in(&link).unwrap();
    assert_eq!(claims.approver, "alice");
    assert_ne!(
        gate.verify_sign_in(&gate.issue_sign_in("alice", Duration::from_secs(60)).unwrap()).unwrap().nonce,
        claims.nonce
    );
    assert_eq!(kind(gate.issue_sign_in(" ", Duration::from_secs(60))), ErrorKind::Malformed);
    assert_eq!(kind(gate.issue_sign_in("alice", Duration::ZERO)), ErrorKind::Malformed);
    let short = gate.issue_sign_in("alice", Duration::from_millis(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(kind(gate.verify_sign_in(&short)), ErrorKind::TokenExpired);
    // A sign-in link cannot answer a request, and an approval token cannot sign anyone in.
    let (task, req) = pending_delete(&gate, del("/tmp/x")).await;
    assert_eq!(kind(gate.respond_token(&link, TokenResponse::approve("alice"))), ErrorKind::Malformed);
    let approval = gate.issue_token(&req.id, "alice").unwrap();
    assert_eq!(kind(gate.verify_sign_in(&approval)), ErrorKind::Malformed);
    // Another gate's keys do not verify it.
    let other = gate_with(Gate::builder().tokens(keys("k1", SECRET_B)), runs.clone());
    assert_eq!(kind(other.verify_sign_in(&link)), ErrorKind::BadSignature);
    assert_eq!(kind(Gate::new().issue_sign_in("alice", Duration::from_secs(1))), ErrorKind::Config);
    gate.respond_token(&approval, TokenResponse::deny("alice", Some("no".into()))).unwrap();
    assert_eq!(task.await.unwrap().status, ToolStatus::Denied);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn check_edit_judges_an_edit_as_respond_will_without_answering() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = remote_gate(Gate::builder(), runs.clone());
    let (task, req) = pending_delete(&gate, del("/tmp/x")).await;
    gate.check_edit(&req.id, &json!({"path": "/tmp/y"})).unwrap();
    gate.check_edit(&req.id, &req.arguments.value()).unwrap();
    assert_eq!(kind(gate.check_edit(&req.id, &json!({"path": 7}))), ErrorKind::InvalidArguments);
    assert_eq!(kind(gate.check_edit(&uuid::Uuid::new_v4(), &json!({}))), ErrorKind::NotPending);
    assert_eq!(gate.pending().len(), 1, "checking answered nothing");
    assert_eq!(gate.tool_spec("delete_file").unwrap().name, "delete_file");
    assert!(gate.tool_spec("nope").is_none());
    gate.cancel_request(&req.id);
    task.await.unwrap();
}

#[test]
fn verify_audit_reads_back_the_gates_own_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let sink = JsonlAuditSink::open(&path).unwrap();
    let gate = Gate::builder().audit(sink).tokens(keys("k1", SECRET_A)).build().unwrap();
    gate.issue_sign_in("alice", Duration::from_secs(5)).unwrap();
    let report = gate.verify_audit().unwrap().expect("a JSON Lines sink reads back");
    assert!(report.problem.is_none() && report.records >= 1, "{report:?}");
    // Cut the log: the chain shows the edit.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("alice", "mallory", 1)).unwrap();
    assert!(gate.verify_audit().unwrap().unwrap().problem.is_some());
    assert!(Gate::new().verify_audit().unwrap().is_none());
    let memory = Gate::builder().audit(MemoryAuditSink::new()).build().unwrap();
    assert!(memory.verify_audit().unwrap().is_none());
}
