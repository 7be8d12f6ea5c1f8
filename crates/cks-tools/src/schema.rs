//! Input schemas: derived with `schemars`, then normalised so every LLM provider accepts them
//! (no `$ref`, no `$schema`, no `title`, optional fields not nullable). Output schemas: derived
//! from each tool's result type and widened to admit the business-error object every tool may
//! return instead. Both are portable: only the formats JSON Schema defines (validators warn of
//! schemars' `uint64` and the like), one `type` per schema (a nullable value is an `anyOf` with a
//! `null` branch), and no schema that constrains nothing (a bare `true`: any JSON value is an
//! `anyOf` of every type).
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
    portable(&mut success);
    let map = success.as_object_mut()?;
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

/// Removes `null` from type unions and enums (optional arguments are simply omitted) and the
/// formats JSON Schema does not define.
fn normalise(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    map.insert("type".into(), only);
                }
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    values.retain(|v| !v.is_null());
                }
            }
            drop_unknown_format(map);
            map.remove("default").filter(|d| d.is_null());
            map.values_mut().for_each(normalise);
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// The formats JSON Schema (2020-12) defines; validators warn of any other, such as the
/// `uint64` or `double` schemars writes for Rust's number types.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

fn drop_unknown_format(map: &mut Map<String, Value>) {
    if map.get("format").and_then(Value::as_str).is_some_and(|format| !STANDARD_FORMATS.contains(&format)) {
        map.remove("format");
    }
}

/// Keywords that say something of a value; a schema with none of them accepts anything.
const CONSTRAINING_KEYWORDS: [&str; 13] = [
    "type",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "$ref",
    "properties",
    "items",
    "prefixItems",
    "additionalProperties",
    "patternProperties",
];

/// Keywords that describe a schema rather than constrain it: they stay beside the branches when
/// a nullable schema is split.
const ANNOTATIONS: [&str; 7] = ["description", "title", "default", "examples", "deprecated", "readOnly", "writeOnly"];

/// Any JSON value, with one `type` to each branch.
fn any_value() -> Value {
    let branches = ["object", "array", "string", "number", "boolean", "null"].map(|t| json!({"type": t}));
    json!({"anyOf": branches})
}

/// Makes a derived schema portable (see the module's doc), in every place that holds a schema.
fn portable(schema: &mut Value) {
    let Value::Object(map) = schema else {
        // `true` accepts anything: say so. (`false` stays: it is a real constraint.)
        if *schema == Value::Bool(true) {
            *schema = any_value();
        }
        return;
    };
    drop_unknown_format(map);
    for key in ["properties", "$defs", "patternProperties"] {
        if let Some(Value::Object(schemas)) = map.get_mut(key) {
            schemas.values_mut().for_each(portable);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(schemas)) = map.get_mut(key) {
            schemas.iter_mut().for_each(portable);
        }
    }
    for key in ["items", "not", "additionalProperties"] {
        match map.get_mut(key) {
            // `additionalProperties: true` is the usual spelling of an open object, not a bare schema.
            Some(Value::Bool(true)) if key == "additionalProperties" => {}
            Some(inner) => portable(inner),
            None => {}
        }
    }
    if let Some(Value::Array(types)) = map.get("type") {
        let types: Vec<Value> = types.clone();
        match types.as_slice() {
            [only] => {
                map.insert("type".into(), only.clone());
            }
            _ => split_types(map, &types),
        }
    } else if !CONSTRAINING_KEYWORDS.iter().any(|k| map.contains_key(*k)) {
        map.extend(any_value().as_object().cloned().unwrap_or_default());
    }
}

/// Rewrites `{"type": [a, b, ...], ...}` as `{"anyOf": [{"type": a, ...}, {"type": b, ...}]}`:
/// each branch keeps the constraints (those of other types do not apply to it), and an enum
/// keeps in each branch the values of its type.
fn split_types(map: &mut Map<String, Value>, types: &[Value]) {
    map.remove("type");
    let enum_values = map.remove("enum");
    let constraints: Map<String, Value> = map
        .iter()
        .filter(|(key, _)| !ANNOTATIONS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    map.retain(|key, _| ANNOTATIONS.contains(&key.as_str()));
    let branches: Vec<Value> = types
        .iter()
        .map(|t| {
            let mut branch = if t == "null" { Map::new() } else { constraints.clone() };
            branch.insert("type".into(), t.clone());
            if let Some(Value::Array(values)) = &enum_values {
                let of_type: Vec<Value> = values.iter().filter(|v| json_type_is(v, t)).cloned().collect();
                if t != "null" {
                    branch.insert("enum".into(), Value::Array(of_type));
                }
            }
            Value::Object(branch)
        })
        .collect();
    map.insert("anyOf".into(), Value::Array(branches));
}

/// Whether `value` is of the JSON Schema type named `t`.
fn json_type_is(value: &Value, t: &Value) -> bool {
    match t.as_str() {
        Some("null") => value.is_null(),
        Some("boolean") => value.is_boolean(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => false,
    }
}

/// `json_data`: a knowledge structure as a JSON string (the reference's form; one type keeps the
/// schema usable by every LLM provider).
pub fn json_data(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(json!({
        "type": "string",
        "description": "The structure as CKS JSON text: {version: '1.0', objects: [{identity: {id, type, name}, structure: {...}}]}; a relation's structure has participants (ids) and relation_type."
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
        "description": "Each an object with a 'type': add_object{identity, structure?}, add_relation{identity, participants, relation_type, structure?}, remove_object{object_id}, remove_relation{relation_id}, update_object{object_id, structure_patch, mode: merge|replace}, rename_object{object_id, new_name}, record_inference{identity, structure}, resolve_inference_conflict{conclusion_id, winner_id}."
    }))
    .expect("a schema object")
}

/// A map from object type to a numeric weight.
pub fn number_map(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(json!({"type": "object", "additionalProperties": {"type": "number"}})).expect("a schema object")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_types_become_branches_that_keep_their_constraints_and_enum_values() {
        let mut schema = json!({
            "description": "A mode.",
            "type": ["string", "null"],
            "enum": ["fast", "slow", null],
            "minLength": 1,
        });
        portable(&mut schema);
        assert_eq!(
            schema,
            json!({
                "description": "A mode.",
                "anyOf": [{"type": "string", "enum": ["fast", "slow"], "minLength": 1}, {"type": "null"}],
            })
        );
    }

    #[test]
    fn schemas_that_constrain_nothing_say_they_accept_any_value() {
        let mut schema = json!({
            "type": "object",
            "properties": {"payload": true, "note": {"description": "Anything."}, "count": {"type": "integer", "format": "uint64"}},
            "additionalProperties": true,
            "items": false,
        });
        portable(&mut schema);
        assert_eq!(schema["properties"]["payload"], any_value());
        assert_eq!(schema["properties"]["note"]["description"], "Anything.");
        assert_eq!(schema["properties"]["note"]["anyOf"], any_value()["anyOf"]);
        assert_eq!(schema["properties"]["count"], json!({"type": "integer"}));
        assert_eq!(schema["additionalProperties"], true, "an open object keeps its usual spelling");
        assert_eq!(schema["items"], false);
    }

    #[test]
    fn standard_formats_stay_and_others_go() {
        let mut schema = json!({"type": "object", "properties": {
            "at": {"type": "string", "format": "date-time"},
            "weight": {"type": "number", "format": "double"},
        }});
        portable(&mut schema);
        assert_eq!(schema["properties"]["at"]["format"], "date-time");
        assert!(schema["properties"]["weight"].get("format").is_none());
    }

    #[test]
    fn input_enums_lose_null_with_their_type() {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        enum Mode {
            #[serde(rename = "a")]
            A,
            #[serde(rename = "b")]
            B,
        }
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Input {
            mode: Option<Mode>,
            weight: Option<f64>,
        }
        let schema = input_schema::<Input>();
        let mode = &schema["properties"]["mode"];
        assert_eq!(mode["type"], "string", "{schema}");
        assert!(mode["enum"].as_array().unwrap().iter().all(Value::is_string), "{schema}");
        assert!(schema["properties"]["weight"].get("format").is_none(), "{schema}");
    }
}
