//! Errors: one enum with a case per core `ErrorKind`, the kind itself (the core's enum, exposed
//! as it is), and the error foreign callbacks throw.

pub use signoff::ErrorKind;

/// Declares `SignoffError` (one case per kind, each with the core's message) and its mappings
/// from `signoff::Error` and to `ErrorKind`, from one list of kinds.
macro_rules! signoff_error {
    ($($(#[$doc:meta])* $kind:ident,)*) => {
        /// Every error signoff returns, one case per stable error kind. `message` is the core's
        /// human-readable text; `kind()` gives the stable kind.
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
        pub enum SignoffError {
            $($(#[$doc])* #[error("{message}")] $kind { message: String },)*
        }

        impl From<signoff::Error> for SignoffError {
            fn from(e: signoff::Error) -> Self {
                let message = e.to_string();
                match e.kind() {
                    $(ErrorKind::$kind => SignoffError::$kind { message },)*
                }
            }
        }

        impl SignoffError {
            fn stable_kind(&self) -> ErrorKind {
                match self {
                    $(SignoffError::$kind { .. } => ErrorKind::$kind,)*
                }
            }
        }

        /// The stable, machine-readable error kinds (the core's `ErrorKind`).
        #[uniffi::remote(Enum)]
        pub enum ErrorKind {
            $($(#[$doc])* $kind,)*
        }
    };
}

signoff_error! {
    /// The call names a tool that is not registered.
    UnknownTool,
    /// A tool definition is invalid (bad schema, empty name, bad rule).
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
    /// A response names another tool, argument digest or session than its request.
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
    /// A file could not be read or written (an audit log, a key file).
    Io,
}

#[uniffi::export]
impl SignoffError {
    /// The stable kind of this error (`errorKindName(kind:)` gives the snake_case name the
    /// shared test vectors and the other bindings use).
    pub fn kind(&self) -> ErrorKind {
        self.stable_kind()
    }
}

/// The stable snake_case name of an error kind, e.g. `"already_resolved"` (the core's
/// `ErrorKind::as_str`).
#[uniffi::export]
pub fn error_kind_name(kind: ErrorKind) -> String {
    kind.as_str().to_owned()
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

/// A `config` error (an option that needs another one, a file named in the options that cannot
/// be opened), in the core's words.
pub(crate) fn config(message: impl Into<String>) -> SignoffError {
    signoff::Error::Config(message.into()).into()
}
