//! One exception class per core `ErrorKind`, generated from `ErrorKind::ALL` / `as_str`:
//! `unknown_tool` -> `UnknownToolError`, all subclasses of `SignoffError`, each with a `kind`
//! class attribute holding the stable kind string. `IoError` (kind `io`, a file could not be
//! read or written) is an `OSError` too, with `errno` set when the system gave one.

use pyo3::exceptions::{PyException, PyOSError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use signoff::ErrorKind;

pyo3::create_exception!(
    signoff,
    SignoffError,
    PyException,
    "Base class of every error signoff raises. `kind` is the core's stable error kind string\n\
     (e.g. \"already_resolved\"); each kind has its own subclass."
);

static KIND_TYPES: PyOnceLock<Vec<(ErrorKind, Py<PyType>)>> = PyOnceLock::new();

/// `already_resolved` -> `AlreadyResolvedError`.
pub fn class_name(kind: ErrorKind) -> String {
    let mut out = String::new();
    for part in kind.as_str().split('_') {
        let mut c = part.chars();
        if let Some(f) = c.next() {
            out.extend(f.to_uppercase());
            out.push_str(c.as_str());
        }
    }
    out.push_str("Error");
    out
}

fn types(py: Python<'_>) -> PyResult<&Vec<(ErrorKind, Py<PyType>)>> {
    KIND_TYPES.get_or_try_init(py, || {
        let base = py.get_type::<SignoffError>().into_any();
        let os_error = py.get_type::<PyOSError>().into_any();
        let type_ = py.get_type::<PyType>();
        let mut v = Vec::with_capacity(ErrorKind::ALL.len());
        for kind in ErrorKind::ALL {
            let bases = match kind {
                ErrorKind::Io => PyTuple::new(py, [&base, &os_error])?,
                _ => PyTuple::new(py, [&base])?,
            };
            let ns = PyDict::new(py);
            ns.set_item("kind", kind.as_str())?;
            ns.set_item("__module__", "signoff")?;
            ns.set_item(
                "__doc__",
                format!("Raised for the core error kind `{}` (see `signoff.ErrorKind`).", kind.as_str()),
            )?;
            let ty = type_.call1((class_name(kind), bases, ns))?;
            v.push((kind, ty.cast_into::<PyType>()?.unbind()));
        }
        Ok(v)
    })
}

/// The Python exception for a core error: the kind's subclass, with the core's message.
pub fn to_py(e: signoff::Error) -> PyErr {
    Python::attach(|py| {
        if e.kind() == ErrorKind::Io {
            // An `OSError` too, with the operating system's error number when it gave one, and
            // the file it is about.
            let err = io_error(py, (e.to_string(),));
            if let Some(n) = e.os_error() {
                let _ = err.value(py).setattr("errno", n);
            }
            if let Some(path) = e.path() {
                let _ = err.value(py).setattr("filename", path.to_string_lossy());
            }
            return err;
        }
        kind_err(py, e.kind(), e.to_string())
    })
}

pub fn kind_err(py: Python<'_>, kind: ErrorKind, msg: String) -> PyErr {
    if kind == ErrorKind::Io {
        return io_error(py, (msg,));
    }
    match types(py) {
        Ok(t) => match t.iter().find(|(k, _)| *k == kind) {
            Some((_, ty)) => PyErr::from_type(ty.bind(py).clone(), msg),
            None => SignoffError::new_err(msg),
        },
        Err(e) => e,
    }
}

/// `IoError(*args)`, with `OSError`'s arguments (`(errno, strerror, filename)` sets them).
pub fn io_error<'py, A: pyo3::call::PyCallArgs<'py>>(py: Python<'py>, args: A) -> PyErr {
    let made = types(py).and_then(|t| {
        let (_, ty) = t.iter().find(|(k, _)| *k == ErrorKind::Io).expect("every kind has a class");
        ty.bind(py).call1(args)
    });
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// `MalformedError(msg)`: a payload (dict, JSON, value) that cannot be parsed.
pub fn malformed(msg: String) -> PyErr {
    Python::attach(|py| kind_err(py, ErrorKind::Malformed, msg))
}

pub trait IntoPyResult<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for signoff::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<SignoffError>();
    base.setattr("kind", "")?;
    m.add("SignoffError", base)?;
    let mut kinds = Vec::new();
    for (kind, ty) in types(py)? {
        m.add(class_name(*kind).as_str(), ty.bind(py))?;
        kinds.push(kind.as_str());
    }
    m.add("ERROR_KINDS", PyTuple::new(py, kinds)?)?;
    Ok(())
}
