//! The browser approval console (crate `signoff-console`): `Console`, started for a gate on its
//! own thread. Every rule (sign-in, sessions, CSRF, who may approve) is the console's and the
//! core's; this file converts the options and releases the GIL while the server starts and stops.

use crate::convert;
use crate::errors::IntoPyResult;
use crate::gate::{PyGate, config_error};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use signoff::Naming;
use signoff_console::ConsoleOptions;

/// A running approval console (native layer; use `signoff.Gate.serve_console`).
#[pyclass(module = "signoff._native", frozen)]
pub struct Console {
    inner: signoff_console::Console,
}

impl Drop for Console {
    fn drop(&mut self) {
        // Closing joins the server's thread, which may be finishing a decision that wakes a
        // Python call: never wait for it holding the GIL.
        let inner = &self.inner;
        if Python::try_attach(|py| py.detach(|| inner.close())).is_none() {
            inner.close();
        }
    }
}

#[pymethods]
impl Console {
    /// Starts a console for `gate` from keyword options: the console crate's `ConsoleOptions`
    /// in snake_case (`ConsoleOptions::from_json`, which checks them: `ConfigError` naming the
    /// option), and returns once it listens.
    #[new]
    #[pyo3(signature = (gate, **options))]
    fn new(py: Python<'_>, gate: &Bound<'_, PyGate>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut json = serde_json::Map::new();
        for (name, value) in options.into_iter().flatten() {
            let name: String = name.extract()?;
            json.insert(name.clone(), convert::from_py(&value, &name).map_err(|e| config_error(py, &e))?);
        }
        let options = ConsoleOptions::from_json(&serde_json::Value::Object(json), Naming::Snake).py_err()?;
        let gate = gate.get().gate.clone();
        let inner = py.detach(|| signoff_console::Console::start(gate, options)).py_err()?;
        Ok(Console { inner })
    }

    /// The console's address, ending in `/`, e.g. `http://127.0.0.1:49152/`.
    #[getter]
    fn url(&self) -> &str {
        self.inner.url()
    }

    /// The address it listens on: `(host, port)`.
    #[getter]
    fn address(&self) -> (String, u16) {
        let a = self.inner.local_addr();
        (a.ip().to_string(), a.port())
    }

    /// A single-use sign-in link for `approver` (the signed token is in the URL fragment).
    fn sign_in_link(&self, py: Python<'_>, approver: &str) -> PyResult<String> {
        py.detach(|| self.inner.sign_in_link(approver)).py_err()
    }

    /// Stops the server and releases the port; waits for its thread. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn __repr__(&self) -> String {
        format!("Console(url={:?}, closed={})", self.inner.url(), if self.inner.is_closed() { "True" } else { "False" })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Console>()?;
    Ok(())
}
