//! `signoff mcp-proxy`: its command line, configuration errors, and how it stops. The proxy itself
//! is tested against real MCP servers and clients by mcp/test.sh.

use std::process::{Command, Output};

fn signoff(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_signoff")).args(args).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_goes_to_stderr_and_stdout_stays_clean() {
    let out = signoff(&["mcp-proxy", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("usage: signoff mcp-proxy"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "stdout carries only MCP");
    let out = signoff(&["--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("mcp-proxy"));
}

#[test]
fn usage_and_configuration_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let typo = write("typo.json", r#"{"upstreams": [{"name": "fs", "command": "x", "arg": []}]}"#);
    let empty = write("empty.json", r#"{"upstreams": []}"#);
    let missing = write("missing.json", r#"{"upstreams": [{"name": "fs", "command": "/nonexistent/server"}]}"#);
    let both =
        write("both.json", r#"{"upstreams": [{"name": "fs", "command": "x", "url": "http://127.0.0.1:1/mcp"}]}"#);
    // A repeated key is refused, never "the last one wins" (here: approval turned off).
    let twice = write(
        "twice.json",
        r#"{"upstreams": [{"name": "fs", "command": "x"}],
            "tools": {"fs__write_file": {"approval": "required"}, "fs__write_file": {"approval": "not_required"}}}"#,
    );
    let cases: [(&[&str], &str); 11] = [
        (&["mcp-proxy"], "--config is required"),
        (&["mcp-proxy", "--config"], "--config needs a value"),
        (&["mcp-proxy", "--config", &both], "not both"),
        (&["mcp-proxy", "--config", &missing, "--http"], "--http needs a value"),
        (&["mcp-proxy", "--config", &missing, "--http", "0.0.0.0:0"], "refusing to listen on 0.0.0.0:0"),
        (&["mcp-proxy", "--config", &missing, "--http", "nowhere"], "give an IP address and a port"),
        (&["mcp-proxy", "--bogus"], "unknown argument"),
        (&["mcp-proxy", "--config", &typo], "unknown field `arg`"),
        (&["mcp-proxy", "--config", &empty], "nothing to proxy"),
        (&["mcp-proxy", "--config", &missing], "cannot start"),
        (&["mcp-proxy", "--config", &twice], "twice.json is not acceptable JSON: duplicate key \"fs__write_file\""),
    ];
    for (args, expected) in cases {
        let out = signoff(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// How the proxy stops on a signal (unix: `kill`).
#[cfg(unix)]
mod signals {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, Stdio};
    use std::time::{Duration, Instant};

    /// An MCP server for the proxy to start, answering `initialize` and `tools/list`, with two
    /// tools: `write` (no annotations, so calls ask first; a call never reaches it here) and
    /// `slow` (read-only, so calls run at once), which answers after 2 s.
    const UPSTREAM: &str = r#"
while IFS= read -r line; do
  id=
  [[ $line =~ \"id\":([0-9]+) ]] && id=${BASH_REMATCH[1]}
  case $line in
    *'"method":"initialize"'*)
      echo '{"jsonrpc":"2.0","id":'$id',"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"upstream","version":"1"}}}' ;;
    *'"method":"tools/list"'*)
      echo '{"jsonrpc":"2.0","id":'$id',"result":{"tools":[{"name":"write","description":"Writes","inputSchema":{"type":"object"}},{"name":"slow","description":"Reads slowly","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}' ;;
    *'"method":"tools/call"'*'"name":"slow"'*)
      sleep 2
      echo '{"jsonrpc":"2.0","id":'$id',"result":{"content":[{"type":"text","text":"read"}]}}' ;;
    *'"method":"tools/call"'*)
      echo '{"jsonrpc":"2.0","id":'$id',"result":{"content":[{"type":"text","text":"written"}]}}' ;;
    *'"id":'*)
      echo '{"jsonrpc":"2.0","id":'$id',"result":{}}' ;;
  esac
done
"#;

    /// The process, killed if the test ends before it does.
    struct Running(Child);

    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Sends `signal` (e.g. "TERM") to the process and waits for it to end.
    fn stop(child: &mut Child, signal: &str) -> std::process::ExitStatus {
        let sent = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
        assert!(sent.success());
        wait(child, signal)
    }

    /// Waits up to 10 s for the process to end.
    fn wait(child: &mut Child, cause: &str) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "still running 10 s after {cause}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The stdio proxy in `dir` over [`UPSTREAM`] with an audit log and a console, initialized by
    /// a client that cannot be asked (no elicitation): the process, its stdin, the lines it
    /// writes, and the log's path.
    fn initialized_proxy(
        dir: &std::path::Path,
    ) -> (Running, std::process::ChildStdin, std::sync::mpsc::Receiver<String>, std::path::PathBuf) {
        let p = proxy_with(dir, serde_json::json!({"console": {}}));
        (p.child, p.stdin, p.out, p.log)
    }

    /// A started proxy: its stdout's lines, its stderr's lines (also copied to the test's).
    struct Proxy {
        child: Running,
        stdin: std::process::ChildStdin,
        out: std::sync::mpsc::Receiver<String>,
        err: std::sync::mpsc::Receiver<String>,
        log: std::path::PathBuf,
    }

    /// Each line `from` gives, sent on a channel by a thread of its own.
    fn lines(from: impl std::io::Read + Send + 'static, echo: bool) -> std::sync::mpsc::Receiver<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines() {
                let Ok(line) = line else { break };
                if echo {
                    eprintln!("{line}");
                }
                // Drained to the end even when nobody reads on: the proxy never writes to a
                // closed pipe.
                let _ = tx.send(line);
            }
        });
        rx
    }

    /// The line of `rx` (within 20 s) containing `needle`; panics when it ends first.
    fn line_with(rx: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
        loop {
            let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|e| panic!("no {needle:?}: {e}"));
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Writes the configuration (over [`UPSTREAM`], with an audit log, and `extra`'s keys) in
    /// `dir` and starts the proxy on it, not yet initialized.
    fn start_proxy(dir: &std::path::Path, extra: serde_json::Value) -> Proxy {
        start_proxy_over(dir, extra, UPSTREAM)
    }

    /// [`start_proxy`] over another upstream script.
    fn start_proxy_over(dir: &std::path::Path, extra: serde_json::Value, script: &str) -> Proxy {
        let upstream = dir.join("upstream.sh");
        std::fs::write(&upstream, script).unwrap();
        let log = dir.join("audit.jsonl");
        let config = dir.join("proxy.json");
        let mut json = serde_json::json!({
            // Its `slow` says it only reads, which these tests take as a fact.
            "upstreams": [{"name": "fs", "command": "bash", "args": [upstream], "trust_annotations": true}],
            "gate": {"audit_path": log},
        });
        json.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        std::fs::write(&config, json.to_string()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_signoff"))
            .args(["mcp-proxy", "--config"])
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdin, stdout, err) = (child.stdin.take().unwrap(), child.stdout.take().unwrap(), child.stderr.take());
        Proxy { child: Running(child), stdin, out: lines(stdout, false), err: lines(err.unwrap(), true), log }
    }

    /// [`start_proxy`], then initialized by a client that cannot be asked (no elicitation).
    fn proxy_with(dir: &std::path::Path, extra: serde_json::Value) -> Proxy {
        initialize(start_proxy(dir, extra))
    }

    /// Initializes a started proxy as a client that cannot be asked (no elicitation).
    fn initialize(mut p: Proxy) -> Proxy {
        send(
            &mut p.stdin,
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
        );
        assert!(answer(&p.out, 1)["result"]["serverInfo"].is_object());
        send(&mut p.stdin, serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        p
    }

    /// Calls `fs__write` as request `id`; the text the model reads.
    fn call_write(p: &mut Proxy, id: u64) -> String {
        send(
            &mut p.stdin,
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "fs__write", "arguments": {"path": "notes.txt"}}}),
        );
        let call = answer(&p.out, id);
        assert_eq!(call["result"]["isError"], true, "{call}");
        call["result"]["content"][0]["text"].as_str().unwrap().to_owned()
    }

    /// A tool override that names no tool (a typo) is an error at start, with the name it most
    /// likely meant. It used to be a warning on stderr, which MCP clients do not show, while the
    /// tool it meant ran as if unconfigured (issue 42).
    #[test]
    fn a_tool_override_that_matches_no_tool_stops_the_start() {
        for (tools, expected) in [
            (
                serde_json::json!({"fs__wrte": {"approval": "required"}}),
                "\"fs__wrte\" names no tool an upstream offers (did you mean \"fs__write\"?)",
            ),
            (serde_json::json!({"fs__publish_everything": {"risk": 0}}), "\"fs\" offers: fs__slow, fs__write"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut p = start_proxy(dir.path(), serde_json::json!({"tools": tools}));
            let status = wait(&mut p.child.0, "a bad override");
            assert_eq!(status.code(), Some(2), "{status:?}");
            let said: Vec<String> = p.err.try_iter().collect();
            assert!(
                said.iter().any(|l| l.starts_with("signoff mcp-proxy: tools: ") && l.contains(expected)),
                "{said:?}"
            );
        }
    }

    /// Without a console, an approval URL or a shared store, nobody but a client that shows forms
    /// can approve: the start says so, and a call from a client that cannot be asked is refused
    /// at once, told why and audited, instead of "pending elsewhere" for ever (issue 42).
    #[test]
    fn with_nowhere_to_approve_the_start_says_so_and_the_call_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = proxy_with(dir.path(), serde_json::json!({}));
        let warning = line_with(&p.err, "warning");
        assert!(warning.contains("no \"console\"") && warning.contains("are refused"), "{warning}");
        let text = call_write(&mut p, 2);
        assert!(text.contains("did not run") && text.contains("no approval console configured"), "{text}");
        assert!(text.contains("Do not retry") && !text.contains("pending"), "{text}");
        drop(p.stdin);
        assert_eq!(wait(&mut p.child.0, "stdin closed").code(), Some(0));
        let log = std::fs::read_to_string(&p.log).unwrap();
        let records: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(records.iter().any(|r| r["decision"] == "call-refused" && r["tool"] == "fs__write"), "{log}");
        assert!(!records.iter().any(|r| r["kind"] == "request"), "nothing waits: {log}");
    }

    /// A start pins in the audit only the definitions that are new or changed since the log
    /// last recorded them: a restart used to add one `definition-pinned` notice per tool
    /// (98 of 126 records in a short trial; issue 42).
    #[test]
    fn a_restart_pins_only_new_or_changed_definitions() {
        let dir = tempfile::tempdir().unwrap();
        let pins = |p: Proxy| {
            drop(p.stdin);
            let mut child = p.child;
            assert_eq!(wait(&mut child.0, "stdin closed").code(), Some(0));
            let log = std::fs::read_to_string(&p.log).unwrap();
            let records: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let mut tools: Vec<String> = records
                .iter()
                .filter(|r| r["decision"] == "definition-pinned")
                .map(|r| r["tool"].as_str().unwrap().to_owned())
                .collect();
            tools.sort();
            tools
        };
        let console = serde_json::json!({"console": {}});
        assert_eq!(pins(proxy_with(dir.path(), console.clone())), ["fs__slow", "fs__write"]);
        assert_eq!(pins(proxy_with(dir.path(), console.clone())), ["fs__slow", "fs__write"], "nothing new");
        // The upstream's `write` describes itself otherwise now: pinned again, `slow` not.
        let changed = UPSTREAM.replace(r#""description":"Writes""#, r#""description":"Writes files""#);
        let p = start_proxy_over(dir.path(), console, &changed);
        let mut p = initialize(p);
        send(&mut p.stdin, serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        assert!(answer(&p.out, 2).to_string().contains("Writes files"));
        assert_eq!(pins(p), ["fs__slow", "fs__write", "fs__write"]);
        let out = signoff(&["audit", "verify", dir.path().join("audit.jsonl").to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }

    /// With a console, the model reads where the request is approved: the console's URL for it.
    /// Two proxies with the same configuration (two editor windows) both start: the second's
    /// console takes a free port and says which, and its model is sent there (issue 42).
    #[test]
    fn the_model_is_told_the_console_url_and_a_second_proxy_takes_a_free_port() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let console = serde_json::json!({"console": {"bind": format!("127.0.0.1:{port}")}});
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut first = proxy_with(one.path(), console.clone());
        let at = line_with(&first.err, "approval console at");
        assert!(at.ends_with(&format!("http://127.0.0.1:{port}/")), "{at}");
        let mut second = proxy_with(two.path(), console);
        let moved = line_with(&second.err, "is in use");
        let url = moved.split(" is at ").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_owned();
        assert!(url.starts_with("http://127.0.0.1:") && !url.contains(&format!(":{port}/")), "{moved}");
        for (p, page) in [(&mut first, format!("http://127.0.0.1:{port}/")), (&mut second, url)] {
            let text = call_write(p, 2);
            let id = text.split("(request ").nth(1).and_then(|r| r.split(')').next()).unwrap().to_owned();
            assert!(text.contains(&format!("on the signoff console: {page}#request-{id}")), "{text}");
        }
    }

    fn send(stdin: &mut std::process::ChildStdin, v: serde_json::Value) {
        writeln!(stdin, "{v}").unwrap();
    }

    /// The proxy's answer to request `id` (within 20 s).
    fn answer(rx: &std::sync::mpsc::Receiver<String>, id: u64) -> serde_json::Value {
        loop {
            let line = rx.recv_timeout(Duration::from_secs(20)).expect("an answer from the proxy");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// SIGTERM or SIGINT to the stdio proxy while a call waits for approval elsewhere: the gate is
    /// closed (the call cancelled as `shutdown`), every audit record is written, and it exits 0,
    /// as when the client closes stdin. The signals used to end it at once, with records still
    /// queued for the log's writer.
    #[test]
    fn a_signal_stops_the_stdio_proxy_with_its_audit_log_written() {
        for ending in ["TERM", "INT", "EOF"] {
            let dir = tempfile::tempdir().unwrap();
            // The call is left pending elsewhere (the client cannot be asked).
            let (mut proxy, mut stdin, rx, log) = initialized_proxy(dir.path());
            send(
                &mut stdin,
                serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "fs__write", "arguments": {"path": "notes.txt"}}}),
            );
            let call = answer(&rx, 2);
            assert_eq!(call["result"]["isError"], true, "{call}");
            assert!(call.to_string().contains("pending"), "{call}");

            let status = match ending {
                // The client goes away: as before, it ends the same way.
                "EOF" => {
                    drop(stdin);
                    wait(&mut proxy.0, "stdin closed")
                }
                signal => stop(&mut proxy.0, signal),
            };
            assert_eq!(status.code(), Some(0), "{ending}: {status:?}");
            let text = std::fs::read_to_string(&log).unwrap();
            let records: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            assert!(records.iter().any(|r| r["kind"] == "request" && r["tool"] == "fs__write"), "{text}");
            assert!(
                records
                    .iter()
                    .any(|r| r["kind"] == "outcome" && r["decision"] == "cancelled" && r["reason"] == "shutdown"),
                "the call's cancellation is in the log: {text}"
            );
            let out = signoff(&["audit", "verify", log.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        }
    }

    /// SIGTERM while a tool runs (a call that needed no approval, forwarded to the upstream): the
    /// proxy waits for the run to end (up to 10 s) and its `execution` record is in the log. The
    /// client is gone with the proxy, so the upstream is told the call was cancelled, and the
    /// record says whether the tool ran is unknown. The proxy used to exit at once, the run
    /// dropped and never recorded.
    #[test]
    fn a_signal_lets_a_running_tool_finish_and_records_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut proxy, mut stdin, _rx, log) = initialized_proxy(dir.path());
        send(
            &mut stdin,
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "fs__slow", "arguments": {}}}),
        );
        // The call is at the upstream (which answers after 2 s) when the signal comes.
        std::thread::sleep(Duration::from_millis(700));
        let status = stop(&mut proxy.0, "TERM");
        assert_eq!(status.code(), Some(0), "{status:?}");
        let text = std::fs::read_to_string(&log).unwrap();
        let records: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let ran: Vec<_> = records.iter().filter(|r| r["kind"] == "execution" && r["tool"] == "fs__slow").collect();
        assert_eq!(ran.len(), 1, "the running call's execution is in the log: {text}");
        assert!(
            ran[0]["decision"] == "ok" || ran[0]["reason"].as_str().is_some_and(|r| r.contains("unknown")),
            "{text}"
        );
        let out = signoff(&["audit", "verify", log.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    }
}
