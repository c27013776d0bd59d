//! Signed approval tokens (core `token` module): `Secret`, `TokenKeys` and `TokenClaims`.
//! Signing, verification and every check are the core's; a secret's bytes never reach a repr,
//! a message or a log (the core's `Debug` shows the length only).

use crate::convert::{self, to_py};
use crate::errors::IntoPyResult;
use pyo3::prelude::*;
use std::path::PathBuf;

/// A token signing key (at least 32 bytes). Its bytes are never shown: `repr()` gives the length
/// only. Load it from configuration (`Secret.from_base64`, `TokenKeys.from_env`,
/// `TokenKeys.from_file`) so tokens stay valid across a restart.
#[pyclass(module = "signoff._native", frozen)]
pub struct Secret {
    pub inner: signoff::Secret,
}

#[pymethods]
impl Secret {
    /// Wraps raw key bytes (at least 32; `ConfigError` otherwise).
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        Ok(Secret { inner: signoff::Secret::new(key.to_vec()).py_err()? })
    }
    /// Decodes base64 key material (standard or URL-safe, padded or not).
    #[staticmethod]
    fn from_base64(text: &str) -> PyResult<Self> {
        Ok(Secret { inner: signoff::Secret::from_base64(text).py_err()? })
    }
    /// 32 random bytes from the operating system (tests and development).
    #[staticmethod]
    fn generate() -> Self {
        Secret { inner: signoff::Secret::generate() }
    }
    /// The base64 form, to store in configuration (this does reveal the key).
    fn to_base64(&self) -> String {
        self.inner.to_base64()
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

/// The keys a gate signs and verifies approval tokens with: the current key signs, older keys
/// still verify tokens issued before a rotation. Immutable: `rotate` and `with_verify_only`
/// return new key sets. `repr()` shows the key ids only.
#[pyclass(module = "signoff._native", frozen)]
pub struct TokenKeys {
    pub inner: signoff::TokenKeys,
}

#[pymethods]
impl TokenKeys {
    /// One key, which signs and verifies. Key ids are 1-64 characters of `[A-Za-z0-9_-]`.
    #[new]
    fn new(key_id: String, secret: PyRef<'_, Secret>) -> PyResult<Self> {
        Ok(TokenKeys { inner: signoff::TokenKeys::new(key_id, secret.inner.clone()).py_err()? })
    }
    /// A new key set where `key_id` is the current key; the previous keys keep verifying.
    fn rotate(&self, key_id: String, secret: PyRef<'_, Secret>) -> PyResult<Self> {
        Ok(TokenKeys { inner: self.inner.clone().rotate(key_id, secret.inner.clone()).py_err()? })
    }
    /// A new key set with a key that verifies but does not sign (a retired key).
    fn with_verify_only(&self, key_id: String, secret: PyRef<'_, Secret>) -> PyResult<Self> {
        Ok(TokenKeys { inner: self.inner.clone().with_verify_only(key_id, secret.inner.clone()).py_err()? })
    }
    /// Parses `key_id:base64secret` entries separated by commas or newlines, current key first
    /// (blank lines and `#` comments ignored).
    #[staticmethod]
    fn parse(text: &str) -> PyResult<Self> {
        Ok(TokenKeys { inner: signoff::TokenKeys::parse(text).py_err()? })
    }
    /// Reads the keys from an environment variable (its value is never shown).
    #[staticmethod]
    fn from_env(var: &str) -> PyResult<Self> {
        Ok(TokenKeys { inner: signoff::TokenKeys::from_env(var).py_err()? })
    }
    /// Reads the keys from a file (e.g. a mounted secret).
    #[staticmethod]
    fn from_file(path: PathBuf) -> PyResult<Self> {
        Ok(TokenKeys { inner: signoff::TokenKeys::from_file(path).py_err()? })
    }
    /// The id of the key new tokens are signed with.
    #[getter]
    fn current_key_id(&self) -> &str {
        self.inner.current_key_id()
    }
    /// Every key id, current first.
    #[getter]
    fn key_ids(&self) -> Vec<String> {
        self.inner.key_ids().into_iter().map(str::to_owned).collect()
    }
    fn __repr__(&self) -> String {
        // Key ids are `[A-Za-z0-9_-]`: quoting them Python-style needs no escaping.
        let ids: Vec<String> = self.inner.key_ids().iter().map(|k| format!("'{k}'")).collect();
        format!("TokenKeys(key_ids=[{}], secrets=<redacted>)", ids.join(", "))
    }
}

/// What a verified token says (`Gate.inspect_token`).
#[pyclass(module = "signoff._native", frozen)]
pub struct TokenClaims {
    pub inner: signoff::TokenClaims,
}

impl TokenClaims {
    fn value(&self) -> serde_json::Value {
        serde_json::to_value(&self.inner).unwrap_or_default()
    }
}

#[pymethods]
impl TokenClaims {
    /// The request the token answers (also its nonce).
    #[getter]
    fn request_id(&self) -> String {
        self.inner.request_id.to_string()
    }
    /// The request's tool.
    #[getter]
    fn tool(&self) -> &str {
        &self.inner.tool
    }
    /// `sha256:<hex>` of the request's arguments.
    #[getter]
    fn arguments_digest(&self) -> &str {
        &self.inner.arguments_digest
    }
    /// The request's session.
    #[getter]
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    /// The only approver who may present the token.
    #[getter]
    fn approver(&self) -> &str {
        &self.inner.approver
    }
    /// When it was issued (epoch ms).
    #[getter]
    fn issued_at_ms(&self) -> u64 {
        self.inner.issued_at_ms
    }
    /// When it stops being accepted (epoch ms).
    #[getter]
    fn expires_at_ms(&self) -> u64 {
        self.inner.expires_at_ms
    }
    /// The id of the key that signed it.
    #[getter]
    fn key_id(&self) -> &str {
        &self.inner.key_id
    }
    /// As a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.value())
    }
    /// As JSON text.
    #[pyo3(signature = (*, indent=None))]
    fn to_json(&self, py: Python<'_>, indent: Option<usize>) -> PyResult<String> {
        convert::pretty_json(py, &self.value(), indent)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<TokenClaims>().is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __repr__(&self) -> String {
        format!("TokenClaims({})", convert::to_json_text(&self.inner))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Secret>()?;
    m.add_class::<TokenKeys>()?;
    m.add_class::<TokenClaims>()?;
    Ok(())
}
