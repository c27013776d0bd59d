//! Core errors as JavaScript `SignoffError`s whose `code` is the core's `ErrorKind` string.

use napi::bindgen_prelude::*;
use napi::{Env, sys};
use napi_derive::napi;
use signoff::ErrorKind;
use std::cell::Cell;

/// Declares `ErrorCode` (its TypeScript string union comes from it) and its mapping from the
/// core's `ErrorKind`, from the core's list of kinds: a kind added to the core needs no edit here.
macro_rules! error_code {
    ($($(#[$doc:meta])* $kind:ident = $name:literal,)*) => {
        /// The stable machine-readable code of a `SignoffError`: the core's `ErrorKind` names.
        #[napi(string_enum = "snake_case")]
        #[derive(serde::Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $($(#[$doc])* $kind,)*
        }

        impl From<ErrorKind> for ErrorCode {
            fn from(k: ErrorKind) -> Self {
                match k {
                    $(ErrorKind::$kind => ErrorCode::$kind,)*
                }
            }
        }
    };
}

signoff::for_each_error_kind!(error_code);

/// Every error code, from the core's `ErrorKind::ALL`, in declaration order.
#[napi]
pub fn error_codes() -> Vec<&'static str> {
    ErrorKind::ALL.iter().map(|k| k.as_str()).collect()
}

thread_local! {
    /// A strong reference to the facade's `SignoffError` constructor, created by this thread's env
    /// (thread-local: a reference belongs to the env, and each JavaScript thread has its own).
    static ERROR_CLASS: Cell<sys::napi_ref> = const { Cell::new(std::ptr::null_mut()) };
}

/// Registers the facade's `SignoffError` class: `new SignoffError(message, code)` is what every
/// native call throws (or rejects with) when the core refuses something.
#[napi]
pub fn set_error_class(env: Env, ctor: Unknown) -> Result<()> {
    let mut r = std::ptr::null_mut();
    // SAFETY: `env` is the env of this native call, on its JavaScript thread; `ctor` is a handle
    // of this call's scope (an argument); `r` is a live local the reference is written to.
    crate::driver::check(unsafe { sys::napi_create_reference(env.raw(), ctor.raw(), 1, &mut r) })?;
    let old = ERROR_CLASS.with(|c| c.replace(r));
    if !old.is_null() {
        // SAFETY: `old` was created by `napi_create_reference` above, on this thread (so with this
        // env), and was just taken out of `ERROR_CLASS`: it is deleted exactly once.
        unsafe { sys::napi_delete_reference(env.raw(), old) };
    }
    Ok(())
}

/// A JavaScript string, or a null handle if it cannot be made (never passed where napi does not
/// check for null: see `js_error` and `error_value`).
fn string(env: &Env, s: &str) -> sys::napi_value {
    env.create_string(s).map(|v| v.raw()).unwrap_or(std::ptr::null_mut())
}

/// A `SignoffError` (or, before the facade registered it, an `Error` with `code`).
pub(crate) fn js_error(env: &Env, code: &str, message: &str) -> sys::napi_value {
    let raw = env.raw();
    let msg = string(env, message);
    let code_v = string(env, code);
    let class = ERROR_CLASS.with(|c| c.get());
    if !class.is_null() && !msg.is_null() && !code_v.is_null() {
        let mut ctor = std::ptr::null_mut();
        // SAFETY: `class` is a live reference (only `set_error_class` deletes one, after replacing
        // it) created on this thread, hence by `env`, the env of the call running now; `ctor` is
        // a live local.
        if unsafe { sys::napi_get_reference_value(raw, class, &mut ctor) } == sys::Status::napi_ok && !ctor.is_null() {
            let args = [msg, code_v];
            let mut out = std::ptr::null_mut();
            // SAFETY: `ctor` and the two arguments are (non-null, checked above) handles of the
            // current scope; `args` holds exactly the 2 values its length says and outlives the
            // call; `out` is a live local. A constructor that throws leaves the exception pending
            // and returns a status: it is cleared below.
            if unsafe { sys::napi_new_instance(raw, ctor, args.len(), args.as_ptr(), &mut out) } == sys::Status::napi_ok
            {
                return out;
            }
            clear_exception(env);
        }
    }
    let mut out = std::ptr::null_mut();
    // SAFETY: `raw` is the env of the call running now; `code_v` and `msg` are handles of the
    // current scope or null (`napi_create_error` accepts a null code and refuses a null message
    // with a status, leaving `out` null); `out` is a live local.
    unsafe { sys::napi_create_error(raw, code_v, msg, &mut out) };
    out
}

/// Takes the pending JavaScript exception, if there is one.
pub(crate) fn clear_exception(env: &Env) -> Option<sys::napi_value> {
    let mut pending = false;
    // SAFETY: `env` is the env of the call running now, on its thread; `pending` is a live local.
    unsafe { sys::napi_is_exception_pending(env.raw(), &mut pending) };
    if !pending {
        return None;
    }
    let mut e = std::ptr::null_mut();
    // SAFETY: as above; `e` is a live local that receives a handle of the current scope.
    unsafe { sys::napi_get_and_clear_last_exception(env.raw(), &mut e) };
    Some(e)
}

/// Throws `SignoffError(code)`; return the result from a native function.
pub(crate) fn throw_code(env: &Env, code: &str, message: &str) -> Error {
    let e = js_error(env, code, message);
    // Nothing to do if it cannot be thrown: the call still fails (with the status below).
    let _ = env.throw(e);
    Error::from_status(Status::PendingException)
}

/// Throws the core error as a `SignoffError` with its kind as `code`.
pub(crate) fn throw(env: &Env, e: &signoff::Error) -> Error {
    throw_code(env, e.kind().as_str(), &e.to_string())
}

/// A core `malformed` error for input the core never saw (bad enum strings, ids, numbers).
pub(crate) fn malformed(env: &Env, message: impl std::fmt::Display) -> Error {
    throw_code(env, ErrorKind::Malformed.as_str(), &format!("malformed payload: {message}"))
}

/// The JavaScript value to reject a promise with for `e`: the pending exception when `e` says
/// one was thrown, else a new error.
pub(crate) fn error_value(env: &Env, e: Error) -> sys::napi_value {
    if let Some(v) = clear_exception(env) {
        return v;
    }
    let mut out = std::ptr::null_mut();
    let code = string(env, e.status.as_ref());
    let msg = string(env, &e.reason);
    // SAFETY: `env` is the env of the call running now; `code` and `msg` are handles of the
    // current scope or null (accepted for the code, refused with a status for the message);
    // `out` is a live local.
    unsafe { sys::napi_create_error(env.raw(), code, msg, &mut out) };
    out
}

/// A caught exception's message (`err.message` for errors, `String(err)` otherwise).
pub(crate) fn describe(env: &Env, value: sys::napi_value) -> String {
    let value = match value.into_unknown(env) {
        Ok(v) => v,
        Err(_) => return "an exception that cannot be shown".into(),
    };
    let mut target = value;
    if value.get_type().is_ok_and(|t| t == ValueType::Object)
        && value.is_error().unwrap_or(false)
        && let Ok(message) = value.coerce_to_object().and_then(|o| o.get_named_property::<Unknown>("message"))
    {
        target = message;
    }
    match target.coerce_to_string().and_then(|s| s.into_utf8()).and_then(|s| s.as_str().map(str::to_owned)) {
        Ok(s) => s,
        Err(_) => {
            clear_exception(env);
            "an exception that cannot be shown".into()
        }
    }
}
