//! The core's types in their JavaScript shape without a copy per type: the core's own serde form
//! with the field names of the outermost object in camelCase (`session_id` → `sessionId`), and
//! back. Field values (arguments, metadata) keep their keys as they are. A field the core adds
//! reaches JavaScript with no edit here; its TypeScript type comes from the `#[napi(object)]`
//! declaration in `events.rs`, which `PendingRequest implements`; `__test__/gate.test.mjs` checks
//! that every field of the core's request reaches JavaScript with its nested keys unchanged.

use serde::Serialize;
use serde_json::Value;
use std::io;

/// Writes `value`'s serde JSON to `out` with the keys of its outermost object in camelCase.
pub(crate) fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let mut ser = serde_json::Serializer::with_formatter(out, CamelKeys::default());
    // Writing to a Vec fails only for values serde_json cannot represent (never the core's).
    let _ = value.serialize(&mut ser);
}

/// The keys of an outermost JSON object in snake_case (`sessionId` → `session_id`): the core's
/// form of an object written by JavaScript.
pub(crate) fn snake_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (snake(&k), v)).collect()),
        v => v,
    }
}

fn snake(k: &str) -> String {
    let mut s = String::with_capacity(k.len() + 4);
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// serde_json's compact output, with the keys at object depth 1 converted as they are written.
#[derive(Default)]
struct CamelKeys {
    depth: usize,
    in_key: bool,
    upper: bool,
}

impl serde_json::ser::Formatter for CamelKeys {
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth += 1;
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth -= 1;
        w.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.in_key = self.depth == 1;
        self.upper = false;
        if first { Ok(()) } else { w.write_all(b",") }
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.in_key = false;
        Ok(())
    }

    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        if !self.in_key {
            return w.write_all(fragment.as_bytes());
        }
        // Field names are short ASCII: converted on the stack, written at once.
        let mut buf = [0u8; 64];
        let mut n = 0;
        for &b in fragment.as_bytes() {
            if n == buf.len() {
                w.write_all(&buf)?;
                n = 0;
            }
            match b {
                b'_' => self.upper = true,
                b => {
                    buf[n] = if self.upper { b.to_ascii_uppercase() } else { b };
                    self.upper = false;
                    n += 1;
                }
            }
        }
        w.write_all(&buf[..n])
    }
}
