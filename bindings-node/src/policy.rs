//! Policy: the core's verdict on a call, and its defaults.

use napi_derive::napi;
use signoff::Evaluation;

/// Whether a call would need approval right now, and why.
#[napi(object)]
pub struct EvaluationData {
    pub required: bool,
    /// An argument rule holds: session grants do not apply.
    pub forced_by_rule: bool,
    pub reasons: Vec<String>,
}

impl From<Evaluation> for EvaluationData {
    fn from(e: Evaluation) -> Self {
        EvaluationData { required: e.required, forced_by_rule: e.forced_by_rule, reasons: e.reasons }
    }
}

/// The core's default keyword list (`DEFAULT_KEYWORDS`).
#[napi]
pub fn default_keywords() -> Vec<&'static str> {
    signoff::DEFAULT_KEYWORDS.to_vec()
}

/// The responder named in the audit record of a failed approval step (a handler that failed or
/// returned without answering; `HANDLER_RESPONDER`).
#[napi]
pub fn handler_responder() -> &'static str {
    signoff::HANDLER_RESPONDER
}

/// The session used when a call names none (`DEFAULT_SESSION`).
#[napi]
pub fn default_session() -> &'static str {
    signoff::DEFAULT_SESSION
}
