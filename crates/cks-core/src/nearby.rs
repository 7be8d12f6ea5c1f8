//! The objects near an object: those that can lend a search match context (its neighbours),
//! where there is evidence that they belong with it. Two kinds of evidence count:
//!
//! - a relation: the other participants of the relations that name the object;
//! - the graph's order (the order objects were added), only where the data shows that this order
//!   means something: adjacent objects of a type measurably more alike than random pairs of that
//!   type ([`OrderEvidence`], measured per session on the objects' vectors). The turns of a
//!   conversation pass; documents added one after another in no particular order do not.
//!
//! Nothing here knows a type or a field: the evidence is read off the data.

use crate::KnowledgeStructure;

/// How many objects on each side of an object, in the graph's order, are its neighbours.
pub const REACH: usize = 2;

/// The most neighbours an object's relations give it (a hub's first ones, in order).
const MAX_RELATED: usize = 8;

/// Pairs of each kind [`OrderEvidence::measure`] compares, at most.
const SAMPLE: usize = 512;

/// Fewer adjacent pairs than this are no evidence.
const MIN_PAIRS: usize = 20;

/// The least difference in mean cosine, adjacent against random, that counts as meaning: a
/// smaller one, however certain, lends little but noise.
const MIN_EFFECT: f64 = 0.05;

/// How many standard errors the difference must exceed (about one chance in a thousand that
/// a shuffled collection passes).
const MIN_STANDARD_ERRORS: f64 = 3.0;

/// Whether adjacent objects (same type, one after the other) are more alike than random pairs
/// of the same type: the mean cosine of each kind of pair, and how many of each were compared.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderEvidence {
    pub adjacent: Sample,
    pub random: Sample,
}

/// The cosines of one kind of pair: their count, mean and variance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub pairs: usize,
    pub mean: f64,
    pub variance: f64,
}

impl Sample {
    fn of(values: &[f64]) -> Sample {
        let pairs = values.len();
        if pairs == 0 {
            return Sample::default();
        }
        let mean = values.iter().sum::<f64>() / pairs as f64;
        let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / pairs as f64;
        Sample { pairs, mean, variance }
    }
}

impl OrderEvidence {
    /// Compares up to [`SAMPLE`] adjacent pairs, spread evenly over the graph's order, with as
    /// many pairs of the same types at pseudo-random distances (the same on every run).
    /// `similarity` is the cosine of two objects' vectors, when both have one.
    pub fn measure(structure: &KnowledgeStructure, similarity: impl Fn(&str, &str) -> Option<f32>) -> OrderEvidence {
        let count = structure.len();
        let step = (count / SAMPLE).max(1);
        let (mut adjacent, mut random) = (Vec::new(), Vec::new());
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for at in (0..count.saturating_sub(1)).step_by(step) {
            let (Some(this), Some(next)) = (structure.entry_at(at), structure.entry_at(at + 1)) else { continue };
            let kind = &this.object.identity.r#type;
            if this.is_relation() || next.is_relation() || next.object.identity.r#type != *kind {
                continue;
            }
            let Some(near) = similarity(this.object.id(), next.object.id()) else { continue };
            // A partner of the same type at a pseudo-random place: a few tries, then none.
            let partner = (0..8).find_map(|_| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let other = structure.entry_at((state >> 33) as usize % count)?;
                let apart = other.object.id() != this.object.id() && other.object.id() != next.object.id();
                (apart && !other.is_relation() && other.object.identity.r#type == *kind)
                    .then(|| similarity(this.object.id(), other.object.id()))
                    .flatten()
            });
            if let Some(far) = partner {
                adjacent.push(f64::from(near));
                random.push(f64::from(far));
            }
        }
        OrderEvidence { adjacent: Sample::of(&adjacent), random: Sample::of(&random) }
    }

    /// True when adjacent pairs are more alike than random ones by at least [`MIN_EFFECT`], and
    /// by more than [`MIN_STANDARD_ERRORS`] standard errors, over at least [`MIN_PAIRS`] pairs.
    pub fn holds(&self) -> bool {
        let (a, r) = (&self.adjacent, &self.random);
        if a.pairs < MIN_PAIRS || r.pairs < MIN_PAIRS {
            return false;
        }
        let difference = a.mean - r.mean;
        let error = (a.variance / a.pairs as f64 + r.variance / r.pairs as f64).sqrt();
        difference >= MIN_EFFECT && difference > MIN_STANDARD_ERRORS * error
    }
}

/// The neighbours of a session's objects, as far as its evidence allows.
#[derive(Debug)]
pub struct Nearby<'a> {
    structure: &'a KnowledgeStructure,
    /// Whether the graph's order counts ([`OrderEvidence::holds`]).
    ordered: bool,
    /// Whether relations a later fact ended ([`ended`]) are passed over.
    current: bool,
}

pub use crate::validate::ended;

impl<'a> Nearby<'a> {
    /// `ordered`: whether the graph's order is evidence (see [`OrderEvidence`]).
    pub fn new(structure: &'a KnowledgeStructure, ordered: bool) -> Nearby<'a> {
        Nearby { structure, ordered, current: false }
    }

    /// The same, through current relations only: an ended fact links nothing.
    pub fn current_only(mut self) -> Nearby<'a> {
        self.current = true;
        self
    }

    /// `id`'s neighbours: the other participants of its relations (up to [`MAX_RELATED`]), then,
    /// when the order counts, the objects of its type within [`REACH`] places of it. Each once,
    /// never `id` itself; a relation has none.
    pub fn of(&self, id: &str) -> Vec<&'a str> {
        let structure = self.structure;
        let Some(at) = structure.index_of(id) else { return Vec::new() };
        let Some(entry) = structure.entry_at(at).filter(|entry| !entry.is_relation()) else { return Vec::new() };
        let mut found: Vec<&'a str> = Vec::new();
        let related = structure
            .relations_of(id)
            .iter()
            .filter(|r| !(self.current && ended(r)))
            .filter_map(|r| r.relation())
            .flat_map(|r| r.participants);
        for other in related {
            if found.len() == MAX_RELATED {
                break;
            }
            if let Some((_, held, _)) =
                structure.entry_full(other).filter(|(_, held, e)| *held != id && !e.is_relation())
                && !found.contains(&held)
            {
                found.push(held);
            }
        }
        if self.ordered {
            let kind = &entry.object.identity.r#type;
            let around = (1..=REACH)
                .flat_map(|distance| [at.checked_sub(distance), at.checked_add(distance)])
                .flatten()
                .filter_map(|position| structure.entry_at(position))
                .filter(|near| !near.is_relation() && near.object.identity.r#type == *kind)
                .map(|near| near.object.id());
            for near in around {
                if !found.contains(&near) {
                    found.push(near);
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KnowledgeObject;
    use crate::object::Identity;
    use serde_json::json;

    fn object(id: &str, kind: &str) -> KnowledgeObject {
        KnowledgeObject::new(Identity::new(id, kind, id), serde_json::Map::new())
    }

    fn relation(id: &str, from: &str, to: &str) -> KnowledgeObject {
        let structure = json!({"participants": [from, to], "relation_type": "about"});
        KnowledgeObject::new(Identity::new(id, "Relation", id), structure.as_object().unwrap().clone())
    }

    /// `count` objects of one type, `t0` to `t{count-1}`, in that order.
    fn sequence(count: usize) -> KnowledgeStructure {
        KnowledgeStructure::from_objects((0..count).map(|i| object(&format!("t{i}"), "Turn"))).unwrap()
    }

    fn position(id: &str) -> f64 {
        id[1..].parse::<f64>().unwrap()
    }

    /// Objects about a topic that drifts slowly: near in the order, near in meaning.
    fn drifting(a: &str, b: &str) -> Option<f32> {
        alike(position(a), position(b))
    }

    fn alike(a: f64, b: f64) -> Option<f32> {
        Some((1.0 - (a - b).abs() / 50.0).max(0.0) as f32)
    }

    /// The same objects shuffled: each object's topic is where a hash of its place puts it, so
    /// how alike two are has nothing to do with where they sit.
    fn shuffled(a: &str, b: &str) -> Option<f32> {
        let topic = |id: &str| ((position(id) as u64).wrapping_mul(2_654_435_761) % 400) as f64;
        alike(topic(a), topic(b))
    }

    #[test]
    fn an_order_that_means_something_is_found_and_a_shuffled_one_is_not() {
        let structure = sequence(400);
        let ordered = OrderEvidence::measure(&structure, drifting);
        assert!(ordered.adjacent.pairs >= MIN_PAIRS && ordered.holds(), "{ordered:?}");
        let shuffled = OrderEvidence::measure(&structure, shuffled);
        assert!(!shuffled.holds(), "{shuffled:?}");
        // Too few objects are no evidence, however alike.
        assert!(!OrderEvidence::measure(&sequence(10), drifting).holds());
        // Nor are objects without vectors.
        assert!(!OrderEvidence::measure(&structure, |_, _| None).holds());
    }

    #[test]
    fn neighbours_come_from_relations_and_from_an_order_that_counts() {
        let mut objects: Vec<KnowledgeObject> = (0..6).map(|i| object(&format!("t{i}"), "Turn")).collect();
        objects.insert(3, object("note", "Note"));
        objects.push(object("far", "Place"));
        objects.push(relation("r1", "t0", "far"));
        let structure = KnowledgeStructure::from_objects(objects).unwrap();
        let unordered = Nearby::new(&structure, false);
        assert_eq!(unordered.of("t0"), vec!["far"], "only its relation's other end");
        assert!(unordered.of("t4").is_empty(), "no relation, no order: no neighbours");
        assert!(unordered.of("r1").is_empty(), "a relation has none");
        let ordered = Nearby::new(&structure, true);
        // Within two places, of its type: not the note between.
        assert_eq!(ordered.of("t2"), vec!["t1", "t0", "t3"]);
        assert_eq!(ordered.of("t0"), vec!["far", "t1", "t2"]);
    }

    #[test]
    fn an_ended_relation_links_nothing_for_what_is_current() {
        let mut ended_relation = relation("old", "t0", "oslo");
        ended_relation.structure.insert(crate::validate::ENDED_BY, serde_json::json!("new"));
        let objects = vec![
            object("t0", "Person"),
            object("oslo", "City"),
            object("bergen", "City"),
            ended_relation,
            relation("new", "t0", "bergen"),
        ];
        let structure = KnowledgeStructure::from_objects(objects).unwrap();
        assert!(ended(structure.get("old").unwrap()) && !ended(structure.get("new").unwrap()));
        assert_eq!(Nearby::new(&structure, false).of("t0"), vec!["oslo", "bergen"], "everything ever stated");
        assert_eq!(Nearby::new(&structure, false).current_only().of("t0"), vec!["bergen"]);
    }
}
