//! The proxy's configuration: upstream servers, per-tool overrides, and the gate's own options.
//!
//! ```json
//! {
//!   "upstreams": [
//!     {"name": "fs", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]}
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
}

/// One upstream server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The namespace of its tools: letters, digits, `-` and single `_` (no `__`).
    pub name: String,
    /// The program to run.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
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
    /// configured `risk` decides (off at L0, on above); otherwise the annotations do
    /// (`readOnlyHint: true` runs without asking, anything else asks).
    pub fn decide(annotations: Option<&rmcp::model::ToolAnnotations>, over: Option<&ToolOverride>) -> Gating {
        let risk = over.and_then(|o| o.risk).unwrap_or_else(|| Risk::from_annotations(annotations));
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
    /// Parses and checks a configuration (JSON text); `what` names it in messages.
    pub fn from_json(text: &str, what: &str) -> Result<ProxyConfig, String> {
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
            let ok = !u.name.is_empty()
                && !u.name.contains(SEPARATOR)
                && u.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok {
                return Err(format!(
                    "upstream name {:?}: use letters, digits, `-` and single `_` (`__` separates server and tool)",
                    u.name
                ));
            }
            if !seen.insert(u.name.as_str()) {
                return Err(format!("upstream name {:?} is used twice", u.name));
            }
            if u.command.is_empty() {
                return Err(format!("upstream {:?}: `command` is empty", u.name));
            }
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;

    const FULL: &str = r#"{
        "upstreams": [{"name": "fs", "command": "npx", "args": ["-y", "server"], "env": {"A": "1"}}],
        "tools": {"fs__write_file": {"risk": 3, "timeout_ms": 5000}, "fs__read_file": {"approval": "required"}},
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
        assert_eq!(c.default_timeout_ms, Some(1000));
    }

    #[test]
    fn the_example_in_the_readme_parses() {
        let c = ProxyConfig::from_json(include_str!("../proxy.example.json"), "proxy.example.json").unwrap();
        assert_eq!(c.upstreams[0].command, "npx");
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

    fn ann(read_only: Option<bool>) -> ToolAnnotations {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = read_only;
        a
    }

    #[test]
    fn annotations_decide_without_overrides() {
        let g = Gating::decide(Some(&ann(Some(true))), None);
        assert_eq!(g, Gating { approval: false, risk: Risk::L0, shown: Risk::L0 });
        // Missing hints: destructive and open-world, so asked.
        let g = Gating::decide(None, None);
        assert_eq!(g, Gating { approval: true, risk: Risk::L4, shown: Risk::L3 });
        let g = Gating::decide(Some(&ann(Some(false))), None);
        assert!(g.approval);
    }

    #[test]
    fn overrides_win() {
        let read_only = ann(Some(true));
        let required = ToolOverride { approval: Some(ApprovalOverride::Required), ..Default::default() };
        let g = Gating::decide(Some(&read_only), Some(&required));
        assert_eq!(g, Gating { approval: true, risk: Risk::L0, shown: Risk::L1 });
        let off = ToolOverride { approval: Some(ApprovalOverride::NotRequired), ..Default::default() };
        let g = Gating::decide(None, Some(&off));
        assert_eq!(g, Gating { approval: false, risk: Risk::L4, shown: Risk::L4 });
        // A configured level decides approval: off at L0, on above.
        let l0 = ToolOverride { risk: Some(Risk::L0), ..Default::default() };
        assert!(!Gating::decide(None, Some(&l0)).approval);
        let l5 = ToolOverride { risk: Some(Risk::L5), ..Default::default() };
        assert_eq!(
            Gating::decide(Some(&read_only), Some(&l5)),
            Gating { approval: true, risk: Risk::L5, shown: Risk::L4 }
        );
    }
}
