//! The one-pass reader of [`parse_str`](super::parse_str): serde visitors over the document's root and its
//! `objects` array. Every value is read to its end, even after an error is known, so that a
//! syntax error anywhere still wins (as when the whole text is decoded first). Values that are
//! not kept are still decoded as `Value`s (one at a time) rather than skipped with `IgnoredAny`:
//! serde_json words some syntax errors differently when skipping.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use compact_str::CompactString;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::{
    Builder, Entry, Identity, KnowledgeObject, KnowledgeStructure, MIN_READER_KEY, ParseError, Structure,
    check_reader_version, check_version,
};

/// The root object: `None` when the document is not a JSON object.
pub(super) type Root = Option<RootObject>;

pub(super) struct RootObject {
    /// `None`: no `objects` key. `Err(None)`: `objects` is not an array. `Err(Some(e))`: the
    /// version or an object is invalid.
    pub(super) objects: Option<Result<KnowledgeStructure, Option<ParseError>>>,
}

/// Where the records of a document are built into its structure.
#[derive(Clone, Copy, Debug)]
pub(super) enum Threads {
    /// On the reading thread: a small document is not worth a second one.
    One,
    /// On a second thread ([`build_beside`]); the reading one also checks and hashes the
    /// objects it decodes while at least `help_when_queued` batches wait for the building one.
    Two { help_when_queued: usize },
}

impl Threads {
    /// Building takes about as long as reading; the reading thread helps once two batches
    /// wait (decoding a 100k-object snapshot: median 161 → 152 ms).
    pub(super) const TWO: Threads = Threads::Two { help_when_queued: 2 };

    /// Builds the structure from the records `next` reads.
    pub(super) fn build<E>(
        self,
        next: impl FnMut() -> Result<Option<Record>, E>,
    ) -> Result<Result<KnowledgeStructure, Option<ParseError>>, E> {
        match self {
            Threads::One => build_here(next),
            Threads::Two { help_when_queued } => build_beside(next, help_when_queued),
        }
    }
}

pub(super) struct RootVisitor {
    pub(super) threads: Threads,
}

/// Implements the visits of every JSON value that is not the expected map or array: drain it,
/// and report "not the expected kind".
macro_rules! other_kinds {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

impl<'de> Visitor<'de> for RootVisitor {
    type Value = Root;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON document")
    }

    other_kinds!(None);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Root, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Root, A::Error> {
        let mut objects = None;
        let mut version = None;
        let mut min_reader = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                // A repeated key: the last one counts, as when decoding into a map.
                "objects" => objects = Some(map.next_value_seed(ObjectsSeed { threads: self.threads })?),
                "version" => version = Some(map.next_value::<Value>()?),
                MIN_READER_KEY => min_reader = Some(map.next_value::<Value>()?),
                _ => {
                    map.next_value::<Value>()?;
                }
            }
        }
        let root_check = check_version(version.as_ref()).and_then(|()| check_reader_version(min_reader.as_ref()));
        let objects = objects.map(|objects| match (objects, root_check) {
            (Err(None), _) => Err(None),
            (_, Err(root_error)) => Err(Some(root_error)),
            (objects, Ok(())) => objects,
        });
        Ok(Some(RootObject { objects }))
    }
}

/// The `objects` value: the structure, `Err(None)` when not an array, or the first object error.
struct ObjectsSeed {
    threads: Threads,
}

impl<'de> DeserializeSeed<'de> for ObjectsSeed {
    type Value = Result<KnowledgeStructure, Option<ParseError>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ObjectsSeed {
    type Value = Result<KnowledgeStructure, Option<ParseError>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the objects array")
    }

    other_kinds!(Err(None));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<String, Value>()?.is_some() {}
        Ok(Err(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if let Threads::Two { help_when_queued } = self.threads {
            return build_beside(|| seq.next_element::<Record>(), help_when_queued);
        }
        let mut builder = Builder::default();
        let mut failure = None;
        while failure.is_none() {
            failure = match seq.next_element::<Record>()? {
                None => break,
                Some(record) => builder.add_record(record).err(),
            };
        }
        while seq.next_element::<Value>()?.is_some() {}
        Ok(builder.finish(failure))
    }
}

/// Builds the structure from the records `next` reads, here: the first object error in
/// order, unless reading fails (every record is still read to the end).
fn build_here<E>(
    mut next: impl FnMut() -> Result<Option<Record>, E>,
) -> Result<Result<KnowledgeStructure, Option<ParseError>>, E> {
    let mut builder = Builder::default();
    let mut failure = None;
    while let Some(record) = next()? {
        if failure.is_none() {
            failure = builder.add_record(record).err();
        }
    }
    Ok(builder.finish(failure))
}

/// One element of `objects`. Decoded straight into an object when it has exactly the expected
/// shape (`identity` with the three strings and nothing else, `structure` an object or absent,
/// no other key): most documents are all such elements, and decoding them skips building a
/// `Value` tree per object. Anything else is kept as the JSON value it is — or, where only its
/// kind matters to the error, a stand-in of that kind — for [`super::parse_object`] to report
/// in the reference's words.
pub(super) enum Record {
    Decoded(KnowledgeObject),
    /// A decoded object already checked and hashed ([`super::prepare_decoded`]), or why not.
    Prepared(Result<Entry, ParseError>),
    Raw(Value),
}

/// Records in one hand-over between the reading and the building thread.
const BATCH: usize = 512;

/// Reads the records here and builds the structure on a second thread, a batch at a time, in
/// document order. The outcome is the one-thread reader's: the first object error in order,
/// unless the text has a syntax error anywhere (every record is still read to the end).
/// While `help_when_queued` batches or more wait, this thread also checks and hashes each
/// object it decodes (`Record::Prepared`), while the object is still in its cache.
fn build_beside<E>(
    mut next: impl FnMut() -> Result<Option<Record>, E>,
    help_when_queued: usize,
) -> Result<Result<KnowledgeStructure, Option<ParseError>>, E> {
    // Batches sent and not yet taken.
    let queued = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (send, batches) = std::sync::mpsc::sync_channel::<Vec<Record>>(4);
        let queued = &queued;
        let building = scope.spawn(move || {
            let mut builder = Builder::default();
            let mut failure = None;
            // After a failure the batches are still taken (and dropped), so reading never waits.
            for batch in batches {
                queued.fetch_sub(1, Ordering::Relaxed);
                for record in batch {
                    if failure.is_none() {
                        failure = builder.add_record(record).err();
                    }
                }
            }
            builder.finish(failure)
        });
        let mut batch = Vec::with_capacity(BATCH);
        // Records handed over so far: the index of the next one, less the batch's.
        let mut handed_over = 0;
        let read = loop {
            match next() {
                Ok(Some(Record::Decoded(object))) if queued.load(Ordering::Relaxed) >= help_when_queued => {
                    let index = handed_over + batch.len();
                    batch.push(Record::Prepared(super::prepare_decoded(index, object)));
                }
                Ok(Some(record)) => batch.push(record),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
            if batch.len() == BATCH {
                handed_over += BATCH;
                queued.fetch_add(1, Ordering::Relaxed);
                // The builder only stops taking batches when it panicked; `join` says so below.
                let _ = send.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
            }
        };
        if !batch.is_empty() {
            queued.fetch_add(1, Ordering::Relaxed);
            let _ = send.send(batch);
        }
        drop(send);
        let built = building.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        read.map(|()| built)
    })
}

/// Reads every element of a sequence that is only reported as "not an object".
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Value, A::Error> {
    while seq.next_element::<Value>()?.is_some() {}
    Ok(Value::Null)
}

/// Implements the visits of the JSON values whose only use is to be "not an object".
macro_rules! not_an_object {
    ($value:expr) => {
        other_kinds!($value);

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            drain_seq(seq).map(|_| $value)
        }
    };
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RecordVisitor)
    }
}

struct RecordVisitor;

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = Record;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object record")
    }

    not_an_object!(Record::Raw(Value::Null));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record, A::Error> {
        let mut identity = None;
        let mut structure = None;
        let mut others = Map::new();
        // Keys read inline: a record's two keys cost no allocation.
        while let Some(key) = map.next_key::<CompactString>()? {
            // A repeated key: the last one counts, as when decoding into a map.
            match key.as_str() {
                "identity" => identity = Some(map.next_value::<IdentityPart>()?),
                "structure" => structure = Some(map.next_value::<StructurePart>()?),
                _ => {
                    others.insert(key.into_string(), map.next_value::<Value>()?);
                }
            }
        }
        match (identity, structure) {
            (Some(IdentityPart::Decoded(identity)), None) if others.is_empty() => {
                Ok(Record::Decoded(KnowledgeObject::new(identity, Structure::new())))
            }
            (Some(IdentityPart::Decoded(identity)), Some(StructurePart(Some(structure)))) if others.is_empty() => {
                Ok(Record::Decoded(KnowledgeObject::new(identity, structure)))
            }
            (identity, structure) => Ok(Record::Raw(raw_record(others, identity, structure))),
        }
    }
}

/// The JSON value of a record that did not decode straight into an object.
fn raw_record(others: Map<String, Value>, identity: Option<IdentityPart>, structure: Option<StructurePart>) -> Value {
    let mut record = others;
    if let Some(identity) = identity {
        record.insert("identity".into(), identity.into_value());
    }
    if let Some(StructurePart(structure)) = structure {
        record.insert("structure".into(), structure.map_or(Value::Null, Value::from));
    }
    Value::Object(record)
}

/// An `identity` value: the identity when it is exactly the three strings.
enum IdentityPart {
    Decoded(Identity),
    Raw(Value),
}

impl IdentityPart {
    fn into_value(self) -> Value {
        match self {
            IdentityPart::Decoded(Identity { id, r#type, name }) => {
                serde_json::json!({"id": id.as_str(), "type": r#type.as_str(), "name": name.as_str()})
            }
            IdentityPart::Raw(value) => value,
        }
    }
}

impl<'de> Deserialize<'de> for IdentityPart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IdentityVisitor)
    }
}

struct IdentityVisitor;

impl<'de> Visitor<'de> for IdentityVisitor {
    type Value = IdentityPart;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an identity")
    }

    not_an_object!(IdentityPart::Raw(Value::Null));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IdentityPart, A::Error> {
        // Of a repeated key the last is kept, as for a structure.
        let mut fields: SmallVec<[(CompactString, IdentityField); 3]> = SmallVec::new();
        while let Some((key, value)) = map.next_entry::<CompactString, IdentityField>()? {
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some(field) => field.1 = value,
                None => fields.push((key, value)),
            }
        }
        let text = |name: &str| fields.iter().position(|(k, v)| k == name && matches!(v, IdentityField::Text(_)));
        if let (3, Some(id), Some(r#type), Some(name)) = (fields.len(), text("id"), text("type"), text("name")) {
            let mut take = |i: usize| match std::mem::replace(&mut fields[i].1, IdentityField::Other(Value::Null)) {
                IdentityField::Text(text) => text,
                IdentityField::Other(_) => unreachable!("checked to be text above"),
            };
            return Ok(IdentityPart::Decoded(Identity { id: take(id), r#type: take(r#type), name: take(name) }));
        }
        Ok(IdentityPart::Raw(Value::Object(
            fields.into_iter().map(|(key, value)| (key.into_string(), value.into_value())).collect(),
        )))
    }
}

/// One value of an identity: a string decoded straight into the identity's form (inline when
/// short, without a `String` first), or any other JSON value, kept for the error it causes.
enum IdentityField {
    Text(CompactString),
    Other(Value),
}

impl IdentityField {
    fn into_value(self) -> Value {
        match self {
            IdentityField::Text(text) => Value::String(text.into_string()),
            IdentityField::Other(value) => value,
        }
    }
}

impl<'de> Deserialize<'de> for IdentityField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IdentityFieldVisitor)
    }
}

struct IdentityFieldVisitor;

impl<'de> Visitor<'de> for IdentityFieldVisitor {
    type Value = IdentityField;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<IdentityField, E> {
        Ok(IdentityField::Text(text.into()))
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<IdentityField, E> {
        Ok(IdentityField::Other(value.into()))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<IdentityField, E> {
        Ok(IdentityField::Other(value.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<IdentityField, E> {
        Ok(IdentityField::Other(value.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<IdentityField, E> {
        Ok(IdentityField::Other(value.into()))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<IdentityField, E> {
        Ok(IdentityField::Other(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<IdentityField, A::Error> {
        Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(IdentityField::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<IdentityField, A::Error> {
        Value::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(IdentityField::Other)
    }
}

/// A `structure` value: the structure when it is an object, `None` for any other kind.
struct StructurePart(Option<Structure>);

impl<'de> Deserialize<'de> for StructurePart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StructureVisitor)
    }
}

struct StructureVisitor;

impl<'de> Visitor<'de> for StructureVisitor {
    type Value = StructurePart;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a structure")
    }

    not_an_object!(StructurePart(None));

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StructurePart, A::Error> {
        Structure::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(|s| StructurePart(Some(s)))
    }
}
