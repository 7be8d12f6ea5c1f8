//! From an extraction to one batch of operations on a session, and the report of what it does.
//! Deterministic: the same graph and extraction give the same operations.
//!
//! - The text becomes an `Episode` object (its text, source, observed time, content hash).
//! - Each entity is resolved by the matcher (`cks_core::matching`): its best `same` candidate is
//!   the object it is (its new attributes and names merged into it); else it is created, and
//!   every `review` candidate is left to a person as a `duplicate_candidate` pair.
//! - Each fact is a relation of type `predicate` (identity type `Fact`) from its subject to its
//!   object. One that is already current is confirmed, not repeated. A fact is single-valued when
//!   the model says so or a `FunctionalRelationRule` names its type: then every current relation
//!   of that type from the subject to another object is ended, not deleted: it gets `valid_until`
//!   (the episode's time) and `ended_by` (the new fact), and the new fact lists it in
//!   `supersedes`. A relation is current while it has no `ended_by`.
//! - Every object and fact the episode created, changed, confirmed or ended is linked to it by a
//!   `learned_from` relation (object first) whose `role` says which, and, for a change, the
//!   values it replaced (`previous`): what `forget_episode` needs to undo it.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::{Map, Value, json};

use cks_core::matching::{self, Decision, Profile};
use cks_core::ops::{Operation, PatchMode};
use cks_core::{Identity, KnowledgeStructure, Structure};

use super::extraction::{Dropped, Extraction};

/// The identity type of an episode.
pub const EPISODE: &str = "Episode";
/// The identity type of a fact.
pub const FACT: &str = "Fact";
/// The relation type that links what an episode said to it.
pub const LEARNED_FROM: &str = "learned_from";
/// The key of a relation that was ended: the fact that ended it.
pub use cks_core::validate::ENDED_BY;

/// The episode a text becomes.
#[derive(Debug, Clone)]
pub struct Episode {
    pub id: String,
    pub name: String,
    pub text: String,
    pub source: Option<String>,
    /// RFC 3339.
    pub observed_at: String,
    /// SHA-256 of the text, hex.
    pub content_hash: String,
    /// A long text is remembered part by part, one commit each: this part and how many there are
    /// (the episode records `parts` and `parts_done` until the last is in).
    pub part: (usize, usize),
}

/// How far an episode already in a graph got.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    pub id: String,
    /// Parts committed; all of them when the episode is complete.
    pub parts_done: usize,
    pub complete: bool,
}

/// An object as a report names it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Brief {
    pub id: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub name: String,
}

/// An entity resolved to an object already in the graph.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Matched {
    pub id: String,
    pub name: String,
    /// The name the text used.
    pub extracted: String,
    /// Why: the matcher's reasons.
    pub reasons: Vec<&'static str>,
}

/// An object whose fields the episode changed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Updated {
    pub id: String,
    pub fields: Vec<String>,
}

/// A fact ended by a new one.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Superseded {
    pub id: String,
    pub by: String,
}

/// A new object that may be one already there: left to a person.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Review {
    pub id: String,
    pub candidates: Vec<String>,
}

/// What a text did to the graph.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Report {
    pub created: Vec<Brief>,
    pub matched: Vec<Matched>,
    pub updated: Vec<Updated>,
    pub facts_added: Vec<Brief>,
    pub facts_confirmed: Vec<String>,
    pub superseded: Vec<Superseded>,
    pub review: Vec<Review>,
    pub dropped: Vec<DroppedItem>,
}

impl Report {
    /// Adds what a later part of the same text did.
    pub fn extend(&mut self, other: Report) {
        self.created.extend(other.created);
        self.matched.extend(other.matched);
        self.updated.extend(other.updated);
        self.facts_added.extend(other.facts_added);
        self.facts_confirmed.extend(other.facts_confirmed);
        self.superseded.extend(other.superseded);
        self.review.extend(other.review);
        self.dropped.extend(other.dropped);
    }
}

/// Something of the answer not stored, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DroppedItem {
    pub what: String,
    pub why: String,
}

impl From<Dropped> for DroppedItem {
    fn from(d: Dropped) -> Self {
        DroppedItem { what: d.what, why: d.why }
    }
}

/// The operations and their report.
#[derive(Debug)]
pub struct Plan {
    pub operations: Vec<Operation>,
    pub report: Report,
}

/// Plans `extraction` of `episode` into `structure`.
pub fn plan(structure: &KnowledgeStructure, episode: &Episode, extraction: &Extraction) -> Plan {
    Planner::new(structure, episode).run(extraction)
}

/// An object linked to the episode: its id, its role, and the values the episode replaced.
type Link = (String, &'static str, Option<Map<String, Value>>);

struct Planner<'a> {
    structure: &'a KnowledgeStructure,
    episode: &'a Episode,
    operations: Vec<Operation>,
    report: Report,
    /// Ids given out in this plan.
    taken: HashSet<String>,
    /// A folded name (or alias) of the extraction → the object it became.
    resolved: HashMap<String, String>,
    /// Objects linked to the episode.
    links: Vec<Link>,
}

impl<'a> Planner<'a> {
    fn new(structure: &'a KnowledgeStructure, episode: &'a Episode) -> Self {
        Planner {
            structure,
            episode,
            operations: Vec::new(),
            report: Report::default(),
            taken: HashSet::new(),
            resolved: HashMap::new(),
            links: Vec::new(),
        }
    }

    fn run(mut self, extraction: &Extraction) -> Plan {
        let episode = self.episode;
        let (part, parts) = episode.part;
        if self.structure.contains(&episode.id) {
            let mut fields = Structure::new();
            fields.insert("parts_done", json!(part + 1));
            self.operations.push(Operation::UpdateObject {
                object_id: episode.id.clone(),
                structure_patch: fields,
                mode: PatchMode::Merge,
            });
        } else {
            let mut fields = Structure::new();
            fields.insert("text", json!(episode.text));
            if let Some(source) = &episode.source {
                fields.insert("source", json!(source));
            }
            fields.insert("observed_at", json!(episode.observed_at));
            fields.insert("content_hash", json!(episode.content_hash));
            if parts > 1 {
                fields.insert("parts", json!(parts));
                fields.insert("parts_done", json!(part + 1));
            }
            self.operations.push(Operation::AddObject {
                identity: Identity::new(episode.id.as_str(), EPISODE, episode.name.as_str()),
                structure: fields,
            });
        }
        self.taken.insert(episode.id.clone());
        for entity in &extraction.entities {
            self.entity(entity);
        }
        let mut seen: HashSet<(String, String, String)> = HashSet::new();
        for fact in &extraction.facts {
            let subject = self.resolved[&matching::fold(&fact.subject)].clone();
            let object = self.resolved[&matching::fold(&fact.object)].clone();
            if seen.insert((subject.clone(), fact.predicate.clone(), object.clone())) {
                self.fact(fact, subject, object);
            }
        }
        self.link();
        Plan { operations: self.operations, report: self.report }
    }

    /// A fresh id from `name`: a slug, with a number after it when taken.
    fn id_for(&mut self, name: &str) -> String {
        let mut slug: String = matching::fold(name)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .split('-')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        slug.truncate(48);
        let slug =
            if slug.trim_matches('-').is_empty() { "entity".to_owned() } else { slug.trim_matches('-').to_owned() };
        let mut id = slug.clone();
        let mut n = 2;
        while self.structure.contains(&id) || self.taken.contains(&id) {
            id = format!("{slug}-{n}");
            n += 1;
        }
        self.taken.insert(id.clone());
        id
    }

    fn entity(&mut self, entity: &super::extraction::Entity) {
        let names: Vec<String> = std::iter::once(&entity.name)
            .chain(&entity.aliases)
            .map(|n| matching::fold(n))
            .filter(|n| !n.is_empty())
            .collect();
        // Named twice in one answer: the first is the one.
        if let Some(id) = names.iter().find_map(|n| self.resolved.get(n)).cloned() {
            for name in names {
                self.resolved.entry(name).or_insert_with(|| id.clone());
            }
            return;
        }
        let profile = Profile::named(&entity.ty, &entity.name, &entity.aliases);
        let candidates = matching::candidates(self.structure, &profile, None, None);
        let id = match candidates.first().filter(|c| c.decision == Decision::Same) {
            Some(best) => {
                let object = best.object;
                self.report.matched.push(Matched {
                    id: object.id().to_owned(),
                    name: object.identity.name.to_string(),
                    extracted: entity.name.clone(),
                    reasons: best.evidence.reasons(),
                });
                self.merge_into(object, entity);
                object.id().to_owned()
            }
            None => {
                let id = self.id_for(&entity.name);
                let mut fields = Structure::new();
                for (key, value) in &entity.attributes {
                    fields.insert(key, value.clone());
                }
                let aliases: Vec<&String> =
                    entity.aliases.iter().filter(|a| matching::fold(a) != matching::fold(&entity.name)).collect();
                if !aliases.is_empty() {
                    fields.insert(matching::ALIASES, json!(aliases));
                }
                self.operations.push(Operation::AddObject {
                    identity: Identity::new(id.as_str(), entity.ty.as_str(), entity.name.as_str()),
                    structure: fields,
                });
                self.report.created.push(Brief { id: id.clone(), ty: entity.ty.clone(), name: entity.name.clone() });
                let review: Vec<String> = candidates
                    .iter()
                    .filter(|c| c.decision != Decision::Different)
                    .map(|c| c.object.id().to_owned())
                    .collect();
                if !review.is_empty() {
                    self.report.review.push(Review { id: id.clone(), candidates: review });
                }
                self.links.push((id.clone(), "created", None));
                id
            }
        };
        for name in names {
            self.resolved.entry(name).or_insert_with(|| id.clone());
        }
    }

    /// New attributes and names of an entity the graph has: changed fields are patched, the old
    /// values kept in the link.
    fn merge_into(&mut self, object: &cks_core::KnowledgeObject, entity: &super::extraction::Entity) {
        let mut patch = Structure::new();
        let mut previous = Map::new();
        for (key, value) in &entity.attributes {
            let old = object.structure.get(key);
            if old != Some(value) {
                patch.insert(key, value.clone());
                previous.insert(key.clone(), old.cloned().unwrap_or(Value::Null));
            }
        }
        let known = Profile::of(object);
        let known: HashSet<&str> = known.folded_names().collect();
        let mut aliases = matching::aliases(object);
        let before = aliases.len();
        for name in std::iter::once(&entity.name).chain(&entity.aliases) {
            let folded = matching::fold(name);
            if !folded.is_empty()
                && !known.contains(folded.as_str())
                && !aliases.iter().any(|a| matching::fold(a) == folded)
            {
                aliases.push(name.clone());
            }
        }
        if aliases.len() > before {
            previous.insert(
                matching::ALIASES.into(),
                object.structure.get(matching::ALIASES).cloned().unwrap_or(Value::Null),
            );
            patch.insert(matching::ALIASES, json!(aliases));
        }
        let id = object.id().to_owned();
        if patch.is_empty() {
            self.links.push((id, "mentioned", None));
            return;
        }
        self.report.updated.push(Updated { id: id.clone(), fields: previous.keys().cloned().collect() });
        self.operations.push(Operation::UpdateObject {
            object_id: id.clone(),
            structure_patch: patch,
            mode: PatchMode::Merge,
        });
        self.links.push((id, "updated", Some(previous)));
    }

    fn fact(&mut self, fact: &super::extraction::Fact, subject: String, object: String) {
        let current = |relation: &cks_core::KnowledgeObject| !cks_core::validate::ended(relation);
        let from_subject: Vec<&std::sync::Arc<cks_core::KnowledgeObject>> = self
            .structure
            .relations_of(&subject)
            .iter()
            .filter(|r| {
                r.relation().is_some_and(|v| {
                    v.relation_type == fact.predicate && v.participants.first() == Some(&subject.as_str())
                })
            })
            .filter(|r| current(r))
            .collect();
        if let Some(same) =
            from_subject.iter().find(|r| r.relation().is_some_and(|v| v.participants[1..] == [object.as_str()]))
        {
            self.report.facts_confirmed.push(same.id().to_owned());
            self.links.push((same.id().to_owned(), "confirmed", None));
            return;
        }
        let single = fact.single_valued || functional(self.structure, &fact.predicate);
        let statement = fact.statement.clone().filter(|s| !s.trim().is_empty());
        let name = statement.clone().unwrap_or_else(|| format!("{subject} {} {object}", fact.predicate));
        let id = self.id_for(&format!("{subject} {} {object}", fact.predicate));
        let mut fields = Structure::new();
        if let Some(statement) = &statement {
            fields.insert("statement", json!(statement));
        }
        if let Some(from) = fact.valid_from.as_ref().filter(|v| !v.trim().is_empty()) {
            fields.insert("valid_from", json!(from));
        }
        fields.insert("observed_at", json!(self.episode.observed_at));
        let mut ended = Vec::new();
        if single {
            for old in from_subject {
                let mut structure = old.structure.clone();
                let mut previous = Map::new();
                previous.insert("valid_until".into(), structure.get("valid_until").cloned().unwrap_or(Value::Null));
                structure.insert("valid_until", json!(self.episode.observed_at));
                structure.insert(ENDED_BY, json!(id));
                let view = old.relation().expect("listed as a relation");
                let participants = view.participants.iter().map(|p| (*p).to_owned()).collect();
                let relation_type = view.relation_type.to_owned();
                structure.remove(cks_core::object::PARTICIPANTS);
                structure.remove(cks_core::object::RELATION_TYPE);
                self.operations.push(Operation::RemoveRelation { relation_id: old.id().to_owned() });
                self.operations.push(Operation::AddRelation {
                    identity: old.identity.clone(),
                    participants,
                    relation_type,
                    structure,
                });
                self.report.superseded.push(Superseded { id: old.id().to_owned(), by: id.clone() });
                self.links.push((old.id().to_owned(), "ended", Some(previous)));
                ended.push(old.id().to_owned());
            }
        }
        if !ended.is_empty() {
            fields.insert("supersedes", json!(ended));
        }
        self.operations.push(Operation::AddRelation {
            identity: Identity::new(id.as_str(), FACT, name.as_str()),
            participants: vec![subject, object],
            relation_type: fact.predicate.clone(),
            structure: fields,
        });
        self.report.facts_added.push(Brief { id: id.clone(), ty: FACT.into(), name });
        self.links.push((id, "created", None));
    }

    /// One `learned_from` relation per object the episode touched.
    fn link(&mut self) {
        let episode = self.episode.id.clone();
        let links = std::mem::take(&mut self.links);
        let mut n = 0;
        for (id, role, previous) in links {
            let mut fields = Structure::new();
            fields.insert("role", json!(role));
            if let Some(previous) = previous {
                fields.insert("previous", Value::Object(previous));
            }
            // Numbered on from the links of the episode's earlier parts.
            let link = loop {
                n += 1;
                let link = format!("{episode}-{n}");
                if !self.structure.contains(&link) && self.taken.insert(link.clone()) {
                    break link;
                }
            };
            self.operations.push(Operation::AddRelation {
                identity: Identity::new(link.as_str(), "Relation", LEARNED_FROM),
                participants: vec![id, episode.clone()],
                relation_type: LEARNED_FROM.into(),
                structure: fields,
            });
        }
    }
}

/// Whether a `FunctionalRelationRule` makes `relation_type` single-valued.
fn functional(structure: &KnowledgeStructure, relation_type: &str) -> bool {
    structure
        .objects_of_type("FunctionalRelationRule")
        .iter()
        .any(|rule| rule.structure.get("relation_type").and_then(Value::as_str) == Some(relation_type))
}

/// The episode of `structure` with this content hash (a text remembered before), and how far it got.
pub fn episode_with_hash(structure: &KnowledgeStructure, hash: &str) -> Option<Known> {
    let episode = structure
        .objects_of_type(EPISODE)
        .into_iter()
        .find(|e| e.structure.get("content_hash").and_then(Value::as_str) == Some(hash))?;
    let count = |key: &str| episode.structure.get(key).and_then(Value::as_u64).map(|n| n as usize);
    let (parts, done) = (count("parts"), count("parts_done"));
    Some(Known {
        id: episode.id().to_owned(),
        parts_done: done.unwrap_or(1),
        complete: match (parts, done) {
            (Some(parts), Some(done)) => done >= parts,
            _ => true,
        },
    })
}

/// What an episode's links say: by role, the ids linked.
pub fn episode_links(structure: &KnowledgeStructure, episode: &str) -> BTreeMap<String, Vec<String>> {
    let mut roles: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for relation in structure.relations_of(episode) {
        let Some(view) = relation.relation() else { continue };
        if view.relation_type != LEARNED_FROM || view.participants.get(1) != Some(&episode) {
            continue;
        }
        let role = relation.structure.get("role").and_then(Value::as_str).unwrap_or("mentioned");
        roles.entry(role.to_owned()).or_default().push(view.participants[0].to_owned());
    }
    roles
}

#[cfg(test)]
mod tests;
