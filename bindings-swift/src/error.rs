//! Errors: one enum mirroring the core's `ErrorKind`, and the error foreign callbacks throw.

use signoff::ErrorKind as CoreKind;

/// Every error signoff returns, one case per stable error kind. `message` is the core's
/// human-readable text; `kind()` gives the stable kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum SignoffError {
    /// The call names a tool that is not registered.
    #[error("{message}")]
    UnknownTool { message: String },
    /// A tool definition is invalid (bad schema, empty name, bad rule).
    #[error("{message}")]
    InvalidTool { message: String },
    /// Arguments (original or edited) do not satisfy the tool's JSON Schema.
    #[error("{message}")]
    InvalidArguments { message: String },
    /// A response names a request id the gate has never seen (or has long forgotten).
    #[error("{message}")]
    UnknownRequest { message: String },
    /// A response arrived for a request that has already been resolved.
    #[error("{message}")]
    AlreadyResolved { message: String },
    /// A response arrived after the request's deadline.
    #[error("{message}")]
    Expired { message: String },
    /// A response carried edited arguments for a tool that does not allow edits.
    #[error("{message}")]
    EditsNotAllowed { message: String },
    /// A response names another tool, argument digest or session than its request.
    #[error("{message}")]
    Mismatch { message: String },
    /// A payload could not be parsed or is missing required fields.
    #[error("{message}")]
    Malformed { message: String },
    /// The response authenticator refused the response.
    #[error("{message}")]
    Unauthorized { message: String },
    /// The gate has been shut down.
    #[error("{message}")]
    Closed { message: String },
    /// The pending-request store failed.
    #[error("{message}")]
    Store { message: String },
    /// `execute` was asked to run a tool that has no executor.
    #[error("{message}")]
    NoExecutor { message: String },
    /// An approval token's signature does not verify (tampered with or forged).
    #[error("{message}")]
    BadSignature { message: String },
    /// An approval token names a key id the gate does not hold.
    #[error("{message}")]
    UnknownKey { message: String },
    /// An approval token is past its expiry.
    #[error("{message}")]
    TokenExpired { message: String },
    /// An approval token was presented by someone other than its approver.
    #[error("{message}")]
    WrongApprover { message: String },
    /// An approval token was already used (tokens are single use).
    #[error("{message}")]
    AlreadyUsed { message: String },
    /// An approval token names a request that is not pending.
    #[error("{message}")]
    NotPending { message: String },
    /// A feature was used without its configuration, or the configuration is invalid.
    #[error("{message}")]
    Config { message: String },
}

impl From<signoff::Error> for SignoffError {
    fn from(e: signoff::Error) -> Self {
        let message = e.to_string();
        match e.kind() {
            CoreKind::UnknownTool => SignoffError::UnknownTool { message },
            CoreKind::InvalidTool => SignoffError::InvalidTool { message },
            CoreKind::InvalidArguments => SignoffError::InvalidArguments { message },
            CoreKind::UnknownRequest => SignoffError::UnknownRequest { message },
            CoreKind::AlreadyResolved => SignoffError::AlreadyResolved { message },
            CoreKind::Expired => SignoffError::Expired { message },
            CoreKind::EditsNotAllowed => SignoffError::EditsNotAllowed { message },
            CoreKind::Mismatch => SignoffError::Mismatch { message },
            CoreKind::Malformed => SignoffError::Malformed { message },
            CoreKind::Unauthorized => SignoffError::Unauthorized { message },
            CoreKind::Closed => SignoffError::Closed { message },
            CoreKind::Store => SignoffError::Store { message },
            CoreKind::NoExecutor => SignoffError::NoExecutor { message },
            CoreKind::BadSignature => SignoffError::BadSignature { message },
            CoreKind::UnknownKey => SignoffError::UnknownKey { message },
            CoreKind::TokenExpired => SignoffError::TokenExpired { message },
            CoreKind::WrongApprover => SignoffError::WrongApprover { message },
            CoreKind::AlreadyUsed => SignoffError::AlreadyUsed { message },
            CoreKind::NotPending => SignoffError::NotPending { message },
            CoreKind::Config => SignoffError::Config { message },
        }
    }
}

#[uniffi::export]
impl SignoffError {
    /// The stable kind of this error (`errorKindName(kind:)` gives the snake_case name the
    /// shared test vectors and the other bindings use).
    pub fn kind(&self) -> ErrorKind {
        match self {
            SignoffError::UnknownTool { .. } => ErrorKind::UnknownTool,
            SignoffError::InvalidTool { .. } => ErrorKind::InvalidTool,
            SignoffError::InvalidArguments { .. } => ErrorKind::InvalidArguments,
            SignoffError::UnknownRequest { .. } => ErrorKind::UnknownRequest,
            SignoffError::AlreadyResolved { .. } => ErrorKind::AlreadyResolved,
            SignoffError::Expired { .. } => ErrorKind::Expired,
            SignoffError::EditsNotAllowed { .. } => ErrorKind::EditsNotAllowed,
            SignoffError::Mismatch { .. } => ErrorKind::Mismatch,
            SignoffError::Malformed { .. } => ErrorKind::Malformed,
            SignoffError::Unauthorized { .. } => ErrorKind::Unauthorized,
            SignoffError::Closed { .. } => ErrorKind::Closed,
            SignoffError::Store { .. } => ErrorKind::Store,
            SignoffError::NoExecutor { .. } => ErrorKind::NoExecutor,
            SignoffError::BadSignature { .. } => ErrorKind::BadSignature,
            SignoffError::UnknownKey { .. } => ErrorKind::UnknownKey,
            SignoffError::TokenExpired { .. } => ErrorKind::TokenExpired,
            SignoffError::WrongApprover { .. } => ErrorKind::WrongApprover,
            SignoffError::AlreadyUsed { .. } => ErrorKind::AlreadyUsed,
            SignoffError::NotPending { .. } => ErrorKind::NotPending,
            SignoffError::Config { .. } => ErrorKind::Config,
        }
    }
}

/// The stable, machine-readable error kinds (the core's `ErrorKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Enum)]
pub enum ErrorKind {
    UnknownTool,
    InvalidTool,
    InvalidArguments,
    UnknownRequest,
    AlreadyResolved,
    Expired,
    EditsNotAllowed,
    Mismatch,
    Malformed,
    Unauthorized,
    Closed,
    Store,
    NoExecutor,
    /// An approval token's signature does not verify (tampered with or forged).
    BadSignature,
    /// An approval token names a key id the gate does not hold.
    UnknownKey,
    /// An approval token is past its expiry.
    TokenExpired,
    /// An approval token was presented by someone other than its approver.
    WrongApprover,
    /// An approval token was already used (tokens are single use).
    AlreadyUsed,
    /// An approval token names a request that is not pending.
    NotPending,
    /// A feature was used without its configuration, or the configuration is invalid.
    Config,
}

impl From<CoreKind> for ErrorKind {
    fn from(k: CoreKind) -> Self {
        match k {
            CoreKind::UnknownTool => ErrorKind::UnknownTool,
            CoreKind::InvalidTool => ErrorKind::InvalidTool,
            CoreKind::InvalidArguments => ErrorKind::InvalidArguments,
            CoreKind::UnknownRequest => ErrorKind::UnknownRequest,
            CoreKind::AlreadyResolved => ErrorKind::AlreadyResolved,
            CoreKind::Expired => ErrorKind::Expired,
            CoreKind::EditsNotAllowed => ErrorKind::EditsNotAllowed,
            CoreKind::Mismatch => ErrorKind::Mismatch,
            CoreKind::Malformed => ErrorKind::Malformed,
            CoreKind::Unauthorized => ErrorKind::Unauthorized,
            CoreKind::Closed => ErrorKind::Closed,
            CoreKind::Store => ErrorKind::Store,
            CoreKind::NoExecutor => ErrorKind::NoExecutor,
            CoreKind::BadSignature => ErrorKind::BadSignature,
            CoreKind::UnknownKey => ErrorKind::UnknownKey,
            CoreKind::TokenExpired => ErrorKind::TokenExpired,
            CoreKind::WrongApprover => ErrorKind::WrongApprover,
            CoreKind::AlreadyUsed => ErrorKind::AlreadyUsed,
            CoreKind::NotPending => ErrorKind::NotPending,
            CoreKind::Config => ErrorKind::Config,
        }
    }
}

impl From<ErrorKind> for CoreKind {
    fn from(k: ErrorKind) -> Self {
        match k {
            ErrorKind::UnknownTool => CoreKind::UnknownTool,
            ErrorKind::InvalidTool => CoreKind::InvalidTool,
            ErrorKind::InvalidArguments => CoreKind::InvalidArguments,
            ErrorKind::UnknownRequest => CoreKind::UnknownRequest,
            ErrorKind::AlreadyResolved => CoreKind::AlreadyResolved,
            ErrorKind::Expired => CoreKind::Expired,
            ErrorKind::EditsNotAllowed => CoreKind::EditsNotAllowed,
            ErrorKind::Mismatch => CoreKind::Mismatch,
            ErrorKind::Malformed => CoreKind::Malformed,
            ErrorKind::Unauthorized => CoreKind::Unauthorized,
            ErrorKind::Closed => CoreKind::Closed,
            ErrorKind::Store => CoreKind::Store,
            ErrorKind::NoExecutor => CoreKind::NoExecutor,
            ErrorKind::BadSignature => CoreKind::BadSignature,
            ErrorKind::UnknownKey => CoreKind::UnknownKey,
            ErrorKind::TokenExpired => CoreKind::TokenExpired,
            ErrorKind::WrongApprover => CoreKind::WrongApprover,
            ErrorKind::AlreadyUsed => CoreKind::AlreadyUsed,
            ErrorKind::NotPending => CoreKind::NotPending,
            ErrorKind::Config => CoreKind::Config,
        }
    }
}

/// The stable snake_case name of an error kind, e.g. `"already_resolved"` (the core's
/// `ErrorKind::as_str`).
#[uniffi::export]
pub fn error_kind_name(kind: ErrorKind) -> String {
    CoreKind::from(kind).as_str().to_owned()
}

/// What a foreign handler or executor throws. Any other error thrown from Swift arrives as
/// `Failed` with the error's description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum CallbackError {
    #[error("{message}")]
    Failed { message: String },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for CallbackError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        CallbackError::Failed { message: e.reason }
    }
}

/// A binding-level conversion failure (text that should be JSON, an id that should be a UUID):
/// reported as the core's `malformed`.
pub(crate) fn malformed(what: &str, e: impl std::fmt::Display) -> SignoffError {
    signoff::Error::Malformed(format!("{what}: {e}")).into()
}
