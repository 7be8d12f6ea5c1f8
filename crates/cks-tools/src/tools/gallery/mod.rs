//! The gallery: registered names for graphs, found again by name, listed and searched by who may
//! see them, moved through a lifecycle, checked (freshness, component versions, health), brought
//! up to date with the code they describe, explained, and compared, cloned, merged and linked
//! across graphs. None is offered to `ai_chat`: registration is for people, the cross-graph tools
//! name a second session, and the version tools name a registered graph and fetch the network.

mod check_component_versions;
mod check_graph_freshness;
mod check_graph_health;
mod clone_graph;
mod compare_graphs;
pub(crate) mod component_versions;
mod explain_graph;
mod get_graph;
mod link_graphs;
mod list_graphs;
mod merge_graphs;
mod register_graph;
mod search_graphs;
mod unregister_graph;
mod update_graph_lifecycle;
mod update_registered_graph;

use crate::ErrorCode;
use cks_runtime::gallery::{GraphEntry, GraphFilter, Visibility};
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::ToolError;
use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(register_graph::RegisterGraph),
        listed(unregister_graph::UnregisterGraph),
        listed(get_graph::GetGraph),
        listed(list_graphs::ListGraphs),
        listed(search_graphs::SearchGraphs),
        listed(update_graph_lifecycle::UpdateGraphLifecycle),
        listed(check_graph_freshness::CheckGraphFreshness),
        listed(check_component_versions::CheckComponentVersions),
        listed(check_graph_health::CheckGraphHealth),
        listed(explain_graph::ExplainGraph),
        listed(update_registered_graph::UpdateRegisteredGraph),
        listed(compare_graphs::CompareGraphs),
        listed(clone_graph::CloneGraph),
        listed(merge_graphs::MergeGraphs),
        listed(link_graphs::LinkGraphs),
    ]
}

/// A registered graph, as every gallery tool returns it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct GraphRecord {
    /// The registered name.
    name: String,
    /// The session holding the graph.
    session_id: String,
    description: String,
    /// Comma-separated, as registered.
    tags: String,
    created_at: String,
    updated_at: String,
    /// True when `visibility` is `public`.
    public: bool,
    /// The registered name of the graph this one was cloned from.
    source_graph_name: Option<String>,
    /// `private`, `team` or `public`.
    visibility: String,
    team: Option<String>,
    /// draft, published, active, stale, under_review or archived.
    lifecycle_state: String,
}

impl From<GraphEntry> for GraphRecord {
    fn from(entry: GraphEntry) -> Self {
        GraphRecord {
            public: entry.visibility == Visibility::Public,
            visibility: entry.visibility.as_str().to_owned(),
            lifecycle_state: entry.lifecycle.as_str().to_owned(),
            name: entry.name,
            session_id: entry.session_id,
            description: entry.description,
            tags: entry.tags,
            created_at: entry.created_at,
            updated_at: entry.updated_at,
            source_graph_name: entry.source_graph_name,
            team: entry.team,
        }
    }
}

/// One side of a cross-graph call, resolved to an open session.
struct Side {
    session_id: String,
    /// The registered name, when the side was given by name.
    name: Option<String>,
}

impl Side {
    /// How results name the side: its registered name, else its session id.
    fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.session_id.clone())
    }
}

/// A graph given by session id (which wins) or by registered name; `missing` names the arguments
/// when neither is given (`graph_a_name (or graph_a_session_id)`).
async fn resolve_side(
    ctx: &crate::context::ToolContext,
    name: Option<String>,
    session_id: Option<String>,
    missing: &str,
) -> Result<Side, ToolError> {
    if let Some(session_id) = given(session_id) {
        // The registry has already checked that the session exists and is open.
        return Ok(Side { session_id, name: None });
    }
    let Some(name) = given(name) else {
        return Err(ToolError::missing_parameter(missing));
    };
    let entry = ctx.runtime.graph(&name).await?.ok_or_else(|| graph_not_found(&name))?;
    // A name can point at a session closed since: that session is gone, as for every tool.
    if ctx.runtime.info(&entry.session_id).await?.closed {
        return Err(cks_runtime::RuntimeError::SessionNotFound(entry.session_id).into());
    }
    Ok(Side { session_id: entry.session_id, name: Some(name) })
}

/// Runs `f` on the graph of an open session; `None` when the session is closed or gone (a
/// registered name can outlive its session).
async fn read_open<R>(
    ctx: &crate::context::ToolContext,
    session_id: &str,
    f: impl FnOnce(&cks_core::KnowledgeStructure) -> R,
) -> Option<R> {
    let open = ctx.runtime.info(session_id).await.is_ok_and(|info| !info.closed);
    if !open {
        return None;
    }
    ctx.runtime.read(session_id, |s, _| f(s)).await.ok()
}

/// The entries a listing or search returns, most recently updated first: a page of them.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Listing {
    graphs: Vec<GraphRecord>,
    #[serde(flatten)]
    cut: crate::bounds::Cut,
}

impl Listing {
    fn page(entries: Vec<GraphEntry>, paging: &crate::bounds::Paging) -> Self {
        let page = paging.page(entries.into_iter().map(GraphRecord::from).collect());
        Listing { cut: page.cut(), graphs: page.items }
    }
}

/// The graphs a listing or search shows. Without a principal, as `filter` says (its team is the
/// caller's word). With one, team graphs are those of the principal's groups (the token's groups
/// claim): a `team` argument only picks one of them, and names no other team.
pub(crate) async fn listing(
    ctx: &crate::ToolContext,
    filter: GraphFilter,
    paging: &crate::bounds::Paging,
) -> Result<Listing, ToolError> {
    let Some(principal) = &ctx.principal else { return Ok(Listing::page(ctx.runtime.graphs(&filter).await?, paging)) };
    let mut entries = ctx.runtime.graphs(&GraphFilter { team: None, ..filter.clone() }).await?;
    if !filter.public_only {
        let teams = principal.groups.iter().filter(|group| filter.team.as_ref().is_none_or(|team| team == *group));
        for team in teams {
            for entry in ctx.runtime.graphs(&GraphFilter { team: Some(team.clone()), ..filter.clone() }).await? {
                if !entries.iter().any(|listed| listed.name == entry.name) {
                    entries.push(entry);
                }
            }
        }
    }
    entries.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.name.cmp(&b.name)));
    hide_unreadable_sources(ctx, &mut entries).await?;
    Ok(Listing::page(entries, paging))
}

/// A graph the principal may read without reaching its session: a public one, or one of its team.
pub(crate) fn readable(principal: &crate::Principal, graph: &GraphEntry) -> bool {
    match graph.visibility {
        Visibility::Public => true,
        Visibility::Team => graph.team.as_deref().is_some_and(|team| principal.in_team(team)),
        Visibility::Private => false,
    }
}

/// For a caller whose reach is limited, leaves out each entry's `source_graph_name` unless the
/// caller may read that graph: a public clone of a private graph does not name it. A source no
/// longer registered is left out too: whose it was is unknown.
pub(crate) async fn hide_unreadable_sources(
    ctx: &crate::ToolContext,
    entries: &mut [GraphEntry],
) -> Result<(), ToolError> {
    let Some(principal) = ctx.principal.as_deref().filter(|_| ctx.restricted()) else { return Ok(()) };
    for entry in entries {
        let Some(source) = &entry.source_graph_name else { continue };
        let shown = match ctx.runtime.graph(source).await? {
            Some(graph) => readable(principal, &graph) || ctx.reaches(&graph.session_id).await?,
            None => false,
        };
        if !shown {
            entry.source_graph_name = None;
        }
    }
    Ok(())
}

/// The reference's answer for a name that is not registered.
pub(crate) fn graph_not_found(name: &str) -> ToolError {
    ToolError::new(ErrorCode::GraphNotFound, format!("No graph is registered under name '{name}'."))
}

/// A required text argument that must not be empty (the reference treats "" as missing).
fn required<'a>(value: &'a str, parameter: &str) -> Result<&'a str, ToolError> {
    if value.is_empty() { Err(ToolError::missing_parameter(parameter)) } else { Ok(value) }
}

/// An optional text argument, with "" read as absent (as the reference does).
fn given(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::tools::versions::testing::{call, context, node, session};

    fn names(result: &Value) -> Vec<&str> {
        result["graphs"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect()
    }

    #[tokio::test]
    async fn register_find_list_search_and_remove() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let registered = call(
            &ctx,
            "register_graph",
            json!({"name": "Solar", "session_id": sid, "description": "Planets", "tags": "astronomy,space",
                   "public": true}),
        )
        .await;
        assert_eq!(
            registered,
            json!({"registered": true, "name": "Solar", "public": true, "visibility": "public", "team": null})
        );
        call(&ctx, "register_graph", json!({"name": "Notes", "session_id": sid})).await;
        call(&ctx, "register_graph", json!({"name": "Lab", "session_id": sid, "visibility": "team", "team": "x"}))
            .await;

        let found = call(&ctx, "get_graph", json!({"name": "Notes"})).await;
        assert_eq!(found["found"], true);
        assert_eq!(found["session_id"], json!(sid));
        assert_eq!(found["visibility"], "private");
        assert_eq!(found["lifecycle_state"], "draft");
        let keys: Vec<&String> = found.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "created_at",
                "description",
                "found",
                "lifecycle_state",
                "name",
                "public",
                "session_id",
                "source_graph_name",
                "tags",
                "team",
                "updated_at",
                "visibility"
            ]
        );
        assert_eq!(call(&ctx, "get_graph", json!({"name": "nope"})).await, json!({"found": false}));

        assert_eq!(names(&call(&ctx, "list_graphs", json!({})).await), ["Solar"], "private and team graphs hidden");
        assert_eq!(names(&call(&ctx, "list_graphs", json!({"team": "x"})).await), ["Lab", "Solar"]);
        assert_eq!(names(&call(&ctx, "list_graphs", json!({"team": "x", "public_only": true})).await), ["Solar"]);
        assert_eq!(names(&call(&ctx, "list_graphs", json!({"tag": "SPACE"})).await), ["Solar"]);
        assert!(names(&call(&ctx, "list_graphs", json!({"tag": "biology"})).await).is_empty());
        assert_eq!(names(&call(&ctx, "search_graphs", json!({"query": "planet"})).await), ["Solar"]);
        assert!(names(&call(&ctx, "search_graphs", json!({"query": "notes"})).await).is_empty(), "private");
        assert_eq!(call(&ctx, "search_graphs", json!({"query": "  "})).await["error"], "empty_query");

        assert_eq!(
            call(&ctx, "unregister_graph", json!({"name": "Solar"})).await,
            json!({"unregistered": true, "name": "Solar"})
        );
        let again = call(&ctx, "unregister_graph", json!({"name": "Solar"})).await;
        assert_eq!(again["error"], "graph_not_found");
        assert!(ctx.runtime.info(&sid).await.is_ok(), "the session stays");
    }

    #[tokio::test]
    async fn registration_errors() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let code = |v: Value| v["error"].as_str().unwrap().to_owned();
        assert_eq!(
            code(call(&ctx, "register_graph", json!({"name": "", "session_id": sid})).await),
            "missing_parameter"
        );
        assert_eq!(code(call(&ctx, "register_graph", json!({"name": "n"})).await), "missing_parameter");
        assert_eq!(
            code(call(&ctx, "register_graph", json!({"name": "n", "session_id": "ghost"})).await),
            "session_not_found"
        );
        let team = call(&ctx, "register_graph", json!({"name": "n", "session_id": sid, "visibility": "team"})).await;
        assert_eq!(team["error"], "missing_parameter");
        assert!(team["message"].as_str().unwrap().contains("team"));
        let bad = call(&ctx, "register_graph", json!({"name": "n", "session_id": sid, "visibility": "everyone"})).await;
        assert_eq!(bad["error"], "invalid_parameter");
        assert_eq!(call(&ctx, "get_graph", json!({"name": "n"})).await, json!({"found": false}), "nothing stored");

        ctx.runtime.close(&sid).await.unwrap();
        let closed = call(&ctx, "register_graph", json!({"name": "n", "session_id": sid})).await;
        assert_eq!(closed["error"], "session_not_found");
    }

    #[tokio::test]
    async fn freshness_follows_the_last_update() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        call(&ctx, "register_graph", json!({"name": "g", "session_id": sid})).await;
        assert_eq!(call(&ctx, "check_graph_freshness", json!({"name": "g"})).await, json!({"fresh": true}));
        assert_eq!(call(&ctx, "check_graph_freshness", json!({"name": "h"})).await, json!({"found": false}));

        // An entry last updated long ago.
        let stored = ctx.runtime.store().get_graph("g").await.unwrap().unwrap();
        let aged = cks_runtime::store::GraphRow { updated_at: "2020-01-01T00:00:00Z".into(), ..stored };
        ctx.runtime.store().put_graph(aged).await.unwrap();
        assert_eq!(
            call(&ctx, "check_graph_freshness", json!({"name": "g"})).await,
            json!({"fresh": false, "last_updated": "2020-01-01T00:00:00Z", "ttl_days": 7.0})
        );
    }

    #[tokio::test]
    async fn compare_by_name_or_session() {
        let ctx = context();
        let (a, _) = session(
            &ctx,
            json!([
                node("x", "Claim", "X", json!({"v": 1})),
                node("y", "Claim", "Y", json!({})),
                node("only-a", "Claim", "A", json!({}))
            ]),
        )
        .await;
        let (b, _) = session(
            &ctx,
            json!([
                node("x", "Claim", "X", json!({"v": 2})),
                node("y", "Claim", "Y", json!({})),
                node("only-b", "Claim", "B", json!({}))
            ]),
        )
        .await;
        call(&ctx, "register_graph", json!({"name": "A", "session_id": a})).await;
        let result = call(&ctx, "compare_graphs", json!({"graph_a_name": "A", "graph_b_session_id": b})).await;
        assert_eq!(result["graph_a"], "A");
        assert_eq!(result["graph_b"], json!(b));
        assert_eq!(result["graph_a_session_id"], json!(a));
        assert_eq!(result["shared_object_ids"], json!(["x", "y"]));
        assert_eq!(result["only_in_a"], json!(["only-a"]));
        assert_eq!(result["only_in_b"], json!(["only-b"]));
        assert_eq!((result["shared_object_count"].clone(), result["only_in_a_count"].clone()), (json!(2), json!(1)));
        assert_eq!(
            result["differences"],
            json!([{"id": "x", "action": "modified", "type": "Claim", "name": "X",
                    "changes": {"v": {"from": 1, "to": 2}}}])
        );

        let code = |v: Value| v["error"].as_str().unwrap().to_owned();
        assert_eq!(code(call(&ctx, "compare_graphs", json!({"graph_b_session_id": b})).await), "missing_parameter");
        assert_eq!(
            code(call(&ctx, "compare_graphs", json!({"graph_a_name": "nope", "graph_b_session_id": b})).await),
            "graph_not_found"
        );
        assert_eq!(
            code(call(&ctx, "compare_graphs", json!({"graph_a_session_id": "ghost", "graph_b_session_id": b})).await),
            "session_not_found"
        );
        ctx.runtime.close(&a).await.unwrap();
        assert_eq!(
            code(call(&ctx, "compare_graphs", json!({"graph_a_name": "A", "graph_b_session_id": b})).await),
            "session_not_found",
            "a name pointing at a closed session"
        );
    }

    #[tokio::test]
    async fn clone_into_a_new_session_or_into_a_target() {
        let ctx = context();
        let (src, _) = session(
            &ctx,
            json!([
                node("a", "Claim", "A", json!({})),
                node("b", "Claim", "B", json!({})),
                crate::tools::versions::testing::relation("r", &["a", "b"], "supports")
            ]),
        )
        .await;
        call(&ctx, "register_graph", json!({"name": "src", "session_id": src})).await;
        let copy = call(&ctx, "clone_graph", json!({"graph_name": "src", "copy_name": "copy", "tags": "t"})).await;
        assert_eq!((copy["imported_objects"].clone(), copy["imported_relations"].clone()), (json!(2), json!(1)));
        assert_eq!(copy["source_graph_name"], "src");
        assert_eq!(copy["registered_as"], "copy");
        let new = copy["session_id"].as_str().unwrap();
        assert_ne!(new, src);
        let versions = ctx.runtime.list_versions(new).await.unwrap();
        assert_eq!(versions.len(), 1);
        assert_eq!(copy["version_id"], json!(versions[0].version_id));
        let entry = call(&ctx, "get_graph", json!({"name": "copy"})).await;
        assert_eq!(entry["source_graph_name"], "src");
        assert_eq!(entry["description"], "Clone of src.");
        assert_eq!(entry["visibility"], "private");

        // Into a target: only what it lacks, as one version; its own objects are kept as they are.
        let (target, _) = session(&ctx, json!([node("a", "Claim", "Mine", json!({"k": 1}))])).await;
        let into = call(&ctx, "clone_graph", json!({"source_session_id": src, "target_session_id": target})).await;
        assert_eq!((into["imported_objects"].clone(), into["imported_relations"].clone()), (json!(1), json!(1)));
        assert!(into.get("source_graph_name").is_none());
        let name_of_a = ctx.runtime.read(&target, |s, _| s.get("a").unwrap().identity.name.clone()).await.unwrap();
        assert_eq!(name_of_a, "Mine");
        let again = call(&ctx, "clone_graph", json!({"source_session_id": src, "target_session_id": target})).await;
        assert_eq!(again["version_id"], Value::Null);
        assert_eq!(again["imported_objects"], 0);
        assert!(again["message"].as_str().unwrap().contains("nothing to import"));
        assert_eq!(ctx.runtime.list_versions(&src).await.unwrap().len(), 1, "the source is never changed");

        let code = |v: Value| v["error"].as_str().unwrap().to_owned();
        assert_eq!(code(call(&ctx, "clone_graph", json!({})).await), "missing_parameter");
        assert_eq!(code(call(&ctx, "clone_graph", json!({"graph_name": "nope"})).await), "graph_not_found");
        assert_eq!(
            code(call(&ctx, "clone_graph", json!({"source_session_id": src, "target_session_id": "ghost"})).await),
            "session_not_found"
        );
    }

    #[tokio::test]
    async fn merge_two_graphs_into_a_new_session() {
        let ctx = context();
        let (a, _) =
            session(&ctx, json!([node("x", "Claim", "X", json!({"v": 1})), node("a", "Claim", "A", json!({}))])).await;
        let (b, _) =
            session(&ctx, json!([node("x", "Claim", "X", json!({"v": 2})), node("b", "Claim", "B", json!({}))])).await;
        call(&ctx, "register_graph", json!({"name": "A", "session_id": a})).await;
        let conflict = call(&ctx, "merge_graphs", json!({"graph_a_name": "A", "graph_b_session_id": b})).await;
        assert_eq!(conflict["merged"], false);
        assert_eq!(conflict["conflicts"][0]["object_id"], "x");
        assert!(conflict.get("session_id").is_none(), "nothing created");

        let merged = call(
            &ctx,
            "merge_graphs",
            json!({"graph_a_name": "A", "graph_b_session_id": b, "resolutions": {"x": "branch_b"},
                   "register_as": "AB"}),
        )
        .await;
        assert_eq!(merged["merged"], true);
        assert_eq!(merged["object_count"], 3);
        assert_eq!(merged["registered_as"], "AB");
        let new = merged["session_id"].as_str().unwrap();
        let v = ctx.runtime.read(new, |s, _| s.get("x").unwrap().structure["v"].clone()).await.unwrap();
        assert_eq!(v, 2);
        assert_eq!(
            call(&ctx, "get_graph", json!({"name": "AB"})).await["description"],
            json!(format!("Merge of A and {b}."))
        );
        assert_eq!(ctx.runtime.list_versions(&a).await.unwrap().len(), 1, "side A unchanged");

        // With a base where x was already {v: 1}, only B changed it: no conflict.
        let with_base =
            call(&ctx, "merge_graphs", json!({"graph_a_session_id": a, "graph_b_session_id": b, "base_session_id": a}))
                .await;
        assert_eq!(with_base["merged"], true, "{with_base}");
        let bad =
            call(&ctx, "merge_graphs", json!({"graph_a_name": "A", "graph_b_session_id": b, "resolutions": 5})).await;
        assert_eq!(bad["error"], "invalid_resolutions");
    }

    #[tokio::test]
    async fn link_two_graphs_both_ways() {
        let ctx = context();
        let (a, _) = session(&ctx, json!([node("x", "Claim", "X", json!({"v": 1}))])).await;
        let (b, _) = session(&ctx, json!([node("y", "Claim", "Y", json!({}))])).await;
        call(&ctx, "register_graph", json!({"name": "A", "session_id": a})).await;
        let args = json!({"graph_a_name": "A", "graph_b_session_id": b, "object_a_id": "x", "object_b_id": "y",
                          "relation_type": "same_as"});
        let linked = call(&ctx, "link_graphs", args.clone()).await;
        assert_eq!(linked["linked"], true, "{linked}");
        let relation_id = format!("cross-link:A:x:{b}:y:same_as");
        assert_eq!(linked["relation_id"], json!(relation_id));
        for (sid, version) in [(&a, &linked["graph_a_version"]), (&b, &linked["graph_b_version"])] {
            let ids: Vec<String> = ctx.runtime.read(sid, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap();
            assert!(ids.contains(&"x".to_owned()) && ids.contains(&"y".to_owned()) && ids.contains(&relation_id));
            assert_eq!(version, &json!(ctx.runtime.list_versions(sid).await.unwrap().last().unwrap().version_id));
        }
        assert_eq!(call(&ctx, "link_graphs", args.clone()).await["error"], "relation_already_exists");

        // y exists in a third graph with other content: refused before anything is written.
        let (c, _) =
            session(&ctx, json!([node("y", "Claim", "Other", json!({"k": 2})), node("z", "Claim", "Z", json!({}))]))
                .await;
        let conflict = call(
            &ctx,
            "link_graphs",
            json!({"graph_a_session_id": b, "graph_b_session_id": c, "object_a_id": "y", "object_b_id": "z",
                   "relation_type": "near"}),
        )
        .await;
        assert_eq!(conflict["error"], "duplicate_object_conflict", "{conflict}");
        assert_eq!(ctx.runtime.list_versions(&b).await.unwrap().len(), 2, "graph A of that call was not written");

        let code = |v: Value| v["error"].as_str().unwrap().to_owned();
        let mut missing = args.clone();
        missing["relation_type"] = json!("");
        assert_eq!(code(call(&ctx, "link_graphs", missing).await), "missing_parameter");
        let mut unknown = args;
        unknown["object_a_id"] = json!("ghost");
        assert_eq!(code(call(&ctx, "link_graphs", unknown).await), "object_not_found");
    }

    #[tokio::test]
    async fn health_weighs_the_parts() {
        let ctx = context();
        let (healthy, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        call(&ctx, "register_graph", json!({"name": "ok", "session_id": healthy})).await;
        let report = call(&ctx, "check_graph_health", json!({"name": "ok"})).await;
        // 0.3 + 0.1 + 0.3 + 0.2 + 0.1 in floating point, summed in the reference's order.
        assert_eq!(report["health_score"], 0.9999999999999999, "{report}");
        assert_eq!(report["metrics"]["graph_size"], json!({"objects": 1, "relations": 0}));
        assert_eq!(report["metrics"]["ttl_freshness"], json!({"fresh": true, "score": 1.0}));

        // A Component (not confirmed current: -0.3) and one of two records checked long ago (-0.1).
        let (mixed, _) = session(
            &ctx,
            json!([
                node("c", "Component", "C", json!({"version": "1.0"})),
                node("r1", "VerificationRecord", "R1", json!({"checked_at": "2020-01-01T00:00:00"})),
                node(
                    "r2",
                    "VerificationRecord",
                    "R2",
                    json!({"checked_at": time::OffsetDateTime::now_utc()
                       .format(&time::format_description::well_known::Rfc3339).unwrap()})
                )
            ]),
        )
        .await;
        call(&ctx, "register_graph", json!({"name": "mixed", "session_id": mixed})).await;
        let report = call(&ctx, "check_graph_health", json!({"name": "mixed"})).await;
        let metrics = &report["metrics"];
        assert_eq!(metrics["version_freshness"]["total"], 1);
        assert_eq!(metrics["version_freshness"]["score"], 0.0);
        assert_eq!(
            (metrics["verification_coverage"]["fresh"].clone(), metrics["verification_coverage"]["total"].clone()),
            (json!(1), json!(2))
        );
        let score = report["health_score"].as_f64().unwrap();
        assert!((score - 0.6).abs() < 1e-9, "{report}");

        assert_eq!(call(&ctx, "check_graph_health", json!({"name": "nope"})).await, json!({"found": false}));
        ctx.runtime.close(&mixed).await.unwrap();
        let gone = call(&ctx, "check_graph_health", json!({"name": "mixed"})).await;
        assert_eq!(gone["error"], "session_not_available");
        assert_eq!(gone["found"], true);
    }

    #[tokio::test]
    async fn explain_graph_writes_the_sections() {
        use crate::tools::versions::testing::relation;
        let ctx = context();
        let (sid, _) = session(
            &ctx,
            json!([
                node("core", "Component", "core", json!({"version": "1.2", "description": "the engine"})),
                node("m1", "Module", "parser", json!({})),
                node("m2", "Module", "loose", json!({})),
                node("sw", "Sweeper", "cleaner", json!({})),
                node("ag", "Agent", "critic", json!({"handles": ["gossip", "inference"]})),
                node("t1", "Tool", "b-tool", json!({"category": "Read"})),
                node("t2", "Tool", "a-tool", json!({})),
                relation("m1-in-core", &["m1", "core"], "part_of"),
                relation("sw-resolves", &["sw", "core"], "resolves"),
                relation("c", &["m1", "m2"], "contradicts")
            ]),
        )
        .await;
        call(&ctx, "register_graph", json!({"name": "eco", "session_id": sid, "description": "An ecosystem"})).await;
        let result = call(&ctx, "explain_graph", json!({"name": "eco"})).await;
        assert_eq!(result["found"], true);
        let report = result["report"].as_str().unwrap();
        for expected in [
            "# Graph: eco\n**Description:** An ecosystem\n",
            "**Total Objects:** 7 **Total Relations:** 3",
            "## Components\n- `core` (v1.2) — the engine",
            "## Modules\n### core (1 modules)\n- `parser`\n### Other Modules (1 modules)\n- `loose`",
            "## Sweepers (1)\n- `cleaner` — resolves: core",
            "## Agents (1)\n- `critic` — handles: gossip, inference",
            "## Tools (2)\n- **Other:** a-tool\n- **Read:** b-tool",
            "## Anomalies\nNone detected",
            "- **Contradictions:** 1",
        ] {
            assert!(report.contains(expected), "{expected:?} missing from:\n{report}");
        }
        assert_eq!(call(&ctx, "explain_graph", json!({"name": "nope"})).await, json!({"found": false}));
    }

    #[tokio::test]
    async fn lifecycle_moves_as_allowed() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        call(&ctx, "register_graph", json!({"name": "g", "session_id": sid})).await;
        let moved = call(&ctx, "update_graph_lifecycle", json!({"name": "g", "state": "published"})).await;
        assert_eq!(moved, json!({"updated": true, "name": "g", "previous_state": "draft", "new_state": "published"}));
        let same = call(&ctx, "update_graph_lifecycle", json!({"name": "g", "state": "published"})).await;
        assert_eq!(same["updated"], false);
        assert_eq!(same["reason"], "already in requested state");
        let refused = call(&ctx, "update_graph_lifecycle", json!({"name": "g", "state": "draft"})).await;
        assert_eq!(refused["error"], "invalid_state_transition");
        assert_eq!(refused["allowed"], json!(["active", "under_review", "archived"]));
        assert_eq!(refused["previous_state"], "published");
        assert_eq!(call(&ctx, "get_graph", json!({"name": "g"})).await["lifecycle_state"], "published");
        let unknown = call(&ctx, "update_graph_lifecycle", json!({"name": "h", "state": "active"})).await;
        assert_eq!(unknown["error"], "graph_not_found");
        let bad = call(&ctx, "update_graph_lifecycle", json!({"name": "g", "state": "retired"})).await;
        assert_eq!(bad["error"], "invalid_parameter");
    }

    #[tokio::test]
    async fn a_large_gallery_comes_a_page_at_a_time() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let description = "a graph of planets and the probes that visited them ".repeat(8);
        for i in 0..300 {
            let name = format!("graph {i:03}");
            let args = json!({"name": name, "session_id": sid, "description": description, "public": true});
            assert_eq!(call(&ctx, "register_graph", args).await["registered"], true);
        }
        let all = call(&ctx, "list_graphs", json!({"limit": 0})).await;
        assert_eq!(names(&all).len(), 300);
        let mut seen = Vec::new();
        let mut offset = json!(0);
        while !offset.is_null() {
            let page = call(&ctx, "list_graphs", json!({"offset": offset})).await;
            assert!(serde_json::to_string(&page).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
            seen.extend(names(&page).into_iter().map(str::to_owned));
            offset = page.get("next_offset").cloned().unwrap_or_default();
        }
        assert_eq!(seen, names(&all), "the pages, in order, are the whole list");
        assert_eq!(call(&ctx, "list_graphs", json!({})).await["truncated"], true);
        let found = call(&ctx, "search_graphs", json!({"query": "graph 2", "limit": 3, "offset": 1})).await;
        assert_eq!(names(&found).len(), 3);
        assert_eq!(found["next_offset"], 4);
    }
}
