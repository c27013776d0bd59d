//! The audit trail: a JSON Lines file written by the core's `JsonlAuditSink`.

use crate::errors;
use napi::Env;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::sync::Arc;

pub(crate) fn open(env: &Env, path: &str) -> Result<Arc<dyn signoff::AuditSink>> {
    signoff::JsonlAuditSink::open(path)
        .map(|s| s as Arc<dyn signoff::AuditSink>)
        .map_err(|e| {
            let _ = env;
            Error::new(Status::GenericFailure, format!("cannot open the audit log {path}: {e}"))
        })
}

/// Reads a JSON Lines audit log back: a JSON array of records in the core's JSON form
/// (snake_case fields). Fails with `malformed` for a line that is not an audit record.
#[napi]
pub fn read_audit_log(env: Env, path: String) -> Result<String> {
    let records = signoff::JsonlAuditSink::read(&path)
        .map_err(|e| errors::throw_code(&env, "malformed", &format!("cannot read the audit log {path}: {e}")))?;
    Ok(serde_json::to_string(&records).unwrap_or_else(|_| "[]".into()))
}
