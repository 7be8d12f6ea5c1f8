//! JSON text as the reference's command line writes it: Python's `json.dumps` with `indent=2`,
//! keys in the order given, floats as Python's `repr`, and non-ASCII characters either kept or
//! escaped (`ensure_ascii`).
//!
//! The canonical documents (`convert`, `evolve`, `migrate`) are written by `cks_core::json`; this
//! writer is for the reports and exports whose key order is not sorted.

use serde_json::Value;
use std::fmt::Write as _;

/// A JSON value whose objects keep the order their keys were inserted in, as a Python `dict` does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// A number from a decoded document, written as Python would write it.
    Number(serde_json::Number),
    Str(String),
    List(Vec<Json>),
    Dict(Vec<(String, Json)>),
}

impl Json {
    pub(crate) fn str(text: impl Into<String>) -> Json {
        Json::Str(text.into())
    }

    pub(crate) fn int(n: usize) -> Json {
        Json::Number(serde_json::Number::from(n))
    }

    /// The value under `key` in a dict.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        match self {
            Json::Dict(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key` as a Python dict assignment does: in place when present, else at the end.
    pub(crate) fn set(&mut self, key: &str, value: Json) {
        if let Json::Dict(entries) = self {
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some((_, slot)) => *slot = value,
                None => entries.push((key.to_owned(), value)),
            }
        }
    }
}

impl From<&Value> for Json {
    fn from(value: &Value) -> Json {
        match value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => Json::Number(n.clone()),
            Value::String(s) => Json::Str(s.clone()),
            Value::Array(items) => Json::List(items.iter().map(Json::from).collect()),
            Value::Object(map) => Json::Dict(map.iter().map(|(k, v)| (k.clone(), Json::from(v))).collect()),
        }
    }
}

impl Json {
    /// The value as `serde_json` holds it (objects then sorted by key).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::Number(n.clone()),
            Json::Str(s) => Value::String(s.clone()),
            Json::List(items) => Value::Array(items.iter().map(Json::to_value).collect()),
            Json::Dict(entries) => Value::Object(entries.iter().map(|(k, v)| (k.clone(), v.to_value())).collect()),
        }
    }
}

/// Reads JSON text keeping each object's key order; a repeated key keeps its first place and its
/// last value, as Python's `json.loads` does. `serde_json`'s nesting limit (128) applies.
pub(crate) fn loads(text: &str) -> Result<Json, serde_json::Error> {
    serde_json::from_str(text)
}

impl<'de> serde::Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> serde::de::Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(n).map(Json::Number).ok_or_else(|| E::custom("a number out of range"))
    }

    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::Str(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::Str(s))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::List(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut dict = Json::Dict(Vec::new());
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            dict.set(&key, value);
        }
        Ok(dict)
    }
}

/// `json.dumps(value, indent=2, ensure_ascii=ensure_ascii)`.
pub(crate) fn dumps(value: &Json, ensure_ascii: bool) -> String {
    let mut out = String::new();
    write_value(&mut out, value, 0, ensure_ascii);
    out
}

fn write_value(out: &mut String, value: &Json, level: usize, ensure_ascii: bool) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => write_number(out, n),
        Json::Str(s) => write_string(out, s, ensure_ascii),
        Json::List(items) if items.is_empty() => out.push_str("[]"),
        Json::Dict(entries) if entries.is_empty() => out.push_str("{}"),
        Json::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                indent(out, level + 1);
                write_value(out, item, level + 1, ensure_ascii);
            }
            out.push('\n');
            indent(out, level);
            out.push(']');
        }
        Json::Dict(entries) => {
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                indent(out, level + 1);
                write_string(out, key, ensure_ascii);
                out.push_str(": ");
                write_value(out, item, level + 1, ensure_ascii);
            }
            out.push('\n');
            indent(out, level);
            out.push('}');
        }
    }
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    match n.as_f64() {
        Some(f) if n.is_f64() => out.push_str(&float_repr(f)),
        _ => {
            let _ = write!(out, "{n}");
        }
    }
}

/// Python's `repr(float)`: the shortest digits that read back the same, in fixed notation for
/// decimal exponents from -4 to 15 and in scientific notation (`1e+16`, `1.5e-05`) beyond.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `-1.25e-7`, `3e20`, `0e0`.
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1;
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            let (whole, fraction) = digits.split_at(point as usize);
            format!("{whole}.{fraction}")
        };
        format!("{sign}{text}")
    } else {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() { first.to_owned() } else { format!("{first}.{rest}") };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exponent_sign}{:02}", exponent.unsigned_abs())
    }
}

/// A JSON string literal as Python's encoder writes it (`\uXXXX` in lower-case hex).
pub(crate) fn write_string(out: &mut String, text: &str, ensure_ascii: bool) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_writes_them() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456.789, "123456.789"),
            (1.2345e300, "1.2345e+300"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (value, expected) in cases {
            assert_eq!(float_repr(value), expected, "{value}");
        }
    }

    #[test]
    fn dumps_indents_and_escapes_as_python() {
        let value = Json::Dict(vec![
            ("b".into(), Json::List(vec![Json::int(1), Json::str("é\u{1F600}\"")])),
            ("a".into(), Json::Dict(vec![])),
            ("c".into(), Json::List(vec![])),
        ]);
        assert_eq!(
            dumps(&value, true),
            "{\n  \"b\": [\n    1,\n    \"\\u00e9\\ud83d\\ude00\\\"\"\n  ],\n  \"a\": {},\n  \"c\": []\n}"
        );
        assert_eq!(dumps(&Json::str("é\u{7f}\u{1}"), false), "\"é\u{7f}\\u0001\"");
        assert_eq!(dumps(&Json::str("\u{7f}"), true), "\"\\u007f\"");
    }

    #[test]
    fn loads_keeps_key_order_and_the_last_repeated_value() {
        let value = loads(r#"{"b": 1, "a": [true, null], "b": 2.5}"#).unwrap();
        assert_eq!(dumps(&value, true), "{\n  \"b\": 2.5,\n  \"a\": [\n    true,\n    null\n  ]\n}");
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(loads(&deep).is_err());
    }
}
