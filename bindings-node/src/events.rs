//! Events: the core's types in their JavaScript shape (camelCase JSON; the `#[napi(object)]`
//! structs give the facade their TypeScript types), the core's stable JSON form, and
//! subscriptions to the bus.

use crate::driver::{JsState, Settle, TaskFuture, TaskId};
use crate::errors;
use napi::bindgen_prelude::*;
use napi::{Env, sys};
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use signoff::{CancelReason, ConfirmationRequest, Event, EventTypes, Lagged, Outcome, ResponseDecision, Scope};
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};
use uuid::Uuid;

/// A string enum mirroring a core enum. Document it with `#[doc = "..."]` lines: `///` comments
/// reach napi's `.d.ts` generator through the macro as raw strings (`r" ..."`).
macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident ($case:literal) <=> $core:ty { $($v:ident),* $(,)? }) => {
        $(#[$m])*
        #[napi(string_enum = $case)]
        #[derive(Serialize, Deserialize)]
        #[serde(rename_all = $case)]
        pub enum $name { $($v),* }

        impl From<$core> for $name {
            fn from(x: $core) -> Self {
                match x { $(<$core>::$v => $name::$v),* }
            }
        }

        impl From<$name> for $core {
            fn from(x: $name) -> Self {
                match x { $($name::$v => <$core>::$v),* }
            }
        }
    };
}
pub(crate) use string_enum;

string_enum!(
    #[doc = "How a request ended."]
    OutcomeKind("kebab-case") <=> Outcome { Approved, Denied, TimedOut, Cancelled }
);
string_enum!(
    #[doc = "Why a request was cancelled."]
    CancelReasonKind("kebab-case") <=> CancelReason { NoApprover, Shutdown, Aborted, SessionEnded, ApprovalFailed }
);
string_enum!(
    #[doc = "How far an approval reaches."]
    ScopeKind("snake_case") <=> Scope { Once, Session }
);
string_enum!(
    #[doc = "A person's decision in a response."]
    ResponseDecisionKind("snake_case") <=> ResponseDecision { Approve, Deny }
);

/// A call waiting for a person (`confirmation-request`).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmationRequestData {
    #[napi(js_name = "type", ts_type = "'confirmation-request'")]
    #[serde(rename = "type")]
    pub kind: String,
    // @generated begin request-fields (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
    /// The request's id (a UUID); a response carries it back.
    pub id: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's description, escaped for display.
    pub description: String,
    /// The arguments that run if the request is approved unchanged.
    #[napi(ts_type = "any")]
    pub arguments: Value,
    /// Pretty JSON of the arguments with control, bidi and zero-width characters escaped: show
    /// this, not a rendering of the arguments of your own.
    pub display_arguments: String,
    /// The rendered prompt, escaped for display.
    pub prompt: String,
    /// `sha256:<hex>` of the canonical JSON of the arguments; a response may echo it.
    pub arguments_digest: String,
    /// The agent session the call belongs to.
    pub session_id: String,
    /// The model's id for this tool call, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Whether the person may edit the arguments.
    pub editable: bool,
    /// Why approval is needed.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// How long the request waits, in milliseconds.
    #[napi(ts_type = "number")]
    pub timeout_ms: u64,
    /// When it stops waiting, in Unix epoch milliseconds.
    #[napi(ts_type = "number")]
    pub deadline_ms: u64,
    /// When it was made, in Unix epoch milliseconds.
    #[napi(ts_type = "number")]
    pub created_at_ms: u64,
    /// Free metadata from the caller (absent when none was given).
    #[napi(ts_type = "any")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    // @generated end request-fields
}

/// A person's answer (`confirmation-response`).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmationResponseData {
    #[napi(js_name = "type", ts_type = "'confirmation-response'")]
    #[serde(rename = "type")]
    pub kind: String,
    // @generated begin response-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
    /// The request's id.
    pub id: String,
    /// Approve or deny.
    pub decision: ResponseDecisionKind,
    /// Once (default) or for the rest of the session.
    pub scope: ScopeKind,
    /// Edited arguments (approve only; the tool must be editable). Validated against the
    /// tool's schema before they can run. `null` is no edit, as when absent.
    #[napi(ts_type = "any")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The person's reason, passed to the model on a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// The tool the person saw; checked against the request when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The digest of the arguments the person saw; checked against the request when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_digest: Option<String>,
    /// The request's session; checked against the request when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When the person answered, in Unix epoch milliseconds; filled in by the gate when absent.
    #[napi(ts_type = "number")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
    // @generated end response-fields
}

/// A request's deadline passed with no answer (`confirmation-timeout`).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmationTimeoutData {
    #[napi(js_name = "type", ts_type = "'confirmation-timeout'")]
    #[serde(rename = "type")]
    pub kind: String,
    // @generated begin timeout-fields (core/tests/sourcegen.rs, from the core's `ConfirmationTimeout`)
    /// The request's id.
    pub id: String,
    /// The request's tool.
    pub tool: String,
    /// The request's session.
    pub session_id: String,
    /// The request's deadline, in Unix epoch milliseconds.
    #[napi(ts_type = "number")]
    pub deadline_ms: u64,
    /// When the timeout was detected, in Unix epoch milliseconds.
    #[napi(ts_type = "number")]
    pub at_ms: u64,
    // @generated end timeout-fields
}

/// The final event of every request (`confirmation-resolved`).
#[napi(object, object_to_js = false, object_from_js = false)]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmationResolvedData {
    #[napi(js_name = "type", ts_type = "'confirmation-resolved'")]
    #[serde(rename = "type")]
    pub kind: String,
    // @generated begin resolved-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResolved`)
    /// The request's id.
    pub id: String,
    /// The request's tool.
    pub tool: String,
    /// The request's session.
    pub session_id: String,
    /// How the request ended.
    pub outcome: OutcomeKind,
    /// Why it was cancelled (outcome `cancelled` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<CancelReasonKind>,
    /// Who decided (approved or denied only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// The reason given with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `session` when the approval also granted later calls of the tool in the session, else
    /// `once`.
    pub scope: ScopeKind,
    /// The person changed the arguments.
    pub edited: bool,
    /// When the request resolved, in Unix epoch milliseconds.
    #[napi(ts_type = "number")]
    pub at_ms: u64,
    // @generated end resolved-fields
}

/// A subscriber fell behind: `missed` events were dropped for it. Re-sync (de-duplicating by
/// id) from `pending`, the oldest requests still pending (at most 1,000, the core's
/// `LAGGED_SNAPSHOT_LIMIT`), then, when `more` is set, from `pendingPage` starting after `more`.
/// (The shape of the lag items `NativeSubscription::next` writes, for the `.d.ts`.)
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)]
pub struct LaggedData {
    #[napi(js_name = "type", ts_type = "'lagged'")]
    pub kind: String,
    #[napi(ts_type = "number")]
    pub missed: u64,
    pub pending: Vec<ConfirmationRequestData>,
    /// A page cursor when more requests are pending than `pending` holds, else `null`.
    #[napi(ts_type = "string | null")]
    pub more: String,
}

/// Appends the JavaScript (camelCase) JSON of a request, as its `confirmation-request` event, to `out`.
pub(crate) fn write_request(out: &mut Vec<u8>, r: &ConfirmationRequest) {
    let start = out.len();
    crate::camel::write(out, r);
    // The event's `type` tag first, as the core writes it.
    out.splice(start..start + 1, b"{\"type\":\"confirmation-request\",".iter().copied());
}

/// A request's `displayArguments` from its arguments' canonical JSON text, as a request listener
/// is handed it: the core's display text, computed when a listener reads it.
#[napi]
pub fn display_arguments(canonical: String) -> String {
    signoff::display::display_arguments_json(&canonical)
}

/// Appends the JavaScript (camelCase) JSON of an event to `out`.
fn write_event(out: &mut Vec<u8>, event: &Event) {
    crate::camel::write(out, event);
}

pub(crate) fn js_string(env: &Env, s: &str) -> Result<sys::napi_value> {
    Ok(env.create_string(s)?.raw())
}

/// Parses the core's stable JSON form of an event (strictly: a repeated key, deep nesting or a
/// number that is not finite is refused); returns its JavaScript (camelCase) JSON. Fails with
/// `malformed`.
#[napi]
pub fn parse_event(env: Env, json: String) -> Result<String> {
    let value = crate::json::parse(&env, &json, "the event")?;
    let event = Event::from_json(value).map_err(|e| errors::throw(&env, &e))?;
    let mut out = Vec::with_capacity(512);
    write_event(&mut out, &event);
    Ok(String::from_utf8(out).unwrap_or_default())
}

fn uuid(env: &Env, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| errors::malformed(&env.clone(), format!("id {s:?} is not a UUID: {e}")))
}

fn data<T: serde::de::DeserializeOwned>(env: &Env, v: Value, what: &str) -> Result<T> {
    serde_json::from_value(v).map_err(|e| errors::malformed(env, format!("{what}: {e}")))
}

/// The core event for an event's JavaScript (camelCase) JSON: checked against its JavaScript
/// shape (the `#[napi(object)]` declaration: unknown or missing fields, wrong types), then read
/// as the core's form.
fn event_from_data(env: &Env, v: Value) -> Result<Event> {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
    match kind.as_str() {
        "confirmation-request" => drop(data::<ConfirmationRequestData>(env, v.clone(), &kind)?),
        "confirmation-response" => drop(data::<ConfirmationResponseData>(env, v.clone(), &kind)?),
        "confirmation-timeout" => drop(data::<ConfirmationTimeoutData>(env, v.clone(), &kind)?),
        "confirmation-resolved" => drop(data::<ConfirmationResolvedData>(env, v.clone(), &kind)?),
        other => return Err(errors::malformed(env, format!("unknown event type {other:?}"))),
    }
    if let Some(id) = v.get("id").and_then(Value::as_str) {
        uuid(env, id)?;
    }
    Event::from_json(crate::camel::snake_keys(v)).map_err(|e| errors::throw(env, &e))
}

/// The core's stable JSON form (snake_case fields, `type` tag) of an event's JavaScript
/// (camelCase) JSON, parsed strictly. Fails with `malformed`.
#[napi]
pub fn serialize_event(env: Env, json: String) -> Result<String> {
    let v = crate::json::parse(&env, &json, "the event")?;
    let event = event_from_data(&env, v)?;
    Ok(event.to_json().to_string())
}

/// A subscription to a gate's bus, as an approver or an observer, for some event types (the
/// core's `Subscription::only`). Closing it unsubscribes; with `denyWhenUnobserved` the core then
/// cancels what is pending if it was the last approver.
#[napi]
pub struct NativeSubscription {
    state: Weak<JsState>,
    cell: Rc<RefCell<Option<signoff::Subscription>>>,
    waiting: Cell<Option<TaskId>>,
}

impl NativeSubscription {
    pub(crate) fn new(env: &Env, state: &Rc<JsState>, types: Option<Vec<String>>, observe: bool) -> Result<Self> {
        let types = match types {
            None => EventTypes::ALL,
            Some(names) => EventTypes::from_names(names).map_err(|e| errors::throw(env, &e))?,
        };
        let sub = if observe { state.gate.observe() } else { state.gate.subscribe() };
        Ok(NativeSubscription {
            state: Rc::downgrade(state),
            cell: Rc::new(RefCell::new(Some(sub.only(types)))),
            waiting: Cell::new(None),
        })
    }
}

type Item = std::result::Result<Event, Lagged>;

fn poll_sub(sub: std::pin::Pin<&mut signoff::Subscription>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
    use futures_util::Stream;
    sub.poll_next(cx)
}

#[napi]
impl NativeSubscription {
    /// The next events, at least one and at most `max`, in bus order, as a JSON array of event
    /// data (`ConfirmationRequestData`, ..., `LaggedData`); `null` once the subscription is
    /// closed or the gate closed and everything was delivered. Returns the value itself when
    /// events are waiting, else a promise.
    #[napi(ts_return_type = "string | null | Promise<string | null>")]
    pub fn next<'env>(&self, env: &'env Env, max: u32) -> Result<Unknown<'env>> {
        let Some(state) = self.state.upgrade() else {
            return Err(errors::throw(&env.clone(), &signoff::Error::Closed));
        };
        let cell = self.cell.clone();
        let weak = self.state.clone();
        let max = max.max(1) as usize;
        let fut: TaskFuture = Box::pin(async move {
            let items: Option<Vec<Item>> = std::future::poll_fn(|cx| {
                let mut b = cell.borrow_mut();
                let Some(sub) = b.as_mut() else { return Poll::Ready(None) };
                let mut sub = std::pin::Pin::new(sub);
                let mut v = Vec::new();
                while v.len() < max {
                    match poll_sub(sub.as_mut(), cx) {
                        Poll::Ready(Some(item)) => v.push(item),
                        Poll::Ready(None) if v.is_empty() => return Poll::Ready(None),
                        Poll::Ready(None) => break,
                        // After close has finished (and its events were delivered), nothing more comes.
                        Poll::Pending if v.is_empty() && weak.upgrade().is_none_or(|s| s.is_finished()) => {
                            return Poll::Ready(None);
                        }
                        Poll::Pending if v.is_empty() => return Poll::Pending,
                        Poll::Pending => break,
                    }
                }
                Poll::Ready(Some(v))
            })
            .await;
            Box::new(move |env: &Env| items_to_js(env, items)) as Settle
        });
        let (id, v) = state.run(env, fut, false, None)?;
        self.waiting.set(Some(id));
        v.into_unknown(env)
    }

    /// Unsubscribes. A pending `next` resolves `null`.
    #[napi]
    pub fn close(&self, env: Env) {
        let taken = self.cell.borrow_mut().take();
        match self.state.upgrade() {
            Some(state) => state.enter(&env, || {
                drop(taken);
                if let Some(t) = self.waiting.take() {
                    state.wake(t);
                }
            }),
            None => drop(taken),
        }
    }

    /// False once closed.
    #[napi(getter)]
    pub fn open(&self) -> bool {
        self.cell.borrow().is_some()
    }
}

fn items_to_js(env: &Env, items: Option<Vec<Item>>) -> Result<sys::napi_value> {
    let Some(items) = items else {
        return Ok(Null.into_unknown(env)?.raw());
    };
    let mut out = Vec::with_capacity(512 * items.len());
    out.push(b'[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match item {
            Ok(e) => write_event(&mut out, &e),
            Err(lag) => {
                // `LaggedData`'s shape.
                out.extend_from_slice(
                    format!("{{\"type\":\"lagged\",\"missed\":{},\"pending\":[", lag.missed).as_bytes(),
                );
                for (i, r) in lag.pending.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_request(&mut out, r);
                }
                out.extend_from_slice(b"],\"more\":");
                let _ = serde_json::to_writer(&mut out, &lag.more.map(|c| c.to_string()));
                out.push(b'}');
            }
        }
    }
    out.push(b']');
    js_string(env, std::str::from_utf8(&out).unwrap_or("[]"))
}
