//! JSON values <-> Python objects, and small shared helpers.
//!
//! Every Python value that enters the core goes through [`from_py`] (or, for JSON text,
//! [`json_arg`] and the core's strict parser): one strict converter, the same rules as every
//! other language (`signoff::json`). Out of the core, values become Python objects through
//! `pythonize` (they are already bounded: the core accepts nothing deeper than `MAX_NESTING`).

use crate::errors::{self, IntoPyResult};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PyMapping, PySet, PyString, PyTuple,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};
use signoff::json::{self as strict, MAX_NESTING};
use std::fmt::Write as _;

/// A JSON value as a fresh Python object (dict, list, str, int, float, bool, None).
pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| errors::malformed(format!("cannot convert JSON to Python: {e}")))
}

/// JSON text (as the core keeps arguments: `Arguments::json`) as a Python object, read straight
/// into Python objects (no `Value` in between).
pub fn json_to_py<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_transcode::transcode(&mut de, pythonize::Pythonizer::<pythonize::PythonizeDefault>::new(py))
        .map_err(|e| errors::malformed(format!("cannot convert JSON to Python: {e}")))
}

/// Any serializable core value as a Python object (its stable JSON form).
pub fn ser_to_py<'py, T: Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| errors::malformed(format!("cannot convert to Python: {e}")))
}

/// A Python object as a JSON value, strictly. `what` names it in the error, e.g. `"arguments"`.
///
/// Accepted: `dict` with `str` keys, `list`, `tuple`, `str`, `bool`, an `int` that fits in 64 bits
/// (`-2**63` to `2**64 - 1`), a finite `float`, `None` (subclasses of these too). Everything else
/// is `MalformedError`, with a message naming where (`arguments["a"][3] is NaN: ...`): NaN and
/// Infinity (never sent as `null`), larger ints (never rounded to a float), keys that are not
/// `str` (never stringified), other types (sets, bytes, datetimes, models: named, with how to
/// convert them), reference cycles, and nesting deeper than [`MAX_NESTING`] levels of arrays and
/// objects. The walk recurses at most `MAX_NESTING + 1` frames, whatever the input.
pub fn from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    Walk { path: [0; MAX_NESTING + 1], limit: MAX_NESTING }.value(obj, 0).map_err(|f| f.into_err(what))
}

/// [`from_py`] for a document that wraps values (a response, an event, a tool definition): like
/// the core's text parser, it may nest one level deeper, so a response carries edited arguments
/// at the limit whether it is given as a dict or as JSON text. The core checks the values inside.
fn document_from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    Walk { path: [0; MAX_NESTING + 1], limit: MAX_NESTING + 1 }.value(obj, 0).map_err(|f| f.into_err(what))
}

/// A Python object (a dict, or a JSON string) as a core type, through its serde form.
pub fn from_py_as<T: DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    let v = json_arg(obj, what)?;
    serde_json::from_value(v).map_err(|e| errors::malformed(format!("{what}: {e}")))
}

/// A document (a response, an event, a tool definition...) given as a dict, or as `str`/`bytes`
/// holding JSON, as a JSON value. Text goes through the core's strict parser (a repeated key, deep
/// nesting or a number out of range is `MalformedError`); a dict through the same walk as
/// [`from_py`]. Either way the document may nest one level more than a value, so that it can
/// carry a value at the limit.
pub fn json_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_cow().map_err(|_| errors::malformed(format!("{what} {NOT_UNICODE}")))?;
        return strict::from_str(&s, what).py_err();
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return strict::from_slice(b.as_bytes(), what).py_err();
    }
    document_from_py(obj, what)
}

/// The walk behind [`from_py`]: `path[..depth]` holds the ids of the containers from the root to
/// the value being converted (they are alive: the caller holds the root), for finding cycles.
/// Scalars push nothing, and nothing is allocated besides the JSON value itself.
struct Walk {
    path: [usize; MAX_NESTING + 1],
    /// How many levels of containers are allowed (the root container is level 1).
    limit: usize,
}

type Walked<T = Value> = Result<T, Box<Fault>>;

impl Walk {
    fn value(&mut self, obj: &Bound<'_, PyAny>, depth: usize) -> Walked {
        // The common types first; bool before int (it is an int subclass).
        if let Ok(s) = obj.cast::<PyString>() {
            return match s.to_cow() {
                Ok(s) => Ok(Value::String(s.into_owned())),
                Err(_) => Err(Fault::is(format!("is a str that {NOT_UNICODE}"))),
            };
        }
        if let Ok(b) = obj.cast::<PyBool>() {
            return Ok(Value::Bool(b.is_true()));
        }
        if obj.is_instance_of::<PyInt>() {
            if let Ok(i) = obj.extract::<i64>() {
                return Ok(Value::Number(i.into()));
            }
            if let Ok(u) = obj.extract::<u64>() {
                return Ok(Value::Number(u.into()));
            }
            return Err(Fault::is(BIG_INT.into()));
        }
        if let Ok(f) = obj.cast::<PyFloat>() {
            let f = f.value();
            return match Number::from_f64(f) {
                Some(n) => Ok(Value::Number(n)),
                None if f.is_nan() => Err(Fault::is(format!("is NaN: {NON_FINITE}"))),
                None if f > 0.0 => Err(Fault::is(format!("is Infinity: {NON_FINITE}"))),
                None => Err(Fault::is(format!("is -Infinity: {NON_FINITE}"))),
            };
        }
        if obj.is_none() {
            return Ok(Value::Null);
        }
        if let Ok(d) = obj.cast::<PyDict>() {
            self.enter(obj, depth)?;
            let mut map = Map::new();
            for (k, v) in d.iter() {
                let key = key(&k)?;
                let v = match self.value(&v, depth + 1) {
                    Ok(v) => v,
                    Err(f) => return Err(f.at(Seg::Key(key))),
                };
                match map.entry(key) {
                    Entry::Vacant(e) => {
                        e.insert(v);
                    }
                    // Two `str` subclass keys with the same text: refused, not "last one wins".
                    Entry::Occupied(e) => {
                        return Err(Fault::is(format!(
                            "has a duplicate key {}: two keys with the same text; refusing instead of keeping one",
                            quoted(e.key())
                        )));
                    }
                }
            }
            return Ok(Value::Object(map));
        }
        if let Ok(l) = obj.cast::<PyList>() {
            return self.array(obj, depth, l.len(), l.iter());
        }
        if let Ok(t) = obj.cast::<PyTuple>() {
            return self.array(obj, depth, t.len(), t.iter());
        }
        Err(Fault::is(unsupported(obj)))
    }

    /// A list or tuple `obj` (its `len` items) as a JSON array.
    fn array<'py>(
        &mut self,
        obj: &Bound<'py, PyAny>,
        depth: usize,
        len: usize,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
    ) -> Walked {
        self.enter(obj, depth)?;
        let mut out = Vec::with_capacity(len);
        for (i, item) in items.enumerate() {
            out.push(self.value(&item, depth + 1).map_err(|f| f.at(Seg::Index(i)))?);
        }
        Ok(Value::Array(out))
    }

    /// Enters the container `obj` at `depth` (the root is at 0): refused if it is one of its own
    /// ancestors (a cycle), or nested deeper than `MAX_NESTING` (checked before recursing).
    fn enter(&mut self, obj: &Bound<'_, PyAny>, depth: usize) -> Walked<()> {
        let id = obj.as_ptr() as usize;
        if let Some(ancestor) = self.path[..depth].iter().position(|&p| p == id) {
            return Err(Box::new(Fault::new(Problem::Cycle(ancestor))));
        }
        if depth >= self.limit {
            return Err(Box::new(Fault::new(Problem::TooDeep)));
        }
        self.path[depth] = id;
        Ok(())
    }
}

const NON_FINITE: &str = "JSON has no NaN or Infinity; refusing instead of sending null";
const NOT_UNICODE: &str = "is not valid Unicode (it contains a lone surrogate)";
const BIG_INT: &str = "is an int outside the 64-bit range of JSON numbers here (-2**63 to 2**64-1): \
                       refusing instead of rounding it to a float; pass it as a str";

fn key(k: &Bound<'_, PyAny>) -> Walked<String> {
    match k.cast::<PyString>() {
        Ok(s) => s.to_cow().map(|s| s.into_owned()).map_err(|_| Fault::is(format!("has a key that {NOT_UNICODE}"))),
        Err(_) => Err(Fault::is(format!(
            "has a key of type {}, not str: JSON object keys are strings; convert the keys yourself \
             (signoff does not stringify them)",
            type_name(k)
        ))),
    }
}

/// `is a set, which is not JSON-compatible ...: convert it first, e.g. with list(...)`.
fn unsupported(obj: &Bound<'_, PyAny>) -> String {
    let name = type_name(obj);
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'A', 'E', 'I', 'O', 'U']) { "an" } else { "a" };
    let mut msg = format!(
        "is {article} {name}, which is not JSON-compatible (dict with str keys, list, tuple, str, int, \
         float, bool, None)"
    );
    if let Some(how) = conversion_hint(obj) {
        let _ = write!(msg, ": convert it first, e.g. with {how}");
    }
    msg
}

/// How a common non-JSON value usually becomes JSON. Only on the error path (it may run Python).
fn conversion_hint(obj: &Bound<'_, PyAny>) -> Option<&'static str> {
    let py = obj.py();
    let ty = obj.get_type();
    let has = |attr: &str| ty.hasattr(attr).unwrap_or(false);
    let is_a = |module: &str, class: &str| -> bool {
        py.import(module).and_then(|m| m.getattr(class)).and_then(|c| obj.is_instance(&c)).unwrap_or(false)
    };
    Some(if has("model_dump") {
        ".model_dump() (a pydantic model)"
    } else if has("__dataclass_fields__") {
        "dataclasses.asdict(...)"
    } else if is_a("enum", "Enum") {
        ".value"
    } else if obj.is_instance_of::<PySet>() || obj.is_instance_of::<PyFrozenSet>() || is_a("collections.abc", "Set") {
        "list(...) or sorted(...)"
    } else if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyByteArray>() || is_a("builtins", "memoryview") {
        ".decode() for text, or base64 for binary data"
    } else if has("isoformat") {
        ".isoformat()"
    } else if is_a("datetime", "timedelta") {
        ".total_seconds()"
    } else if obj.is_instance_of::<PyMapping>() {
        "dict(...) (with str keys)"
    } else if has("tolist") {
        ".tolist() (a NumPy value)"
    } else if is_a("decimal", "Decimal") || is_a("fractions", "Fraction") {
        "str(...), or float(...) if rounding is acceptable"
    } else if has("__fspath__") || is_a("uuid", "UUID") {
        "str(...)"
    } else if has("__iter__") {
        "list(...)"
    } else {
        return None;
    })
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().fully_qualified_name().map(|n| n.to_string()).unwrap_or_else(|_| "object of an unnamed type".into())
}

/// A key as it appears in a message: quoted, escaped, and cut to a readable length.
fn quoted(key: &str) -> String {
    const MAX_CHARS: usize = 40;
    match key.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}...", &key[..cut]),
        None => format!("{key:?}"),
    }
}

/// Why [`from_py`] refused a value, and where: built only on the error path.
struct Fault {
    problem: Problem,
    /// From the refused value up to the root (innermost first).
    segs: Vec<Seg>,
}

enum Problem {
    /// Said of the value at the location: `is NaN: ...`, `has a key of type int, ...`.
    Is(String),
    /// The container at the location is its own ancestor at this depth.
    Cycle(usize),
    TooDeep,
}

enum Seg {
    Key(String),
    Index(usize),
}

impl Fault {
    fn new(problem: Problem) -> Fault {
        Fault { problem, segs: Vec::new() }
    }

    fn is(tail: String) -> Box<Fault> {
        Box::new(Fault::new(Problem::Is(tail)))
    }

    fn at(mut self: Box<Self>, seg: Seg) -> Box<Self> {
        self.segs.push(seg);
        self
    }

    fn into_err(self, what: &str) -> PyErr {
        // `what` followed by the first `n` segments from the root: `arguments["a"][3]`.
        let location = |n: usize| {
            let mut s = what.to_owned();
            for seg in self.segs.iter().rev().take(n) {
                let _ = match seg {
                    Seg::Key(k) => write!(s, "[{}]", quoted(k)),
                    Seg::Index(i) => write!(s, "[{i}]"),
                };
            }
            s
        };
        match &self.problem {
            Problem::Is(tail) => errors::malformed(format!("{} {tail}", location(self.segs.len()))),
            Problem::Cycle(ancestor) => errors::malformed(format!(
                "{what} contains a reference cycle: {} refers back to {}, which contains it",
                location(self.segs.len()),
                location(*ancestor)
            )),
            // The core's words, as every binding says them (without the "malformed payload: "
            // prefix of its `Display`, like the other messages here).
            Problem::TooDeep => match strict::too_deep(what) {
                signoff::Error::Malformed(msg) => errors::malformed(msg),
                e => errors::to_py(e),
            },
        }
    }
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
    let name = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".into());
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
