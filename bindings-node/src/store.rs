//! Stored records (durable stores): their states and their JavaScript form.

use crate::events::{string_enum, write_request};
use crate::executor::result_data;
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use signoff::{ConfirmationRequest, RecordState, StoredRecord};

string_enum!(
    #[doc = "Where a request is in its life (durable stores): `pending → approved → executing → done`,"]
    #[doc = "or `pending → denied | timed-out | cancelled`, or `pending → approved → released` (a"]
    #[doc = "`confirm` caller took the approval). `interrupted`: found `approved` or `executing` at"]
    #[doc = "start-up, reported and never run again."]
    RecordStateKind("kebab-case") <=> RecordState {
        Pending, Approved, Executing, Done, Released, Denied, TimedOut, Cancelled, Interrupted
    }
);

/// A request as a durable store keeps it (the core's `StoredRecord`).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRecordData {
    /// The request as it was published.
    #[napi(ts_type = "ConfirmationRequestData")]
    pub request: Value,
    /// Where it is now.
    pub state: RecordStateKind,
    /// The arguments approved to run, once approved.
    #[napi(ts_type = "any")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Who answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// SHA-256 (hex) of the approval token that answered, if one did (never the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_fingerprint: Option<String>,
    /// `done`: the tool's result (`ToolResultData`); `interrupted`, `cancelled`: a note.
    #[napi(ts_type = "any")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// When the state last changed (epoch ms).
    #[napi(ts_type = "number")]
    pub updated_at_ms: u64,
}

/// A stored record in its JavaScript shape (camelCase; a `done` result as `ToolResultData`).
pub(crate) fn record_data(r: StoredRecord) -> StoredRecordData {
    let result = match (r.state, r.result) {
        (RecordState::Done, Some(v)) => match serde_json::from_value::<signoff::ToolResult>(v.clone()) {
            Ok(t) => serde_json::to_value(result_data(t)).ok(),
            Err(_) => Some(v),
        },
        (_, v) => v,
    };
    StoredRecordData {
        request: request_value(&r.request),
        state: r.state.into(),
        arguments: r.arguments,
        responder: r.responder,
        token_fingerprint: r.token,
        result,
        updated_at_ms: r.updated_at_ms,
    }
}

/// A request's JavaScript (camelCase) JSON value.
pub(crate) fn request_value(r: &ConfirmationRequest) -> Value {
    let mut out = Vec::with_capacity(640);
    write_request(&mut out, r);
    serde_json::from_slice(&out).unwrap_or(Value::Null)
}
