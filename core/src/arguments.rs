//! [`Arguments`]: a request's arguments held as their canonical JSON text, and their
//! [`Digest`].

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::Digest as _;
use std::fmt;

/// The arguments of a [`ConfirmationRequest`](crate::ConfirmationRequest), kept as their
/// canonical JSON text (object keys sorted, no insignificant whitespace): exactly the bytes the
/// [`arguments_digest`](crate::ConfirmationRequest::arguments_digest) covers, and what runs when
/// the call is approved unchanged (parsed from this text when the tool runs).
///
/// Text rather than a [`Value`] because a pending request is mostly waiting: a one-key object
/// costs ~40 bytes as text and ~660 as a `Value`. Read it with [`value`](Self::value) (parses)
/// or [`json`](Self::json) (the text). It serializes as the JSON it holds, not as a string.
#[derive(Clone)]
pub struct Arguments(Box<RawValue>);

impl Arguments {
    /// The canonical form of `v`.
    pub fn new(v: &Value) -> Self {
        // A `Value` always serializes (its map keys are strings).
        Self(serde_json::value::to_raw_value(v).unwrap_or_else(|_| empty()))
    }

    /// The canonical JSON text.
    pub fn json(&self) -> &str {
        self.0.get()
    }

    /// The arguments as a [`Value`], parsed from the text.
    pub fn value(&self) -> Value {
        // The text was written by `serde_json` from a `Value` (or read back through one), so it
        // parses; nesting is bounded by the checks the call passed when it was made.
        serde_json::from_str(self.json()).unwrap_or(Value::Null)
    }

    /// The SHA-256 of the canonical text.
    pub fn digest(&self) -> Digest {
        Digest::from_bytes(sha2::Sha256::digest(self.json().as_bytes()).into())
    }

    /// Whether `v` is, canonically, these arguments.
    pub fn is(&self, v: &Value) -> bool {
        let mut w = Compare { rest: self.json().as_bytes(), same: true };
        serde_json::to_writer(&mut w, v).is_ok() && w.same && w.rest.is_empty()
    }
}

/// The SHA-256 of a request's canonical arguments, written `sha256:<64 lowercase hex digits>`
/// (its `Display`, its JSON form, and what a response or an approval token echoes). Kept as
/// its 32 bytes; compares equal to exactly its written form.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Reads `sha256:<64 lowercase hex digits>`, as written; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix("sha256:")?.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (i, pair) in hex.chunks(2).enumerate() {
            out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
        }
        Some(Self(out))
    }

    pub(crate) fn from_bytes(b: [u8; 32]) -> Self {
        Self(b)
    }

    /// The 32 bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn write(&self, out: &mut [u8; 71]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out[..7].copy_from_slice(b"sha256:");
        for (i, b) in self.0.iter().enumerate() {
            out[7 + 2 * i] = HEX[(b >> 4) as usize];
            out[8 + 2 * i] = HEX[(b & 15) as usize];
        }
    }

    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        let mut buf = [0u8; 71];
        self.write(&mut buf);
        // ASCII only: "sha256:" and hex digits.
        f(std::str::from_utf8(&buf).unwrap_or_default())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|t| f.write_str(t))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl PartialEq<str> for Digest {
    fn eq(&self, other: &str) -> bool {
        self.with_text(|t| t == other)
    }
}

impl PartialEq<&str> for Digest {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl PartialEq<String> for Digest {
    fn eq(&self, other: &String) -> bool {
        *self == **other
    }
}

impl PartialEq<Digest> for String {
    fn eq(&self, other: &Digest) -> bool {
        *other == **self
    }
}

impl PartialEq<Digest> for &str {
    fn eq(&self, other: &Digest) -> bool {
        *other == **self
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.with_text(|t| s.serialize_str(t))
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Digest::parse(&s).ok_or_else(|| serde::de::Error::custom("expected `sha256:` and 64 hex digits"))
    }
}

fn empty() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("`{}` is JSON")
}

/// Compares what is written with `rest`, byte by byte, without building a string.
struct Compare<'a> {
    rest: &'a [u8],
    same: bool,
}

impl std::io::Write for Compare<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.same && self.rest.len() >= buf.len() && &self.rest[..buf.len()] == buf {
            self.rest = &self.rest[buf.len()..];
        } else {
            self.same = false;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl From<&Value> for Arguments {
    fn from(v: &Value) -> Self {
        Self::new(v)
    }
}

impl From<Value> for Arguments {
    fn from(v: Value) -> Self {
        Self::new(&v)
    }
}

impl From<&Arguments> for Value {
    fn from(a: &Arguments) -> Self {
        a.value()
    }
}

impl PartialEq for Arguments {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl Eq for Arguments {}

impl PartialEq<Value> for Arguments {
    fn eq(&self, other: &Value) -> bool {
        self.is(other)
    }
}

impl PartialEq<Arguments> for Value {
    fn eq(&self, other: &Arguments) -> bool {
        other.is(self)
    }
}

impl fmt::Debug for Arguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl fmt::Display for Arguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl Serialize for Arguments {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Arguments {
    /// Any JSON value, brought to its canonical form.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(|v| Self::new(&v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_text_digest_and_comparison() {
        let v = json!({"b": [1, 2.5, "x"], "a": {"z": null, "y": true}});
        let a = Arguments::new(&v);
        assert_eq!(a.json(), r#"{"a":{"y":true,"z":null},"b":[1,2.5,"x"]}"#);
        assert_eq!(a.value(), v);
        assert_eq!(a.digest(), crate::display::arguments_digest(&v));
        assert_eq!(a.digest().to_string(), crate::display::arguments_digest(&v));
        assert_eq!(Digest::parse(&a.digest().to_string()), Some(a.digest()));
        let upper = a.digest().to_string().to_uppercase().replace("SHA256", "sha256");
        assert!(a.digest() != upper.as_str(), "compared as written, as before");
        for bad in [
            "",
            "sha256:",
            "sha256:00",
            "md5:00",
            &upper,
            &format!("sha256:{}", "g".repeat(64)),
            &format!("sha256:{}", "0".repeat(65)),
        ] {
            assert_eq!(Digest::parse(bad), None, "{bad}");
            assert!(serde_json::from_value::<Digest>(json!(bad)).is_err());
        }
        assert_eq!(serde_json::to_value(a.digest()).unwrap(), json!(a.digest().to_string()));
        assert!(a.is(&v));
        assert_eq!(a, v);
        assert_eq!(v, a);
        assert!(!a.is(&json!({"a": {"y": true, "z": null}, "b": [1, 2.5]})));
        assert!(!a.is(&json!({"a": {"y": true, "z": null}, "b": [1, 2.5, "x"], "c": 1})));
        assert!(
            !a.is(&json!({"a": {"y": true, "z": null}, "b": [1.0, 2.5, "x"]})),
            "1 and 1.0 differ, as in the digest"
        );
        assert_eq!(
            serde_json::to_string(&json!({"args": a})).unwrap(),
            r#"{"args":{"a":{"y":true,"z":null},"b":[1,2.5,"x"]}}"#
        );
        let back: Arguments = serde_json::from_str(r#"{ "b" : [1, 2.5, "x"], "a": {"z": null, "y": true} }"#).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn a_request_read_back_shows_its_own_arguments_not_the_text_it_came_with() {
        // A stored or forwarded request whose `display_arguments` was edited to hide the path.
        let req: crate::ConfirmationRequest = serde_json::from_value(json!({
            "id": "6f1c9a52-8d0e-4f4e-9d53-6a0c1f0e2a11", "tool": "delete_file", "description": "d",
            "prompt": "p", "arguments": {"path": "/etc/shadow", "force": true},
            "display_arguments": "{\n  \"path\": \"/tmp/harmless\"\n}",
            "arguments_digest": format!("sha256:{}", "0".repeat(64)), "session_id": "s", "editable": false, "reasons": [],
            "timeout_ms": 1000, "deadline_ms": 2000, "created_at_ms": 1000
        }))
        .unwrap();
        assert_eq!(req.arguments.json(), r#"{"force":true,"path":"/etc/shadow"}"#);
        let shown = req.display_arguments();
        assert!(shown.contains("/etc/shadow") && !shown.contains("harmless"), "{shown}");
        let written = serde_json::to_value(&req).unwrap();
        assert_eq!(written["display_arguments"], json!(shown));
        assert_eq!(written["arguments"], json!({"path": "/etc/shadow", "force": true}));
        assert!(written.get("tool_call_id").is_none() && written.get("metadata").is_none());
        let again: crate::ConfirmationRequest = serde_json::from_value(written).unwrap();
        assert_eq!(again, req);
    }
}
