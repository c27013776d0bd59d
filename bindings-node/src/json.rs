//! JSON from the user: every JSON text that reaches the core from JavaScript (arguments, edited
//! arguments, metadata, responses, tool definitions, events) is parsed by the core's strict
//! parser (`signoff::json`): a repeated key, nesting deeper than `MAX_NESTING` or a number that
//! is not finite is refused as `malformed`, never resolved silently. The facade's serializer
//! (`lib/json.ts`) applies the same rules to JavaScript values before they become text.

use crate::errors;
use napi::Env;
use napi::bindgen_prelude::Result;
use napi_derive::napi;
use serde_json::Value;

/// Parses JSON text from the user with the core's strict parser; `what` names it in the error
/// (a `SignoffError` with code `malformed`).
pub(crate) fn parse(env: &Env, text: &str, what: &str) -> Result<Value> {
    signoff::json::from_str(text, what).map_err(|e| errors::throw(env, &e))
}

/// [`parse`] for an optional text.
pub(crate) fn parse_opt(env: &Env, text: Option<String>, what: &str) -> Result<Option<Value>> {
    text.map(|t| parse(env, &t, what)).transpose()
}

/// How deeply arrays and objects may nest in a value (the core's `signoff::json::MAX_NESTING`;
/// a top-level object or array counts as 1).
#[napi]
pub fn max_nesting() -> u32 {
    signoff::json::MAX_NESTING as u32
}

/// The core's message for a value nested deeper than [`max_nesting`]
/// (`signoff::json::too_deep(what)`), for the facade's serializer to refuse with.
#[napi]
pub fn too_deep_message(what: String) -> String {
    signoff::json::too_deep(&what).to_string()
}

/// Whether `text` is JSON the core's strict parser accepts (no repeated key, no NaN, nesting
/// within the limit), for the facade's converters of model-written argument text.
#[napi]
pub fn is_strict_json(text: String) -> bool {
    signoff::json::from_str(&text, "arguments").is_ok()
}
