//! The bindings' copies of the core's shapes, generated from the core.
//!
//! Every language shows the events on the bus ([`signoff::ConfirmationRequest`], `...Response`,
//! `...Timeout`, `...Resolved`) with the same fields and the same words, and raises one error
//! class per [`signoff::ErrorKind`]. Rather than hand edits across three bindings for a new field
//! or kind, the parts of the bindings' sources that mirror them are regions this test writes:
//!
//! - each event's fields, read from `core/src/event.rs` (names, types and `///` text): Python's
//!   getters (`bindings-python/src/events.rs`) and their stubs (`_native.pyi`), Node's types
//!   (`bindings-node/src/events.rs`, from which napi writes the `.d.ts`), the request's getters
//!   and `toJSON` in the facade (`lib/request.ts`) and what `Gate.respond` takes and checks
//!   (`lib/gate.ts`, `lib/types.ts`), Swift's records and their conversions
//!   (`bindings-swift/src/types.rs`, from which uniffi writes `Signoff.swift`);
//! - the error kinds, from `signoff::for_each_error_kind!`: Python's exception stubs and the
//!   facade's imports and `ErrorKind` literal (Node and Swift declare theirs from the macro).
//!
//! A region sits between a `@generated begin <name>` and a `@generated end <name>` comment line.
//! This test fails when a region differs from what the core says; `make generate` rewrites them
//! (`SIGNOFF_SOURCEGEN=write cargo test -p signoff --test sourcegen`), then the files the
//! bindings' own generators write from them (Swift's sources, Node's native `.d.ts`). A field
//! of a type not seen before fails here until [`Ty`] has a conversion for it in each language:
//! one conversion per type, not per field.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A field of a core struct, as declared.
struct Field {
    name: String,
    ty: Ty,
    docs: Vec<String>,
}

/// The core types the events' fields use; each has one conversion per language below.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Ty {
    /// `Uuid`
    Uuid,
    /// `Arc<str>`: shared text.
    Text,
    /// `String`
    Str,
    /// `Arguments`: canonical JSON text of the arguments.
    Arguments,
    /// `Digest`: `sha256:<hex>`.
    Digest,
    /// `Option<String>`
    OptText,
    /// `bool`
    Bool,
    /// `Arc<[String]>`
    Texts,
    /// `u64`
    U64,
    /// `Option<u64>`
    OptU64,
    /// `Value`: free JSON, `null` when absent.
    Json,
    /// `Option<Value>`
    OptJson,
    /// `ResponseDecision`
    Decision,
    /// `Scope`
    Scope,
    /// `Outcome`
    Outcome,
    /// `Option<CancelReason>`
    OptCancelReason,
}

impl Ty {
    fn from_rust(ty: &str) -> Option<Ty> {
        Some(match ty {
            "Uuid" => Ty::Uuid,
            "Arc<str>" => Ty::Text,
            "String" => Ty::Str,
            "Arguments" => Ty::Arguments,
            "Digest" => Ty::Digest,
            "Option<String>" => Ty::OptText,
            "bool" => Ty::Bool,
            "Arc<[String]>" => Ty::Texts,
            "u64" => Ty::U64,
            "Option<u64>" => Ty::OptU64,
            "Value" => Ty::Json,
            "Option<Value>" => Ty::OptJson,
            "ResponseDecision" => Ty::Decision,
            "Scope" => Ty::Scope,
            "Outcome" => Ty::Outcome,
            "Option<CancelReason>" => Ty::OptCancelReason,
            _ => return None,
        })
    }

    /// A value of this type in the JSON form, not its default (so that it is written back).
    fn sample(self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Ty::Uuid => json!("67e55044-10b1-426f-9247-bb680e5fe0c8"),
            Ty::Text | Ty::Str | Ty::OptText => json!("text"),
            Ty::Arguments | Ty::Json | Ty::OptJson => json!({"a": [1, "b"]}),
            Ty::Digest => json!(format!("sha256:{}", "0".repeat(64))),
            Ty::Bool => json!(true),
            Ty::Texts => json!(["one", "two"]),
            Ty::U64 | Ty::OptU64 => json!(7),
            Ty::Decision => json!("approve"),
            Ty::Scope => json!("session"),
            Ty::Outcome => json!("cancelled"),
            Ty::OptCancelReason => json!("shutdown"),
        }
    }

    /// Absent from the JSON form when empty.
    fn optional(self) -> bool {
        matches!(self, Ty::OptText | Ty::Json | Ty::OptJson | Ty::OptU64 | Ty::OptCancelReason)
    }

    /// Free JSON: Swift carries it as text (`<name>_json`).
    fn json(self) -> bool {
        matches!(self, Ty::Arguments | Ty::Json | Ty::OptJson)
    }

    fn python(self) -> &'static str {
        match self {
            Ty::Uuid | Ty::Text | Ty::Str | Ty::Digest => "str",
            Ty::Arguments | Ty::Json | Ty::OptJson => "Any",
            Ty::OptText => "Optional[str]",
            Ty::Bool => "bool",
            Ty::Texts => "list[str]",
            Ty::U64 => "int",
            Ty::OptU64 => "Optional[int]",
            Ty::Decision => "Literal[\"approve\", \"deny\"]",
            Ty::Scope => "Literal[\"once\", \"session\"]",
            Ty::Outcome => "Literal[\"approved\", \"denied\", \"timed-out\", \"cancelled\"]",
            Ty::OptCancelReason => "Optional[_CancelReason]",
        }
    }

    fn typescript(self) -> &'static str {
        match self {
            Ty::Uuid | Ty::Text | Ty::Str | Ty::Digest => "string",
            Ty::Arguments | Ty::Json | Ty::OptJson => "any",
            Ty::OptText => "string | undefined",
            Ty::Bool => "boolean",
            Ty::Texts => "string[]",
            Ty::U64 => "number",
            Ty::OptU64 => "number | undefined",
            Ty::Decision => "ResponseDecisionKind",
            Ty::Scope => "ScopeKind",
            Ty::Outcome => "OutcomeKind",
            Ty::OptCancelReason => "CancelReasonKind | undefined",
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// The fields of `pub struct <name>` in a rustfmt-formatted core source file.
fn struct_fields(file: &str, name: &str) -> Vec<Field> {
    let text = std::fs::read_to_string(root().join(file)).expect(file);
    let start =
        text.find(&format!("pub struct {name} {{")).unwrap_or_else(|| panic!("no `pub struct {name}` in {file}"));
    let mut fields = Vec::new();
    let mut docs = Vec::new();
    let mut attrs = String::new();
    for line in text[start..].lines().skip(1) {
        let line = line.trim();
        if line == "}" {
            return fields;
        }
        if let Some(doc) = line.strip_prefix("///").filter(|d| !d.starts_with('/')) {
            let doc = doc.strip_prefix(' ').unwrap_or(doc);
            // Written as they are into Rust, TypeScript and Python comments and docstrings.
            for bad in ["*/", "\"\"\"", "\\"] {
                assert!(
                    !doc.contains(bad),
                    "{name}: a field's doc has `{bad}`, which would end or break a comment: {doc}"
                );
            }
            // Other languages show a link's text as written.
            assert!(
                !doc.contains("[`"),
                "{name}: a field's doc links with [`...`], which reads wrong elsewhere: {doc}"
            );
            docs.push(doc.to_owned());
        } else if line.starts_with("#[doc") {
            panic!("{file}: `{name}` documents a field with `#[doc]`: write `///` lines, which this reads");
        } else if line.starts_with("#[") {
            attrs.push_str(line);
        } else if let Some(decl) = line.strip_prefix("pub ") {
            let (field, ty) = decl.split_once(':').unwrap_or_else(|| panic!("{file}: cannot read field `{line}`"));
            let ty = ty.trim().trim_end_matches(',');
            let ty = Ty::from_rust(ty).unwrap_or_else(|| {
                panic!("{name}.{field} has type `{ty}`, which core/tests/sourcegen.rs has no conversions for: add it to `Ty`")
            });
            assert!(!docs.is_empty(), "{name}.{field} has no `///` text: every language shows it to users");
            // The bindings take an optional field as absent from the JSON form when empty.
            let absent = attrs.contains("skip_serializing_if");
            assert_eq!(
                ty.optional(),
                absent,
                "{name}.{field}: an optional field is absent from the JSON form when empty (`#[serde(default, \
                 skip_serializing_if = ...)]`), and only such a field, as the bindings' copies take it"
            );
            attrs.clear();
            fields.push(Field { name: field.trim().to_owned(), ty, docs: std::mem::take(&mut docs) });
        } else if !(line.is_empty() || line.starts_with("//")) {
            panic!("{file}: cannot read `{line}` in `{name}` (one field per line, as rustfmt writes them)");
        }
    }
    panic!("{file}: `{name}` does not end")
}

/// The events, by the name of their core type and their `type` tag.
const EVENTS: [(&str, &str); 4] = [
    ("ConfirmationRequest", "confirmation-request"),
    ("ConfirmationResponse", "confirmation-response"),
    ("ConfirmationTimeout", "confirmation-timeout"),
    ("ConfirmationResolved", "confirmation-resolved"),
];

fn event_fields(name: &str) -> Vec<Field> {
    struct_fields("core/src/event.rs", name)
}

/// The error kinds: (snake_case name, doc lines).
fn error_kinds() -> Vec<(String, Vec<String>)> {
    macro_rules! kinds {
        ($($(#[$doc:meta])* $kind:ident = $name:literal,)*) => {
            fn declared() -> Vec<(&'static str, Vec<&'static str>)> {
                vec![$(($name, vec![$(stringify!($doc)),*])),*]
            }
        };
    }
    signoff::for_each_error_kind!(kinds);
    let kinds = declared();
    kinds
        .into_iter()
        .map(|(name, docs)| {
            let docs = docs
                .into_iter()
                .map(|d| {
                    // `doc = r" text"`
                    let text = &d[d.find('"').expect("a doc string") + 1..d.rfind('"').expect("a doc string")];
                    text.strip_prefix(' ').unwrap_or(text).to_owned()
                })
                .collect();
            (name.to_owned(), docs)
        })
        .collect()
}

fn camel(snake: &str) -> String {
    signoff::Naming::Camel.name(snake)
}

fn pascal(snake: &str) -> String {
    let c = camel(snake);
    let mut chars = c.chars();
    chars.next().map(|f| f.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

fn rust_docs(out: &mut String, docs: &[String]) {
    for d in docs {
        if d.is_empty() {
            out.push_str("///\n");
        } else {
            writeln!(out, "/// {d}").unwrap();
        }
    }
}

fn js_docs(out: &mut String, docs: &[String]) {
    if let [one] = docs {
        writeln!(out, "/** {one} */").unwrap();
    } else {
        out.push_str("/**\n");
        for d in docs {
            writeln!(out, " * {d}").unwrap();
        }
        out.push_str(" */\n");
    }
}

fn py_docstring(out: &mut String, indent: &str, docs: &[String]) {
    // Python shows `code` as ``code``.
    let docs: Vec<String> = docs.iter().map(|d| d.replace('`', "``")).collect();
    if let [one] = &docs[..] {
        writeln!(out, "{indent}\"\"\"{one}\"\"\"").unwrap();
    } else {
        writeln!(out, "{indent}\"\"\"{}", docs[0]).unwrap();
        for d in &docs[1..] {
            writeln!(out, "{indent}{d}").unwrap();
        }
        writeln!(out, "{indent}\"\"\"").unwrap();
    }
}

/// The name Swift's records give a field: free JSON is carried as text, `<name>_json`.
fn swift_name(f: &Field) -> String {
    if f.ty.json() { format!("{}_json", f.name) } else { f.name.clone() }
}

/// The display text every language adds to a request after its arguments.
const DISPLAY_ARGUMENTS_DOCS: [&str; 2] = [
    "Pretty JSON of the arguments with control, bidi and zero-width characters escaped: show",
    "this, not a rendering of the arguments of your own.",
];

fn display_docs() -> Vec<String> {
    DISPLAY_ARGUMENTS_DOCS.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Python

fn python_getters(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        rust_docs(&mut out, &f.docs);
        out.push_str("#[getter]\n");
        let n = &f.name;
        let body = match f.ty {
            Ty::Uuid | Ty::Digest => format!("fn {n}(&self) -> String {{\n    self.inner.{n}.to_string()\n}}"),
            Ty::Text | Ty::Str => format!("fn {n}(&self) -> &str {{\n    &self.inner.{n}\n}}"),
            Ty::Arguments => format!(
                "fn {n}<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {{\n    convert::json_to_py(py, self.inner.{n}.json())\n}}"
            ),
            Ty::OptText => format!("fn {n}(&self) -> Option<&str> {{\n    self.inner.{n}.as_deref()\n}}"),
            Ty::Bool => format!("fn {n}(&self) -> bool {{\n    self.inner.{n}\n}}"),
            Ty::Texts => format!("fn {n}(&self) -> Vec<String> {{\n    self.inner.{n}.to_vec()\n}}"),
            Ty::U64 => format!("fn {n}(&self) -> u64 {{\n    self.inner.{n}\n}}"),
            Ty::OptU64 => format!("fn {n}(&self) -> Option<u64> {{\n    self.inner.{n}\n}}"),
            Ty::Json => {
                format!(
                    "fn {n}<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {{\n    to_py(py, &self.inner.{n})\n}}"
                )
            }
            Ty::OptJson => format!(
                "fn {n}<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {{\n    self.inner.{n}.as_ref().map(|a| to_py(py, a)).transpose()\n}}"
            ),
            Ty::Decision | Ty::Scope => {
                format!("fn {n}(&self) -> String {{\n    convert::enum_str(&self.inner.{n})\n}}")
            }
            Ty::Outcome => format!("fn {n}(&self) -> &'static str {{\n    self.inner.{n}.as_str()\n}}"),
            Ty::OptCancelReason => {
                format!("fn {n}(&self) -> Option<&'static str> {{\n    self.inner.{n}.map(|c| c.as_str())\n}}")
            }
        };
        writeln!(out, "{body}").unwrap();
    }
    out
}

fn python_stub(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        writeln!(out, "@property\ndef {}(self) -> {}:", f.name, f.ty.python()).unwrap();
        py_docstring(&mut out, "    ", &f.docs);
    }
    out
}

fn error_class(kind: &str) -> String {
    format!("{}Error", pascal(kind))
}

fn python_error_stubs(kinds: &[(String, Vec<String>)]) -> String {
    let mut out = String::new();
    for (kind, docs) in kinds {
        // `io` errors are `OSError`s too, with `errno` when the system gave one.
        let bases = if kind == "io" { "SignoffError, OSError" } else { "SignoffError" };
        writeln!(out, "class {}({bases}):", error_class(kind)).unwrap();
        py_docstring(&mut out, "    ", docs);
    }
    out
}

fn python_error_names(kinds: &[(String, Vec<String>)]) -> String {
    let mut names: Vec<String> = kinds.iter().map(|(k, _)| error_class(k)).collect();
    names.sort();
    names.iter().map(|n| format!("\"{n}\",\n")).collect()
}

fn python_error_imports(kinds: &[(String, Vec<String>)]) -> String {
    let mut names: Vec<String> = kinds.iter().map(|(k, _)| error_class(k)).collect();
    names.sort();
    names.iter().map(|n| format!("{n},\n")).collect()
}

fn python_error_literal(kinds: &[(String, Vec<String>)]) -> String {
    kinds.iter().map(|(k, _)| format!("\"{k}\",\n")).collect()
}

// ---------------------------------------------------------------------------------------------
// Node

/// The fields of an event's `#[napi(object)]` type (its `.d.ts`, and the strict shape its
/// JavaScript form is checked against).
fn node_data(fields: &[Field]) -> String {
    let mut out = String::new();
    let absent = "#[serde(default, skip_serializing_if = \"Option::is_none\")]";
    for f in fields {
        rust_docs(&mut out, &f.docs);
        let n = &f.name;
        let decl = match f.ty {
            Ty::Uuid | Ty::Text | Ty::Str | Ty::Digest => format!("pub {n}: String,"),
            Ty::Arguments => format!("#[napi(ts_type = \"any\")]\npub {n}: Value,"),
            Ty::OptText => format!("{absent}\npub {n}: Option<String>,"),
            Ty::Bool => format!("pub {n}: bool,"),
            Ty::Texts => format!("#[serde(default)]\npub {n}: Vec<String>,"),
            Ty::U64 => format!("#[napi(ts_type = \"number\")]\npub {n}: u64,"),
            Ty::OptU64 => format!("#[napi(ts_type = \"number\")]\n{absent}\npub {n}: Option<u64>,"),
            Ty::Json | Ty::OptJson => format!("#[napi(ts_type = \"any\")]\n{absent}\npub {n}: Option<Value>,"),
            Ty::Decision => format!("pub {n}: ResponseDecisionKind,"),
            Ty::Scope => format!("pub {n}: ScopeKind,"),
            Ty::Outcome => format!("pub {n}: OutcomeKind,"),
            Ty::OptCancelReason => format!("{absent}\npub {n}: Option<CancelReasonKind>,"),
        };
        writeln!(out, "{decl}").unwrap();
        if f.ty == Ty::Arguments {
            rust_docs(&mut out, &display_docs());
            out.push_str("pub display_arguments: String,\n");
        }
    }
    out
}

/// The fields the facade's `PendingRequest` holds as properties (read on every call); the others
/// are getters over its lazily parsed rest.
const NODE_EAGER: [&str; 3] = ["id", "tool", "arguments"];

fn node_request_properties(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields.iter().filter(|f| NODE_EAGER.contains(&f.name.as_str())) {
        js_docs(&mut out, &f.docs);
        writeln!(out, "readonly {}: {}", camel(&f.name), f.ty.typescript()).unwrap();
    }
    out
}

fn node_request_getters(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields.iter().filter(|f| !NODE_EAGER.contains(&f.name.as_str())) {
        js_docs(&mut out, &f.docs);
        let c = camel(&f.name);
        writeln!(out, "get {c}(): {} {{\n  return this.#r.{c}\n}}", f.ty.typescript()).unwrap();
    }
    out
}

fn node_request_to_json(fields: &[Field]) -> String {
    let mut out = String::from("const d: ConfirmationRequestData = {\n  type: 'confirmation-request',\n");
    for f in fields.iter().filter(|f| !f.ty.optional()) {
        let c = camel(&f.name);
        let from = if NODE_EAGER.contains(&f.name.as_str()) { "this" } else { "r" };
        writeln!(out, "  {c}: {from}.{c},").unwrap();
        if f.ty == Ty::Arguments {
            out.push_str("  displayArguments: this.displayArguments,\n");
        }
    }
    out.push_str("}\n");
    for f in fields.iter().filter(|f| f.ty.optional()) {
        let c = camel(&f.name);
        writeln!(out, "if (r.{c} !== undefined) d.{c} = r.{c}").unwrap();
    }
    out
}

/// The fields `Gate.respond` takes, in Node's names (its checks and the input type are checked
/// against them by the compiler), and the event's `type`.
fn node_response_field_names(fields: &[Field]) -> String {
    let mut names: Vec<String> = fields.iter().map(|f| format!("'{}'", camel(&f.name))).collect();
    names.push("'type'".into());
    format!("const RESPONSE_FIELDS = [{}] as const\n", names.join(", "))
}

/// `ConfirmationResponseInput`'s fields: what the response's JSON form requires is required.
fn node_response_input(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        js_docs(&mut out, &f.docs);
        let (optional, ty) = match f.ty {
            Ty::Uuid => ("", "string"),
            Ty::Decision => ("", "ResponseDecision"),
            Ty::Scope => ("?", "Scope"),
            Ty::OptText => ("?", "string"),
            Ty::OptU64 => ("?", "number"),
            Ty::OptJson => ("?", "unknown"),
            other => panic!("ConfirmationResponse.{}: Node's respond has no check for {other:?}", f.name),
        };
        writeln!(out, "{}{optional}: {ty}", camel(&f.name)).unwrap();
    }
    out
}

/// The checks `Gate.respond` makes of each field before the core reads the response (the edited
/// arguments, free JSON, are converted apart: `toJson`).
fn node_response_checks(fields: &[Field]) -> String {
    let mut out = String::new();
    let json: Vec<&Field> = fields.iter().filter(|f| f.ty.json()).collect();
    assert!(
        json.len() == 1 && json[0].name == "arguments",
        "Node's respond converts one field of free JSON apart, `arguments`: another needs code in `#responseArgs`"
    );
    for f in fields.iter().filter(|f| !f.ty.json()) {
        let c = camel(&f.name);
        let check = match f.ty {
            Ty::Uuid => format!("reqString(r, '{c}', shape, ': the id of the request it answers (req.id)')"),
            Ty::Decision => format!("reqEnum(r, '{c}', shape, DECISIONS)"),
            Ty::Scope => format!("optEnum(r, '{c}', shape, SCOPES)"),
            Ty::OptText => format!("optString(r, '{c}', shape)"),
            Ty::OptU64 if f.name.ends_with("_ms") => {
                format!("optNumber(r, '{c}', shape, 'a whole number of epoch milliseconds', {{ whole: true }})")
            }
            Ty::OptU64 => format!("optNumber(r, '{c}', shape, 'a whole number', {{ whole: true }})"),
            other => panic!("ConfirmationResponse.{}: Node's respond has no check for {other:?}", f.name),
        };
        writeln!(out, "{c}: {check},").unwrap();
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Swift

/// A record of Swift's own for an event (ids and free JSON as text), with conversions both ways.
fn swift_record(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        let mut docs = f.docs.clone();
        if f.ty.json() {
            docs.push("As JSON text.".into());
        }
        rust_docs(&mut out, &docs);
        let ty = match f.ty {
            Ty::Uuid | Ty::Text | Ty::Str | Ty::Digest | Ty::Arguments => "String",
            Ty::OptText | Ty::Json | Ty::OptJson => "Option<String>",
            Ty::Bool => "bool",
            Ty::Texts => "Vec<String>",
            Ty::U64 => "u64",
            Ty::OptU64 => "Option<u64>",
            Ty::Decision => "ResponseDecision",
            Ty::Scope => "Scope",
            Ty::Outcome => "Outcome",
            Ty::OptCancelReason => "Option<CancelReason>",
        };
        if ty.starts_with("Option<") {
            out.push_str("#[uniffi(default = None)]\n");
        }
        writeln!(out, "pub {}: {ty},", swift_name(f)).unwrap();
        if f.ty == Ty::Arguments {
            rust_docs(&mut out, &display_docs());
            out.push_str("pub display_arguments: String,\n");
        }
    }
    out
}

fn swift_from_core(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        let n = &f.name;
        let value = match f.ty {
            Ty::Uuid | Ty::Text | Ty::Digest | Ty::Arguments => format!("r.{n}.to_string()"),
            Ty::Str | Ty::OptText => format!("r.{n}.clone()"),
            Ty::Bool | Ty::U64 | Ty::OptU64 | Ty::Decision | Ty::Scope | Ty::Outcome | Ty::OptCancelReason => {
                format!("r.{n}")
            }
            Ty::Texts => format!("r.{n}.to_vec()"),
            Ty::Json => format!("opt_json(&r.{n})"),
            Ty::OptJson => format!("r.{n}.as_ref().map(Value::to_string)"),
        };
        writeln!(out, "{}: {value},", swift_name(f)).unwrap();
        if f.ty == Ty::Arguments {
            out.push_str("display_arguments: r.display_arguments(),\n");
        }
    }
    out
}

/// How a record's id is read back: a request's id that is not a UUID is malformed; a response's
/// names no request (`unknown_request`, as in every language).
#[derive(Clone, Copy)]
enum IdText {
    Malformed,
    NamesNoRequest,
}

fn swift_into_core(fields: &[Field], event: &str, ids: IdText) -> String {
    let mut out = String::new();
    for f in fields {
        let n = &f.name;
        let what = format!("the {event}'s {}", camel(n));
        let value = match (f.ty, ids) {
            (Ty::Uuid, IdText::Malformed) => format!("parse_uuid(\"{what}\", &self.{n})?"),
            (Ty::Uuid, IdText::NamesNoRequest) => format!("request_id(&self.{n})?"),
            (Ty::Digest, _) => format!("parse_digest(\"{what}\", &self.{n})?"),
            (Ty::Arguments, _) => format!("parse_value(\"{what}\", &self.{n}_json)?.into()"),
            (Ty::Json, _) => format!("parse_opt_json(\"{what}\", &self.{n}_json)?"),
            (Ty::OptJson, _) => format!("parse_opt_value(\"{what}\", &self.{n}_json)?"),
            (Ty::Text | Ty::Texts, _) => format!("self.{n}.into()"),
            _ => format!("self.{n}"),
        };
        writeln!(out, "{n}: {value},").unwrap();
    }
    out
}

/// The fields of a `#[uniffi::remote(Record)]`: the core's own, ids as `RequestId`.
fn swift_remote_record(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        rust_docs(&mut out, &f.docs);
        let ty = match f.ty {
            Ty::Uuid => "RequestId",
            Ty::Str => "String",
            Ty::OptText => "Option<String>",
            Ty::Bool => "bool",
            Ty::U64 => "u64",
            Ty::OptU64 => "Option<u64>",
            Ty::Decision => "ResponseDecision",
            Ty::Scope => "Scope",
            Ty::Outcome => "Outcome",
            Ty::OptCancelReason => "Option<CancelReason>",
            other => panic!("{}: a remote record cannot hold {other:?} (uniffi has no form of it)", f.name),
        };
        writeln!(out, "pub {}: {ty},", f.name).unwrap();
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Regions

/// Puts `content` (indented as the `begin` marker is) between the markers of `region` in
/// `text`; `None` when the file lacks them.
fn splice(text: &str, region: &str, content: &str) -> Option<String> {
    let begin = format!("@generated begin {region}");
    let end = format!("@generated end {region}");
    let b = text.find(&begin)?;
    let line_start = text[..b].rfind('\n').map_or(0, |i| i + 1);
    let indent: String = text[line_start..b].chars().take_while(|c| c.is_whitespace()).collect();
    let body_start = b + text[b..].find('\n')? + 1;
    let e = body_start + text[body_start..].find(&end)?;
    let body_end = text[..e].rfind('\n').map_or(0, |i| i + 1);
    let mut out = String::with_capacity(text.len() + content.len());
    out.push_str(&text[..body_start]);
    for line in content.lines() {
        if !line.is_empty() {
            out.push_str(&indent);
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&text[body_end..]);
    Some(out)
}

#[test]
fn generated_regions_match_the_core() {
    if !root().join("bindings-python").is_dir() {
        // The crate alone, outside the repository: there are no bindings to compare.
        return;
    }
    let kinds = error_kinds();
    let mut regions: Vec<(&str, String, String)> = vec![
        ("bindings-python/python/signoff/_native.pyi", "error-classes".into(), python_error_stubs(&kinds)),
        ("bindings-python/python/signoff/_native.pyi", "error-names".into(), python_error_names(&kinds)),
        ("bindings-python/python/signoff/errors.py", "error-imports".into(), python_error_imports(&kinds)),
        ("bindings-python/python/signoff/errors.py", "error-kinds".into(), python_error_literal(&kinds)),
        ("bindings-python/python/signoff/errors.py", "error-names".into(), python_error_names(&kinds)),
        ("bindings-python/python/signoff/__init__.py", "error-imports".into(), python_error_imports(&kinds)),
        ("bindings-python/python/signoff/__init__.py", "error-names".into(), python_error_names(&kinds)),
    ];
    for (name, _) in EVENTS {
        let fields = event_fields(name);
        let short = name.trim_start_matches("Confirmation").to_lowercase();
        let region = |what: &str| format!("{short}-{what}");
        regions.push(("bindings-python/src/events.rs", region("fields"), python_getters(&fields)));
        regions.push(("bindings-python/python/signoff/_native.pyi", region("fields"), python_stub(&fields)));
        regions.push(("bindings-node/src/events.rs", region("fields"), node_data(&fields)));
        match short.as_str() {
            "request" => {
                regions.push(("bindings-node/lib/request.ts", region("properties"), node_request_properties(&fields)));
                regions.push(("bindings-node/lib/request.ts", region("getters"), node_request_getters(&fields)));
                regions.push(("bindings-node/lib/request.ts", region("to-json"), node_request_to_json(&fields)));
            }
            "response" => {
                regions.push(("bindings-node/lib/gate.ts", region("field-names"), node_response_field_names(&fields)));
                regions.push(("bindings-node/lib/gate.ts", region("checks"), node_response_checks(&fields)));
                regions.push(("bindings-node/lib/types.ts", region("input"), node_response_input(&fields)));
            }
            _ => {
                regions.push(("bindings-swift/src/types.rs", region("fields"), swift_remote_record(&fields)));
                continue;
            }
        }
        let ids = if short == "request" { IdText::Malformed } else { IdText::NamesNoRequest };
        regions.push(("bindings-swift/src/types.rs", region("fields"), swift_record(&fields)));
        regions.push(("bindings-swift/src/types.rs", region("from-core"), swift_from_core(&fields)));
        regions.push(("bindings-swift/src/types.rs", region("into-core"), swift_into_core(&fields, &short, ids)));
    }
    let write = std::env::var("SIGNOFF_SOURCEGEN").as_deref() == Ok("write");
    let mut stale = Vec::new();
    let mut files: Vec<(&str, String)> = Vec::new();
    for (file, region, content) in &regions {
        let region = region.as_str();
        let at = match files.iter().position(|(f, _)| f == file) {
            Some(at) => at,
            None => {
                files.push((file, std::fs::read_to_string(root().join(file)).expect(file)));
                files.len() - 1
            }
        };
        let text = &files[at].1;
        let new = splice(text, region, content)
            .unwrap_or_else(|| panic!("{file} has no `@generated begin/end {region}` markers"));
        if new != *text {
            stale.push(format!("{file} ({region})"));
            files[at].1 = new;
        }
    }
    if write {
        for (file, text) in &files {
            let path = root().join(file);
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&path, text).expect(file);
            }
        }
        return;
    }
    assert!(
        stale.is_empty(),
        "generated regions differ from the core: {}\nrun `make generate` (it rewrites them, then Swift's sources and Node's \
         native .d.ts)",
        stale.join(", ")
    );
}

#[test]
fn camel_and_pascal_case() {
    assert_eq!(camel("arguments_digest"), "argumentsDigest");
    assert_eq!(pascal("already_resolved"), "AlreadyResolved");
    assert_eq!(error_class("io"), "IoError");
}

#[test]
fn a_region_is_replaced_with_its_markers_indentation() {
    let text = "a\n    // @generated begin x\n    old\n    // @generated end x\nb\n";
    let out = splice(text, "x", "one\n\ntwo\n").unwrap();
    assert_eq!(out, "a\n    // @generated begin x\n    one\n\n    two\n    // @generated end x\nb\n");
    assert!(splice(text, "y", "").is_none());
}

#[test]
fn every_field_of_every_event_is_read_and_written() {
    // Each event with every field set, from its JSON form; written back, it has exactly the
    // declared fields (and a request's derived `display_arguments`), each as it was read: what
    // the bindings are generated from is what the core reads and writes.
    for (name, tag) in EVENTS {
        let fields = event_fields(name);
        let mut json = serde_json::json!({ "type": tag });
        for f in &fields {
            json[f.name.as_str()] = f.ty.sample();
        }
        let event = signoff::Event::from_json(json.clone()).unwrap_or_else(|e| panic!("{name}: {e}: {json}"));
        let written = event.to_json();
        let mut keys: Vec<&str> = written.as_object().unwrap().keys().map(String::as_str).collect();
        keys.retain(|k| !matches!(*k, "type" | "display_arguments"));
        keys.sort();
        let mut names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        names.sort();
        assert_eq!(keys, names, "{name}: its JSON form and its declared fields differ");
        for f in &fields {
            assert_eq!(
                written[f.name.as_str()],
                json[f.name.as_str()],
                "{name}.{} is not written back as read",
                f.name
            );
        }
        // Without its optional fields, it is written back without them.
        let mut json = serde_json::json!({ "type": tag });
        for f in fields.iter().filter(|f| !f.ty.optional()) {
            json[f.name.as_str()] = f.ty.sample();
        }
        let written =
            signoff::Event::from_json(json.clone()).unwrap_or_else(|e| panic!("{name}: {e}: {json}")).to_json();
        for f in fields.iter().filter(|f| f.ty.optional()) {
            assert!(written.get(f.name.as_str()).is_none(), "{name}.{} is written when absent: {written}", f.name);
        }
    }
}
