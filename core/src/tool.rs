//! Tool definitions: described once, used for policy, validation, display and execution.

use crate::error::{Error, Result};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Whether calls to a tool need a person's approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Decided by the gate's [policy](crate::Policy): built-in tools run, tools from external
    /// servers are gated unless read-only, destructive tools and names matching a keyword
    /// (delete, send, pay, ...) are gated.
    #[default]
    Default,
    /// Always ask.
    Required,
    /// Never ask (argument rules can still force approval).
    NotRequired,
}

/// Where a tool comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolSource {
    /// Shipped with the application.
    #[default]
    BuiltIn,
    /// Provided by an external server, e.g. an MCP server.
    External {
        /// The server's name, shown to the person.
        server: String,
    },
}

/// A declarative rule on a call's arguments. When a rule *holds*, the call needs approval,
/// whatever the tool's approval mode or session grants say. A rule whose value is missing or of
/// the wrong type also holds: rules fail safe. Rules are evaluated identically on the original
/// arguments and on a person's edited arguments.
///
/// `pointer` is a JSON Pointer (RFC 6901) into the arguments, e.g. `/path`; it must be empty or
/// start with `/`, or registration fails with `invalid_tool`. The JSON form is tagged by `kind`
/// (snake_case), e.g. `{"kind": "greater_than", "pointer": "/amount", "value": 100}`.
///
/// # Examples
///
/// ```
/// use signoff::ArgRule;
/// use serde_json::json;
///
/// let rule: ArgRule = serde_json::from_value(json!({
///     "kind": "path_outside", "pointer": "/path", "prefixes": ["/tmp"]
/// })).unwrap();
/// assert!(!rule.holds(&json!({"path": "/tmp/notes.txt"})));
/// assert!(rule.holds(&json!({"path": "/tmp/../etc/passwd"}))); // normalized to /etc/passwd
/// assert!(rule.holds(&json!({"path": "notes.txt"})));          // relative: fails safe
/// assert!(rule.holds(&json!({})));                             // missing: fails safe
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArgRule {
    /// Holds when the string at `pointer`, normalized lexically (`.` and `..` resolved), is not
    /// inside one of `prefixes`. Relative paths, non-strings and missing values always hold.
    PathOutside {
        /// JSON Pointer to the path string.
        pointer: String,
        /// Absolute directories the path may be in (the directory itself or anything below it;
        /// `/tmp` does not cover `/tmpfoo`). A relative prefix is an `invalid_tool` error.
        prefixes: Vec<String>,
    },
    /// Holds when the number at `pointer` is greater than `value`. A missing or non-numeric value
    /// holds.
    GreaterThan {
        /// JSON Pointer to the number.
        pointer: String,
        /// The largest value that runs without approval.
        value: f64,
    },
    /// Holds when the value at `pointer` equals one of `values` (JSON equality). A missing value
    /// holds.
    OneOf {
        /// JSON Pointer to the value.
        pointer: String,
        /// The values that need approval.
        values: Vec<Value>,
    },
    /// Holds when the value at `pointer` is not one of `values` (JSON equality). A missing value
    /// holds.
    NotOneOf {
        /// JSON Pointer to the value.
        pointer: String,
        /// The only values that run without approval.
        values: Vec<Value>,
    },
    /// Holds when the string at `pointer` contains `substring` (case-insensitive). A missing or
    /// non-string value holds.
    Contains {
        /// JSON Pointer to the string.
        pointer: String,
        /// The text that needs approval, matched case-insensitively.
        substring: String,
    },
}

impl ArgRule {
    fn pointer(&self) -> &str {
        match self {
            ArgRule::PathOutside { pointer, .. }
            | ArgRule::GreaterThan { pointer, .. }
            | ArgRule::OneOf { pointer, .. }
            | ArgRule::NotOneOf { pointer, .. }
            | ArgRule::Contains { pointer, .. } => pointer,
        }
    }

    /// Does this rule hold for `args` (that is, does the call need approval)? True when the value
    /// at the pointer is missing or of the wrong type.
    pub fn holds(&self, args: &Value) -> bool {
        let Some(v) = args.pointer(self.pointer()) else { return true };
        match self {
            ArgRule::PathOutside { prefixes, .. } => match v.as_str() {
                Some(p) => match normalize_path(p) {
                    Some(p) => !prefixes.iter().any(|pre| path_within(&p, pre)),
                    None => true,
                },
                None => true,
            },
            // Fail safe: a threshold no number compares with (NaN) holds for every number.
            ArgRule::GreaterThan { value, .. } => {
                v.as_f64().is_none_or(|n| n.partial_cmp(value).is_none_or(|o| o == std::cmp::Ordering::Greater))
            }
            ArgRule::OneOf { values, .. } => values.contains(v),
            ArgRule::NotOneOf { values, .. } => !values.contains(v),
            ArgRule::Contains { substring, .. } => {
                v.as_str().is_none_or(|s| s.to_lowercase().contains(&substring.to_lowercase()))
            }
        }
    }

    /// A short human description, used as the reason approval was required.
    pub fn describe(&self) -> String {
        match self {
            ArgRule::PathOutside { pointer, prefixes } => {
                format!("{pointer} is outside {}", prefixes.join(", "))
            }
            ArgRule::GreaterThan { pointer, value } => format!("{pointer} is greater than {value}"),
            ArgRule::OneOf { pointer, values } => format!("{pointer} is one of {}", Value::from(values.clone())),
            ArgRule::NotOneOf { pointer, values } => {
                format!("{pointer} is not one of {}", Value::from(values.clone()))
            }
            ArgRule::Contains { pointer, substring } => format!("{pointer} contains {substring:?}"),
        }
    }

    fn check(&self) -> std::result::Result<(), String> {
        let p = self.pointer();
        if !(p.is_empty() || p.starts_with('/')) {
            return Err(format!("rule pointer {p:?} must be empty or start with '/'"));
        }
        if let ArgRule::PathOutside { prefixes, .. } = self
            && let Some(bad) = prefixes.iter().find(|p| normalize_path(p).is_none())
        {
            return Err(format!("path prefix {bad:?} must be absolute"));
        }
        // A threshold of NaN or ±∞ compares so that the rule would never hold: refused, as JSON
        // (which has no such numbers) refuses it in the other languages.
        if let ArgRule::GreaterThan { value, .. } = self
            && !value.is_finite()
        {
            return Err(format!("the greater_than value of {p:?} must be a finite number, not {value}"));
        }
        Ok(())
    }
}

/// Lexically normalizes an absolute path: resolves `.` and `..`, collapses repeated `/`.
/// Returns `None` for relative paths.
fn normalize_path(p: &str) -> Option<String> {
    if !p.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

fn path_within(path: &str, prefix: &str) -> bool {
    let Some(prefix) = normalize_path(prefix) else { return false };
    if prefix == "/" {
        return true;
    }
    path == prefix || path.strip_prefix(&prefix).is_some_and(|rest| rest.starts_with('/'))
}

/// A rule written as code: holds when the predicate returns true.
#[derive(Clone)]
pub struct CustomRule {
    pub(crate) description: String,
    pub(crate) predicate: Arc<dyn Fn(&Value) -> bool + Send + Sync>,
}

impl fmt::Debug for CustomRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomRule").field("description", &self.description).finish()
    }
}

/// The serializable description of a tool. Bindings pass this as a dict/object; Rust users
/// usually build it through [`Tool::builder`].
///
/// The JSON field names are the Rust field names. Only `name` is required; unknown fields are
/// rejected. Defaults: `description` `""`, `parameters` `{"type": "object"}`, `approval`
/// `"default"`, `editable` / `read_only` / `destructive` `false`, `source`
/// `{"kind": "built_in"}`, `rules` `[]`, `prompt_template` and `timeout_ms` absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Unique name, as the model calls it: at most [`MAX_NAME_CHARS`] characters, with no
    /// whitespace, backtick, or control, bidi or zero-width character (`invalid_tool`).
    pub name: String,
    /// What the tool does, shown to the person.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments. Defaults to "any object".
    #[serde(default = "default_parameters")]
    pub parameters: Value,
    /// Whether calls need approval: `"default"`, `"required"` or `"not_required"`.
    #[serde(default)]
    pub approval: ApprovalMode,
    /// Prompt shown to the person; `{tool}`, `{args}` and `{description}` are substituted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_template: Option<String>,
    /// Whether the person may edit the arguments before approving. Off by default.
    #[serde(default)]
    pub editable: bool,
    /// Where the tool comes from: `{"kind": "built_in"}` or
    /// `{"kind": "external", "server": "<name>"}`.
    #[serde(default)]
    pub source: ToolSource,
    /// Hint: the tool only reads. In the default mode, an external tool marked read-only is not
    /// gated for being external.
    #[serde(default)]
    pub read_only: bool,
    /// Hint: the tool destroys or changes something irreversibly. Gated in the default mode.
    #[serde(default)]
    pub destructive: bool,
    /// Approval timeout for this tool in milliseconds, from 1 ms to 30 days; the gate's default
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Argument rules that force approval when they hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<ArgRule>,
}

fn default_parameters() -> Value {
    serde_json::json!({ "type": "object" })
}

/// The longest tool name accepted, in characters (the model providers allow 64 or 128; an MCP
/// server's tools carry its name as a prefix).
pub const MAX_NAME_CHARS: usize = 256;

/// The default prompt, used when a tool has no template.
pub const DEFAULT_PROMPT: &str = "Allow `{tool}` to run with these arguments?";

impl ToolSpec {
    /// A spec with defaults: any-object parameters, default approval mode, built-in, not editable.
    pub fn new(name: impl Into<String>) -> Self {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: default_parameters(),
            approval: ApprovalMode::Default,
            prompt_template: None,
            editable: false,
            source: ToolSource::BuiltIn,
            read_only: false,
            destructive: false,
            timeout_ms: None,
            rules: Vec::new(),
        }
    }

    /// Parses a spec from JSON; unknown fields are rejected so a typo never silently weakens policy.
    /// Fails with `malformed`. Only the shape is checked here: the schema, name and rules are
    /// checked when the tool is registered.
    ///
    /// # Examples
    ///
    /// ```
    /// use signoff::{ApprovalMode, ErrorKind, ToolSpec};
    /// use serde_json::json;
    ///
    /// let spec = ToolSpec::from_json(json!({
    ///     "name": "write_file",
    ///     "description": "Writes a file",
    ///     "parameters": {
    ///         "type": "object",
    ///         "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
    ///         "required": ["path", "text"]
    ///     },
    ///     "approval": "not_required",
    ///     "editable": true,
    ///     "source": {"kind": "external", "server": "files"},
    ///     "timeout_ms": 30000,
    ///     "rules": [{"kind": "path_outside", "pointer": "/path", "prefixes": ["/tmp"]}]
    /// }))
    /// .unwrap();
    /// assert_eq!(spec.approval, ApprovalMode::NotRequired);
    /// assert!(!spec.destructive); // omitted fields take their defaults
    ///
    /// // A misspelt field is an error, not a silently ignored setting.
    /// let err = ToolSpec::from_json(json!({"name": "x", "aproval": "required"})).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Malformed);
    /// ```
    pub fn from_json(v: Value) -> Result<Self> {
        serde_json::from_value(v).map_err(|e| Error::Malformed(format!("tool definition: {e}")))
    }
}

/// The output of an executor: a JSON value, or an error message for the model.
pub type ExecResult = std::result::Result<Value, String>;

/// An executor: runs a tool with (approved) arguments. `Err` is a failure message for the model.
pub type Executor = Arc<dyn Fn(Value) -> BoxFuture<'static, ExecResult> + Send + Sync>;

/// An executor that also learns which call it runs ([`CallContext`]).
pub type ContextExecutor = Arc<dyn Fn(Value, CallContext) -> BoxFuture<'static, ExecResult> + Send + Sync>;

/// What an executor knows about the call it runs: the tool, the model's call id, the request a
/// person answered (if one was made), the session, whether the arguments were edited, and
/// whether the gate has since closed (a long tool may stop early and say so; it is never
/// interrupted by signoff).
#[derive(Clone)]
pub struct CallContext {
    /// The tool's name.
    pub tool: String,
    /// The model's id for the call.
    pub call_id: Option<String>,
    /// The confirmation request that was answered; `None` when the call was not gated.
    pub request_id: Option<uuid::Uuid>,
    /// The agent session.
    pub session_id: String,
    /// A person changed the arguments before approving.
    pub edited: bool,
    pub(crate) gate: std::sync::Weak<crate::gate::Inner>,
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("tool", &self.tool)
            .field("call_id", &self.call_id)
            .field("request_id", &self.request_id)
            .field("session_id", &self.session_id)
            .field("edited", &self.edited)
            .finish()
    }
}

impl CallContext {
    /// True once the gate that runs this call has closed (or is gone).
    pub fn gate_closed(&self) -> bool {
        self.gate.upgrade().is_none_or(|inner| (crate::Gate { inner }).is_closed())
    }
}

/// A tool definition: its spec, custom rules and optional executor. The schema and rules are
/// checked when it is registered with [`Gate::register`](crate::Gate::register).
#[derive(Clone)]
pub struct Tool {
    pub(crate) spec: ToolSpec,
    pub(crate) custom_rules: Vec<CustomRule>,
    pub(crate) executor: Option<ContextExecutor>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("spec", &self.spec)
            .field("custom_rules", &self.custom_rules)
            .field("executor", &self.executor.is_some())
            .finish()
    }
}

impl Tool {
    /// Starts a tool definition.
    pub fn builder(name: impl Into<String>) -> ToolBuilder {
        ToolBuilder { tool: Tool::from_spec(ToolSpec::new(name)) }
    }

    /// A tool from a spec, without executor or custom rules.
    pub fn from_spec(spec: ToolSpec) -> Self {
        Tool { spec, custom_rules: Vec::new(), executor: None }
    }

    /// The serializable spec.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Attaches an executor.
    pub fn with_executor(mut self, executor: Executor) -> Self {
        self.executor = Some(Arc::new(move |v, _| executor(v)));
        self
    }

    /// Attaches an executor that receives the call's [`CallContext`].
    pub fn with_context_executor(mut self, executor: ContextExecutor) -> Self {
        self.executor = Some(executor);
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidTool { tool: self.spec.name.clone(), reason };
        if self.spec.name.trim().is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        if self.spec.name.chars().count() > MAX_NAME_CHARS {
            return Err(invalid(format!("the name is longer than {MAX_NAME_CHARS} characters")));
        }
        // The name is shown to the person inside the prompt's quotes: whitespace (a newline
        // could start lines that look like the arguments), a backtick (it ends the quotes) or an
        // invisible character would let it pass for something else.
        if let Some(c) = self
            .spec
            .name
            .chars()
            .find(|&c| c.is_whitespace() || c.is_control() || c == '`' || crate::display::is_deceptive(c))
        {
            return Err(invalid(format!(
                "the name contains {}: names are identifiers, without whitespace, backticks or control, bidi \
                 or zero-width characters",
                crate::display::escape_for_display(&format!("{c:?}"))
            )));
        }
        // The gate's own default has the same bounds (`default_timeout_ms`).
        let max = crate::config::MAX_TIMEOUT.as_millis() as u64;
        if let Some(t) = self.spec.timeout_ms
            && !(1..=max).contains(&t)
        {
            return Err(invalid(format!("timeout_ms must be from 1 ms to 30 days ({max} ms), got {t}")));
        }
        for r in &self.spec.rules {
            r.check().map_err(invalid)?;
        }
        Ok(())
    }
}

/// Builder for [`Tool`].
pub struct ToolBuilder {
    tool: Tool,
}

impl ToolBuilder {
    /// Sets the description shown to the person.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.tool.spec.description = d.into();
        self
    }
    /// Sets the JSON Schema of the arguments (default `{"type": "object"}`).
    pub fn parameters(mut self, schema: Value) -> Self {
        self.tool.spec.parameters = schema;
        self
    }
    /// Sets the approval mode (default [`ApprovalMode::Default`]).
    pub fn approval(mut self, mode: ApprovalMode) -> Self {
        self.tool.spec.approval = mode;
        self
    }
    /// Shorthand for `approval(ApprovalMode::Required)`.
    pub fn requires_approval(self) -> Self {
        self.approval(ApprovalMode::Required)
    }
    /// Sets the prompt; `{tool}`, `{args}` and `{description}` are substituted
    /// (default [`DEFAULT_PROMPT`]).
    pub fn prompt_template(mut self, t: impl Into<String>) -> Self {
        self.tool.spec.prompt_template = Some(t.into());
        self
    }
    /// Lets the person edit the arguments before approving (off by default).
    pub fn editable(mut self, yes: bool) -> Self {
        self.tool.spec.editable = yes;
        self
    }
    /// Sets where the tool comes from (default [`ToolSource::BuiltIn`]).
    pub fn source(mut self, s: ToolSource) -> Self {
        self.tool.spec.source = s;
        self
    }
    /// Marks the tool as only reading ([`ToolSpec::read_only`]).
    pub fn read_only(mut self, yes: bool) -> Self {
        self.tool.spec.read_only = yes;
        self
    }
    /// Marks the tool as destructive ([`ToolSpec::destructive`]).
    pub fn destructive(mut self, yes: bool) -> Self {
        self.tool.spec.destructive = yes;
        self
    }
    /// Sets how long a request for this tool waits, instead of the gate's default timeout.
    /// Stored in whole milliseconds.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.tool.spec.timeout_ms = Some(t.as_millis().min(u64::MAX as u128) as u64);
        self
    }
    /// Adds an argument rule; approval is required whenever it holds.
    pub fn rule(mut self, r: ArgRule) -> Self {
        self.tool.spec.rules.push(r);
        self
    }
    /// A rule as code: approval is required whenever `predicate(args)` returns true.
    pub fn custom_rule(
        mut self,
        description: impl Into<String>,
        predicate: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.tool.custom_rules.push(CustomRule { description: description.into(), predicate: Arc::new(predicate) });
        self
    }
    /// The function that runs the tool.
    pub fn executor<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ExecResult> + Send + 'static,
    {
        self.tool.executor = Some(Arc::new(move |v, _| Box::pin(f(v))));
        self
    }
    /// The function that runs the tool, told which call it runs ([`CallContext`]).
    pub fn executor_with_context<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ExecResult> + Send + 'static,
    {
        self.tool.executor = Some(Arc::new(move |v, c| Box::pin(f(v, c))));
        self
    }
    /// Finishes the definition. Nothing is validated until the tool is registered.
    pub fn build(self) -> Tool {
        self.tool
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn path_outside_normalizes() {
        let r = ArgRule::PathOutside { pointer: "/path".into(), prefixes: vec!["/tmp".into()] };
        assert!(!r.holds(&json!({"path": "/tmp/a.txt"})));
        assert!(!r.holds(&json!({"path": "/tmp"})));
        assert!(r.holds(&json!({"path": "/tmp/../etc/passwd"})));
        assert!(r.holds(&json!({"path": "/tmpfoo/x"})));
        assert!(r.holds(&json!({"path": "relative/x"})));
        assert!(r.holds(&json!({"path": 3})));
        assert!(r.holds(&json!({})));
    }

    #[test]
    fn other_rules() {
        let gt = ArgRule::GreaterThan { pointer: "/amount".into(), value: 100.0 };
        assert!(gt.holds(&json!({"amount": 101})));
        assert!(!gt.holds(&json!({"amount": 100})));
        assert!(gt.holds(&json!({"amount": "lots"})));
        let c = ArgRule::Contains { pointer: "/q".into(), substring: "DROP".into() };
        assert!(c.holds(&json!({"q": "drop table x"})));
        assert!(!c.holds(&json!({"q": "select 1"})));
        let one = ArgRule::OneOf { pointer: "/to".into(), values: vec![json!("boss@x")] };
        assert!(one.holds(&json!({"to": "boss@x"})));
        let not = ArgRule::NotOneOf { pointer: "/to".into(), values: vec![json!("me@x")] };
        assert!(not.holds(&json!({"to": "boss@x"})));
        assert!(!not.holds(&json!({"to": "me@x"})));
    }

    #[test]
    fn spec_rejects_unknown_fields() {
        let e = ToolSpec::from_json(json!({"name": "x", "aproval": "required"})).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Malformed);
    }
}
