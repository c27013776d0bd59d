//! Deciding whether a call needs approval: one function, used for original and edited arguments.

use crate::error::{Error, Result};
use crate::tool::{ApprovalMode, Tool, ToolSource};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Keywords that, found as a word of a tool's name, make a tool with the default approval mode
/// require approval: words for changing, sending, paying, running and destroying. The list is
/// the one table README.md ("What the default gates") shows; a tool it misses is gated with
/// `approval: required` or a list of the host's own.
pub const DEFAULT_KEYWORDS: &[&str] = &[
    // Destroying.
    "delete",
    "remove",
    "rm",
    "rmdir",
    "unlink",
    "drop",
    "truncate",
    "destroy",
    "erase",
    "purge",
    "wipe",
    "kill",
    "terminate",
    "shutdown",
    "reboot",
    "restart",
    "reset",
    "format",
    // Changing what exists.
    "write",
    "overwrite",
    "edit",
    "modify",
    "update",
    "upsert",
    "insert",
    "patch",
    "put",
    "replace",
    "apply",
    "create",
    "mkdir",
    "move",
    "mv",
    "rename",
    "copy",
    "chmod",
    "chown",
    "install",
    "uninstall",
    "upgrade",
    "archive",
    "disable",
    "cancel",
    "restore",
    "revert",
    "rollback",
    // Version control.
    "commit",
    "push",
    "merge",
    "rebase",
    // Running code.
    "run",
    "execute",
    "exec",
    "eval",
    "invoke",
    "shell",
    "bash",
    "sh",
    "zsh",
    "powershell",
    "cmd",
    "terminal",
    "sudo",
    "sql",
    // Reaching people.
    "send",
    "email",
    "post",
    "publish",
    "reply",
    "invite",
    "share",
    "submit",
    "notify",
    "upload",
    // Money and rights.
    "pay",
    "payment",
    "transfer",
    "charge",
    "refund",
    "purchase",
    "buy",
    "sell",
    "order",
    "withdraw",
    "deploy",
    "approve",
    "sign",
    "grant",
    "revoke",
];

/// Words that, as the first word of a tool's name with none of the keywords in it, say the tool
/// only reads (`read_file`, `list_issues`, `getWeather`): what the MCP proxy trusts of a server
/// whose hints it does not ([`Policy::reads_by_name`]).
pub const READ_WORDS: &[&str] = &[
    "read", "get", "list", "search", "find", "show", "view", "describe", "fetch", "lookup", "count", "stat", "inspect",
    "preview",
];

/// Gate-wide policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Words (case-insensitive) that force approval for tools in the default mode when they
    /// appear as a word of the tool's name (`delete_file`, `sendEmail`, `db.drop`).
    pub keywords: Vec<String>,
    /// Turns every approval off. For development only: off by default, announced on stderr and
    /// in the audit log when on.
    pub gating_disabled: bool,
    /// How long a request waits for an answer when its tool sets no timeout. 60 s by default.
    pub default_timeout: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            keywords: DEFAULT_KEYWORDS.iter().map(|s| s.to_string()).collect(),
            gating_disabled: false,
            default_timeout: Duration::from_secs(60),
        }
    }
}

/// Why a call needs (or does not need) approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Approval is needed.
    pub required: bool,
    /// At least one argument rule holds: session grants do not apply.
    pub forced_by_rule: bool,
    /// Human-readable reasons.
    pub reasons: Vec<String>,
}

/// An [`Evaluation`] as the gate keeps it: the reasons shared between the tool's requests when
/// only the tool's own verdict applies (no argument rule holds).
pub(crate) struct Assessment {
    pub required: bool,
    pub forced_by_rule: bool,
    pub reasons: Arc<[String]>,
}

impl From<Assessment> for Evaluation {
    fn from(a: Assessment) -> Self {
        Evaluation { required: a.required, forced_by_rule: a.forced_by_rule, reasons: a.reasons.to_vec() }
    }
}

/// A tool as the gate holds it: compiled schema and the policy's verdict on its name and kind.
pub(crate) struct CompiledTool {
    pub tool: Tool,
    validator: jsonschema::Validator,
    /// The verdict of the mode/keyword/source part of the policy, which does not depend on the
    /// arguments: computed once at registration.
    base: Option<String>,
    /// `base` as the reasons of a call no argument rule holds for: shared by its requests.
    base_reasons: Arc<[String]>,
    pub timeout: Duration,
    /// The escaped description, and the prompt when its template does not depend on the
    /// arguments: rendered once here instead of per request.
    pub description_display: Arc<str>,
    /// The tool's name, shared by its requests.
    pub shared_name: Arc<str>,
    pub fixed_prompt: Option<Arc<str>>,
}

/// Splits a tool name into lowercase words: on non-alphanumerics and on lower→upper case changes.
fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_numeric();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

impl Policy {
    /// The first of the policy's keywords that is a word of `name` (split on non-alphanumerics
    /// and lower-to-upper case changes, compared without case), if any: what makes a tool in the
    /// default mode ask.
    ///
    /// ```
    /// let p = signoff::Policy::default();
    /// assert_eq!(p.keyword_in("git_push"), Some("push"));
    /// assert_eq!(p.keyword_in("sendEmail"), Some("send"));
    /// assert_eq!(p.keyword_in("read_text_file"), None);
    /// ```
    pub fn keyword_in(&self, name: &str) -> Option<&str> {
        let words = name_words(name);
        self.keywords.iter().find(|k| words.iter().any(|w| w.eq_ignore_ascii_case(k))).map(String::as_str)
    }

    /// Whether `name` says the tool only reads: its first word is one of [`READ_WORDS`] and none
    /// of its words is one of the policy's keywords (`get_and_delete` does not read).
    ///
    /// ```
    /// let p = signoff::Policy::default();
    /// assert!(p.reads_by_name("read_text_file") && p.reads_by_name("listIssues"));
    /// assert!(!p.reads_by_name("get_and_delete") && !p.reads_by_name("directory_tree"));
    /// ```
    pub fn reads_by_name(&self, name: &str) -> bool {
        name_words(name).first().is_some_and(|w| READ_WORDS.contains(&w.as_str())) && self.keyword_in(name).is_none()
    }

    pub(crate) fn compile(&self, tool: Tool) -> Result<CompiledTool> {
        tool.check()?;
        let validator = jsonschema::validator_for(&tool.spec.parameters).map_err(|e| Error::InvalidTool {
            tool: tool.spec.name.clone(),
            reason: format!("parameters are not a valid JSON Schema: {e}"),
        })?;
        let base = self.base_reason(&tool);
        let timeout = tool.spec.timeout_ms.map(Duration::from_millis).unwrap_or(self.default_timeout);
        let spec = &tool.spec;
        let description_display = crate::display::escape_for_display(&spec.description).into();
        let template = spec.prompt_template.as_deref().unwrap_or(crate::tool::DEFAULT_PROMPT);
        let fixed_prompt = (!template.contains("{args}"))
            .then(|| crate::display::render_prompt(template, &spec.name, &spec.description, &Value::Null).into());
        let base_reasons = base.iter().cloned().collect();
        let shared_name = spec.name.as_str().into();
        Ok(CompiledTool {
            tool,
            validator,
            base,
            base_reasons,
            timeout,
            description_display,
            shared_name,
            fixed_prompt,
        })
    }

    /// The argument-independent reason to gate, if any.
    fn base_reason(&self, tool: &Tool) -> Option<String> {
        let spec = &tool.spec;
        match spec.approval {
            ApprovalMode::Required => return Some("the tool always requires approval".into()),
            ApprovalMode::NotRequired => return None,
            ApprovalMode::Default => {}
        }
        if spec.destructive {
            return Some("the tool is marked destructive".into());
        }
        if let Some(k) = self.keyword_in(&spec.name) {
            return Some(format!("the tool name contains the keyword {k:?}"));
        }
        if let ToolSource::External { server } = &spec.source
            && !spec.read_only
        {
            return Some(format!("the tool comes from the external server {server:?} and is not read-only"));
        }
        None
    }
}

impl CompiledTool {
    pub fn name(&self) -> &str {
        &self.tool.spec.name
    }

    /// Validates arguments against the schema. `which` is "original" or "edited".
    pub fn validate(&self, args: &Value, which: &'static str) -> Result<()> {
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let reason = self
            .validator
            .iter_errors(args)
            .take(3)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
            })
            .collect::<Vec<_>>()
            .join("; ");
        Err(Error::InvalidArguments { tool: self.name().to_owned(), which, reason })
    }

    /// Whether `args` need approval, and why. Gating-disabled is handled by the gate.
    pub(crate) fn evaluate(&self, args: &Value) -> Assessment {
        let mut reasons = Vec::new();
        let mut forced_by_rule = false;
        if self.tool.spec.rules.is_empty() && self.tool.custom_rules.is_empty() {
            return Assessment { required: self.base.is_some(), forced_by_rule, reasons: self.base_reasons.clone() };
        }
        for r in &self.tool.spec.rules {
            if r.holds(args) {
                forced_by_rule = true;
                reasons.push(r.describe());
            }
        }
        for r in &self.tool.custom_rules {
            if (r.predicate)(args) {
                forced_by_rule = true;
                reasons.push(r.description.clone());
            }
        }
        if let Some(b) = &self.base {
            reasons.push(b.clone());
        }
        Assessment { required: !reasons.is_empty(), forced_by_rule, reasons: reasons.into() }
    }

    /// True when this tool can never need approval, whatever the arguments: the fast path.
    pub fn never_gated(&self) -> bool {
        self.base.is_none() && self.tool.spec.rules.is_empty() && self.tool.custom_rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ArgRule;
    use serde_json::json;

    fn eval(p: &Policy, t: Tool, args: Value) -> Evaluation {
        p.compile(t).unwrap().evaluate(&args).into()
    }

    #[test]
    fn name_words_split() {
        assert_eq!(name_words("sendEmail"), ["send", "email"]);
        assert_eq!(name_words("db.drop_table"), ["db", "drop", "table"]);
        assert_eq!(name_words("HTTPGet"), ["httpget"]);
        assert_eq!(name_words("undelete"), ["undelete"]);
    }

    #[test]
    fn defaults_users_expect() {
        let p = Policy::default();
        assert!(!eval(&p, Tool::builder("read_file").build(), json!({})).required);
        assert!(eval(&p, Tool::builder("delete_file").build(), json!({})).required);
        assert!(eval(&p, Tool::builder("sendEmail").build(), json!({})).required);
        assert!(!eval(&p, Tool::builder("undelete").build(), json!({})).required);
        let ext = ToolSource::External { server: "github".into() };
        assert!(eval(&p, Tool::builder("list_issues").source(ext.clone()).build(), json!({})).required);
        assert!(!eval(&p, Tool::builder("list_issues").source(ext).read_only(true).build(), json!({})).required);
        assert!(eval(&p, Tool::builder("x").destructive(true).build(), json!({})).required);
        assert!(
            !eval(&p, Tool::builder("delete_file").approval(ApprovalMode::NotRequired).build(), json!({})).required
        );
        let custom = Policy { keywords: vec!["frobnicate".into()], ..Policy::default() };
        assert!(eval(&custom, Tool::builder("frobnicate_it").build(), json!({})).required);
        assert!(!eval(&custom, Tool::builder("delete_file").build(), json!({})).required);
    }

    /// What a newcomer's agent calls first: the tools that change, push, run or delete are asked
    /// about; the ones that read are not (issue 42).
    #[test]
    fn the_default_list_gates_common_dangerous_tools() {
        let p = Policy::default();
        let gated = |name: &str| eval(&p, Tool::builder(name).build(), json!({})).required;
        for name in [
            "bash",
            "write_file",
            "git_push",
            "update_record",
            "merge_pr",
            "unlink",
            "run_sql",
            "execute_sql",
            "shell",
            "sendEmail",
            "createUser",
            "edit_file",
            "move_file",
            "apply_patch",
            "git_commit",
            "pay_invoice",
        ] {
            assert!(gated(name), "{name} should be gated");
        }
        for name in ["read_file", "list_directory", "search_docs", "get_weather", "git_status", "lookup"] {
            assert!(!gated(name), "{name} should not be gated");
        }
    }

    #[test]
    fn rules_force_even_not_required() {
        let p = Policy::default();
        let t = Tool::builder("write_file")
            .approval(ApprovalMode::NotRequired)
            .rule(ArgRule::PathOutside { pointer: "/path".into(), prefixes: vec!["/tmp".into()] })
            .build();
        let c = p.compile(t).unwrap();
        assert!(!c.evaluate(&json!({"path": "/tmp/x"})).required);
        let e: Evaluation = c.evaluate(&json!({"path": "/etc/x"})).into();
        assert!(e.required && e.forced_by_rule);
    }

    #[test]
    fn bad_schema_and_names_are_invalid_tools() {
        let p = Policy::default();
        let e = p.compile(Tool::builder("x").parameters(json!({"type": 12})).build()).err().unwrap();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidTool);
        assert_eq!(p.compile(Tool::builder(" ").build()).err().unwrap().kind(), crate::ErrorKind::InvalidTool);
        assert_eq!(p.compile(Tool::builder("a\u{202E}b").build()).err().unwrap().kind(), crate::ErrorKind::InvalidTool);
    }
}
