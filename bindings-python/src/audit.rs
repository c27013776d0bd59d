//! The audit trail (core `audit` module): `verify_audit_chain`, the core's
//! `verify_chain_with_store`.
//! File errors are the core's `io` kind: `IoError`, an `OSError` too.

use crate::convert::{self, to_py};
use crate::errors::IntoPyResult;
use pyo3::prelude::*;
use std::path::{Path, PathBuf};

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
    /// `"edited"`, `"missing"`, `"reordered"`, `"malformed"` or `"truncated"`.
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
        self.inner.problem.clone().map(|p| Py::new(py, ChainProblem { inner: p })).transpose()
    }
    /// The `seq` of the anchored record the log was checked against (`verify_audit_chain(...,
    /// store_path=...)`), or `None` when no anchor was checked, in which case records cut from the
    /// end would not show.
    #[getter]
    fn anchored_seq(&self) -> Option<u64> {
        self.inner.anchor.as_ref().map(|a| a.seq)
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
/// With `store_path` (the gate's `store_path`), also against the head that durable store
/// anchored: records cut from the end are `truncated`, a replaced last record `edited`. Call it
/// after the gate has closed: a running gate holds its database locked (`StoreError`).
/// `IoError` (an `OSError`, `errno` set) when there is no log or no database, or the log cannot
/// be read.
#[pyfunction]
#[pyo3(signature = (path, *, store_path=None))]
fn verify_audit_chain(py: Python<'_>, path: PathBuf, store_path: Option<PathBuf>) -> PyResult<ChainReport> {
    let report = py.detach(move || signoff::verify_chain_with_store(path, store_path.as_deref())).py_err()?;
    Ok(ChainReport { inner: report })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ChainReport>()?;
    m.add_class::<ChainProblem>()?;
    m.add_function(wrap_pyfunction!(verify_audit_chain, m)?)?;
    Ok(())
}
