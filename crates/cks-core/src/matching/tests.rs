use super::*;
use crate::json::parse_value;
use serde_json::json;
use std::collections::HashMap;

fn graph(objects: Vec<Value>) -> KnowledgeStructure {
    parse_value(json!({"objects": objects})).unwrap()
}

fn obj(id: &str, ty: &str, name: &str) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": name}, "structure": {}})
}

fn with(id: &str, ty: &str, name: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": name}, "structure": structure})
}

fn object(value: Value) -> KnowledgeObject {
    graph(vec![value]).objects().next().unwrap().as_ref().clone()
}

fn ids(pairs: &[Pair]) -> Vec<[&str; 2]> {
    pairs.iter().map(|p| [p.ids[0].as_str(), p.ids[1].as_str()]).collect()
}

fn similarity(a: &str, b: &str) -> f64 {
    jaccard(&trigrams(&fold(a)), &trigrams(&fold(b)))
}

#[test]
fn names_fold_and_trigram_similarity_follows_the_documented_examples() {
    assert_eq!(fold("  Machine-Learning!! (ML) "), "machine learning ml");
    assert_eq!(fold("—"), "");
    assert!(similarity("Knowledge graph", "Knowledge graphs") >= NAME_SIMILARITY);
    assert!(similarity("Albert Einstein", "Einstein, Albert") >= NAME_SIMILARITY);
    assert!(similarity("Protein A", "Protein B") < NAME_SIMILARITY);
    assert!(similarity("World War I", "World War II") < NAME_SIMILARITY);
    assert_eq!(numbers("chapter 11 part 2"), ["11", "2"]);
}

#[test]
fn decisions_follow_names_and_whole_number_fields() {
    let profile = |ty: &str, name: &str, structure: Value| Profile::of(&object(with("x", ty, name, structure)));
    let paper = |title: &str, year: Value| profile("Paper", title, json!({"year": year, "price": 9.5}));
    let a = paper("Query optimization in databases", json!(1999));

    let same = compare(&a, &paper("Query Optimization in Databases.", json!("1999")), None);
    assert!(same.same_name);
    assert_eq!((same.decision(), same.score()), (Decision::Same, 1.0));

    let similar = compare(&a, &paper("Query optimizations in databases", json!(1999)), None);
    assert!(!similar.same_name && similar.name_similarity >= NAME_SIMILARITY);
    assert_eq!(similar.decision(), Decision::Same);
    assert_eq!(similar.reasons(), ["similar_name"]);

    // A year that differs: two things, however alike the names. Fractions are not compared.
    let other_year = compare(&a, &paper("Query optimization in databases", json!(2001)), None);
    assert_eq!(other_year.conflict, Some(("year".to_owned(), 1999, 2001)));
    assert_eq!(other_year.decision(), Decision::Different);
    let other_price = compare(&a, &profile("Paper", "Query optimization in databases", json!({"price": 12.0})), None);
    assert_eq!(other_price.decision(), Decision::Same);

    // Another type is never compared; numbers in names must agree.
    assert_eq!(
        compare(&a, &profile("Person", "Query optimization in databases", json!({})), None).decision(),
        Decision::Different
    );
    let chapter = |n: u32| Profile::named("Concept", &format!("Chapter {n} of the handbook"), &[]);
    assert_eq!(compare(&chapter(11), &chapter(12), None).decision(), Decision::Different);
}

#[test]
fn aliases_contained_names_and_meaning_ask_for_review_or_match() {
    let alice = Profile::named("Person", "Alice", &[]);
    let full = Profile::of(&object(with("p", "Person", "Alice Smith", json!({"aliases": ["A. Smith", "Ali"]}))));
    let contained = compare(&alice, &full, None);
    assert!(contained.contained_name);
    assert_eq!((contained.decision(), contained.reasons()), (Decision::Review, vec!["contained_name"]));

    let by_alias = compare(&Profile::named("person", "Ali", &[]), &full, None);
    assert_eq!((by_alias.decision(), by_alias.score()), (Decision::Same, 1.0), "an alias is a name; types fold");

    let meaning =
        compare(&Profile::named("Concept", "Car", &[]), &Profile::named("Concept", "Automobile", &[]), Some(0.97));
    assert_eq!((meaning.decision(), meaning.reasons()), (Decision::Review, vec!["similar_meaning"]));
    assert!((meaning.score() - 0.97).abs() < 1e-6);
}

#[test]
fn candidates_are_found_by_name_and_two_close_matches_are_ambiguous() {
    let g = graph(vec![
        obj("alice", "Person", "Alice Smith"),
        obj("bob", "Person", "Bob Stone"),
        obj("oslo", "City", "Oslo"),
        obj("r1", "Report", "Annual report"),
        obj("r2", "Report", "Annual report"),
        obj("r3", "Report", "Annual reports"),
    ]);
    let found = candidates(&g, &Profile::named("Person", "alice smith", &[]), None, None);
    assert_eq!(found.len(), 1, "only a Person that shares a word: {found:?}");
    assert_eq!((found[0].object.id(), found[0].decision), ("alice", Decision::Same));

    let reports = candidates(&g, &Profile::named("Report", "Annual Report", &[]), None, None);
    let decided: Vec<(&str, Decision)> = reports.iter().map(|c| (c.object.id(), c.decision)).collect();
    assert_eq!(
        decided,
        [("r1", Decision::Review), ("r2", Decision::Review), ("r3", Decision::Review)],
        "r3 is similar, r1 and r2 tie"
    );
    assert!(reports[0].evidence.ambiguous && reports[0].evidence.reasons().contains(&"ambiguous"));

    // The object itself left out, r1's best partner is clear: both are likely duplicates of it.
    let of_r1 = candidates(&g, &Profile::of(g.get("r1").unwrap()), None, Some("r1"));
    let decided: Vec<(&str, Decision)> = of_r1.iter().map(|c| (c.object.id(), c.decision)).collect();
    assert_eq!(decided, [("r2", Decision::Same), ("r3", Decision::Same)]);
    assert!(of_r1[0].score > of_r1[1].score);
}

#[test]
fn pairs_same_and_similar_names_within_a_type_only() {
    let g = graph(vec![
        obj("a", "Concept", "Knowledge Graph"),
        obj("b", "Concept", "knowledge-graph"),
        obj("c", "Concept", "Knowledge graphs of many kinds"),
        obj("d", "Person", "Knowledge Graph"),
        obj("e", "Concept", "Chapter 11 of the handbook"),
        obj("f", "Concept", "Chapter 12 of the handbook"),
        obj("g", "Concept", "Protein A"),
        obj("h", "Concept", "Protein B"),
        obj("i", "Concept", "Graph theory, an introduction"),
        obj("j", "Concept", "Graph theory: an introduction"),
        with("k", "Paper", "Streams", json!({"year": 2001})),
        with("l", "Paper", "Streams", json!({"year": 2002})),
    ]);
    let (pairs, pending) = pairs(&g);
    assert!(!pending);
    assert_eq!(ids(&pairs), [["a", "b"], ["i", "j"]], "k and l differ in their year");
    assert_eq!(pairs[0].decision, Decision::Same);
    assert_eq!(pairs[0].evidence.reasons(), ["same_name"]);
    assert_eq!(pairs[0].positions, [0, 1]);
}

#[test]
fn a_name_many_objects_share_is_a_label_and_distinct_pairs_are_left_out() {
    let mut objects: Vec<Value> =
        (0..=MAX_SAME_NAME).map(|i| obj(&format!("s{i}"), "Section", "Introduction")).collect();
    objects.push(obj("x", "Concept", "Graph database"));
    objects.push(obj("y", "Concept", "Graph Database"));
    objects.push(obj("v1", "VerificationRecord", "verification"));
    objects.push(obj("v2", "VerificationRecord", "verification"));
    assert_eq!(ids(&pairs(&graph(objects.clone())).0), [["x", "y"]]);
    objects.push(json!({"identity": {"id": "d", "type": "Relation", "name": "r"},
                        "structure": {"participants": ["y", "x"], "relation_type": DISTINCT_FROM}}));
    assert!(pairs(&graph(objects)).0.is_empty());
}

#[test]
fn names_are_compared_without_comparing_every_pair() {
    // Thousands of names of one type, a few near-identical: found, each once.
    let mut objects: Vec<Value> =
        (0..3_000).map(|i| obj(&format!("n{i}"), "Concept", &format!("concept number {i} of many"))).collect();
    objects.push(obj("twin", "Concept", "Concept number 17 of many!"));
    objects.push(obj("plural", "Concept", "concepts number 1200 of many"));
    let (found, _) = pairs(&graph(objects));
    let mut found = ids(&found);
    found.sort();
    assert_eq!(found, [["n1200", "plural"], ["n17", "twin"]]);
}

#[test]
fn vectors_in_the_index_pair_objects_by_meaning_for_review() {
    let g = graph(vec![
        obj("a", "Concept", "Car"),
        obj("b", "Concept", "Automobile"),
        obj("c", "Concept", "Banana"),
        obj("d", "Fruit", "Automobile"),
    ]);
    // A stand-in model: cars point one way, the rest elsewhere.
    let vector = |text: &str| {
        let text = text.to_lowercase();
        let values: [f32; 4] = if text.contains("car") || text.contains("automobile") {
            [1.0, 0.1, 0.0, 0.0]
        } else {
            [0.0, 0.0, 1.0, 0.2]
        };
        Vector::quantize(&values).unwrap()
    };
    let known: HashMap<crate::vectors::TextKey, Vector> = g
        .objects()
        .filter_map(|o| crate::vectors::embedding_text(o))
        .map(|t| (crate::vectors::text_key(&t), vector(&t)))
        .collect();
    g.vector_index().lock().unwrap().sync(&g, "m", 0, |k| known.get(k));
    let (found, pending) = pairs(&g);
    assert!(!pending);
    assert_eq!(ids(&found), [["a", "b"]], "the same type only");
    assert_eq!(found[0].evidence.reasons(), ["similar_meaning"]);
    assert_eq!(found[0].decision, Decision::Review);

    // Vectors asked for and not known yet: pending, so the session is looked at again.
    let fresh = graph(vec![obj("a", "Concept", "Car")]);
    fresh.vector_index().lock().unwrap().sync(&fresh, "m", 0, |_| None);
    assert!(pairs(&fresh).1);
}
