//! The audit trail (core `audit` module): opening the hash-chained JSON Lines sink (with
//! rotation) for the gate, and `verify_audit_chain`, the core's `verify_chain`.

use crate::convert::{self, to_py};
use pyo3::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The JSONL sink at `path`, continuing its chain; `OSError` when it cannot be opened.
pub fn open_sink(path: &Path, rotate_bytes: Option<u64>) -> PyResult<Arc<signoff::JsonlAuditSink>> {
    signoff::JsonlAuditSink::open_with(path, signoff::AuditOptions { rotate_bytes })
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("cannot open the audit log {}: {e}", path.display())))
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The first problem `verify_audit_chain` found.
#[pyclass(module = "signoff._native", frozen)]
pub struct ChainProblem {
    pub inner: signoff::ChainProblem,
}

#[pymethods]
impl ChainProblem {
    /// `"edited"`, `"missing"`, `"reordered"` or `"malformed"`.
    #[getter]
    fn kind(&self) -> String {
        convert::enum_str(&self.inner.kind)
    }
    /// The file the record is in.
    #[getter]
    fn file(&self) -> String {
        path_str(&self.inner.file)
    }
    /// 1-based line number in `file`.
    #[getter]
    fn line(&self) -> usize {
        self.inner.line
    }
    /// The record's `seq`, when readable.
    #[getter]
    fn seq(&self) -> Option<u64> {
        self.inner.seq
    }
    /// In words.
    #[getter]
    fn message(&self) -> &str {
        &self.inner.message
    }
    fn __repr__(&self) -> String {
        format!(
            "ChainProblem(kind={:?}, file={:?}, line={}, seq={:?}, message={:?})",
            convert::enum_str(&self.inner.kind),
            path_str(&self.inner.file),
            self.inner.line,
            self.inner.seq,
            self.inner.message
        )
    }
}

/// What `verify_audit_chain` checked and found.
#[pyclass(module = "signoff._native", frozen)]
pub struct ChainReport {
    pub inner: signoff::ChainReport,
}

#[pymethods]
impl ChainReport {
    /// The files checked, oldest first (rotated files, then the active one).
    #[getter]
    fn files(&self) -> Vec<String> {
        self.inner.files.iter().map(|p| path_str(p)).collect()
    }
    /// Records checked (up to the first problem).
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records
    }
    /// The last good record's hash (the chain head).
    #[getter]
    fn head(&self) -> &str {
        &self.inner.head
    }
    /// The first problem, or `None` when the chain is intact.
    #[getter]
    fn problem(&self, py: Python<'_>) -> PyResult<Option<Py<ChainProblem>>> {
        self.inner
            .problem
            .clone()
            .map(|p| Py::new(py, ChainProblem { inner: p }))
            .transpose()
    }
    /// True when no problem was found.
    #[getter]
    fn intact(&self) -> bool {
        self.inner.is_intact()
    }
    /// As a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &serde_json::to_value(&self.inner).unwrap_or_default())
    }
    fn __repr__(&self) -> String {
        format!(
            "ChainReport(intact={}, records={}, files={})",
            self.inner.is_intact(),
            self.inner.records,
            self.inner.files.len()
        )
    }
}

/// Verifies a hash-chained audit log (its rotated files `<path>.1`, `<path>.2`, ... then
/// `path`, as one chain) and reports the first edited, missing, reordered or malformed record.
/// `FileNotFoundError` when there is no log; other `OSError`s when it cannot be read.
#[pyfunction]
fn verify_audit_chain(py: Python<'_>, path: PathBuf) -> PyResult<ChainReport> {
    let report = py.detach(move || signoff::verify_chain(path))?;
    Ok(ChainReport { inner: report })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ChainReport>()?;
    m.add_class::<ChainProblem>()?;
    m.add_function(wrap_pyfunction!(verify_audit_chain, m)?)?;
    Ok(())
}
