//! cks-studio's Gallery page at the HTTP level: the calls its Gallery, Publish dialog, compare/merge
//! modal and cross-graph link form make (bare JSON-RPC POSTs, the arguments exactly as the studio
//! builds them), and the result fields it reads. `scripts/studio-check` drives the same flows in a
//! real browser against a running studio.

use serde_json::{Value, json};

mod support;
use support::{TestServer, start};

async fn graph(s: &TestServer, ids: &[&str], relations: &[(&str, &str, &str)]) -> String {
    let mut objects: Vec<Value> =
        ids.iter().map(|id| json!({"identity": {"id": id, "type": "Concept", "name": format!("Name {id}")}})).collect();
    for (id, from, to) in relations {
        objects.push(json!({"identity": {"id": id, "type": "Relation", "name": "uses"},
            "structure": {"participants": [from, to], "relation_type": "uses"}}));
    }
    let created = s.call("validate_knowledge", json!({"json_data": json!({"objects": objects}).to_string()})).await;
    created["session_id"].as_str().unwrap().to_owned()
}

/// The studio's `registerGraph`: every text field sent, `public` derived from the visibility.
async fn publish(s: &TestServer, name: &str, session: &str, tags: &str, visibility: &str, team: Option<&str>) -> Value {
    let mut args = json!({"name": name, "session_id": session, "description": format!("About {name}"), "tags": tags,
        "public": visibility == "public", "visibility": visibility});
    if let Some(team) = team {
        args["team"] = json!(team);
    }
    s.call("register_graph", args).await
}

fn names(listing: &Value) -> Vec<&str> {
    listing["graphs"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect()
}

fn object_ids(serialized: &Value) -> Vec<String> {
    let graph: Value = serde_json::from_str(serialized["serialized"].as_str().unwrap()).unwrap();
    let mut ids: Vec<String> =
        graph["objects"].as_array().unwrap().iter().map(|o| o["identity"]["id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn the_gallery_pages_calls_and_the_fields_it_reads() {
    let s = start(None, 1 << 20).await;
    let physics = graph(&s, &["alpha", "beta", "shared"], &[("alpha-uses-beta", "alpha", "beta")]).await;
    let biology = graph(&s, &["gamma", "shared"], &[]).await;
    let lab = graph(&s, &["delta"], &[]).await;
    let secret = graph(&s, &["epsilon"], &[]).await;

    let registered = publish(&s, "physics", &physics, "science,physics", "public", None).await;
    assert_eq!(
        registered,
        json!({"registered": true, "name": "physics", "public": true, "visibility": "public", "team": null})
    );
    publish(&s, "biology", &biology, "science,bio", "public", None).await;
    let team = publish(&s, "lab", &lab, "internal", "team", Some("lab")).await;
    assert_eq!((team["public"].clone(), team["team"].clone()), (json!(false), json!("lab")));
    publish(&s, "secret", &secret, "science", "private", None).await;

    // The page's first load: public only, newest first, every field a card shows.
    let listing = s.call("list_graphs", json!({"public_only": true})).await;
    assert_eq!(names(&listing), ["biology", "physics"]);
    let card = &listing["graphs"][1];
    for field in ["created_at", "updated_at"] {
        assert!(card[field].as_str().is_some_and(|t| t.starts_with("20")), "{field}: {card}");
    }
    assert_eq!(card["session_id"], json!(physics));
    assert_eq!(card["description"], "About physics");
    assert_eq!(card["tags"], "science,physics", "tags are one comma-separated string");
    assert_eq!(card["lifecycle_state"], "published", "a public graph starts published");
    assert_eq!(card["source_graph_name"], Value::Null);

    // Public only off, a team namespace typed: that team's graphs join; a private one never shows.
    let listing = s.call("list_graphs", json!({"public_only": false, "team": "lab"})).await;
    assert_eq!(names(&listing), ["lab", "biology", "physics"]);
    let listing = s.call("list_graphs", json!({"public_only": false})).await;
    assert_eq!(names(&listing), ["biology", "physics"]);
    // Search over name, description and tags; a tag chip narrows the list.
    let found = s.call("search_graphs", json!({"query": "about bio", "public_only": true})).await;
    assert_eq!(names(&found), ["biology"]);
    let tagged = s.call("list_graphs", json!({"tag": "physics", "public_only": true})).await;
    assert_eq!(names(&tagged), ["physics"]);

    // The health badge reads `health_score` (0.0–1.0) and per-component scores.
    let health = s.call("check_graph_health", json!({"name": "physics"})).await;
    let score = health["health_score"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&score), "{health}");
    assert_eq!(health["session_id"], json!(physics));
    for component in ["ttl_freshness", "contradictions", "verification_coverage", "dead_letter"] {
        assert!(health["metrics"][component]["score"].as_f64().is_some(), "{component}: {health}");
    }

    // The lifecycle badge offers only allowed transitions; the server re-checks them.
    let moved = s.call("update_graph_lifecycle", json!({"name": "physics", "state": "active"})).await;
    assert_eq!(
        (&moved["updated"], &moved["previous_state"], &moved["new_state"]),
        (&json!(true), &json!("published"), &json!("active"))
    );
    let refused = s.call("update_graph_lifecycle", json!({"name": "physics", "state": "draft"})).await;
    assert!(refused["error"].is_string() && refused["message"].is_string(), "{refused}");

    // Compare selected: the three counts and the id lists of the modal.
    let compared = s
        .call(
            "compare_graphs",
            json!({"graph_a_name": "physics", "graph_b_name": "biology", "include_relations": true}),
        )
        .await;
    assert_eq!(compared["shared_object_count"], 1);
    assert_eq!(compared["only_in_a_count"], 3);
    assert_eq!(compared["only_in_b_count"], 1);
    assert_eq!(compared["only_in_b"], json!(["gamma"]));
    assert_eq!((&compared["graph_a_session_id"], &compared["graph_b_session_id"]), (&json!(physics), &json!(biology)));

    // The modal's merge into a new session, registered under a new name.
    let merged = s
        .call("merge_graphs", json!({"graph_a_name": "physics", "graph_b_name": "biology", "register_as": "both"}))
        .await;
    assert_eq!(merged["merged"], true, "{merged}");
    let both = s.call("serialize_knowledge", json!({"session_id": merged["session_id"]})).await;
    assert_eq!(object_ids(&both), ["alpha", "alpha-uses-beta", "beta", "gamma", "shared"]);
    assert_eq!(s.call("get_graph", json!({"name": "both"})).await["session_id"], merged["session_id"]);

    // Clone: a new session of one's own, opened on the Graph page.
    let cloned = s.call("clone_graph", json!({"graph_name": "biology"})).await;
    let copy = cloned["session_id"].as_str().unwrap();
    assert_ne!(copy, biology);
    assert_eq!((&cloned["imported_objects"], &cloned["source_session_id"]), (&json!(2), &json!(biology)));
    let copied = s.call("serialize_knowledge", json!({"session_id": copy})).await;
    assert_eq!(object_ids(&copied), ["gamma", "shared"]);

    // The cross-graph link form: both sides by session id, written to both graphs.
    let linked = s
        .call(
            "link_graphs",
            json!({"graph_a_session_id": physics, "graph_b_session_id": biology,
            "object_a_id": "alpha", "object_b_id": "gamma", "relation_type": "references"}),
        )
        .await;
    assert_eq!(linked["linked"], true, "{linked}");
    let relation = linked["relation_id"].as_str().unwrap();
    for session in [&physics, &biology] {
        let serialized = s.call("serialize_knowledge", json!({"session_id": session})).await;
        assert!(object_ids(&serialized).iter().any(|id| id == relation), "{relation} in {session}");
    }
    assert!(linked["graph_a_version"].is_string() && linked["graph_b_version"].is_string(), "{linked}");

    // Delete from gallery: the name goes, the session stays.
    let removed = s.call("unregister_graph", json!({"name": "biology"})).await;
    assert_eq!(removed, json!({"unregistered": true, "name": "biology"}));
    assert_eq!(s.call("get_graph", json!({"name": "biology"})).await, json!({"found": false}));
    let kept = s.call("serialize_knowledge", json!({"session_id": biology})).await;
    assert!(object_ids(&kept).contains(&"gamma".to_owned()));
}
