//! Stored records (durable stores), and the durable store behind a thin wrapper that tells the
//! driver which restored requests (`Gate::recover`) are unfinished: like a confirmation in
//! flight, they keep the process alive until their state is final. Every `PendingStore` method
//! is delegated to the core's `SqliteStore` (the asynchronous and hand-off forms too, so the
//! store's writer thread is used as in every language); no decision is made here.

use crate::driver::Shared;
use crate::events::{string_enum, write_request};
use crate::executor::result_data;
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use signoff::{
    Completion, ConfirmationRequest, OwnedStateChange, PendingCursor, PendingStore, RecordState, StateChange,
    StoredRecord,
};
use std::sync::Arc;
use uuid::Uuid;

pub(crate) struct Tracked {
    pub inner: Arc<dyn PendingStore>,
    pub shared: Arc<Shared>,
}

impl PendingStore for Tracked {
    fn insert(&self, request: Arc<ConfirmationRequest>) -> signoff::Result<()> {
        self.inner.insert(request)
    }
    fn remove(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.remove(id)
    }
    fn get(&self, id: &Uuid) -> Option<Arc<ConfirmationRequest>> {
        self.inner.get(id)
    }
    fn list(&self) -> Vec<Arc<ConfirmationRequest>> {
        self.inner.list()
    }
    fn page(&self, after: Option<&PendingCursor>, limit: usize) -> Vec<Arc<ConfirmationRequest>> {
        self.inner.page(after, limit)
    }
    fn audit_anchor(self: Arc<Self>) -> Option<Arc<dyn signoff::AuditAnchor>> {
        self.inner.clone().audit_anchor()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }
    fn insert_async(
        &self,
        request: Arc<ConfirmationRequest>,
        abandoned: Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<signoff::StoreFuture<()>> {
        self.inner.insert_async(request, abandoned)
    }
    fn transition(&self, id: &Uuid, change: StateChange<'_>) -> signoff::Result<()> {
        let r = self.inner.transition(id, change);
        finished(&self.shared, id, change.state, &r);
        r
    }
    fn transition_async(&self, id: Uuid, change: OwnedStateChange) -> signoff::StoreFuture<()> {
        let (shared, state) = (self.shared.clone(), change.state);
        let stored = self.inner.transition_async(id, change);
        Box::pin(async move {
            let r = stored.await;
            finished(&shared, &id, state, &r);
            r
        })
    }
    fn transition_then(&self, id: Uuid, change: OwnedStateChange, done: Completion) {
        let (shared, state) = (self.shared.clone(), change.state);
        self.inner.transition_then(
            id,
            change,
            Completion::new(move |r| {
                finished(&shared, &id, state, &r);
                done.complete(r);
            }),
        );
    }
    fn use_once(&self, id: &Uuid, expires_at_ms: u64) -> signoff::Result<bool> {
        self.inner.use_once(id, expires_at_ms)
    }
    fn try_record(&self, id: &Uuid) -> signoff::Result<Option<StoredRecord>> {
        self.inner.try_record(id)
    }
    fn record(&self, id: &Uuid) -> Option<StoredRecord> {
        self.inner.record(id)
    }
    fn unfinished(&self) -> signoff::Result<Vec<StoredRecord>> {
        self.inner.unfinished()
    }
    fn restore(&self, request: Arc<ConfirmationRequest>) {
        self.shared.restored_started(request.id);
        self.inner.restore(request)
    }
    fn close(&self) {
        self.inner.close()
    }
}

/// A restored request is finished once its state is final, or when its tool could not start
/// (the core then records nothing more).
fn finished(shared: &Shared, id: &Uuid, state: RecordState, r: &signoff::Result<()>) {
    if state.is_final() || (state == RecordState::Executing && r.is_err()) {
        shared.restored_finished(id);
    }
}

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
