//! Input schemas: derived with `schemars`, then normalised so every LLM provider accepts them
//! (no `$ref`, no `$schema`, no `title`, optional fields not nullable). Output schemas: derived
//! from each tool's result type and widened to admit the business-error object every tool may
//! return instead.
//!
//! Fields whose Rust type is a free-form `serde_json::Value` get their schema from the helpers
//! here (`#[schemars(schema_with = "...")]`), so every property still declares a type.

use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};

/// The normalised input schema of `T`.
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("title");
        map.remove("$schema");
        map.remove("definitions");
        map.entry("properties").or_insert_with(|| Value::Object(Map::new()));
        map.insert("type".into(), Value::String("object".into()));
    }
    normalise(&mut schema);
    schema
}

/// The published `outputSchema` of a tool whose result is `T`: `T`'s object schema, or the
/// `{"error", "message", ...}` object of a business error (those are results too, so
/// `structuredContent` conforms either way). `None` when `T` is not an object (MCP output schemas
/// describe objects only).
pub fn output_schema<T: JsonSchema>() -> Option<Value> {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut success = generator.into_root_schema_for::<T>().to_value();
    let map = success.as_object_mut()?;
    // A result that is one of several object shapes (an untagged enum) is an object too.
    let alternatives_are_objects = ["anyOf", "oneOf"].iter().any(|key| {
        map.get(*key)
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.iter().all(|b| b.get("type").and_then(Value::as_str) == Some("object")))
    });
    if map.get("type").and_then(Value::as_str) != Some("object") && !alternatives_are_objects {
        return None;
    }
    map.remove("title");
    let defs = map.remove("$defs");
    let mut schema = json!({
        "type": "object",
        "anyOf": [success, {
            "type": "object",
            "description": "A business error: the tool did not do what was asked, and says why.",
            "properties": {
                "error": {"type": "string", "description": "The error code, e.g. 'session_not_found'."},
                "message": {"type": "string"}
            },
            "required": ["error", "message"]
        }]
    });
    if let (Some(defs), Value::Object(root)) = (defs, &mut schema) {
        root.insert("$defs".into(), defs);
    }
    Some(schema)
}

/// Removes `null` from type unions (optional arguments are simply omitted) and `format`
/// annotations schemars adds for integers.
fn normalise(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    map.insert("type".into(), only);
                }
            }
            if map.get("format").and_then(Value::as_str).is_some_and(|f| f.starts_with("uint") || f.starts_with("int"))
            {
                map.remove("format");
            }
            map.remove("default").filter(|d| d.is_null());
            map.values_mut().for_each(normalise);
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// `json_data`: a knowledge structure as a JSON string (the reference's form; one type keeps the
/// schema usable by every LLM provider).
pub fn json_data(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(json!({
        "type": "string",
        "description": "A knowledge structure as a JSON string in canonical CKS JSON: {\"version\": \"1.0\", \"objects\": [{\"identity\": {\"id\", \"type\", \"name\"}, \"structure\": {...}}]}. Relations are objects whose structure has 'participants' (object ids) and 'relation_type'."
    }))
    .expect("a schema object")
}

/// A free-form JSON object.
pub fn object(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(json!({"type": "object"})).expect("a schema object")
}

/// A list of evolution operations.
pub fn operations(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(json!({
        "type": "array",
        "items": {"type": "object"},
        "description": "Evolution operations, each an object with 'type': add_object{identity, structure?}, add_relation{identity, participants, relation_type, structure?}, remove_object{object_id}, remove_relation{relation_id}, update_object{object_id, structure_patch, mode: merge|replace}, rename_object{object_id, new_name}, record_inference{identity, structure}, resolve_inference_conflict{conclusion_id, winner_id}."
    }))
    .expect("a schema object")
}

/// A map from object type to a numeric weight.
pub fn number_map(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(json!({"type": "object", "additionalProperties": {"type": "number"}})).expect("a schema object")
}
