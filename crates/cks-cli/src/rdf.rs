//! RDF in and out, through the oxigraph project's parsers and serializers.
//!
//! Reading Turtle or RDF/XML maps the graph as the reference does: every subject is an object
//! (type from its first `rdf:type`, after any `#`; name from its first `rdfs:label`, else its
//! IRI), every triple whose object is not a literal is a relation `subject-predicate-object`, and
//! an object that is no subject becomes an `Entity`. Triples are taken in document order, each
//! once. Blank nodes are named `_:b0`, `_:b1`, … in order of appearance.
//!
//! Relative IRIs resolve against `base` in Turtle; in RDF/XML they stay relative (`local`,
//! `#frag`), as the reference's RDF/XML reader leaves them.
//!
//! RDF/XML with a DOCTYPE is refused before parsing: its entities could expand exponentially
//! ("billion laughs"), and RDF needs none.
//!
//! Writing RDF/XML is the Turtle graph `cks_core::linked_data` describes, re-serialized.

use cks_core::{Identity, KnowledgeObject, KnowledgeStructure, StructureError};
use oxrdf::vocab::{rdf, rdfs};
use oxrdf::{NamedOrBlankNode, Term, Triple};
use std::collections::{HashMap, HashSet};

/// The RDF syntaxes `convert` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Syntax {
    Turtle,
    RdfXml,
}

impl Syntax {
    /// The format name the reference's messages give.
    fn name(self) -> &'static str {
        match self {
            Syntax::Turtle => "turtle",
            Syntax::RdfXml => "xml",
        }
    }
}

/// The base RDF/XML is read against, so that relative IRIs resolve to something they can be told
/// back from (and written relative again).
const RELATIVE_BASE: &str = "cks-relative:/";

/// The structure an RDF document describes; `base` resolves relative IRIs in Turtle.
pub(crate) fn to_structure(text: &str, syntax: Syntax, base: &str) -> Result<KnowledgeStructure, String> {
    if syntax == Syntax::RdfXml && has_doctype(text) {
        return Err("Refusing to parse RDF/XML input containing a DOCTYPE declaration: custom XML entities are \
                    not supported and can be used to exhaust memory/CPU (the 'billion laughs' attack). Remove \
                    the DOCTYPE and inline any entity values directly."
            .into());
    }
    let failed = |e: &dyn std::fmt::Display| format!("Failed to parse RDF input as '{}': {e}", syntax.name());
    let mut triples = Vec::new();
    let mut seen = HashSet::new();
    let mut keep = |triple: Triple| {
        if seen.insert(triple.clone()) {
            triples.push(triple);
        }
    };
    match syntax {
        Syntax::Turtle => {
            let parser = oxttl::TurtleParser::new().with_base_iri(base).map_err(|e| failed(&e))?;
            for triple in parser.for_slice(text.as_bytes()) {
                keep(triple.map_err(|e| failed(&e))?);
            }
        }
        Syntax::RdfXml => {
            let parser = oxrdfxml::RdfXmlParser::new().with_base_iri(RELATIVE_BASE).map_err(|e| failed(&e))?;
            for triple in parser.for_slice(text.as_bytes()) {
                keep(triple.map_err(|e| failed(&e))?);
            }
        }
    }
    let relative = syntax == Syntax::RdfXml;
    Graph::new(&triples, relative).structure()
}

/// A case-insensitive search for `<!DOCTYPE`.
fn has_doctype(text: &str) -> bool {
    text.as_bytes().windows(9).any(|w| w.eq_ignore_ascii_case(b"<!DOCTYPE"))
}

/// The triples, with every node's text as the mapping reads it.
struct Graph<'a> {
    triples: &'a [Triple],
    blank_names: HashMap<&'a str, String>,
    /// Whether IRIs under [`RELATIVE_BASE`] are written relative.
    relative: bool,
}

impl<'a> Graph<'a> {
    fn new(triples: &'a [Triple], relative: bool) -> Graph<'a> {
        let mut blank_names = HashMap::new();
        for triple in triples {
            let subject = match &triple.subject {
                NamedOrBlankNode::BlankNode(b) => Some(b.as_str()),
                NamedOrBlankNode::NamedNode(_) => None,
            };
            let object = match &triple.object {
                Term::BlankNode(b) => Some(b.as_str()),
                _ => None,
            };
            for blank in subject.into_iter().chain(object) {
                let next = blank_names.len();
                blank_names.entry(blank).or_insert_with(|| format!("_:b{next}"));
            }
        }
        Graph { triples, blank_names, relative }
    }

    fn iri_text(&self, iri: &str) -> String {
        match iri.strip_prefix(RELATIVE_BASE) {
            Some(relative) if self.relative => relative.to_owned(),
            _ => iri.to_owned(),
        }
    }

    fn subject_text(&self, subject: &'a NamedOrBlankNode) -> String {
        match subject {
            NamedOrBlankNode::NamedNode(n) => self.iri_text(n.as_str()),
            NamedOrBlankNode::BlankNode(b) => self.blank_names[b.as_str()].clone(),
        }
    }

    /// A term as Python's `str()` of an rdflib node: the IRI, the literal's text, the blank name.
    fn term_text(&self, term: &'a Term) -> String {
        match term {
            Term::NamedNode(n) => self.iri_text(n.as_str()),
            Term::BlankNode(b) => self.blank_names[b.as_str()].clone(),
            Term::Literal(l) => l.value().to_owned(),
            #[allow(unreachable_patterns)]
            _ => term.to_string(),
        }
    }

    fn structure(&self) -> Result<KnowledgeStructure, String> {
        let mut objects = Vec::new();
        let mut known: HashSet<String> = HashSet::new();
        let mut subjects: Vec<&NamedOrBlankNode> = Vec::new();
        for triple in self.triples {
            if known.insert(self.subject_text(&triple.subject)) {
                subjects.push(&triple.subject);
            }
        }
        let found = self.labels_and_types();
        for subject in subjects {
            let id = self.subject_text(subject);
            let (label, r#type) = found.get(&id).map_or((None, None), |(l, t)| (l.as_ref(), t.as_ref()));
            objects.push(subject_object(id, label, r#type));
        }
        let mut relations = Vec::new();
        for triple in self.triples {
            if matches!(triple.object, Term::Literal(_)) {
                continue;
            }
            let (subject, predicate, object) = (
                self.subject_text(&triple.subject),
                self.iri_text(triple.predicate.as_str()),
                self.term_text(&triple.object),
            );
            if known.insert(object.clone()) {
                objects.push(KnowledgeObject::new(
                    Identity::new(object.as_str(), "Entity", object.as_str()),
                    serde_json::Map::new(),
                ));
            }
            let structure = serde_json::json!({"participants": [subject, object], "relation_type": predicate});
            let serde_json::Value::Object(structure) = structure else { unreachable!("a JSON object literal") };
            relations.push(KnowledgeObject::new(
                Identity::new(format!("{subject}-{predicate}-{object}"), "Relation", predicate.as_str()),
                structure,
            ));
        }
        objects.extend(relations);
        KnowledgeStructure::from_objects(objects).map_err(|e| match e {
            StructureError::DuplicateId(id) => format!("Duplicate canonical identity '{id}'."),
            other => other.to_string(),
        })
    }

    /// Each subject's first `rdfs:label` and first `rdf:type`, in one pass over the triples.
    fn labels_and_types(&self) -> HashMap<String, (Option<String>, Option<String>)> {
        let mut found: HashMap<String, (Option<String>, Option<String>)> = HashMap::new();
        for triple in self.triples {
            let predicate = triple.predicate.as_ref();
            if predicate != rdfs::LABEL && predicate != rdf::TYPE {
                continue;
            }
            let (label, r#type) = found.entry(self.subject_text(&triple.subject)).or_default();
            let slot = if predicate == rdfs::LABEL { label } else { r#type };
            if slot.is_none() {
                *slot = Some(self.term_text(&triple.object));
            }
        }
        found
    }
}

/// A subject's object: its first label as name (unless empty), its first type (after any `#`).
fn subject_object(id: String, label: Option<&String>, r#type: Option<&String>) -> KnowledgeObject {
    let name = label.filter(|label| !label.is_empty()).cloned().unwrap_or_else(|| id.clone());
    let r#type = match r#type {
        Some(t) => t.rsplit('#').next().unwrap_or_default().to_owned(),
        None => "Entity".to_owned(),
    };
    KnowledgeObject::new(Identity::new(id, r#type, name), serde_json::Map::new())
}

/// RDF/XML of the graph `cks_core::linked_data::turtle` describes: each subject's triples
/// together (in order of first appearance) and blank nodes named `b0`, `b1`, … so that the same
/// structure always gives the same text.
pub(crate) fn to_rdf_xml(structure: &KnowledgeStructure) -> Result<String, String> {
    use cks_core::linked_data::{RDF, RDFS, VOCAB, XSD, turtle};
    let text = turtle(structure);
    let mut blanks: HashMap<oxrdf::BlankNode, oxrdf::BlankNode> = HashMap::new();
    let mut rename = |blank: oxrdf::BlankNode| {
        let next = blanks.len();
        blanks.entry(blank).or_insert_with(|| oxrdf::BlankNode::new_unchecked(format!("b{next}"))).clone()
    };
    let mut by_subject: Vec<Vec<Triple>> = Vec::new();
    let mut position: HashMap<NamedOrBlankNode, usize> = HashMap::new();
    for triple in oxttl::TurtleParser::new().for_slice(text.as_bytes()) {
        let mut triple = triple.map_err(|e| e.to_string())?;
        if let NamedOrBlankNode::BlankNode(b) = triple.subject {
            triple.subject = rename(b).into();
        }
        if let Term::BlankNode(b) = triple.object {
            triple.object = rename(b).into();
        }
        let at = *position.entry(triple.subject.clone()).or_insert_with(|| {
            by_subject.push(Vec::new());
            by_subject.len() - 1
        });
        by_subject[at].push(triple);
    }
    let mut serializer = oxrdfxml::RdfXmlSerializer::new();
    for (prefix, iri) in [("cks", VOCAB), ("rdf", RDF), ("rdfs", RDFS), ("xsd", XSD)] {
        serializer = serializer.with_prefix(prefix, iri).map_err(|e| e.to_string())?;
    }
    let mut writer = serializer.for_writer(Vec::new());
    for triple in by_subject.iter().flatten() {
        writer.serialize_triple(triple).map_err(|e| e.to_string())?;
    }
    let bytes = writer.finish().map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}
