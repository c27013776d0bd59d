//! Errors: one enum with a case per core `ErrorKind`, the kind itself (the core's enum, exposed
//! as it is), and the error foreign callbacks throw. Both are declared from the core's list of
//! kinds (`signoff::for_each_error_kind!`): a kind added to the core needs no edit here.

pub use signoff::ErrorKind;

/// Declares `SignoffError` (one case per kind, each with the core's message) and its mappings
/// from `signoff::Error` and to `ErrorKind`, from the core's list of kinds.
macro_rules! signoff_error {
    ($($(#[$doc:meta])* $kind:ident = $name:literal,)*) => {
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

signoff::for_each_error_kind!(signoff_error);

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
