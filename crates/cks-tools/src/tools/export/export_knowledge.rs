//! `export_knowledge`: a session's current structure as linked data — JSON-LD or Turtle, written
//! by `cks_core::linked_data`.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use cks_core::linked_data::{json_ld, turtle};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

const SUPPORTED: [&str; 2] = ["json-ld", "turtle"];

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

impl From<cks_core::linked_data::JsonLd> for JsonLd {
    fn from(document: cks_core::linked_data::JsonLd) -> Self {
        JsonLd { context: document.context, graph: document.graph }
    }
}

pub(crate) struct ExportKnowledge;

#[async_trait::async_trait]
impl Tool for ExportKnowledge {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Export as linked data";
    const META: ToolMeta = ToolMeta {
        name: "export_knowledge",
        description: "Export a session's current structure as linked data: 'json-ld' (default; data: \
            {@context, @graph}, one node per object, relations as properties of their first participant) or \
            'turtle' (data: Turtle text). Another format is 'invalid_parameter'. Returns {format, data}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
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
                    ErrorCode::UnsupportedFormat,
                    format!("Format '{requested}' is not supported. Use 'json-ld' or 'turtle'."),
                )
                .with("supported", json!(SUPPORTED)));
            }
        };
        let session_id = input.session_id;
        let data =
            ctx.runtime
                .read(&session_id, |s, _| {
                    if format == "turtle" { Data::Text(turtle(s)) } else { Data::JsonLd(json_ld(s).into()) }
                })
                .await?;
        Ok(Output { format: format.to_owned(), session_id, data })
    }
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
                Tok::Name(n) if n == "a" => format!("{}type", cks_core::linked_data::RDF),
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
                        let mut head = format!("{}nil", cks_core::linked_data::RDF);
                        for item in items.into_iter().rev() {
                            blank += 1;
                            let node = format!("_:b{blank}");
                            triples.insert((node.clone(), format!("{}first", cks_core::linked_data::RDF), item));
                            triples.insert((node.clone(), format!("{}rest", cks_core::linked_data::RDF), head));
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
        let (cks, rdf, rdfs) = ("http://cks.org/vocab#", cks_core::linked_data::RDF, cks_core::linked_data::RDFS);
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
}
