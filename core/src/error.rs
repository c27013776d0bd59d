//! One error enum for the whole crate, with a stable machine-readable kind.

use uuid::Uuid;

/// Declares [`ErrorKind`] from one list: the enum, [`ErrorKind::ALL`] and [`ErrorKind::as_str`]
/// cannot drift apart (a kind is added in exactly one place).
macro_rules! error_kinds {
    ($($(#[$doc:meta])* $kind:ident = $name:literal,)*) => {
        /// Stable, machine-readable error kinds. The string form ([`ErrorKind::as_str`]) is part of
        /// the public contract: bindings expose it as an exception class, an error `code` or an
        /// enum case, and the shared test vectors in `tests/vectors/*.json` name it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorKind {
            $($(#[$doc])* $kind,)*
        }

        impl ErrorKind {
            /// Every kind, in declaration order.
            pub const ALL: [ErrorKind; [$($name,)*].len()] = [$(ErrorKind::$kind,)*];

            /// The stable snake_case name of this kind, e.g. `"already_resolved"`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => $name,)*
                }
            }
        }
    };
}

/// Calls the macro `$m` with the list of error kinds, one `$(#[doc])* Kind = "kind_name",` per
/// kind, in declaration order: the one list the core's [`ErrorKind`] and every binding's own
/// error type (Swift's `SignoffError` cases, Node's `ErrorCode` enum) are declared from, so a
/// kind is added in exactly one place.
///
/// ```
/// macro_rules! kind_names {
///     ($($(#[$doc:meta])* $kind:ident = $name:literal,)*) => {
///         const NAMES: &[&str] = &[$($name,)*];
///     };
/// }
/// signoff::for_each_error_kind!(kind_names);
/// assert_eq!(NAMES.len(), signoff::ErrorKind::ALL.len());
/// assert_eq!(NAMES[0], signoff::ErrorKind::ALL[0].as_str());
/// ```
#[macro_export]
macro_rules! for_each_error_kind {
    ($m:path) => {
        $m! {
            /// The call names a tool that is not registered.
            UnknownTool = "unknown_tool",
            /// A tool definition is invalid (bad schema, empty or deceptive name, bad rule).
            InvalidTool = "invalid_tool",
            /// Arguments (original or edited) do not satisfy the tool's JSON Schema.
            InvalidArguments = "invalid_arguments",
            /// A response names a request id the gate has never seen (or has long forgotten).
            UnknownRequest = "unknown_request",
            /// A response arrived for a request that has already been resolved.
            AlreadyResolved = "already_resolved",
            /// A response arrived after the request's deadline.
            Expired = "expired",
            /// A response carried edited arguments for a tool that does not allow edits.
            EditsNotAllowed = "edits_not_allowed",
            /// A response names another tool, argument digest or session than the request it answers.
            Mismatch = "mismatch",
            /// A payload could not be parsed or is missing required fields.
            Malformed = "malformed",
            /// The response authenticator refused the response.
            Unauthorized = "unauthorized",
            /// The gate has been shut down.
            Closed = "closed",
            /// A store failed (the pending-request store, or a database audit table).
            Store = "store",
            /// `execute` was asked to run a tool that has no executor.
            NoExecutor = "no_executor",
            /// An approval token's signature does not verify: it was tampered with or forged.
            BadSignature = "bad_signature",
            /// An approval token names a key id the gate does not hold.
            UnknownKey = "unknown_key",
            /// An approval token is past its expiry.
            TokenExpired = "token_expired",
            /// An approval token was presented by someone other than the approver it was issued to.
            WrongApprover = "wrong_approver",
            /// An approval token was already used (tokens are single use).
            AlreadyUsed = "already_used",
            /// An approval token names a request that is not pending (resolved, expired, or unknown).
            NotPending = "not_pending",
            /// A feature was used without its configuration (e.g. tokens without keys), or the
            /// configuration is invalid.
            Config = "config",
            /// A file could not be read or written (an audit log, a key file): the path and the
            /// operating system's reason are in the message.
            Io = "io",
        }
    };
}

for_each_error_kind!(error_kinds);

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every error signoff returns. Match on [`Error::kind`] for a stable classification.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The call names a tool that is not registered (carries the name). Returned by
    /// [`Gate::confirm`](crate::Gate::confirm) and [`Gate::evaluate`](crate::Gate::evaluate);
    /// [`Gate::execute`](crate::Gate::execute) reports it as a
    /// [`Rejected`](crate::ToolStatus::Rejected) result.
    #[error("unknown tool `{0}`: it is not registered with this gate, so the call was refused")]
    UnknownTool(String),
    /// A tool definition was refused by [`Gate::register`](crate::Gate::register),
    /// [`Gate::register_spec`](crate::Gate::register_spec) or
    /// [`GateBuilder::build`](crate::GateBuilder::build): empty name, control/bidi/zero-width
    /// characters in the name, a rule pointer that is neither empty nor starts with `/`, a relative
    /// `path_outside` prefix, or `parameters` that are not a valid JSON Schema.
    #[error("invalid tool definition `{}`: {reason}", tool.escape_debug())]
    InvalidTool {
        /// The tool's name.
        tool: String,
        /// What is wrong with the definition.
        reason: String,
    },
    /// Arguments fail the tool's JSON Schema: the call's arguments (from
    /// [`Gate::confirm`](crate::Gate::confirm), [`Gate::evaluate`](crate::Gate::evaluate), or as a
    /// rejected [`Gate::execute`](crate::Gate::execute) result) or a person's edited arguments
    /// (from [`Gate::respond`](crate::Gate::respond)).
    #[error("{which} arguments for `{tool}` do not match its schema: {reason}")]
    InvalidArguments {
        /// The tool's name.
        tool: String,
        /// `"original"` for the call's arguments, `"edited"` for a person's edits.
        which: &'static str,
        /// The first few schema violations, `; `-separated.
        reason: String,
    },
    /// [`Gate::respond`](crate::Gate::respond) got a response whose id is neither pending nor among
    /// the recently resolved requests the gate remembers.
    #[error("unknown confirmation request {0}")]
    UnknownRequest(Uuid),
    /// A response or call named a request by an id that is not a request id at all (ids are
    /// UUIDs), so no such request can exist. Its kind is `unknown_request`.
    #[error("no such confirmation request {0:?}: request ids are UUIDs, as in the confirmation-request event")]
    NoSuchRequest(String),
    /// [`Gate::respond`](crate::Gate::respond) got a response for a request that was already
    /// approved, denied or cancelled; the first valid response won and this one changed nothing.
    #[error("confirmation request {id} was already resolved ({outcome}); only the first valid response counts")]
    AlreadyResolved {
        /// The request's id.
        id: Uuid,
        /// How the request ended, e.g. `approved`, `denied`, `cancelled`.
        outcome: String,
    },
    /// [`Gate::respond`](crate::Gate::respond) got a response after the request's deadline, or
    /// after it timed out.
    #[error("confirmation request {0} expired before this response arrived")]
    Expired(Uuid),
    /// [`Gate::respond`](crate::Gate::respond) got an approval with changed arguments for a tool
    /// that is not `editable` (carries the tool name).
    #[error("tool `{0}` does not allow its arguments to be edited")]
    EditsNotAllowed(String),
    /// [`Gate::respond`](crate::Gate::respond) got a response whose `tool`, `arguments_digest` or
    /// `session_id` differs from the request it names, so it may answer something the person did
    /// not see.
    #[error("response does not match request {id}: {field} is {got:?}, the request shows {expected:?}")]
    Mismatch {
        /// The request's id.
        id: Uuid,
        /// The field that differs: `tool`, `arguments_digest` or `session_id`.
        field: &'static str,
        /// The request's value.
        expected: String,
        /// The response's value.
        got: String,
    },
    /// A payload could not be parsed
    /// ([`ConfirmationResponse::from_json_str`](crate::ConfirmationResponse::from_json_str),
    /// [`ToolSpec::from_json`](crate::ToolSpec::from_json),
    /// [`Event::from_json`](crate::Event::from_json),
    /// [`Gate::respond_json`](crate::Gate::respond_json)), or
    /// [`Gate::respond`](crate::Gate::respond) got a denial carrying edited arguments or `session`
    /// scope.
    #[error("malformed payload: {0}")]
    Malformed(String),
    /// The gate's [`ResponseAuthenticator`](crate::ResponseAuthenticator) refused a response given
    /// to [`Gate::respond`](crate::Gate::respond).
    #[error("response to {id} not authorized: {reason}")]
    Unauthorized {
        /// The request's id.
        id: Uuid,
        /// The authenticator's reason.
        reason: String,
    },
    /// [`Gate::respond`](crate::Gate::respond) was called after the gate was shut down with
    /// [`Gate::close`](crate::Gate::close).
    #[error("the gate is shut down")]
    Closed,
    /// A store failed: the [`PendingStore`](crate::PendingStore) (a new request is refused and
    /// never runs unapproved; a failed state change fails safe), or a database audit table.
    #[error("store failed: {0}")]
    Store(String),
    /// [`Gate::execute`](crate::Gate::execute) was given a tool registered without an executor
    /// (carries the tool name); reported as a [`Rejected`](crate::ToolStatus::Rejected) result.
    #[error("tool `{0}` has no executor registered, so it cannot be executed")]
    NoExecutor(String),
    /// [`Gate::respond_token`](crate::Gate::respond_token) got a token whose signature does not
    /// verify under its key: some field was changed, or it was never issued by this gate.
    #[error("approval token rejected: bad signature (tampered with or not issued by this gate)")]
    BadSignature,
    /// An approval token names a key id the gate's [`TokenKeys`](crate::TokenKeys) do not hold
    /// (carries the key id).
    #[error("approval token rejected: unknown key id {0:?}")]
    UnknownKey(String),
    /// An approval token is past its expiry.
    #[error("approval token for request {id} expired at {expired_at_ms} (epoch ms)")]
    TokenExpired {
        /// The request the token was for.
        id: Uuid,
        /// The token's expiry (epoch ms).
        expired_at_ms: u64,
    },
    /// An approval token was presented by someone other than the approver it was issued to.
    #[error("approval token for request {id} was issued to {expected:?}, not {got:?}")]
    WrongApprover {
        /// The request the token was for.
        id: Uuid,
        /// The approver named in the token.
        expected: String,
        /// Who presented it.
        got: String,
    },
    /// An approval token was already used; a token answers its request once.
    #[error("approval token for request {0} was already used")]
    AlreadyUsed(Uuid),
    /// An approval token names a request that is not pending.
    #[error("request {id} is not pending ({state})")]
    NotPending {
        /// The request the token was for.
        id: Uuid,
        /// What became of it, e.g. `denied`, `timed-out`, `unknown`.
        state: String,
    },
    /// A feature was used without its configuration, or the configuration is invalid (e.g.
    /// [`Gate::issue_token`](crate::Gate::issue_token) on a gate built without token keys, a
    /// key shorter than 32 bytes, an unreadable key file).
    #[error("configuration error: {0}")]
    Config(String),
    /// A file could not be read or written: an audit log ([`JsonlAuditSink`](crate::JsonlAuditSink),
    /// [`verify_chain`](crate::verify_chain)) or a key file. Carries what was being done, the path
    /// and the operating system's reason; [`Error::os_error`] gives its error number.
    #[error("{message}")]
    Io {
        /// What was being done, the path and the reason.
        message: String,
        /// The operating system's error number (`errno`), when it gave one; a missing file is
        /// always `ENOENT` (2).
        os_error: Option<i32>,
        /// The file, when the failure was about one.
        path: Option<std::path::PathBuf>,
    },
}

impl Error {
    /// An I/O failure on `path` while doing `what` (e.g. "cannot open the audit log").
    pub fn io(what: &str, path: &std::path::Path, e: &std::io::Error) -> Self {
        const ENOENT: i32 = 2;
        let os_error = e.raw_os_error().or((e.kind() == std::io::ErrorKind::NotFound).then_some(ENOENT));
        Error::Io { message: format!("{what} {}: {e}", path.display()), os_error, path: Some(path.to_path_buf()) }
    }

    /// The file an `io` error is about, when it is about one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Error::Io { path, .. } => path.as_deref(),
            _ => None,
        }
    }

    /// The operating system's error number of an `io` error, when it gave one.
    pub fn os_error(&self) -> Option<i32> {
        match self {
            Error::Io { os_error, .. } => *os_error,
            _ => None,
        }
    }

    /// The stable classification of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::UnknownTool(_) => ErrorKind::UnknownTool,
            Error::InvalidTool { .. } => ErrorKind::InvalidTool,
            Error::InvalidArguments { .. } => ErrorKind::InvalidArguments,
            Error::UnknownRequest(_) | Error::NoSuchRequest(_) => ErrorKind::UnknownRequest,
            Error::AlreadyResolved { .. } => ErrorKind::AlreadyResolved,
            Error::Expired(_) => ErrorKind::Expired,
            Error::EditsNotAllowed(_) => ErrorKind::EditsNotAllowed,
            Error::Mismatch { .. } => ErrorKind::Mismatch,
            Error::Malformed(_) => ErrorKind::Malformed,
            Error::Unauthorized { .. } => ErrorKind::Unauthorized,
            Error::Closed => ErrorKind::Closed,
            Error::Store(_) => ErrorKind::Store,
            Error::NoExecutor(_) => ErrorKind::NoExecutor,
            Error::BadSignature => ErrorKind::BadSignature,
            Error::UnknownKey(_) => ErrorKind::UnknownKey,
            Error::TokenExpired { .. } => ErrorKind::TokenExpired,
            Error::WrongApprover { .. } => ErrorKind::WrongApprover,
            Error::AlreadyUsed(_) => ErrorKind::AlreadyUsed,
            Error::NotPending { .. } => ErrorKind::NotPending,
            Error::Config(_) => ErrorKind::Config,
            Error::Io { .. } => ErrorKind::Io,
        }
    }
}

/// `Result` with signoff's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
