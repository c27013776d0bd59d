//! `signoff mcp-proxy`: its command line and configuration errors. The proxy itself is tested
//! against real MCP servers and clients by mcp/test.sh.

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
    let cases: [(&[&str], &str); 10] = [
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
    ];
    for (args, expected) in cases {
        let out = signoff(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
