//! The audit trail: a hash-chained JSON Lines file written by the core's `JsonlAuditSink`
//! (optionally rotated; with a durable store, its head anchored in the database), and the core's
//! `verify_chain` / `verify_chain_anchored`.

use crate::errors;
use crate::events::string_enum;
use napi::Env;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use signoff::ChainProblemKind as CoreChainProblemKind;

string_enum!(
    #[doc = "What is wrong with an audit chain: a record `edited` (or a later one chained to another"]
    #[doc = "version of it), records `missing`, a record `reordered`, a line that is not a chained"]
    #[doc = "record (`malformed`), or records cut from the end (`truncated`: the log ends before the"]
    #[doc = "head its anchor recorded)."]
    ChainProblemKind("kebab-case") <=> CoreChainProblemKind { Edited, Missing, Reordered, Malformed, Truncated }
);

/// The first problem in an audit chain (the core's `ChainProblem`).
#[napi(object, object_from_js = false)]
pub struct ChainProblemData {
    pub kind: ChainProblemKind,
    /// The file.
    pub file: String,
    /// 1-based line number in `file`.
    pub line: u32,
    /// The record's `seq`, when readable.
    pub seq: Option<f64>,
    /// In words.
    pub message: String,
}

/// What `verifyAuditChain` found (the core's `ChainReport`).
#[napi(object, object_from_js = false)]
pub struct ChainReportData {
    /// No problem found.
    pub intact: bool,
    /// The files checked, oldest first (rotated files, then the log itself).
    pub files: Vec<String>,
    /// Records checked (up to the first problem).
    pub records: f64,
    /// The last good record's hash (the chain head).
    pub head: String,
    /// The first problem, if any.
    pub problem: Option<ChainProblemData>,
}

/// Verifies a hash-chained audit log (the core's `verify_chain_with_store`): its rotated files
/// (`<path>.1`, `<path>.2`, ...) then `path`, as one chain. Reports the first edited, missing or
/// reordered record. With `storePath` (the SQLite store of the gate that wrote the log, once that
/// gate is closed) also checks the log against the chain head anchored there: records cut from
/// the end are `truncated`, a replaced anchored record `edited`. Throws `SignoffError('io')` when
/// the log or the database does not exist or the log cannot be read, `SignoffError('store')` when
/// the database cannot be read (locked by a gate that has it open, or not signoff's).
#[napi]
pub fn verify_audit_chain(env: Env, path: String, store_path: Option<String>) -> Result<ChainReportData> {
    let report = signoff::verify_chain_with_store(&path, store_path.as_deref().map(std::path::Path::new))
        .map_err(|e| errors::throw(&env, &e))?;
    let file = |p: &std::path::Path| p.to_string_lossy().into_owned();
    Ok(ChainReportData {
        intact: report.is_intact(),
        files: report.files.iter().map(|p| file(p)).collect(),
        records: report.records as f64,
        head: report.head,
        problem: report.problem.map(|p| ChainProblemData {
            kind: p.kind.into(),
            file: file(&p.file),
            line: p.line.min(u32::MAX as usize) as u32,
            seq: p.seq.map(|s| s as f64),
            message: p.message,
        }),
    })
}
