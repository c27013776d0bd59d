//! Signed approval tokens: an approval link for a UI that lives elsewhere (a browser tab, a
//! phone, a chat channel).
//!
//! The pending call stays on the server. A token names it and binds it: HMAC-SHA256, under a
//! key with an id, over the request id (the nonce), the tool, the SHA-256 digest of the
//! arguments' canonical JSON (the `arguments_digest` every request carries), the session, the
//! approver it is meant for, and its issue and expiry times. Approving with a token runs exactly
//! the arguments stored with the request; nothing the client sends is trusted except an edit,
//! which travels separately and is validated like any other.
//!
//! The wire form is `so1.<key id>.<claims, base64url JSON>.<mac, base64url>`. It is opaque to
//! clients; [`Gate::respond_token`](crate::Gate::respond_token) verifies it, in this order, with a
//! distinct error for each failure: `malformed`, `unknown_key`, `bad_signature` (constant-time
//! comparison), `token_expired`, `wrong_approver`, then against the request: `already_used`,
//! `not_pending`.

use crate::error::{Error, Result};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};
use std::path::Path;
use uuid::Uuid;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const PREFIX: &str = "so1";
/// The shortest secret accepted (bytes).
pub const MIN_SECRET_LEN: usize = 32;
/// The longest token [`verify`](TokenKeys::verify) will look at (bytes).
pub const MAX_TOKEN_LEN: usize = 8192;

/// A secret key. Its bytes are never printed (`Debug` shows the length only) and are zeroed
/// when dropped.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps raw key bytes; at least [`MIN_SECRET_LEN`] bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.len() < MIN_SECRET_LEN {
            return Err(Error::Config(format!(
                "a token secret must be at least {MIN_SECRET_LEN} bytes (got {})",
                bytes.len()
            )));
        }
        Ok(Secret(bytes))
    }
    /// Decodes base64 (standard or URL-safe, padded or not) key material.
    pub fn from_base64(text: &str) -> Result<Self> {
        let t = text.trim();
        let bytes = STANDARD
            .decode(t)
            .or_else(|_| URL_SAFE.decode(t))
            .or_else(|_| URL_SAFE_NO_PAD.decode(t))
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(t))
            .map_err(|_| Error::Config("a token secret must be base64".into()))?;
        Secret::new(bytes)
    }
    /// 32 random bytes from the operating system's generator (for tests and development; in
    /// production, load keys from configuration so they survive a restart).
    pub fn generate() -> Self {
        let mut b = vec![0u8; 32];
        rand::Rng::fill(&mut rand::rng(), &mut b[..]);
        Secret(b)
    }
    /// The base64 form, to store in configuration.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(&self.0)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes, redacted>)", self.0.len())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // Volatile so the zeroing is not optimised away.
            // SAFETY: `b` is a valid, aligned, exclusive reference to a `u8` of this live buffer.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// The keys a gate signs and verifies tokens with. The first key is the current one (new tokens
/// are signed with it); the others still verify tokens issued before a rotation.
///
/// Configuration format (environment variable or file): entries `key_id:base64secret`,
/// separated by commas or newlines, current key first; blank lines and `#` comments are ignored.
///
/// ```
/// use signoff::{TokenKeys, Secret};
/// let keys = TokenKeys::parse("k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n# old key\nk1:ISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A=").unwrap();
/// assert_eq!(keys.current_key_id(), "k2");
/// assert!(format!("{keys:?}").contains("redacted"));
/// ```
#[derive(Clone, Debug)]
pub struct TokenKeys {
    keys: Vec<(String, Secret)>,
}

impl TokenKeys {
    /// One key, which signs and verifies.
    pub fn new(key_id: impl Into<String>, secret: Secret) -> Result<Self> {
        let key_id = key_id.into();
        check_key_id(&key_id)?;
        Ok(TokenKeys { keys: vec![(key_id, secret)] })
    }
    /// Rotation: `key_id` becomes the current key; the previous keys keep verifying.
    pub fn rotate(mut self, key_id: impl Into<String>, secret: Secret) -> Result<Self> {
        let key_id = key_id.into();
        check_key_id(&key_id)?;
        self.keys.retain(|(k, _)| *k != key_id);
        self.keys.insert(0, (key_id, secret));
        Ok(self)
    }
    /// Adds a key that verifies but does not sign (a retired key whose tokens may still be out).
    pub fn with_verify_only(mut self, key_id: impl Into<String>, secret: Secret) -> Result<Self> {
        let key_id = key_id.into();
        check_key_id(&key_id)?;
        if self.keys.iter().any(|(k, _)| *k == key_id) {
            return Err(Error::Config(format!("duplicate token key id {key_id:?}")));
        }
        self.keys.push((key_id, secret));
        Ok(self)
    }
    /// Parses the configuration format (see the type's docs).
    pub fn parse(text: &str) -> Result<Self> {
        let mut keys: Option<TokenKeys> = None;
        for entry in text.split([',', '\n']).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (kid, secret) = entry
                .split_once(':')
                .ok_or_else(|| Error::Config("token keys are `key_id:base64secret` entries".into()))?;
            let secret = Secret::from_base64(secret)?;
            keys = Some(match keys {
                None => TokenKeys::new(kid.trim(), secret)?,
                Some(k) => k.with_verify_only(kid.trim(), secret)?,
            });
        }
        keys.ok_or_else(|| Error::Config("no token keys configured".into()))
    }
    /// Reads the keys from an environment variable (the variable's value is never logged).
    pub fn from_env(var: &str) -> Result<Self> {
        let v = std::env::var(var).map_err(|_| Error::Config(format!("environment variable {var} is not set")))?;
        Self::parse(&v)
    }
    /// Reads the keys from a file (e.g. a mounted secret).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let v = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read token keys from {}: {e}", path.display())))?;
        Self::parse(&v)
    }
    /// The id of the key new tokens are signed with.
    pub fn current_key_id(&self) -> &str {
        &self.keys[0].0
    }
    /// Every key id, current first.
    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(k, _)| k.as_str()).collect()
    }

    fn mac(secret: &Secret, domain: &[u8], signed: &str) -> HmacSha256 {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&secret.0).expect("HMAC takes any key length");
        m.update(domain);
        m.update(signed.as_bytes());
        m
    }

    /// Signs `body` with the current key under `prefix` and `domain` (domain separation: an
    /// approval token never verifies as a sign-in token, nor the other way round). Returns the
    /// token and the key id.
    fn sign_body(&self, kind: &Kind, body: &impl Serialize) -> (String, String) {
        let (kid, secret) = &self.keys[0];
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(body).expect("claims serialize"));
        let signed = format!("{}.{kid}.{body}", kind.prefix);
        let tag = Self::mac(secret, kind.domain, &signed).finalize().into_bytes();
        (format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag)), kid.clone())
    }

    /// Checks a token's form, key and signature (constant-time); returns its body and key id.
    fn verify_body<T: serde::de::DeserializeOwned>(&self, kind: &Kind, token: &str) -> Result<(T, String)> {
        let what = kind.what;
        if token.len() > MAX_TOKEN_LEN {
            return Err(Error::Malformed(format!("{what} too long")));
        }
        let mut parts = token.split('.');
        let (Some(prefix), Some(kid), Some(body), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            // "an approval token", "a sign-in token".
            let a = if what.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
            return Err(Error::Malformed(format!("{a} {what} has four `.`-separated parts")));
        };
        if prefix != kind.prefix {
            return Err(Error::Malformed(format!("not a signoff {what} (prefix {prefix:?})")));
        }
        let tag =
            URL_SAFE_NO_PAD.decode(tag).map_err(|_| Error::Malformed(format!("{what} signature is not base64url")))?;
        let secret = self
            .keys
            .iter()
            .find(|(k, _)| k == kid)
            .map(|(_, s)| s)
            .ok_or_else(|| Error::UnknownKey(kid.to_owned()))?;
        let signed = &token[..prefix.len() + 1 + kid.len() + 1 + body.len()];
        // `verify_slice` compares in constant time.
        Self::mac(secret, kind.domain, signed).verify_slice(&tag).map_err(|_| Error::BadSignature)?;
        // Signed by us, so the body is ours; a parse failure here would be our own bug.
        let bytes = URL_SAFE_NO_PAD.decode(body).map_err(|_| Error::Malformed(format!("{what} body")))?;
        let wire = serde_json::from_slice(&bytes).map_err(|e| Error::Malformed(format!("{what} claims: {e}")))?;
        Ok((wire, kid.to_owned()))
    }

    /// Signs `claims` with the current key (its `key_id` is set to the current key's id).
    pub fn sign(&self, claims: &mut TokenClaims) -> String {
        let (token, kid) = self.sign_body(&APPROVAL, &Wire::from(&*claims));
        claims.key_id = kid;
        token
    }

    /// Checks a token's form, key and signature (constant-time) and returns its claims. Expiry,
    /// approver and the request's state are checked by the gate.
    pub fn verify(&self, token: &str) -> Result<TokenClaims> {
        let (wire, kid): (Wire, String) = self.verify_body(&APPROVAL, token)?;
        Ok(wire.into_claims(&kid))
    }

    /// Signs a sign-in token (see [`SignInClaims`]); its `key_id` is set to the current key's id.
    pub fn sign_sign_in(&self, claims: &mut SignInClaims) -> String {
        let wire = SignInWire {
            apr: claims.approver.clone(),
            nonce: claims.nonce,
            iat: claims.issued_at_ms,
            exp: claims.expires_at_ms,
        };
        let (token, kid) = self.sign_body(&SIGN_IN, &wire);
        claims.key_id = kid;
        token
    }

    /// Checks a sign-in token's form, key and signature and returns its claims (expiry and
    /// single use are the caller's: [`Gate::verify_sign_in`](crate::Gate::verify_sign_in)
    /// checks expiry). An approval token is refused here (`malformed`), and a sign-in token by
    /// [`verify`](Self::verify).
    pub fn verify_sign_in(&self, token: &str) -> Result<SignInClaims> {
        let (w, kid): (SignInWire, String) = self.verify_body(&SIGN_IN, token)?;
        Ok(SignInClaims { approver: w.apr, nonce: w.nonce, issued_at_ms: w.iat, expires_at_ms: w.exp, key_id: kid })
    }
    /// Signs an approval marker (see [`MarkerClaims`]); its `key_id` is set to the current key's id.
    pub fn sign_marker(&self, claims: &mut MarkerClaims) -> String {
        let wire = MarkerWire {
            nonce: claims.nonce,
            rid: claims.request_id,
            tool: claims.tool.clone(),
            dig: claims.arguments_digest.clone(),
            apr: claims.approver.clone(),
            iat: claims.issued_at_ms,
            exp: claims.expires_at_ms,
        };
        let (token, kid) = self.sign_body(&MARKER, &wire);
        claims.key_id = kid;
        token
    }

    /// Checks an approval marker's form, key and signature and returns its claims (expiry, the
    /// call it names and single use are checked by
    /// [`Gate::accept_approval_marker`](crate::Gate::accept_approval_marker)). Approval and
    /// sign-in tokens are refused here (`malformed`), and a marker by their verifiers.
    pub fn verify_marker(&self, token: &str) -> Result<MarkerClaims> {
        let (w, kid): (MarkerWire, String) = self.verify_body(&MARKER, token)?;
        Ok(MarkerClaims {
            nonce: w.nonce,
            request_id: w.rid,
            tool: w.tool,
            arguments_digest: w.dig,
            approver: w.apr,
            issued_at_ms: w.iat,
            expires_at_ms: w.exp,
            key_id: kid,
        })
    }
}

/// What a kind of token is called, its prefix and its MAC domain.
struct Kind {
    prefix: &'static str,
    domain: &'static [u8],
    what: &'static str,
}

const APPROVAL: Kind = Kind { prefix: PREFIX, domain: b"signoff-approval-token-v1\0", what: "approval token" };
const SIGN_IN: Kind = Kind { prefix: "so1s", domain: b"signoff-sign-in-token-v1\0", what: "sign-in token" };
const MARKER: Kind = Kind { prefix: "so1m", domain: b"signoff-approval-marker-v1\0", what: "approval marker" };

/// An approval marker's claims: a call that a signoff gate already had approved by a person
/// (`approver`), so that another signoff gate it reaches (the MCP gate in front of a proxied
/// server) need not ask again. Issued by [`Gate::approval_marker`](crate::Gate::approval_marker),
/// accepted once by [`Gate::accept_approval_marker`](crate::Gate::accept_approval_marker); signed
/// with the gates' shared [`TokenKeys`] under its own prefix (`so1m`) and MAC domain, so it is
/// never an approval token or a sign-in link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerClaims {
    /// Unique per marker.
    pub nonce: Uuid,
    /// The request the person answered (`None` for a call a session grant covered).
    pub request_id: Option<Uuid>,
    /// The tool, by the name the receiving gate knows it.
    pub tool: String,
    /// `sha256:<hex>` of the canonical JSON of the approved arguments.
    pub arguments_digest: String,
    /// Who approved.
    pub approver: String,
    /// When it was issued (epoch ms).
    pub issued_at_ms: u64,
    /// When it stops being accepted (epoch ms).
    pub expires_at_ms: u64,
    /// The id of the key that signed it.
    pub key_id: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MarkerWire {
    nonce: Uuid,
    rid: Option<Uuid>,
    tool: String,
    dig: String,
    apr: String,
    iat: u64,
    exp: u64,
}

/// A sign-in token's claims: a person may open an approval console as `approver` until
/// `expires_at_ms`. Signed with the gate's [`TokenKeys`] under its own prefix (`so1s`) and MAC
/// domain, so it can never answer a request, and an approval token can never sign anyone in.
/// `nonce` lets the console accept each link once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignInClaims {
    /// Who signs in.
    pub approver: String,
    /// Unique per link.
    pub nonce: Uuid,
    /// When it was issued (epoch ms).
    pub issued_at_ms: u64,
    /// When it stops being accepted (epoch ms).
    pub expires_at_ms: u64,
    /// The id of the key that signed it.
    pub key_id: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignInWire {
    apr: String,
    nonce: Uuid,
    iat: u64,
    exp: u64,
}

fn check_key_id(kid: &str) -> Result<()> {
    if kid.is_empty() || kid.len() > 64 || !kid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(Error::Config(format!("token key id {kid:?} must be 1-64 characters of [A-Za-z0-9_-]")));
    }
    Ok(())
}

/// What a token says. Returned by [`Gate::inspect_token`](crate::Gate::inspect_token) once the
/// signature has verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The request the token answers (also the token's nonce).
    pub request_id: Uuid,
    /// The tool the request is for.
    pub tool: String,
    /// `sha256:<hex>` of the canonical JSON of the request's arguments.
    pub arguments_digest: String,
    /// The request's session.
    pub session_id: String,
    /// The only approver who may present this token.
    pub approver: String,
    /// When it was issued (epoch ms).
    pub issued_at_ms: u64,
    /// When it stops being accepted (epoch ms).
    pub expires_at_ms: u64,
    /// The id of the key that signed it.
    pub key_id: String,
}

/// The signed form: short names, fixed field order.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    rid: Uuid,
    tool: String,
    dig: String,
    sid: String,
    apr: String,
    iat: u64,
    exp: u64,
}

impl From<&TokenClaims> for Wire {
    fn from(c: &TokenClaims) -> Self {
        Wire {
            rid: c.request_id,
            tool: c.tool.clone(),
            dig: c.arguments_digest.clone(),
            sid: c.session_id.clone(),
            apr: c.approver.clone(),
            iat: c.issued_at_ms,
            exp: c.expires_at_ms,
        }
    }
}

impl Wire {
    fn into_claims(self, kid: &str) -> TokenClaims {
        TokenClaims {
            request_id: self.rid,
            tool: self.tool,
            arguments_digest: self.dig,
            session_id: self.sid,
            approver: self.apr,
            issued_at_ms: self.iat,
            expires_at_ms: self.exp,
            key_id: kid.to_owned(),
        }
    }
}

/// The fingerprint a used token is remembered by (SHA-256 of the whole token, hex).
pub(crate) fn fingerprint(token: &str) -> String {
    crate::display::sha256_hex(token.as_bytes())
}

/// A person's answer presented with a token. `approver` is who presents it, as the host
/// authenticated them (a logged-in user, a verified chat account); it must equal the token's
/// approver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenResponse {
    /// Who presents the token.
    pub approver: String,
    /// Approve or deny.
    pub decision: crate::ResponseDecision,
    /// An edit (approve only; the tool must be editable). Re-validated against the schema and
    /// re-checked by the policy's rules before it can run, and recorded in the audit log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// Once (default) or for the rest of the session.
    #[serde(default)]
    pub scope: crate::Scope,
    /// The person's reason (passed to the model on a denial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl TokenResponse {
    /// Approve, running exactly the stored arguments.
    pub fn approve(approver: impl Into<String>) -> Self {
        TokenResponse {
            approver: approver.into(),
            decision: crate::ResponseDecision::Approve,
            arguments: None,
            scope: crate::Scope::Once,
            reason: None,
        }
    }
    /// Deny, with an optional reason.
    pub fn deny(approver: impl Into<String>, reason: Option<String>) -> Self {
        TokenResponse { reason, decision: crate::ResponseDecision::Deny, ..Self::approve(approver) }
    }
    /// Approve with edited arguments.
    pub fn with_arguments(mut self, arguments: serde_json::Value) -> Self {
        self.arguments = Some(arguments);
        self
    }
    /// Approve for the rest of the session.
    pub fn for_session(mut self) -> Self {
        self.scope = crate::Scope::Session;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> TokenClaims {
        TokenClaims {
            request_id: Uuid::nil(),
            tool: "t".into(),
            arguments_digest: "sha256:00".into(),
            session_id: "s".into(),
            approver: "alice".into(),
            issued_at_ms: 1,
            expires_at_ms: 2,
            key_id: String::new(),
        }
    }

    #[test]
    fn malformed_token_messages_read_as_english() {
        let keys = TokenKeys::new("k1", Secret::generate()).unwrap();
        let e = keys.verify("not-a-token").unwrap_err().to_string();
        assert!(e.contains("an approval token has four `.`-separated parts"), "{e}");
        let e = keys.verify_marker("x.y").unwrap_err().to_string();
        assert!(e.contains("an approval marker has four"), "{e}");
        let e = keys.verify_sign_in("x").unwrap_err().to_string();
        assert!(e.contains("a sign-in token has four"), "{e}");
    }

    #[test]
    fn round_trip_and_rotation() {
        let k1 = TokenKeys::new("k1", Secret::generate()).unwrap();
        let mut c = claims();
        let t1 = k1.sign(&mut c);
        assert_eq!(k1.verify(&t1).unwrap(), c);
        let k2 = k1.clone().rotate("k2", Secret::generate()).unwrap();
        assert_eq!(k2.verify(&t1).unwrap().key_id, "k1");
        let t2 = k2.sign(&mut claims());
        assert!(t2.starts_with("so1.k2."));
        assert_eq!(k1.verify(&t2).unwrap_err().kind(), crate::ErrorKind::UnknownKey);
    }

    #[test]
    fn sign_in_and_approval_tokens_never_verify_as_each_other() {
        let keys = TokenKeys::new("k1", Secret::generate()).unwrap();
        let mut c = SignInClaims {
            approver: "alice".into(),
            nonce: Uuid::new_v4(),
            issued_at_ms: 1,
            expires_at_ms: 2,
            key_id: String::new(),
        };
        let sign_in = keys.sign_sign_in(&mut c);
        assert!(sign_in.starts_with("so1s.k1."));
        assert_eq!(keys.verify_sign_in(&sign_in).unwrap(), c);
        assert_eq!(keys.verify(&sign_in).unwrap_err().kind(), crate::ErrorKind::Malformed);
        let approval = keys.sign(&mut claims());
        assert_eq!(keys.verify_sign_in(&approval).unwrap_err().kind(), crate::ErrorKind::Malformed);
        // The same body under the other prefix does not verify either (separate MAC domains).
        let swapped = sign_in.replacen("so1s.", "so1.", 1);
        assert_eq!(keys.verify(&swapped).unwrap_err().kind(), crate::ErrorKind::BadSignature);
        let other = TokenKeys::new("k1", Secret::generate()).unwrap();
        assert_eq!(other.verify_sign_in(&sign_in).unwrap_err().kind(), crate::ErrorKind::BadSignature);
    }

    #[test]
    fn short_secrets_and_bad_ids_are_refused() {
        assert_eq!(Secret::new(vec![0; 31]).unwrap_err().kind(), crate::ErrorKind::Config);
        assert!(TokenKeys::new("a.b", Secret::generate()).is_err());
        assert!(TokenKeys::parse("").is_err());
        assert!(TokenKeys::parse("k1:not base64!").is_err());
    }
}
