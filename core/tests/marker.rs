//! Approval markers (loopback de-duplication): a call approved through one gate is accepted once
//! by another gate sharing the keys; everything else (forged, tampered, reused, other tool or
//! arguments, expired, not a person's approval) is refused, so the receiving gate asks.

mod common;
use common::*;
use serde_json::json;
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

const SECRET_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const SECRET_B: &str = "ISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A=";

fn keys(kid: &str, secret: &str) -> TokenKeys {
    TokenKeys::new(kid, Secret::from_base64(secret).unwrap()).unwrap()
}

fn keyed(secret: &str, audit: Option<Arc<MemoryAuditSink>>) -> Gate {
    let mut b = Gate::builder().deny_when_unobserved(false).tokens(keys("k1", secret));
    if let Some(a) = audit {
        b = b.audit(a);
    }
    gate_with(b, Arc::new(AtomicUsize::new(0)))
}

/// A person approves `delete_file` on `gate` (optionally with an edit) and the decision is returned.
async fn approved(gate: &Gate, path: &str, edit: Option<serde_json::Value>) -> Decision {
    let _approver = gate.on_request_inline(move |p| {
        let _ = p.approve_with(edit.clone(), Scope::Once, Some("alice".into()));
    });
    let d = gate.confirm(del(path)).await.unwrap();
    assert!(d.is_approved(), "{d:?}");
    d
}

fn kind<T: std::fmt::Debug>(r: Result<T>) -> ErrorKind {
    r.unwrap_err().kind()
}

#[tokio::test]
async fn a_marker_is_accepted_once_by_a_gate_sharing_the_keys() {
    let audit = MemoryAuditSink::new();
    let (local, remote) = (keyed(SECRET_A, None), keyed(SECRET_A, Some(audit.clone())));
    let d = approved(&local, "/tmp/a", None).await;
    let marker = local.approval_marker("fs__delete_file", &d).unwrap();
    assert!(marker.starts_with("so1m."), "{marker}");
    let args = json!({"path": "/tmp/a"});
    let c = remote.accept_approval_marker(&marker, "fs__delete_file", &args).unwrap();
    assert_eq!(c.request_id, d.request_id());
    assert_eq!(c.approver, "alice");
    assert_eq!(&*c.tool, "fs__delete_file");
    assert_eq!(kind(remote.accept_approval_marker(&marker, "fs__delete_file", &args)), ErrorKind::AlreadyUsed);
    // One marker per request: a second would let the approved call run twice.
    assert_eq!(kind(local.approval_marker("fs__delete_file", &d)), ErrorKind::AlreadyUsed);
    let decisions: Vec<_> = audit.records().iter().filter_map(|r| r.decision.clone()).collect();
    assert!(decisions.contains(&"marker-accepted".to_string()), "{decisions:?}");
    assert_eq!(audit.records().iter().filter(|r| r.kind == AuditKind::ResponseRejected).count(), 1);
}

#[tokio::test]
async fn other_arguments_or_another_tool_are_refused() {
    let (local, remote) = (keyed(SECRET_A, None), keyed(SECRET_A, None));
    let d = approved(&local, "/tmp/a", None).await;
    let marker = local.approval_marker("fs__delete_file", &d).unwrap();
    let e = remote.accept_approval_marker(&marker, "fs__delete_file", &json!({"path": "/etc/passwd"})).unwrap_err();
    assert!(matches!(e, Error::Mismatch { field: "arguments_digest", .. }), "{e}");
    let e = remote.accept_approval_marker(&marker, "fs__write_file", &json!({"path": "/tmp/a"})).unwrap_err();
    assert!(matches!(e, Error::Mismatch { field: "tool", .. }), "{e}");
    // Refusals consume nothing: the right call is still accepted.
    remote.accept_approval_marker(&marker, "fs__delete_file", &json!({"path": "/tmp/a"})).unwrap();
}

#[tokio::test]
async fn an_edit_is_what_the_marker_carries() {
    let (local, remote) = (keyed(SECRET_A, None), keyed(SECRET_A, None));
    let d = approved(&local, "/tmp/a", Some(json!({"path": "/tmp/b"}))).await;
    assert!(d.edited());
    let marker = local.approval_marker("delete_file", &d).unwrap();
    assert_eq!(
        kind(remote.accept_approval_marker(&marker, "delete_file", &json!({"path": "/tmp/a"}))),
        ErrorKind::Mismatch
    );
    remote.accept_approval_marker(&marker, "delete_file", &json!({"path": "/tmp/b"})).unwrap();
}

#[tokio::test]
async fn forged_tampered_and_foreign_tokens_are_refused() {
    let local = keyed(SECRET_A, None);
    let d = approved(&local, "/tmp/a", None).await;
    let marker = local.approval_marker("delete_file", &d).unwrap();
    let args = json!({"path": "/tmp/a"});
    // Another key: a gate that does not share the keys never trusts it.
    let stranger = keyed(SECRET_B, None);
    assert_eq!(kind(stranger.accept_approval_marker(&marker, "delete_file", &args)), ErrorKind::BadSignature);
    let other_kid = gate_with(
        Gate::builder().tokens(keys("k2", SECRET_A)).deny_when_unobserved(false),
        Arc::new(AtomicUsize::new(0)),
    );
    assert_eq!(kind(other_kid.accept_approval_marker(&marker, "delete_file", &args)), ErrorKind::UnknownKey);
    // A body swapped for one naming other arguments: the signature no longer verifies.
    let mut parts: Vec<String> = marker.split('.').map(str::to_owned).collect();
    let forged_claims = {
        let mut c = decode(&parts[2]);
        c["dig"] = json!(signoff::display::arguments_digest(&json!({"path": "/etc"})));
        c
    };
    parts[2] = base64_url(&serde_json::to_vec(&forged_claims).unwrap());
    let forged = parts.join(".");
    let remote = keyed(SECRET_A, None);
    assert_eq!(
        kind(remote.accept_approval_marker(&forged, "delete_file", &json!({"path": "/etc"}))),
        ErrorKind::BadSignature
    );
    // An approval token or garbage is not a marker.
    assert_eq!(kind(remote.accept_approval_marker("so1.k1.e30.AAAA", "delete_file", &args)), ErrorKind::Malformed);
    assert_eq!(kind(remote.accept_approval_marker("", "delete_file", &args)), ErrorKind::Malformed);
    // And a marker answers no request as a token.
    assert_eq!(kind(remote.inspect_token(&marker)), ErrorKind::Malformed);
    remote.accept_approval_marker(&marker, "delete_file", &args).unwrap();
}

/// A marker's body (markers are signed, not encrypted).
fn decode(body: &str) -> serde_json::Value {
    use base64::Engine;
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body).unwrap()).unwrap()
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn an_expired_marker_is_refused() {
    let remote = keyed(SECRET_A, None);
    let now = signoff::event::now_ms();
    let mut claims = MarkerClaims {
        nonce: uuid::Uuid::new_v4(),
        request_id: Some(uuid::Uuid::new_v4()),
        tool: "delete_file".into(),
        arguments_digest: signoff::display::arguments_digest(&json!({"path": "/tmp/a"})),
        approver: "alice".into(),
        issued_at_ms: now - 120_000,
        expires_at_ms: now - 60_000,
        key_id: String::new(),
    };
    let marker = keys("k1", SECRET_A).sign_marker(&mut claims);
    assert_eq!(
        kind(remote.accept_approval_marker(&marker, "delete_file", &json!({"path": "/tmp/a"}))),
        ErrorKind::TokenExpired
    );
}

#[tokio::test]
async fn only_a_persons_approval_gets_a_marker() {
    let local = keyed(SECRET_A, None);
    // Not gated: the policy let it through, nobody approved it.
    let d = local.confirm(ToolCall::new("read_file", json!({"path": "/tmp/a"}))).await.unwrap();
    assert_eq!(d.approved_by(), Some(ApprovedBy::NotGated));
    assert_eq!(kind(local.approval_marker("read_file", &d)), ErrorKind::Malformed);
    // Denied.
    let _deny = local.on_request_inline(|p| {
        let _ = p.deny(Some("no".into()), Some("alice".into()));
    });
    let d = local.confirm(del("/tmp/a")).await.unwrap();
    assert!(!d.is_approved());
    assert_eq!(kind(local.approval_marker("delete_file", &d)), ErrorKind::Malformed);
    // Without keys.
    let plain = gate();
    assert_eq!(kind(plain.approval_marker("delete_file", &d)), ErrorKind::Config);
    assert_eq!(kind(plain.accept_approval_marker("so1m.k1.e30.AAAA", "delete_file", &json!({}))), ErrorKind::Config);
}

#[tokio::test]
async fn a_session_grant_gets_a_marker_per_call() {
    let (local, remote) = (keyed(SECRET_A, None), keyed(SECRET_A, None));
    {
        let _approver = local.on_request_inline(|p| {
            let _ = p.approve_with(None, Scope::Session, Some("alice".into()));
        });
        assert!(local.confirm(del("/tmp/a")).await.unwrap().is_approved());
    }
    let d = local.confirm(del("/tmp/b")).await.unwrap();
    assert_eq!(d.approved_by(), Some(ApprovedBy::SessionGrant));
    let m1 = local.approval_marker("delete_file", &d).unwrap();
    let m2 = local.approval_marker("delete_file", &d).unwrap();
    let args = json!({"path": "/tmp/b"});
    remote.accept_approval_marker(&m1, "delete_file", &args).unwrap();
    remote.accept_approval_marker(&m2, "delete_file", &args).unwrap();
    assert_eq!(kind(remote.accept_approval_marker(&m1, "delete_file", &args)), ErrorKind::AlreadyUsed);
}

#[tokio::test]
async fn racing_acceptances_of_one_marker_accept_exactly_one() {
    let (local, remote) = (keyed(SECRET_A, None), keyed(SECRET_A, None));
    let d = approved(&local, "/tmp/a", None).await;
    let marker = Arc::new(local.approval_marker("delete_file", &d).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (remote, marker) = (remote.clone(), marker.clone());
            std::thread::spawn(move || {
                remote.accept_approval_marker(&marker, "delete_file", &json!({"path": "/tmp/a"}))
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert!(results.iter().filter_map(|r| r.as_ref().err()).all(|e| e.kind() == ErrorKind::AlreadyUsed));
}

#[tokio::test]
async fn a_durable_store_refuses_a_replay_after_the_gate_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("proxy.db");
    let local = keyed(SECRET_A, None);
    let d = approved(&local, "/tmp/a", None).await;
    let marker = local.approval_marker("fs__delete_file", &d).unwrap();
    let args = json!({"path": "/tmp/a"});
    let proxy = |db: &std::path::Path| {
        gate_with(
            Gate::builder()
                .deny_when_unobserved(false)
                .tokens(keys("k1", SECRET_A))
                .store(SqliteStore::open(db).unwrap()),
            Arc::new(AtomicUsize::new(0)),
        )
    };
    let first = proxy(&db);
    first.accept_approval_marker(&marker, "fs__delete_file", &args).unwrap();
    first.close();
    drop(first);
    // The same marker, replayed to the proxy restarted within the marker's minute.
    let audit = MemoryAuditSink::new();
    let restarted = gate_with(
        Gate::builder()
            .deny_when_unobserved(false)
            .tokens(keys("k1", SECRET_A))
            .audit(audit.clone())
            .store(SqliteStore::open(&db).unwrap()),
        Arc::new(AtomicUsize::new(0)),
    );
    assert_eq!(kind(restarted.accept_approval_marker(&marker, "fs__delete_file", &args)), ErrorKind::AlreadyUsed);
    assert!(audit.records().iter().any(|r| r.kind == AuditKind::ResponseRejected), "the refusal is audited");
    // Another call's marker is accepted as before.
    let d2 = approved(&local, "/tmp/b", None).await;
    let m2 = local.approval_marker("fs__delete_file", &d2).unwrap();
    restarted.accept_approval_marker(&m2, "fs__delete_file", &json!({"path": "/tmp/b"})).unwrap();
    restarted.close();
}
