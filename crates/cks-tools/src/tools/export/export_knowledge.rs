//! `export_knowledge`: a session's current structure as linked data — JSON-LD or Turtle.
//!
//! Object ids become IRIs under [`ID_BASE`] (percent-encoded where an IRI cannot carry a character
//! as it is; ids that already are absolute IRIs are kept), and types, relation types and structure keys become terms of the `cks:` vocabulary
//! ([`VOCAB`]).
//!
//! JSON-LD has the reference's `@graph`: one node per non-relation object (`@id`, `@type`, `name`
//! and its structure fields), and each relation as a property of its first participant pointing to
//! its second; we add an `@context` that makes those terms IRIs, and write nested structure values
//! as `@json` literals (a bare nested object would be read as a node).
//!
//! Turtle is the full graph: each object a subject with `rdf:type cks:<Type>`, `rdfs:label <name>`
//! and one property per structure field (strings, numbers and booleans as literals, arrays of them
//! as repeated values, anything nested as an `rdf:JSON` literal); each relation a resource with
//! `cks:relationType`, a `cks:participant` link per participant and the ordered `cks:participants`
//! list; a binary relation also adds the direct edge `<source> cks:<relation_type> <target>`. (The
//! reference's Turtle and RDF/XML are empty documents, because its converter is never run; RDF/XML
//! is refused here rather than returned empty.)

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

use cks_core::{KnowledgeObject, KnowledgeStructure};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

/// Namespace of object IRIs.
pub(crate) const ID_BASE: &str = "http://cks.org/";
/// Namespace of the CKS vocabulary (`cks:`).
pub(crate) const VOCAB: &str = "http://cks.org/vocab#";
const RDF: &str = "http://www.w3.org/1999/02/22-rdf-syntax-ns#";
const RDFS: &str = "http://www.w3.org/2000/01/rdf-schema#";
const XSD: &str = "http://www.w3.org/2001/XMLSchema#";

const SUPPORTED: [&str; 2] = ["json-ld", "turtle"];
/// JSON-LD terms the context defines; structure keys with these names are written as full IRIs.
const CONTEXT_TERMS: [&str; 4] = ["cks", "rdfs", "xsd", "name"];

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to export.
    pub(crate) session_id: String,
    /// 'json-ld' (default) or 'turtle'.
    pub(crate) format: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// `json-ld` or `turtle`.
    format: String,
    session_id: String,
    data: Data,
}

/// A JSON-LD document, or Turtle text.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Data {
    JsonLd(JsonLd),
    Text(String),
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct JsonLd {
    /// Maps the CKS terms to IRIs.
    #[serde(rename = "@context")]
    context: Map<String, Value>,
    /// One node per non-relation object: `@id`, `@type`, `name`, its structure fields, and one
    /// property per relation it is the first participant of (`relation_type: [{"@id": second}]`).
    #[serde(rename = "@graph")]
    graph: Vec<Map<String, Value>>,
}

pub(crate) struct ExportKnowledge;

#[async_trait::async_trait]
impl Tool for ExportKnowledge {
    type Input = Input;
    type Output = Output;
    const META: ToolMeta = ToolMeta {
        name: "export_knowledge",
        description: "Export a session's current structure as linked data. format 'json-ld' (default): {format, \
            data: {@context, @graph}}: one @graph node per non-relation object (@id, @type, name, structure \
            fields) with each relation as a property of its first participant pointing to its second, and a \
            context mapping the terms to IRIs under http://cks.org/vocab# (cks:) and ids under http://cks.org/. \
            'turtle': {format, data: Turtle text} of the full graph — rdf:type and rdfs:label per object, \
            structure fields as literals, relations as resources with cks:participant links plus direct edges \
            for binary ones. 'rdf-xml' is not supported ('invalid_parameter').",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let requested = input.format.unwrap_or_else(|| "json-ld".into());
        let format = match requested.trim().to_lowercase().as_str() {
            "json-ld" | "jsonld" | "json_ld" => "json-ld",
            "turtle" | "ttl" => "turtle",
            "rdf-xml" | "rdf_xml" | "rdfxml" | "xml" => {
                return Err(ToolError::invalid_parameter(format!(
                    "Format '{requested}' is not supported by this server. Supported formats: {}.",
                    SUPPORTED.join(", ")
                ))
                .with("parameter", "format")
                .with("supported", json!(SUPPORTED)));
            }
            _ => {
                return Err(ToolError::new(
                    "unsupported_format",
                    format!("Format '{requested}' is not supported. Use 'json-ld' or 'turtle'."),
                )
                .with("supported", json!(SUPPORTED)));
            }
        };
        let session_id = input.session_id;
        let data = ctx
            .runtime
            .read(&session_id, |s, _| if format == "turtle" { Data::Text(turtle(s)) } else { Data::JsonLd(json_ld(s)) })
            .await?;
        Ok(Output { format: format.to_owned(), session_id, data })
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters and the non-ASCII characters an
/// IRI may carry as they are (so `größe` stays `größe`, as in the reference), and the dot segments
/// `.`/`..`.
fn encode(text: &str) -> String {
    if text == "." || text == ".." {
        return text.replace('.', "%2E");
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~') || is_iri_char(c) {
            out.push(c);
        } else {
            let mut buffer = [0; 4];
            for byte in c.encode_utf8(&mut buffer).bytes() {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// A non-ASCII character RFC 3987 allows unencoded in an IRI path (`ucschar`).
fn is_iri_char(c: char) -> bool {
    matches!(c as u32,
        0xA0..=0xD7FF | 0xF900..=0xFDCF | 0xFDF0..=0xFFEF | 0x10000..=0x1FFFD | 0x20000..=0x2FFFD
        | 0x30000..=0x3FFFD | 0x40000..=0x4FFFD | 0x50000..=0x5FFFD | 0x60000..=0x6FFFD
        | 0x70000..=0x7FFFD | 0x80000..=0x8FFFD | 0x90000..=0x9FFFD | 0xA0000..=0xAFFFD
        | 0xB0000..=0xBFFFD | 0xC0000..=0xCFFFD | 0xD0000..=0xDFFFD | 0xE1000..=0xEFFFD)
}

/// An id that already is an absolute IRI safe to write as is (`scheme:rest`, no forbidden chars).
fn is_absolute_iri(id: &str) -> bool {
    let Some((scheme, rest)) = id.split_once(':') else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !id.chars().any(|c| c <= ' ' || matches!(c, '<' | '>' | '"' | '{' | '}' | '|' | '^' | '`' | '\\'))
}

/// The IRI of an object id.
pub(crate) fn object_iri(id: &str) -> String {
    if is_absolute_iri(id) { id.to_owned() } else { format!("{ID_BASE}{}", encode(id)) }
}

/// An id as a JSON-LD `@id` (relative ids resolve against `@base`).
fn object_ref(id: &str) -> String {
    if is_absolute_iri(id) { id.to_owned() } else { encode(id) }
}

/// A vocabulary term for Turtle: `cks:local` when that is a plain prefixed name, else `<IRI>`.
fn term(name: &str) -> String {
    if is_absolute_iri(name) {
        return format!("<{name}>");
    }
    let local = encode(name);
    let plain = !local.is_empty()
        && !local.starts_with(['-', '.'])
        && !local.ends_with('.')
        && local.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain { format!("cks:{local}") } else { format!("<{VOCAB}{local}>") }
}

/// A JSON-LD key for a data-derived term (expanded through `@vocab`, unless it would collide).
fn ld_key(name: &str) -> String {
    if is_absolute_iri(name) {
        return name.to_owned();
    }
    let local = encode(name);
    if CONTEXT_TERMS.contains(&local.as_str()) { format!("{VOCAB}{local}") } else { local }
}

/// A type as a JSON-LD `@type` (relative types resolve against `@vocab`).
fn ld_type(name: &str) -> String {
    if is_absolute_iri(name) { name.to_owned() } else { encode(name) }
}

fn relation_fields(object: &KnowledgeObject) -> bool {
    object.relation().is_some()
}

/// The structure fields written as data properties (a relation's defining fields excluded).
fn data_fields(object: &KnowledgeObject) -> impl Iterator<Item = (&str, &Value)> {
    let relation = relation_fields(object);
    object.structure.iter().filter(move |(k, v)| {
        !v.is_null() && !(relation && (*k == cks_core::object::PARTICIPANTS || *k == cks_core::object::RELATION_TYPE))
    })
}

fn is_scalar(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

/// The values of one field: scalars one by one, anything nested as one JSON value.
fn field_values(value: &Value) -> Vec<Value> {
    match value {
        v if is_scalar(v) => vec![v.clone()],
        Value::Array(items) if items.iter().all(is_scalar) => items.clone(),
        other => vec![Value::Null, other.clone()],
    }
}

// ----- JSON-LD -----

fn context() -> Map<String, Value> {
    let context = json!({
        "@vocab": VOCAB,
        "@base": ID_BASE,
        "cks": VOCAB,
        "rdfs": RDFS,
        "xsd": XSD,
        "name": "rdfs:label",
    });
    match context {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn json_ld(structure: &KnowledgeStructure) -> JsonLd {
    let mut nodes: Vec<Map<String, Value>> = Vec::with_capacity(structure.len());
    let mut node_of: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for object in structure.objects().filter(|o| !o.is_relation()) {
        let mut node = Map::new();
        node.insert("@id".into(), json!(object_ref(object.id())));
        node.insert("@type".into(), json!(ld_type(&object.identity.r#type)));
        node.insert("name".into(), json!(object.identity.name));
        for (key, value) in &object.structure {
            let values = field_values(value);
            let ld = match values.as_slice() {
                _ if value.is_null() => Value::Null,
                [Value::Null, nested] => json!({"@type": "@json", "@value": nested}),
                [single] => single.clone(),
                many => Value::Array(many.to_vec()),
            };
            node.insert(ld_key(key), ld);
        }
        node_of.insert(object.id(), nodes.len());
        nodes.push(node);
    }
    // Each relation as a property of its first participant, pointing to its second.
    for object in structure.objects() {
        let Some(relation) = object.relation() else { continue };
        let (Some(source), Some(target)) = (relation.participants.first(), relation.participants.get(1)) else {
            continue;
        };
        let index = match node_of.get(source) {
            Some(&index) => index,
            None => {
                // The subject is itself a relation: a minimal node stands for it.
                let mut node = Map::new();
                node.insert("@id".into(), json!(object_ref(source)));
                node.insert("@type".into(), json!("Entity"));
                node_of.insert(source, nodes.len());
                nodes.push(node);
                nodes.len() - 1
            }
        };
        let key = ld_key(relation.relation_type);
        let edge = json!({"@id": object_ref(target)});
        match nodes[index].get_mut(&key) {
            Some(Value::Array(items)) => items.push(edge),
            Some(existing) => *existing = json!([existing.clone(), edge]),
            None => {
                nodes[index].insert(key, json!([edge]));
            }
        }
    }
    JsonLd { context: context(), graph: nodes }
}

// ----- Turtle -----

/// A Turtle string literal body (without quotes).
pub(crate) fn escape_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn literal(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{}\"", escape_literal(s)),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => format!("\"{n}\"^^xsd:double"),
        other => format!("\"{}\"^^rdf:JSON", escape_literal(&other.to_string())),
    }
}

fn turtle(structure: &KnowledgeStructure) -> String {
    let mut out = String::with_capacity(structure.len() * 160 + 256);
    for (prefix, iri) in [("cks", VOCAB), ("rdf", RDF), ("rdfs", RDFS), ("xsd", XSD)] {
        let _ = writeln!(out, "@prefix {prefix}: <{iri}> .");
    }
    for object in structure.objects() {
        let mut predicates = vec![
            format!("a {}", term(&object.identity.r#type)),
            format!("rdfs:label \"{}\"", escape_literal(&object.identity.name)),
        ];
        if let Some(relation) = object.relation() {
            let iris: Vec<String> = relation.participants.iter().map(|p| format!("<{}>", object_iri(p))).collect();
            predicates.push(format!("cks:relationType \"{}\"", escape_literal(relation.relation_type)));
            predicates.push(format!("cks:participant {}", iris.join(", ")));
            predicates.push(format!("cks:participants ( {} )", iris.join(" ")));
        }
        for (key, value) in data_fields(object) {
            let values = field_values(value);
            let objects: Vec<String> = match values.as_slice() {
                [Value::Null, nested] => vec![literal(nested)],
                scalars => scalars.iter().map(literal).collect(),
            };
            if !objects.is_empty() {
                predicates.push(format!("{} {}", term(key), objects.join(", ")));
            }
        }
        let _ = write!(out, "\n<{}> {} .\n", object_iri(object.id()), predicates.join(" ;\n    "));
    }
    let edges: Vec<String> = structure
        .relations()
        .filter_map(|o| o.relation())
        .filter_map(|r| {
            let (source, target) = r.source_target()?;
            Some(format!("<{}> {} <{}> .", object_iri(source), term(r.relation_type), object_iri(target)))
        })
        .collect();
    if !edges.is_empty() {
        out.push_str("\n# Binary relations as direct edges.\n");
        for edge in edges {
            out.push_str(&edge);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::collections::{BTreeSet, HashMap};

    use crate::testing::{call, context, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![
            obj(
                "earth",
                "Planet",
                "Earth \"blue\" \\ marble\nthird",
                json!({"mass": 5.97, "moons": 1, "inhabited": true, "tags": ["rocky", "wet"], "orbit": {"days": 365}, "note": null}),
            ),
            obj("sun", "Star", "Sun", json!({})),
            obj("solar system", "Solar System", "Solar system", json!({})),
            rel("r1", &["earth", "sun"], "orbits"),
            rel("r3", &["earth", "sun", "solar system"], "part of"),
        ])
    }

    /// A small Turtle reader for what the exporter writes: prefixes, IRIs, prefixed names, `a`,
    /// string literals with escapes and datatypes, numbers, booleans, `;` `,` `.` and collections.
    fn parse_turtle(text: &str) -> BTreeSet<(String, String, String)> {
        #[derive(Debug, Clone, PartialEq)]
        enum Tok {
            Iri(String),
            Name(String),
            Lit(String, String),
            Punct(char),
            Prefix,
        }
        let chars: Vec<char> = text.chars().collect();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            match c {
                c if c.is_whitespace() => i += 1,
                '#' => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                }
                '<' => {
                    let end = i + chars[i..].iter().position(|&c| c == '>').expect("closed IRI");
                    let iri: String = chars[i + 1..end].iter().collect();
                    assert!(!iri.contains([' ', '"', '<', '{', '}', '|', '\\', '^', '`']), "bad IRI {iri}");
                    toks.push(Tok::Iri(iri));
                    i = end + 1;
                }
                '"' => {
                    let mut s = String::new();
                    i += 1;
                    loop {
                        match chars[i] {
                            '"' => break,
                            '\n' | '\r' => panic!("raw line break in a short literal"),
                            '\\' => {
                                i += 1;
                                match chars[i] {
                                    'n' => s.push('\n'),
                                    'r' => s.push('\r'),
                                    't' => s.push('\t'),
                                    '"' => s.push('"'),
                                    '\\' => s.push('\\'),
                                    'u' => {
                                        let hex: String = chars[i + 1..i + 5].iter().collect();
                                        s.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                                        i += 4;
                                    }
                                    other => panic!("bad escape \\{other}"),
                                }
                            }
                            c => s.push(c),
                        }
                        i += 1;
                    }
                    i += 1;
                    let mut datatype = "xsd:string".to_owned();
                    if chars.get(i) == Some(&'^') {
                        i += 2;
                        let start = i;
                        while i < chars.len() && !chars[i].is_whitespace() && !";,.".contains(chars[i]) {
                            i += 1;
                        }
                        datatype = chars[start..i].iter().collect();
                    }
                    toks.push(Tok::Lit(s, datatype));
                }
                ';' | ',' | '(' | ')' => {
                    toks.push(Tok::Punct(c));
                    i += 1;
                }
                '.' => {
                    toks.push(Tok::Punct('.'));
                    i += 1;
                }
                '@' => {
                    assert_eq!(chars[i..i + 7].iter().collect::<String>(), "@prefix");
                    toks.push(Tok::Prefix);
                    i += 7;
                }
                _ => {
                    let start = i;
                    while i < chars.len() && !chars[i].is_whitespace() && !";,()".contains(chars[i]) {
                        // A final '.' ends the statement.
                        if chars[i] == '.' && chars.get(i + 1).is_none_or(|c| c.is_whitespace()) {
                            break;
                        }
                        i += 1;
                    }
                    let word: String = chars[start..i].iter().collect();
                    if word.parse::<f64>().is_ok() {
                        toks.push(Tok::Lit(
                            word.clone(),
                            if word.contains('.') { "xsd:decimal" } else { "xsd:integer" }.into(),
                        ));
                    } else if word == "true" || word == "false" {
                        toks.push(Tok::Lit(word, "xsd:boolean".into()));
                    } else {
                        toks.push(Tok::Name(word));
                    }
                }
            }
        }
        let mut prefixes: HashMap<String, String> = HashMap::new();
        let expand = |prefixes: &HashMap<String, String>, t: &Tok| -> String {
            match t {
                Tok::Iri(iri) => iri.clone(),
                Tok::Name(n) if n == "a" => format!("{}type", super::RDF),
                Tok::Name(n) => {
                    let (p, local) = n.split_once(':').unwrap_or_else(|| panic!("not a prefixed name: {n}"));
                    format!("{}{local}", prefixes.get(p).unwrap_or_else(|| panic!("unknown prefix {p}")))
                }
                Tok::Lit(s, dt) => format!("\"{s}\"^^{dt}"),
                other => panic!("unexpected {other:?}"),
            }
        };
        let mut triples = BTreeSet::new();
        let mut blank = 0;
        let mut k = 0;
        while k < toks.len() {
            if toks[k] == Tok::Prefix {
                let Tok::Name(p) = &toks[k + 1] else { panic!("prefix name") };
                let Tok::Iri(iri) = &toks[k + 2] else { panic!("prefix IRI") };
                assert_eq!(toks[k + 3], Tok::Punct('.'));
                prefixes.insert(p.trim_end_matches(':').to_owned(), iri.clone());
                k += 4;
                continue;
            }
            let subject = expand(&prefixes, &toks[k]);
            k += 1;
            loop {
                let predicate = expand(&prefixes, &toks[k]);
                k += 1;
                loop {
                    let object = if toks[k] == Tok::Punct('(') {
                        k += 1;
                        let mut items = Vec::new();
                        while toks[k] != Tok::Punct(')') {
                            items.push(expand(&prefixes, &toks[k]));
                            k += 1;
                        }
                        let mut head = format!("{}nil", super::RDF);
                        for item in items.into_iter().rev() {
                            blank += 1;
                            let node = format!("_:b{blank}");
                            triples.insert((node.clone(), format!("{}first", super::RDF), item));
                            triples.insert((node.clone(), format!("{}rest", super::RDF), head));
                            head = node;
                        }
                        head
                    } else {
                        expand(&prefixes, &toks[k])
                    };
                    k += 1;
                    triples.insert((subject.clone(), predicate.clone(), object));
                    if toks[k] == Tok::Punct(',') {
                        k += 1;
                    } else {
                        break;
                    }
                }
                match toks[k] {
                    Tok::Punct(';') => k += 1,
                    Tok::Punct('.') => {
                        k += 1;
                        break;
                    }
                    ref other => panic!("expected ; or . got {other:?}"),
                }
            }
        }
        triples
    }

    fn t(s: &str, p: &str, o: &str) -> (String, String, String) {
        (s.to_owned(), p.to_owned(), o.to_owned())
    }

    #[tokio::test]
    async fn exports_parseable_turtle() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "export_knowledge", json!({"session_id": id, "format": "Turtle"})).await;
        assert_eq!(result["format"], "turtle");
        let text = result["data"].as_str().unwrap();
        assert!(text.starts_with("@prefix cks: <http://cks.org/vocab#> .\n"));
        let triples = parse_turtle(text);
        let (e, s, ss) = ("http://cks.org/earth", "http://cks.org/sun", "http://cks.org/solar%20system");
        let (cks, rdf, rdfs) = ("http://cks.org/vocab#", super::RDF, super::RDFS);
        let expected = [
            t(e, &format!("{rdf}type"), &format!("{cks}Planet")),
            t(e, &format!("{rdfs}label"), "\"Earth \"blue\" \\ marble\nthird\"^^xsd:string"),
            t(e, &format!("{cks}mass"), "\"5.97\"^^xsd:double"),
            t(e, &format!("{cks}moons"), "\"1\"^^xsd:integer"),
            t(e, &format!("{cks}inhabited"), "\"true\"^^xsd:boolean"),
            t(e, &format!("{cks}tags"), "\"rocky\"^^xsd:string"),
            t(e, &format!("{cks}tags"), "\"wet\"^^xsd:string"),
            t(e, &format!("{cks}orbit"), "\"{\"days\":365}\"^^rdf:JSON"),
            t(ss, &format!("{rdf}type"), &format!("{cks}Solar%20System")),
            t("http://cks.org/r1", &format!("{rdf}type"), &format!("{cks}Relation")),
            t("http://cks.org/r1", &format!("{cks}relationType"), "\"orbits\"^^xsd:string"),
            t("http://cks.org/r1", &format!("{cks}participant"), e),
            t("http://cks.org/r1", &format!("{cks}participant"), s),
            t("http://cks.org/r3", &format!("{cks}participant"), ss),
            t(e, &format!("{cks}orbits"), s),
        ];
        for triple in &expected {
            assert!(triples.contains(triple), "missing {triple:?}\n{text}");
        }
        assert!(!triples.iter().any(|(_, p, _)| p.ends_with("#note")), "null fields are left out");
        assert!(!triples.iter().any(|(_, p, _)| p.ends_with("part%20of")), "n-ary relations add no direct edge");
        // The ordered participant list of r3.
        let first =
            |node: &str| triples.iter().find(|(s, p, _)| s == node && p.ends_with("#first")).map(|x| x.2.clone());
        let rest = |node: &str| triples.iter().find(|(s, p, _)| s == node && p.ends_with("#rest")).map(|x| x.2.clone());
        let mut node = triples
            .iter()
            .find(|(s, p, _)| s == "http://cks.org/r3" && p.ends_with("#participants"))
            .unwrap()
            .2
            .clone();
        let mut list = Vec::new();
        while let Some(item) = first(&node) {
            list.push(item);
            node = rest(&node).unwrap();
        }
        assert_eq!(list, vec![e, s, ss]);
        assert!(
            text.contains(
                "\n<http://cks.org/earth> a cks:Planet ;\n    rdfs:label \"Earth \\\"blue\\\" \\\\ marble\\nthird\" ;\n"
            ),
            "{text}"
        );
        assert!(text.contains("\n<http://cks.org/earth> cks:orbits <http://cks.org/sun> .\n"));
        assert!(text.contains(
            "<http://cks.org/r3> a cks:Relation ;\n    rdfs:label \"r3\" ;\n    cks:relationType \"part of\" ;"
        ));
    }

    #[tokio::test]
    async fn exports_the_reference_json_ld_graph_with_a_context() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "export_knowledge", json!({"session_id": id})).await;
        assert_eq!(result["format"], "json-ld");
        let data = &result["data"];
        assert_eq!(data["@context"]["@vocab"], "http://cks.org/vocab#");
        assert_eq!(data["@context"]["@base"], "http://cks.org/");
        assert_eq!(data["@context"]["name"], "rdfs:label");
        let graph = data["@graph"].as_array().unwrap();
        assert_eq!(graph.len(), 3, "relations are properties, not nodes");
        assert_eq!(
            graph[0],
            json!({"@id": "earth", "@type": "Planet", "name": "Earth \"blue\" \\ marble\nthird", "mass": 5.97, "moons": 1,
                   "inhabited": true, "tags": ["rocky", "wet"], "orbit": {"@type": "@json", "@value": {"days": 365}},
                   "note": null, "orbits": [{"@id": "sun"}], "part%20of": [{"@id": "sun"}]})
        );
        assert_eq!(graph[2]["@id"], "solar%20system");
        assert_eq!(graph[2]["@type"], "Solar%20System");

        // A relation whose first participant is a relation gets a minimal node, as in the reference.
        let meta = session(
            &ctx,
            structure(vec![
                obj("a", "Claim", "A", json!({})),
                obj("b", "Claim", "B", json!({})),
                rel("r1", &["a", "b"], "supports"),
                rel("r2", &["r1", "a"], "cites"),
            ]),
        )
        .await;
        let result = call(&ctx, "export_knowledge", json!({"session_id": meta, "format": "json-ld"})).await;
        let graph = result["data"]["@graph"].as_array().unwrap();
        assert_eq!(graph.len(), 3);
        assert_eq!(graph[2], json!({"@id": "r1", "@type": "Entity", "cites": [{"@id": "a"}]}));
    }

    #[tokio::test]
    async fn formats_and_errors() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let xml = call(&ctx, "export_knowledge", json!({"session_id": id, "format": "rdf-xml"})).await;
        assert_eq!(xml["error"], "invalid_parameter");
        assert_eq!(xml["supported"], json!(["json-ld", "turtle"]));
        assert_eq!(
            xml["message"],
            "Format 'rdf-xml' is not supported by this server. Supported formats: json-ld, turtle."
        );
        let other = call(&ctx, "export_knowledge", json!({"session_id": id, "format": "csv"})).await;
        assert_eq!(other["error"], "unsupported_format");
        assert_eq!(call(&ctx, "export_knowledge", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "export_knowledge", json!({"session_id": "x"})).await["error"], "session_not_found");
    }

    #[test]
    fn iris_and_terms() {
        assert_eq!(super::object_iri("urn:isbn:123"), "urn:isbn:123");
        assert_eq!(super::object_iri("a b/c"), "http://cks.org/a%20b%2Fc");
        assert_eq!(super::object_iri(".."), "http://cks.org/%2E%2E");
        assert_eq!(super::object_iri("ü"), "http://cks.org/ü");
        assert_eq!(super::object_iri("größe"), "http://cks.org/größe");
        assert_eq!(super::object_iri("a\u{a0}b\u{fffe}"), "http://cks.org/a\u{a0}b%EF%BF%BE");
        assert_eq!(super::term("part of"), "<http://cks.org/vocab#part%20of>");
        assert_eq!(super::term("born_in"), "cks:born_in");
        assert_eq!(super::term("http://schema.org/Person"), "<http://schema.org/Person>");
        assert_eq!(super::ld_key("name"), "http://cks.org/vocab#name");
        assert_eq!(super::ld_key("dc:title"), "dc:title");
        assert_eq!(super::ld_type("Solar System"), "Solar%20System");
        assert_eq!(super::escape_literal("a\u{1}b"), "a\\u0001b");
    }
}
