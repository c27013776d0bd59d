//! What a person reads: escaped prompts and arguments, and the argument digest that binds a
//! response to exactly what was shown.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// True for characters that would let displayed text differ from what runs: C0/C1 controls
/// (except newline and tab), bidirectional overrides/isolates/marks, zero-width characters,
/// the byte-order mark, line/paragraph separators and other invisible formatting characters.
pub fn is_deceptive(c: char) -> bool {
    matches!(c,
        '\u{0000}'..='\u{0008}' | '\u{000B}'..='\u{001F}' | '\u{007F}'..='\u{009F}'
        | '\u{00AD}'                       // soft hyphen
        | '\u{061C}'                       // Arabic letter mark
        | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' // Hangul fillers
        | '\u{180E}'                       // Mongolian vowel separator
        | '\u{200B}'..='\u{200F}'          // zero-width space/joiners, LRM, RLM
        | '\u{2028}'..='\u{202E}'          // line/para separators, bidi embeddings & overrides
        | '\u{2060}'..='\u{206F}'          // word joiner, invisible operators, bidi isolates
        | '\u{FEFF}'                       // zero-width no-break space / BOM
        | '\u{FFF9}'..='\u{FFFB}'          // interlinear annotations
        | '\u{E0000}'..='\u{E007F}'        // tag characters
    )
}

/// Escapes every [deceptive](is_deceptive) character as a visible `\u{XXXX}` sequence, so that
/// what a person reads is what runs. Newlines and tabs are kept. Returns the input unchanged
/// (without allocating a new buffer) when there is nothing to escape.
pub fn escape_for_display(s: &str) -> std::borrow::Cow<'_, str> {
    // Fast path: printable ASCII, newline and tab need no scan by character.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t') || !s.chars().any(is_deceptive) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_deceptive(c) {
            let _ = write!(out, "\\u{{{:04X}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Canonical JSON: object keys sorted, no insignificant whitespace. `serde_json`'s `Value` keeps
/// objects in a `BTreeMap` (this crate never enables `preserve_order`), so its compact
/// serialization is canonical.
pub fn canonical_json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// `sha256:` followed by the lowercase hex SHA-256 of the arguments' [canonical JSON](canonical_json).
pub fn arguments_digest(v: &Value) -> String {
    let mut hasher = Sha256::new();
    // Writing straight into the hasher avoids building the canonical string.
    let _ = serde_json::to_writer(HashWriter(&mut hasher), v);
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    push_hex(&mut s, &hasher.finalize());
    s
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(64);
    push_hex(&mut s, &Sha256::digest(bytes));
    s
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Pretty JSON of the arguments, escaped for display.
pub fn display_arguments(v: &Value) -> String {
    let mut buf = Vec::with_capacity(64);
    let pretty = match serde_json::to_writer_pretty(&mut buf, v) {
        // serde_json writes valid UTF-8.
        Ok(()) => String::from_utf8(buf).unwrap_or_default(),
        Err(_) => String::new(),
    };
    match escape_for_display(&pretty) {
        std::borrow::Cow::Borrowed(_) => pretty,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

/// Renders a prompt template: `{tool}` becomes the tool name, `{args}` the compact JSON of the
/// arguments, `{description}` the tool description. The result is escaped for display.
pub fn render_prompt(template: &str, tool: &str, description: &str, args: &Value) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        if let Some(r) = after.strip_prefix("{tool}") {
            out.push_str(tool);
            rest = r;
        } else if let Some(r) = after.strip_prefix("{args}") {
            out.push_str(&canonical_json(args));
            rest = r;
        } else if let Some(r) = after.strip_prefix("{description}") {
            out.push_str(description);
            rest = r;
        } else {
            out.push('{');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    escape_for_display(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_bidi_zero_width_and_controls() {
        let s = "rm \u{202E}txt.exe\u{200B} \u{0007}ok\n\tfine";
        let e = escape_for_display(s);
        assert_eq!(e, "rm \\u{202E}txt.exe\\u{200B} \\u{0007}ok\n\tfine");
        assert!(matches!(escape_for_display("plain"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn digest_is_canonical_over_key_order() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":[1,2]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{ "a": [1, 2], "b": 1 }"#).unwrap();
        assert_eq!(arguments_digest(&a), arguments_digest(&b));
        assert_ne!(arguments_digest(&a), arguments_digest(&json!({"a":[2,1],"b":1})));
        assert!(arguments_digest(&a).starts_with("sha256:"));
        assert_eq!(arguments_digest(&a).len(), 7 + 64);
    }

    #[test]
    fn prompt_template_substitutes_and_escapes() {
        let p = render_prompt("Run {tool} with {args}? {unknown}", "rm", "", &json!({"p": "a\u{202E}b"}));
        assert_eq!(p, "Run rm with {\"p\":\"a\\u{202E}b\"}? {unknown}");
    }
}
