//! What a subgraph query reads of a graph ([`Neighbourhoods`]), and a neighbourhood gathered
//! from somewhere else than a loaded structure ([`gather`]): a store that can find one object and
//! the relations naming it answers a seeded query without the whole session being loaded.
//!
//! A query from seeds to `depth` hops reads: the seeds; the relations naming any node within
//! `depth` hops (to walk, to count degrees and to keep the relations among the chosen nodes); the
//! participants of the relations naming nodes less than `depth` hops away (the next hop); and
//! every returned object's place in the structure's order. [`gather`] fetches exactly that, with
//! no filter applied (the query's filters only narrow it), so the query over the gathered
//! neighbourhood gives what it gives over the whole structure.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use compact_str::CompactString;

use crate::object::KnowledgeObject;
use crate::structure::{ChangeSet, Entry, KnowledgeStructure};

/// The reads of a budgeted subgraph query ([`crate::query_subgraph`]).
pub trait Neighbourhoods {
    fn entry(&self, id: &str) -> Option<&Entry>;

    fn get(&self, id: &str) -> Option<&Arc<KnowledgeObject>> {
        self.entry(id).map(|entry| &entry.object)
    }

    /// Every relation naming `id` as a participant (complete for the nodes a query may reach).
    fn relations_of(&self, id: &str) -> &[Arc<KnowledgeObject>];

    /// Where the object stands in the structure's order: only comparisons between two objects
    /// mean anything.
    fn order_of(&self, id: &str) -> Option<u64>;
}

impl Neighbourhoods for KnowledgeStructure {
    fn entry(&self, id: &str) -> Option<&Entry> {
        KnowledgeStructure::entry(self, id)
    }

    fn relations_of(&self, id: &str) -> &[Arc<KnowledgeObject>] {
        KnowledgeStructure::relations_of(self, id)
    }

    fn order_of(&self, id: &str) -> Option<u64> {
        self.index_of(id).map(|index| index as u64)
    }
}

/// An object found by a [`NeighbourSource`], with its place in the structure's order.
pub type Placed = (Arc<KnowledgeObject>, u64);

/// Where [`gather`] finds objects: by id, and the relations naming an id.
pub trait NeighbourSource {
    type Error;

    fn object(&mut self, id: &str) -> Result<Option<Placed>, Self::Error>;

    /// Every relation naming `id` as a participant; `None` when there are more than `at_most`.
    fn relations_of(&mut self, id: &str, at_most: usize) -> Result<Option<Vec<Placed>>, Self::Error>;
}

/// The objects a query from some seeds reads ([`gather`]), with their places in the whole
/// structure's order.
#[derive(Debug, Default)]
pub struct Gathered {
    objects: KnowledgeStructure,
    order: HashMap<CompactString, u64>,
}

impl Gathered {
    /// Objects fetched.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    fn add(&mut self, (object, order): Placed) {
        if self.objects.contains(object.id()) {
            return;
        }
        self.order.insert(object.id().into(), order);
        let mut log = ChangeSet::default();
        self.objects.put_entry(Entry::from_shared(object), &mut log);
    }
}

impl Neighbourhoods for Gathered {
    fn entry(&self, id: &str) -> Option<&Entry> {
        self.objects.entry(id)
    }

    fn relations_of(&self, id: &str) -> &[Arc<KnowledgeObject>] {
        self.objects.relations_of(id)
    }

    fn order_of(&self, id: &str) -> Option<u64> {
        self.order.get(id).copied()
    }
}

/// Fetches what a query from `seeds` to `depth` hops reads (see the module docs). `None` once
/// more than `limit` objects would be fetched: a neighbourhood that large is better read from the
/// loaded structure.
pub fn gather<S: NeighbourSource>(
    source: &mut S,
    seeds: &[String],
    depth: usize,
    limit: usize,
) -> Result<Option<Gathered>, S::Error> {
    let mut gathered = Gathered::default();
    // Ids already fetched (found or not), and the nodes to expand with their distance.
    let mut fetched: HashSet<String> = HashSet::new();
    let mut nodes: Vec<(String, usize)> = Vec::new();
    let mut fetch = |id: &str, gathered: &mut Gathered, source: &mut S| -> Result<Option<bool>, S::Error> {
        if !fetched.insert(id.to_owned()) {
            return Ok(None);
        }
        let found = source.object(id)?;
        let is_node = found.as_ref().is_some_and(|(object, _)| !object.is_relation());
        if let Some(placed) = found {
            gathered.add(placed);
        }
        Ok(Some(is_node))
    };
    for seed in seeds {
        if fetch(seed, &mut gathered, source)? == Some(true) {
            nodes.push((seed.clone(), 0));
        }
    }
    let mut cursor = 0;
    while let Some((id, distance)) = nodes.get(cursor).cloned() {
        cursor += 1;
        let Some(relations) = source.relations_of(&id, limit)? else {
            return Ok(None);
        };
        let mut next = Vec::new();
        for placed in relations {
            if let Some(relation) = placed.0.relation().filter(|_| distance < depth) {
                next.extend(relation.participants.iter().map(|p| p.to_string()));
            }
            gathered.add(placed);
        }
        for participant in next {
            if fetch(&participant, &mut gathered, source)? == Some(true) {
                nodes.push((participant, distance + 1));
            }
        }
        if gathered.len() > limit {
            return Ok(None);
        }
    }
    Ok(Some(gathered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subgraph::{SubgraphQuery, query_subgraph};
    use crate::testing::{arb_structure, node, relation};
    use proptest::prelude::*;
    use std::convert::Infallible;

    /// A source over a whole structure, counting what it is asked.
    struct Whole<'a> {
        structure: &'a KnowledgeStructure,
        asked: usize,
    }

    impl NeighbourSource for Whole<'_> {
        type Error = Infallible;

        fn object(&mut self, id: &str) -> Result<Option<Placed>, Infallible> {
            self.asked += 1;
            Ok(self.structure.get(id).map(|o| (o.clone(), self.structure.index_of(id).unwrap() as u64)))
        }

        fn relations_of(&mut self, id: &str, at_most: usize) -> Result<Option<Vec<Placed>>, Infallible> {
            self.asked += 1;
            let relations = self.structure.relations_of(id);
            Ok((relations.len() <= at_most).then(|| {
                relations.iter().map(|r| (r.clone(), self.structure.index_of(r.id()).unwrap() as u64)).collect()
            }))
        }
    }

    fn gathered(structure: &KnowledgeStructure, seeds: &[&str], depth: usize, limit: usize) -> Option<Gathered> {
        let seeds: Vec<String> = seeds.iter().map(|s| (*s).to_owned()).collect();
        let mut source = Whole { structure, asked: 0 };
        let Ok(result) = gather(&mut source, &seeds, depth, limit);
        result
    }

    fn chain(length: usize) -> KnowledgeStructure {
        let mut objects: Vec<_> = (0..length).map(|i| node(&format!("n{i}"), "Claim", i as i64)).collect();
        objects.extend(
            (1..length).map(|i| relation(&format!("r{i}"), &[&format!("n{}", i - 1), &format!("n{i}")], "supports")),
        );
        KnowledgeStructure::from_objects(objects).unwrap()
    }

    #[test]
    fn only_the_neighbourhood_a_query_reads_is_fetched() {
        let structure = chain(10);
        let near = gathered(&structure, &["n0"], 2, usize::MAX).unwrap();
        // n0..n2 and the relations naming them (r1..r3): r3 names n2, two hops away, for its degree.
        let mut ids: Vec<&str> = near.objects.ids().collect();
        ids.sort_unstable();
        assert_eq!(ids, ["n0", "n1", "n2", "r1", "r2", "r3"]);
        assert_eq!(near.order_of("r3"), structure.index_of("r3").map(|i| i as u64));
        // A relation is no seed; an unknown seed is fetched (as absent) and ignored.
        assert!(gathered(&structure, &["r1", "zz"], 2, usize::MAX).unwrap().objects.ids().eq(["r1"]));
    }

    #[test]
    fn a_neighbourhood_over_the_limit_is_not_gathered() {
        let structure = chain(10);
        assert!(gathered(&structure, &["n0"], 9, 8).is_none());
        assert!(gathered(&structure, &["n0"], 9, 19).is_some());
        // A hub's relations are not read once they are too many.
        let mut objects = vec![node("hub", "Claim", 0)];
        objects.extend((0..50).map(|i| node(&format!("n{i}"), "Claim", i)));
        objects.extend((0..50).map(|i| relation(&format!("r{i}"), &["hub", &format!("n{i}")], "supports")));
        let star = KnowledgeStructure::from_objects(objects).unwrap();
        let seeds = ["hub".to_owned()];
        let mut source = Whole { structure: &star, asked: 0 };
        let Ok(result) = gather(&mut source, &seeds, 1, 20);
        assert!(result.is_none());
        assert_eq!(source.asked, 2, "the seed, then its relations refused whole");
    }

    proptest! {
        #[test]
        fn a_query_over_the_gathered_neighbourhood_equals_the_query_over_the_structure(
            structure in arb_structure(),
            seeds in proptest::collection::vec(0..12usize, 1..3),
            depth in 0..4usize,
            max_objects in proptest::option::of(0..6usize),
            max_tokens in proptest::option::of(0..200usize),
            filter_relations in any::<bool>(),
            filter_objects in any::<bool>(),
        ) {
            let ids: Vec<String> = structure.ids().map(str::to_owned).collect();
            prop_assume!(!ids.is_empty());
            let seeds: Vec<String> = seeds.iter().map(|i| ids[i % ids.len()].clone()).collect();
            let relation_types: Vec<String> = structure.relations().filter_map(|r| r.relation().map(|v| v.relation_type.to_owned())).take(1).collect();
            let object_types: Vec<String> = structure.objects().filter(|o| !o.is_relation()).map(|o| o.identity.r#type.to_string()).take(2).collect();
            let query = SubgraphQuery {
                seed_ids: seeds.clone(),
                depth,
                include_relation_types: filter_relations.then_some(relation_types),
                include_object_types: filter_objects.then_some(object_types),
                max_objects,
                max_tokens,
                ..Default::default()
            };
            let mut source = Whole { structure: &structure, asked: 0 };
            let Ok(near) = gather(&mut source, &seeds, depth, usize::MAX);
            let near = near.unwrap();
            prop_assert_eq!(query_subgraph(&near, &query), query_subgraph(&structure, &query));
        }
    }
}
