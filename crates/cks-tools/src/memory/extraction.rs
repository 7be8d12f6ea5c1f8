//! What a model extracts from a text for `remember`: entities (a name, a type, other names, facts
//! about the entity itself as attributes) and facts between entities (subject, predicate, object).
//!
//! The model is asked for exactly this form: the schema is derived from these types and sent as
//! the provider's structured output. Servers that ignore it still answer text; the first JSON
//! object in it is read. An answer that does not parse or breaks a rule below is sent back once
//! with the reason; a second such answer fails the call with that reason (nothing is stored).
//!
//! Rules the answer must keep: every name and type non-empty; a fact's subject and object name
//! entities of the answer; attributes are strings, numbers or booleans. A fact naming the same
//! entity on both sides is dropped and reported, not fatal.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use cks_core::matching::fold;

/// An entity the text mentions.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct Entity {
    /// The fullest name the text gives it.
    pub name: String,
    /// What kind of thing it is, one capitalised word or two: Person, Organization, City, Project.
    #[serde(rename = "type")]
    pub ty: String,
    /// Other names the text uses for it.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// What the text says of it alone, as short values by snake_case key: {"role": "engineer"}.
    #[serde(default)]
    pub attributes: BTreeMap<String, Value>,
}

/// A fact that links two entities.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct Fact {
    /// The name of the entity it is about (as in `entities`).
    pub subject: String,
    /// A snake_case verb phrase: works_at, lives_in, leads, knows.
    pub predicate: String,
    /// The name of the other entity (as in `entities`).
    pub object: String,
    /// The fact as one short sentence of the text's.
    #[serde(default)]
    pub statement: Option<String>,
    /// True when the subject can have only one such object at a time (lives_in, works_at, leads
    /// one team): a new one replaces the old.
    #[serde(default)]
    pub single_valued: bool,
    /// When it became true, if the text says (a date or a month, as written: 2026-05).
    #[serde(default)]
    pub valid_from: Option<String>,
}

/// The whole answer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct Extraction {
    pub entities: Vec<Entity>,
    #[serde(default)]
    pub facts: Vec<Fact>,
}

/// The schema the model is asked to follow.
pub fn schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(Extraction)).unwrap_or_default();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

pub(crate) const SYSTEM_PROMPT: &str = r#"You extract knowledge from a text for a knowledge graph.

Answer with one JSON object and nothing else:
{"entities": [{"name": "...", "type": "...", "aliases": ["..."], "attributes": {"key": "value"}}],
 "facts": [{"subject": "...", "predicate": "...", "object": "...", "statement": "...", "single_valued": true, "valid_from": "..."}]}

Rules:
- An entity is a person, organisation, place, project, thing or idea the text names. Give its fullest name, its type as one capitalised word (Person, Organization, City, Team, Project), and other names the text uses as aliases.
- Attributes are what the text says of one entity alone: short strings, numbers or booleans by snake_case key.
- A fact links two entities of your list by their names: predicate is a snake_case verb (works_at, lives_in, leads, moved_to, knows).
- single_valued is true when the subject has only one such object at a time (lives_in, works_at, leads, married_to); a new one replaces the old.
- valid_from only when the text says when the fact began, as written.
- Only what the text says: no guesses, no facts from elsewhere.

Example: "Alice moved from Oslo to Bergen in May; she now leads the data team."
{"entities": [{"name": "Alice", "type": "Person"}, {"name": "Oslo", "type": "City"}, {"name": "Bergen", "type": "City"}, {"name": "data team", "type": "Team"}],
 "facts": [{"subject": "Alice", "predicate": "lives_in", "object": "Bergen", "statement": "Alice moved from Oslo to Bergen in May.", "single_valued": true, "valid_from": "May"},
           {"subject": "Alice", "predicate": "leads", "object": "data team", "statement": "Alice now leads the data team.", "single_valued": true}]}"#;

/// A fact dropped from an answer, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
    pub what: String,
    pub why: String,
}

impl Extraction {
    /// Reads a model's JSON answer and checks the rules; the reason when it breaks one. Facts that
    /// link an entity to itself are dropped (returned), as are attributes that are not scalars.
    pub fn read(value: Value) -> Result<(Extraction, Vec<Dropped>), String> {
        let mut extraction: Extraction =
            serde_json::from_value(value).map_err(|e| format!("the answer does not have the asked shape: {e}"))?;
        let mut dropped = Vec::new();
        for (i, entity) in extraction.entities.iter_mut().enumerate() {
            entity.name = entity.name.trim().to_owned();
            entity.ty = entity.ty.trim().to_owned();
            if fold(&entity.name).is_empty() {
                return Err(format!("entities[{i}] has no name"));
            }
            if fold(&entity.ty).is_empty() {
                return Err(format!("entity '{}' has no type", entity.name));
            }
            entity.attributes.retain(|key, value| {
                let scalar = matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_));
                if !scalar || key.trim().is_empty() {
                    dropped.push(Dropped {
                        what: format!("attribute '{key}' of '{}'", entity.name),
                        why: "an attribute must be a string, a number or a boolean under a key".into(),
                    });
                }
                scalar && !key.trim().is_empty()
            });
        }
        let known: Vec<String> = extraction
            .entities
            .iter()
            .flat_map(|e| std::iter::once(&e.name).chain(&e.aliases))
            .map(|n| fold(n))
            .collect();
        let mut kept = Vec::new();
        for (i, mut fact) in std::mem::take(&mut extraction.facts).into_iter().enumerate() {
            fact.predicate = predicate(&fact.predicate);
            if fact.predicate.is_empty() {
                return Err(format!("facts[{i}] has no predicate"));
            }
            for side in [&fact.subject, &fact.object] {
                if !known.contains(&fold(side)) {
                    return Err(format!("facts[{i}] names '{side}', which is not one of the entities"));
                }
            }
            if fold(&fact.subject) == fold(&fact.object) {
                dropped.push(Dropped {
                    what: format!("fact '{} {} {}'", fact.subject, fact.predicate, fact.object),
                    why: "a fact links two different entities".into(),
                });
                continue;
            }
            kept.push(fact);
        }
        extraction.facts = kept;
        Ok((extraction, dropped))
    }
}

/// A predicate as a relation type: lower case, words joined by `_`.
fn predicate(raw: &str) -> String {
    fold(raw).replace(' ', "_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_read_checked_and_tidied() {
        let (extraction, dropped) = Extraction::read(json!({
            "entities": [
                {"name": " Alice ", "type": "Person", "aliases": ["Ali"], "attributes": {"age": 34, "tags": ["x"]}},
                {"name": "Bergen", "type": "City"}
            ],
            "facts": [
                {"subject": "Ali", "predicate": "Lives In", "object": "bergen", "single_valued": true},
                {"subject": "Alice", "predicate": "is", "object": "Alice"}
            ]
        }))
        .unwrap();
        assert_eq!(extraction.entities[0].name, "Alice");
        assert_eq!(extraction.entities[0].attributes.keys().collect::<Vec<_>>(), ["age"]);
        assert_eq!(extraction.facts.len(), 1);
        assert_eq!(extraction.facts[0].predicate, "lives_in");
        assert_eq!(dropped.len(), 2, "{dropped:?}");

        let unknown = Extraction::read(json!({"entities": [{"name": "A", "type": "T"}],
            "facts": [{"subject": "A", "predicate": "p", "object": "B"}]}));
        assert_eq!(unknown.unwrap_err(), "facts[0] names 'B', which is not one of the entities");
        assert!(Extraction::read(json!({"entities": [{"name": "", "type": "T"}]})).unwrap_err().contains("no name"));
        assert!(Extraction::read(json!({"things": []})).unwrap_err().contains("asked shape"));
    }

    #[test]
    fn the_schema_asks_for_entities_and_facts() {
        let schema = schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["entities"]));
        assert!(schema.get("$schema").is_none());
        let text = schema.to_string();
        for key in ["single_valued", "aliases", "attributes", "predicate"] {
            assert!(text.contains(key), "{key}");
        }
    }
}
