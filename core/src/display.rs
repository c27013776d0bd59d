//! What a person reads: escaped prompts and arguments, and the argument digest that binds a
//! response to exactly what was shown.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// True for characters that would let displayed text differ from what runs, so that a person
/// could approve a string they cannot see whole:
///
/// - every `Default_Ignorable_Code_Point` of Unicode 15 (zero-width characters, joiners, bidi
///   marks, embeddings, overrides and isolates, variation selectors U+FE00–FE0F and
///   U+E0100–E01EF, the combining grapheme joiner U+034F, Mongolian free variation selectors,
///   Khmer inherent vowels, Hangul fillers, musical and shorthand format controls, tag
///   characters, and the reserved ranges Unicode sets aside as ignorable);
/// - every other format character (general category `Cf`, e.g. U+0600, U+FFF9, U+13430);
/// - C0 and C1 controls except newline and tab;
/// - line and paragraph separators, and every space other than U+0020 (no-break, em, thin,
///   ideographic ... spaces look like a plain space but are not one), and U+2800 BRAILLE
///   PATTERN BLANK.
///
/// Emoji sequences are therefore shown with their joiners and selectors spelled out: `❤️`
/// (U+2764 U+FE0F) shows as `❤\u{FE0F}`, and `👩‍💻` as `👩\u{200D}💻`. Precision over looks: two
/// strings that render alike always display differently.
pub fn is_deceptive(c: char) -> bool {
    matches!(c,
        '\u{0000}'..='\u{0008}' | '\u{000B}'..='\u{001F}' | '\u{007F}'..='\u{00A0}'
        | '\u{00AD}'                       // soft hyphen
        | '\u{034F}'                       // combining grapheme joiner
        | '\u{0600}'..='\u{0605}'          // Arabic number signs (Cf)
        | '\u{061C}'                       // Arabic letter mark
        | '\u{06DD}' | '\u{070F}' | '\u{0890}' | '\u{0891}' | '\u{08E2}' // other Cf
        | '\u{115F}' | '\u{1160}'          // Hangul choseong/jungseong fillers
        | '\u{1680}'                       // Ogham space mark
        | '\u{17B4}' | '\u{17B5}'          // Khmer inherent vowels
        | '\u{180B}'..='\u{180F}'          // Mongolian free variation selectors, vowel separator
        | '\u{2000}'..='\u{200F}'          // spaces, zero-width space/joiners, LRM, RLM
        | '\u{2028}'..='\u{202F}'          // line/para separators, bidi embeddings & overrides, NNBSP
        | '\u{205F}'..='\u{206F}'          // medium math space, word joiner, invisible operators, isolates
        | '\u{2800}'                       // braille pattern blank
        | '\u{3000}'                       // ideographic space
        | '\u{3164}'                       // Hangul filler
        | '\u{FE00}'..='\u{FE0F}'          // variation selectors 1-16
        | '\u{FEFF}'                       // zero-width no-break space / BOM
        | '\u{FFA0}'                       // halfwidth Hangul filler
        | '\u{FFF0}'..='\u{FFFB}'          // reserved ignorables, interlinear annotations
        | '\u{110BD}' | '\u{110CD}'        // Kaithi number signs (Cf)
        | '\u{13430}'..='\u{1343F}'        // Egyptian hieroglyph format controls
        | '\u{1BCA0}'..='\u{1BCA3}'        // shorthand format controls
        | '\u{1D173}'..='\u{1D17A}'        // musical symbol format controls
        | '\u{E0000}'..='\u{E0FFF}'        // tags, variation selectors 17-256, reserved ignorables
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
    crate::Digest::from_bytes(hasher.finalize().into()).to_string()
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
    display_arguments_json(&canonical_json(v))
}

/// [`display_arguments`] from the arguments' canonical JSON text (compact, as `serde_json` writes
/// it), without parsing it into a `Value`: the same pretty layout (two-space indent, `": "`,
/// empty containers as `{}` / `[]`), then escaped for display.
pub fn display_arguments_json(canonical: &str) -> String {
    let bytes = canonical.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len() + bytes.len() / 2 + 16);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.extend(std::iter::repeat_n(b' ', 2 * depth));
    };
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        i += 1;
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        match c {
            b'"' => {
                out.push(c);
                in_string = true;
            }
            b'{' | b'[' => {
                out.push(c);
                let close = if c == b'{' { b'}' } else { b']' };
                if bytes.get(i) == Some(&close) {
                    out.push(close);
                    i += 1;
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            b',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            _ => out.push(c),
        }
    }
    // Only ASCII was added, outside strings: still the input's UTF-8.
    let pretty = String::from_utf8(out).unwrap_or_default();
    match escape_for_display(&pretty) {
        std::borrow::Cow::Borrowed(_) => pretty,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

/// Renders a prompt template: `{tool}` becomes the tool name, `{args}` the compact JSON of the
/// arguments, `{description}` the tool description, its line breaks shown as `\n` (a
/// description comes from whoever defined the tool, an MCP server among them: on lines of its
/// own it could pass for the arguments). The result is escaped for display.
pub fn render_prompt(template: &str, tool: &str, description: &str, args: &Value) -> String {
    render_prompt_json(template, tool, description, &canonical_json(args))
}

/// [`render_prompt`] with the arguments already as canonical JSON text.
pub fn render_prompt_json(template: &str, tool: &str, description: &str, args: &str) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        if let Some(r) = after.strip_prefix("{tool}") {
            out.push_str(tool);
            rest = r;
        } else if let Some(r) = after.strip_prefix("{args}") {
            out.push_str(args);
            rest = r;
        } else if let Some(r) = after.strip_prefix("{description}") {
            for c in description.chars() {
                match c {
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    c => out.push(c),
                }
            }
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
    fn invisible_code_points_from_the_report_are_escaped() {
        // Issue 15: these survived the old escaping, so `/data/report.txt` could hide another string.
        for c in [
            '\u{FE0F}',
            '\u{FE00}',
            '\u{E0100}',
            '\u{E01EF}',
            '\u{034F}',
            '\u{180B}',
            '\u{17B4}',
            '\u{17B5}',
            '\u{1D173}',
        ] {
            let s = format!("/data/report{c}.txt");
            let shown = escape_for_display(&s);
            assert_eq!(shown, format!("/data/report\\u{{{:04X}}}.txt", c as u32), "{:04X}", c as u32);
        }
        let shown = display_arguments(&json!({"path": "/data/report\u{FE0F}\u{FE01}.txt"}));
        assert!(shown.contains("report\\u{FE0F}\\u{FE01}.txt"), "{shown}");
        // Emoji sequences are spelled out, not hidden.
        assert_eq!(escape_for_display("\u{2764}\u{FE0F}"), "\u{2764}\\u{FE0F}");
        assert_eq!(escape_for_display("\u{1F469}\u{200D}\u{1F4BB}"), "\u{1F469}\\u{200D}\u{1F4BB}");
        // Spaces that are not U+0020 are named.
        assert_eq!(escape_for_display("a\u{00A0}b\u{3000}c"), "a\\u{00A0}b\\u{3000}c");
    }

    /// Every Default_Ignorable_Code_Point, and every format (Cf) character, in the Unicode
    /// Character Database installed by `make test` (Debian's unicode-data).
    #[test]
    fn every_default_ignorable_and_format_character_is_escaped() {
        let dir = std::path::Path::new("/usr/share/unicode");
        let (Ok(props), Ok(cats)) = (
            std::fs::read_to_string(dir.join("DerivedCoreProperties.txt")),
            std::fs::read_to_string(dir.join("extracted/DerivedGeneralCategory.txt")),
        ) else {
            assert!(std::env::var_os("CI").is_none(), "CI must install unicode-data (make test does)");
            crate::report!("skipped: no Unicode Character Database in {}", dir.display());
            return;
        };
        let ranges = |text: &str, pred: &dyn Fn(&str) -> bool| -> Vec<(u32, u32)> {
            text.lines()
                .filter_map(|l| l.split('#').next())
                .filter_map(|l| l.split_once(';'))
                .filter(|(_, p)| pred(p.trim()))
                .map(|(r, _)| {
                    let r = r.trim();
                    let (a, b) = r.split_once("..").unwrap_or((r, r));
                    (u32::from_str_radix(a, 16).unwrap(), u32::from_str_radix(b, 16).unwrap())
                })
                .collect()
        };
        let mut all = ranges(&props, &|p| p == "Default_Ignorable_Code_Point");
        all.extend(ranges(&cats, &|p| matches!(p, "Cf" | "Zl" | "Zp" | "Cc")));
        all.extend(ranges(&cats, &|p| p == "Zs").into_iter().filter(|r| r.0 != 0x20));
        assert!(all.len() > 30, "parsed the database");
        let mut checked = 0;
        for (a, b) in all {
            for cp in a..=b {
                let Some(c) = char::from_u32(cp) else { continue };
                if c == '\n' || c == '\t' {
                    continue;
                }
                assert!(is_deceptive(c), "U+{cp:04X} is not escaped");
                checked += 1;
            }
        }
        assert!(checked > 4000);
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
        // A description's line breaks cannot start lines that pass for the arguments.
        let forged = "Reads.\n{\n  \"path\": \"notes.txt\"\n}\r\n";
        let p = render_prompt("{description}\nRun {tool} with {args}?", "rm", forged, &json!({"path": "/etc"}));
        assert_eq!(p.lines().count(), 2, "{p}");
        assert!(p.starts_with("Reads.\\n{\\n  \"path\""), "{p}");
    }
}
