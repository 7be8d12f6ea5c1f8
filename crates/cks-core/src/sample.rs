//! Deterministic sample graphs for benchmarks, load tests and examples.
//!
//! The same `(nodes, relations, seed)` always gives the same structure on every platform (a
//! self-contained xorshift generator, no external randomness). Graphs are valid: relations name
//! existing nodes, and `derives` edges always point from a lower to a higher node index, so they
//! cannot form a cycle.

use serde_json::{Map, Value, json};

use crate::object::{Identity, KnowledgeObject};
use crate::structure::{ChangeSet, KnowledgeStructure};

const NODE_TYPES: [&str; 5] = ["Concept", "Claim", "Person", "Document", "Component"];
const RELATION_TYPES: [&str; 5] = ["supports", "mentions", "part_of", "derives", "contradicts"];

/// A small deterministic pseudo-random generator (xorshift64*).
#[derive(Clone, Debug)]
pub struct SampleRng(u64);

impl SampleRng {
    pub fn new(seed: u64) -> Self {
        SampleRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound.max(1) as u64) as usize
    }
}

/// The id of sample node `i`.
pub fn node_id(i: usize) -> String {
    format!("n{i}")
}

/// One sample node with a small structure.
pub fn node(i: usize, rng: &mut SampleRng) -> KnowledgeObject {
    let ty = NODE_TYPES[rng.below(NODE_TYPES.len())];
    let Value::Object(structure) = json!({
        "description": format!("Sample {ty} number {i}, generated for benchmarks."),
        "confidence": (rng.below(100) as f64) / 100.0,
        "tags": [format!("t{}", rng.below(20)), format!("t{}", rng.below(20))],
    }) else {
        unreachable!("a JSON object literal")
    };
    KnowledgeObject::new(Identity::new(node_id(i), ty, format!("{ty} {i}")), structure)
}

/// A valid graph of `nodes` nodes and `relations` binary relations.
pub fn random_graph(nodes: usize, relations: usize, seed: u64) -> KnowledgeStructure {
    let mut rng = SampleRng::new(seed);
    let mut structure = KnowledgeStructure::new();
    let mut log = ChangeSet::default();
    for i in 0..nodes {
        // Sample objects are well-formed by construction; put cannot fail.
        let _ = structure.put(node(i, &mut rng), &mut log);
    }
    if nodes >= 2 {
        for r in 0..relations {
            let (mut a, mut b) = (rng.below(nodes), rng.below(nodes));
            if a == b {
                b = (a + 1) % nodes;
            }
            let relation_type = RELATION_TYPES[rng.below(RELATION_TYPES.len())];
            if relation_type == "derives" && a > b {
                std::mem::swap(&mut a, &mut b);
            }
            let mut fields = Map::new();
            fields.insert("participants".into(), json!([node_id(a), node_id(b)]));
            fields.insert("relation_type".into(), json!(relation_type));
            fields.insert("weight".into(), json!(rng.below(10)));
            let identity = Identity::new(format!("r{r}"), "Relation", format!("{relation_type} {r}"));
            let _ = structure.put(KnowledgeObject::new(identity, fields), &mut log);
        }
    }
    structure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_well_formed() {
        let a = random_graph(200, 300, 7);
        let b = random_graph(200, 300, 7);
        assert_eq!(a, b);
        assert_ne!(a.root_hash(), random_graph(200, 300, 8).root_hash());
        assert_eq!(a.len(), 500);
        for relation in a.relations() {
            let view = relation.relation().unwrap();
            assert!(view.participants.iter().all(|p| a.contains(p)));
            if view.relation_type == "derives" {
                let (s, t) = view.source_target().unwrap();
                assert!(s[1..].parse::<usize>().unwrap() < t[1..].parse::<usize>().unwrap());
            }
        }
    }
}
