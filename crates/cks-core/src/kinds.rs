//! The index of a structure's objects by type and of its relations by relation type, kept by the
//! structure once asked for ([`KnowledgeStructure::objects_of_type`],
//! [`KnowledgeStructure::relations_of_type`]) and updated with every change. Rules that look at a
//! few kinds of object (the `InferenceStep`s, the rule objects, the relation types a rule names)
//! then cost what those kinds hold, not the whole graph.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::object::KnowledgeObject;
use crate::structure::{ById, IdHasher, KnowledgeStructure};

type Objects = HashSet<ById<Arc<KnowledgeObject>>, IdHasher>;

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct KindIndex {
    by_type: HashMap<String, Objects, IdHasher>,
    by_relation_type: HashMap<String, Objects, IdHasher>,
}

impl KindIndex {
    pub(crate) fn build(structure: &KnowledgeStructure) -> Self {
        let mut index = KindIndex::default();
        for object in structure.objects() {
            index.insert(object);
        }
        index
    }

    pub(crate) fn insert(&mut self, object: &Arc<KnowledgeObject>) {
        if let Some(relation) = object.relation() {
            kind(&mut self.by_relation_type, relation.relation_type).insert(ById(object.clone()));
        }
        kind(&mut self.by_type, &object.identity.r#type).insert(ById(object.clone()));
    }

    pub(crate) fn remove(&mut self, object: &KnowledgeObject) {
        let id = object.id();
        if let Some(relation) = object.relation() {
            remove(&mut self.by_relation_type, relation.relation_type, id);
        }
        remove(&mut self.by_type, &object.identity.r#type, id);
    }

    pub(crate) fn of_type(&self, ty: &str) -> impl Iterator<Item = &str> + '_ {
        self.by_type.get(ty).into_iter().flatten().map(ById::id)
    }

    /// Every object held, once per kind it is indexed under.
    #[cfg(test)]
    pub(crate) fn held(&self) -> impl Iterator<Item = &Arc<KnowledgeObject>> + '_ {
        self.by_type.values().chain(self.by_relation_type.values()).flatten().map(|held| &held.0)
    }

    pub(crate) fn of_relation_type(&self, relation_type: &str) -> impl Iterator<Item = &str> + '_ {
        self.by_relation_type.get(relation_type).into_iter().flatten().map(ById::id)
    }
}

/// The objects of one kind, the kind's name copied only when it is new (an index built over a
/// million objects would otherwise copy a name for each).
fn kind<'a>(index: &'a mut HashMap<String, Objects, IdHasher>, key: &str) -> &'a mut Objects {
    if !index.contains_key(key) {
        index.insert(key.to_owned(), Objects::default());
    }
    index.get_mut(key).expect("inserted above")
}

fn remove(index: &mut HashMap<String, Objects, IdHasher>, key: &str, id: &str) {
    if let Some(ids) = index.get_mut(key) {
        ids.remove(id);
        if ids.is_empty() {
            index.remove(key);
        }
    }
}
