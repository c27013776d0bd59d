//! JSON as signoff accepts it, the same in every language: strict parsing (a repeated key is
//! refused, never "last one wins"), a nesting limit checked before anything recurses, and
//! numbers that are finite. Every binding converts host values under these same rules.

use crate::error::{Error, Result};
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// How deeply arrays and objects may nest in arguments, edited arguments, metadata, responses
/// and every other JSON signoff reads: a top-level object counts as 1. Deeper input is
/// refused as `malformed` (it is never what a person reviewed, and recursing into it could
/// exhaust the stack of the host process).
pub const MAX_NESTING: usize = 64;

/// Parses JSON text strictly: a repeated object key, a non-finite or out-of-range number, or
/// trailing data is [`Error::Malformed`], with `what` naming the payload in the message. The
/// document may nest one level deeper than [`MAX_NESTING`], so that a wrapper (a response, an
/// event) can carry a value at the limit: the same value is accepted whether it arrives inside
/// a response's text or on its own. The gate checks each value it uses with [`check`].
///
/// ```
/// use signoff::{json, ErrorKind};
///
/// let v = json::from_str(r#"{"decision": "approve"}"#, "response").unwrap();
/// assert_eq!(v["decision"], "approve");
///
/// let err = json::from_str(r#"{"decision": "deny", "decision": "approve"}"#, "response").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Malformed);
/// assert!(err.to_string().contains("duplicate key \"decision\""));
/// ```
pub fn from_str(s: &str, what: &str) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_str(s);
    let v = Strict { depth: 0 }.deserialize(&mut de).map_err(|e| malformed(what, e))?;
    de.end().map_err(|e| malformed(what, e))?;
    Ok(v)
}

/// [`from_str`] for bytes (which must be UTF-8 JSON).
pub fn from_slice(b: &[u8], what: &str) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(b);
    let v = Strict { depth: 0 }.deserialize(&mut de).map_err(|e| malformed(what, e))?;
    de.end().map_err(|e| malformed(what, e))?;
    Ok(v)
}

/// Parses JSON text strictly ([`from_str`]) into `T`.
pub fn parse<T: DeserializeOwned>(s: &str, what: &str) -> Result<T> {
    let v = from_str(s, what)?;
    serde_json::from_value(v).map_err(|e| Error::Malformed(format!("{what}: {e}")))
}

/// Checks a value built in memory (by Rust code or a binding) against [`MAX_NESTING`], without
/// recursion. `what` names it in the error, e.g. `"arguments"`.
pub fn check(v: &Value, what: &str) -> Result<()> {
    // No allocation for the common case: a flat object of scalars pushes nothing.
    let mut stack: Vec<(&Value, usize)> = Vec::new();
    let mut next = Some((v, 0));
    while let Some((v, depth)) = next {
        let children: &mut dyn Iterator<Item = &Value> = match v {
            Value::Array(_) | Value::Object(_) if depth >= MAX_NESTING => return Err(too_deep(what)),
            Value::Array(a) => &mut a.iter(),
            Value::Object(o) => &mut o.values(),
            _ => &mut std::iter::empty(),
        };
        stack.extend(children.filter(|c| c.is_array() || c.is_object()).map(|c| (c, depth + 1)));
        next = stack.pop();
    }
    Ok(())
}

/// The error for a value nested deeper than [`MAX_NESTING`]; bindings that walk host values
/// return the same one.
pub fn too_deep(what: &str) -> Error {
    Error::Malformed(format!("{what}: arrays and objects nest deeper than {MAX_NESTING} levels (or contain a cycle)"))
}

fn malformed(what: &str, e: serde_json::Error) -> Error {
    Error::Malformed(format!("{what} is not acceptable JSON: {e}"))
}

/// A `Value` visitor that refuses repeated keys and deep nesting as it goes.
struct Strict {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Strict {
    fn enter<E: serde::de::Error>(&self) -> std::result::Result<Strict, E> {
        if self.depth > MAX_NESTING {
            return Err(E::custom(format_args!("arrays and objects nest deeper than {MAX_NESTING} levels inside it")));
        }
        Ok(Strict { depth: self.depth + 1 })
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> std::result::Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> std::result::Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> std::result::Result<Value, E> {
        Number::from_f64(n).map(Value::Number).ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, s: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> std::result::Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let inner = self.enter()?;
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(x) = seq.next_element_seed(Strict { depth: inner.depth })? {
            v.push(x);
        }
        Ok(Value::Array(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        use serde::de::Error as _;
        let inner = self.enter()?;
        let mut m = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if m.contains_key(&k) {
                return Err(A::Error::custom(format_args!("duplicate key {k:?}")));
            }
            let v = map.next_value_seed(Strict { depth: inner.depth })?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn nesting_limit_is_exact_for_text_and_values() {
        // A wrapper around a value at the limit parses; one level more does not.
        assert!(from_str(&nested(MAX_NESTING + 1), "x").is_ok());
        let err = from_str(&nested(MAX_NESTING + 2), "x").unwrap_err();
        assert!(err.to_string().contains("nest deeper than 64 levels inside it"), "{err}");
        let mut v = json!(1);
        for _ in 0..MAX_NESTING {
            v = json!([v]);
        }
        assert!(check(&v, "arguments").is_ok());
        let deeper = json!({ "a": v });
        assert_eq!(check(&deeper, "arguments").unwrap_err().kind(), crate::ErrorKind::Malformed);
        // Far past any stack: refused, not crashed.
        assert!(from_str(&nested(1_000_000), "x").is_err());
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(from_str(r#"{"a":{"b":1,"b":1}}"#, "x").is_err());
        assert!(from_str(r#"[{"k":1},{"k":2}]"#, "x").is_ok());
        assert!(from_str(r#"{"a":1} {"a":2}"#, "x").is_err(), "trailing data");
    }

    #[test]
    fn non_finite_numbers_do_not_parse() {
        for s in ["NaN", "Infinity", "-Infinity", "1e400", "[1e999]"] {
            assert!(from_str(s, "x").is_err(), "{s}");
        }
        assert_eq!(from_str("1.5", "x").unwrap(), json!(1.5));
        assert_eq!(from_str("18446744073709551615", "x").unwrap(), json!(u64::MAX));
    }
}
