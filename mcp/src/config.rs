//! The proxy's configuration: upstream servers, per-tool overrides, and the gate's own options.
//!
//! ```json
//! {
//!   "upstreams": [
//!     {"name": "fs", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"],
//!      "call_timeout_ms": 60000}
//!   ],
//!   "tools": {
//!     "fs__write_file": {"risk": 3, "timeout_ms": 60000},
//!     "fs__list_directory": {"approval": "required"}
//!   },
//!   "default_timeout_ms": 120000,
//!   "token_keys": "k1:<base64 secret>",
//!   "gate": {"audit_path": "audit.jsonl"}
//! }
//! ```
//!
//! An upstream is either a child process speaking MCP over stdio (`command`, `args`, `env`) or a
//! server reached over Streamable HTTP (`url`, `headers`):
//! `{"name": "remote", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ..."}}`.
//! The optional `http` section serves the proxy itself over Streamable HTTP ([`HttpConfig`]).
//! Either kind takes `call_timeout_ms`: how long an approved call waits for the server's answer
//! (default five minutes) before it is cancelled there and the client told its outcome is unknown.
//!
//! Tool keys are the namespaced names the client sees (`<server>__<tool>`). Unknown fields are
//! errors, so a typo never silently weakens a tool's gating. `gate` takes the core's
//! [`GateConfig`](signoff::GateConfig) options (snake_case), e.g. an audit file or a shared store;
//! `default_timeout_ms` and `token_keys` here take precedence over the same options there.

use crate::risk::Risk;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The separator between a server's name and its tool's name in the names the client sees.
pub const SEPARATOR: &str = "__";

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The upstream servers, each run as a child process speaking MCP over stdio.
    pub upstreams: Vec<UpstreamConfig>,
    /// Per-tool overrides, by namespaced name (`<server>__<tool>`).
    #[serde(default)]
    pub tools: BTreeMap<String, ToolOverride>,
    /// How long a request waits for a decision, in milliseconds (the gate's default otherwise).
    #[serde(default)]
    pub default_timeout_ms: Option<u64>,
    /// Token keys (`key_id:base64secret`, as everywhere in signoff). Without them the proxy makes a
    /// key for the life of the process (tokens and `requestState`s then die with it).
    #[serde(default)]
    pub token_keys: Option<String>,
    /// The core gate's options ([`GateConfig`](signoff::GateConfig), snake_case).
    #[serde(default)]
    pub gate: Option<Value>,
    /// Start a browser approval console on this gate (`signoff-console`'s options, snake_case:
    /// `bind`, `approver_keys`, `public_origin`, ...): clients that can open a URL are sent to it
    /// (URL-mode elicitation) instead of answering in a form.
    #[serde(default)]
    pub console: Option<Value>,
    /// An approval page elsewhere (e.g. `signoff console` on a shared store) that URL-mode
    /// elicitations point at; overrides the URL of `console`. `http` or `https`.
    #[serde(default)]
    pub approval_url: Option<String>,
    /// Serving the proxy over Streamable HTTP instead of stdio (`signoff mcp-proxy --http`).
    #[serde(default)]
    pub http: Option<HttpConfig>,
}

/// One upstream server: a child process (`command`, `args`, `env`) or a Streamable HTTP endpoint
/// (`url`, `headers`), exactly one of the two.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The namespace of its tools: letters, digits, `-` and single `_` (no `__`, not at the end).
    pub name: String,
    /// The program to run (it speaks MCP over its stdin and stdout).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The server's Streamable HTTP endpoint (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// Extra HTTP headers sent with every request to `url`, e.g. `Authorization`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long an approved call waits for this server's answer, in milliseconds (default
    /// [`DEFAULT_CALL_TIMEOUT_MS`], at most [`MAX_CALL_TIMEOUT_MS`]). Past it the server is sent
    /// `notifications/cancelled` for the call, and the client an error saying whether the tool
    /// ran is unknown.
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    /// Take this server's tool annotations (`readOnlyHint`, `destructiveHint`, `openWorldHint`)
    /// as facts (default false). Without it they are the server's claims: they may raise a
    /// tool's risk but never lower it below what its name says ([`Gating::decide`]).
    #[serde(default)]
    pub trust_annotations: bool,
}

/// How long an approved call waits for its upstream's answer unless configured
/// (`call_timeout_ms`): five minutes.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 300_000;

/// The longest `call_timeout_ms` accepted: a day.
pub const MAX_CALL_TIMEOUT_MS: u64 = 86_400_000;

/// How an upstream is reached, once its configuration is checked.
#[derive(Debug, Clone, Copy)]
pub enum UpstreamTransport<'a> {
    /// A child process speaking MCP over stdio.
    Command {
        /// The program.
        command: &'a str,
        /// Its arguments.
        args: &'a [String],
        /// Extra environment variables.
        env: &'a BTreeMap<String, String>,
    },
    /// A Streamable HTTP endpoint.
    Url {
        /// The endpoint.
        url: &'a str,
        /// Extra headers.
        headers: &'a BTreeMap<String, String>,
    },
}

impl UpstreamConfig {
    /// A child-process upstream.
    pub fn command(name: &str, command: &str, args: &[&str]) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            command: Some(command.into()),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        }
    }

    /// A Streamable HTTP upstream.
    pub fn url(name: &str, url: &str) -> UpstreamConfig {
        UpstreamConfig { name: name.into(), url: Some(url.into()), ..Default::default() }
    }

    /// How long an approved call waits for this server's answer (`call_timeout_ms`, or
    /// [`DEFAULT_CALL_TIMEOUT_MS`]).
    pub fn call_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.call_timeout_ms.unwrap_or(DEFAULT_CALL_TIMEOUT_MS))
    }

    /// Checks `call_timeout_ms`: more than zero, at most [`MAX_CALL_TIMEOUT_MS`].
    fn check_call_timeout(&self) -> Result<(), String> {
        match self.call_timeout_ms {
            Some(ms) if ms == 0 || ms > MAX_CALL_TIMEOUT_MS => Err(format!(
                "upstream {:?}: `call_timeout_ms` {ms}: give the milliseconds an approved call may wait for the \
                 server's answer, from 1 to {MAX_CALL_TIMEOUT_MS} (a day); the default is {DEFAULT_CALL_TIMEOUT_MS}",
                self.name
            )),
            _ => Ok(()),
        }
    }

    /// How it is reached; an error in the user's terms when the configuration says both or neither.
    pub fn transport(&self) -> Result<UpstreamTransport<'_>, String> {
        let name = &self.name;
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                Err(format!("upstream {name:?}: give either `command` (a child process) or `url` (HTTP), not both"))
            }
            (None, None) => Err(format!(
                "upstream {name:?}: give `command` (a child process speaking stdio) or `url` (a Streamable HTTP endpoint)"
            )),
            (Some(command), None) => {
                if command.is_empty() {
                    return Err(format!("upstream {name:?}: `command` is empty"));
                }
                if !self.headers.is_empty() {
                    return Err(format!("upstream {name:?}: `headers` apply to a `url` upstream only"));
                }
                Ok(UpstreamTransport::Command { command, args: &self.args, env: &self.env })
            }
            (None, Some(url)) => {
                let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
                if !matches!(scheme.as_deref(), Some("http" | "https")) {
                    return Err(format!("upstream {name:?}: `url` must start with http:// or https:// (got {url:?})"));
                }
                if !url.parse::<http::Uri>().is_ok_and(|u| u.host().is_some_and(|h| !h.is_empty())) {
                    return Err(format!("upstream {name:?}: `url` {url:?} is not a valid URL"));
                }
                if !self.args.is_empty() || !self.env.is_empty() {
                    return Err(format!("upstream {name:?}: `args` and `env` apply to a `command` upstream only"));
                }
                for (k, v) in &self.headers {
                    if http::HeaderName::try_from(k.as_str()).is_err()
                        || http::HeaderValue::try_from(v.as_str()).is_err()
                    {
                        return Err(format!("upstream {name:?}: header {k:?} is not a valid HTTP header"));
                    }
                }
                Ok(UpstreamTransport::Url { url, headers: &self.headers })
            }
        }
    }
}

/// Serving the proxy over Streamable HTTP (`"http": {...}`; `signoff mcp-proxy --http <addr>`
/// sets `listen`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The address to listen on, `host:port` (`127.0.0.1:8931`; port 0 picks a free one).
    /// Without it (and without `--http`) the proxy speaks stdio.
    #[serde(default)]
    pub listen: Option<String>,
    /// The endpoint's path (default `/mcp`).
    #[serde(default)]
    pub path: Option<String>,
    /// Allow listening on an address other machines can reach (default: loopback only).
    #[serde(default)]
    pub allow_non_loopback: bool,
    /// The `Host` values accepted (DNS rebinding protection), `host` or `host:port`. Default:
    /// `localhost`, `127.0.0.1`, `::1`, plus the listening address's host.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// Browser origins allowed to call (`scheme://host:port`, `:*` for any port). Default: none, so
    /// any request carrying an `Origin` header is refused (403); MCP clients send none.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Bearer tokens accepted, by name: `{"alice": "<token>"}`. When set, every request must
    /// carry `Authorization: Bearer <token>` (401 otherwise), and the token's name is the
    /// principal: the approver of the client's answers and the key of its stateless session.
    #[serde(default)]
    pub bearer_tokens: BTreeMap<String, String>,
}

/// Whether a tool asks, when configured explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalOverride {
    /// Always ask.
    Required,
    /// Never ask.
    NotRequired,
}

/// Overrides for one tool.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// Ask or not, whatever the annotations and the risk level say.
    #[serde(default)]
    pub approval: Option<ApprovalOverride>,
    /// The tool's risk level, 0 to 5; decides approval when `approval` is absent (off at L0, on above).
    #[serde(default)]
    pub risk: Option<Risk>,
    /// This tool's approval timeout in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// A person may edit the arguments before approving (on the approval page; MCP forms carry
    /// flat fields only, so clients are never offered edits). Edits are checked against the
    /// tool's input schema and recorded in the audit. Default false.
    #[serde(default)]
    pub editable: Option<bool>,
}

/// What the core's policy reads in a tool's name (the name the upstream gives it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameSays<'a> {
    /// The keyword that makes it dangerous ([`signoff::Policy::keyword_in`]), if any.
    pub keyword: Option<&'a str>,
    /// It says the tool only reads ([`signoff::Policy::reads_by_name`]).
    pub reads: bool,
}

impl<'a> NameSays<'a> {
    /// What `policy` reads in `name`.
    pub fn of(policy: &'a signoff::Policy, name: &str) -> NameSays<'a> {
        NameSays { keyword: policy.keyword_in(name), reads: policy.reads_by_name(name) }
    }
}

/// How one tool is gated, once annotations and overrides are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gating {
    /// Whether calls ask for approval.
    pub approval: bool,
    /// The tool's own risk level.
    pub risk: Risk,
    /// The level shown with its requests ([`Risk::shown`]).
    pub shown: Risk,
}

impl Gating {
    /// Combines a tool's annotations with its override: an explicit `approval` wins; otherwise a
    /// configured `risk` decides (off at L0, on above); otherwise the name and the annotations
    /// do ([`Risk::from_annotations`]: `readOnlyHint: true` runs without asking, anything else
    /// asks). `name` is what the core's policy reads in the tool's name.
    ///
    /// An upstream's annotations are its claims unless it is `trusted`
    /// ([`UpstreamConfig::trust_annotations`]): then they may raise a tool's risk but never lower
    /// it below what its name says. A tool whose name reads (`read_file`, `list_issues`) runs
    /// without asking unless a hint says it writes or destroys; any other is asked about, at L2
    /// at least, whatever `readOnlyHint` claims. Trusted or not, a name with a keyword
    /// (`delete_file`, `bash`, `git_push`) is asked about at L3 at least.
    pub fn decide(
        annotations: Option<&rmcp::model::ToolAnnotations>,
        over: Option<&ToolOverride>,
        name: NameSays<'_>,
        trusted: bool,
    ) -> Gating {
        let hinted = Risk::from_annotations(annotations);
        let from_hints = || {
            let risk = if trusted {
                hinted
            } else if name.reads {
                // Only a hint that raises counts: one saying the tool writes or destroys.
                let raises =
                    annotations.is_some_and(|a| a.read_only_hint == Some(false) || a.destructive_hint == Some(true));
                if raises { hinted } else { Risk::L0 }
            } else {
                hinted.max(Risk::L2)
            };
            if name.keyword.is_some() { risk.max(Risk::L3) } else { risk }
        };
        let risk = over.and_then(|o| o.risk).unwrap_or_else(from_hints);
        let approval = match over.and_then(|o| o.approval) {
            Some(ApprovalOverride::Required) => true,
            Some(ApprovalOverride::NotRequired) => false,
            // From annotations this agrees with them: read-only is L0, everything else above.
            None => risk.default_approval(),
        };
        Gating { approval, risk, shown: risk.shown(approval) }
    }
}

impl ProxyConfig {
    /// Whether anything but the MCP clients themselves can approve calls: a `console`, an
    /// `approval_url`, or a shared store (`gate.store_url`) that a `signoff console` elsewhere
    /// reads. Without one, only clients that show approval forms can approve.
    pub fn approvable_elsewhere(&self) -> bool {
        let shared = self.gate.as_ref().and_then(|g| g.get("store_url")).is_some_and(|u| !u.is_null());
        self.console.is_some() || self.approval_url.is_some() || shared
    }

    /// Parses and checks a configuration (JSON text); `what` names it in messages.
    ///
    /// The text is read as signoff reads all JSON ([`signoff::json::from_str`]): a repeated key,
    /// at any depth, is refused (never "the last one wins": a second `"approval"` for a tool, or a
    /// second `forbid_self_approval`, would silently loosen the gate), as are nesting past the
    /// limit and non-finite numbers.
    pub fn from_json(text: &str, what: &str) -> Result<ProxyConfig, String> {
        signoff::json::from_str(text, what).map_err(|e| match e {
            signoff::Error::Malformed(m) => m,
            e => format!("{what}: {e}"),
        })?;
        // Typed from the text again (not from the value): its errors keep their line and column.
        let config: ProxyConfig = serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))?;
        config.check().map_err(|e| format!("{what}: {e}"))?;
        Ok(config)
    }

    /// Checks names: at least one upstream, valid and distinct names, overrides that name a
    /// configured server.
    pub fn check(&self) -> Result<(), String> {
        if self.upstreams.is_empty() {
            return Err("`upstreams` is empty: nothing to proxy".into());
        }
        let mut seen = std::collections::HashSet::new();
        for u in &self.upstreams {
            // Not ending in `_` either: server `a` with tool `_x` and server `a_` with tool `x` would
            // both be `a___x`.
            let ok = !u.name.is_empty()
                && !u.name.contains(SEPARATOR)
                && !u.name.ends_with('_')
                && u.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok {
                return Err(format!(
                    "upstream name {:?}: use letters, digits, `-` and single `_`, not at the end (`__` separates \
                     server and tool)",
                    u.name
                ));
            }
            if !seen.insert(u.name.as_str()) {
                return Err(format!("upstream name {:?} is used twice", u.name));
            }
            u.transport()?;
            u.check_call_timeout()?;
        }
        if let Some(url) = &self.approval_url {
            let ok = (url.starts_with("https://") || url.starts_with("http://"))
                && url.len() > "https://".len()
                && !url.chars().any(|c| c.is_whitespace() || c.is_control());
            if !ok {
                return Err(format!("approval_url {url:?}: give an http or https URL"));
            }
        }
        if self.console.as_ref().is_some_and(|c| !c.is_object()) {
            return Err("`console` takes the console's options as an object, e.g. {\"approver_keys\": {...}}".into());
        }
        for name in self.tools.keys() {
            let server = name.split_once(SEPARATOR).map(|(s, _)| s);
            if !server.is_some_and(|s| seen.contains(s)) {
                return Err(format!(
                    "tools: {name:?} names no configured server (tool names are `<server>{SEPARATOR}<tool>`)"
                ));
            }
        }
        if let Some(h) = &self.http {
            h.check()?;
        }
        Ok(())
    }
}

impl HttpConfig {
    /// Checks the path, the tokens and (when set) the listening address.
    pub fn check(&self) -> Result<(), String> {
        if let Some(p) = &self.path
            && (!p.starts_with('/') || p.contains(['?', '#', ' ']))
        {
            return Err(format!("http.path {p:?}: give an absolute path such as \"/mcp\""));
        }
        for (name, token) in &self.bearer_tokens {
            if name.is_empty() || token.len() < 16 {
                return Err(format!("http.bearer_tokens: {name:?}: give each token a name and at least 16 characters"));
            }
        }
        if let Some(l) = &self.listen {
            self.address(l)?;
        }
        Ok(())
    }

    /// The socket address to listen on (`localhost` means 127.0.0.1); refuses an address other
    /// machines can reach unless `allow_non_loopback`.
    pub fn address(&self, listen: &str) -> Result<std::net::SocketAddr, String> {
        let addr: std::net::SocketAddr = match listen.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}").parse(),
            None => listen.parse(),
        }
        .map_err(|_| format!("http listen address {listen:?}: give an IP address and a port, e.g. 127.0.0.1:8931"))?;
        if !addr.ip().is_loopback() && !self.allow_non_loopback {
            return Err(format!(
                "refusing to listen on {addr}, which other machines can reach: the proxy approves tool calls \
                 for whoever can talk to it. Listen on 127.0.0.1, or set \"http\": {{\"allow_non_loopback\": true}} \
                 (with \"bearer_tokens\" and \"allowed_hosts\")"
            ));
        }
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;

    const FULL: &str = r#"{
        "upstreams": [{"name": "fs", "command": "npx", "args": ["-y", "server"], "env": {"A": "1"}}],
        "tools": {"fs__write_file": {"risk": 3, "timeout_ms": 5000, "editable": true}, "fs__read_file": {"approval": "required"}},
        "default_timeout_ms": 1000,
        "token_keys": "k1:AAAA",
        "gate": {"audit_path": "/tmp/a.jsonl"}
    }"#;

    #[test]
    fn a_full_config_parses() {
        let c = ProxyConfig::from_json(FULL, "c.json").unwrap();
        assert_eq!(c.upstreams[0].name, "fs");
        assert_eq!(c.upstreams[0].args, ["-y", "server"]);
        assert_eq!(c.tools["fs__write_file"].risk, Some(Risk::L3));
        assert_eq!(c.tools["fs__read_file"].approval, Some(ApprovalOverride::Required));
        assert_eq!(c.tools["fs__write_file"].editable, Some(true));
        assert_eq!(c.default_timeout_ms, Some(1000));
    }

    /// A repeated key is refused, wherever it is, and the message names it: the last one used to
    /// win, so a second entry could silently turn approval off, or allow self-approval.
    #[test]
    fn a_repeated_key_is_refused() {
        let tools = r#"{"upstreams": [{"name": "fs", "command": "x"}],
            "tools": {"fs__write_file": {"approval": "required"}, "fs__write_file": {"approval": "not_required"}}}"#;
        let e = ProxyConfig::from_json(tools, "c.json").unwrap_err();
        assert!(e.starts_with("c.json is not acceptable JSON: duplicate key \"fs__write_file\" at line 2"), "{e}");
        let gate = r#"{"upstreams": [{"name": "fs", "command": "x"}],
            "gate": {"forbid_self_approval": true, "forbid_self_approval": false}}"#;
        let e = ProxyConfig::from_json(gate, "c.json").unwrap_err();
        assert!(e.contains("duplicate key \"forbid_self_approval\""), "{e}");
        let inner = r#"{"upstreams": [{"name": "fs", "command": "x"}],
            "tools": {"fs__write_file": {"approval": "required", "approval": "not_required"}}}"#;
        assert!(ProxyConfig::from_json(inner, "c.json").unwrap_err().contains("duplicate key \"approval\""));
        let top = r#"{"upstreams": [{"name": "fs", "command": "x"}], "upstreams": []}"#;
        assert!(ProxyConfig::from_json(top, "c.json").unwrap_err().contains("duplicate key \"upstreams\""));
        // The same keys once each are fine, and typed errors still say where they are.
        let once = r#"{"upstreams": [{"name": "fs", "command": "x"}],
            "gate": {"forbid_self_approval": true}}"#;
        assert!(ProxyConfig::from_json(once, "c.json").is_ok());
        let e = ProxyConfig::from_json(r#"{"upstreams": [{"name": "fs", "command": 1}]}"#, "c.json").unwrap_err();
        assert!(e.starts_with("c.json: invalid type") && e.contains("line 1 column"), "{e}");
    }

    #[test]
    fn the_example_in_the_readme_parses() {
        let c = ProxyConfig::from_json(include_str!("../proxy.example.json"), "proxy.example.json").unwrap();
        assert_eq!(c.upstreams[0].command.as_deref(), Some("npx"));
        assert_eq!(c.tools["fs__list_allowed_directories"].risk, Some(Risk::L0));
    }

    #[test]
    fn typos_and_bad_names_are_errors() {
        let e =
            ProxyConfig::from_json(r#"{"upstreams": [{"name": "fs", "command": "x", "arg": []}]}"#, "c").unwrap_err();
        assert!(e.contains("unknown field `arg`"), "{e}");
        let e = ProxyConfig::from_json(
            r#"{"upstreams": [{"name": "fs", "command": "x"}], "tools": {"fs__w": {"aproval": "required"}}}"#,
            "c",
        )
        .unwrap_err();
        assert!(e.contains("unknown field `aproval`"), "{e}");
        let e = ProxyConfig::from_json(r#"{"upstreams": [{"name": "a__b", "command": "x"}]}"#, "c").unwrap_err();
        assert!(e.contains("`__` separates"), "{e}");
        // `a_` with tool `x` and `a` with tool `_x` would both be `a___x`.
        let e = ProxyConfig::from_json(
            r#"{"upstreams": [{"name": "a", "command": "x"}, {"name": "a_", "command": "y"}]}"#,
            "c",
        )
        .unwrap_err();
        assert!(e.contains("not at the end"), "{e}");
        let e = ProxyConfig::from_json(
            r#"{"upstreams": [{"name": "fs", "command": "x"}, {"name": "fs", "command": "y"}]}"#,
            "c",
        )
        .unwrap_err();
        assert!(e.contains("used twice"), "{e}");
        let e = ProxyConfig::from_json(
            r#"{"upstreams": [{"name": "fs", "command": "x"}], "tools": {"git__push": {}}}"#,
            "c",
        )
        .unwrap_err();
        assert!(e.contains("names no configured server"), "{e}");
        let e = ProxyConfig::from_json(
            r#"{"upstreams": [{"name": "fs", "command": "x"}], "tools": {"fs__w": {"risk": 6}}}"#,
            "c",
        )
        .unwrap_err();
        assert!(e.contains("0 to 5"), "{e}");
        assert!(ProxyConfig::from_json(r#"{"upstreams": []}"#, "c").unwrap_err().contains("empty"));
        let e = ProxyConfig::from_json(
            r#"{"upstreams": [{"name": "fs", "command": "x"}], "approval_url": "javascript:alert(1)"}"#,
            "c",
        )
        .unwrap_err();
        assert!(e.contains("http or https"), "{e}");
        let e = ProxyConfig::from_json(r#"{"upstreams": [{"name": "fs", "command": "x"}], "console": true}"#, "c")
            .unwrap_err();
        assert!(e.contains("as an object"), "{e}");
    }

    #[test]
    fn an_upstream_is_a_command_or_a_url_exactly() {
        let c = ProxyConfig::from_json(
            r#"{"upstreams": [{"name": "r", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer x"}}]}"#,
            "c",
        )
        .unwrap();
        match c.upstreams[0].transport().unwrap() {
            UpstreamTransport::Url { url, headers } => {
                assert_eq!(url, "https://mcp.example.com/mcp");
                assert_eq!(headers["Authorization"], "Bearer x");
            }
            other => panic!("{other:?}"),
        }
        let err = |json: &str| ProxyConfig::from_json(json, "c").unwrap_err();
        let e = err(r#"{"upstreams": [{"name": "r", "command": "x", "url": "http://h/mcp"}]}"#);
        assert!(e.contains("not both"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r"}]}"#);
        assert!(e.contains("give `command`") && e.contains("or `url`"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r", "url": "ftp://h/mcp"}]}"#);
        assert!(e.contains("http:// or https://"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r", "url": "localhost:8080/mcp"}]}"#);
        assert!(e.contains("http:// or https://"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r", "url": "http:///mcp"}]}"#);
        assert!(e.contains("not a valid URL"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r", "url": "http://h/mcp", "args": ["x"]}]}"#);
        assert!(e.contains("`command` upstream only"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r", "command": "x", "headers": {"A": "b"}}]}"#);
        assert!(e.contains("`url` upstream only"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r", "url": "http://h/mcp", "headers": {"Bad Name": "b"}}]}"#);
        assert!(e.contains("not a valid HTTP header"), "{e}");
        let e = err(r#"{"upstreams": [{"name": "r", "command": ""}]}"#);
        assert!(e.contains("`command` is empty"), "{e}");
    }

    #[test]
    fn the_call_timeout_is_checked() {
        let parse = |ms: &str| {
            ProxyConfig::from_json(
                &format!(r#"{{"upstreams": [{{"name": "r", "command": "x", "call_timeout_ms": {ms}}}]}}"#),
                "c",
            )
        };
        let c = ProxyConfig::from_json(r#"{"upstreams": [{"name": "r", "command": "x"}]}"#, "c").unwrap();
        assert_eq!(c.upstreams[0].call_timeout(), std::time::Duration::from_millis(DEFAULT_CALL_TIMEOUT_MS));
        let c = parse("2500").unwrap();
        assert_eq!(c.upstreams[0].call_timeout(), std::time::Duration::from_millis(2500));
        assert!(parse(&MAX_CALL_TIMEOUT_MS.to_string()).is_ok());
        for absurd in ["0", &(MAX_CALL_TIMEOUT_MS + 1).to_string(), "18446744073709551615"] {
            let e = parse(absurd).unwrap_err();
            assert!(e.contains("`call_timeout_ms`") && e.contains("from 1 to"), "{absurd}: {e}");
        }
        // Negative, fractional, quoted: not a number of milliseconds.
        for wrong in ["-1", "1.5", "\"300\""] {
            let e = parse(wrong).unwrap_err();
            assert!(e.contains("invalid"), "{wrong}: {e}");
        }
    }

    #[test]
    fn the_http_section_is_checked() {
        let ok =
            r#"{"upstreams": [{"name": "fs", "command": "x"}], "http": {"listen": "127.0.0.1:0", "path": "/mcp"}}"#;
        let c = ProxyConfig::from_json(ok, "c").unwrap();
        let h = c.http.unwrap();
        assert_eq!(h.address("localhost:8931").unwrap().to_string(), "127.0.0.1:8931");
        assert!(h.address("[::1]:0").is_ok());
        let e = h.address("0.0.0.0:8931").unwrap_err();
        assert!(e.contains("refusing to listen on 0.0.0.0:8931"), "{e}");
        assert!(h.address("example.com:80").unwrap_err().contains("give an IP address"));
        let open = HttpConfig { allow_non_loopback: true, ..Default::default() };
        assert!(open.address("0.0.0.0:8931").is_ok());
        let err = |http: &str| {
            ProxyConfig::from_json(
                &format!(r#"{{"upstreams": [{{"name": "fs", "command": "x"}}], "http": {http}}}"#),
                "c",
            )
            .unwrap_err()
        };
        assert!(err(r#"{"listen": "192.0.2.1:80"}"#).contains("refusing to listen"));
        assert!(err(r#"{"path": "mcp"}"#).contains("absolute path"));
        assert!(err(r#"{"bearer_tokens": {"alice": "short"}}"#).contains("at least 16"));
        assert!(err(r#"{"listn": "127.0.0.1:0"}"#).contains("unknown field `listn`"));
    }

    fn ann(read_only: Option<bool>) -> ToolAnnotations {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = read_only;
        a
    }

    /// What the default policy reads in `name`.
    fn says(name: &str) -> NameSays<'static> {
        static POLICY: std::sync::OnceLock<signoff::Policy> = std::sync::OnceLock::new();
        NameSays::of(POLICY.get_or_init(signoff::Policy::default), name)
    }

    #[test]
    fn trusted_annotations_decide_without_overrides() {
        let g = Gating::decide(Some(&ann(Some(true))), None, says("frobnicate"), true);
        assert_eq!(g, Gating { approval: false, risk: Risk::L0, shown: Risk::L0 });
        // Missing hints: destructive and open-world, so asked.
        let g = Gating::decide(None, None, says("frobnicate"), true);
        assert_eq!(g, Gating { approval: true, risk: Risk::L4, shown: Risk::L3 });
        let g = Gating::decide(Some(&ann(Some(false))), None, says("frobnicate"), true);
        assert!(g.approval);
    }

    /// Untrusted annotations are claims: they may raise a tool's risk, never lower it below what
    /// its name says (issue 42, issue 44): `readOnlyHint: true` alone no longer runs a tool
    /// unasked; a name that reads does, unless a hint says the tool writes or destroys.
    #[test]
    fn untrusted_annotations_never_lower_what_the_name_says() {
        let claims_read = ann(Some(true));
        let g = Gating::decide(Some(&claims_read), None, says("frobnicate"), false);
        assert_eq!(g, Gating { approval: true, risk: Risk::L2, shown: Risk::L1 });
        for reads in ["read_text_file", "list_issues", "getWeather", "search_files"] {
            for hints in [None, Some(&claims_read)] {
                let g = Gating::decide(hints, None, says(reads), false);
                assert_eq!(g, Gating { approval: false, risk: Risk::L0, shown: Risk::L0 }, "{reads} {hints:?}");
            }
        }
        // A hint that raises counts: a "read" tool that says it writes is asked about.
        let g = Gating::decide(Some(&ann(Some(false))), None, says("read_and_go"), false);
        assert!(g.approval && g.risk >= Risk::L2, "{g:?}");
        let mut destroys = ToolAnnotations::default();
        destroys.destructive_hint = Some(true);
        assert!(Gating::decide(Some(&destroys), None, says("fetch_thing"), false).approval);
        // Levels above L2 from the hints are kept.
        assert_eq!(Gating::decide(None, None, says("frobnicate"), false).risk, Risk::L4);
    }

    /// `readOnlyHint: true` on a tool named `delete_file` does not make it run unasked, trusted
    /// or not (issue 42).
    #[test]
    fn a_read_only_hint_does_not_lower_a_dangerous_name() {
        for trusted in [true, false] {
            let g = Gating::decide(Some(&ann(Some(true))), None, says("delete_file"), trusted);
            assert_eq!(g, Gating { approval: true, risk: Risk::L3, shown: Risk::L2 });
            // A keyword never reads, whatever the first word says.
            assert!(Gating::decide(Some(&ann(Some(true))), None, says("get_and_delete"), trusted).approval);
            // Other levels are kept: the name only sets a floor.
            assert_eq!(Gating::decide(None, None, says("delete_file"), trusted).risk, Risk::L4);
        }
        // A configured level or approval still decides.
        let off = ToolOverride { approval: Some(ApprovalOverride::NotRequired), ..Default::default() };
        assert!(!Gating::decide(Some(&ann(Some(true))), Some(&off), says("delete_file"), false).approval);
    }

    #[test]
    fn overrides_win() {
        let read_only = ann(Some(true));
        let required = ToolOverride { approval: Some(ApprovalOverride::Required), ..Default::default() };
        let g = Gating::decide(Some(&read_only), Some(&required), says("x"), true);
        assert_eq!(g, Gating { approval: true, risk: Risk::L0, shown: Risk::L1 });
        let off = ToolOverride { approval: Some(ApprovalOverride::NotRequired), ..Default::default() };
        let g = Gating::decide(None, Some(&off), says("x"), true);
        assert_eq!(g, Gating { approval: false, risk: Risk::L4, shown: Risk::L4 });
        // A configured level decides approval: off at L0, on above.
        let l0 = ToolOverride { risk: Some(Risk::L0), ..Default::default() };
        assert!(!Gating::decide(None, Some(&l0), says("delete_file"), false).approval);
        let l5 = ToolOverride { risk: Some(Risk::L5), ..Default::default() };
        assert_eq!(
            Gating::decide(Some(&read_only), Some(&l5), says("x"), true),
            Gating { approval: true, risk: Risk::L5, shown: Risk::L4 }
        );
    }
}
