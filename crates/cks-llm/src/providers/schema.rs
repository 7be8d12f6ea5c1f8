//! Schema adaptation for Gemini, applied on the way out only (the caller's schemas are never changed): tool
//! parameters, and output schemas.
//!
//! Tool parameters:
//! Gemini's `FunctionDeclaration.parameters` is Google's `Schema` message (an OpenAPI 3.0 subset backed by
//! protobuf), not JSON Schema: any keyword it does not know fails the whole request with 400 "Cannot find
//! field". So the schema is rebuilt from an allowlist rather than by deleting known-bad keys: `$ref` is
//! inlined from `$defs`/`definitions` (cycles cut at a depth bound), `anyOf`/`oneOf`/`allOf` are collapsed,
//! `type: [X, "null"]` becomes `type: X, nullable: true`, `const` becomes a one-value `enum`, formats Gemini
//! rejects are dropped, arrays get `items`, and types are written in the proto's upper case. Property *names*
//! are never treated as keywords (a property called `default` survives).
//!
//! Output schemas go to `generationConfig.responseJsonSchema`, which takes JSON Schema but of which Google
//! documents only some keywords as supported (listed in [`RESPONSE_KEYWORDS`]), and beside `$ref` only
//! keywords starting with `$`. The schema keeps its structure (`$ref`s, `anyOf`, `additionalProperties` stay) and
//! loses the rest, at every depth: `const` becomes a one-value `enum`, `allOf` members are merged into their
//! schema (a lone `$ref` member stands for it; `$ref` members beside others are dropped), `definitions` become
//! `$defs` (and `#/definitions/` references `#/$defs/`), tuple `items` (an array) become `prefixItems`, and
//! every other keyword (`$schema`, `pattern`, `minLength`, `exclusiveMinimum`, `not`, ...) is dropped, so the
//! model is only ever held to constraints Gemini applies. Property names are never treated as keywords.

use serde_json::{Map, Value, json};

/// Nested `$ref` expansion stops here; deeper (recursive) references become a plain object.
const MAX_REF_DEPTH: usize = 12;

/// The Gemini `parameters` for a tool's JSON Schema.
pub(crate) fn gemini_parameters(schema: &Value) -> Value {
    let defs = collect_defs(schema);
    let mut out = convert(schema, &defs, 0);
    if let Value::Object(map) = &mut out
        && !map.contains_key("type")
    {
        map.insert("type".into(), json!("OBJECT"));
    }
    out
}

fn collect_defs(schema: &Value) -> Map<String, Value> {
    let mut defs = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(m)) = schema.get(key) {
            for (k, v) in m {
                defs.insert(format!("#/{key}/{k}"), v.clone());
            }
        }
    }
    defs
}

fn convert(node: &Value, defs: &Map<String, Value>, depth: usize) -> Value {
    let Value::Object(src) = node else {
        // `true` / `{}`-like schemas: anything goes; Gemini needs a type, and a string is the loosest.
        return json!({"type": "STRING"});
    };
    // Inline a reference, keeping a sibling description.
    if let Some(Value::String(r)) = src.get("$ref") {
        let target = defs.get(r).filter(|_| depth < MAX_REF_DEPTH);
        let mut out = match target {
            Some(t) => convert(t, defs, depth + 1),
            None => json!({"type": "OBJECT"}),
        };
        if let (Some(d), Value::Object(m)) = (src.get("description"), &mut out) {
            m.insert("description".into(), d.clone());
        }
        return out;
    }
    // Collapse combinators into one schema.
    if let Some(merged) = collapse(src) {
        return convert(&merged, defs, depth + 1);
    }

    let mut out = Map::new();
    let mut nullable = src.get("nullable").and_then(Value::as_bool).unwrap_or(false);
    let ty = match src.get("type") {
        Some(Value::String(t)) => Some(t.to_ascii_lowercase()),
        Some(Value::Array(ts)) => {
            let names: Vec<String> = ts.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase).collect();
            nullable |= names.iter().any(|t| t == "null");
            names.into_iter().find(|t| t != "null")
        }
        _ => None,
    }
    .or_else(|| infer_type(src));
    if let Some(t) = &ty {
        out.insert("type".into(), json!(t.to_ascii_uppercase()));
    }
    if nullable {
        out.insert("nullable".into(), json!(true));
    }
    for key in ["description", "pattern"] {
        if let Some(v @ Value::String(_)) = src.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    for key in ["minimum", "maximum"] {
        if let Some(v @ Value::Number(_)) = src.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    for key in ["minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"] {
        if let Some(v) = src.get(key).and_then(Value::as_u64) {
            // Proto int64 fields are JSON strings in Google's encoding, but numbers are accepted too.
            out.insert(key.into(), json!(v));
        }
    }
    if let Some(Value::String(f)) = src.get("format") {
        let ok = match ty.as_deref() {
            Some("string") => matches!(f.as_str(), "enum" | "date-time"),
            Some("number") => matches!(f.as_str(), "float" | "double"),
            Some("integer") => matches!(f.as_str(), "int32" | "int64"),
            _ => false,
        };
        if ok {
            out.insert("format".into(), json!(f));
        }
    }
    // Gemini enums are lists of strings; `const` is a one-value enum.
    let values = match (src.get("enum"), src.get("const")) {
        (Some(Value::Array(vs)), _) => Some(vs.clone()),
        (None, Some(c)) => Some(vec![c.clone()]),
        _ => None,
    };
    if let Some(vs) = values
        && !vs.is_empty()
        && vs.iter().all(Value::is_string)
    {
        out.insert("enum".into(), Value::Array(vs));
        out.entry("type").or_insert(json!("STRING"));
    }
    if let Some(Value::Object(props)) = src.get("properties") {
        let converted: Map<String, Value> =
            props.iter().map(|(name, s)| (name.clone(), convert(s, defs, depth + 1))).collect();
        if let Some(Value::Array(req)) = src.get("required") {
            // A required name without a property is rejected.
            let req: Vec<Value> =
                req.iter().filter(|r| r.as_str().is_some_and(|n| converted.contains_key(n))).cloned().collect();
            if !req.is_empty() {
                out.insert("required".into(), Value::Array(req));
            }
        }
        out.insert("properties".into(), Value::Object(converted));
    }
    if ty.as_deref() == Some("array") {
        let items = match src.get("items") {
            Some(Value::Array(tuple)) => tuple.first().map(|i| convert(i, defs, depth + 1)),
            Some(i @ Value::Object(_)) => Some(convert(i, defs, depth + 1)),
            _ => None,
        };
        // "items: missing field" otherwise; an object is the loosest shape that still works for tools.
        let mut items = items.unwrap_or_else(|| json!({"type": "OBJECT"}));
        if let Value::Object(m) = &mut items
            && !m.contains_key("type")
        {
            m.insert("type".into(), json!("OBJECT"));
        }
        out.insert("items".into(), items);
    }
    Value::Object(out)
}

fn infer_type(src: &Map<String, Value>) -> Option<String> {
    if src.contains_key("properties") {
        Some("object".into())
    } else if src.contains_key("items") {
        Some("array".into())
    } else if src.get("enum").or_else(|| src.get("const")).is_some_and(|v| v.is_string() || v.is_array()) {
        Some("string".into())
    } else {
        None
    }
}

/// `allOf` merges its members; `anyOf`/`oneOf` keep the first non-null member (`[X, null]` becomes a
/// nullable X). Returns the schema to convert instead, or `None` when there is no combinator.
fn collapse(src: &Map<String, Value>) -> Option<Value> {
    let mut base: Map<String, Value> = src
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "allOf" | "anyOf" | "oneOf"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut changed = false;
    if let Some(Value::Array(all)) = src.get("allOf") {
        changed = true;
        for member in all.iter().filter_map(Value::as_object) {
            for (k, v) in member {
                match (k.as_str(), base.get_mut(k)) {
                    ("properties", Some(Value::Object(p))) => {
                        if let Value::Object(more) = v {
                            p.extend(more.clone());
                        }
                    }
                    ("required", Some(Value::Array(r))) => {
                        if let Value::Array(more) = v {
                            r.extend(more.iter().cloned());
                        }
                    }
                    (_, None) => {
                        base.insert(k.clone(), v.clone());
                    }
                    _ => {}
                }
            }
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = src.get(key) {
            changed = true;
            let is_null = |o: &Value| o.get("type").and_then(Value::as_str) == Some("null");
            if options.iter().any(is_null) {
                base.insert("nullable".into(), json!(true));
            }
            if let Some(Value::Object(first)) = options.iter().find(|o| !is_null(o)) {
                for (k, v) in first {
                    base.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
    changed.then_some(Value::Object(base))
}

/// The JSON Schema keywords Google documents as supported in `generationConfig.responseJsonSchema`.
pub(crate) const RESPONSE_KEYWORDS: &[&str] = &[
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

/// The Gemini `responseJsonSchema` for an output schema (see the module doc).
pub(crate) fn gemini_response_schema(schema: &Value) -> Value {
    let Value::Object(src) = schema else {
        // `true`/`false` schemas are JSON Schema too, and have no keywords to cut.
        return schema.clone();
    };
    let mut src = src.clone();
    if let Some(Value::Array(members)) = src.remove("allOf") {
        merge_all_of(&mut src, members);
    }
    if let Some(Value::Object(defs)) = src.remove("definitions") {
        let target = src.entry("$defs").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(target) = target {
            for (name, def) in defs {
                target.entry(name).or_insert(def);
            }
        }
    }
    if let Some(Value::String(r)) = src.get_mut("$ref")
        && let Some(rest) = r.strip_prefix("#/definitions/")
    {
        *r = format!("#/$defs/{rest}");
    }
    if let Some(c) = src.remove("const") {
        src.entry("enum").or_insert_with(|| json!([c]));
    }
    if let Some(Value::Array(tuple)) = src.get("items").cloned() {
        src.remove("items");
        src.entry("prefixItems").or_insert(Value::Array(tuple));
    }
    let has_ref = src.contains_key("$ref");
    let mut out = Map::new();
    for (key, value) in src {
        if !RESPONSE_KEYWORDS.contains(&key.as_str()) || (has_ref && !key.starts_with('$')) {
            continue;
        }
        let value = match (key.as_str(), value) {
            ("properties" | "$defs", Value::Object(map)) => {
                Value::Object(map.iter().map(|(name, s)| (name.clone(), gemini_response_schema(s))).collect())
            }
            ("items" | "additionalProperties", sub) => gemini_response_schema(&sub),
            ("prefixItems" | "anyOf" | "oneOf", Value::Array(list)) => {
                Value::Array(list.iter().map(gemini_response_schema).collect())
            }
            (_, other) => other,
        };
        out.insert(key, value);
    }
    Value::Object(out)
}

/// `allOf` folded into its schema: properties and required names added up, other keywords filled in where the
/// schema has none. A lone `$ref` member stands for the whole; one beside other members cannot be merged
/// without resolving it, and is dropped.
fn merge_all_of(schema: &mut Map<String, Value>, members: Vec<Value>) {
    let alone = members.len() == 1;
    for member in members {
        let Value::Object(member) = member else { continue };
        if member.contains_key("$ref") && !alone {
            continue;
        }
        for (key, value) in member {
            match (key.as_str(), schema.get_mut(&key), value) {
                ("properties", Some(Value::Object(mine)), Value::Object(more)) => {
                    for (name, sub) in more {
                        mine.entry(name).or_insert(sub);
                    }
                }
                ("required", Some(Value::Array(mine)), Value::Array(more)) => {
                    for name in more {
                        if !mine.contains(&name) {
                            mine.push(name);
                        }
                    }
                }
                (_, None, value) => {
                    schema.insert(key, value);
                }
                _ => {}
            }
        }
    }
}

/// An `f32` as the shortest `f64` that prints like it (`0.7`, not `0.699999988079071`).
pub(crate) fn round_f32(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_and_rewrites_what_gemini_rejects() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args", "type": "object", "additionalProperties": false,
            "$defs": {"Op": {"type": "object", "properties": {"kind": {"const": "add"}}, "additionalProperties": false}},
            "properties": {
                "default": {"type": ["string", "null"], "default": "x", "examples": ["a"], "$comment": "c", "format": "uri"},
                "tags": {"type": "array"},
                "ops": {"type": "array", "items": {"$ref": "#/$defs/Op"}},
                "when": {"type": "string", "format": "date-time"},
                "choice": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0, "multipleOf": 2}, {"type": "null"}]},
                "both": {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"b": {"type": "number"}}}]},
                "map": {"type": "object", "propertyNames": {"pattern": "^x"}, "patternProperties": {"^x": {}}},
                "self": {"$ref": "#/$defs/Missing"}
            },
            "required": ["default", "ghost"]
        });
        let out = gemini_parameters(&schema);
        assert_eq!(
            out,
            json!({
                "type": "OBJECT",
                "properties": {
                    "default": {"type": "STRING", "nullable": true},
                    "tags": {"type": "ARRAY", "items": {"type": "OBJECT"}},
                    "ops": {"type": "ARRAY", "items": {"type": "OBJECT", "properties": {"kind": {"type": "STRING", "enum": ["add"]}}}},
                    "when": {"type": "STRING", "format": "date-time"},
                    "choice": {"type": "INTEGER", "nullable": true},
                    "both": {"type": "OBJECT", "properties": {"a": {"type": "STRING"}, "b": {"type": "NUMBER"}}, "required": ["a"]},
                    "map": {"type": "OBJECT"},
                    "self": {"type": "OBJECT"}
                },
                "required": ["default"]
            })
        );
    }

    #[test]
    fn recursive_refs_terminate() {
        let schema = json!({"type": "object", "properties": {"node": {"$ref": "#/$defs/N"}},
            "$defs": {"N": {"type": "object", "properties": {"child": {"$ref": "#/$defs/N"}}}}});
        let out = gemini_parameters(&schema);
        assert!(out.to_string().len() < 10_000);
    }

    #[test]
    fn output_schemas_keep_gemini_keywords_and_lose_the_rest() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Report", "type": "object", "additionalProperties": false,
            "definitions": {"Op": {"type": "object", "properties": {"kind": {"const": "add"}}, "not": {}}},
            "$defs": {"Tag": {"type": "string", "pattern": "^t", "minLength": 1}},
            "properties": {
                "pattern": {"type": ["string", "null"], "examples": ["a"], "$comment": "c", "format": "date-time"},
                "ops": {"type": "array", "items": {"$ref": "#/definitions/Op", "description": "dropped"}, "uniqueItems": true},
                "pair": {"type": "array", "items": [{"type": "integer", "exclusiveMinimum": 0}, {"$ref": "#/$defs/Tag"}]},
                "n": {"anyOf": [{"type": "integer", "minimum": 0, "multipleOf": 2}, {"type": "null"}]},
                "both": {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                                   {"properties": {"b": {"type": "number"}}, "required": ["b"]},
                                   {"$ref": "#/$defs/Tag"}]},
                "one": {"allOf": [{"$ref": "#/$defs/Tag"}], "description": "a tag"},
                "map": {"type": "object", "additionalProperties": {"type": "integer", "maximum": 9, "default": 1},
                        "propertyNames": {"pattern": "^x"}}
            },
            "required": ["pattern"]
        });
        assert_eq!(
            gemini_response_schema(&schema),
            json!({
                "title": "Report", "type": "object", "additionalProperties": false,
                "$defs": {"Tag": {"type": "string"},
                          "Op": {"type": "object", "properties": {"kind": {"enum": ["add"]}}}},
                "properties": {
                    "pattern": {"type": ["string", "null"], "format": "date-time"},
                    "ops": {"type": "array", "items": {"$ref": "#/$defs/Op"}},
                    "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"$ref": "#/$defs/Tag"}]},
                    "n": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
                    "both": {"properties": {"a": {"type": "string"}, "b": {"type": "number"}}, "required": ["a", "b"]},
                    "one": {"$ref": "#/$defs/Tag"},
                    "map": {"type": "object", "additionalProperties": {"type": "integer", "maximum": 9}}
                },
                "required": ["pattern"]
            })
        );
        assert_eq!(gemini_response_schema(&json!(true)), json!(true));
    }

    #[test]
    fn floats_print_short() {
        assert_eq!(round_f32(0.7), 0.7);
    }
}
