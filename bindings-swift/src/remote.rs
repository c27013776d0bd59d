//! Remote approval with signed tokens, who may approve, the durable store and recovery after a
//! restart, and the hash-chained audit log: the core's `token`, `sqlite`, `audit`,
//! `gate::tokens` and `gate::recovery`, configured through `Gate.open`. Every check (signature,
//! expiry, approver, single use, guarded state changes, never re-running an interrupted call,
//! the chain and its anchor) is the core's.

use crate::error::{SignoffError, config};
use crate::types::{ConfirmationRequest, RequestId, ToolResult, parse_value};
use crate::{Gate, runtime};
use serde_json::Value;
use signoff as core;
use std::collections::HashMap;
use std::sync::Arc;

pub use signoff::{ChainHead, ChainProblemKind, MarkerClaims, RecordState, TokenClaims};

// ---------------------------------------------------------------------------------------------
// tokens

/// A token signing key (the core's `Secret`: at least 32 bytes, zeroed when released). Its bytes
/// stay in Rust; load it from configuration (`fromBase64`, or `TokenKeys.parse` / `fromEnv` /
/// `fromFile`) so tokens stay valid across a restart.
#[derive(uniffi::Object)]
pub struct Secret {
    inner: core::Secret,
}

#[uniffi::export]
impl Secret {
    /// Raw key bytes (at least 32). Errors: `config`.
    #[uniffi::constructor]
    pub fn new(bytes: Vec<u8>) -> Result<Arc<Self>, SignoffError> {
        Ok(Arc::new(Secret { inner: core::Secret::new(bytes)? }))
    }

    /// Base64 key material (standard or URL-safe, padded or not). Errors: `config`.
    #[uniffi::constructor]
    pub fn from_base64(text: String) -> Result<Arc<Self>, SignoffError> {
        Ok(Arc::new(Secret { inner: core::Secret::from_base64(&text)? }))
    }

    /// 32 random bytes from the operating system (tests and development).
    #[uniffi::constructor]
    pub fn generate() -> Arc<Self> {
        Arc::new(Secret { inner: core::Secret::generate() })
    }

    /// The base64 form, to store in configuration (this reveals the key).
    pub fn to_base64(&self) -> String {
        self.inner.to_base64()
    }
}

/// The keys a gate signs and verifies approval tokens with (the core's `TokenKeys`): the current
/// key signs, older keys still verify tokens issued before a rotation. Immutable: `rotate` and
/// `withVerifyOnly` return new key sets.
#[derive(uniffi::Object)]
pub struct TokenKeys {
    inner: core::TokenKeys,
}

fn keys(r: core::Result<core::TokenKeys>) -> Result<Arc<TokenKeys>, SignoffError> {
    Ok(Arc::new(TokenKeys { inner: r? }))
}

#[uniffi::export]
impl TokenKeys {
    /// One key, which signs and verifies. Key ids are 1-64 characters of `[A-Za-z0-9_-]`.
    /// Errors: `config`.
    #[uniffi::constructor]
    pub fn new(key_id: String, secret: Arc<Secret>) -> Result<Arc<Self>, SignoffError> {
        keys(core::TokenKeys::new(key_id, secret.inner.clone()))
    }

    /// The configuration format: `key_id:base64secret` entries separated by commas or newlines,
    /// current key first; blank lines and `#` comments are ignored. Errors: `config`.
    #[uniffi::constructor]
    pub fn parse(text: String) -> Result<Arc<Self>, SignoffError> {
        keys(core::TokenKeys::parse(&text))
    }

    /// The configuration format from an environment variable. Errors: `config`.
    #[uniffi::constructor]
    pub fn from_env(name: String) -> Result<Arc<Self>, SignoffError> {
        keys(core::TokenKeys::from_env(&name))
    }

    /// The configuration format from a file (e.g. a mounted secret). Errors: `config`.
    #[uniffi::constructor]
    pub fn from_file(path: String) -> Result<Arc<Self>, SignoffError> {
        keys(core::TokenKeys::from_file(path))
    }

    /// A new key set where `keyId` is the current key; these keys keep verifying.
    pub fn rotate(&self, key_id: String, secret: Arc<Secret>) -> Result<Arc<TokenKeys>, SignoffError> {
        keys(self.inner.clone().rotate(key_id, secret.inner.clone()))
    }

    /// A new key set with a key that verifies but does not sign (a retired key). Errors: `config`
    /// (a duplicate or bad key id).
    pub fn with_verify_only(&self, key_id: String, secret: Arc<Secret>) -> Result<Arc<TokenKeys>, SignoffError> {
        keys(self.inner.clone().with_verify_only(key_id, secret.inner.clone()))
    }

    /// The id of the key new tokens are signed with.
    pub fn current_key_id(&self) -> String {
        self.inner.current_key_id().to_owned()
    }

    /// Every key id, current first.
    pub fn key_ids(&self) -> Vec<String> {
        self.inner.key_ids().into_iter().map(str::to_owned).collect()
    }
}

/// What a verified approval token says (`Gate.inspectToken`).
#[uniffi::remote(Record)]
pub struct TokenClaims {
    /// The request the token answers (also the token's nonce).
    pub request_id: RequestId,
    /// The request's tool.
    pub tool: String,
    /// `sha256:<hex>` of the canonical JSON of the request's arguments.
    pub arguments_digest: String,
    /// The request's session.
    pub session_id: String,
    /// The only approver who may present this token.
    pub approver: String,
    /// When it was issued (epoch ms).
    pub issued_at_ms: u64,
    /// When it stops being accepted (epoch ms): the request's deadline, or sooner with
    /// `tokenTtlMs`.
    pub expires_at_ms: u64,
    /// The id of the key that signed it.
    pub key_id: String,
}

/// What an accepted approval marker says (`Gate.acceptApprovalMarker`).
#[uniffi::remote(Record)]
pub struct MarkerClaims {
    /// Unique per marker.
    pub nonce: RequestId,
    /// The request the person answered (nil for a call a session grant covered).
    pub request_id: Option<RequestId>,
    /// The tool, by the name the receiving gate knows it.
    pub tool: String,
    /// `sha256:<hex>` of the canonical JSON of the approved arguments.
    pub arguments_digest: String,
    /// Who approved.
    pub approver: String,
    /// When it was issued (epoch ms).
    pub issued_at_ms: u64,
    /// When it stops being accepted (epoch ms).
    pub expires_at_ms: u64,
    /// The id of the key that signed it.
    pub key_id: String,
}

/// The `_meta` key an approval marker travels under in an MCP request (`"dev.signoff/approval"`).
#[uniffi::export]
pub fn marker_meta_key() -> String {
    signoff::MARKER_META_KEY.to_owned()
}

// ---------------------------------------------------------------------------------------------
// configuration

/// Everything a gate can be configured with, for `Gate.open(config:keys:)` (the only configured
/// path; `Gate()` is the core's defaults): the core's `GateConfig`, with the option names Python
/// (`Gate(store_path=...)`) and Node (`new Gate({ storePath })`) use. nil or false options are not
/// set (the core's defaults). The core validates it, as for Python and Node: every mistake is a
/// `config` error that names the option as Swift spells it (`busCapacity`): a value out of range
/// (a zero or absurd bus capacity, a timeout of 0 ms or beyond 30 days), an option that needs
/// another one (`synchronousFull` needs `storePath`, `storeOwner` and `storeSchema` need
/// `storeUrl`, `auditRotateBytes` needs `auditPath`, `tokenTtlMs` needs token keys), or two that
/// exclude each other (`allowedResponders` and `approvers` / `forbidSelfApproval`, `storePath`
/// and `storeUrl`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, uniffi::Record)]
#[serde(rename_all = "camelCase")]
pub struct GateConfig {
    /// The approval timeout for tools that set none (60,000; 1 ms to 30 days).
    #[uniffi(default = None)]
    pub default_timeout_ms: Option<u64>,
    /// Replaces the keyword list that makes tools in the default mode ask.
    #[uniffi(default = None)]
    pub keywords: Option<Vec<String>>,
    /// Cancel a request at once when no approver is attached (no approver subscription or
    /// handler; observers do not count), and every pending request when the last one goes away.
    /// Remotely approved gates (tokens, a store) set false.
    #[uniffi(default = true)]
    pub deny_when_unobserved: bool,
    /// DEVELOPMENT ONLY: every call runs without approval.
    #[uniffi(default = false)]
    pub dangerously_disable_gating: bool,
    /// Events buffered per subscriber before it lags (4,096; 1 to 1,048,576).
    #[uniffi(default = None)]
    pub bus_capacity: Option<u64>,
    /// Resolved request ids remembered to tell a late answer from an unknown one (65,536).
    #[uniffi(default = None)]
    pub remember_resolved: Option<u64>,
    /// Accept responses only from these responders (the core's `AllowedResponders`).
    #[uniffi(default = None)]
    pub allowed_responders: Option<Vec<String>>,
    /// Who may approve which tools (the core's `Approvers`): tool name → approvers, `"*"` for
    /// every tool. Approvals must then name their `responder`; denials are accepted from anyone.
    #[uniffi(default = None)]
    pub approvers: Option<HashMap<String, Vec<String>>>,
    /// Refuse an approval whose responder is the request's own session id (`Approvers`).
    #[uniffi(default = false)]
    pub forbid_self_approval: bool,
    /// Keep requests and their states in this SQLite file (the core's `SqliteStore`; its
    /// directory must exist): pending requests survive the process (`recover()`). One gate per
    /// file: a second opener fails with `store` until the first is closed.
    #[uniffi(default = None)]
    pub store_path: Option<String>,
    /// Every state change of the store also waits for the disk (survives power loss; slower).
    #[uniffi(default = false)]
    pub synchronous_full: bool,
    /// Keep requests in this PostgreSQL database (`postgres://user:password@host:port/db`, or
    /// `host=... user=...`; the core's `PostgresStore`), shared with every gate that connects to
    /// it: gates in many processes and hosts list (`pending()`) and answer (`respond`,
    /// `respondToken`) each other's requests, and a waiting call wakes when another process
    /// decides. Deadlines follow the database's clock; `denyWhenUnobserved` does not apply.
    /// Not with `storePath`. `config` for a malformed URL, `store` when the server cannot be
    /// reached (after the connect timeout: 10 s unless the URL sets `connect_timeout`).
    #[uniffi(default = None)]
    pub store_url: Option<String>,
    /// With `storeUrl`: this process's stable name in the shared store. `recover()` picks up only
    /// this owner's unfinished requests; two live processes must never share one. Default: a
    /// new random name (nothing to recover).
    #[uniffi(default = None)]
    pub store_owner: Option<String>,
    /// With `storeUrl`: the PostgreSQL schema for the tables (created if missing; 1 to 63 ASCII
    /// letters, digits or underscores). Default: the connection's search path.
    #[uniffi(default = None)]
    pub store_schema: Option<String>,
    /// With `storeUrl`: keep the audit chain in the same PostgreSQL database (table
    /// `signoff_audit`, one chain for every process); not with `auditPath`.
    #[uniffi(default = false)]
    pub audit_in_store: bool,
    /// Append every request, answer, outcome and execution to this hash-chained JSON Lines file
    /// (the core's `JsonlAuditSink`; `io` when it cannot be opened). With `storePath` too, the
    /// chain's head is anchored in the store (`verifyAuditChain(path:storePath:)`).
    #[uniffi(default = None)]
    pub audit_path: Option<String>,
    /// Rotate the audit log at this many bytes: `<path>.1`, `<path>.2`, ... one chain.
    #[uniffi(default = None)]
    pub audit_rotate_bytes: Option<u64>,
    /// Approval-token keys in the configuration format (`key_id:base64secret` entries, current
    /// first), e.g. from the environment; or pass a `TokenKeys` as `Gate.open`'s `keys`.
    #[uniffi(default = None)]
    pub token_keys: Option<String>,
    /// How long an issued token is valid, in milliseconds (never beyond its request's deadline).
    #[uniffi(default = None)]
    pub token_ttl_ms: Option<u64>,
}

impl GateConfig {
    /// The options in their JSON form with Swift's (camelCase) names: every field, serialized
    /// (the test below checks that the record has every option the core reads).
    fn options(self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The core's configuration: the options read from their JSON form with Swift's (camelCase)
    /// names, the `keys` object added, then the rules between options checked, all by the core.
    fn into_core(self, keys: Option<Arc<TokenKeys>>) -> Result<core::GateConfig, SignoffError> {
        if keys.is_some() && self.token_keys.is_some() {
            return Err(config("token keys given twice: `tokenKeys` in the configuration and `keys`"));
        }
        let v = self.options();
        let mut c = core::GateConfig::read_json(&v, core::Naming::Camel)?;
        if let Some(k) = keys {
            c.token_keys = Some(k.inner.clone());
        }
        c.validate(core::Naming::Camel)?;
        // Its warnings and errors name Swift's API (`GateConfig(denyWhenUnobserved: false)`).
        c.host = core::Host::Swift;
        Ok(c)
    }
}

// ---------------------------------------------------------------------------------------------
// the durable store and recovery

/// Where a request is in its life (durable stores): `pending → approved → executing → done`, or
/// `pending → denied | timedOut | cancelled`, or `pending → approved → released` (a `confirm`
/// caller took the approval and runs the tool itself). `interrupted`: found approved or
/// executing after a restart; reported, never run again.
#[uniffi::remote(Enum)]
pub enum RecordState {
    /// Waiting for a person.
    Pending,
    /// A person approved; the tool has not started.
    Approved,
    /// The tool is running (recorded before it starts).
    Executing,
    /// The tool ran; the result is stored.
    Done,
    /// Approved and handed to a `confirm` caller, which runs the tool itself.
    Released,
    /// A person declined.
    Denied,
    /// Nobody answered before the deadline (also deadlines that passed while the process was
    /// down).
    TimedOut,
    /// Cancelled before anyone answered (including by `close()`: a gate that shuts down cancels
    /// what is pending).
    Cancelled,
    /// Found approved or executing after a restart: the tool may or may not have run; never run
    /// again.
    Interrupted,
}

/// A request as the durable store keeps it (`Gate.record(requestId:)`).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct StoredRecord {
    /// The request as it was published.
    pub request: ConfirmationRequest,
    /// Where it is now.
    pub state: RecordState,
    /// No further change will happen.
    pub is_final: bool,
    /// The arguments approved to run (JSON text), once approved.
    pub arguments_json: Option<String>,
    /// Who answered.
    pub responder: Option<String>,
    /// SHA-256 (hex) of the approval token that answered, if one did (never the token).
    pub token_fingerprint: Option<String>,
    /// `done`: the tool's result in the core's JSON form; `interrupted`, `cancelled`: a note.
    pub result_json: Option<String>,
    /// `done`: the tool's result.
    pub tool_result: Option<ToolResult>,
    /// When the state last changed (epoch ms).
    pub updated_at_ms: u64,
}

impl From<core::StoredRecord> for StoredRecord {
    fn from(r: core::StoredRecord) -> Self {
        let tool_result = match (r.state, &r.result) {
            (RecordState::Done, Some(v)) => serde_json::from_value::<core::ToolResult>(v.clone()).ok().map(Into::into),
            _ => None,
        };
        StoredRecord {
            request: (&*r.request).into(),
            state: r.state,
            is_final: r.state.is_final(),
            arguments_json: r.arguments.as_ref().map(Value::to_string),
            responder: r.responder,
            token_fingerprint: r.token,
            result_json: r.result.as_ref().map(Value::to_string),
            tool_result,
            updated_at_ms: r.updated_at_ms,
        }
    }
}

/// A stored pending request `Gate.recover()` cancelled instead of restoring (never run).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct NotRestored {
    pub request: ConfirmationRequest,
    /// Why: its tool is not registered or has no executor, or its stored arguments no longer
    /// match their digest or the tool's schema.
    pub reason: String,
}

/// What `Gate.recover()` found and did.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Recovery {
    /// Still pending: waiting again until their original deadlines, and published again. When
    /// one is approved, the gate runs its tool's executor once and stores the result
    /// (`Gate.record(requestId:)`).
    pub restored: Vec<ConfirmationRequest>,
    /// Their deadline passed while the process was down: resolved as timed out.
    pub timed_out: Vec<ConfirmationRequest>,
    /// Approved or executing when the process stopped: now `interrupted`, never run again (the
    /// records as they were found).
    pub interrupted: Vec<StoredRecord>,
    /// Pending, but cancelled instead of restored.
    pub not_restored: Vec<NotRestored>,
}

impl From<core::Recovery> for Recovery {
    fn from(r: core::Recovery) -> Self {
        let requests = |v: Vec<Arc<core::ConfirmationRequest>>| v.iter().map(|q| (&**q).into()).collect();
        Recovery {
            restored: requests(r.restored),
            timed_out: requests(r.timed_out),
            interrupted: r.interrupted.into_iter().map(Into::into).collect(),
            not_restored: r
                .not_restored
                .into_iter()
                .map(|n| NotRestored { request: (&*n.request).into(), reason: n.reason })
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the audit chain

/// What is wrong with an audit chain: a record `edited` (or a later one chained to another
/// version of it), records `missing`, a record `reordered`, a line that is not a chained record
/// (`malformed`), or records cut from the end (`truncated`: the log ends before the head its
/// store anchored).
#[uniffi::remote(Enum)]
pub enum ChainProblemKind {
    Edited,
    Missing,
    Reordered,
    Malformed,
    Truncated,
}

/// The newest record of a hash chain, as an anchor (the store) recorded it.
#[uniffi::remote(Record)]
pub struct ChainHead {
    /// The record's position (from 0).
    pub seq: u64,
    /// The record's hash.
    pub hash: String,
}

/// The first problem in an audit chain.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct ChainProblem {
    pub kind: ChainProblemKind,
    /// The file the record is in.
    pub file: String,
    /// 1-based line number in `file`.
    pub line: u64,
    /// The record's `seq`, when readable.
    pub seq: Option<u64>,
    /// In words.
    pub message: String,
}

/// What `verifyAuditChain(path:storePath:)` checked and found.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct ChainReport {
    /// No problem found.
    pub intact: bool,
    /// The files checked, oldest first (rotated files, then the log itself).
    pub files: Vec<String>,
    /// Records checked (up to the first problem).
    pub records: u64,
    /// The last good record's hash (the chain head).
    pub head: String,
    /// The first problem, if any.
    pub problem: Option<ChainProblem>,
    /// The anchored head the log was checked against; nil when none was (no `storePath`, or a
    /// store that anchored nothing), in which case records cut from the end would not show.
    pub anchor: Option<ChainHead>,
}

fn path_text(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Verifies a hash-chained audit log (the core's `verify_chain_with_store`): its rotated files
/// (`<path>.1`, `<path>.2`, ...) then `path`, as one chain, reporting the first edited, missing,
/// reordered or malformed record. With `storePath` (the store of the gate that wrote the log,
/// once that gate is closed) also against the head anchored there: records cut from the end are
/// `truncated`, a replaced anchored record `edited`. Without it, a log cut after any record is
/// still a valid chain. Errors: `io` when the log or the database does not exist or the log
/// cannot be read, `store` when the database cannot be read (not a database, or locked by a gate
/// that has it open).
#[uniffi::export(default(store_path = None))]
pub fn verify_audit_chain(path: String, store_path: Option<String>) -> Result<ChainReport, SignoffError> {
    let r = core::verify_chain_with_store(&path, store_path.as_deref().map(std::path::Path::new))?;
    Ok(ChainReport {
        intact: r.is_intact(),
        files: r.files.iter().map(|p| path_text(p)).collect(),
        records: r.records,
        head: r.head,
        problem: r.problem.map(|p| ChainProblem {
            kind: p.kind,
            file: path_text(&p.file),
            line: p.line as u64,
            seq: p.seq,
            message: p.message,
        }),
        anchor: r.anchor,
    })
}

// ---------------------------------------------------------------------------------------------
// the gate

#[uniffi::export]
impl Gate {
    /// A gate configured with everything Python and Node offer (a timeout, keywords, a durable
    /// store, the audit log, approval tokens, approver rules, ...), validated by the core (see
    /// `GateConfig`): the one configured path (`Gate()` is the core's defaults and cannot fail).
    /// `keys` passes token keys as an object instead of `config.tokenKeys` (not both). Call
    /// `recover()` next when using a store. Errors: `config` (an invalid option, with its name),
    /// `store` (the database cannot be opened, or another gate has it open), `io` (the audit log
    /// cannot be opened).
    // (A bare `config`, the record's own default, must come last in `default(...)`.)
    #[uniffi::constructor(default(keys = None, config))]
    pub fn open(config: GateConfig, keys: Option<Arc<TokenKeys>>) -> Result<Arc<Self>, SignoffError> {
        Ok(Arc::new(Gate { inner: config.into_core(keys)?.build()? }))
    }

    /// Issues a signed approval token for pending request `requestId`, meant for `approver` only:
    /// the link a remote UI (browser, phone, chat) answers with through `respondToken`. It binds
    /// the request's tool, argument digest and session, and expires at the request's deadline
    /// (or sooner with `tokenTtlMs`). Treat it as a credential: the gate never logs it.
    /// Errors: `config` (no token keys), `malformed` (empty approver), `notPending`,
    /// `unknownRequest` (an id that is not a UUID).
    pub fn issue_token(&self, request_id: String, approver: String) -> Result<String, SignoffError> {
        Ok(self.inner.issue_token(&crate::types::request_id(&request_id)?, &approver)?)
    }

    /// An approval marker for a call a person approved through this gate: send it with the call
    /// to the next signoff gate it reaches (for an MCP server behind `signoff mcp-proxy` with the
    /// same token keys, in the request's `_meta` under `markerMetaKey()`), so the person is not
    /// asked twice. It names `tool`, the digest of the arguments approved to run (an edit
    /// included), who approved and the request; accepted once, it expires after a minute. One
    /// marker per request. Errors: `config` (no token keys), `malformed` (not a person's approval,
    /// or an empty tool), `alreadyUsed` (one was issued for this request), `mismatch`.
    pub fn approval_marker(&self, tool: String, decision: crate::types::Decision) -> Result<String, SignoffError> {
        Ok(self.inner.approval_marker(&tool, &decision.to_core()?)?)
    }

    /// Accepts an approval marker (from a gate with the same keys) for a call to `tool` with
    /// `argumentsJson`, once, and returns what it claims; on any error, ask a person as usual.
    /// With a durable store the acceptance is kept in it too: a replay is refused after a
    /// restart, and by every gate sharing the store. Errors: `config`, `malformed`, `unknownKey`,
    /// `badSignature`, `tokenExpired`, `mismatch` (another tool or other arguments),
    /// `alreadyUsed`, `store` (the store could not record it).
    pub fn accept_approval_marker(
        &self,
        marker: String,
        tool: String,
        arguments_json: String,
    ) -> Result<MarkerClaims, SignoffError> {
        let args = crate::types::parse_value("arguments", &arguments_json)?;
        Ok(self.inner.accept_approval_marker(&marker, &tool, &args)?)
    }

    /// Verifies a token's key and signature and returns what it claims (e.g. to show which
    /// request a link is for). Expiry, approver and the request's state are checked by
    /// `respondToken`. Errors: `config`, `malformed`, `unknownKey`, `badSignature`.
    pub fn inspect_token(&self, token: String) -> Result<TokenClaims, SignoffError> {
        Ok(self.inner.inspect_token(&token)?)
    }

    /// Answers the token's request, presented by `approver` (whom your server authenticated; it
    /// must be the token's approver). An approval runs exactly the arguments stored with the
    /// request; `argumentsJson` is an edit (editable tools only), validated like any other. A
    /// token answers once; a rejected one changes nothing (and is audited). Errors, in the order
    /// checked: `closed`, `config`, `malformed`, `unknownKey`, `badSignature`, `tokenExpired`,
    /// `wrongApprover`, `alreadyUsed`, `notPending`, then what `respond` checks (`unauthorized`
    /// from `approvers`, `editsNotAllowed`, `invalidArguments`).
    #[uniffi::method(default(arguments_json = None, scope = None, reason = None))]
    pub fn respond_token(
        &self,
        token: String,
        approver: String,
        decision: core::ResponseDecision,
        arguments_json: Option<String>,
        scope: Option<core::Scope>,
        reason: Option<String>,
    ) -> Result<core::Outcome, SignoffError> {
        let response = token_response(approver, decision, arguments_json, scope, reason)?;
        Ok(self.inner.respond_token(&token, response)?)
    }

    /// `respondToken` without holding the calling thread while the answer is recorded (as
    /// `respondAsync`). Same outcome and errors as `respondToken`.
    #[uniffi::method(default(arguments_json = None, scope = None, reason = None))]
    pub async fn respond_token_async(
        &self,
        token: String,
        approver: String,
        decision: core::ResponseDecision,
        arguments_json: Option<String>,
        scope: Option<core::Scope>,
        reason: Option<String>,
    ) -> Result<core::Outcome, SignoffError> {
        let response = token_response(approver, decision, arguments_json, scope, reason)?;
        let answer = {
            let _rt = runtime().enter();
            self.inner.respond_token_async(&token, response)
        };
        Ok(answer.await?)
    }

    /// A request's stored record in any state (with the tool's result once `done`), or nil. Only
    /// a durable store keeps records once a request resolves. Errors: `unknownRequest` for an id
    /// that is not a UUID.
    pub fn record(&self, request_id: String) -> Result<Option<StoredRecord>, SignoffError> {
        Ok(self.inner.record(&crate::types::request_id(&request_id)?).map(Into::into))
    }

    /// Picks up what an earlier process left in the durable store. Call it once, after
    /// registering tools and before the first call. A pending request whose deadline has not
    /// passed waits again until that same deadline and is published again (subscribe first, or
    /// open with `denyWhenUnobserved: false`: otherwise it is cancelled at once, as new requests
    /// are); when approved, the gate runs its tool's executor once and stores the result. One
    /// whose deadline passed is resolved as timed out. One that was approved or executing is
    /// marked `interrupted` and never run again. A request pending when a gate was closed was
    /// cancelled by `close()`, so it is not restored. Errors: `config` (called twice, or after the
    /// first request), `store`.
    pub fn recover(&self) -> Result<Recovery, SignoffError> {
        // Restored requests wait, and run their tools, in tasks on this library's runtime.
        let _rt = runtime().enter();
        Ok(self.inner.recover()?.into())
    }

    /// Waits until every audit record so far is written and synced (off the calling thread).
    /// `close()` flushes too.
    pub async fn flush_audit(&self) {
        let gate = self.inner.clone();
        let _ = runtime().spawn_blocking(move || gate.flush_audit()).await;
    }
}

/// A token answer's fields as `respondToken` takes them.
fn token_response(
    approver: String,
    decision: core::ResponseDecision,
    arguments_json: Option<String>,
    scope: Option<core::Scope>,
    reason: Option<String>,
) -> Result<core::TokenResponse, SignoffError> {
    Ok(core::TokenResponse {
        approver,
        decision,
        arguments: arguments_json.as_deref().map(|a| parse_value("edited arguments", a)).transpose()?,
        scope: scope.unwrap_or_default(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::GateConfig;

    #[test]
    fn the_record_has_every_option_the_core_reads() {
        let config = GateConfig {
            default_timeout_ms: None,
            keywords: None,
            deny_when_unobserved: true,
            dangerously_disable_gating: false,
            bus_capacity: None,
            remember_resolved: None,
            allowed_responders: None,
            approvers: None,
            forbid_self_approval: false,
            store_path: None,
            synchronous_full: false,
            store_url: None,
            store_owner: None,
            store_schema: None,
            audit_in_store: false,
            audit_path: None,
            audit_rotate_bytes: None,
            token_keys: None,
            token_ttl_ms: None,
        };
        let passed: Vec<String> = config.options().as_object().unwrap().keys().cloned().collect();
        let mut core: Vec<String> = signoff::GateConfig::option_names(signoff::Naming::Camel).collect();
        core.sort();
        assert_eq!(passed, core, "Swift's GateConfig passes exactly the core's options");
    }
}
