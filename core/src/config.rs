//! [`GateConfig`]: a gate's configuration as plain data, read and validated once here for every
//! language. Python's keyword arguments, Node's options object and Swift's configuration record
//! all arrive as the same JSON object and go through [`GateConfig::from_json`]; errors name the
//! option as the caller spelled it (`bus_capacity` in Python, `busCapacity` in Node).

use crate::error::{Error, Result};
use crate::gate::{Gate, GateBuilder};
use crate::store::{AllowedResponders, Approvers};
use crate::token::TokenKeys;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The most events a subscriber may buffer (`bus_capacity`): the bus allocates every slot up front.
pub const MAX_BUS_CAPACITY: usize = 1 << 20;
/// The most resolved request ids a gate remembers to classify late responses (`remember_resolved`).
pub const MAX_REMEMBERED: usize = 10_000_000;
/// The longest approval timeout or token lifetime: 30 days.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

/// How the caller spells option names, so errors use the caller's own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `default_timeout_ms` (Rust, Python).
    Snake,
    /// `defaultTimeoutMs` (Node, Swift).
    Camel,
}

/// The language a gate is used from, so that what the gate says (its warnings on stderr, its
/// errors) names that language's own API: `Gate(deny_when_unobserved=False)` to a Python user,
/// `new Gate({ denyWhenUnobserved: false })` to a Node user, never the Rust builder's methods.
/// Each binding sets it in [`GateConfig::host`] when it builds its gate; Rust is the default.
///
/// ```
/// use signoff::Host;
/// assert_eq!(Host::Python.naming(), signoff::Naming::Snake);
/// assert_eq!(Host::Node.recover(), "gate.recover()");
/// assert_eq!(Host::Rust.recover(), "Gate::recover()");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Host {
    /// The Rust crate itself: `GateBuilder` methods.
    #[default]
    Rust,
    /// The Python package (`signoff.Gate(**options)`).
    Python,
    /// The Node package (`new Gate(options)`).
    Node,
    /// The Swift package (`Gate.open(config:keys:)`).
    Swift,
}

impl Host {
    /// How this language spells option names.
    pub fn naming(self) -> Naming {
        match self {
            Host::Rust | Host::Python => Naming::Snake,
            Host::Node | Host::Swift => Naming::Camel,
        }
    }

    /// How this language makes a gate with one boolean option set (`snake`, its snake_case
    /// name): `deny_when_unobserved(false)` on the Rust builder, `Gate(deny_when_unobserved=False)`
    /// in Python, `new Gate({ denyWhenUnobserved: false })` in Node,
    /// `Gate.open(config: GateConfig(denyWhenUnobserved: false))` in Swift.
    pub fn gate_with(self, snake: &str, value: bool) -> String {
        let name = self.naming().name(snake);
        match self {
            Host::Rust => format!("`GateBuilder::{name}({value})`"),
            Host::Python => format!("`Gate({name}={})`", if value { "True" } else { "False" }),
            Host::Node => format!("`new Gate({{ {name}: {value} }})`"),
            Host::Swift => format!("`Gate.open(config: GateConfig({name}: {value}))`"),
        }
    }

    /// The ways this language attaches an approver to a gate, for messages.
    pub fn approver_ways(self) -> &'static str {
        match self {
            Host::Rust => "`gate.on_request(...)`, `gate.on_request_inline(...)`, `gate.subscribe()`, a console",
            Host::Python => "`gate.on_request(handler)`, `gate.events()`, `gate.serve_console()`",
            Host::Node => "`gate.on('confirmation-request', listener)`, `gate.events()`, `await gate.serveConsole()`",
            Host::Swift => "`gate.onRequest { request in ... }`, `gate.events()`, `try gate.serveConsole()`",
        }
    }

    /// How this language answers a request from elsewhere, for messages.
    pub fn respond_after_pending(self) -> &'static str {
        match self {
            Host::Rust => "`gate.respond(...)` after listing `gate.pending()`",
            Host::Python => "`gate.respond(...)` after listing `gate.pending()`",
            Host::Node => "`gate.respond({ ... })` after listing `gate.pending()`",
            Host::Swift => "`try gate.respond(response:)` after listing `gate.pending()`",
        }
    }

    /// How this language calls the gate's recovery.
    pub fn recover(self) -> &'static str {
        match self {
            Host::Rust => "Gate::recover()",
            Host::Python | Host::Node => "gate.recover()",
            Host::Swift => "try gate.recover()",
        }
    }

    /// Where this language gives a gate its approval-token keys.
    pub fn token_keys(self) -> &'static str {
        match self {
            Host::Rust => "`GateBuilder::tokens`",
            Host::Python => "`Gate(token_keys=...)`",
            Host::Node => "`new Gate({ tokenKeys })`",
            Host::Swift => "`Gate.open(config:keys:)`",
        }
    }
}

/// Everything a gate can be configured with as data. Build one field by field, or read it from
/// JSON with [`from_json`](Self::from_json); [`build`](Self::build) validates it once and opens the
/// store and the audit log. Durations are milliseconds in the JSON form.
///
/// ```
/// use signoff::{GateConfig, Naming};
/// let config = GateConfig::from_json(&serde_json::json!({"default_timeout_ms": 30000}), Naming::Snake).unwrap();
/// let gate = config.build().unwrap();
/// assert_eq!(gate.policy().default_timeout.as_millis(), 30000);
///
/// let bad = GateConfig::from_json(&serde_json::json!({"busCapacity": 1e9}), Naming::Camel).unwrap_err();
/// assert_eq!(bad.kind(), signoff::ErrorKind::Config);
/// assert!(bad.to_string().contains("busCapacity"));
/// ```
#[derive(Clone, Default)]
pub struct GateConfig {
    /// The approval timeout for tools that set none (60 s).
    pub default_timeout: Option<Duration>,
    /// Replaces the keyword list that makes tools in the default mode ask.
    pub keywords: Option<Vec<String>>,
    /// Cancel requests at once when no approver is attached (default `true`).
    pub deny_when_unobserved: Option<bool>,
    /// DEVELOPMENT ONLY: every call runs without approval.
    pub dangerously_disable_gating: bool,
    /// Events buffered per subscriber before it lags (4,096; 1 to [`MAX_BUS_CAPACITY`]).
    pub bus_capacity: Option<usize>,
    /// Resolved ids remembered (65,536; 0 to [`MAX_REMEMBERED`]).
    pub remember_resolved: Option<usize>,
    /// Accept responses only from these responders.
    pub allowed_responders: Option<Vec<String>>,
    /// Who may approve which tools (exclusive with `allowed_responders`).
    pub approvers: Option<Approvers>,
    /// Refuse an approval from the request's own session (needs `approvers`, or makes one).
    pub forbid_self_approval: bool,
    /// Keep requests in this SQLite file.
    pub store_path: Option<PathBuf>,
    /// `synchronous = FULL` for the store (needs `store_path`).
    pub synchronous_full: bool,
    /// Keep requests in a store shared with every gate that opens the same one (exclusive with
    /// `store_path`): `sqlite:<path>`, one file that processes of one machine share
    /// ([`SqliteSharedStore`](crate::SqliteSharedStore)), or a PostgreSQL database
    /// (`postgres://...`, cargo feature `postgres`) for many hosts.
    pub store_url: Option<String>,
    /// This gate's owner name in the shared store (see
    /// `PostgresOptions::owner`, `SqliteSharedOptions::owner`); needs `store_url`.
    pub store_owner: Option<String>,
    /// The PostgreSQL schema for the tables (default: the search path); needs `store_url`.
    pub store_schema: Option<String>,
    /// Keep the audit chain in the store's PostgreSQL database (table `signoff_audit`, one
    /// chain for every process; `PostgresAuditSink`); needs
    /// `store_url`, exclusive with `audit_path`.
    pub audit_in_store: bool,
    /// Append the audit chain to this JSON Lines file.
    pub audit_path: Option<PathBuf>,
    /// Rotate the audit log at this many bytes (needs `audit_path`; at least 1).
    pub audit_rotate_bytes: Option<u64>,
    /// Approval-token keys.
    pub token_keys: Option<TokenKeys>,
    /// How long an issued token is valid (needs `token_keys`).
    pub token_ttl: Option<Duration>,
    /// The language the gate is used from, so its warnings and errors name that language's API
    /// ([`Host::Rust`] by default; each binding sets its own).
    pub host: Host,
}

impl std::fmt::Debug for GateConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateConfig")
            .field("default_timeout", &self.default_timeout)
            .field("store_path", &self.store_path)
            .field("store_url", &self.store_url.as_ref().map(|_| "redacted"))
            .field("store_owner", &self.store_owner)
            .field("audit_path", &self.audit_path)
            .field("token_keys", &self.token_keys.as_ref().map(|_| "redacted"))
            .finish_non_exhaustive()
    }
}

/// Every option: its snake_case name and what it holds.
const OPTIONS: [(&str, Kind); 19] = [
    ("default_timeout_ms", Kind::Millis),
    ("keywords", Kind::Strings),
    ("deny_when_unobserved", Kind::Bool),
    ("dangerously_disable_gating", Kind::Bool),
    ("bus_capacity", Kind::Count { min: 1, max: MAX_BUS_CAPACITY as u64 }),
    ("remember_resolved", Kind::Count { min: 0, max: MAX_REMEMBERED as u64 }),
    ("allowed_responders", Kind::Strings),
    ("approvers", Kind::ApproverMap),
    ("forbid_self_approval", Kind::Bool),
    ("store_path", Kind::Path),
    ("synchronous_full", Kind::Bool),
    ("store_url", Kind::Text),
    ("store_owner", Kind::Text),
    ("store_schema", Kind::Text),
    ("audit_in_store", Kind::Bool),
    ("audit_path", Kind::Path),
    ("audit_rotate_bytes", Kind::Count { min: 1, max: 1 << 53 }),
    ("token_keys", Kind::Keys),
    ("token_ttl_ms", Kind::Millis),
];

#[derive(Clone, Copy)]
enum Kind {
    Millis,
    Strings,
    Bool,
    Count { min: u64, max: u64 },
    Path,
    Text,
    ApproverMap,
    Keys,
}

fn camel(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

impl Naming {
    /// A snake_case name as this naming spells it.
    ///
    /// ```
    /// assert_eq!(signoff::Naming::Camel.name("arguments_digest"), "argumentsDigest");
    /// assert_eq!(signoff::Naming::Snake.name("arguments_digest"), "arguments_digest");
    /// ```
    pub fn name(self, snake: &str) -> String {
        match self {
            Naming::Snake => snake.to_owned(),
            Naming::Camel => camel(snake),
        }
    }
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| *c != '_' && *c != '-').flat_map(char::to_lowercase).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push((prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

impl GateConfig {
    /// Reads a configuration from a JSON object whose keys are spelled per `naming`; `null`
    /// values mean "not set". Every mistake is a `config` error that names the option as the
    /// caller spelled it: an unknown option (with a suggestion), a value of the wrong type, a
    /// number that is negative, fractional, not finite or out of range (a bus capacity of 1e9
    /// is refused here, never allocated), an option that needs another one, or two options that
    /// exclude each other.
    pub fn from_json(options: &Value, naming: Naming) -> Result<GateConfig> {
        let c = Self::read_json(options, naming)?;
        c.validate(naming)?;
        Ok(c)
    }

    /// Every option's name in `naming`, in a fixed order: what a binding that spells the options
    /// out (Swift's `GateConfig` record) checks itself against, so an option added here is not
    /// silently missing there.
    pub fn option_names(naming: Naming) -> impl Iterator<Item = String> {
        OPTIONS.iter().map(move |(name, _)| naming.name(name))
    }

    /// [`from_json`](Self::from_json) without the rules between options, for a binding that
    /// adds fields the JSON cannot carry (a `TokenKeys` or an `Approvers` object with a callback)
    /// and then calls [`validate`](Self::validate) itself.
    pub fn read_json(options: &Value, naming: Naming) -> Result<GateConfig> {
        let Value::Object(map) = options else {
            return Err(Error::Config("gate options must be an object".into()));
        };
        let mut c = GateConfig::default();
        for (key, value) in map {
            let Some((snake, kind)) = OPTIONS.iter().find(|(s, _)| naming.name(s) == *key) else {
                return Err(unknown(key, naming));
            };
            if value.is_null() {
                continue;
            }
            let name = key.as_str();
            match (*snake, *kind) {
                ("default_timeout_ms", _) => c.default_timeout = Some(millis(name, value)?),
                ("token_ttl_ms", _) => c.token_ttl = Some(millis(name, value)?),
                ("keywords", _) => c.keywords = Some(strings(name, value)?),
                ("allowed_responders", _) => c.allowed_responders = Some(strings(name, value)?),
                ("deny_when_unobserved", _) => c.deny_when_unobserved = Some(boolean(name, value)?),
                ("dangerously_disable_gating", _) => c.dangerously_disable_gating = boolean(name, value)?,
                ("forbid_self_approval", _) => c.forbid_self_approval = boolean(name, value)?,
                ("synchronous_full", _) => c.synchronous_full = boolean(name, value)?,
                ("audit_in_store", _) => c.audit_in_store = boolean(name, value)?,
                ("bus_capacity", Kind::Count { min, max }) => {
                    c.bus_capacity = Some(count(name, value, min, max)? as usize)
                }
                ("remember_resolved", Kind::Count { min, max }) => {
                    c.remember_resolved = Some(count(name, value, min, max)? as usize)
                }
                ("audit_rotate_bytes", Kind::Count { min, max }) => {
                    c.audit_rotate_bytes = Some(count(name, value, min, max)?)
                }
                ("store_path", _) => c.store_path = Some(path(name, value)?),
                ("store_url", _) => c.store_url = Some(text(name, value)?),
                ("store_owner", _) => c.store_owner = Some(text(name, value)?),
                ("store_schema", _) => c.store_schema = Some(text(name, value)?),
                ("audit_path", _) => c.audit_path = Some(path(name, value)?),
                ("approvers", _) => c.approvers = Some(approver_map(name, value)?),
                ("token_keys", _) => {
                    let text = value
                        .as_str()
                        .ok_or_else(|| wrong(name, "a string of `key_id:base64secret` entries", value))?;
                    c.token_keys = Some(TokenKeys::parse(text).map_err(|e| Error::Config(format!("`{name}`: {e}")))?);
                }
                _ => unreachable!("every option is handled"),
            }
        }
        Ok(c)
    }

    /// Checks the rules between options and every range, naming options per `naming`.
    pub fn validate(&self, naming: Naming) -> Result<()> {
        let n = |s: &str| naming.name(s);
        let needs = |what: &str, other: &str| Error::Config(format!("`{}` needs `{}`", n(what), n(other)));
        if self.synchronous_full && self.store_path.is_none() {
            return Err(needs("synchronous_full", "store_path"));
        }
        if self.store_url.is_some() && self.store_path.is_some() {
            return Err(Error::Config(format!(
                "pass either `{}` (SQLite, one process) or `{}` (PostgreSQL, many): not both",
                n("store_path"),
                n("store_url")
            )));
        }
        if let Some(schema) = &self.store_schema
            && !crate::store::is_schema_name(schema)
        {
            return Err(Error::Config(format!(
                "`{}`: use 1 to 63 ASCII letters, digits or underscores, got {schema:?}",
                n("store_schema")
            )));
        }
        if let Some(url) = &self.store_url {
            crate::store::check_store_url(url).map_err(|e| Error::Config(format!("`{}`: {e}", n("store_url"))))?;
            if crate::store::sqlite_path(url).is_some() {
                for (set, name) in
                    [(self.store_schema.is_some(), "store_schema"), (self.audit_in_store, "audit_in_store")]
                {
                    if set {
                        return Err(Error::Config(format!(
                            "`{}` applies to a PostgreSQL `{}`, not to `sqlite:`",
                            n(name),
                            n("store_url")
                        )));
                    }
                }
            }
        }
        if self.audit_in_store && self.store_url.is_none() {
            return Err(needs("audit_in_store", "store_url"));
        }
        if self.audit_in_store && self.audit_path.is_some() {
            return Err(Error::Config(format!(
                "pass either `{}` (a JSON Lines file) or `{}` (the database's table): not both",
                n("audit_path"),
                n("audit_in_store")
            )));
        }
        if self.store_owner.is_some() && self.store_url.is_none() {
            return Err(needs("store_owner", "store_url"));
        }
        if self.store_schema.is_some() && self.store_url.is_none() {
            return Err(needs("store_schema", "store_url"));
        }
        if self.audit_rotate_bytes.is_some() && self.audit_path.is_none() {
            return Err(needs("audit_rotate_bytes", "audit_path"));
        }
        if self.token_ttl.is_some() && self.token_keys.is_none() {
            return Err(needs("token_ttl_ms", "token_keys"));
        }
        if self.allowed_responders.is_some() && (self.approvers.is_some() || self.forbid_self_approval) {
            return Err(Error::Config(format!(
                "pass either `{}` or `{}` (with `{}`): both decide who may answer",
                n("allowed_responders"),
                n("approvers"),
                n("forbid_self_approval")
            )));
        }
        for (what, d) in [("default_timeout_ms", self.default_timeout), ("token_ttl_ms", self.token_ttl)] {
            if let Some(d) = d
                && (d.is_zero() || d > MAX_TIMEOUT)
            {
                return Err(Error::Config(format!(
                    "`{}` must be from 1 ms to 30 days, got {} ms",
                    n(what),
                    d.as_millis()
                )));
            }
        }
        if let Some(b) = self.bus_capacity
            && !(1..=MAX_BUS_CAPACITY).contains(&b)
        {
            return Err(Error::Config(format!(
                "`{}` must be from 1 to {MAX_BUS_CAPACITY}, got {b}",
                n("bus_capacity")
            )));
        }
        if let Some(r) = self.remember_resolved
            && r > MAX_REMEMBERED
        {
            return Err(Error::Config(format!(
                "`{}` must be at most {MAX_REMEMBERED}, got {r}",
                n("remember_resolved")
            )));
        }
        if self.audit_rotate_bytes == Some(0) {
            return Err(Error::Config(format!("`{}` must be at least 1", n("audit_rotate_bytes"))));
        }
        Ok(())
    }

    /// Validates (Rust names) and turns the configuration into a builder, opening the store and
    /// the audit log. Add tools, or an authenticator of your own, before building.
    ///
    /// Errors: `config` for an invalid combination or value, `store` when the database cannot be
    /// opened (another gate holds it, or it is not a signoff database), `io` when the audit log
    /// cannot be opened.
    pub fn builder(&self) -> Result<GateBuilder> {
        self.validate(Naming::Snake)?;
        let mut b = Gate::builder().host(self.host).dangerously_disable_gating(self.dangerously_disable_gating);
        if let Some(t) = self.default_timeout {
            b = b.default_timeout(t);
        }
        if let Some(k) = &self.keywords {
            b = b.keywords(k.clone());
        }
        if let Some(d) = self.deny_when_unobserved {
            b = b.deny_when_unobserved(d);
        }
        if let Some(n) = self.bus_capacity {
            b = b.bus_capacity(n);
        }
        if let Some(n) = self.remember_resolved {
            b = b.remember_resolved(n);
        }
        if let Some(who) = &self.allowed_responders {
            b = b.authenticator(Arc::new(AllowedResponders(who.clone())));
        }
        if self.approvers.is_some() || self.forbid_self_approval {
            let a = self.approvers.clone().unwrap_or_default();
            let a = if self.forbid_self_approval { a.forbid_self_approval(true) } else { a };
            b = b.authenticator(Arc::new(a));
        }
        if let Some(keys) = &self.token_keys {
            b = b.tokens(keys.clone());
        }
        if let Some(ttl) = self.token_ttl {
            b = b.token_ttl(ttl);
        }
        if let Some(p) = &self.store_path {
            let options = crate::SqliteOptions { synchronous_full: self.synchronous_full };
            b = b.store(crate::SqliteStore::open_with(p, options)?);
        }
        if let Some(url) = &self.store_url {
            b = match crate::store::sqlite_path(url) {
                Some(path) => {
                    let options = crate::SqliteSharedOptions { owner: self.store_owner.clone(), sweep_interval: None };
                    b.store(crate::SqliteSharedStore::open(path, options)?)
                }
                None => self.postgres(b, url)?,
            };
        }
        if let Some(p) = &self.audit_path {
            let options = crate::AuditOptions { rotate_bytes: self.audit_rotate_bytes };
            b = b.audit(crate::JsonlAuditSink::open_with(p, options)?);
        }
        Ok(b)
    }

    /// The PostgreSQL store (and the audit table, with `audit_in_store`).
    #[cfg(feature = "postgres")]
    fn postgres(&self, b: GateBuilder, url: &str) -> Result<GateBuilder> {
        let options = crate::PostgresOptions {
            owner: self.store_owner.clone(),
            schema: self.store_schema.clone(),
            sweep_interval: None,
            operation_timeout: None,
        };
        let mut b = b.store(crate::PostgresStore::connect(url, options)?);
        if self.audit_in_store {
            b = b.audit(crate::PostgresAuditSink::connect(url, self.store_schema.as_deref())?);
        }
        Ok(b)
    }

    #[cfg(not(feature = "postgres"))]
    fn postgres(&self, _b: GateBuilder, _url: &str) -> Result<GateBuilder> {
        Err(Error::Config(
            "store_url: this build of signoff has no PostgreSQL support (cargo feature `postgres`)".into(),
        ))
    }

    /// Validates and builds the gate (see [`builder`](Self::builder)).
    pub fn build(&self) -> Result<Gate> {
        self.builder()?.build()
    }
}

fn unknown(key: &str, naming: Naming) -> Error {
    let names: Vec<String> = OPTIONS.iter().map(|(s, _)| naming.name(s)).collect();
    unknown_among(key, &names, "gate option")
}

/// The name among `names` that `key` most likely misspells, for a "did you mean" in a message:
/// the same name spelled with other case, `_` or `-`, else the nearest within three edits.
/// The one rule for every "did you mean" signoff says (options, tool names, commands).
///
/// ```
/// let tools = ["fs__read_text_file", "fs__write_file"];
/// assert_eq!(signoff::config::nearest("fs__read_txt_file", &tools), Some("fs__read_text_file"));
/// assert_eq!(signoff::config::nearest("mcp_proxy", &["audit", "mcp-proxy"]), Some("mcp-proxy"));
/// assert_eq!(signoff::config::nearest("git__push", &tools), None);
/// ```
pub fn nearest<'a, S: AsRef<str>>(key: &str, names: &'a [S]) -> Option<&'a str> {
    let names = names.iter().map(AsRef::as_ref);
    names.clone().find(|n| squash(n) == squash(key)).or_else(|| {
        names.map(|n| (edit_distance(n, key), n)).filter(|(d, _)| *d <= 3).min_by_key(|(d, _)| *d).map(|(_, n)| n)
    })
}

/// The `config` error for an unknown option `key`, as [`GateConfig::from_json`] and
/// [`OptionReader`] give it: the closest of `names` suggested (a different case or underscores,
/// or at most three edits away), or else every name listed. For a binding whose own API takes
/// options the core does not (Python's `default_timeout` in seconds beside `default_timeout_ms`),
/// so the suggestion is among the names the caller may write.
///
/// ```
/// let names = ["default_timeout".to_owned(), "default_timeout_ms".to_owned()];
/// let e = signoff::config::unknown_option("default_timout", &names, "gate option");
/// assert!(e.to_string().contains("did you mean `default_timeout`?"));
/// ```
pub fn unknown_option(key: &str, names: &[String], what: &str) -> Error {
    unknown_among(key, names, what)
}

fn unknown_among(key: &str, names: &[String], what: &str) -> Error {
    match nearest(key, names) {
        Some(s) => Error::Config(format!("unknown {what} `{key}` (did you mean `{s}`?)")),
        None => Error::Config(format!("unknown {what} `{key}`; the options are: {}", names.join(", "))),
    }
}

/// Reads a JSON object of options the way [`GateConfig::from_json`] does, for crates that
/// configure something beside the gate (the approval console), so every language gets the same
/// checks and the same messages: keys spelled per [`Naming`], an unknown key refused with a
/// suggestion, `null` meaning "not set", and each mistake a `config` error naming the option as
/// the caller spelled it.
///
/// ```
/// use signoff::config::{OptionReader, Naming};
/// let v = serde_json::json!({"signInTtlMs": 60000, "title": null});
/// let o = OptionReader::new(&v, Naming::Camel, "console option", &["sign_in_ttl_ms", "title"]).unwrap();
/// assert_eq!(o.millis("sign_in_ttl_ms").unwrap().unwrap().as_secs(), 60);
/// assert_eq!(o.text("title").unwrap(), None);
/// let bad = serde_json::json!({"signinTtl": 1});
/// let e = OptionReader::new(&bad, Naming::Camel, "console option", &["sign_in_ttl_ms"]).unwrap_err();
/// assert!(e.to_string().contains("did you mean `signInTtlMs`"));
/// ```
#[derive(Debug)]
pub struct OptionReader<'a> {
    map: &'a serde_json::Map<String, Value>,
    naming: Naming,
}

impl<'a> OptionReader<'a> {
    /// Checks that `options` is an object whose keys are all among `known` (snake_case names,
    /// spelled per `naming`); `what` names an option in messages (e.g. `"console option"`).
    pub fn new(options: &'a Value, naming: Naming, what: &str, known: &[&str]) -> Result<Self> {
        let Value::Object(map) = options else {
            return Err(Error::Config(format!("{what}s must be an object")));
        };
        let names: Vec<String> = known.iter().map(|s| naming.name(s)).collect();
        if let Some(key) = map.keys().find(|k| !names.contains(k)) {
            return Err(unknown_among(key, &names, what));
        }
        Ok(OptionReader { map, naming })
    }

    /// The option's name as the caller spells it.
    pub fn name(&self, snake: &str) -> String {
        self.naming.name(snake)
    }

    fn get(&self, snake: &str) -> Option<(String, &'a Value)> {
        let name = self.name(snake);
        self.map.get(&name).filter(|v| !v.is_null()).map(|v| (name, v))
    }

    /// `true` or `false`.
    pub fn bool(&self, snake: &str) -> Result<Option<bool>> {
        self.get(snake).map(|(n, v)| boolean(&n, v)).transpose()
    }
    /// A non-empty string.
    pub fn text(&self, snake: &str) -> Result<Option<String>> {
        self.get(snake).map(|(n, v)| text(&n, v)).transpose()
    }
    /// A non-empty path.
    pub fn path(&self, snake: &str) -> Result<Option<PathBuf>> {
        self.get(snake).map(|(n, v)| path(&n, v)).transpose()
    }
    /// Whole milliseconds, 1 ms to 30 days.
    pub fn millis(&self, snake: &str) -> Result<Option<Duration>> {
        self.get(snake).map(|(n, v)| millis(&n, v)).transpose()
    }
    /// A whole number from `min` to `max`.
    pub fn count(&self, snake: &str, min: u64, max: u64) -> Result<Option<u64>> {
        self.get(snake).map(|(n, v)| count(&n, v, min, max)).transpose()
    }
    /// An object of strings, in key order.
    pub fn string_map(&self, snake: &str) -> Result<Option<Vec<(String, String)>>> {
        self.get(snake)
            .map(|(n, v)| {
                let expected = "an object mapping names to strings";
                let map = v.as_object().ok_or_else(|| wrong(&n, expected, v))?;
                map.iter()
                    .map(|(k, s)| s.as_str().map(|s| (k.clone(), s.to_owned())).ok_or_else(|| wrong(&n, expected, v)))
                    .collect()
            })
            .transpose()
    }
}

fn wrong(name: &str, expected: &str, got: &Value) -> Error {
    let got = match got {
        Value::String(s) => format!("the string {s:?}"),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
        Value::Null => "null".to_owned(),
    };
    Error::Config(format!("`{name}` must be {expected}, got {got}"))
}

fn count(name: &str, v: &Value, min: u64, max: u64) -> Result<u64> {
    let expected = format!("a whole number from {min} to {max}");
    let n = match v {
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => Some(u),
            (None, Some(f)) if f.fract() == 0.0 && f >= 0.0 && f <= max as f64 => Some(f as u64),
            _ => None,
        },
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(wrong(name, &expected, v)),
    }
}

fn millis(name: &str, v: &Value) -> Result<Duration> {
    let max = MAX_TIMEOUT.as_millis() as u64;
    let ms = count(name, v, 1, max)
        .map_err(|_| wrong(name, &format!("a whole number of milliseconds from 1 to {max} (30 days)"), v))?;
    Ok(Duration::from_millis(ms))
}

fn boolean(name: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| wrong(name, "true or false", v))
}

fn strings(name: &str, v: &Value) -> Result<Vec<String>> {
    let list = v.as_array().ok_or_else(|| wrong(name, "a list of strings", v))?;
    list.iter().map(|s| s.as_str().map(str::to_owned).ok_or_else(|| wrong(name, "a list of strings", v))).collect()
}

fn path(name: &str, v: &Value) -> Result<PathBuf> {
    match v.as_str() {
        Some(s) if !s.is_empty() => Ok(PathBuf::from(s)),
        _ => Err(wrong(name, "a non-empty path", v)),
    }
}

fn text(name: &str, v: &Value) -> Result<String> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() => Ok(s.to_owned()),
        _ => Err(wrong(name, "a non-empty string", v)),
    }
}

fn approver_map(name: &str, v: &Value) -> Result<Approvers> {
    let expected = "an object mapping tool names (or \"*\" for every tool) to lists of approvers";
    let map = v.as_object().ok_or_else(|| wrong(name, expected, v))?;
    let mut a = Approvers::new();
    for (tool, who) in map {
        let who = strings(&format!("{name}.{tool}"), who)?;
        a = if tool == "*" { a.allow_all_tools(who) } else { a.allow(tool.clone(), who) };
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::{GateConfig, Host};
    use crate::gate::no_approver_warning;

    fn gate(host: Host) -> crate::Gate {
        GateConfig { host, ..GateConfig::default() }.build().unwrap()
    }

    #[test]
    fn the_no_approver_warning_names_the_callers_own_api() {
        let rust = no_approver_warning(Host::Rust, "delete_file");
        assert!(rust.contains("`delete_file`") && rust.contains("no approver is attached"), "{rust}");
        assert!(rust.contains("`GateBuilder::deny_when_unobserved(false)`"), "{rust}");
        assert!(rust.contains("`gate.on_request_inline(...)`"), "{rust}");

        let python = no_approver_warning(Host::Python, "delete_file");
        assert!(python.contains("`Gate(deny_when_unobserved=False)`"), "{python}");
        assert!(python.contains("`gate.on_request(handler)`") && python.contains("`gate.serve_console()`"), "{python}");
        let node = no_approver_warning(Host::Node, "delete_file");
        assert!(node.contains("`new Gate({ denyWhenUnobserved: false })`"), "{node}");
        assert!(node.contains("`gate.on('confirmation-request', listener)`"), "{node}");
        let swift = no_approver_warning(Host::Swift, "delete_file");
        assert!(swift.contains("`Gate.open(config: GateConfig(denyWhenUnobserved: false))`"), "{swift}");
        assert!(swift.contains("`gate.onRequest { request in ... }`"), "{swift}");
        for text in [&python, &node, &swift] {
            for rust_only in ["GateBuilder", "on_request_inline", "deny_when_unobserved(false)", "subscribe()"] {
                assert!(!text.contains(rust_only), "{rust_only} in {text}");
            }
        }
        for text in [&node, &swift] {
            assert!(!text.contains("deny_when_unobserved") && !text.contains("on_request"), "{text}");
        }
    }

    #[test]
    fn recovery_and_token_errors_name_the_callers_own_api() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _guard = rt.enter();
        for (host, recover, keys) in [
            (Host::Rust, "`Gate::recover()` runs once per gate", "(`GateBuilder::tokens`)"),
            (Host::Python, "`gate.recover()` runs once per gate", "(`Gate(token_keys=...)`)"),
            (Host::Node, "`gate.recover()` runs once per gate", "(`new Gate({ tokenKeys })`)"),
            (Host::Swift, "`try gate.recover()` runs once per gate", "(`Gate.open(config:keys:)`)"),
        ] {
            let g = gate(host);
            g.recover().unwrap();
            let e = g.recover().unwrap_err().to_string();
            assert!(e.contains(recover), "{host:?}: {e}");
            let e = g.issue_token(&uuid::Uuid::new_v4(), "alice").unwrap_err().to_string();
            assert!(e.contains(&format!("this gate has no token keys {keys}")), "{host:?}: {e}");
            if host != Host::Rust {
                assert!(!e.contains("GateBuilder"), "{e}");
            }
        }
    }
}
