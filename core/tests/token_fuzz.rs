//! Fuzzing by property: the token parser, the token and response paths of the gate, the key
//! configuration parser and the audit verifier never panic on arbitrary input, and no mutation
//! of a genuine token is ever accepted. `PROPTEST_CASES` raises the case count for a longer run.

mod common;
use common::*;
use proptest::prelude::*;
use signoff::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SECRET: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn keys() -> TokenKeys {
    TokenKeys::parse(&format!("k1:{SECRET}")).unwrap()
}

/// A gate with one pending `delete_file` request, a genuine token for it, and the run counter.
fn pending_with_token() -> (tokio::runtime::Runtime, Gate, String, Arc<AtomicUsize>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = gate_with(Gate::builder().deny_when_unobserved(false).tokens(keys()), runs.clone());
    let g = gate.clone();
    rt.spawn(async move { g.execute(del("/a")).await });
    let token = rt.block_on(async {
        loop {
            if let Some(r) = gate.pending().first() {
                break gate.issue_token(&r.id, "alice").unwrap();
            }
            tokio::task::yield_now().await;
        }
    });
    (rt, gate, token, runs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_as_a_token_never_panic_and_never_verify(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        prop_assert!(keys().verify(&text).is_err());
        let g = Gate::builder().tokens(keys()).build().unwrap();
        let e = g.respond_token(&text, TokenResponse::approve("alice")).unwrap_err();
        prop_assert!(matches!(e.kind(), ErrorKind::Malformed | ErrorKind::UnknownKey | ErrorKind::BadSignature), "{e:?}");
    }

    #[test]
    fn token_shaped_input_never_panics(kid in "[a-z0-9]{0,4}", body in "[A-Za-z0-9_-]{0,64}", sig in "[A-Za-z0-9_-]{0,64}") {
        let text = format!("so1.{kid}.{body}.{sig}");
        let e = keys().verify(&text).unwrap_err();
        prop_assert!(matches!(e.kind(), ErrorKind::Malformed | ErrorKind::UnknownKey | ErrorKind::BadSignature), "{e:?}");
    }

    /// No single edit of a genuine token (replace, insert or delete one character) is accepted,
    /// and none of them changes the request: the genuine token still approves it, once.
    #[test]
    fn no_mutation_of_a_genuine_token_is_accepted(pos in any::<prop::sample::Index>(), c in any::<char>(), op in 0u8..3) {
        let (rt, gate, token, runs) = pending_with_token();
        let mut chars: Vec<char> = token.chars().collect();
        let i = pos.index(chars.len());
        match op {
            0 => chars[i] = c,
            1 => chars.insert(i, c),
            _ => { chars.remove(i); }
        }
        let mutated: String = chars.into_iter().collect();
        prop_assume!(mutated != token);
        prop_assert!(gate.respond_token(&mutated, TokenResponse::approve("alice")).is_err());
        prop_assert_eq!(gate.pending().len(), 1);
        gate.respond_token(&token, TokenResponse::approve("alice")).unwrap();
        rt.block_on(async { while runs.load(Ordering::SeqCst) == 0 { tokio::task::yield_now().await } });
        prop_assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn arbitrary_key_configuration_never_panics(text in "\\PC{0,200}") {
        let _ = TokenKeys::parse(&text);
    }

    #[test]
    fn arbitrary_audit_files_never_panic(lines in prop::collection::vec("\\PC{0,120}", 0..8)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, lines.join("\n")).unwrap();
        let _ = verify_chain(&path);
        // Opening a sink on it never panics either, and what it appends is chained.
        if let Ok(sink) = JsonlAuditSink::open(&path) {
            sink.record(AuditRecord::new(AuditKind::Notice));
            sink.flush();
        }
    }
}
