//! Remote approval with signed tokens on the durable store, across a crash.
//!
//! `cargo run -p signoff-examples --bin remote-approval [-- DATA_DIR]`
//!
//! An agent asks to pay an invoice. The server keeps the call; alice approves it later from her
//! phone with a signed, single-use token. In between, the server process dies. The example runs
//! itself twice: the first process (`--phase before-crash`) leaves the request pending and exits
//! without cleaning up; the second recovers it with its original deadline, takes alice's
//! approval, pays exactly once, and verifies the hash-chained audit log.
//!
//! Keys come from `SIGNOFF_TOKEN_KEYS` (`key_id:base64secret,...`, current key first); without
//! it, a fixed demo key is used and the example says so.

use serde_json::{Value, json};
use signoff::{
    ConfirmationResponse, Gate, JsonlAuditSink, ResponseDecision, SqliteStore, TokenKeys, TokenResponse, Tool,
    ToolCall, verify_chain,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

const DEMO_KEYS: &str = "demo-1:ZGVtbyBrZXkgLS0gbmV2ZXIgdXNlIGluIHByb2R1Y3Rpb24hIQ==";

fn keys() -> TokenKeys {
    match TokenKeys::from_env("SIGNOFF_TOKEN_KEYS") {
        Ok(k) => k,
        Err(_) => {
            println!("(SIGNOFF_TOKEN_KEYS is not set: using the fixed demo key; never do this in production)");
            TokenKeys::parse(DEMO_KEYS).expect("demo key")
        }
    }
}

/// The server's gate: durable store, token keys, audit log, and the payment tool. Every
/// payment appends to `payments.log` so you can see how many times it really ran.
fn server(dir: &Path) -> Gate {
    let ledger = dir.join("payments.log");
    Gate::builder()
        .store(SqliteStore::open(dir.join("signoff.db")).expect("open the pending store"))
        .tokens(keys())
        .audit(JsonlAuditSink::open(dir.join("audit.jsonl")).expect("open the audit log"))
        // Approvals come from elsewhere: nobody in this process watches the bus.
        .deny_when_unobserved(false)
        .tool(
            Tool::builder("pay_invoice")
                .description("Pays an invoice from the company account")
                .parameters(json!({
                    "type": "object",
                    "properties": {"to": {"type": "string"}, "amount_eur": {"type": "number"}},
                    "required": ["to", "amount_eur"], "additionalProperties": false
                }))
                .timeout(Duration::from_secs(3600))
                .executor(move |args: Value| {
                    let ledger = ledger.clone();
                    async move {
                        use std::io::Write;
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&ledger)
                            .map_err(|e| e.to_string())?;
                        writeln!(f, "paid {} EUR to {}", args["amount_eur"], args["to"].as_str().unwrap_or("?"))
                            .map_err(|e| e.to_string())?;
                        Ok(json!({"paid": args["amount_eur"], "to": args["to"]}))
                    }
                })
                .build(),
        )
        .build()
        .expect("build the gate")
}

/// First process: the agent asks, the server sends alice a link, then the process dies.
async fn before_crash(dir: &Path) {
    let gate = server(dir);
    gate.recover().expect("recover");
    let g = gate.clone();
    tokio::spawn(async move {
        g.execute(ToolCall::new("pay_invoice", json!({"to": "ACME GmbH", "amount_eur": 1200})).call_id("call_7")).await
    });
    let request = loop {
        if let Some(r) = gate.pending().into_iter().next() {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    println!("server: the agent wants to run {} {}", request.tool, request.arguments.json());
    let token = gate.issue_token(&request.id, "alice").expect("issue a token");
    println!("server: sent alice the link https://approve.example/#{}...", &token[..24]);
    // The link travels to alice's phone (here: a file).
    std::fs::write(dir.join("alice-link.txt"), &token).unwrap();
    gate.flush_audit();
    println!("server: *** crashes with the request pending ***");
    // No close, no destructors: the process is gone.
    std::process::exit(0);
}

/// Second process: restart, recover, take alice's (and mallory's) answers.
async fn after_restart(dir: &Path) {
    let gate = server(dir);
    let report = gate.recover().expect("recover");
    for r in &report.restored {
        println!(
            "server (restarted): recovered pending request {} for {} (deadline unchanged: {} ms from now)",
            r.id,
            r.tool,
            r.deadline_ms.saturating_sub(signoff::event::now_ms())
        );
    }
    let token = std::fs::read_to_string(dir.join("alice-link.txt")).unwrap();
    let id = report.restored[0].id;

    // A tampered client: the usual bug is to send the call's parameters to the client and run
    // what comes back. Here the client can only present the token; the amount is not its to set.
    let mut claims = gate.inspect_token(&token).unwrap();
    claims.arguments_digest = "sha256:0000".into();
    let forged =
        TokenKeys::parse("demo-1:bWFsbG9yeSdzIG93biBrZXkgLS0gbm90IHRoZSBzZXJ2ZXIncyEh").unwrap().sign(&mut claims);
    report_err("mallory presents a forged token", gate.respond_token(&forged, TokenResponse::approve("alice")));
    report_err("mallory presents alice's link", gate.respond_token(&token, TokenResponse::approve("mallory")));
    report_err(
        "a client answers by id with its own amount",
        gate.respond(ConfirmationResponse {
            arguments: Some(json!({"to": "Mallory Ltd", "amount_eur": 9999})),
            responder: Some("alice".into()),
            ..ConfirmationResponse::by_id(id, ResponseDecision::Approve)
        }),
    );

    // Alice approves from her phone: exactly the stored call runs.
    let outcome = gate.respond_token(&token, TokenResponse::approve("alice")).expect("alice's approval");
    println!("alice: approves -> {}", outcome.as_str());
    let record = loop {
        let r = gate.record(&id).unwrap();
        if r.state.is_final() {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    println!(
        "server: request is {}; the model is told: {}",
        record.state.as_str(),
        record.result.as_ref().unwrap()["content"]
    );
    report_err("alice's link is used again", gate.respond_token(&token, TokenResponse::approve("alice")));
    gate.close();

    let ledger = std::fs::read_to_string(dir.join("payments.log")).unwrap_or_default();
    println!("ledger: {} payment(s): {}", ledger.lines().count(), ledger.trim());
    let chain = verify_chain(dir.join("audit.jsonl")).unwrap();
    println!("audit: {} records, chain {}", chain.records, if chain.is_intact() { "intact" } else { "BROKEN" });
}

fn report_err<T: std::fmt::Debug>(what: &str, r: signoff::Result<T>) {
    match r {
        Ok(v) => println!("{what}: ACCEPTED?! {v:?}"),
        Err(e) => println!("{what}: refused ({}): {e}", e.kind()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    match args.first().map(String::as_str) {
        Some("--phase") => {
            let dir = PathBuf::from(&args[2]);
            match args[1].as_str() {
                "before-crash" => rt.block_on(before_crash(&dir)),
                _ => rt.block_on(after_restart(&dir)),
            }
        }
        dir => {
            // Run both processes against one data directory.
            let tmp;
            let dir = match dir {
                Some(d) => PathBuf::from(d),
                None => {
                    tmp = std::env::temp_dir().join(format!("signoff-remote-{}", std::process::id()));
                    tmp.clone()
                }
            };
            std::fs::create_dir_all(&dir).unwrap();
            let me = std::env::current_exe().unwrap();
            for phase in ["before-crash", "after-restart"] {
                let status = std::process::Command::new(&me).args(["--phase", phase]).arg(&dir).status().unwrap();
                assert!(status.success(), "{phase} failed");
            }
            println!("(data left in {}: signoff.db, audit.jsonl, payments.log)", dir.display());
        }
    }
}
