//! The bindings' copies of the core's shapes, generated from the core.
//!
//! Every language shows a [`signoff::ConfirmationRequest`] with the same fields and the same
//! words, and raises one error class per [`signoff::ErrorKind`]. Rather than nine hand edits
//! across three bindings for a new field or kind, the parts of the bindings' sources that mirror
//! them are regions this test writes:
//!
//! - the request's fields, read from `core/src/event.rs` (names, types and `///` text): Python's
//!   getters (`bindings-python/src/events.rs`) and their stub (`_native.pyi`), Node's type
//!   (`bindings-node/src/events.rs`, from which napi writes the `.d.ts`) and the facade's getters
//!   and `toJSON` (`lib/request.ts`), Swift's record and its two conversions
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

/// The core types the request's fields use; each has one conversion per language below.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Ty {
    /// `Uuid`
    Uuid,
    /// `Arc<str>`: shared text.
    Text,
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
    /// `Value`: free JSON, `null` when absent.
    Json,
}

impl Ty {
    fn from_rust(ty: &str) -> Option<Ty> {
        Some(match ty {
            "Uuid" => Ty::Uuid,
            "Arc<str>" => Ty::Text,
            "Arguments" => Ty::Arguments,
            "Digest" => Ty::Digest,
            "Option<String>" => Ty::OptText,
            "bool" => Ty::Bool,
            "Arc<[String]>" => Ty::Texts,
            "u64" => Ty::U64,
            "Value" => Ty::Json,
            _ => return None,
        })
    }

    /// A value of this type in the JSON form, not its default (so that it is written back).
    fn sample(self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Ty::Uuid => json!("67e55044-10b1-426f-9247-bb680e5fe0c8"),
            Ty::Text | Ty::OptText => json!("text"),
            Ty::Arguments | Ty::Json => json!({"a": [1, "b"]}),
            Ty::Digest => json!(format!("sha256:{}", "0".repeat(64))),
            Ty::Bool => json!(true),
            Ty::Texts => json!(["one", "two"]),
            Ty::U64 => json!(7),
        }
    }

    /// Absent from the JSON form when empty.
    fn optional(self) -> bool {
        matches!(self, Ty::OptText | Ty::Json)
    }

    fn python(self) -> &'static str {
        match self {
            Ty::Uuid | Ty::Text | Ty::Digest => "str",
            Ty::Arguments | Ty::Json => "Any",
            Ty::OptText => "Optional[str]",
            Ty::Bool => "bool",
            Ty::Texts => "list[str]",
            Ty::U64 => "int",
        }
    }

    fn typescript(self) -> &'static str {
        match self {
            Ty::Uuid | Ty::Text | Ty::Digest => "string",
            Ty::Arguments | Ty::Json => "any",
            Ty::OptText => "string | undefined",
            Ty::Bool => "boolean",
            Ty::Texts => "string[]",
            Ty::U64 => "number",
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
    for line in text[start..].lines().skip(1) {
        let line = line.trim();
        if line == "}" {
            return fields;
        }
        if let Some(doc) = line.strip_prefix("///") {
            docs.push(doc.strip_prefix(' ').unwrap_or(doc).to_owned());
        } else if let Some(decl) = line.strip_prefix("pub ") {
            let (field, ty) = decl.split_once(':').unwrap_or_else(|| panic!("{file}: cannot read field `{line}`"));
            let ty = ty.trim().trim_end_matches(',');
            let ty = Ty::from_rust(ty).unwrap_or_else(|| {
                panic!("{name}.{field} has type `{ty}`, which core/tests/sourcegen.rs has no conversions for: add it to `Ty`")
            });
            assert!(!docs.is_empty(), "{name}.{field} has no `///` text: every language shows it to users");
            fields.push(Field { name: field.trim().to_owned(), ty, docs: std::mem::take(&mut docs) });
        } else if !(line.is_empty() || line.starts_with("//") || line.starts_with("#[")) {
            panic!("{file}: cannot read `{line}` in `{name}` (one field per line, as rustfmt writes them)");
        }
    }
    panic!("{file}: `{name}` does not end")
}

fn request_fields() -> Vec<Field> {
    struct_fields("core/src/event.rs", "ConfirmationRequest")
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
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
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

/// The name Swift's record gives a field: JSON values are carried as text, `<name>_json`.
fn swift_name(f: &Field) -> String {
    match f.ty {
        Ty::Arguments | Ty::Json => format!("{}_json", f.name),
        _ => f.name.clone(),
    }
}

/// The display text every language adds after the arguments.
const DISPLAY_ARGUMENTS_DOCS: [&str; 2] = [
    "Pretty JSON of the arguments with control, bidi and zero-width characters escaped: show",
    "this, not a rendering of the arguments of your own.",
];

fn display_docs() -> Vec<String> {
    DISPLAY_ARGUMENTS_DOCS.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Python

fn python_request_getters(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        rust_docs(&mut out, &f.docs);
        out.push_str("#[getter]\n");
        let n = &f.name;
        let body = match f.ty {
            Ty::Uuid | Ty::Digest => format!("fn {n}(&self) -> String {{\n    self.inner.{n}.to_string()\n}}"),
            Ty::Text => format!("fn {n}(&self) -> &str {{\n    &self.inner.{n}\n}}"),
            Ty::Arguments => format!(
                "fn {n}<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {{\n    convert::json_to_py(py, self.inner.{n}.json())\n}}"
            ),
            Ty::OptText => format!("fn {n}(&self) -> Option<&str> {{\n    self.inner.{n}.as_deref()\n}}"),
            Ty::Bool => format!("fn {n}(&self) -> bool {{\n    self.inner.{n}\n}}"),
            Ty::Texts => format!("fn {n}(&self) -> Vec<String> {{\n    self.inner.{n}.to_vec()\n}}"),
            Ty::U64 => format!("fn {n}(&self) -> u64 {{\n    self.inner.{n}\n}}"),
            Ty::Json => {
                format!(
                    "fn {n}<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {{\n    to_py(py, &self.inner.{n})\n}}"
                )
            }
        };
        writeln!(out, "{body}").unwrap();
    }
    out
}

fn python_request_stub(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        writeln!(out, "@property\ndef {}(self) -> {}:", f.name, f.ty.python()).unwrap();
        py_docstring(&mut out, "    ", &f.docs);
        out.push_str("    ...\n");
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

fn node_request_data(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        rust_docs(&mut out, &f.docs);
        let n = &f.name;
        let decl = match f.ty {
            Ty::Uuid | Ty::Text | Ty::Digest => format!("pub {n}: String,"),
            Ty::Arguments => format!("#[napi(ts_type = \"any\")]\npub {n}: Value,"),
            Ty::OptText => {
                format!("#[serde(default, skip_serializing_if = \"Option::is_none\")]\npub {n}: Option<String>,")
            }
            Ty::Bool => format!("pub {n}: bool,"),
            Ty::Texts => format!("#[serde(default)]\npub {n}: Vec<String>,"),
            Ty::U64 => format!("#[napi(ts_type = \"number\")]\npub {n}: u64,"),
            Ty::Json => format!(
                "#[napi(ts_type = \"any\")]\n#[serde(default, skip_serializing_if = \"Option::is_none\")]\npub {n}: Option<Value>,"
            ),
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

// ---------------------------------------------------------------------------------------------
// Swift

fn swift_request_record(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        let mut docs = f.docs.clone();
        if matches!(f.ty, Ty::Arguments | Ty::Json) {
            docs.push("As JSON text.".into());
        }
        rust_docs(&mut out, &docs);
        let ty = match f.ty {
            Ty::Uuid | Ty::Text | Ty::Digest | Ty::Arguments => "String",
            Ty::OptText | Ty::Json => "Option<String>",
            Ty::Bool => "bool",
            Ty::Texts => "Vec<String>",
            Ty::U64 => "u64",
        };
        writeln!(out, "pub {}: {ty},", swift_name(f)).unwrap();
        if f.ty == Ty::Arguments {
            rust_docs(&mut out, &display_docs());
            out.push_str("pub display_arguments: String,\n");
        }
    }
    out
}

fn swift_request_from_core(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        let n = &f.name;
        let value = match f.ty {
            Ty::Uuid | Ty::Text | Ty::Digest | Ty::Arguments => format!("r.{n}.to_string()"),
            Ty::OptText => format!("r.{n}.clone()"),
            Ty::Bool | Ty::U64 => format!("r.{n}"),
            Ty::Texts => format!("r.{n}.to_vec()"),
            Ty::Json => format!("opt_json(&r.{n})"),
        };
        writeln!(out, "{}: {value},", swift_name(f)).unwrap();
        if f.ty == Ty::Arguments {
            out.push_str("display_arguments: r.display_arguments(),\n");
        }
    }
    out
}

fn swift_request_into_core(fields: &[Field]) -> String {
    let mut out = String::new();
    for f in fields {
        let n = &f.name;
        let what = format!("the request's {}", camel(n));
        let value = match f.ty {
            Ty::Uuid => format!("parse_uuid(\"{what}\", &self.{n})?"),
            Ty::Digest => format!("parse_digest(\"{what}\", &self.{n})?"),
            Ty::Arguments => format!("parse_value(\"{what}\", &self.{n}_json)?.into()"),
            Ty::Json => format!("parse_opt_json(\"{what}\", &self.{n}_json)?"),
            Ty::Text | Ty::Texts => format!("self.{n}.into()"),
            Ty::OptText | Ty::Bool | Ty::U64 => format!("self.{n}"),
        };
        writeln!(out, "{n}: {value},").unwrap();
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
    let fields = request_fields();
    let kinds = error_kinds();
    let regions: Vec<(&str, &str, String)> = vec![
        ("bindings-python/src/events.rs", "request-fields", python_request_getters(&fields)),
        ("bindings-python/python/signoff/_native.pyi", "request-fields", python_request_stub(&fields)),
        ("bindings-python/python/signoff/_native.pyi", "error-classes", python_error_stubs(&kinds)),
        ("bindings-python/python/signoff/_native.pyi", "error-names", python_error_names(&kinds)),
        ("bindings-python/python/signoff/errors.py", "error-imports", python_error_imports(&kinds)),
        ("bindings-python/python/signoff/errors.py", "error-kinds", python_error_literal(&kinds)),
        ("bindings-python/python/signoff/errors.py", "error-names", python_error_names(&kinds)),
        ("bindings-python/python/signoff/__init__.py", "error-imports", python_error_imports(&kinds)),
        ("bindings-python/python/signoff/__init__.py", "error-names", python_error_names(&kinds)),
        ("bindings-node/src/events.rs", "request-fields", node_request_data(&fields)),
        ("bindings-node/lib/request.ts", "request-properties", node_request_properties(&fields)),
        ("bindings-node/lib/request.ts", "request-getters", node_request_getters(&fields)),
        ("bindings-node/lib/request.ts", "request-to-json", node_request_to_json(&fields)),
        ("bindings-swift/src/types.rs", "request-fields", swift_request_record(&fields)),
        ("bindings-swift/src/types.rs", "request-from-core", swift_request_from_core(&fields)),
        ("bindings-swift/src/types.rs", "request-into-core", swift_request_into_core(&fields)),
    ];
    let write = std::env::var("SIGNOFF_SOURCEGEN").as_deref() == Ok("write");
    let mut stale = Vec::new();
    let mut files: Vec<(&str, String)> = Vec::new();
    for (file, region, content) in &regions {
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
fn every_request_field_is_read() {
    let fields = request_fields();
    // A request with every field set, from its JSON form; written back, it has exactly the
    // declared fields (and the derived `display_arguments`): what the bindings are generated
    // from is what the core reads and writes.
    let mut json = serde_json::json!({ "type": "confirmation-request" });
    for f in &fields {
        json[f.name.as_str()] = f.ty.sample();
    }
    let event = signoff::Event::from_json(json.clone()).unwrap_or_else(|e| panic!("{e}: {json}"));
    let written = event.to_json();
    let mut keys: Vec<&str> = written.as_object().unwrap().keys().map(String::as_str).collect();
    keys.retain(|k| !matches!(*k, "type" | "display_arguments"));
    keys.sort();
    let mut names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    names.sort();
    assert_eq!(keys, names, "the request's JSON form and its declared fields differ");
    for f in &fields {
        assert_eq!(written[f.name.as_str()], json[f.name.as_str()], "{} is not written back as read", f.name);
    }
}
