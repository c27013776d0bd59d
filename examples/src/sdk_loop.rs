//! The tool loop you write against the OpenAI or the Anthropic API, with signoff between the
//! model and the tools.
//!
//!     cargo run -p signoff-examples --bin sdk-loop                    # the approver approves
//!     cargo run -p signoff-examples --bin sdk-loop -- --auto deny     # ... or denies
//!
//! The same task runs twice, once per message format, against a scripted model: no network, no
//! HTTP client, no API key. The model's responses are `serde_json` values shaped like the APIs'
//! JSON, which is what you get when you deserialize the HTTP response body, so the loops stay the
//! same against the real endpoints.
//!
//! - OpenAI Chat Completions: the assistant message has `tool_calls`, and their `arguments` are
//!   JSON *text*. Each result goes back as its own `{"role": "tool", "tool_call_id", "content"}`
//!   message, in the order of the calls.
//! - Anthropic Messages: the assistant's `content` has `tool_use` blocks, and their `input` is an
//!   object. All the results go back in one user message of `tool_result` blocks, with
//!   `is_error`.
//!
//! In its first turn the model asks for three calls: it reads a file (not gated, so it runs at
//! once), deletes a file (gated, so the approver is asked) and makes a mistake that must not get
//! through. For OpenAI the mistake is arguments that are not JSON; for Anthropic it is arguments
//! that do not match the schema. The model then reacts to what it reads back. If it may go on, it
//! fixes its mistake. If the user declined, it stops.
//!
//! (`serde_json` here sorts object keys when it prints, so the messages print in key order.)

use serde_json::{Value, json};
use signoff::{Gate, PendingRequest, RequestHandler, Scope, Tool, ToolCall, ToolResult};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TASK: &str = "Delete /tmp/old.log and /tmp/cache.bin, and tell me what /tmp/notes.txt says.";
const NOTES: &str = "Standup moved to 10:00.";
const MAX_TURNS: usize = 8;

type Files = Arc<Mutex<BTreeMap<String, String>>>;

fn say(who: &str, text: impl Display) {
    println!("{who:<11} {text}");
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

// ---- the tools: an in-memory file system ------------------------------------------------------

fn tools(files: &Files) -> [Tool; 2] {
    let path_only = json!({
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": false,
    });
    let (f1, f2) = (files.clone(), files.clone());
    [
        // read_only: runs without asking.
        Tool::builder("read_file")
            .description("Reads a text file")
            .parameters(path_only.clone())
            .read_only(true)
            .executor(move |a| {
                let f = f1.clone();
                async move {
                    let p = str_of(&a["path"]);
                    f.lock().unwrap().get(p).map(|t| json!(t)).ok_or_else(|| format!("no such file: {p}"))
                }
            })
            .build(),
        // destructive (and "delete" in the name): gated.
        Tool::builder("delete_file")
            .description("Deletes a file permanently")
            .parameters(path_only)
            .destructive(true)
            .executor(move |a| {
                let f = f2.clone();
                async move {
                    let p = str_of(&a["path"]).to_owned();
                    match f.lock().unwrap().remove(&p) {
                        Some(_) => Ok(json!(format!("deleted {p}"))),
                        None => Err(format!("no such file: {p}")),
                    }
                }
            })
            .build(),
    ]
}

fn auto_approver(approve: bool) -> RequestHandler {
    Arc::new(move |req: PendingRequest| {
        Box::pin(async move {
            let (word, done) = if approve { ("approve", "approved") } else { ("deny", "denied") };
            let r = req.request();
            // Print before answering: once answered, the loop goes on and prints the results.
            say("approver", format!("{} {} -> {done} (--auto {word})", r.tool, r.arguments));
            let answered = if approve {
                req.approve_with(None, Scope::Once, Some("auto".into()))
            } else {
                req.deny(Some("--auto deny: no files are deleted today".into()), Some("auto".into()))
            };
            answered.map(|_| ()).map_err(|e| e.to_string())
        })
    })
}

// ---- OpenAI Chat Completions ------------------------------------------------------------------

/// The call for the gate or, when the arguments are not JSON, the refusal to send back instead.
/// Nobody can review arguments that do not parse, so such a call never reaches an approver.
/// `signoff::json::from_str` parses as the gate does: a repeated key, NaN or trailing data is an
/// error, never "the last one wins".
fn from_openai(tool_call: &Value, session_id: &str) -> Result<ToolCall, Box<ToolResult>> {
    let (id, name) = (str_of(&tool_call["id"]), str_of(&tool_call["function"]["name"]));
    let parsed = match &tool_call["function"]["arguments"] {
        Value::Null => Ok(json!({})),
        Value::String(s) if s.is_empty() => Ok(json!({})),
        Value::String(s) => signoff::json::from_str(s, "arguments").map_err(|e| {
            // "malformed payload: arguments is not acceptable JSON: <the parser's detail>"
            let e = e.to_string();
            e.split_once("JSON: ").map_or(e.clone(), |(_, detail)| detail.to_owned())
        }),
        other => Err(format!("{other} is not JSON text")),
    };
    match parsed {
        Ok(arguments) => Ok(ToolCall::new(name, arguments).call_id(id).session(session_id)),
        Err(detail) => {
            let problem = format!("its arguments are not valid JSON ({detail})");
            // A ToolResult like the gate's own refusals, so that it goes back like any other result.
            Err(Box::new(serde_json::from_value(json!({
                "call_id": id, "tool": name, "status": "rejected", "error": problem, "error_kind": "malformed",
                "content": format!(
                    "The call to `{name}` was refused and did not run: {problem}. Send it again with the arguments as one JSON object."
                ),
            }))
            .expect("a ToolResult")))
        }
    }
}

/// The OpenAI tool message for a result.
fn openai_tool_message(r: &ToolResult) -> Value {
    json!({"role": "tool", "tool_call_id": r.call_id, "content": r.content})
}

fn tool_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

fn completion(content: Option<String>, tool_calls: Vec<Value>) -> Value {
    let mut message = json!({"role": "assistant", "content": content});
    let finish = if tool_calls.is_empty() { "stop" } else { "tool_calls" };
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    json!({
        "id": "chatcmpl-scripted", "object": "chat.completion", "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    })
}

/// Answers like `POST /v1/chat/completions`. It reads only the tool messages it is sent.
struct ScriptedOpenAI {
    turn: usize,
}

impl ScriptedOpenAI {
    fn create(&mut self, messages: &[Value], _tools: &[Value]) -> Value {
        self.turn += 1;
        let said: HashMap<&str, &str> = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| (str_of(&m["tool_call_id"]), str_of(&m["content"])))
            .collect();
        if self.turn == 1 {
            return completion(
                None,
                vec![
                    tool_call("call_01", "read_file", r#"{"path": "/tmp/notes.txt"}"#),
                    tool_call("call_02", "delete_file", r#"{"path": "/tmp/old.log"}"#),
                    tool_call("call_03", "delete_file", r#"{"path": "/tmp/cache.bin""#), // cut short: not JSON
                ],
            );
        }
        let notes = said["call_01"];
        if self.turn == 2 {
            if said["call_02"].contains("Do not retry") {
                return completion(
                    Some(format!(
                        "You declined deleting /tmp/old.log, so I did not retry it and left /tmp/cache.bin alone too. /tmp/notes.txt says: {notes}"
                    )),
                    vec![],
                );
            }
            return completion(None, vec![tool_call("call_04", "delete_file", r#"{"path": "/tmp/cache.bin"}"#)]);
        }
        if said["call_04"].contains("Do not retry") {
            return completion(
                Some(format!("Deleted /tmp/old.log; you declined /tmp/cache.bin. /tmp/notes.txt says: {notes}")),
                vec![],
            );
        }
        completion(
            Some(format!(
                "Deleted /tmp/old.log and /tmp/cache.bin (my first call for it had broken arguments, so I sent it again). /tmp/notes.txt says: {notes}"
            )),
            vec![],
        )
    }
}

async fn openai_loop(gate: &Gate) -> Vec<ToolResult> {
    let mut client = ScriptedOpenAI { turn: 0 };
    let tools: Vec<Value> = gate
        .tools()
        .into_iter()
        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
        .collect();
    let mut messages = vec![json!({"role": "user", "content": TASK})];
    say("user", json!(TASK));
    let mut every = Vec::new();
    for _ in 0..MAX_TURNS {
        let response = client.create(&messages, &tools);
        let message = response["choices"][0]["message"].clone();
        messages.push(message.clone());
        let calls = message["tool_calls"].as_array().cloned().unwrap_or_default();
        if calls.is_empty() {
            say("assistant", &message["content"]);
            return every;
        }
        for (i, tc) in calls.iter().enumerate() {
            let f = &tc["function"];
            say(
                if i == 0 { "assistant" } else { "" },
                format!("tool_call {} {} {}", str_of(&tc["id"]), str_of(&f["name"]), str_of(&f["arguments"])),
            );
        }
        // A slot per call: the refusals now, the gate's results after the batch.
        let mut to_gate = Vec::new();
        let slots: Vec<Option<ToolResult>> = calls
            .iter()
            .map(|tc| match from_openai(tc, "openai-demo") {
                Ok(call) => {
                    to_gate.push(call);
                    None
                }
                Err(refused) => Some(*refused),
            })
            .collect();
        // One batch, in order: the read runs at once, each gated call waits for its own answer.
        let mut ran = gate.execute_batch(to_gate).await.into_iter();
        let results: Vec<ToolResult> =
            slots.into_iter().map(|s| s.unwrap_or_else(|| ran.next().expect("a result per call"))).collect();
        for r in &results {
            messages.push(openai_tool_message(r));
            say("tool", messages.last().unwrap());
        }
        every.extend(results);
    }
    panic!("the model did not finish");
}

// ---- Anthropic Messages -----------------------------------------------------------------------

/// The Anthropic `tool_result` block for a result: `is_error` is true unless the tool ran and
/// succeeded.
fn anthropic_tool_result(r: &ToolResult) -> Value {
    json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error()})
}

fn from_anthropic(block: &Value, session_id: &str) -> ToolCall {
    ToolCall::new(str_of(&block["name"]), block["input"].clone()).call_id(str_of(&block["id"])).session(session_id)
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

fn text(s: impl Into<String>) -> Value {
    json!({"type": "text", "text": s.into()})
}

fn message(content: Vec<Value>) -> Value {
    let stop = if content.iter().any(|b| b["type"] == "tool_use") { "tool_use" } else { "end_turn" };
    json!({"id": "msg_scripted", "type": "message", "role": "assistant", "model": "scripted", "content": content, "stop_reason": stop})
}

/// Answers like `POST /v1/messages`. It reads only the `tool_result` blocks it is sent.
struct ScriptedAnthropic {
    turn: usize,
}

impl ScriptedAnthropic {
    fn create(&mut self, messages: &[Value], _tools: &[Value]) -> Value {
        self.turn += 1;
        let got: HashMap<&str, &Value> = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .flat_map(|m| m["content"].as_array().into_iter().flatten())
            .filter(|b| b["type"] == "tool_result")
            .map(|b| (str_of(&b["tool_use_id"]), b))
            .collect();
        if self.turn == 1 {
            return message(vec![
                text("I'll read your notes and delete the two files."),
                tool_use("toolu_01", "read_file", json!({"path": "/tmp/notes.txt"})),
                tool_use("toolu_02", "delete_file", json!({"path": "/tmp/old.log"})),
                tool_use("toolu_03", "delete_file", json!({"file": "/tmp/cache.bin"})), // wrong key: not the schema
            ]);
        }
        let notes = str_of(&got["toolu_01"]["content"]);
        if self.turn == 2 {
            let old = got["toolu_02"];
            if old["is_error"] == true && str_of(&old["content"]).contains("Do not retry") {
                return message(vec![text(format!(
                    "You declined deleting /tmp/old.log, so I did not retry it and left /tmp/cache.bin alone too. /tmp/notes.txt says: {notes}"
                ))]);
            }
            return message(vec![
                text("My call for /tmp/cache.bin did not match the schema; fixing it."),
                tool_use("toolu_04", "delete_file", json!({"path": "/tmp/cache.bin"})),
            ]);
        }
        if got["toolu_04"]["is_error"] == true {
            return message(vec![text(format!(
                "Deleted /tmp/old.log, but not /tmp/cache.bin. /tmp/notes.txt says: {notes}"
            ))]);
        }
        message(vec![text(format!(
            "Deleted /tmp/old.log and /tmp/cache.bin (my first call for it did not match the schema, so I sent it again). /tmp/notes.txt says: {notes}"
        ))])
    }
}

async fn anthropic_loop(gate: &Gate) -> Vec<ToolResult> {
    let mut client = ScriptedAnthropic { turn: 0 };
    let tools: Vec<Value> = gate
        .tools()
        .into_iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
        .collect();
    let mut messages = vec![json!({"role": "user", "content": TASK})];
    say("user", json!(TASK));
    let mut every = Vec::new();
    for _ in 0..MAX_TURNS {
        let response = client.create(&messages, &tools);
        let content = response["content"].as_array().cloned().unwrap_or_default();
        messages.push(json!({"role": "assistant", "content": content}));
        for (i, b) in content.iter().enumerate() {
            let shown = if b["type"] == "text" {
                b["text"].to_string()
            } else {
                format!("{} {} {}", str_of(&b["id"]), str_of(&b["name"]), b["input"])
            };
            say(if i == 0 { "assistant" } else { "" }, format!("{} {shown}", str_of(&b["type"])));
        }
        if response["stop_reason"] != "tool_use" {
            return every;
        }
        let calls =
            content.iter().filter(|b| b["type"] == "tool_use").map(|b| from_anthropic(b, "anthropic-demo")).collect();
        let results = gate.execute_batch(calls).await;
        // All the results in one user message; is_error is true when the tool did not run (or failed).
        let blocks: Vec<Value> = results.iter().map(anthropic_tool_result).collect();
        for (i, b) in blocks.iter().enumerate() {
            say(if i == 0 { "user" } else { "" }, b);
        }
        messages.push(json!({"role": "user", "content": blocks}));
        every.extend(results);
    }
    panic!("the model did not finish");
}

// ---- main -------------------------------------------------------------------------------------

async fn run(title: &str, openai: bool, approve: bool) -> (Vec<ToolResult>, Vec<String>) {
    println!("\n== {title} (--auto {}) ==", if approve { "approve" } else { "deny" });
    let files: Files = Arc::new(Mutex::new(
        [("/tmp/notes.txt", NOTES), ("/tmp/old.log", "old log lines"), ("/tmp/cache.bin", "cache")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    ));
    let gate = Gate::builder().default_timeout(Duration::from_secs(30)).build().expect("gate");
    for tool in tools(&files) {
        gate.register(tool).expect("register");
    }
    let approver = gate.on_request(auto_approver(approve));
    let results = if openai { openai_loop(&gate).await } else { anthropic_loop(&gate).await };
    approver.stop();
    gate.close();
    let left: Vec<String> = files.lock().unwrap().keys().cloned().collect();
    say("files left", left.join(", "));
    (results, left)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let approve = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] | ["--auto", "approve"] => true,
        ["--auto", "deny"] => false,
        _ => {
            eprintln!("usage: sdk-loop [--auto approve|deny]   (default: approve)");
            return ExitCode::from(2);
        }
    };
    let auto = if approve { "approve" } else { "deny" };
    let (openai, openai_left) = run("OpenAI Chat Completions", true, approve).await;
    let (anthropic, anthropic_left) = run("Anthropic Messages", false, approve).await;

    let gated = if approve { "executed" } else { "denied" };
    let mut expected = vec![("01", "executed"), ("02", gated), ("03", "rejected")];
    if approve {
        expected.push(("04", "executed"));
    }
    let kept: &[&str] =
        if approve { &["/tmp/notes.txt"] } else { &["/tmp/cache.bin", "/tmp/notes.txt", "/tmp/old.log"] };
    let status = |r: &ToolResult| json!(r.status).as_str().unwrap_or_default().to_owned();
    let matches = |results: &[ToolResult], prefix: &str| {
        results.iter().map(|r| (r.call_id.clone().unwrap_or_default(), status(r))).collect::<Vec<_>>()
            == expected.iter().map(|(n, s)| (format!("{prefix}{n}"), s.to_string())).collect::<Vec<_>>()
    };
    let ok = matches(&openai, "call_")
        && matches(&anthropic, "toolu_")
        && openai[2].error_kind == Some(signoff::ErrorKind::Malformed)
        && anthropic[2].error_kind == Some(signoff::ErrorKind::InvalidArguments)
        && openai_left == kept
        && anthropic_left == kept;
    let listed = |results: &[ToolResult]| {
        results
            .iter()
            .map(|r| format!("{} {}", r.call_id.as_deref().unwrap_or_default(), status(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let deleted = 6 - openai_left.len() - anthropic_left.len();
    println!(
        "\nsummary: --auto {auto} | openai: {} | anthropic: {} | files deleted: {deleted} | {}",
        listed(&openai),
        listed(&anthropic),
        if ok { "ok" } else { "UNEXPECTED" }
    );
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
