//! Approval-token keys (the core's `Secret` and `TokenKeys`) and a token's claims. The key bytes
//! stay in Rust: the JavaScript objects hold no secret a console or inspector could print.

use crate::errors;
use napi::Env;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use signoff::{Secret, TokenClaims, TokenKeys};

/// A token signing key (the core's `Secret`: at least 32 bytes, zeroed when dropped).
#[napi]
pub struct NativeSecret {
    pub(crate) inner: Secret,
}

#[napi]
impl NativeSecret {
    /// Raw key bytes (at least 32). Fails with `config`.
    #[napi(factory)]
    pub fn from_bytes(env: Env, bytes: Uint8Array) -> Result<Self> {
        Secret::new(bytes.to_vec()).map(|inner| NativeSecret { inner }).map_err(|e| errors::throw(&env, &e))
    }

    /// Base64 key material (standard or URL-safe, padded or not). Fails with `config`.
    #[napi(factory)]
    pub fn from_base64(env: Env, text: String) -> Result<Self> {
        Secret::from_base64(&text).map(|inner| NativeSecret { inner }).map_err(|e| errors::throw(&env, &e))
    }

    /// 32 random bytes from the operating system's generator.
    #[napi(factory)]
    pub fn generate() -> Self {
        NativeSecret { inner: Secret::generate() }
    }

    /// The base64 form, to store in configuration.
    #[napi]
    pub fn to_base64(&self) -> String {
        self.inner.to_base64()
    }
}

/// The keys a gate signs and verifies approval tokens with (the core's `TokenKeys`): the first
/// is current (signs new tokens), the others only verify. Immutable: `rotate` and
/// `withVerifyOnly` return new key sets.
#[napi]
pub struct NativeTokenKeys {
    pub(crate) inner: TokenKeys,
}

#[napi]
impl NativeTokenKeys {
    /// One key, which signs and verifies. Fails with `config` (bad key id).
    #[napi(constructor)]
    pub fn new(env: Env, key_id: String, secret: &NativeSecret) -> Result<Self> {
        TokenKeys::new(key_id, secret.inner.clone())
            .map(|inner| NativeTokenKeys { inner })
            .map_err(|e| errors::throw(&env, &e))
    }

    /// Parses the configuration format: `key_id:base64secret` entries separated by commas or
    /// newlines, current key first; blank lines and `#` comments ignored. Fails with `config`.
    #[napi(factory)]
    pub fn parse(env: Env, text: String) -> Result<Self> {
        TokenKeys::parse(&text).map(|inner| NativeTokenKeys { inner }).map_err(|e| errors::throw(&env, &e))
    }

    /// Reads the configuration format from an environment variable. Fails with `config`.
    #[napi(factory)]
    pub fn from_env(env: Env, name: String) -> Result<Self> {
        TokenKeys::from_env(&name).map(|inner| NativeTokenKeys { inner }).map_err(|e| errors::throw(&env, &e))
    }

    /// Reads the configuration format from a file. Fails with `config`.
    #[napi(factory)]
    pub fn from_file(env: Env, path: String) -> Result<Self> {
        TokenKeys::from_file(&path).map(|inner| NativeTokenKeys { inner }).map_err(|e| errors::throw(&env, &e))
    }

    /// A new key set where `keyId` is current and these keys still verify.
    #[napi]
    pub fn rotate(&self, env: Env, key_id: String, secret: &NativeSecret) -> Result<NativeTokenKeys> {
        self.inner
            .clone()
            .rotate(key_id, secret.inner.clone())
            .map(|inner| NativeTokenKeys { inner })
            .map_err(|e| errors::throw(&env, &e))
    }

    /// A new key set with `keyId` added as verify-only (a retired key). Fails with `config`
    /// (duplicate or bad key id).
    #[napi]
    pub fn with_verify_only(&self, env: Env, key_id: String, secret: &NativeSecret) -> Result<NativeTokenKeys> {
        self.inner
            .clone()
            .with_verify_only(key_id, secret.inner.clone())
            .map(|inner| NativeTokenKeys { inner })
            .map_err(|e| errors::throw(&env, &e))
    }

    /// The id of the key new tokens are signed with.
    #[napi(getter)]
    pub fn current_key_id(&self) -> String {
        self.inner.current_key_id().to_owned()
    }

    /// Every key id, current first.
    #[napi]
    pub fn key_ids(&self) -> Vec<String> {
        self.inner.key_ids().into_iter().map(str::to_owned).collect()
    }
}

/// What an approval token says (the core's `TokenClaims`), once its signature verified.
#[napi(object, object_from_js = false)]
pub struct TokenClaimsData {
    /// The request the token answers.
    pub request_id: String,
    /// The request's tool.
    pub tool: String,
    /// `sha256:<hex>` of the canonical JSON of the request's arguments.
    pub arguments_digest: String,
    /// The request's session.
    pub session_id: String,
    /// The only approver who may present the token.
    pub approver: String,
    /// When it was issued (epoch ms).
    pub issued_at_ms: f64,
    /// When it stops being accepted (epoch ms).
    pub expires_at_ms: f64,
    /// The id of the key that signed it.
    pub key_id: String,
}

impl From<TokenClaims> for TokenClaimsData {
    fn from(c: TokenClaims) -> Self {
        TokenClaimsData {
            request_id: c.request_id.to_string(),
            tool: c.tool,
            arguments_digest: c.arguments_digest,
            session_id: c.session_id,
            approver: c.approver,
            issued_at_ms: c.issued_at_ms as f64,
            expires_at_ms: c.expires_at_ms as f64,
            key_id: c.key_id,
        }
    }
}

/// What an accepted approval marker says (the core's `MarkerClaims`).
#[napi(object, object_from_js = false)]
pub struct MarkerClaimsData {
    /// Unique per marker.
    pub nonce: String,
    /// The request the person answered (absent for a call a session grant covered).
    pub request_id: Option<String>,
    /// The tool, by the name the receiving gate knows it.
    pub tool: String,
    /// `sha256:<hex>` of the canonical JSON of the approved arguments.
    pub arguments_digest: String,
    /// Who approved.
    pub approver: String,
    /// When it was issued (epoch ms).
    pub issued_at_ms: f64,
    /// When it stops being accepted (epoch ms).
    pub expires_at_ms: f64,
    /// The id of the key that signed it.
    pub key_id: String,
}

impl From<signoff::MarkerClaims> for MarkerClaimsData {
    fn from(c: signoff::MarkerClaims) -> Self {
        MarkerClaimsData {
            nonce: c.nonce.to_string(),
            request_id: c.request_id.map(|u| u.to_string()),
            tool: c.tool,
            arguments_digest: c.arguments_digest,
            approver: c.approver,
            issued_at_ms: c.issued_at_ms as f64,
            expires_at_ms: c.expires_at_ms as f64,
            key_id: c.key_id,
        }
    }
}

/// The `_meta` key an approval marker travels under in an MCP request (`MARKER_META_KEY`).
#[napi]
pub fn marker_meta_key() -> &'static str {
    signoff::MARKER_META_KEY
}
