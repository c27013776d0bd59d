//! signoff demo: an agent loop with a scripted model and a terminal approver.
//!
//!     cargo run -p signoff-examples --bin demo                 # you approve in the terminal
//!     cargo run -p signoff-examples --bin demo -- --auto approve
//!     cargo run -p signoff-examples --bin demo -- --auto deny
//!     cargo run -p signoff-examples --bin demo -- --script examples/demo-answers.txt
//!     cargo run -p signoff-examples --bin demo -- --timeout 10   # requests wait 10 s (default 120)
//!
//! Answers at each request (type one, then Enter): a = approve, s = approve for the rest of the
//! session, d = deny (then type a reason), e = edit the arguments (the current ones are filled in
//! for you in a terminal; an empty line keeps them; the edit is validated). Script files hold one
//! answer per line in the same form: `a`, `s`, `d <reason>`, `e <json>`. When a script runs out,
//! the demo denies: nothing runs without an explicit approve.
//!
//! The approver never waits on a stale prompt: input is read on its own thread, and a request
//! that expires (or is answered or cancelled elsewhere) is withdrawn from the screen at once and
//! the next one shown. In a terminal the prompt counts down the time left and colours are on
//! (unless `NO_COLOR` is set); Ctrl-C stops the agent, prints the summary and exits with 130.

use serde_json::{Value, json};
use signoff::{
    ApprovedBy, CancelReason, ConfirmationRequest, ConfirmationResolved, ConfirmationResponse, Decision, ErrorKind,
    Event, Gate, Outcome, ResponseDecision, Scope, Tool, ToolCall, ToolResult, ToolStatus,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufRead, IsTerminal, Read, Write};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

const SESSION: &str = "demo-session";
const DEFAULT_TIMEOUT_S: f64 = 120.0;
const USAGE: &str = "usage: demo [--auto approve|deny | --script FILE] [--timeout SECONDS]";

type Files = Arc<Mutex<BTreeMap<String, String>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The tools and the scripted model
// ---------------------------------------------------------------------------------------------

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
                    lock(&f).get(p).map(|t| json!(t)).ok_or_else(|| format!("{p}: no such file"))
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
                    Ok(json!(lock(&f).keys().filter(|k| k.starts_with(&dir)).cloned().collect::<Vec<_>>()))
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
                    match lock(&f).remove(&p) {
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

/// One call the model made, and what became of it.
struct Entry {
    asked: Value,
    result: ToolResult,
}

/// The agent loop: the model speaks, calls tools through the gate, and reads the results.
struct Agent {
    gate: Gate,
    /// The approver's channel: results are shown only once it has taken their requests off screen.
    approver: Sender<Msg>,
    stop: Arc<AtomicI32>,
    next_id: usize,
    log: Vec<Entry>,
}

impl Agent {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) != 0
    }

    fn say(&self, text: &str) {
        say(&format!("\n{} {text}", paint("1;35", "model:")));
    }

    /// One model turn: say something, make the calls (as one batch), show the results.
    /// `None` once the person has stopped the demo (Ctrl-C).
    async fn turn(&mut self, text: &str, calls: Vec<(&str, Value)>) -> Option<Vec<ToolResult>> {
        if self.stopped() {
            return None;
        }
        self.say(text);
        let mut asked = Vec::new();
        let calls: Vec<ToolCall> = calls
            .into_iter()
            .map(|(tool, args)| {
                self.next_id += 1;
                let id = format!("call_{}", self.next_id);
                say(&format!("  model calls {} {}  ({id})", paint("1", tool), esc_json(&args)));
                asked.push(args.clone());
                ToolCall::new(tool, args).session(SESSION).call_id(id)
            })
            .collect();
        let results = self.gate.execute_batch(calls).await;
        // A request that ended without an answer here (expired, cancelled) is withdrawn from the
        // screen before its result is shown, so the screen reads in the order things happened.
        let (ack, done) = mpsc::channel();
        if self.approver.send(Msg::Settled(results.clone(), ack)).is_ok() {
            let _ = done.recv_timeout(Duration::from_secs(1));
        }
        for (r, asked) in results.iter().zip(asked) {
            print_result(r);
            self.log.push(Entry { asked, result: r.clone() });
        }
        if self.stopped() { None } else { Some(results) }
    }
}

fn print_result(r: &ToolResult) {
    let status = match r.status {
        ToolStatus::Executed => paint("32", "executed"),
        ToolStatus::Failed => paint("31", "failed"),
        ToolStatus::Denied => paint("31", "denied"),
        ToolStatus::TimedOut => paint("33", "timed out"),
        ToolStatus::Cancelled => paint("33", "cancelled"),
        ToolStatus::Rejected => paint("31", "rejected"),
    };
    let head = format!("  tool result for {} [{}] (", r.call_id.as_deref().unwrap_or("-"), r.tool);
    let mut text = format!("{}{status}{}", paint("2", &head), paint("2", "):"));
    for line in r.content.lines() {
        text.push_str(&format!("\n    {}", paint("2", &esc(line))));
    }
    say(&text);
}

/// What became of a call, as the model reads it.
enum Fate {
    /// It ran; the path it ran on (for the file tools).
    Ran(String),
    /// It ran and failed: the error.
    Failed(String),
    /// It did not run: why, in the model's words.
    NotRun(String),
}

fn fate(r: &ToolResult) -> Fate {
    match r.status {
        ToolStatus::Executed => {
            return Fate::Ran(r.arguments.as_ref().and_then(|a| a["path"].as_str()).map(esc).unwrap_or_default());
        }
        ToolStatus::Failed => return Fate::Failed(esc(r.error.as_deref().unwrap_or("unknown error"))),
        _ => {}
    }
    Fate::NotRun(match &r.decision {
        Some(Decision::Denied { reason, responder, .. }) => {
            let why = reason.as_deref().map(str::trim).filter(|s| !s.is_empty());
            let why = why.map(|s| format!(" (\"{}\")", esc(s))).unwrap_or_default();
            match responder.as_deref() {
                Some("input-closed") => "Nobody could answer (the terminal was closed), so it did not run.".into(),
                Some("terminal" | "script") => format!("You said no{why}."),
                _ => format!("That was declined{why}."),
            }
        }
        Some(Decision::TimedOut { .. }) => "Nobody answered in time, so it did not run.".into(),
        Some(Decision::Cancelled { .. }) => "The request was cancelled, so it did not run.".into(),
        _ => format!("The call was refused: {}.", esc(r.error.as_deref().unwrap_or("?"))),
    })
}

/// The scripted model. It reads every result and changes course when a call does not run:
/// what it says always follows what actually happened. `None`: stopped by Ctrl-C.
async fn model(a: &mut Agent) -> Option<()> {
    a.turn("Let me look at your notes first.", vec![("read_file", json!({"path": "/notes/todo.txt"}))]).await?;

    let old = "/notes/old-draft.txt";
    let r = a.turn(
        "Your to-do list says to clean up the old draft. I'll delete it.",
        vec![("delete_file", json!({"path": old}))],
    );
    let r = r.await?.remove(0);
    let batch = vec![
        ("list_dir", json!({"path": "/notes"})),
        ("send_email", json!({"to": "advisor@university.edu", "subject": "Draft", "body": "The new draft is ready."})),
        ("read_file", json!({"path": "/notes/todo.txt"})),
    ];
    let next = "check the folder, email your advisor, and reread the to-do list";
    let mut deleting = true;
    let lead = match fate(&r) {
        Fate::Ran(path) => format!("Done: {path} is gone. Now I'll {next}, all at once."),
        Fate::Failed(e) => format!("That didn't work ({e}). Moving on: I'll {next}, all at once."),
        Fate::NotRun(why) if r.status == ToolStatus::Denied => {
            deleting = false;
            format!(
                "{why} I won't delete {old}, and I'll stop deleting files altogether. What would you like me to do with \
                 it instead? Meanwhile I'll do the parts of the list that delete nothing: {next}."
            )
        }
        Fate::NotRun(why) => {
            deleting = false;
            format!(
                "{why} {old} is still there, and I won't delete anything while you're away. Meanwhile I'll do the parts \
                 of the list that delete nothing: {next}."
            )
        }
    };
    let results = a.turn(&lead, batch).await?;
    let email = &results[1];
    let mut lead = match fate(email) {
        Fate::Ran(_) if email.edited => "I've emailed your advisor, with your changes.".to_owned(),
        Fate::Ran(_) => "I've emailed your advisor.".to_owned(),
        Fate::Failed(e) => format!("The email didn't go out ({e})."),
        Fate::NotRun(why) if email.status == ToolStatus::Denied => {
            format!("{why} I haven't emailed your advisor; I'll leave that to you.")
        }
        Fate::NotRun(why) => format!("{why} I haven't emailed your advisor."),
    };
    if !deleting {
        lead.push_str(
            " The list also mentions the thesis scratch copy, and there are temporary files, but I'm not deleting \
             anything: they all stay where they are. Tell me what you'd like done with them instead.",
        );
        a.say(&lead);
        return Some(());
    }

    lead.push_str(" The to-do list also says to remove the thesis scratch copy.");
    let thesis = "/notes/thesis.tex";
    let r = a.turn(&lead, vec![("delete_file", json!({"path": thesis}))]).await?.remove(0);
    let lead = match fate(&r) {
        Fate::Ran(path) if path != thesis => {
            format!(
                "You corrected me: I deleted {path} instead, and {thesis} is untouched. Tidying the temporary files."
            )
        }
        Fate::Ran(path) => format!("Deleted {path}. Tidying the temporary files."),
        Fate::Failed(e) => format!("That didn't work ({e}). Tidying the temporary files."),
        Fate::NotRun(why) => {
            a.say(&format!(
                "{why} I'll leave {thesis} alone and stop deleting files. What would you like me to do instead?"
            ));
            return Some(());
        }
    };
    let r = a.turn(&lead, vec![("delete_file", json!({"path": "/notes/tmp.txt"}))]).await?.remove(0);
    let for_session = matches!(r.decision, Some(Decision::Approved { scope: Scope::Session, .. }));
    let lead = match fate(&r) {
        Fate::NotRun(why) => {
            a.say(&format!("{why} I'll leave the temporary files as they are. Anything else you'd like instead?"));
            return Some(());
        }
        Fate::Failed(e) if for_session => {
            format!(
                "That didn't work ({e}). The second one (you approved deletes for this session, so no need to ask)."
            )
        }
        Fate::Failed(e) => format!("That didn't work ({e}). The second one, then."),
        Fate::Ran(_) if for_session => {
            "And the second one (you approved deletes for this session, so no need to ask).".to_owned()
        }
        Fate::Ran(_) => "And the second one (you approved only that delete, so you'll be asked again).".to_owned(),
    };
    let r = a.turn(&lead, vec![("delete_file", json!({"path": "/notes/tmp2.txt"}))]).await?.remove(0);
    match fate(&r) {
        Fate::Ran(_) => a.say("Both temporary files are gone. That's everything on the list."),
        Fate::Failed(e) => a.say(&format!("That didn't work ({e}). That's everything on the list.")),
        Fate::NotRun(why) => a.say(&format!("{why} /notes/tmp2.txt stays. That's as far as I'll go; anything else?")),
    }
    Some(())
}

// ---------------------------------------------------------------------------------------------
// The screen: colours, and one live line (countdown and what is being typed) kept under the output
// ---------------------------------------------------------------------------------------------

struct Screen {
    /// stdout is a terminal: a live line is drawn and redrawn in place.
    live: bool,
    /// Colours on (a terminal, and `NO_COLOR` unset or empty).
    color: bool,
    drawn: Mutex<Drawn>,
}

#[derive(Default)]
struct Drawn {
    /// Columns the live line occupies on screen now (0: none drawn).
    width: usize,
    line: Option<Live>,
}

/// The live line: text (maybe with colours), its visible width, and the cursor's column.
#[derive(Clone, PartialEq)]
struct Live {
    text: String,
    width: usize,
    cursor: usize,
}

static SCREEN: OnceLock<Screen> = OnceLock::new();

fn screen() -> &'static Screen {
    SCREEN.get_or_init(|| Screen { live: false, color: false, drawn: Mutex::default() })
}

/// Wraps `s` in an SGR colour code when colours are on.
fn paint(code: &str, s: &str) -> String {
    if screen().color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() }
}

/// Prints text above the live line.
fn say(text: &str) {
    screen().print(text);
}

impl Screen {
    fn print(&self, text: &str) {
        let mut d = lock(&self.drawn);
        let mut out = String::new();
        Self::erase(&mut d, &mut out);
        out.push_str(text);
        out.push('\n');
        if let Some(l) = d.line.clone() {
            Self::paint_live(&mut d, &l, &mut out);
        }
        emit(&out);
    }

    /// Draws (or, with `None`, removes) the live line. It is redrawn in place with carriage
    /// returns, spaces and backspaces only: no escape sequences, so `NO_COLOR` output has none.
    fn set_live(&self, live: Option<Live>) {
        if !self.live {
            return;
        }
        let mut d = lock(&self.drawn);
        if d.line == live {
            return;
        }
        let mut out = String::new();
        match &live {
            Some(l) => Self::paint_live(&mut d, l, &mut out),
            None => Self::erase(&mut d, &mut out),
        }
        d.line = live;
        emit(&out);
    }

    fn erase(d: &mut Drawn, out: &mut String) {
        if d.width > 0 {
            out.push('\r');
            out.push_str(&" ".repeat(d.width));
            out.push('\r');
            d.width = 0;
        }
    }

    fn paint_live(d: &mut Drawn, l: &Live, out: &mut String) {
        out.push('\r');
        out.push_str(&l.text);
        let pad = d.width.saturating_sub(l.width);
        out.push_str(&" ".repeat(pad));
        out.push_str(&"\x08".repeat((l.width + pad).saturating_sub(l.cursor)));
        d.width = l.width;
    }
}

fn emit(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

/// Escapes deceptive characters (bidi controls, zero-width, ...) so what is shown is what runs.
fn esc(s: &str) -> String {
    signoff::display::escape_for_display(s).into_owned()
}

fn esc_json(v: &Value) -> String {
    esc(&signoff::display::canonical_json(v))
}

/// Compact JSON for the edit line, with deceptive characters as `\uXXXX` escapes: still JSON for
/// the same value, but nothing in it can hide or reorder text on screen.
fn editable_json(v: &Value) -> String {
    let mut out = String::new();
    for c in signoff::display::canonical_json(v).chars() {
        if signoff::display::is_deceptive(c) || c.is_control() {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// What changed between two argument values, per top-level key: (key, old, new).
fn diff(old: &Value, new: &Value) -> Vec<(String, String, String)> {
    let show = |v: Option<&Value>| v.map_or_else(|| "(absent)".to_owned(), esc_json);
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .map(|k| (esc(k), show(a.get(k)), show(b.get(k))))
                .collect()
        }
        _ if old != new => vec![("arguments".into(), esc_json(old), esc_json(new))],
        _ => Vec::new(),
    }
}

fn clock(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02} UTC", (s / 3600) % 24, (s / 60) % 60, s % 60)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn ms_left(req: &ConfirmationRequest) -> u64 {
    req.deadline_ms.saturating_sub(now_ms())
}

// ---------------------------------------------------------------------------------------------
// The terminal: keys one at a time (Ctrl-C included) and signals, restored on every exit
// ---------------------------------------------------------------------------------------------

#[cfg(unix)]
mod term {
    use std::sync::Mutex;

    static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

    /// Puts the terminal on stdin in "cbreak" mode: keys arrive one at a time, unechoed, and
    /// Ctrl-C, Ctrl-Z and Ctrl-S arrive as keys rather than signals or flow control (so a `make`
    /// running the demo never sees them). Output processing stays on. False: not possible.
    pub fn take_keys() -> bool {
        let mut t = std::mem::MaybeUninit::<libc::termios>::uninit();
        // SAFETY: tcgetattr fills the struct when it returns 0, and only then is it read.
        if unsafe { libc::tcgetattr(0, t.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: initialised by the successful tcgetattr above.
        let saved = unsafe { t.assume_init() };
        let mut raw = saved;
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        raw.c_iflag &= !libc::IXON;
        raw.c_cc[libc::VMIN] = 1;
        raw.c_cc[libc::VTIME] = 0;
        *super::lock(&SAVED) = Some(saved);
        // SAFETY: a valid termios for fd 0.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) == 0 }
    }

    /// Gives the terminal back as it was (idempotent); keys typed but not read are dropped, so
    /// they do not spill into the shell.
    pub fn restore() {
        if let Some(t) = super::lock(&SAVED).take() {
            // SAFETY: the termios saved from fd 0 by take_keys.
            unsafe { libc::tcsetattr(0, libc::TCSAFLUSH, &t) };
        }
    }

    /// The terminal's width in columns (80 when unknown).
    pub fn columns() -> usize {
        // SAFETY: winsize is plain data; TIOCGWINSZ fills it when it returns 0.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes a winsize through the pointer, which is to a live local.
        match unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } {
            0 if ws.ws_col > 0 => ws.ws_col as usize,
            _ => 80,
        }
    }

    pub struct Signals(libc::sigset_t);

    /// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread started after it, so
    /// they can be taken one by one with [`Signals::wait`]. Call before starting any thread.
    pub fn block_signals() -> Signals {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Signals(set)
        }
    }

    impl Signals {
        /// Waits for one of the blocked signals; its number.
        pub fn wait(&self) -> Option<i32> {
            let mut sig = 0;
            // SAFETY: a valid, initialised set and an out-parameter.
            (unsafe { libc::sigwait(&self.0, &mut sig) } == 0).then_some(sig)
        }
    }
}

#[cfg(not(unix))]
mod term {
    pub fn take_keys() -> bool {
        false
    }
    pub fn restore() {}
    pub fn columns() -> usize {
        80
    }
    pub struct Signals;
    pub fn block_signals() -> Signals {
        Signals
    }
    impl Signals {
        pub fn wait(&self) -> Option<i32> {
            None
        }
    }
}

/// Leaves: the live line removed, the terminal restored.
fn exit(code: i32) -> ! {
    screen().set_live(None);
    term::restore();
    std::process::exit(code)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    Char(char),
    Enter,
    Backspace,
    Delete,
    Left,
    Right,
    Home,
    End,
    Esc,
    CtrlC,
    KillToStart,
    KillToEnd,
    KillWord,
    Ignored,
}

/// Turns terminal bytes into keys. An incomplete UTF-8 character or escape sequence at the end of
/// a read is kept in `carry` for the next one; an ESC alone is the Esc key.
fn decode_keys(bytes: &[u8], carry: &mut Vec<u8>) -> Vec<Key> {
    let mut data = std::mem::take(carry);
    data.extend_from_slice(bytes);
    let mut keys = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        let (key, used) = match b {
            0x03 => (Key::CtrlC, 1),
            b'\r' if data.get(i + 1) == Some(&b'\n') => (Key::Enter, 2),
            b'\r' | b'\n' => (Key::Enter, 1),
            0x7f | 0x08 => (Key::Backspace, 1),
            0x01 => (Key::Home, 1),
            0x05 => (Key::End, 1),
            0x02 => (Key::Left, 1),
            0x06 => (Key::Right, 1),
            0x04 => (Key::Delete, 1),
            0x15 => (Key::KillToStart, 1),
            0x0b => (Key::KillToEnd, 1),
            0x17 => (Key::KillWord, 1),
            0x1b => match data.get(i + 1) {
                None => (Key::Esc, 1),
                Some(b'[' | b'O') => {
                    let start = i + 2;
                    let mut j = start;
                    while j < data.len() && (0x30..=0x3f).contains(&data[j]) {
                        j += 1;
                    }
                    let Some(&fin) = data.get(j) else {
                        *carry = data[i..].to_vec();
                        break;
                    };
                    let params = std::str::from_utf8(&data[start..j]).unwrap_or("");
                    let key = match (fin, params) {
                        (b'C', _) => Key::Right,
                        (b'D', _) => Key::Left,
                        (b'H', _) => Key::Home,
                        (b'F', _) => Key::End,
                        (b'~', "1" | "7") => Key::Home,
                        (b'~', "4" | "8") => Key::End,
                        (b'~', "3") => Key::Delete,
                        _ => Key::Ignored,
                    };
                    (key, j + 1 - i)
                }
                Some(_) => (Key::Ignored, 2), // Alt+key
            },
            0..=0x1f => (Key::Ignored, 1),
            _ => {
                let len = match b {
                    0xc0..=0xdf => 2,
                    0xe0..=0xef => 3,
                    0xf0..=0xf7 => 4,
                    _ => 1,
                };
                if i + len > data.len() {
                    *carry = data[i..].to_vec();
                    break;
                }
                let key = std::str::from_utf8(&data[i..i + len]).ok().and_then(|s| s.chars().next());
                (key.map_or(Key::Ignored, Key::Char), len)
            }
        };
        keys.push(key);
        i += used;
    }
    keys
}

// ---------------------------------------------------------------------------------------------
// The terminal approver
// ---------------------------------------------------------------------------------------------

enum Answers {
    Interactive,
    Auto(bool),
    Script(VecDeque<String>),
}

/// Everything the approver thread reacts to, from every source, in one channel.
enum Msg {
    Request(Arc<ConfirmationRequest>),
    Resolved(Arc<ConfirmationResolved>),
    Key(Key),
    Line(String),
    InputClosed,
    /// A signal (its exit status: 128 + the signal's number).
    Signal(i32),
    /// These calls have ended: any of their requests still on the approver's list is withdrawn
    /// (then acknowledged).
    Settled(Vec<ToolResult>, Sender<()>),
    /// The agent is done; the approver clears its line, acknowledges and ends.
    Finished(Sender<()>),
}

#[derive(Clone, Copy, PartialEq)]
enum Stage {
    Choose,
    Reason,
    Edit,
}

/// A one-line editor (the terminal's own line editing is off while keys are read one by one).
#[derive(Default)]
struct Editor {
    buf: Vec<char>,
    cursor: usize,
    scroll: usize,
}

impl Editor {
    fn set(&mut self, text: &str) {
        self.buf = text.chars().collect();
        self.cursor = self.buf.len();
        self.scroll = 0;
    }

    fn take(&mut self) -> String {
        let s = self.buf.iter().collect();
        self.set("");
        s
    }

    fn key(&mut self, k: Key) {
        let n = self.buf.len();
        match k {
            Key::Char(c) => {
                self.buf.insert(self.cursor, c);
                self.cursor += 1;
            }
            Key::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.buf.remove(self.cursor);
            }
            Key::Delete if self.cursor < n => {
                self.buf.remove(self.cursor);
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(n),
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = n,
            Key::KillToStart => {
                self.buf.drain(..self.cursor);
                self.cursor = 0;
            }
            Key::KillToEnd => self.buf.truncate(self.cursor),
            Key::KillWord => {
                let mut start = self.cursor;
                while start > 0 && self.buf[start - 1].is_whitespace() {
                    start -= 1;
                }
                while start > 0 && !self.buf[start - 1].is_whitespace() {
                    start -= 1;
                }
                self.buf.drain(start..self.cursor);
                self.cursor = start;
            }
            _ => {}
        }
    }

    /// The part that fits in `width` columns (scrolled to keep the cursor in view, with `…`
    /// where text is cut off), and the cursor's column within it.
    fn view(&mut self, width: usize) -> (String, usize) {
        let width = width.max(4);
        if self.buf.len() < width {
            self.scroll = 0;
        } else if self.cursor < self.scroll + 1 {
            self.scroll = self.cursor.saturating_sub(1);
        } else if self.cursor + 2 > self.scroll + width {
            self.scroll = self.cursor + 2 - width;
        }
        let end = (self.scroll + width).min(self.buf.len());
        let mut shown: Vec<char> = self.buf[self.scroll..end].to_vec();
        if self.scroll > 0 {
            shown[0] = '…';
        }
        if end < self.buf.len()
            && let Some(last) = shown.last_mut()
        {
            *last = '…';
        }
        (shown.into_iter().collect(), self.cursor - self.scroll)
    }
}

/// What to say when a request on screen ended without an answer from here.
fn ended(outcome: Outcome, cancel: Option<CancelReason>, responder: Option<&str>) -> String {
    match outcome {
        Outcome::TimedOut => "expired: nobody answered in time, the tool did not run".to_owned(),
        Outcome::Cancelled => {
            let why = cancel.map_or("cancelled", CancelReason::as_str);
            format!("withdrawn: the request was cancelled ({why}), the tool did not run")
        }
        Outcome::Approved => format!("answered elsewhere: approved by {}", responder.unwrap_or("someone else")),
        Outcome::Denied => format!("answered elsewhere: denied by {}", responder.unwrap_or("someone else")),
    }
}

/// Splits an answer line into its command letter and the rest (`d <reason>`, `e <json>`).
fn parse_answer(line: &str) -> (Option<char>, Option<String>) {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).map_or((line, ""), |(w, r)| (w, r.trim()));
    let cmd = match word.to_ascii_lowercase().as_str() {
        "a" | "approve" => Some('a'),
        "s" | "session" => Some('s'),
        "d" | "deny" => Some('d'),
        "e" | "edit" => Some('e'),
        _ => None,
    };
    (cmd, (!rest.is_empty()).then(|| rest.to_owned()))
}

/// Answers confirmation requests, oldest first, from the terminal, a script or `--auto`.
/// It never blocks on input: keys, lines, bus events and signals all arrive through one channel,
/// so a request that ends while it is on screen is withdrawn at once.
struct Approver {
    gate: Gate,
    answers: Answers,
    /// Keys one at a time from a terminal (else whole lines from a pipe or file).
    keys: bool,
    /// Non-zero once stopped (Ctrl-C or a signal): the exit status.
    stop: Arc<AtomicI32>,
    queue: VecDeque<Arc<ConfirmationRequest>>,
    shown: Option<Arc<ConfirmationRequest>>,
    stage: Stage,
    editor: Editor,
    lines: VecDeque<String>,
    input_closed: bool,
}

impl Approver {
    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            let msg = match rx.recv_timeout(self.wake_in()) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            match msg {
                None => self.sweep(),
                Some(Msg::Request(r)) => self.enqueue(r),
                Some(Msg::Resolved(r)) => self.resolved(&r),
                Some(Msg::Key(k)) => self.key(k),
                Some(Msg::Line(l)) => self.lines.push_back(l),
                Some(Msg::InputClosed) => self.input_closed = true,
                Some(Msg::Signal(code)) => self.interrupt(code),
                Some(Msg::Settled(results, ack)) => {
                    self.settled(&results);
                    let _ = ack.send(());
                }
                Some(Msg::Finished(ack)) => {
                    screen().set_live(None);
                    let _ = ack.send(());
                    return;
                }
            }
            self.advance();
            self.draw();
        }
    }

    fn current(&self) -> Option<Arc<ConfirmationRequest>> {
        self.shown.clone()
    }

    fn is_shown(&self, req: &ConfirmationRequest) -> bool {
        self.shown.as_ref().is_some_and(|s| s.id == req.id)
    }

    /// When to wake without a message: when the countdown's second changes (live line), else
    /// once a second to look for requests that ended unseen.
    fn wake_in(&self) -> Duration {
        match &self.shown {
            Some(req) if screen().live && matches!(self.answers, Answers::Interactive) => {
                let left = ms_left(req);
                Duration::from_millis(if left == 0 { 250 } else { (left - 1) % 1000 + 5 })
            }
            _ => Duration::from_secs(1),
        }
    }

    fn enqueue(&mut self, r: Arc<ConfirmationRequest>) {
        if self.stop.load(Ordering::SeqCst) != 0 {
            self.gate.cancel_request(&r.id);
        } else if !self.queue.iter().any(|q| q.id == r.id) && self.gate.pending_request(&r.id).is_some() {
            // (A request delivered late, after it ended, is never shown.)
            self.queue.push_back(r);
        }
    }

    /// Requests that ended without us seeing their last event (a lagging bus) are withdrawn too.
    fn sweep(&mut self) {
        let now = now_ms();
        let gate = &self.gate;
        let gone: Vec<_> = self
            .queue
            .iter()
            .filter(|r| now > r.deadline_ms + 2000 && gate.pending_request(&r.id).is_none())
            .cloned()
            .collect();
        for r in gone {
            self.withdraw(&r, "no longer pending: the tool did not run");
        }
    }

    fn remove(&mut self, req: &ConfirmationRequest) {
        self.queue.retain(|q| q.id != req.id);
        if self.is_shown(req) {
            self.shown = None;
            self.stage = Stage::Choose;
            self.editor.set("");
            screen().set_live(None);
        }
    }

    fn withdraw(&mut self, req: &ConfirmationRequest, what: &str) {
        let was_shown = self.is_shown(req);
        let typed = self.keys && !self.editor.buf.is_empty();
        self.remove(req);
        if was_shown {
            let typed = if typed { " (what you had typed for it is dropped)" } else { "" };
            say(&format!("  {}{typed}", paint("1;33", &format!("✗ {what}"))));
        } else {
            say(&format!(
                "  {}",
                paint("33", &format!("(a request for `{}` ended before it was shown: {what})", req.tool))
            ));
        }
    }

    /// A request's last event: if it is still on our list, nobody here answered it.
    fn resolved(&mut self, r: &ConfirmationResolved) {
        let Some(req) = self.queue.iter().find(|q| q.id == r.id).cloned() else { return };
        self.withdraw(&req, &ended(r.outcome, r.cancel_reason, r.responder.as_deref()));
    }

    /// The agent has these results: their requests are over, whether or not we saw the event.
    fn settled(&mut self, results: &[ToolResult]) {
        for r in results {
            let Some(req) = self.queue.iter().find(|q| Some(q.id) == r.request_id).cloned() else { continue };
            let what = match &r.decision {
                Some(Decision::Approved { responder, .. }) => ended(Outcome::Approved, None, responder.as_deref()),
                Some(Decision::Denied { responder, .. }) => ended(Outcome::Denied, None, responder.as_deref()),
                Some(Decision::TimedOut { .. }) => ended(Outcome::TimedOut, None, None),
                Some(Decision::Cancelled { reason, .. }) => ended(Outcome::Cancelled, Some(*reason), None),
                None => "no longer pending: the tool did not run".to_owned(),
            };
            self.withdraw(&req, &what);
        }
    }

    fn interrupt(&mut self, code: i32) {
        if self.stop.swap(code, Ordering::SeqCst) != 0 {
            exit(code); // a second Ctrl-C (or signal): leave now
        }
        screen().set_live(None);
        let waiting = self.queue.len();
        self.queue.clear();
        self.shown = None;
        let what = match waiting {
            0 => String::new(),
            1 => "; the request on screen is withdrawn".into(),
            n => format!("; {n} requests are withdrawn"),
        };
        let by = stop_name(code);
        say(&format!("\n  {}", paint("1;33", &format!("stopped ({by}){what}: nothing else will run"))));
        for r in self.gate.pending() {
            self.gate.cancel_request(&r.id);
        }
        // The agent ends its turn and prints the summary; if it somehow cannot, leave anyway.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            exit(code);
        });
    }

    /// Shows the oldest request and answers it when an answer is at hand (script, --auto, a line
    /// already read); repeats while requests get answered.
    fn advance(&mut self) {
        while let Some(req) = self.queue.front().cloned() {
            if !self.is_shown(&req) {
                self.show(&req);
            }
            if !self.step(&req) {
                return;
            }
        }
    }

    fn step(&mut self, req: &Arc<ConfirmationRequest>) -> bool {
        enum Next {
            Auto(bool),
            Script(String),
            Line(String),
            Closed,
        }
        let next = match &mut self.answers {
            Answers::Auto(approve) => Next::Auto(*approve),
            Answers::Script(lines) => {
                Next::Script(lines.pop_front().unwrap_or_else(|| "d the script has no more answers".into()))
            }
            Answers::Interactive if self.keys => return false,
            Answers::Interactive => match self.lines.pop_front() {
                Some(line) => Next::Line(line),
                None if self.input_closed => Next::Closed,
                None => return false,
            },
        };
        match next {
            Next::Auto(true) => {
                say("  > approve (--auto)");
                self.respond(req, ConfirmationResponse::approve(req).with_responder("auto"), None);
            }
            Next::Auto(false) => {
                say("  > deny (--auto)");
                let r = ConfirmationResponse::deny(req, Some("auto-denied by the demo".into())).with_responder("auto");
                self.respond(req, r, None);
            }
            Next::Script(line) => {
                say(&format!("  > {} (script)", esc(&line)));
                self.scripted(req, &line);
            }
            Next::Line(line) => {
                say(&format!("{}{}", self.label(), esc(&line)));
                self.submit(req, &line);
            }
            Next::Closed => {
                say("  (input closed: denying)");
                let r = ConfirmationResponse::deny(req, Some("the terminal was closed".into()))
                    .with_responder("input-closed");
                self.respond(req, r, None);
            }
        }
        true
    }

    fn scripted(&mut self, req: &Arc<ConfirmationRequest>, line: &str) {
        let resp = match parse_answer(line) {
            (Some('a'), None) => Some(ConfirmationResponse::approve(req)),
            (Some('s'), None) => Some(ConfirmationResponse::approve(req).with_scope(Scope::Session)),
            (Some('d'), reason) => Some(ConfirmationResponse::deny(req, reason)),
            (Some('e'), Some(text)) => {
                serde_json::from_str(&text).ok().map(|v| ConfirmationResponse::approve(req).with_arguments(v))
            }
            _ => None,
        };
        match resp {
            Some(r) => self.respond(req, r.with_responder("script"), None),
            None => {
                say("    please answer a, s, d or e: denying");
                let r = ConfirmationResponse::deny(req, Some("unrecognised scripted answer".into()))
                    .with_responder("script");
                self.respond(req, r, None);
            }
        }
    }

    fn key(&mut self, k: Key) {
        if k == Key::CtrlC {
            return self.interrupt(130);
        }
        // Keys count only for a request on screen: nothing typed ahead can answer a request
        // the person has not seen.
        let Some(req) = self.current() else { return };
        if !matches!(self.answers, Answers::Interactive) {
            return;
        }
        match k {
            Key::Enter => {
                let line = self.editor.take();
                say(&format!("{}{}", self.label(), esc(&line)));
                self.submit(&req, &line);
            }
            Key::Esc if self.stage != Stage::Choose => {
                self.stage = Stage::Choose;
                self.editor.set("");
                say("    (back)");
            }
            Key::Esc => self.editor.set(""),
            k => self.editor.key(k),
        }
    }

    fn label(&self) -> String {
        match self.stage {
            Stage::Choose => "  > ",
            Stage::Reason => "    reason > ",
            Stage::Edit => "    arguments > ",
        }
        .to_owned()
    }

    /// One line typed by the person, for the stage the prompt is in.
    fn submit(&mut self, req: &Arc<ConfirmationRequest>, line: &str) {
        match self.stage {
            Stage::Choose => match parse_answer(line) {
                (Some('a'), None) => {
                    self.respond(req, ConfirmationResponse::approve(req).with_responder("terminal"), None)
                }
                (Some('s'), None) => {
                    let r = ConfirmationResponse::approve(req).with_scope(Scope::Session).with_responder("terminal");
                    self.respond(req, r, None);
                }
                (Some('d'), Some(reason)) => {
                    self.respond(req, ConfirmationResponse::deny(req, Some(reason)).with_responder("terminal"), None)
                }
                (Some('d'), None) => {
                    self.stage = Stage::Reason;
                    let back = if self.keys { "; Esc goes back" } else { "" };
                    say(&format!("    reason for the model (optional; Enter alone denies without one{back}):"));
                }
                (Some('e'), _) if !req.editable => {
                    say(&format!("    `{}` does not allow edits: answer a, s or d", req.tool))
                }
                (Some('e'), Some(text)) => self.edit(req, &text),
                (Some('e'), None) => {
                    self.stage = Stage::Edit;
                    if self.keys {
                        self.editor.set(&editable_json(&req.arguments.value()));
                        say("    edit the arguments (JSON), then Enter to approve them; Esc goes back:");
                    } else {
                        say("    new arguments as JSON (an empty line keeps them as they are):");
                    }
                }
                _ => say(&format!("    please answer a, s, d{}", if req.editable { " or e" } else { "" })),
            },
            Stage::Reason => {
                let reason = Some(line.trim().to_owned()).filter(|s| !s.is_empty());
                self.respond(req, ConfirmationResponse::deny(req, reason).with_responder("terminal"), None);
            }
            Stage::Edit => self.edit(req, line),
        }
    }

    fn edit(&mut self, req: &Arc<ConfirmationRequest>, text: &str) {
        let text = text.trim();
        let parsed = if text.is_empty() { Ok(req.arguments.value()) } else { serde_json::from_str::<Value>(text) };
        match parsed {
            Err(e) => {
                say(&format!("    {}", paint("31", &format!("not JSON: {e}"))));
                self.retry_edit(text);
            }
            Ok(v) if v == req.arguments => {
                say("    (no change: approving the arguments as shown)");
                self.respond(req, ConfirmationResponse::approve(req).with_responder("terminal"), None);
            }
            Ok(v) => {
                let r = ConfirmationResponse::approve(req).with_arguments(v).with_responder("terminal");
                self.respond(req, r, Some(text.to_owned()));
            }
        }
    }

    /// After a failed edit: in a terminal the text stays in the editor to be fixed; from a pipe
    /// the prompt goes back to a/s/d/e.
    fn retry_edit(&mut self, text: &str) {
        if self.keys {
            self.stage = Stage::Edit;
            self.editor.set(text);
        } else {
            self.stage = Stage::Choose;
        }
    }

    /// Sends a response. `edit_text`: the edit as typed, to offer again if it is rejected.
    fn respond(&mut self, req: &Arc<ConfirmationRequest>, resp: ConfirmationResponse, edit_text: Option<String>) {
        let (decision, scope, reason, edited) =
            (resp.decision, resp.scope, resp.reason.clone(), resp.arguments.clone());
        match self.gate.respond(resp) {
            Ok(_) => {
                self.remove(req);
                let text = match (decision, edited) {
                    (ResponseDecision::Approve, Some(new)) => {
                        let mut t = paint("1;32", "✓ approved with your edit:");
                        for (k, old, new) in diff(&req.arguments.value(), &new) {
                            t.push_str(&format!("\n      {k}: {} → {}", paint("31", &old), paint("32", &new)));
                        }
                        t
                    }
                    (ResponseDecision::Approve, None) if scope == Scope::Session => paint(
                        "1;32",
                        &format!("✓ approved for this session: later `{}` calls in it run without asking", req.tool),
                    ),
                    (ResponseDecision::Approve, None) => paint("1;32", "✓ approved (this call only)"),
                    (ResponseDecision::Deny, _) => match reason {
                        Some(r) => format!("{}; the model is told: \"{}\"", paint("1;31", "✗ denied"), esc(&r)),
                        None => format!("{} (no reason given)", paint("1;31", "✗ denied")),
                    },
                };
                say(&format!("  {text}"));
            }
            Err(e) if matches!(e.kind(), ErrorKind::InvalidArguments | ErrorKind::EditsNotAllowed) => {
                // The request is unchanged: ask again.
                say(&format!("    {}", paint("31", &format!("rejected: {e}"))));
                match edit_text {
                    Some(t) => self.retry_edit(&t),
                    None => self.stage = Stage::Choose,
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Expired
                        | ErrorKind::AlreadyResolved
                        | ErrorKind::NotPending
                        | ErrorKind::UnknownRequest
                        | ErrorKind::Closed
                ) =>
            {
                // The request is gone: withdraw it; the answer is not carried over to another.
                self.withdraw(req, &format!("too late ({e}); your answer was not used"));
            }
            Err(e) => {
                say(&format!("    {}", paint("31", &e.to_string())));
                self.stage = Stage::Choose;
            }
        }
    }

    fn show(&mut self, req: &Arc<ConfirmationRequest>) {
        self.shown = Some(req.clone());
        self.stage = Stage::Choose;
        self.editor.set("");
        let bar = |s: &str| paint("36", s);
        let mut t = format!("\n  {}", bar("┌─ approval needed ─────────────────────────────────────────"));
        let mut line = |s: String| t.push_str(&format!("\n  {} {s}", bar("│")));
        line(format!("tool:         {}", paint("1", &esc(&req.tool))));
        line(format!("what it does: {}", esc(&req.description)));
        line(req.prompt.to_string());
        line(format!("why asked:    {}", paint("33", &esc(&req.reasons.join("; ")))));
        for l in req.display_arguments().lines() {
            line(format!("  {l}"));
        }
        let secs = ms_left(req).div_ceil(1000);
        if screen().live && matches!(self.answers, Answers::Interactive) {
            line(format!("no answer by {} means no (time left is counted down below)", clock(req.deadline_ms)));
        } else {
            line(format!("answer within {secs} s (by {}); no answer means no", clock(req.deadline_ms)));
        }
        let edit = if req.editable { ", [e]dit arguments" } else { "" };
        t.push_str(&format!("\n  {} [a]pprove, approve for the [s]ession, [d]eny{edit}", bar("└─")));
        say(&t);
    }

    /// The live line: time left, the prompt, and what is being typed.
    fn draw(&mut self) {
        let Some(req) = self.current().filter(|_| screen().live && matches!(self.answers, Answers::Interactive)) else {
            return screen().set_live(None);
        };
        let secs = ms_left(&req).div_ceil(1000);
        let countdown = format!("{}:{:02} left", secs / 60, secs % 60);
        let colour = match secs {
            31.. => "32",
            11..=30 => "33",
            _ => "1;31",
        };
        let waiting = match self.queue.len() {
            0 | 1 => String::new(),
            n => format!(" (+{} waiting)", n - 1),
        };
        let prompt = match self.stage {
            Stage::Choose => "> ",
            Stage::Reason => "reason > ",
            Stage::Edit => "arguments > ",
        };
        let prefix_width = format!("  {countdown}{waiting} {prompt}").chars().count();
        let room = term::columns().saturating_sub(prefix_width + 1);
        let (typed, cursor) = if self.keys { self.editor.view(room) } else { (String::new(), 0) };
        let text = format!("  {}{waiting} {prompt}{typed}", paint(colour, &countdown));
        let width = prefix_width + typed.chars().count();
        screen().set_live(Some(Live { text, width, cursor: prefix_width + cursor }));
    }
}

// ---------------------------------------------------------------------------------------------
// The closing summary
// ---------------------------------------------------------------------------------------------

fn who(responder: Option<&str>) -> String {
    match responder {
        Some("terminal") => "you".into(),
        Some("auto") => "--auto".into(),
        Some("script") => "the script".into(),
        Some("input-closed") => "the demo (input closed)".into(),
        Some(other) => esc(other),
        None => "someone".into(),
    }
}

fn target(args: &Value) -> String {
    if let Some(p) = args.get("path").and_then(Value::as_str) {
        esc(p)
    } else if let Some(to) = args.get("to").and_then(Value::as_str) {
        format!("to {}", esc(to))
    } else {
        esc_json(args)
    }
}

/// How the demo was stopped, from its exit status.
fn stop_name(code: i32) -> &'static str {
    match code {
        130 => "Ctrl-C",
        129 => "SIGHUP",
        143 => "SIGTERM",
        _ => "a signal",
    }
}

/// The closing summary: what ran (on whose say-so), what was denied and why, what timed out or
/// was cancelled, the session's grants, and the files left. `stopped`: how the run was cut short.
fn summary(log: &[Entry], stopped: Option<&str>, gate: &Gate, files: &Files) {
    let mut groups: [(&str, Vec<String>); 5] =
        [("ran", vec![]), ("denied", vec![]), ("timed out", vec![]), ("cancelled", vec![]), ("refused", vec![])];
    for e in log {
        let r = &e.result;
        let ran_with = r.arguments.as_ref().unwrap_or(&e.asked);
        let (group, detail) = match (&r.status, &r.decision) {
            (
                ToolStatus::Executed | ToolStatus::Failed,
                Some(Decision::Approved { by, scope, edited, responder, .. }),
            ) => {
                let mut d = match by {
                    ApprovedBy::NotGated => "no approval needed".to_owned(),
                    ApprovedBy::SessionGrant => "covered by the session grant, not asked".to_owned(),
                    ApprovedBy::GatingDisabled => "gating disabled".to_owned(),
                    ApprovedBy::Person if *edited => {
                        let changes: Vec<String> =
                            diff(&e.asked, ran_with).into_iter().map(|(k, o, n)| format!("{k} {o} → {n}")).collect();
                        format!("approved by {} after an edit: {}", who(responder.as_deref()), changes.join(", "))
                    }
                    ApprovedBy::Person if *scope == Scope::Session => {
                        format!("approved by {} for the session", who(responder.as_deref()))
                    }
                    ApprovedBy::Person => format!("approved by {}", who(responder.as_deref())),
                };
                if r.status == ToolStatus::Failed {
                    d.push_str(&format!("; the tool failed: {}", esc(r.error.as_deref().unwrap_or("?"))));
                }
                (0, d)
            }
            (ToolStatus::Executed | ToolStatus::Failed, _) => (0, String::new()),
            (_, Some(Decision::Denied { reason, responder, .. })) => {
                let by = who(responder.as_deref());
                match reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
                    Some(why) => (1, format!("denied by {by}: \"{}\"", esc(why))),
                    None => (1, format!("denied by {by}, no reason given")),
                }
            }
            (_, Some(Decision::TimedOut { timeout_ms, .. })) => {
                (2, format!("nobody answered within {} s; it did not run", timeout_ms.div_ceil(1000)))
            }
            (_, Some(Decision::Cancelled { reason, .. })) => {
                if let (Some(by), CancelReason::Aborted) = (stopped, reason) {
                    (3, format!("stopped by {by}; it did not run"))
                } else {
                    (3, format!("cancelled ({}); it did not run", reason.as_str()))
                }
            }
            _ => (4, esc(r.error.as_deref().unwrap_or("refused before anyone was asked"))),
        };
        let what = format!("{} {}", r.tool, target(ran_with));
        groups[group].1.push(if detail.is_empty() { what } else { format!("{what}  ({detail})") });
    }
    let mut t = format!("\n{}", paint("1", "── summary ───────────────────────────────────────────────────"));
    for (name, items) in &groups {
        if items.is_empty() {
            continue;
        }
        t.push_str(&format!("\n  {}", paint("1", &format!("{name} ({}):", items.len()))));
        for i in items {
            t.push_str(&format!("\n    {i}"));
        }
    }
    let grants = gate.grants(SESSION);
    if grants.is_empty() {
        t.push_str("\n  session grants: none");
    } else {
        t.push_str(&format!(
            "\n  session grants: {} (later calls of it in {SESSION} run without asking, until the session ends)",
            grants.join(", ")
        ));
    }
    let left: Vec<String> = lock(files).keys().cloned().collect();
    t.push_str(&format!("\n  files left: {}", left.join(", ")));
    if let Some(by) = stopped {
        t.push_str(&format!("\n  {}", paint("33", &format!("stopped early by {by}"))));
    }
    say(&t);
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

struct Options {
    answers: Answers,
    timeout: Duration,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut answers = None;
    let mut timeout = Duration::from_secs_f64(DEFAULT_TIMEOUT_S);
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{a} needs {what}"));
        let set = match a.as_str() {
            "--auto" => match value("approve or deny")?.as_str() {
                "approve" => Answers::Auto(true),
                "deny" => Answers::Auto(false),
                other => return Err(format!("--auto takes approve or deny, not {other:?}")),
            },
            "--script" => {
                let file = value("a file")?;
                let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {file}: {e}"))?;
                let lines = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
                Answers::Script(lines.map(String::from).collect())
            }
            "--timeout" => {
                let v = value("a number of seconds")?;
                match v.parse::<f64>() {
                    Ok(s) if s > 0.0 && s <= 86_400.0 => timeout = Duration::from_secs_f64(s),
                    _ => return Err(format!("--timeout takes a number of seconds (at most a day), not {v:?}")),
                }
                continue;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        };
        if answers.replace(set).is_some() {
            return Err("give at most one of --auto and --script".into());
        }
    }
    Ok(Options { answers: answers.unwrap_or(Answers::Interactive), timeout })
}

fn main() {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(o) => o,
        // Asked for: the usage on stdout, and success.
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("demo: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // Before any thread starts, so that every thread inherits the blocked set.
    let signals = term::block_signals();
    let term_ok = std::env::var_os("TERM").is_none_or(|t| t != "dumb");
    let live = std::io::stdout().is_terminal() && term_ok;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let _ = SCREEN.set(Screen { live, color: live && !no_color, drawn: Mutex::default() });
    let keys = live && std::io::stdin().is_terminal() && term::take_keys();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        term::restore();
        hook(info);
    }));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let code = rt.block_on(run(opts, signals, keys));
    exit(code);
}

async fn run(opts: Options, signals: term::Signals, keys: bool) -> i32 {
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
    let gate = Gate::builder().default_timeout(opts.timeout).build().expect("gate");
    for t in tools(&files) {
        gate.register(t).expect("tool");
    }

    // The host app: forward the bus to the approver's thread, with input and signals.
    let (tx, rx) = mpsc::channel();
    let mut events = gate.subscribe();
    let bus = tx.clone();
    tokio::spawn(async move {
        while let Some(item) = events.recv().await {
            let msgs = match item {
                Ok(Event::ConfirmationRequest(req)) => vec![Msg::Request(req)],
                Ok(Event::ConfirmationResolved(r)) => vec![Msg::Resolved(r)],
                Ok(_) => vec![],
                Err(lagged) => lagged.pending.into_iter().map(Msg::Request).collect(),
            };
            for m in msgs {
                let _ = bus.send(m);
            }
        }
    });
    let interactive = matches!(opts.answers, Answers::Interactive);
    if keys {
        let input = tx.clone();
        std::thread::spawn(move || {
            let mut carry = Vec::new();
            let mut buf = [0u8; 256];
            loop {
                let n = match std::io::stdin().lock().read(&mut buf) {
                    Ok(0) | Err(_) => return drop(input.send(Msg::InputClosed)),
                    Ok(n) => n,
                };
                for k in decode_keys(&buf[..n], &mut carry) {
                    if input.send(Msg::Key(k)).is_err() {
                        return;
                    }
                }
            }
        });
    } else if interactive {
        let input = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().split(b'\n') {
                let Ok(line) = line else { break };
                if input.send(Msg::Line(String::from_utf8_lossy(&line).trim().to_owned())).is_err() {
                    return;
                }
            }
            let _ = input.send(Msg::InputClosed);
        });
    }
    let sig = tx.clone();
    std::thread::spawn(move || {
        while let Some(s) = signals.wait() {
            if sig.send(Msg::Signal(128 + s)).is_err() {
                exit(128 + s);
            }
        }
    });
    let stop = Arc::new(AtomicI32::new(0));
    let approver = Approver {
        gate: gate.clone(),
        answers: opts.answers,
        keys,
        stop: stop.clone(),
        queue: VecDeque::new(),
        shown: None,
        stage: Stage::Choose,
        editor: Editor::default(),
        lines: VecDeque::new(),
        input_closed: false,
    };
    std::thread::spawn(move || approver.run(rx));

    say(&paint("1", "signoff demo: a scripted agent works on your notes; you decide what runs."));
    if interactive {
        let secs = opts.timeout.as_secs_f64();
        say(&format!(
            "Each request waits {secs} s; no answer means no. Answer with a (approve), s (approve for the session), \
             d (deny) or e (edit), then Enter.{}",
            if keys { " Ctrl-C stops." } else { "" }
        ));
    }
    let mut agent = Agent { gate: gate.clone(), approver: tx.clone(), stop: stop.clone(), next_id: 0, log: Vec::new() };
    model(&mut agent).await;

    let (ack, done) = mpsc::channel();
    if tx.send(Msg::Finished(ack)).is_ok() {
        let _ = done.recv_timeout(Duration::from_secs(2));
    }
    let code = stop.load(Ordering::SeqCst);
    summary(&agent.log, (code != 0).then(|| stop_name(code)), &gate, &files);
    gate.close();
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode_across_reads() {
        let mut carry = Vec::new();
        assert_eq!(
            decode_keys(b"a\x1b[D\x1b[3~\r\n", &mut carry),
            [Key::Char('a'), Key::Left, Key::Delete, Key::Enter]
        );
        // "é" split over two reads, then a lone ESC (the Esc key) and Ctrl-C.
        assert_eq!(decode_keys(&[0xc3], &mut carry), []);
        assert_eq!(decode_keys(&[0xa9], &mut carry), [Key::Char('é')]);
        assert_eq!(decode_keys(b"\x1b", &mut carry), [Key::Esc]);
        assert_eq!(decode_keys(b"\x03", &mut carry), [Key::CtrlC]);
    }

    #[test]
    fn editor_edits_and_scrolls() {
        let mut e = Editor::default();
        e.set(r#"{"path":"/notes/old-draft.txt"}"#);
        for k in [Key::Home, Key::Right, Key::KillToEnd] {
            e.key(k);
        }
        assert_eq!(e.buf.iter().collect::<String>(), "{");
        e.set(&"x".repeat(30));
        let (shown, cursor) = e.view(10);
        assert_eq!((shown.chars().count(), cursor), (8, 8));
        assert!(shown.starts_with('…'));
        e.key(Key::Home);
        let (shown, cursor) = e.view(10);
        assert_eq!((shown.chars().count(), cursor), (10, 0));
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn answers_diffs_and_options() {
        assert_eq!(parse_answer(" d not now "), (Some('d'), Some("not now".into())));
        assert_eq!(parse_answer("approve"), (Some('a'), None));
        assert_eq!(parse_answer("abc"), (None, None));
        let d = diff(&json!({"path": "/a", "keep": 1}), &json!({"path": "/b", "keep": 1, "new": true}));
        assert_eq!(
            d,
            [("new".into(), "(absent)".into(), "true".into()), ("path".into(), "\"/a\"".into(), "\"/b\"".into())]
        );
        assert_eq!(editable_json(&json!({"p": "a\u{202e}b"})), r#"{"p":"a\u202eb"}"#);
        let args = |a: &[&str]| parse_args(a.iter().map(|s| s.to_string()));
        assert_eq!(args(&["--timeout", "2", "--auto", "deny"]).unwrap().timeout, Duration::from_secs(2));
        assert!(args(&["--timeout", "0"]).is_err());
        assert!(args(&["--auto", "approve", "--auto", "deny"]).err().is_some_and(|e| e.contains("at most one")));
    }
}
