//! signoff demo: an agent loop with a scripted model and a terminal approver.
//!
//!     cargo run -p signoff-examples --bin demo                 # you approve in the terminal
//!     cargo run -p signoff-examples --bin demo -- --auto approve
//!     cargo run -p signoff-examples --bin demo -- --auto deny
//!     cargo run -p signoff-examples --bin demo -- --script examples/demo-answers.txt
//!
//! Keys at each request: a = approve, s = approve for the rest of the session,
//! d = deny (then type a reason), e = edit the arguments (then type JSON; it is validated).
//! Script files hold one answer per line in the same form: `a`, `s`, `d <reason>`, `e <json>`.
//! When a script runs out, the demo denies: nothing runs without an explicit approve.

use serde_json::{Value, json};
use signoff::{ConfirmationRequest, ConfirmationResponse, Event, Gate, Scope, Tool, ToolCall, ToolResult};
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

type Files = Arc<Mutex<BTreeMap<String, String>>>;

/// The tools, over an in-memory file system so the demo never touches yours.
fn tools(files: &Files) -> Vec<Tool> {
    let path = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false});
    let f1 = files.clone();
    let f2 = files.clone();
    let f3 = files.clone();
    vec![
        Tool::builder("read_file")
            .description("Reads a text file")
            .parameters(path.clone())
            .read_only(true)
            .executor(move |a| {
                let f = f1.clone();
                async move {
                    let p = a["path"].as_str().unwrap_or_default();
                    f.lock().unwrap().get(p).map(|t| json!(t)).ok_or_else(|| format!("{p}: no such file"))
                }
            })
            .build(),
        Tool::builder("list_dir")
            .description("Lists the files in a folder")
            .parameters(path.clone())
            .read_only(true)
            .executor(move |a| {
                let f = f2.clone();
                async move {
                    let dir = format!("{}/", a["path"].as_str().unwrap_or_default().trim_end_matches('/'));
                    Ok(json!(f.lock().unwrap().keys().filter(|k| k.starts_with(&dir)).cloned().collect::<Vec<_>>()))
                }
            })
            .build(),
        // Gated by the default keyword policy ("delete"); the person may edit the path.
        Tool::builder("delete_file")
            .description("Deletes a file permanently")
            .parameters(path)
            .editable(true)
            .executor(move |a| {
                let f = f3.clone();
                async move {
                    let p = a["path"].as_str().unwrap_or_default().to_owned();
                    match f.lock().unwrap().remove(&p) {
                        Some(_) => Ok(json!(format!("deleted {p}"))),
                        None => Err(format!("{p}: no such file")),
                    }
                }
            })
            .build(),
        // Gated by keyword ("send"), with a prompt of its own.
        Tool::builder("send_email")
            .description("Sends an email from your account")
            .prompt_template("The agent wants to send an email on your behalf: {args}")
            .parameters(json!({"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "subject", "body"]}))
            .editable(true)
            .executor(|a| async move { Ok(json!(format!("sent to {}", a["to"].as_str().unwrap_or_default()))) })
            .build(),
    ]
}

/// The scripted model: one list of tool calls per turn.
fn model_turns() -> Vec<(&'static str, Vec<(&'static str, Value)>)> {
    vec![
        ("Let me look at your notes first.", vec![("read_file", json!({"path": "/notes/todo.txt"}))]),
        ("Your to-do list says to clean up the old draft. I'll delete it.", vec![("delete_file", json!({"path": "/notes/old-draft.txt"}))]),
        (
            "Now I'll check the folder, email your advisor, and reread the to-do list, all at once.",
            vec![
                ("list_dir", json!({"path": "/notes"})),
                ("send_email", json!({"to": "advisor@university.edu", "subject": "Draft", "body": "The new draft is ready."})),
                ("read_file", json!({"path": "/notes/todo.txt"})),
            ],
        ),
        ("The to-do list also says to remove the thesis scratch copy.", vec![("delete_file", json!({"path": "/notes/thesis.tex"}))]),
        ("Tidying the temporary files.", vec![("delete_file", json!({"path": "/notes/tmp.txt"}))]),
        ("And the second one (you approved deletes for this session, so no need to ask).", vec![("delete_file", json!({"path": "/notes/tmp2.txt"}))]),
    ]
}

enum Mode {
    Interactive,
    Auto(bool),
    Script(VecDeque<String>),
}

fn parse_args() -> Result<Mode, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => Ok(Mode::Interactive),
        ["--auto", "approve"] => Ok(Mode::Auto(true)),
        ["--auto", "deny"] => Ok(Mode::Auto(false)),
        ["--script", file] => std::fs::read_to_string(file)
            .map(|t| Mode::Script(t.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from).collect()))
            .map_err(|e| format!("cannot read {file}: {e}")),
        ["-h" | "--help"] => Err(String::new()),
        other => Err(format!("unknown arguments {other:?}")),
    }
}

fn clock(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02} UTC", (s / 3600) % 24, (s / 60) % 60, s % 60)
}

fn show(req: &ConfirmationRequest) {
    println!();
    println!("  ┌─ approval needed ─────────────────────────────────────────");
    println!("  │ tool:        {}", req.tool);
    println!("  │ what it does: {}", req.description);
    println!("  │ {}", req.prompt);
    println!("  │ why asked:   {}", req.reasons.join("; "));
    for line in req.display_arguments.lines() {
        println!("  │   {line}");
    }
    println!("  │ answer within {} s (by {}); no answer means no", req.timeout_ms / 1000, clock(req.deadline_ms));
    let edit = if req.editable { ", [e]dit arguments" } else { "" };
    println!("  └─ [a]pprove, approve for the [s]ession, [d]eny{edit}");
}

/// Turns one answer line into a response. `None`: the line is not an answer.
fn response_for(req: &ConfirmationRequest, line: &str, reason: Option<String>, edit: Option<Value>) -> Option<ConfirmationResponse> {
    let who = "terminal";
    match line.chars().next()? {
        'a' => Some(ConfirmationResponse::approve(req).with_responder(who)),
        's' => Some(ConfirmationResponse::approve(req).with_scope(Scope::Session).with_responder(who)),
        'd' => {
            let r = ConfirmationResponse::deny(req, reason).with_responder(who);
            Some(r)
        }
        'e' => edit.map(|v| ConfirmationResponse::approve(req).with_arguments(v).with_responder(who)),
        _ => None,
    }
}

/// The approver runs on its own thread: reading the terminal never blocks the runtime.
fn approver(gate: Gate, requests: std::sync::mpsc::Receiver<Arc<ConfirmationRequest>>, mut mode: Mode) {
    let stdin = std::io::stdin();
    let ask = |prompt: &str| -> Option<String> {
        print!("{prompt}");
        std::io::stdout().flush().ok();
        let mut s = String::new();
        match stdin.lock().read_line(&mut s) {
            Ok(0) | Err(_) => None, // closed terminal: treated as no answer
            Ok(_) => Some(s.trim().to_owned()),
        }
    };
    for req in requests {
        show(&req);
        loop {
            let resp = match &mut mode {
                Mode::Auto(true) => {
                    println!("  > approve (--auto)");
                    Some(ConfirmationResponse::approve(&req).with_responder("auto"))
                }
                Mode::Auto(false) => {
                    println!("  > deny (--auto)");
                    Some(ConfirmationResponse::deny(&req, Some("auto-denied by the demo".into())).with_responder("auto"))
                }
                Mode::Script(lines) => {
                    let line = lines.pop_front().unwrap_or_else(|| "d the script has no more answers".into());
                    println!("  > {line} (script)");
                    let rest = line.get(1..).map(str::trim).filter(|s| !s.is_empty());
                    let edit = rest.and_then(|r| serde_json::from_str(r).ok());
                    response_for(&req, &line, rest.map(String::from), edit)
                }
                Mode::Interactive => {
                    let Some(line) = ask("  > ") else {
                        println!("  (input closed: denying)");
                        let _ = gate.respond(ConfirmationResponse::deny(&req, Some("the terminal was closed".into())));
                        break;
                    };
                    match line.chars().next() {
                        Some('d') => {
                            let reason = ask("    reason (optional): ").filter(|s| !s.is_empty());
                            response_for(&req, "d", reason, None)
                        }
                        Some('e') => {
                            let text = ask("    new arguments as JSON: ").unwrap_or_default();
                            match serde_json::from_str::<Value>(&text) {
                                Ok(v) => response_for(&req, "e", None, Some(v)),
                                Err(e) => {
                                    println!("    not JSON: {e}");
                                    continue;
                                }
                            }
                        }
                        _ => response_for(&req, &line, None, None),
                    }
                }
            };
            let Some(resp) = resp else {
                println!("    please answer a, s, d or e");
                if matches!(mode, Mode::Script(_)) {
                    let _ = gate.respond(ConfirmationResponse::deny(&req, Some("unrecognised scripted answer".into())));
                    break;
                }
                continue;
            };
            match gate.respond(resp) {
                Ok(_) => break,
                // Rejected (e.g. edited arguments that fail the schema): the request is unchanged; ask again.
                Err(e) if e.kind() == signoff::ErrorKind::InvalidArguments || e.kind() == signoff::ErrorKind::EditsNotAllowed => {
                    println!("    rejected: {e}");
                    if matches!(mode, Mode::Script(_)) {
                        continue;
                    }
                }
                Err(e) => {
                    println!("    {e}");
                    break;
                }
            }
        }
    }
}

fn print_result(r: &ToolResult) {
    println!("  tool result for {} [{}] ({:?}):", r.call_id.as_deref().unwrap_or("-"), r.tool, r.status);
    for line in r.content.lines() {
        println!("    {line}");
    }
}

#[tokio::main]
async fn main() {
    let mode = match parse_args() {
        Ok(m) => m,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("demo: {e}");
            }
            eprintln!("usage: demo [--auto approve|deny] [--script FILE]");
            std::process::exit(2);
        }
    };
    let files: Files = Arc::new(Mutex::new(
        [
            ("/notes/todo.txt", "1. delete old-draft.txt\n2. email the advisor\n3. remove thesis.tex scratch copy"),
            ("/notes/old-draft.txt", "an old draft"),
            ("/notes/thesis.tex", "\\documentclass{article} ... six months of work"),
            ("/notes/thesis-scratch.tex", "scratch"),
            ("/notes/tmp.txt", "temporary"),
            ("/notes/tmp2.txt", "temporary too"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    ));
    let gate = Gate::builder().default_timeout(std::time::Duration::from_secs(120)).build().expect("gate");
    for t in tools(&files) {
        gate.register(t).expect("tool");
    }

    // The host app: forward requests from the bus to the terminal approver's thread.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut events = gate.subscribe();
    tokio::spawn(async move {
        while let Some(item) = events.recv().await {
            match item {
                Ok(Event::ConfirmationRequest(req)) => {
                    let _ = tx.send(req);
                }
                Ok(_) => {}
                Err(lagged) => {
                    for req in lagged.pending {
                        let _ = tx.send(req);
                    }
                }
            }
        }
    });
    let g = gate.clone();
    std::thread::spawn(move || approver(g, rx, mode));

    println!("signoff demo: a scripted agent works on your notes; you decide what runs.");
    let session = "demo-session";
    let mut n = 0;
    for (say, calls) in model_turns() {
        println!("\nmodel: {say}");
        let calls: Vec<ToolCall> = calls
            .into_iter()
            .map(|(tool, args)| {
                n += 1;
                println!("  model calls {tool} {args}  (call_{n})");
                ToolCall::new(tool, args).session(session).call_id(format!("call_{n}"))
            })
            .collect();
        for r in gate.execute_batch(calls).await {
            print_result(&r);
        }
    }
    println!("\nfiles left: {:?}", files.lock().unwrap().keys().collect::<Vec<_>>());
    println!("session grants: {:?}", gate.grants(session));
    gate.close();
}
