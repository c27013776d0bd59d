//! One error enum for the whole crate, with a stable machine-readable kind.

use uuid::Uuid;

/// Stable, machine-readable error kinds. The string form ([`ErrorKind::as_str`]) is part of the
/// public contract: bindings expose it as an exception class, an error `code` or an enum case, and
/// the shared test vectors in `tests/vectors/*.json` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The call names a tool that is not registered.
    UnknownTool,
    /// A tool definition is invalid (bad schema, empty or duplicate name, bad rule).
    InvalidTool,
    /// Arguments (original or edited) do not satisfy the tool's JSON Schema.
    InvalidArguments,
    /// A response names a request id the gate has never seen (or has long forgotten).
    UnknownRequest,
    /// A response arrived for a request that has already been resolved.
    AlreadyResolved,
    /// A response arrived after the request's deadline.
    Expired,
    /// A response carried edited arguments for a tool that does not allow edits.
    EditsNotAllowed,
    /// A response names another tool, argument digest or session than the request it answers.
    Mismatch,
    /// A payload could not be parsed or is missing required fields.
    Malformed,
    /// The response authenticator refused the response.
    Unauthorized,
    /// The gate has been shut down.
    Closed,
    /// The pending-request store failed.
    Store,
    /// `execute` was asked to run a tool that has no executor.
    NoExecutor,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::UnknownTool,
        ErrorKind::InvalidTool,
        ErrorKind::InvalidArguments,
        ErrorKind::UnknownRequest,
        ErrorKind::AlreadyResolved,
        ErrorKind::Expired,
        ErrorKind::EditsNotAllowed,
        ErrorKind::Mismatch,
        ErrorKind::Malformed,
        ErrorKind::Unauthorized,
        ErrorKind::Closed,
        ErrorKind::Store,
        ErrorKind::NoExecutor,
    ];

    /// The stable snake_case name of this kind, e.g. `"already_resolved"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::InvalidTool => "invalid_tool",
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::UnknownRequest => "unknown_request",
            ErrorKind::AlreadyResolved => "already_resolved",
            ErrorKind::Expired => "expired",
            ErrorKind::EditsNotAllowed => "edits_not_allowed",
            ErrorKind::Mismatch => "mismatch",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Closed => "closed",
            ErrorKind::Store => "store",
            ErrorKind::NoExecutor => "no_executor",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every error signoff returns. Match on [`Error::kind`] for a stable classification.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("unknown tool `{0}`: it is not registered with this gate, so the call was refused")]
    UnknownTool(String),
    #[error("invalid tool definition `{tool}`: {reason}")]
    InvalidTool { tool: String, reason: String },
    #[error("{which} arguments for `{tool}` do not match its schema: {reason}")]
    InvalidArguments { tool: String, which: &'static str, reason: String },
    #[error("unknown confirmation request {0}")]
    UnknownRequest(Uuid),
    #[error("confirmation request {id} was already resolved ({outcome}); only the first valid response counts")]
    AlreadyResolved { id: Uuid, outcome: String },
    #[error("confirmation request {0} expired before this response arrived")]
    Expired(Uuid),
    #[error("tool `{0}` does not allow its arguments to be edited")]
    EditsNotAllowed(String),
    #[error("response does not match request {id}: {field} is {got:?}, the request shows {expected:?}")]
    Mismatch { id: Uuid, field: &'static str, expected: String, got: String },
    #[error("malformed payload: {0}")]
    Malformed(String),
    #[error("response to {id} not authorized: {reason}")]
    Unauthorized { id: Uuid, reason: String },
    #[error("the gate is shut down")]
    Closed,
    #[error("pending-request store failed: {0}")]
    Store(String),
    #[error("tool `{0}` has no executor registered, so it cannot be executed")]
    NoExecutor(String),
}

impl Error {
    /// The stable classification of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::UnknownTool(_) => ErrorKind::UnknownTool,
            Error::InvalidTool { .. } => ErrorKind::InvalidTool,
            Error::InvalidArguments { .. } => ErrorKind::InvalidArguments,
            Error::UnknownRequest(_) => ErrorKind::UnknownRequest,
            Error::AlreadyResolved { .. } => ErrorKind::AlreadyResolved,
            Error::Expired(_) => ErrorKind::Expired,
            Error::EditsNotAllowed(_) => ErrorKind::EditsNotAllowed,
            Error::Mismatch { .. } => ErrorKind::Mismatch,
            Error::Malformed(_) => ErrorKind::Malformed,
            Error::Unauthorized { .. } => ErrorKind::Unauthorized,
            Error::Closed => ErrorKind::Closed,
            Error::Store(_) => ErrorKind::Store,
            Error::NoExecutor(_) => ErrorKind::NoExecutor,
        }
    }
}

/// `Result` with signoff's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
