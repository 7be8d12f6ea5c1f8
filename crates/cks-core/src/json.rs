//! Canonical JSON: parsing and serializing knowledge structures in the reference's CKS-003 format.
//!
//! Output is `{"objects": [...], "version": "1.0"}` with keys sorted, a two-space indent, non-ASCII
//! characters kept, and objects in the structure's own order. Input accepts what the reference
//! accepts and rejects what it rejects, with the reference's messages (see [`ParseError`]).
//!
//! Documents handed to clients ([`to_document_string`]) also carry the format-versioning keys
//! `_cks_format_version`, `_cks_min_reader_version` and `_cks_metadata` (`serialized_at`,
//! `cks_core_version`). The plain forms ([`to_canonical_string`], [`to_compact_string`]) leave
//! them out: they are pure functions of the structure, which storage and hashing rely on. The
//! parser honours `_cks_min_reader_version` (see [`READER_VERSION`]).

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use std::sync::Arc;

use crate::object::{Identity, KnowledgeObject, PARTICIPANTS, RELATION_TYPE, Structure};
use crate::structure::{Entry, KnowledgeStructure, StructureError};

pub mod escape;
mod pieces;
mod streaming;
mod writer;

use writer::Writer;

/// The one serialization format version this crate reads and writes.
pub const FORMAT_VERSION: &str = "1.0";

/// The `_cks_format_version` written into client documents.
pub const CKS_FORMAT_VERSION: &str = "1.0";

/// The `_cks_min_reader_version` written into client documents: the oldest reader release (in
/// the reference core's numbering) that reads this format correctly.
pub const MIN_READER_VERSION: &str = "1.13.0";

/// The format level this parser implements, in the reference core's release numbering (the
/// numbering `_cks_min_reader_version` uses): a document that requires a newer reader is refused.
/// It is also written as `_cks_metadata.cks_core_version`, because that field lives in the same
/// numbering: it says which format level wrote the document, not which program did.
pub const READER_VERSION: &str = "1.23.1";

/// Why a document is not a knowledge structure. Messages follow the reference parser's wording.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("Invalid JSON: {0}")]
    InvalidJson(String),
    #[error("Top-level JSON value must be an object.")]
    NotAnObject,
    #[error("Missing top-level 'objects' array.")]
    MissingObjects,
    #[error("'objects' must be a JSON array.")]
    ObjectsNotArray,
    #[error("Unsupported serialization version {0}.")]
    UnsupportedVersion(String),
    #[error("Object #{index}: Each object must be represented by a JSON object.")]
    ObjectNotAnObject { index: usize },
    #[error("Object #{index}: Unknown object field(s): {fields}")]
    UnknownObjectFields { index: usize, fields: String },
    #[error("Object #{index}: Missing object identity.")]
    MissingIdentity { index: usize },
    #[error("Object #{index}: Object identity must be an object.")]
    IdentityNotAnObject { index: usize },
    #[error("Object #{index}: Unknown identity field(s): {fields}")]
    UnknownIdentityFields { index: usize, fields: String },
    #[error("Object #{index}: Missing identity field '{field}'.")]
    MissingIdentityField { index: usize, field: &'static str },
    #[error("Object #{index}: Identity fields must all be strings.")]
    IdentityFieldNotString { index: usize },
    #[error("Object #{index}: Object structure must be an object.")]
    StructureNotAnObject { index: usize },
    #[error("Object #{index}: Relation participants must be a list.")]
    ParticipantsNotList { index: usize },
    #[error("Object #{index}: CanonicalRelation requires at least two participants.")]
    TooFewParticipants { index: usize },
    #[error("Object #{index}: Relation participants must all be strings.")]
    ParticipantNotString { index: usize },
    #[error("Object #{index}: Relation type must be a string.")]
    RelationTypeNotString { index: usize },
    #[error("Object #{index}: Relation type cannot be empty.")]
    EmptyRelationType { index: usize },
    #[error("Duplicate canonical identity: '{0}'")]
    DuplicateId(String),
    #[error(
        "This document requires a reader of cks-core >= {required}, but this server reads up to cks-core {}. \
         Re-serialize it with an older writer or migrate it to an older format.",
        READER_VERSION
    )]
    ReaderTooOld { required: String },
}

/// Parses a canonical JSON document.
///
/// The text is read in one pass that decodes one object at a time into the structure, so the
/// whole document never exists as a `serde_json::Value` tree (which takes several times the
/// text's size): the result equals `parse_value` of the decoded text, errors included.
pub fn parse_str(text: &str) -> Result<KnowledgeStructure, ParseError> {
    let threads = if text.len() >= PIPELINED_TEXT_BYTES { streaming::Threads::TWO } else { streaming::Threads::One };
    parse_text(text, threads)
}

/// Parses a document read from `reader` — a stored state — without holding its whole text: see
/// [`pieces`]. The outcome is [`parse_str`]'s, but for the wording of a syntax error (its place
/// is counted from the start of the object it is in).
pub fn parse_read(reader: &mut dyn std::io::Read) -> Result<KnowledgeStructure, ParseError> {
    pieces::parse(reader, pieces::PIECE_BYTES)
}

/// Texts from this size on are parsed on two threads: one reads the object records while the
/// other builds the structure from them (they take about as long as each other). A smaller text
/// is not worth a thread.
const PIPELINED_TEXT_BYTES: usize = 1 << 20;

fn parse_text(text: &str, threads: streaming::Threads) -> Result<KnowledgeStructure, ParseError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let root = serde::Deserializer::deserialize_any(&mut deserializer, streaming::RootVisitor { threads })
        .and_then(|root| deserializer.end().map(|()| root))
        .map_err(|e| ParseError::InvalidJson(e.to_string()))?;
    let root = root.ok_or(ParseError::NotAnObject)?;
    let objects = root.objects.ok_or(ParseError::MissingObjects)?;
    // As in `parse_value`: the shape of `objects`, then the version, then the objects themselves.
    objects.map_err(|not_array| not_array.unwrap_or(ParseError::ObjectsNotArray))
}

/// Parses an already decoded JSON document.
pub fn parse_value(value: Value) -> Result<KnowledgeStructure, ParseError> {
    let Value::Object(mut root) = value else { return Err(ParseError::NotAnObject) };
    let objects = match root.remove("objects") {
        None => return Err(ParseError::MissingObjects),
        Some(Value::Array(objects)) => objects,
        Some(_) => return Err(ParseError::ObjectsNotArray),
    };
    check_version(root.get("version"))?;
    check_reader_version(root.get(MIN_READER_KEY))?;
    // Other top-level keys (`_cks_format_version`, `_cks_metadata`, ...) are accepted and ignored,
    // as by the reference.
    let mut builder = Builder::default();
    for raw in objects {
        builder.add(raw)?;
    }
    Ok(builder.structure)
}

fn check_version(version: Option<&Value>) -> Result<(), ParseError> {
    match version {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(v)) if v == FORMAT_VERSION => Ok(()),
        Some(Value::String(v)) => Err(ParseError::UnsupportedVersion(format!("'{v}'"))),
        Some(other) => Err(ParseError::UnsupportedVersion(other.to_string())),
    }
}

/// The top-level key naming the oldest reader a document needs.
const MIN_READER_KEY: &str = "_cks_min_reader_version";

/// Refuses a document whose `_cks_min_reader_version` is newer than [`READER_VERSION`]. Versions
/// compare as dotted integers; an unreadable one compares as `0` (so it never refuses), as the
/// reference's reader does.
fn check_reader_version(required: Option<&Value>) -> Result<(), ParseError> {
    let Some(Value::String(required)) = required else { return Ok(()) };
    if release(required) > release(READER_VERSION) {
        return Err(ParseError::ReaderTooOld { required: required.clone() });
    }
    Ok(())
}

fn release(version: &str) -> Vec<u64> {
    version.split('.').map(str::parse).collect::<Result<Vec<u64>, _>>().unwrap_or_else(|_| vec![0])
}

/// Adds decoded object records to a structure, in document order.
#[derive(Default)]
struct Builder {
    structure: KnowledgeStructure,
    next_index: usize,
}

impl Builder {
    fn add(&mut self, raw: Value) -> Result<(), ParseError> {
        let index = self.next_index;
        self.next_index += 1;
        let object = parse_object(index, raw)?;
        self.insert(index, Entry::new(object))
    }

    fn add_record(&mut self, record: streaming::Record) -> Result<(), ParseError> {
        match record {
            streaming::Record::Decoded(object) => self.add_prepared(prepare_decoded(self.next_index, object)),
            streaming::Record::Prepared(entry) => self.add_prepared(entry),
            streaming::Record::Raw(raw) => self.add(raw),
        }
    }

    /// The structure built, or the first object error.
    fn finish(self, failure: Option<ParseError>) -> Result<KnowledgeStructure, Option<ParseError>> {
        match failure {
            Some(error) => Err(Some(error)),
            None => Ok(self.structure),
        }
    }

    /// Adds the next object, decoded with the right shape and prepared ([`prepare_decoded`]).
    fn add_prepared(&mut self, entry: Result<Entry, ParseError>) -> Result<(), ParseError> {
        let index = self.next_index;
        self.next_index += 1;
        self.insert(index, entry?)
    }

    /// Inserts an object whose relation fields [`check_relation_fields`] passed.
    fn insert(&mut self, index: usize, entry: Entry) -> Result<(), ParseError> {
        self.structure.insert_shaped(entry).map_err(|e| match e {
            StructureError::DuplicateId(id) => ParseError::DuplicateId(id),
            // The relation fields were checked already, by stricter rules.
            StructureError::RelationShape(_) => ParseError::TooFewParticipants { index },
        })
    }
}

/// What is left of [`parse_object`]'s work for an object decoded with the right shape (see
/// `streaming::Record`): its relation fields' checks, and its hash.
fn prepare_decoded(index: usize, object: KnowledgeObject) -> Result<Entry, ParseError> {
    check_relation_fields(index, &object.structure)?;
    Ok(Entry::new(object))
}

/// Parses one `{identity, structure}` record. `index` is its 0-based position, used in messages.
pub fn parse_object(index: usize, raw: Value) -> Result<KnowledgeObject, ParseError> {
    let Value::Object(mut record) = raw else { return Err(ParseError::ObjectNotAnObject { index }) };
    let unknown = unknown_keys(&record, &["identity", "structure"]);
    if !unknown.is_empty() {
        return Err(ParseError::UnknownObjectFields { index, fields: unknown });
    }
    let identity = match record.remove("identity") {
        None => return Err(ParseError::MissingIdentity { index }),
        Some(Value::Object(identity)) => identity,
        Some(_) => return Err(ParseError::IdentityNotAnObject { index }),
    };
    let identity = parse_identity(index, identity)?;
    let structure = match record.remove("structure") {
        None => Structure::new(),
        Some(Value::Object(structure)) => Structure::from(structure),
        Some(_) => return Err(ParseError::StructureNotAnObject { index }),
    };
    check_relation_fields(index, &structure)?;
    Ok(KnowledgeObject::new(identity, structure))
}

fn parse_identity(index: usize, mut identity: Map<String, Value>) -> Result<Identity, ParseError> {
    let unknown = unknown_keys(&identity, &["id", "type", "name"]);
    if !unknown.is_empty() {
        return Err(ParseError::UnknownIdentityFields { index, fields: unknown });
    }
    let mut take = |field: &'static str| match identity.remove(field) {
        None => Err(ParseError::MissingIdentityField { index, field }),
        Some(value) => Ok(value),
    };
    let (id, r#type, name) = (take("id")?, take("type")?, take("name")?);
    match (id, r#type, name) {
        (Value::String(id), Value::String(r#type), Value::String(name)) => Ok(Identity::new(id, r#type, name)),
        _ => Err(ParseError::IdentityFieldNotString { index }),
    }
}

fn check_relation_fields(index: usize, structure: &Structure) -> Result<(), ParseError> {
    let (Some(participants), Some(relation_type)) = (structure.get(PARTICIPANTS), structure.get(RELATION_TYPE)) else {
        return Ok(());
    };
    let Value::Array(participants) = participants else { return Err(ParseError::ParticipantsNotList { index }) };
    if participants.len() < 2 {
        return Err(ParseError::TooFewParticipants { index });
    }
    if !participants.iter().all(Value::is_string) {
        return Err(ParseError::ParticipantNotString { index });
    }
    let Value::String(relation_type) = relation_type else { return Err(ParseError::RelationTypeNotString { index }) };
    if relation_type.trim().is_empty() {
        return Err(ParseError::EmptyRelationType { index });
    }
    Ok(())
}

fn unknown_keys(map: &Map<String, Value>, allowed: &[&str]) -> String {
    let unknown: Vec<&str> = map.keys().map(String::as_str).filter(|k| !allowed.contains(k)).collect();
    unknown.join(", ")
}

/// Room reserved per object for a pretty text: the text of a small object is about 300 bytes, and
/// the rest leaves room to escape the text in place later (a server sends a document as a JSON
/// string). Address space reserved and never written costs no memory, while growing a 300 MB
/// buffer would copy it.
const PRETTY_BYTES_PER_OBJECT: usize = 400;

/// [`PRETTY_BYTES_PER_OBJECT`] for a compact text.
const COMPACT_BYTES_PER_OBJECT: usize = 160;

/// Serializes to the canonical pretty form (sorted keys, two-space indent, non-ASCII kept).
pub fn to_canonical_string(structure: &KnowledgeStructure) -> String {
    let mut writer = Writer::<true>::with_capacity(structure.len() * PRETTY_BYTES_PER_OBJECT + 64);
    write_root(&mut writer, structure, None, |writer| write_objects(writer, structure.objects(), true, |_, _| {}));
    writer.into_string()
}

/// Serializes to the compact canonical form (same content and key order, no whitespace); used for
/// storage, where bytes matter more than looks.
pub fn to_compact_string(structure: &KnowledgeStructure) -> String {
    to_compact_string_located(structure).0
}

/// [`to_compact_string`], and where each object's record lies in that text: its offset and
/// length, in the structure's order.
pub fn to_compact_string_located(structure: &KnowledgeStructure) -> (String, Vec<(u64, u32)>) {
    let mut writer = Writer::<false>::with_capacity(structure.len() * COMPACT_BYTES_PER_OBJECT + 32);
    let mut records = Vec::with_capacity(structure.len());
    write_root(&mut writer, structure, None, |writer| {
        write_objects(writer, structure.objects(), true, |start, end| {
            records.push((start as u64, (end - start) as u32))
        });
    });
    (writer.into_string(), records)
}

/// Serializes a document for clients: the canonical pretty form plus the format-versioning keys,
/// with `serialized_at` as given (an ISO 8601 time; this crate reads no clock).
pub fn to_document_string(structure: &KnowledgeStructure, serialized_at: &str) -> String {
    client_document::<true>(structure, serialized_at, PRETTY_BYTES_PER_OBJECT)
}

/// [`to_document_string`] without indentation or line breaks: the same keys and values, in the
/// same order.
pub fn to_compact_document_string(structure: &KnowledgeStructure, serialized_at: &str) -> String {
    client_document::<false>(structure, serialized_at, COMPACT_BYTES_PER_OBJECT)
}

/// Writes `{"objects": [...], "version": "1.0"}`, or with `serialized_at` a client document (the
/// versioning keys too, keys in sorted order), the objects' records written by `objects`.
fn write_root<const PRETTY: bool>(
    writer: &mut Writer<PRETTY>,
    structure: &KnowledgeStructure,
    serialized_at: Option<&str>,
    objects: impl FnOnce(&mut Writer<PRETTY>),
) {
    writer.open(b'{');
    if let Some(serialized_at) = serialized_at {
        writer.string_member(true, "_cks_format_version", CKS_FORMAT_VERSION);
        writer.key(false, "_cks_metadata");
        writer.open(b'{');
        writer.string_member(true, "cks_core_version", READER_VERSION);
        writer.string_member(false, "serialized_at", serialized_at);
        writer.close(b'}', false);
        writer.string_member(false, MIN_READER_KEY, MIN_READER_VERSION);
    }
    writer.key(serialized_at.is_none(), "objects");
    writer.open(b'[');
    objects(writer);
    writer.close(b']', structure.is_empty());
    writer.string_member(false, "version", FORMAT_VERSION);
    writer.close(b'}', false);
}

/// Writes objects' records as the elements of the open array, `first` when none is written
/// before them, telling `record` where each one starts and ends.
fn write_objects<'a, const PRETTY: bool>(
    writer: &mut Writer<PRETTY>,
    objects: impl Iterator<Item = &'a Arc<KnowledgeObject>>,
    first: bool,
    mut record: impl FnMut(usize, usize),
) {
    for (position, object) in objects.enumerate() {
        writer.element(first && position == 0);
        let start = writer.out.len();
        writer.object(object);
        record(start, writer.out.len());
    }
}

/// From this many objects, a client document's records are written by two threads, half each.
const TWO_WRITERS_FROM: usize = 4_000;

/// A client document; from [`TWO_WRITERS_FROM`] objects their records are written in halves
/// ([`write_halves`]).
fn client_document<const PRETTY: bool>(
    structure: &KnowledgeStructure,
    serialized_at: &str,
    per_object: usize,
) -> String {
    let mut writer = Writer::<PRETTY>::with_capacity(structure.len() * per_object + 256);
    write_root(&mut writer, structure, Some(serialized_at), |writer| {
        if structure.len() < TWO_WRITERS_FROM || !write_halves(writer, structure, per_object) {
            write_objects(writer, structure.objects(), true, |_, _| {});
        }
    });
    writer.into_string()
}

/// Writes the objects' records, the second half by a second thread while this one writes the
/// first, then copied after it: a client waits for the whole document before it reads a byte,
/// and the copy costs a fraction of writing it. False, having written nothing, when no thread
/// could be started.
fn write_halves<const PRETTY: bool>(
    writer: &mut Writer<PRETTY>,
    structure: &KnowledgeStructure,
    per_object: usize,
) -> bool {
    let half = structure.len() / 2;
    let mut second = writer.beside((structure.len() - half) * per_object);
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new().spawn_scoped(scope, move || {
            write_objects(&mut second, structure.objects().skip(half), false, |_, _| {});
            second
        });
        let Ok(helper) = helper else { return false };
        write_objects(writer, structure.objects().take(half), true, |_, _| {});
        match helper.join() {
            Ok(second) => writer.out.extend_from_slice(&second.out),
            Err(panic) => std::panic::resume_unwind(panic),
        }
        true
    })
}

/// The canonical JSON value of a structure.
pub fn to_value(structure: &KnowledgeStructure) -> Value {
    serde_json::to_value(Canonical(structure)).expect("serializing to memory")
}

/// Serializes a structure in canonical form without building an intermediate `Value`.
#[derive(Debug, Clone, Copy)]
pub struct Canonical<'a>(pub &'a KnowledgeStructure);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut root = serializer.serialize_map(Some(2))?;
        root.serialize_entry("objects", &Objects(self.0))?;
        root.serialize_entry("version", FORMAT_VERSION)?;
        root.end()
    }
}

struct Objects<'a>(&'a KnowledgeStructure);

impl Serialize for Objects<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for object in self.0.objects() {
            seq.serialize_element(&CanonicalObject(object))?;
        }
        seq.end()
    }
}

/// Serializes one object as `{"identity": {"id", "name", "type"}, "structure": {...}}`.
#[derive(Debug, Clone, Copy)]
pub struct CanonicalObject<'a>(pub &'a KnowledgeObject);

impl Serialize for CanonicalObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut object = serializer.serialize_map(Some(2))?;
        object.serialize_entry("identity", &CanonicalIdentity(&self.0.identity))?;
        object.serialize_entry("structure", &self.0.structure)?;
        object.end()
    }
}

struct CanonicalIdentity<'a>(&'a Identity);

impl Serialize for CanonicalIdentity<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut identity = serializer.serialize_map(Some(3))?;
        identity.serialize_entry("id", &self.0.id)?;
        identity.serialize_entry("name", &self.0.name)?;
        identity.serialize_entry("type", &self.0.r#type)?;
        identity.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EARTH: &str = r#"{"version": "1.0", "objects": [
        {"identity": {"id": "planet-earth", "type": "Planet", "name": "Earth"}, "structure": {"mass_kg": 5.97e24, "b": 1, "a": "é"}},
        {"identity": {"id": "star-sun", "type": "Star", "name": "Sun"}},
        {"identity": {"id": "rel-orbit-1", "type": "Relation", "name": "Earth orbits Sun"},
         "structure": {"participants": ["planet-earth", "star-sun"], "relation_type": "orbits"}}]}"#;

    #[test]
    fn the_compact_text_says_where_each_record_lies() {
        let structure = crate::sample::random_graph(30, 20, 7);
        let (text, records) = to_compact_string_located(&structure);
        assert_eq!(text, serde_json::to_string(&Canonical(&structure)).unwrap());
        assert_eq!(records.len(), structure.len());
        for ((offset, len), object) in records.iter().zip(structure.objects()) {
            let record = &text[*offset as usize..(*offset + u64::from(*len)) as usize];
            assert_eq!(record, serde_json::to_string(&CanonicalObject(object)).unwrap());
        }
    }

    #[test]
    fn serializes_canonically() {
        let s = parse_str(EARTH).unwrap();
        let expected = r#"{
  "objects": [
    {
      "identity": {
        "id": "planet-earth",
        "name": "Earth",
        "type": "Planet"
      },
      "structure": {
        "a": "é",
        "b": 1,
        "mass_kg": 5.97e+24
      }
    },
    {
      "identity": {
        "id": "star-sun",
        "name": "Sun",
        "type": "Star"
      },
      "structure": {}
    },
    {
      "identity": {
        "id": "rel-orbit-1",
        "name": "Earth orbits Sun",
        "type": "Relation"
      },
      "structure": {
        "participants": [
          "planet-earth",
          "star-sun"
        ],
        "relation_type": "orbits"
      }
    }
  ],
  "version": "1.0"
}"#;
        assert_eq!(to_canonical_string(&s), expected);
        assert_eq!(parse_str(&to_compact_string(&s)).unwrap(), s);
        assert_eq!(to_value(&s), serde_json::from_str::<Value>(expected).unwrap());
    }

    fn err(text: &str) -> String {
        parse_str(text).unwrap_err().to_string()
    }

    /// Two threads where the reading one never helps the building one, and where it always does
    /// (checking and hashing every object it decodes).
    const TWO_THREADS: [streaming::Threads; 2] =
        [streaming::Threads::Two { help_when_queued: usize::MAX }, streaming::Threads::Two { help_when_queued: 0 }];
    const ONE_THREAD: streaming::Threads = streaming::Threads::One;

    #[test]
    fn a_large_text_read_on_two_threads_gives_what_one_thread_gives() {
        let structure = crate::sample::random_graph(4_000, 4_000, 7);
        let text = to_compact_string(&structure);
        assert!(text.len() >= PIPELINED_TEXT_BYTES, "{} bytes: parse_str would not use two threads", text.len());
        assert_eq!(parse_str(&text).unwrap(), structure);
        assert_eq!(parse_text(&text, ONE_THREAD).unwrap(), structure);
        // The first object error in document order, past many batches; a syntax error wins over it.
        let mut document: Value = serde_json::from_str(&text).unwrap();
        let objects = document["objects"].as_array_mut().unwrap();
        objects.push(objects[10].clone());
        objects.push(serde_json::json!({"identity": {"id": "late", "type": "T"}}));
        let late_duplicate = document.to_string();
        let expected = parse_text(&late_duplicate, ONE_THREAD);
        assert!(matches!(expected, Err(ParseError::DuplicateId(_))), "{expected:?}");
        // A relation with too few participants inside a later batch, with its own index; it
        // comes before the duplicate, so it is the error.
        let objects = document["objects"].as_array_mut().unwrap();
        let index = 1_500;
        objects[index] = serde_json::json!({
            "identity": {"id": objects[index]["identity"]["id"].clone(), "name": "r", "type": "R"},
            "structure": {"participants": ["a"], "relation_type": "x"},
        });
        let early_relation = document.to_string();
        let relation_error = Err(ParseError::TooFewParticipants { index });
        assert_eq!(parse_text(&early_relation, ONE_THREAD), relation_error);
        let truncated = &text[..text.len() - 3];
        assert!(matches!(parse_text(truncated, ONE_THREAD), Err(ParseError::InvalidJson(_))));
        for threads in TWO_THREADS {
            let built = parse_text(&text, threads).unwrap();
            assert_eq!(built, structure, "{threads:?}");
            assert_eq!(built.root_hash(), structure.root_hash(), "{threads:?}");
            assert_eq!(parse_text(&late_duplicate, threads), expected, "{threads:?}");
            assert_eq!(parse_text(&early_relation, threads), relation_error, "{threads:?}");
            assert_eq!(parse_text(truncated, threads), parse_text(truncated, ONE_THREAD), "{threads:?}");
        }
    }

    #[test]
    fn a_document_read_in_pieces_gives_what_its_text_gives() {
        let structure = crate::sample::random_graph(4_000, 4_000, 7);
        let text = to_compact_string(&structure);
        assert!(text.starts_with(r#"{"objects":[{"#) && text.len() > 1 << 20);
        // One piece per megabyte (on two threads), small pieces, and pieces shorter than a record.
        for piece in [pieces::PIECE_BYTES, 4_096, 100] {
            assert_eq!(pieces::parse(&mut text.as_bytes(), piece).unwrap(), structure, "pieces of {piece}");
        }
        assert_eq!(parse_read(&mut text.as_bytes()).unwrap().root_hash(), structure.root_hash());
        // Any other form is read whole.
        let pretty = to_canonical_string(&structure);
        assert_eq!(parse_read(&mut pretty.as_bytes()).unwrap(), structure);

        let a = r#"{"identity":{"id":"a","name":"n","type":"T"},"structure":{}}"#;
        let read = |text: &str| pieces::parse(&mut text.as_bytes(), 7);
        let with_a = read(&format!(r#"{{"objects":[{a}],"version":"1.0"}}"#)).unwrap();
        assert_eq!(with_a.ids().collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            read(&format!("{{\"objects\":[ {a} ,\n{a_b} ] }}", a_b = a.replace("\"a\"", "\"b\""))).unwrap().len(),
            2
        );
        // A later `objects` key replaces the first, even an empty one.
        assert!(read(&format!(r#"{{"objects":[{a}],"objects":[]}}"#)).unwrap().is_empty());
        assert_eq!(read(&format!(r#"{{"objects":[{a}],"objects":1}}"#)), Err(ParseError::ObjectsNotArray));
        // The version is checked after the objects, and wins over an object's error.
        let twice = format!(r#"{{"objects":[{a},{a}],"version":"2.0"}}"#);
        assert_eq!(read(&twice), Err(ParseError::UnsupportedVersion("'2.0'".into())));
        assert_eq!(read(&twice.replace("2.0", "1.0")), Err(ParseError::DuplicateId("a".into())));
        for bad in [
            format!(r#"{{"objects":[{a},]}}"#),
            format!(r#"{{"objects":[{a}],}}"#),
            format!(r#"{{"objects":[{a}{a}]}}"#),
            format!(r#"{{"objects":[{a}]}} x"#),
            format!(r#"{{"objects":[{a}]"#),
            format!(r#"{{"objects":[{a}"#),
            r#"{"objects":["#.to_owned(),
            r#"{"objects":[,]}"#.to_owned(),
            // A form feed is not JSON whitespace.
            format!("{{\"objects\":[{a}\u{c},{a}]}}"),
        ] {
            assert!(matches!(read(&bad), Err(ParseError::InvalidJson(_))), "{bad}: {:?}", read(&bad));
            assert!(matches!(parse_str(&bad), Err(ParseError::InvalidJson(_))), "{bad}");
        }
        // A reader that fails is a document that cannot be read.
        struct Failing;
        impl std::io::Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk gone"))
            }
        }
        assert!(matches!(parse_read(&mut Failing), Err(ParseError::InvalidJson(m)) if m.contains("disk gone")));
    }

    #[test]
    fn parse_errors_match_the_reference() {
        assert!(err("{").starts_with("Invalid JSON: "));
        assert_eq!(err("[]"), "Top-level JSON value must be an object.");
        assert_eq!(err("{}"), "Missing top-level 'objects' array.");
        assert_eq!(err(r#"{"objects": {}}"#), "'objects' must be a JSON array.");
        assert_eq!(err(r#"{"objects": [], "version": "2.0"}"#), "Unsupported serialization version '2.0'.");
        assert_eq!(err(r#"{"objects": [], "version": 1.0}"#), "Unsupported serialization version 1.0.");
        assert_eq!(err(r#"{"objects": [1]}"#), "Object #0: Each object must be represented by a JSON object.");
        assert_eq!(
            err(r#"{"objects": [{"identity": {}, "z": 1, "a": 2}]}"#),
            "Object #0: Unknown object field(s): a, z"
        );
        assert_eq!(err(r#"{"objects": [{}]}"#), "Object #0: Missing object identity.");
        assert_eq!(err(r#"{"objects": [{"identity": []}]}"#), "Object #0: Object identity must be an object.");
        assert_eq!(
            err(r#"{"objects": [{"identity": {"id": "a", "type": "T", "name": "n", "x": 1}}]}"#),
            "Object #0: Unknown identity field(s): x"
        );
        assert_eq!(err(r#"{"objects": [{"identity": {"type": "T"}}]}"#), "Object #0: Missing identity field 'id'.");
        assert_eq!(
            err(r#"{"objects": [{"identity": {"id": 1, "type": "T", "name": "n"}}]}"#),
            "Object #0: Identity fields must all be strings."
        );
        let obj = |structure: &str| {
            format!(
                r#"{{"objects": [{{"identity": {{"id": "r", "type": "R", "name": ""}}, "structure": {structure}}}]}}"#
            )
        };
        assert_eq!(err(&obj("null")), "Object #0: Object structure must be an object.");
        assert_eq!(
            err(&obj(r#"{"participants": "a", "relation_type": "x"}"#)),
            "Object #0: Relation participants must be a list."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a"], "relation_type": "x"}"#)),
            "Object #0: CanonicalRelation requires at least two participants."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a", 1], "relation_type": "x"}"#)),
            "Object #0: Relation participants must all be strings."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a", "b"], "relation_type": 3}"#)),
            "Object #0: Relation type must be a string."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a", "b"], "relation_type": " "}"#)),
            "Object #0: Relation type cannot be empty."
        );
        assert_eq!(
            err(
                r#"{"objects": [{"identity": {"id": "a", "type": "T", "name": "n"}}, {"identity": {"id": "a", "type": "T", "name": "m"}}]}"#
            ),
            "Duplicate canonical identity: 'a'"
        );
    }

    #[test]
    fn lenient_where_the_reference_is() {
        let s = parse_str(
            r#"{"objects": [{"identity": {"id": "", "type": "", "name": ""}}], "_cks_metadata": {}, "version": null}"#,
        )
        .unwrap();
        assert_eq!(s.len(), 1);
        // Only one of the two relation keys: an ordinary object.
        let s = parse_str(
            r#"{"objects": [{"identity": {"id": "a", "type": "T", "name": "n"}, "structure": {"participants": 1}}]}"#,
        )
        .unwrap();
        assert!(!s.get("a").unwrap().is_relation());
    }

    #[test]
    fn client_documents_carry_the_versioning_keys_and_read_back() {
        let s = parse_str(EARTH).unwrap();
        let text = to_document_string(&s, "2026-01-02T03:04:05.000006+00:00");
        let compact = to_compact_document_string(&s, "2026-01-02T03:04:05.000006+00:00");
        assert!(compact.len() < text.len() && !compact.contains('\n'));
        assert_eq!(serde_json::from_str::<Value>(&compact).unwrap(), serde_json::from_str::<Value>(&text).unwrap());
        let value: Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["_cks_format_version", "_cks_metadata", "_cks_min_reader_version", "objects", "version"]);
        assert_eq!(value["_cks_format_version"], CKS_FORMAT_VERSION);
        assert_eq!(value["_cks_min_reader_version"], MIN_READER_VERSION);
        assert_eq!(
            value["_cks_metadata"],
            serde_json::json!({"cks_core_version": READER_VERSION, "serialized_at": "2026-01-02T03:04:05.000006+00:00"})
        );
        // Keys appear in sorted order in the text too, with the canonical indent.
        assert!(
            text.starts_with(
                "{\n  \"_cks_format_version\": \"1.0\",\n  \"_cks_metadata\": {\n    \"cks_core_version\""
            )
        );
        // The objects are the canonical ones, and the document reads back to the same structure.
        assert_eq!(value["objects"], to_value(&s)["objects"]);
        assert_eq!(parse_str(&text).unwrap().root_hash(), s.root_hash());
        assert_eq!(parse_value(value).unwrap().root_hash(), s.root_hash());
        // The plain forms stay pure functions of the structure.
        assert!(!to_canonical_string(&s).contains("_cks"));
        assert!(!to_compact_string(&s).contains("_cks"));
    }

    #[test]
    fn documents_needing_a_newer_reader_are_refused() {
        let doc = |min: &str| format!(r#"{{"objects": [], "version": "1.0", "_cks_min_reader_version": {min}}}"#);
        for accepted in ["\"1.13.0\"", &format!("\"{READER_VERSION}\""), "\"1.9\"", "\"one.two\"", "2", "null"] {
            assert!(parse_str(&doc(accepted)).is_ok(), "{accepted}");
            assert!(parse_value(serde_json::from_str(&doc(accepted)).unwrap()).is_ok(), "{accepted}");
        }
        for refused in ["\"1.23.2\"", "\"1.100.0\"", "\"2\""] {
            let required = refused.trim_matches('"').to_owned();
            let expected = ParseError::ReaderTooOld { required };
            assert_eq!(parse_str(&doc(refused)).unwrap_err(), expected);
            assert_eq!(parse_value(serde_json::from_str(&doc(refused)).unwrap()).unwrap_err(), expected);
        }
        let message = parse_str(&doc("\"9.0.0\"")).unwrap_err().to_string();
        assert!(message.starts_with("This document requires a reader of cks-core >= 9.0.0"), "{message}");
        // An unsupported `version` is reported first.
        let both = r#"{"objects": [], "version": "2.0", "_cks_min_reader_version": "9.0.0"}"#;
        assert_eq!(parse_str(both).unwrap_err(), ParseError::UnsupportedVersion("'2.0'".into()));
    }

    mod properties {
        use super::*;
        use crate::structure::ChangeSet;
        use crate::testing::arb_structure;
        use proptest::prelude::*;

        /// A client document as `serde_json` writes it: the bytes the writer must match.
        struct Document<'a> {
            structure: &'a KnowledgeStructure,
            serialized_at: &'a str,
        }

        impl Serialize for Document<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut root = serializer.serialize_map(Some(5))?;
                root.serialize_entry("_cks_format_version", CKS_FORMAT_VERSION)?;
                root.serialize_entry(
                    "_cks_metadata",
                    &serde_json::json!({"cks_core_version": READER_VERSION, "serialized_at": self.serialized_at}),
                )?;
                root.serialize_entry(MIN_READER_KEY, MIN_READER_VERSION)?;
                root.serialize_entry("objects", &Objects(self.structure))?;
                root.serialize_entry("version", FORMAT_VERSION)?;
                root.end()
            }
        }

        /// Texts dense in what escaping changes: quotes, backslashes, control bytes, non-ASCII.
        fn arb_text() -> impl Strategy<Value = String> {
            prop_oneof![any::<String>(), "[\\x00-\\x1f\"\\\\a-z é/\\x7f€]{0,12}"]
        }

        fn arb_rich_structure() -> impl Strategy<Value = KnowledgeStructure> {
            let object =
                (arb_text(), arb_text(), arb_text(), prop::collection::btree_map(arb_text(), arb_json(), 0..4));
            prop::collection::vec(object, 0..6).prop_filter_map("a valid structure", |objects| {
                let objects = objects.into_iter().enumerate().map(|(index, (id, name, r#type, structure))| {
                    KnowledgeObject::new(
                        Identity::new(format!("{index}{id}"), r#type, name),
                        structure.into_iter().collect::<Map<String, Value>>(),
                    )
                });
                KnowledgeStructure::from_objects(objects.collect::<Vec<_>>()).ok()
            })
        }

        fn pretty(value: &impl Serialize) -> String {
            let mut out = Vec::new();
            let mut ser =
                serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b"  "));
            value.serialize(&mut ser).unwrap();
            String::from_utf8(out).unwrap()
        }

        #[test]
        fn a_document_written_by_two_threads_is_the_one_serde_json_writes() {
            // An odd count, so the halves differ, and both forms.
            let structure = crate::sample::random_graph(TWO_WRITERS_FROM / 2 + 1, TWO_WRITERS_FROM / 2, 7);
            assert!(structure.len() >= TWO_WRITERS_FROM && structure.len() % 2 == 1);
            let document = Document { structure: &structure, serialized_at: "now" };
            assert_eq!(to_document_string(&structure, "now"), pretty(&document));
            assert_eq!(to_compact_document_string(&structure, "now"), serde_json::to_string(&document).unwrap());
        }

        proptest! {
            #[test]
            fn the_writer_writes_what_serde_json_writes(structure in arb_rich_structure(), stamp in arb_text()) {
                let document = Document { structure: &structure, serialized_at: &stamp };
                prop_assert_eq!(to_canonical_string(&structure), pretty(&Canonical(&structure)));
                prop_assert_eq!(to_compact_string(&structure), serde_json::to_string(&Canonical(&structure)).unwrap());
                prop_assert_eq!(to_document_string(&structure, &stamp), pretty(&document));
                prop_assert_eq!(to_compact_document_string(&structure, &stamp), serde_json::to_string(&document).unwrap());
            }
        }

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                arb_text().prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    proptest::collection::btree_map(arb_text(), inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            /// parse(serialize(s)) == s, for the pretty and the compact form, and hashes survive.
            #[test]
            fn parse_inverts_serialize(base in arb_structure(), extras in proptest::collection::vec(arb_json(), 0..8)) {
                let mut s = base;
                let ids: Vec<String> = s.ids().map(str::to_owned).collect();
                let mut log = ChangeSet::default();
                for (id, extra) in ids.iter().zip(extras) {
                    let mut object = KnowledgeObject::clone(s.get(id).unwrap());
                    object.structure.insert("extra", extra);
                    s.put(object, &mut log).unwrap();
                }
                let pretty = parse_str(&to_canonical_string(&s)).unwrap();
                prop_assert_eq!(&pretty, &s);
                let compact = parse_str(&to_compact_string(&s)).unwrap();
                prop_assert_eq!(&compact, &s);
                prop_assert_eq!(compact.root_hash(), s.root_hash());
            }

            /// The one-pass reader agrees with decoding the whole text first, on good and bad
            /// documents alike (the first error of each kind wins in the same order).
            #[test]
            fn one_pass_equals_decode_then_parse(text in arb_document()) {
                let decoded = serde_json::from_str::<Value>(&text)
                    .map_err(|e| ParseError::InvalidJson(e.to_string()))
                    .and_then(parse_value);
                for threads in TWO_THREADS {
                    prop_assert_eq!(parse_text(&text, threads), decoded.clone(), "{:?} {}", threads, text);
                }
                prop_assert_eq!(parse_str(&text), decoded, "{}", text);
            }

            /// Read in pieces of any size, a document decodes as from its whole text (a syntax
            /// error is worded differently).
            #[test]
            fn read_in_pieces_equals_parse_str(text in arb_document(), piece in 1..48usize) {
                // In the compact form's start, so the piecewise reader reads it record by record.
                let text = match text.strip_prefix(r#"{"objects": ["#) {
                    Some(rest) => format!(r#"{{"objects":[{rest}"#),
                    None => text,
                };
                let whole = parse_str(&text);
                let read = pieces::parse(&mut text.as_bytes(), piece);
                if !matches!((&read, &whole), (Err(ParseError::InvalidJson(_)), Err(ParseError::InvalidJson(_)))) {
                    prop_assert_eq!(read, whole, "{}", text);
                }
            }
        }

        /// Documents near the format: object records that are good or broken in every way the
        /// parser reports, versions good and bad, extra and repeated keys, other JSON roots, and
        /// truncated or trailing text.
        fn arb_document() -> impl Strategy<Value = String> {
            let id = prop_oneof![Just("a"), Just("b"), Just("c")];
            let record = prop_oneof![
                4 => (id.clone(), any::<bool>()).prop_map(|(id, relation)| if relation {
                    format!(r#"{{"identity": {{"id": "{id}", "type": "R", "name": "r"}}, "structure": {{"participants": ["a", "b"], "relation_type": "x"}}}}"#)
                } else {
                    format!(r#"{{"identity": {{"id": "{id}", "type": "T", "name": "n"}}, "structure": {{"k": [1, 2.5, null]}}}}"#)
                }),
                1 => Just("1".to_owned()),
                1 => Just(r#"{"identity": {"id": "z", "type": "T", "name": "n"}, "extra": 1}"#.to_owned()),
                1 => Just(r#"{"identity": {"id": 1, "type": "T", "name": "n"}}"#.to_owned()),
                1 => Just(r#"{"identity": {"id": "y", "type": "R", "name": "r"}, "structure": {"participants": ["a"], "relation_type": "x"}}"#.to_owned()),
                // Near misses of the shape decoded without a JSON value tree (`streaming::Record`).
                1 => prop_oneof![
                    Just(r#"{"identity": {"id": "d", "type": "T", "name": "n", "extra": "e"}}"#),
                    Just(r#"{"identity": {"id": "d", "type": "T"}, "structure": {}}"#),
                    Just(r#"{"identity": {"id": "d", "type": "T", "type": "U", "name": "n"}}"#),
                    Just(r#"{"identity": {"id": "d", "type": "T", "id": 5, "name": "n"}}"#),
                    Just(r#"{"identity": {"id": "d", "type": "T", "name": "n"}, "structure": null}"#),
                    Just(r#"{"identity": {"id": "d", "type": "T", "name": "n"}, "structure": [{"a": 1}]}"#),
                    Just(r#"{"identity": [1, {"id": "d"}], "structure": {}}"#),
                    Just(r#"{"structure": {"k": 1}}"#),
                    Just(r#"{"identity": 7, "identity": {"id": "d", "type": "T", "name": "n"}}"#),
                    Just(r#"{"identity": {"id": "d", "type": "T", "name": "n"}, "structure": 3, "structure": {"k": 1, "k": 2}}"#),
                    Just(r#"{"structure": {"relation_type": "x", "participants": ["a", "b"]}, "identity": {"name": "r", "type": "R", "id": "e"}}"#),
                ]
                .prop_map(str::to_owned),
                1 => arb_json().prop_map(|v| v.to_string()),
            ];
            let objects = prop_oneof![
                6 => proptest::collection::vec(record, 0..5).prop_map(|r| format!("[{}]", r.join(", "))),
                1 => arb_json().prop_map(|v| v.to_string()),
            ];
            let version = prop_oneof![Just(r#""1.0""#), Just(r#""2.0""#), Just("null"), Just("1.0"), Just("{}")];
            let entry = prop_oneof![
                3 => objects.prop_map(|o| format!(r#""objects": {o}"#)),
                1 => version.prop_map(|v| format!(r#""version": {v}"#)),
                1 => arb_json().prop_map(|v| format!(r#""_cks_metadata": {v}"#)),
            ];
            let root = prop_oneof![
                8 => proptest::collection::vec(entry, 0..4).prop_map(|e| format!("{{{}}}", e.join(", "))),
                1 => arb_json().prop_map(|v| v.to_string()),
            ];
            (root, 0..4usize, 0..40usize).prop_map(|(text, damage, at)| match damage {
                0 => text[..text.char_indices().map(|(i, _)| i).nth(at).unwrap_or(text.len())].to_owned(),
                1 => format!("{text} x"),
                _ => text,
            })
        }
    }
}
