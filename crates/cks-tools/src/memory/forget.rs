//! Undoing an episode: one batch of operations that takes back what it said, read from its
//! `learned_from` links (see `plan.rs`), on the graph as it is now.
//!
//! - Objects and facts it `created` are removed, unless another episode links them too (then
//!   they stay: that episode said them as well, and its link becomes the one that created them,
//!   so forgetting that episode too removes them).
//! - Fields it `updated` get back the values it replaced (`previous`; a field it added is removed).
//! - Facts it `ended` are current again when the fact that ended them goes: `valid_until` as it
//!   was, no `ended_by`.
//! - The episode goes, and its links with it. `mentioned` and `confirmed` objects stay as they are.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use cks_core::ops::{Operation, PatchMode};
use cks_core::{KnowledgeStructure, Structure};

use super::plan::{ENDED_BY, EPISODE, LEARNED_FROM};

/// What forgetting does.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Forgotten {
    /// Objects and facts removed (the episode and its links not counted).
    pub removed: Vec<String>,
    /// Objects whose fields were given back, and facts current again.
    pub restored: Vec<String>,
    /// Objects and facts it created that another episode also links: kept.
    pub kept: Vec<String>,
}

/// Why an episode cannot be forgotten.
#[derive(Debug, PartialEq)]
pub enum NotAnEpisode {
    Missing,
    OtherType(String),
}

/// The operations that forget `episode`, and what they do.
pub fn forget(structure: &KnowledgeStructure, episode: &str) -> Result<(Vec<Operation>, Forgotten), NotAnEpisode> {
    let object = structure.get(episode).ok_or(NotAnEpisode::Missing)?;
    if object.identity.r#type != EPISODE {
        return Err(NotAnEpisode::OtherType(object.identity.r#type.to_string()));
    }
    let mut links = Vec::new();
    for relation in structure.relations_of(episode) {
        let Some(view) = relation.relation() else { continue };
        if view.relation_type == LEARNED_FROM && view.participants.get(1) == Some(&episode) {
            let role = relation.structure.get("role").and_then(Value::as_str).unwrap_or_default().to_owned();
            links.push((view.participants[0].to_owned(), role, relation.structure.get("previous").cloned()));
        }
    }
    // Another episode's link to the object, the oldest.
    let shared = |id: &str| {
        structure.relations_of(id).iter().find(|r| {
            r.relation().is_some_and(|v| {
                v.relation_type == LEARNED_FROM
                    && v.participants.first() == Some(&id)
                    && v.participants.get(1) != Some(&episode)
            })
        })
    };
    let mut forgotten = Forgotten::default();
    // The episode first: its links go with it, so nothing it removes later is still named by one.
    let mut operations = vec![Operation::RemoveObject { object_id: episode.to_owned() }];
    let mut removed: HashSet<String> = HashSet::new();
    for (id, _, _) in links.iter().filter(|(_, role, _)| role == "created") {
        if !structure.contains(id) {
            continue;
        }
        if let Some(link) = shared(id) {
            // That episode now created it.
            let mut fields = link.structure.clone();
            let view = link.relation().expect("a learned_from relation");
            let participants = view.participants.iter().map(|p| (*p).to_owned()).collect();
            for key in [cks_core::object::PARTICIPANTS, cks_core::object::RELATION_TYPE, "previous"] {
                fields.remove(key);
            }
            fields.insert("role", Value::String("created".into()));
            operations.push(Operation::RemoveRelation { relation_id: link.id().to_owned() });
            operations.push(Operation::AddRelation {
                identity: link.identity.clone(),
                participants,
                relation_type: LEARNED_FROM.into(),
                structure: fields,
            });
            forgotten.kept.push(id.clone());
        } else {
            removed.insert(id.clone());
        }
    }
    for (id, role, previous) in &links {
        let Some(object) = structure.get(id) else { continue };
        let previous = previous.as_ref().and_then(Value::as_object);
        match role.as_str() {
            "updated" if !removed.contains(id) => {
                let Some(previous) = previous else { continue };
                let mut patch = Structure::new();
                for (key, value) in previous {
                    patch.insert(key, value.clone());
                }
                operations.push(Operation::UpdateObject {
                    object_id: id.clone(),
                    structure_patch: patch,
                    mode: PatchMode::Merge,
                });
                forgotten.restored.push(id.clone());
            }
            "ended" => {
                let ended_by = object.structure.get(ENDED_BY).and_then(Value::as_str);
                if !ended_by.is_some_and(|by| removed.contains(by)) {
                    continue;
                }
                let Some(view) = object.relation() else { continue };
                let mut fields = object.structure.clone();
                fields.remove(ENDED_BY);
                fields.remove(cks_core::object::PARTICIPANTS);
                fields.remove(cks_core::object::RELATION_TYPE);
                match previous.and_then(|p| p.get("valid_until")).filter(|v| !v.is_null()) {
                    Some(until) => fields.insert("valid_until", until.clone()),
                    None => fields.remove("valid_until"),
                };
                operations.push(Operation::RemoveRelation { relation_id: id.clone() });
                operations.push(Operation::AddRelation {
                    identity: object.identity.clone(),
                    participants: view.participants.iter().map(|p| (*p).to_owned()).collect(),
                    relation_type: view.relation_type.to_owned(),
                    structure: fields,
                });
                forgotten.restored.push(id.clone());
            }
            _ => {}
        }
    }
    // Facts before the objects they link (removing an object takes its relations with it).
    let mut gone: Vec<&String> = removed.iter().collect();
    gone.sort_by_key(|id| (!structure.get(id).is_some_and(|o| o.is_relation()), structure.index_of(id)));
    for id in gone {
        operations.push(match structure.get(id).is_some_and(|o| o.is_relation()) {
            true => Operation::RemoveRelation { relation_id: id.clone() },
            false => Operation::RemoveObject { object_id: id.clone() },
        });
        forgotten.removed.push(id.clone());
    }
    Ok((operations, forgotten))
}
