//! Registry-wide checks: schema snapshots, provider compatibility of every schema, session-field
//! declarations, and the call pipeline (argument checks, session checks, panic boundary).

use cks_tools::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::{ArgumentCode, Coercion, Registry, SessionCheck, Tool, ToolContext, ToolError, ToolMeta};

fn context() -> ToolContext {
    ToolContext::new(Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default())))
}

/// The schemas each standard tool derives from its types equal the committed ones
/// (`schemas/tools.json`, which the server publishes);
/// `UPDATE_SCHEMA=1 cargo test -p cks-tools --test registry` refreshes them.
#[test]
fn schemas_match_the_committed_snapshot() {
    let registry = Registry::standard();
    let current: Vec<Value> = registry
        .iter()
        .map(|t| {
            let m = t.meta();
            let hints = t.hints();
            json!({
                "name": m.name,
                "title": hints.title,
                "description": m.description,
                "inputSchema": t.tool.input_schema(),
                "outputSchema": t.tool.output_schema(),
                "mutates_graph": m.mutates_graph,
                "creates_session": m.creates_session,
                "destructive": m.destructive,
                "hints": {
                    "read_only": hints.read_only,
                    "destructive": hints.destructive,
                    "idempotent": hints.idempotent,
                    "open_world": hints.open_world,
                },
                "session_fields": m.session_fields,
                "llm_exposed": m.llm_exposed,
            })
        })
        .collect();
    let text = serde_json::to_string_pretty(&current).unwrap() + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/tools.json");
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == text, "tool schemas changed; review and refresh with UPDATE_SCHEMA=1\n{text}");
    // What the registry publishes is what the types derive (the committed text, as built in).
    for t in registry.iter() {
        assert_eq!(Value::Object(Map::clone(t.schema())), t.tool.input_schema(), "{}", t.meta().name);
        let published = t.output_schema().map(|schema| Value::Object(Map::clone(schema)));
        assert_eq!(published, t.tool.output_schema(), "{}", t.meta().name);
    }
}

/// Every standard tool has a title of its own, short enough for a host's list, and its hints
/// agree with what the access rules know of it.
#[test]
fn every_tool_is_titled_and_its_hints_agree_with_its_scope() {
    let registry = Registry::standard();
    let mut titles = std::collections::BTreeMap::new();
    for tool in registry.iter() {
        let (meta, hints) = (tool.meta(), tool.hints());
        assert!(!hints.title.trim().is_empty(), "{} has no title", meta.name);
        assert!(hints.title.len() <= 40, "{}'s title is long: {}", meta.name, hints.title);
        assert!(hints.title.starts_with(char::is_uppercase), "{}: {}", meta.name, hints.title);
        if let Some(other) = titles.insert(hints.title, meta.name) {
            panic!("{} and {other} share the title {}", meta.name, hints.title);
        }
        // A tool that needs `cks:write` changes something; a host hears the same. (Administration
        // may only read: `list_api_keys` is for `cks:admin` because of what it shows.)
        if cks_tools::Scope::for_tool(meta) == cks_tools::Scope::Write {
            assert!(!hints.read_only, "{} needs a write scope but is listed read-only", meta.name);
        }
        if hints.destructive {
            assert!(!hints.read_only, "{} is destructive and read-only", meta.name);
        }
    }
}

/// Walks a schema and reports what one of the four LLM providers would reject or misread.
fn lint(path: &str, schema: &Value, problems: &mut Vec<String>) {
    let Value::Object(map) = schema else {
        problems.push(format!("{path}: schema is not an object"));
        return;
    };
    for key in ["$ref", "$defs", "definitions", "$schema", "allOf", "oneOf"] {
        if map.contains_key(key) {
            problems.push(format!("{path}: uses '{key}'"));
        }
    }
    if !map.contains_key("type") && !map.contains_key("anyOf") {
        problems.push(format!("{path}: has no type"));
    }
    if map.get("type").is_some_and(Value::is_array) {
        problems.push(format!("{path}: a type union (Gemini takes one type)"));
    }
    let is_array =
        map.get("type").is_some_and(|t| t == "array" || t.as_array().is_some_and(|a| a.iter().any(|x| x == "array")));
    if is_array {
        match map.get("items") {
            Some(items) if items.get("type").is_some() => lint(&format!("{path}[]"), items, problems),
            _ => problems.push(format!("{path}: array without typed items")),
        }
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        for (name, property) in properties {
            lint(&format!("{path}.{name}"), property, problems);
        }
    }
    if let Some(additional @ Value::Object(_)) = map.get("additionalProperties") {
        lint(&format!("{path}.*"), additional, problems);
    }
}

#[test]
fn every_schema_works_for_every_provider() {
    let registry = Registry::standard();
    assert!(registry.len() >= 3);
    let mut problems = Vec::new();
    for tool in registry.iter() {
        lint(tool.meta().name, &Value::Object(Map::clone(tool.schema())), &mut problems);
        assert_eq!(tool.schema()["type"], "object", "{}", tool.meta().name);
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The lint itself catches what it should.
    let mut found = Vec::new();
    lint(
        "bad",
        &json!({"type": "object", "properties": {"a": {"type": "array"}, "b": {}, "c": {"$ref": "#/x"}, "d": {"type": ["string", "null"]}}}),
        &mut found,
    );
    assert_eq!(found.len(), 5, "{found:?}");
}

fn names_a_session(property: &str) -> bool {
    property == "session_id" || property.ends_with("_session_id") || property.contains("session")
}

#[test]
fn every_session_property_is_declared() {
    for tool in Registry::standard().iter() {
        let meta = tool.meta();
        let properties = tool.schema()["properties"].as_object().unwrap();
        for name in properties.keys().filter(|n| names_a_session(n)) {
            assert!(meta.session_fields.contains(&name.as_str()), "{}: '{name}' not in session_fields", meta.name);
        }
        for field in meta.session_fields {
            assert!(properties.contains_key(*field), "{}: session field '{field}' is not an argument", meta.name);
        }
        for check in meta.session_checks {
            assert!(meta.session_fields.contains(&check.field), "{}: checked field not declared", meta.name);
        }
    }
}

/// What an argument of this name refers to, when it is a chat, a task or a registered graph.
fn names_a_thing(tool: &str, property: &str) -> Option<cks_tools::Named> {
    use cks_tools::Named;
    match property {
        "chat_id" => Some(Named::Chat),
        "task_id" => Some(Named::Task),
        "graph_name" | "base_graph_name" | "graph_a_name" | "graph_b_name" | "copy_name" | "register_as" => {
            Some(Named::Graph)
        }
        // The gallery's tools name their graph `name`.
        "name" if tool.contains("graph") || tool == "check_component_versions" => Some(Named::Graph),
        _ => None,
    }
}

#[test]
fn every_chat_task_and_graph_argument_is_declared() {
    for tool in Registry::standard().iter() {
        let meta = tool.meta();
        let properties = tool.schema()["properties"].as_object().unwrap();
        for name in properties.keys() {
            if let Some(kind) = names_a_thing(meta.name, name) {
                // A graph the tool only reads counts as a graph it names.
                let declared = tool.tool.named().iter().any(|(field, named)| {
                    field == name
                        && (*named == kind
                            || (kind == cks_tools::Named::Graph && *named == cks_tools::Named::GraphSource))
                });
                assert!(declared, "{}: '{name}' names a {kind:?} but is not declared in NAMED", meta.name);
            }
        }
        for (field, _) in tool.tool.named() {
            assert!(properties.contains_key(*field), "{}: named field '{field}' is not an argument", meta.name);
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ProbeInput {
    #[allow(dead_code)] // checked by the registry before the handler runs
    session_id: String,
    count: Option<u32>,
    #[serde(default)]
    explode: bool,
}

#[derive(Serialize, JsonSchema)]
struct ProbeOutput {
    count: Option<u32>,
}

struct Probe;

#[async_trait::async_trait]
impl Tool for Probe {
    type Input = ProbeInput;
    type Output = ProbeOutput;
    const META: ToolMeta = ToolMeta {
        name: "probe",
        description: "test tool",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, _ctx: &ToolContext, input: ProbeInput) -> Result<ProbeOutput, ToolError> {
        if input.explode {
            panic!("boom");
        }
        Ok(ProbeOutput { count: input.count })
    }
}

#[test]
fn typed_results_publish_an_output_schema_that_admits_errors_too() {
    let mut registry = Registry::standard();
    registry.register(Arc::new(Probe));
    let probe = registry.get("probe").unwrap();
    let schema = probe.output_schema().expect("an object result publishes its schema");
    assert_eq!(schema["type"], "object");
    let count = &schema["anyOf"][0]["properties"]["count"];
    assert_eq!(count["anyOf"], json!([{"type": "integer", "minimum": 0}, {"type": "null"}]), "{count}");
    assert!(probe.check_output(&json!({"count": 3})).is_ok());
    assert!(probe.check_output(&json!({"count": null})).is_ok());
    assert!(probe.check_output(&json!({"error": "session_not_found", "message": "gone"})).is_ok());
    let mismatch = probe.check_output(&json!({"count": "three"})).unwrap_err();
    assert!(mismatch.contains("probe") && mismatch.contains("/count"), "{mismatch}");
}

#[tokio::test]
async fn calls_are_checked_and_panics_are_contained() {
    let mut registry = Registry::standard();
    registry.register(Arc::new(Probe));
    let ctx = context();
    let session = ctx.runtime.create_session(Default::default(), Default::default()).await.unwrap().session_id;

    let call = |args: Value| {
        let (registry, ctx) = (&registry, &ctx);
        async move { registry.call("probe", args, ctx).await.unwrap() }
    };
    assert_eq!(call(json!({})).await["error"], "missing_parameter");
    assert_eq!(call(json!({})).await["message"], "Missing required parameter: 'session_id'.");
    let wrong = call(json!({"session_id": session, "count": "three"})).await;
    assert_eq!(wrong["error"], "invalid_parameter");
    assert_eq!(wrong["parameter"], "count");
    assert_eq!(call(json!({"session_id": "nope"})).await["error"], "session_not_found");
    assert_eq!(call(json!({"session_id": session, "count": 3})).await, json!({"count": 3}));
    assert_eq!(call(json!({"session_id": session, "count": null})).await, json!({"count": null}), "null means absent");
    let boom = call(json!({"session_id": session, "explode": true})).await;
    assert_eq!(boom["error"], "internal_error");
    assert!(boom["message"].as_str().unwrap().contains("boom"));
    assert_eq!(call(json!({"session_id": session, "count": 1})).await, json!({"count": 1}), "still serving");
    ctx.runtime.close(&session).await.unwrap();
    assert_eq!(call(json!({"session_id": session})).await["error"], "session_not_found", "a closed session is gone");
    assert_eq!(registry.call("no_such_tool", json!({}), &ctx).await.unwrap_err().0, "no_such_tool");
    assert_eq!(call(json!([1])).await["error"], "invalid_parameter");
}

/// Reports what makes a published schema less portable than it could be: a bare `true`, a schema
/// that constrains nothing, a `type` union, a format JSON Schema does not define (validators warn
/// of each, and MCP Inspector's strict mode rejects bare schemas), or an enum value of another type.
fn portability(path: &str, schema: &Value, problems: &mut Vec<String>) {
    let Value::Object(map) = schema else {
        if *schema == Value::Bool(true) {
            problems.push(format!("{path}: bare true"));
        }
        return;
    };
    let constraining = ["type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "$ref", "properties", "items"];
    if !constraining.iter().any(|k| map.contains_key(*k)) {
        problems.push(format!("{path}: constrains nothing"));
    }
    if map.get("type").is_some_and(Value::is_array) {
        problems.push(format!("{path}: a type union"));
    }
    let standard = ["date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid"];
    if let Some(format) = map.get("format").and_then(Value::as_str)
        && !standard.contains(&format)
    {
        problems.push(format!("{path}: format {format}"));
    }
    if let (Some(Value::String(t)), Some(Value::Array(values))) = (map.get("type"), map.get("enum")) {
        let of_type = |v: &Value| match t.as_str() {
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            _ => true,
        };
        if !values.iter().all(of_type) {
            problems.push(format!("{path}: an enum value that is not a {t}"));
        }
    }
    for key in ["properties", "$defs"] {
        if let Some(Value::Object(schemas)) = map.get(key) {
            schemas.iter().for_each(|(name, s)| portability(&format!("{path}.{name}"), s, problems));
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(schemas)) = map.get(key) {
            schemas.iter().enumerate().for_each(|(i, s)| portability(&format!("{path}.{key}[{i}]"), s, problems));
        }
    }
    if let Some(items) = map.get("items") {
        portability(&format!("{path}[]"), items, problems);
    }
    if let Some(additional @ Value::Object(_)) = map.get("additionalProperties") {
        portability(&format!("{path}.*"), additional, problems);
    }
}

#[test]
fn every_published_schema_is_portable() {
    let registry = Registry::standard();
    let mut problems = Vec::new();
    for tool in registry.iter() {
        let name = tool.meta().name;
        portability(&format!("{name} input"), &Value::Object(Map::clone(tool.schema())), &mut problems);
        if let Some(output) = tool.output_schema() {
            portability(&format!("{name} output"), &Value::Object(Map::clone(output)), &mut problems);
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The check itself finds what it should.
    let mut found = Vec::new();
    let bad = json!({"type": "object", "properties": {
        "a": true, "b": {"description": "x"}, "c": {"type": ["string", "null"]},
        "d": {"type": "integer", "format": "uint64"}, "e": {"type": "string", "enum": ["x", null]},
    }});
    portability("bad", &bad, &mut found);
    assert_eq!(found.len(), 5, "{found:?}");
}

/// Every tool's result is typed and published, so clients can rely on `structuredContent`; the one
/// exception is `serialize_knowledge`, whose result for `json_data` is the bare document text (as
/// the reference's), which MCP output schemas (objects only) cannot describe.
#[test]
fn every_tool_publishes_its_result_shape() {
    let registry = Registry::standard();
    let unpublished: Vec<&str> =
        registry.iter().filter(|t| t.output_schema().is_none()).map(|t| t.meta().name).collect();
    assert_eq!(unpublished, ["serialize_knowledge"]);
    for tool in registry.iter() {
        if let Some(schema) = tool.output_schema() {
            assert_eq!(schema["type"], "object", "{}", tool.meta().name);
            assert!(tool.check_output(&json!({"error": "session_not_found", "message": "x"})).is_ok());
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CodedInput {
    #[allow(dead_code)] // checked by the registry before the handler runs
    session_id: String,
    #[allow(dead_code)]
    items: Vec<String>,
    #[allow(dead_code)]
    count: Option<u32>,
}

/// A tool that declares its own codes for faults in `items`.
struct Coded;

#[async_trait::async_trait]
impl Tool for Coded {
    type Input = CodedInput;
    type Output = ProbeOutput;
    const ARGUMENT_CODES: &'static [ArgumentCode] =
        &[ArgumentCode::malformed("items", ErrorCode::BadItems), ArgumentCode::missing("items", ErrorCode::NoItems)];
    const META: ToolMeta = ToolMeta {
        name: "coded",
        description: "test tool with declared argument codes",
        session_checks: &[SessionCheck::exists("session_id")],
        ..Probe::META
    };

    async fn run(&self, _ctx: &ToolContext, _input: CodedInput) -> Result<ProbeOutput, ToolError> {
        Ok(ProbeOutput { count: None })
    }
}

#[tokio::test]
async fn declared_argument_codes_replace_the_generic_ones() {
    let mut registry = Registry::standard();
    registry.register(Arc::new(Coded));
    let ctx = context();
    let session = ctx.runtime.create_session(Default::default(), Default::default()).await.unwrap().session_id;
    let call = |args: Value| {
        let (registry, ctx) = (&registry, &ctx);
        async move { registry.call("coded", args, ctx).await.unwrap() }
    };

    let missing = call(json!({"session_id": session})).await;
    assert_eq!(missing["error"], "no_items");
    assert_eq!(missing["parameter"], "items");
    assert_eq!(call(json!({"session_id": session, "items": "one"})).await["error"], "bad_items");
    assert_eq!(call(json!({"session_id": session, "items": [1]})).await["error"], "bad_items", "a bad item too");
    let other = call(json!({"session_id": session, "items": [], "count": "x"})).await;
    assert_eq!(other["error"], "invalid_parameter", "undeclared arguments keep the generic code");
    let number = call(json!({"session_id": 5, "items": []})).await;
    assert_eq!(number["error"], "session_not_found", "a session argument that is not a string names no session");
    assert_eq!(number["session_id"], "5");
    assert_eq!(call(json!({"items": []})).await["error"], "missing_parameter");
    assert_eq!(call(json!({"session_id": session, "items": []})).await, json!({"count": null}));
}

#[tokio::test]
async fn standard_tools_answer_their_designed_codes_for_bad_arguments() {
    let registry = Registry::standard();
    let ctx = context();
    let session = ctx.runtime.create_session(Default::default(), Default::default()).await.unwrap().session_id;
    let cases = [
        ("list_versions", json!({"session_id": 42}), "session_not_found"),
        ("merge_branch", json!({"target_session_id": session}), "session_not_found"),
        ("merge_branch", json!({"target_session_id": 1, "source_session_id": 2}), "session_not_found"),
        ("validate_knowledge", json!({"json_data": "{}", "extensions": "confidence_bounds"}), "unknown_extension"),
        ("validate_knowledge", json!({"json_data": 5}), "invalid_json"),
        ("evolve_knowledge", json!({"session_id": session, "operations": "add"}), "invalid_operations"),
        (
            "evolve_knowledge",
            json!({"session_id": session, "operations": {"type": "add_object"}}),
            "invalid_operations",
        ),
        ("create_branch", json!({"session_id": session, "version_id": 3}), "branch_failed"),
        ("search_semantic", json!({"session_id": session}), "empty_query"),
    ];
    for (tool, args, code) in cases {
        let result = registry.call(tool, args.clone(), &ctx).await.unwrap();
        assert_eq!(result["error"], code, "{tool} {args}: {result}");
    }
}

#[test]
fn coercions_rewrite_only_the_forms_they_name() {
    assert_eq!(Coercion::ListOfOne.apply(&json!("sun")), Some(json!(["sun"])));
    assert_eq!(Coercion::ListOfOne.apply(&json!(["sun"])), None);
    assert_eq!(Coercion::ListOfOne.apply(&json!(5)), None, "left for the schema check to refuse");
    for (value, truthy) in [
        (json!("yes"), true),
        (json!(""), false),
        (json!(0), false),
        (json!(2), true),
        (json!([]), false),
        (json!({"a": 1}), true),
    ] {
        assert_eq!(Coercion::Truthy.apply(&value), Some(json!(truthy)), "{value}");
    }
    assert_eq!(Coercion::Truthy.apply(&json!(true)), None);
    assert_eq!(Coercion::Text.apply(&json!(5)), Some(json!("5")));
    assert_eq!(Coercion::Text.apply(&json!("five")), None);
    assert_eq!(Coercion::JsonText.apply(&json!({"objects": []})), Some(json!("{\"objects\":[]}")));
    assert_eq!(Coercion::JsonText.apply(&json!(5)), None);
}

#[tokio::test]
async fn standard_tools_accept_what_the_reference_accepts() {
    let registry = Registry::standard();
    let ctx = context();
    let call = |name: &'static str, args: Value| {
        let (registry, ctx) = (&registry, &ctx);
        async move { registry.call(name, args, ctx).await.unwrap() }
    };
    let doc = json!({"objects": [{"identity": {"id": "sun", "type": "Star", "name": "Sun"}, "structure": {}}]});
    let validated = call("validate_knowledge", json!({"json_data": doc})).await;
    assert_eq!(validated["valid"], true, "a decoded document: {validated}");
    let session = validated["session_id"].clone();
    let queried = call("query_subgraph", json!({"session_id": session, "seed_ids": "sun"})).await;
    assert_eq!(queried["total_found_nodes"], 1, "one seed given as a string: {queried}");
    let exported = call("export_session", json!({"session_id": session, "include_structures": "yes"})).await;
    assert!(exported.get("error").is_none(), "{exported}");
    let forked = call("fork_sandbox", json!({"session_id": session, "hypothesis": 5})).await;
    assert_eq!(forked["hypothesis"], "5", "{forked}");
    let status = call("get_llm_status", json!({"unexpected": 1})).await;
    assert!(status.get("error").is_none(), "extra arguments are ignored: {status}");
}
