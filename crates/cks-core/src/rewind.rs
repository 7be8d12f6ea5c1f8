//! The older side of a comparison without rebuilding it: a structure as it was some versions ago,
//! seen through the current structure and the objects those versions changed (each as it was
//! before their first change).
//!
//! Comparing an old version with the current state then costs what the versions in between
//! changed, not what the graph holds: the diff and its summary read unchanged objects, and the
//! relations naming them, from the current structure.

use indexmap::IndexMap;
use std::collections::HashMap;
use std::sync::Arc;

use crate::hash::ContentHash;
use crate::object::KnowledgeObject;
use crate::structure::{Change, ChangeSet, Entry, KnowledgeStructure};

/// What a run of versions changed, as it was before them. Always paired with the structure those
/// versions led to (the "current" structure of [`Base::Rewound`]).
#[derive(Debug, Default)]
pub struct Rewind {
    /// Each changed id, in order of first change, with its entry before that change (`None`: it
    /// did not exist yet).
    before: IndexMap<String, Option<Entry>>,
    /// Participant id → ids of changed relations that named it before.
    named_before: HashMap<String, Vec<String>>,
}

impl Rewind {
    /// Records one change, oldest first: only an id's first change says what it was before.
    pub fn record(&mut self, id: &str, before: Option<Arc<KnowledgeObject>>) {
        if self.before.contains_key(id) {
            return;
        }
        let entry = before.map(Entry::from_shared);
        if let Some(relation) = entry.as_ref().and_then(|e| e.object.relation()) {
            let mut participants = relation.participants.clone();
            participants.sort_unstable();
            participants.dedup();
            for participant in participants {
                self.named_before.entry(participant.to_owned()).or_default().push(id.to_owned());
            }
        }
        self.before.insert(id.to_owned(), entry);
    }

    /// Records every change of a change set (made after those already recorded).
    pub fn record_change_set(&mut self, changes: &ChangeSet) {
        for change in &changes.changes {
            let before = match change {
                Change::Put { previous, .. } => previous.as_ref(),
                Change::Remove { previous, .. } => Some(previous),
            };
            self.record(change.id(), before.map(|e| e.object.clone()));
        }
    }

    /// How many ids the versions changed.
    pub fn len(&self) -> usize {
        self.before.len()
    }

    pub fn is_empty(&self) -> bool {
        self.before.is_empty()
    }

    /// The root hash of the rewound state, given the structure the versions led to: one
    /// subtraction and one addition per changed id.
    pub fn root_hash(&self, current: &KnowledgeStructure) -> ContentHash {
        let mut root = current.root_accumulator();
        for (id, before) in &self.before {
            if let Some(now) = current.entry(id) {
                root.remove(&now.hash);
            }
            if let Some(before) = before {
                root.insert(&before.hash);
            }
        }
        root.root()
    }

    /// Puts `current` (the structure the versions led to) back the way it was before them, every
    /// step logged in `log`: undoing the log returns to `current`. Costs one put or removal per
    /// changed id, whatever the graph holds; the order of objects the versions removed is not
    /// restored (they come last), nor is anything else the root hash does not see.
    pub fn restore(&self, current: &mut KnowledgeStructure, log: &mut ChangeSet) {
        for (id, before) in &self.before {
            match before {
                Some(entry) => current.put_entry(entry.clone(), log),
                None => {
                    current.remove(id, log);
                }
            }
        }
    }

    /// The changed ids with what they were before, in order of first change.
    pub(crate) fn changed(&self) -> impl Iterator<Item = (&str, Option<&Entry>)> + '_ {
        self.before.iter().map(|(id, entry)| (id.as_str(), entry.as_ref()))
    }
}

/// The older side of a comparison.
#[derive(Clone, Copy, Debug)]
pub enum Base<'a> {
    /// A whole structure.
    Whole(&'a KnowledgeStructure),
    /// The structure being compared with, rewound: valid only against that structure.
    Rewound(&'a Rewind),
}

/// A base read together with the structure it is compared with.
#[derive(Clone, Copy)]
pub(crate) struct BaseView<'a> {
    pub(crate) base: Base<'a>,
    pub(crate) target: &'a KnowledgeStructure,
}

impl<'a> BaseView<'a> {
    pub(crate) fn new(base: Base<'a>, target: &'a KnowledgeStructure) -> Self {
        BaseView { base, target }
    }

    pub(crate) fn entry(&self, id: &str) -> Option<&'a Entry> {
        match self.base {
            Base::Whole(structure) => structure.entry(id),
            Base::Rewound(rewind) => match rewind.before.get(id) {
                Some(before) => before.as_ref(),
                None => self.target.entry(id),
            },
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<&'a Arc<KnowledgeObject>> {
        self.entry(id).map(|e| &e.object)
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.entry(id).is_some()
    }

    /// Ids of the base's relations that name `id`.
    pub(crate) fn relations_of(&self, id: &str) -> Vec<&'a str> {
        match self.base {
            Base::Whole(structure) => structure.relations_of(id).iter().map(|r| r.id()).collect(),
            Base::Rewound(rewind) => {
                // Unchanged relations name what they name now; changed ones, what they named before.
                let unchanged =
                    self.target.relations_of(id).iter().map(|r| r.id()).filter(|r| !rewind.before.contains_key(*r));
                let changed = rewind.named_before.get(id).into_iter().flatten().map(String::as_str);
                unchanged.chain(changed).collect()
            }
        }
    }
}

impl<'a> Base<'a> {
    /// The base's object with this id.
    pub fn get(self, target: &'a KnowledgeStructure, id: &str) -> Option<&'a Arc<KnowledgeObject>> {
        BaseView::new(self, target).get(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_value;
    use serde_json::json;

    #[test]
    fn root_hash_and_lookups_match_the_state_it_rewinds_to() {
        let before = parse_value(json!({"objects": [
            {"identity": {"id": "a", "type": "N", "name": "a"}},
            {"identity": {"id": "b", "type": "N", "name": "b"}},
            {"identity": {"id": "r", "type": "R", "name": "r"}, "structure": {"participants": ["a", "b"], "relation_type": "x"}},
        ]}))
        .unwrap();
        let mut current = before.clone();
        let mut log = ChangeSet::default();
        current.remove("r", &mut log);
        let renamed = crate::object::KnowledgeObject::new(crate::Identity::new("b", "N", "B"), crate::Structure::new());
        current.put(renamed, &mut log).unwrap();
        let mut rewind = Rewind::default();
        rewind.record_change_set(&log);
        assert_eq!(rewind.root_hash(&current), before.root_hash());
        let view = BaseView::new(Base::Rewound(&rewind), &current);
        assert_eq!(view.get("b").unwrap().identity.name, "b");
        assert_eq!(view.relations_of("a"), ["r"]);
        assert!(current.relations_of("a").is_empty());
    }

    #[test]
    fn restoring_returns_to_the_rewound_state_and_undoing_comes_back() {
        let before = parse_value(json!({"objects": [
            {"identity": {"id": "a", "type": "N", "name": "apple"}},
            {"identity": {"id": "b", "type": "N", "name": "banana"}},
            {"identity": {"id": "r", "type": "R", "name": "r"}, "structure": {"participants": ["a", "b"], "relation_type": "x"}},
        ]}))
        .unwrap();
        let mut current = before.clone();
        assert_eq!(current.text_index().rank("apple", 5, 0.0).len(), 1, "indexed before the changes");
        let mut log = ChangeSet::default();
        current.remove("r", &mut log);
        current.remove("a", &mut log);
        let cherry =
            crate::object::KnowledgeObject::new(crate::Identity::new("c", "N", "cherry"), crate::Structure::new());
        current.put(cherry, &mut log).unwrap();
        let mut rewind = Rewind::default();
        rewind.record_change_set(&log);
        let now = current.root_hash();

        let mut restored = ChangeSet::default();
        rewind.restore(&mut current, &mut restored);
        assert_eq!(current.root_hash(), before.root_hash());
        assert_eq!(current.relations_of("a").len(), 1);
        let found: Vec<&str> =
            current.text_index().rank("apple cherry", 5, 0.0).into_iter().map(|(id, _)| id).collect();
        assert_eq!(found, ["a"], "the text index follows");

        current.undo(restored);
        assert_eq!(current.root_hash(), now);
        assert!(current.get("a").is_none() && current.get("c").is_some());
        let found: Vec<&str> =
            current.text_index().rank("apple cherry", 5, 0.0).into_iter().map(|(id, _)| id).collect();
        assert_eq!(found, ["c"]);
    }
}
