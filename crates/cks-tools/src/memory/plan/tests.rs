use super::*;
use crate::memory::forget::forget;
use cks_core::json::parse_value;

fn graph(objects: Vec<Value>) -> KnowledgeStructure {
    parse_value(json!({"objects": objects})).unwrap()
}

fn obj(id: &str, ty: &str, name: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": name}, "structure": structure})
}

fn rel(id: &str, from: &str, to: &str, relation_type: &str) -> Value {
    obj(id, "Fact", id, json!({"participants": [from, to], "relation_type": relation_type}))
}

fn episode(n: u32, at: &str) -> Episode {
    Episode {
        id: format!("episode-{n}"),
        name: format!("note {n}"),
        text: format!("text {n}"),
        source: None,
        observed_at: at.to_owned(),
        content_hash: format!("{n:064}"),
        part: (0, 1),
    }
}

fn extraction(value: Value) -> Extraction {
    Extraction::read(value).unwrap().0
}

/// Applies a plan as a commit would: all or nothing, and the always-on checks hold.
fn apply(structure: &mut KnowledgeStructure, operations: &[Operation]) {
    cks_core::ops::apply(structure, operations).expect("the plan applies");
    let report = cks_core::validate(structure, &cks_core::ValidationOptions::default());
    assert!(report.is_valid(), "{:?}", report.diagnostics);
}

fn alice_moves() -> Extraction {
    extraction(json!({
        "entities": [
            {"name": "Alice Smith", "type": "Person", "aliases": ["Alice"], "attributes": {"role": "lead"}},
            {"name": "Bergen", "type": "City"},
            {"name": "Data team", "type": "Team"}
        ],
        "facts": [
            {"subject": "Alice", "predicate": "lives_in", "object": "Bergen", "single_valued": true,
             "statement": "Alice moved to Bergen.", "valid_from": "May"},
            {"subject": "Alice", "predicate": "leads", "object": "Data team"}
        ]
    }))
}

#[test]
fn known_entities_are_matched_new_ones_created_and_a_replaced_fact_ended() {
    let mut g = graph(vec![
        obj("alice", "Person", "Alice Smith", json!({"role": "engineer"})),
        obj("oslo", "City", "Oslo", json!({})),
        rel("alice-lives-in-oslo", "alice", "oslo", "lives_in"),
        rel("alice-knows-oslo", "alice", "oslo", "visited"),
    ]);
    let planned = plan(&g, &episode(1, "2026-05-01T00:00:00Z"), &alice_moves());
    let report = &planned.report;
    assert_eq!(report.matched.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["alice"]);
    assert_eq!(report.created.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["bergen", "data-team"]);
    assert_eq!(report.updated, [Updated { id: "alice".into(), fields: vec!["aliases".into(), "role".into()] }]);
    assert_eq!(
        report.superseded,
        [Superseded { id: "alice-lives-in-oslo".into(), by: "alice-lives-in-bergen".into() }]
    );
    assert_eq!(report.facts_added.len(), 2);
    assert!(report.review.is_empty());
    apply(&mut g, &planned.operations);

    let old = g.get("alice-lives-in-oslo").unwrap();
    assert_eq!(old.structure.get("valid_until"), Some(&json!("2026-05-01T00:00:00Z")));
    assert_eq!(old.structure.get(ENDED_BY), Some(&json!("alice-lives-in-bergen")));
    let new = g.get("alice-lives-in-bergen").unwrap();
    assert_eq!(new.structure.get("supersedes"), Some(&json!(["alice-lives-in-oslo"])));
    assert_eq!(new.structure.get("valid_from"), Some(&json!("May")));
    assert!(g.get("alice-knows-oslo").unwrap().structure.get(ENDED_BY).is_none(), "another predicate stays");
    assert_eq!(g.get("alice").unwrap().structure.get("role"), Some(&json!("lead")));

    // Where did we learn it: every touched object links to the episode, with its role.
    let links = episode_links(&g, "episode-1");
    assert_eq!(links["created"].len(), 4, "{links:?}");
    assert_eq!(links["updated"], ["alice"]);
    assert_eq!(links["ended"], ["alice-lives-in-oslo"]);

    // The same facts again (another text): confirmed, nothing ended twice.
    let again = plan(&g, &episode(2, "2026-06-01T00:00:00Z"), &alice_moves());
    assert_eq!(again.report.facts_confirmed.len(), 2);
    assert!(again.report.superseded.is_empty() && again.report.created.is_empty());
}

#[test]
fn a_functional_rule_makes_a_fact_single_valued_and_the_old_one_no_longer_contradicts() {
    let mut g = graph(vec![
        obj("bob", "Person", "Bob", json!({})),
        obj("acme", "Company", "Acme", json!({})),
        obj("rule", "FunctionalRelationRule", "works_at is single", json!({"relation_type": "works_at"})),
        rel("bob-works-at-acme", "bob", "acme", "works_at"),
    ]);
    let found = extraction(json!({
        "entities": [{"name": "Bob", "type": "Person"}, {"name": "Initech", "type": "Company"}],
        "facts": [{"subject": "Bob", "predicate": "works at", "object": "Initech"}]
    }));
    let planned = plan(&g, &episode(1, "2026-01-01T00:00:00Z"), &found);
    assert_eq!(planned.report.superseded.len(), 1);
    apply(&mut g, &planned.operations);
    assert!(cks_core::validate::contradictions(&g).is_empty(), "an ended fact is history, not a contradiction");
}

#[test]
fn an_entity_like_two_objects_is_created_and_left_for_review() {
    let g = graph(vec![
        obj("a1", "Report", "Annual report", json!({})),
        obj("a2", "Report", "Annual report", json!({})),
        obj("p1", "Person", "Alice Smith", json!({})),
    ]);
    let found = extraction(json!({"entities": [
        {"name": "Annual Report", "type": "Report"},
        {"name": "Alice", "type": "Person"}
    ]}));
    let planned = plan(&g, &episode(1, "2026-01-01T00:00:00Z"), &found);
    assert!(planned.report.matched.is_empty(), "two equal candidates: not guessed");
    assert_eq!(
        planned.report.review,
        [
            Review { id: "annual-report".into(), candidates: vec!["a1".into(), "a2".into()] },
            Review { id: "alice".into(), candidates: vec!["p1".into()] },
        ]
    );
}

#[test]
fn forgetting_an_episode_takes_back_what_it_said_and_only_that() {
    let mut g = graph(vec![
        obj("alice", "Person", "Alice Smith", json!({"role": "engineer"})),
        obj("oslo", "City", "Oslo", json!({})),
        rel("alice-lives-in-oslo", "alice", "oslo", "lives_in"),
    ]);
    let before = g.clone();
    let first = plan(&g, &episode(1, "2026-05-01T00:00:00Z"), &alice_moves());
    apply(&mut g, &first.operations);
    // A second text mentions Bergen too: Bergen stays when the first is forgotten.
    let second = plan(
        &g,
        &episode(2, "2026-06-01T00:00:00Z"),
        &extraction(json!({"entities": [{"name": "Bergen", "type": "City", "attributes": {"country": "Norway"}}]})),
    );
    apply(&mut g, &second.operations);

    let (operations, forgotten) = forget(&g, "episode-1").unwrap();
    assert_eq!(forgotten.kept, ["bergen"]);
    assert_eq!(forgotten.restored, ["alice", "alice-lives-in-oslo"]);
    apply(&mut g, &operations);
    assert!(!g.contains("episode-1") && !g.contains("data-team") && !g.contains("alice-lives-in-bergen"));
    assert!(g.contains("bergen") && g.contains("episode-2"));
    assert_eq!(g.get("alice").unwrap().structure, before.get("alice").unwrap().structure);
    assert_eq!(g.get("alice-lives-in-oslo").unwrap().structure, before.get("alice-lives-in-oslo").unwrap().structure);

    let (operations, _) = forget(&g, "episode-2").unwrap();
    apply(&mut g, &operations);
    assert!(g.same_content(&before), "both forgotten: the graph is as it was");
    assert_eq!(forget(&g, "alice").unwrap_err(), crate::memory::forget::NotAnEpisode::OtherType("Person".into()));
}
