//! `make console-demo`: an agent that keeps asking to do things, and the approval console where
//! you decide, in your browser.
//!
//! It prints a sign-in link; open it, and approve, edit or deny what the agent asks. Each call's
//! outcome is printed here as the agent sees it. Ctrl-C ends it.
//!
//! `--check` runs it unattended for CI: it signs in over HTTP itself, approves the first request,
//! denies the second with a reason, and checks what the agent got.

use serde_json::{Value, json};
use signoff::{Gate, Secret, TokenKeys, Tool, ToolCall};
use signoff_console::{Console, ConsoleOptions};
use std::io::{Read, Write};
use std::time::Duration;

fn tools(gate: &Gate) -> signoff::Result<()> {
    let path = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false});
    gate.register(
        Tool::builder("delete_file")
            .description("Deletes a file in the project folder")
            .parameters(path)
            .destructive(true)
            .editable(true)
            .executor(|args| async move { Ok(json!(format!("deleted {}", args["path"].as_str().unwrap_or("?")))) })
            .build(),
    )?;
    gate.register(
        Tool::builder("send_email")
            .description("Sends an email on your behalf")
            .parameters(json!({
                "type": "object",
                "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "subject", "body"], "additionalProperties": false
            }))
            .requires_approval()
            .editable(true)
            .executor(|args| async move { Ok(json!(format!("sent to {}", args["to"].as_str().unwrap_or("?")))) })
            .build(),
    )?;
    gate.register(
        Tool::builder("pay_invoice")
            .description("Pays an invoice from the company account")
            .parameters(json!({
                "type": "object",
                "properties": {"payee": {"type": "string"}, "amount_eur": {"type": "number", "exclusiveMinimum": 0}},
                "required": ["payee", "amount_eur"], "additionalProperties": false
            }))
            .requires_approval()
            .executor(|args| async move { Ok(json!(format!("paid {} EUR to {}", args["amount_eur"], args["payee"]))) })
            .build(),
    )?;
    Ok(())
}

/// The status's name, as in the JSON form (`executed`, `timed-out`, ...).
fn status(r: &signoff::ToolResult) -> String {
    serde_json::to_value(r.status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// What the agent asks for, round after round.
fn script() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("delete_file", json!({"path": "notes/draft-old.md"}), "writer-agent"),
        (
            "send_email",
            json!({"to": "team@example.com", "subject": "Weekly notes", "body": "Here are this week's notes."}),
            "writer-agent",
        ),
        ("pay_invoice", json!({"payee": "ACME GmbH", "amount_eur": 1200}), "finance-agent"),
        ("delete_file", json!({"path": "notes/thesis.tex"}), "writer-agent"),
    ]
}

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run(check));
}

async fn run(check: bool) {
    let keys = TokenKeys::new("demo", Secret::generate()).expect("keys");
    let gate = Gate::builder().tokens(keys).default_timeout(Duration::from_secs(120)).build().expect("gate");
    tools(&gate).expect("tools");
    let bind = if check { "127.0.0.1:0" } else { "127.0.0.1:8377" };
    let options =
        ConsoleOptions { bind: bind.parse().expect("address"), title: "signoff demo".into(), ..Default::default() };
    let console = match Console::start(gate.clone(), options.clone()) {
        Ok(c) => c,
        // Port taken: any free one.
        Err(_) => {
            Console::start(gate.clone(), ConsoleOptions { bind: "127.0.0.1:0".parse().expect("address"), ..options })
                .expect("console")
        }
    };
    let link = console.sign_in_link("you").expect("link");
    println!("signoff console demo: open this link in your browser (it works once):\n\n    {link}\n");
    println!("The console stops when this program exits (Ctrl-C ends the demo, and the console with it).");
    println!("The agent asks every few seconds; decide in the page.\n");
    if check {
        let answers = tokio::spawn(answer_over_http(console.local_addr().to_string(), link, gate.clone()));
        for (tool, args, session) in script().into_iter().take(2) {
            let r = gate.execute(ToolCall::new(tool, args).session(session)).await;
            println!("agent: {tool} -> {} ({})", status(&r), r.content);
        }
        answers.await.expect("answers");
        console.close();
        return;
    }
    loop {
        for (tool, args, session) in script() {
            println!("agent ({session}): asks to run {tool} {args}");
            let r = gate.execute(ToolCall::new(tool, args).session(session)).await;
            println!("agent ({session}): {tool} -> {}: {}\n", status(&r), r.content);
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// `--check`: a person's browser, played over plain HTTP.
async fn answer_over_http(addr: String, link: String, gate: Gate) {
    tokio::task::spawn_blocking(move || {
        let token = link.split_once("#token=").expect("a token in the fragment").1;
        let login = http(&addr, "POST", "/login", &[], &json!({"token": token}).to_string());
        let cookie = login.lines().find_map(|l| l.strip_prefix("set-cookie: ")).expect("a session cookie");
        let cookie = cookie.split(';').next().expect("cookie").to_owned();
        // The page key comes only in the sign-in's answer (its body is the last line).
        let answer: serde_json::Value =
            serde_json::from_str(login.lines().last().unwrap_or("")).expect("sign-in answer");
        let key = answer["key"].as_str().expect("a page key").to_owned();
        for decision in [json!({"decision": "approve"}), json!({"decision": "deny", "reason": "not this week"})] {
            let request = loop {
                if let Some(r) = gate.pending().into_iter().next() {
                    break r;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let mut body = json!({"id": request.id, "digest": request.arguments_digest});
            body.as_object_mut().expect("object").extend(decision.as_object().expect("object").clone());
            let reply =
                http(&addr, "POST", "/api/decide", &[("Cookie", &cookie), ("X-Signoff-Key", &key)], &body.to_string());
            println!("console: {} {} -> {}", request.tool, body["decision"], reply.lines().last().unwrap_or(""));
            while gate.pending_request(&request.id).is_some() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    })
    .await
    .expect("the answering thread");
}

fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}
