//! JSON values <-> Python objects (through `pythonize`), and small shared helpers.

use crate::errors;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A JSON value as a fresh Python object (dict, list, str, int, float, bool, None).
pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| errors::malformed(format!("cannot convert JSON to Python: {e}")))
}

/// Any serializable core value as a Python object (its stable JSON form).
pub fn ser_to_py<'py, T: Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| errors::malformed(format!("cannot convert to Python: {e}")))
}

/// A Python object as a JSON value. `what` names it in the error (`MalformedError`).
pub fn from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    pythonize::depythonize::<Value>(obj).map_err(|e| errors::malformed(format!("{what} is not JSON-compatible: {e}")))
}

/// A Python object (a dict, or a JSON string) as a core type, through its serde form.
pub fn from_py_as<T: DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    let v = json_arg(obj, what)?;
    serde_json::from_value(v).map_err(|e| errors::malformed(format!("{what}: {e}")))
}

/// A dict, or a `str`/`bytes` holding JSON, as a JSON value.
pub fn json_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_cow()?;
        return serde_json::from_str(&s).map_err(|e| errors::malformed(format!("{what} is not JSON: {e}")));
    }
    if let Ok(b) = obj.extract::<&[u8]>() {
        return serde_json::from_slice(b).map_err(|e| errors::malformed(format!("{what} is not JSON: {e}")));
    }
    from_py(obj, what)
}

/// The serde string form of a unit enum (`Scope::Session` -> `"session"`).
pub fn enum_str<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// Parses a unit enum from its serde string form; `MalformedError` otherwise.
pub fn parse_enum<T: DeserializeOwned>(s: &str, what: &str) -> PyResult<T> {
    serde_json::from_value(Value::String(s.to_owned()))
        .map_err(|e| errors::malformed(format!("invalid {what} {s:?}: {e}")))
}

/// Compact JSON text.
pub fn to_json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

static JSON_DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `json.dumps(obj, indent=indent)`, for `to_json(indent=...)`.
pub fn pretty_json(py: Python<'_>, v: &Value, indent: Option<usize>) -> PyResult<String> {
    match indent {
        None => Ok(serde_json::to_string(v).unwrap_or_default()),
        Some(n) => {
            let dumps = JSON_DUMPS.import(py, "json", "dumps")?;
            let kw = pyo3::types::PyDict::new(py);
            kw.set_item("indent", n)?;
            kw.set_item("ensure_ascii", false)?;
            dumps.call((to_py(py, v)?,), Some(&kw))?.extract()
        }
    }
}

/// `Type: message` for an exception, for texts the model or the audit log reads.
pub fn describe_err(py: Python<'_>, e: &PyErr) -> String {
    let name = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let msg = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
    if msg.is_empty() { name } else { format!("{name}: {msg}") }
}

static GET_LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Logs `msg` with the exception's traceback on the `signoff` logger (level: a `logging` level).
pub fn log_exception(py: Python<'_>, level: u32, msg: &str, e: &PyErr) {
    let r: PyResult<()> = (|| {
        let logger = GET_LOGGER.import(py, "logging", "getLogger")?.call1(("signoff",))?;
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("exc_info", e.value(py))?;
        logger.call_method("log", (level, msg), Some(&kw))?;
        Ok(())
    })();
    if let Err(le) = r {
        le.write_unraisable(py, None);
    }
}

pub const LOG_WARNING: u32 = 30;
pub const LOG_ERROR: u32 = 40;
