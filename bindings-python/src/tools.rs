//! Tool definitions (core `tool` module): a Python dict is handed to the core's `ToolSpec`
//! (serde JSON, unknown fields rejected), so field names are exactly the core's.

use crate::convert;
use crate::errors::IntoPyResult;
use pyo3::prelude::*;
use signoff::ToolSpec;

/// A `ToolSpec` from a dict (or JSON text). `MalformedError` for unknown fields or wrong types.
pub fn spec_from_py(obj: &Bound<'_, PyAny>) -> PyResult<ToolSpec> {
    ToolSpec::from_json(convert::json_arg(obj, "tool definition")?).py_err()
}

/// Parses a tool spec dict with the core's rules and returns it with every default filled in.
#[pyfunction]
fn normalize_tool_spec<'py>(py: Python<'py>, spec: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    convert::ser_to_py(py, &spec_from_py(spec)?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(normalize_tool_spec, m)?)?;
    Ok(())
}
