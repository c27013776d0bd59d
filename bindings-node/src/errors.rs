//! Core errors as JavaScript `SignoffError`s whose `code` is the core's `ErrorKind` string.

use napi::bindgen_prelude::*;
use napi::{Env, sys};
use napi_derive::napi;
use signoff::ErrorKind;
use std::cell::Cell;

/// The stable machine-readable code of a `SignoffError`: the core's `ErrorKind` names.
#[napi(string_enum = "snake_case")]
#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    UnknownTool,
    InvalidTool,
    InvalidArguments,
    UnknownRequest,
    AlreadyResolved,
    Expired,
    EditsNotAllowed,
    Mismatch,
    Malformed,
    Unauthorized,
    Closed,
    Store,
    NoExecutor,
    BadSignature,
    UnknownKey,
    TokenExpired,
    WrongApprover,
    AlreadyUsed,
    NotPending,
    Config,
}

/// Exhaustive on purpose: a kind added to the core does not compile here until it is added above
/// (and so to the generated `.d.ts`).
impl From<ErrorKind> for ErrorCode {
    fn from(k: ErrorKind) -> Self {
        match k {
            ErrorKind::UnknownTool => ErrorCode::UnknownTool,
            ErrorKind::InvalidTool => ErrorCode::InvalidTool,
            ErrorKind::InvalidArguments => ErrorCode::InvalidArguments,
            ErrorKind::UnknownRequest => ErrorCode::UnknownRequest,
            ErrorKind::AlreadyResolved => ErrorCode::AlreadyResolved,
            ErrorKind::Expired => ErrorCode::Expired,
            ErrorKind::EditsNotAllowed => ErrorCode::EditsNotAllowed,
            ErrorKind::Mismatch => ErrorCode::Mismatch,
            ErrorKind::Malformed => ErrorCode::Malformed,
            ErrorKind::Unauthorized => ErrorCode::Unauthorized,
            ErrorKind::Closed => ErrorCode::Closed,
            ErrorKind::Store => ErrorCode::Store,
            ErrorKind::NoExecutor => ErrorCode::NoExecutor,
            ErrorKind::BadSignature => ErrorCode::BadSignature,
            ErrorKind::UnknownKey => ErrorCode::UnknownKey,
            ErrorKind::TokenExpired => ErrorCode::TokenExpired,
            ErrorKind::WrongApprover => ErrorCode::WrongApprover,
            ErrorKind::AlreadyUsed => ErrorCode::AlreadyUsed,
            ErrorKind::NotPending => ErrorCode::NotPending,
            ErrorKind::Config => ErrorCode::Config,
        }
    }
}

/// Every error code, from the core's `ErrorKind::ALL`, in declaration order.
#[napi]
pub fn error_codes() -> Vec<&'static str> {
    ErrorKind::ALL.iter().map(|k| k.as_str()).collect()
}

thread_local! {
    static ERROR_CLASS: Cell<sys::napi_ref> = const { Cell::new(std::ptr::null_mut()) };
}

/// Registers the facade's `SignoffError` class: `new SignoffError(message, code)` is what every
/// native call throws (or rejects with) when the core refuses something.
#[napi]
pub fn set_error_class(env: Env, ctor: Unknown) -> Result<()> {
    let mut r = std::ptr::null_mut();
    crate::driver::check(unsafe { sys::napi_create_reference(env.raw(), ctor.raw(), 1, &mut r) })?;
    let old = ERROR_CLASS.with(|c| c.replace(r));
    if !old.is_null() {
        unsafe { sys::napi_delete_reference(env.raw(), old) };
    }
    Ok(())
}

fn string(env: sys::napi_env, s: &str) -> sys::napi_value {
    let mut v = std::ptr::null_mut();
    unsafe { sys::napi_create_string_utf8(env, s.as_ptr().cast(), s.len() as isize, &mut v) };
    v
}

/// A `SignoffError` (or, before the facade registered it, an `Error` with `code`).
pub(crate) fn js_error(env: sys::napi_env, code: &str, message: &str) -> sys::napi_value {
    let msg = string(env, message);
    let code_v = string(env, code);
    let class = ERROR_CLASS.with(|c| c.get());
    if !class.is_null() {
        let mut ctor = std::ptr::null_mut();
        if unsafe { sys::napi_get_reference_value(env, class, &mut ctor) } == sys::Status::napi_ok && !ctor.is_null() {
            let args = [msg, code_v];
            let mut out = std::ptr::null_mut();
            if unsafe { sys::napi_new_instance(env, ctor, 2, args.as_ptr(), &mut out) } == sys::Status::napi_ok {
                return out;
            }
            clear_exception(env);
        }
    }
    let mut out = std::ptr::null_mut();
    unsafe { sys::napi_create_error(env, code_v, msg, &mut out) };
    out
}

pub(crate) fn clear_exception(env: sys::napi_env) -> Option<sys::napi_value> {
    let mut pending = false;
    unsafe { sys::napi_is_exception_pending(env, &mut pending) };
    if !pending {
        return None;
    }
    let mut e = std::ptr::null_mut();
    unsafe { sys::napi_get_and_clear_last_exception(env, &mut e) };
    Some(e)
}

/// Throws `SignoffError(code)`; return the result from a native function.
pub(crate) fn throw_code(env: &Env, code: &str, message: &str) -> Error {
    let e = js_error(env.raw(), code, message);
    unsafe { sys::napi_throw(env.raw(), e) };
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
    if let Some(v) = clear_exception(env.raw()) {
        return v;
    }
    let mut out = std::ptr::null_mut();
    let code = string(env.raw(), e.status.as_ref());
    let msg = string(env.raw(), &e.reason);
    unsafe { sys::napi_create_error(env.raw(), code, msg, &mut out) };
    out
}

/// A caught exception's message (`err.message` for errors, `String(err)` otherwise).
pub(crate) fn describe(env: sys::napi_env, value: sys::napi_value) -> String {
    let mut msg = std::ptr::null_mut();
    let mut ty = 0;
    unsafe { sys::napi_typeof(env, value, &mut ty) };
    let mut target = value;
    if ty == sys::ValueType::napi_object {
        let mut is_error = false;
        unsafe { sys::napi_is_error(env, value, &mut is_error) };
        if is_error
            && unsafe { sys::napi_get_named_property(env, value, c"message".as_ptr(), &mut msg) }
                == sys::Status::napi_ok
        {
            target = msg;
        }
    }
    let mut s = std::ptr::null_mut();
    if unsafe { sys::napi_coerce_to_string(env, target, &mut s) } != sys::Status::napi_ok {
        clear_exception(env);
        return "an exception that cannot be shown".into();
    }
    let mut len = 0usize;
    unsafe { sys::napi_get_value_string_utf8(env, s, std::ptr::null_mut(), 0, &mut len) };
    let mut buf = vec![0u8; len + 1];
    unsafe { sys::napi_get_value_string_utf8(env, s, buf.as_mut_ptr().cast(), buf.len(), &mut len) };
    buf.truncate(len);
    String::from_utf8_lossy(&buf).into_owned()
}
