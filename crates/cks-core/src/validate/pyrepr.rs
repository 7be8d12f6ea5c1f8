//! Python-style rendering and comparison of JSON values, so that diagnostic messages read exactly
//! like the ones the Python reference validator builds with f-strings.
//!
//! - [`py_repr`] is Python's `repr()` (`{x!r}`): `'abc'`, `None`, `True`, `0.5`, `['a', 'b']`.
//! - [`py_str`] is Python's `str()` (`'{x}'` in a template): the raw text for strings, `repr` for
//!   everything else.
//! - [`truthy`] is Python truthiness of `structure.get(key)` (a missing key is `None`).
//! - [`py_eq`] is Python `==` between two decoded JSON values (`1 == 1.0`, `True == 1`).
//!
//! Known approximations: dictionaries print in `serde_json::Map` order (sorted keys unless the
//! `preserve_order` feature is on) where Python keeps insertion order; and `str.isprintable` is
//! approximated for non-ASCII characters (control, format, separator, private-use and
//! surrogate-range characters are escaped; unassigned code points are printed as-is).

use serde_json::{Number, Value};

/// Python `repr()` of a decoded JSON value.
pub fn py_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(value, &mut out);
    out
}

/// Python `repr()` of an optional value, where a missing key reads as `None`.
pub(crate) fn py_repr_opt(value: Option<&Value>) -> String {
    value.map_or_else(|| "None".to_owned(), py_repr)
}

/// Python `str()` of a decoded JSON value: strings verbatim, everything else as `repr`.
pub fn py_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

/// Python `repr()` of a list of strings: `['a', 'b']`.
pub(crate) fn py_repr_str_list<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&repr_str(item.as_ref()));
    }
    out.push(']');
    out
}

fn write_repr(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&repr_number(n)),
        Value::String(s) => out.push_str(&repr_str(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&repr_str(key));
                out.push_str(": ");
                write_repr(item, out);
            }
            out.push('}');
        }
    }
}

/// Python's JSON decoder makes integers from numbers without `.`/`e` and floats otherwise;
/// `serde_json` draws the same line.
fn repr_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        n.as_f64().map_or_else(|| n.to_string(), repr_float)
    }
}

/// Python `repr(float)`: the shortest round-tripping digits, in positional notation when the
/// decimal exponent is in `-4..16`, otherwise in scientific notation with a signed, at least
/// two-digit exponent (`1e+16`, `1.5e-07`).
pub(crate) fn repr_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".to_owned() } else { "-inf".to_owned() };
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    // `{:e}` gives the shortest round-trip digits: "d.ddde<exp>".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let body = if (-4..16).contains(&exp) {
        if exp >= 0 {
            let point = usize::try_from(exp).unwrap_or(0) + 1;
            if digits.len() <= point {
                format!("{digits}{}.0", "0".repeat(point - digits.len()))
            } else {
                format!("{}.{}", &digits[..point], &digits[point..])
            }
        } else {
            let zeros = usize::try_from(-exp - 1).unwrap_or(0);
            format!("0.{}{digits}", "0".repeat(zeros))
        }
    } else {
        let mantissa = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{exp_sign}{:02}", exp.unsigned_abs())
    };
    format!("{sign}{body}")
}

/// Python `repr(str)`: single quotes unless the text holds `'` and no `"`.
pub(crate) fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x7f => out.push(c),
            c if is_printable(c) => out.push(c),
            c => {
                let code = c as u32;
                if code <= 0xff {
                    out.push_str(&format!("\\x{code:02x}"));
                } else if code <= 0xffff {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
        }
    }
    out.push(quote);
    out
}

/// Approximates Python's `str.isprintable` for non-ASCII characters.
fn is_printable(c: char) -> bool {
    let code = c as u32;
    let format_char = matches!(
        code,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E
            | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE0001 | 0xE0020..=0xE007F
    );
    let private_use = matches!(code, 0xE000..=0xF8FF | 0xF0000..=0xFFFFD | 0x100000..=0x10FFFD);
    let noncharacter = matches!(code, 0xFDD0..=0xFDEF) || code & 0xFFFE == 0xFFFE;
    !(c.is_control() || c.is_whitespace() || format_char || private_use || noncharacter)
}

/// Python truthiness of `structure.get(key)`: `None`, `False`, `0`, `0.0`, `""`, `[]`, `{}` are false.
pub fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(items)) => !items.is_empty(),
        Some(Value::Object(map)) => !map.is_empty(),
    }
}

/// Python `==` between two `structure.get(...)` results (a missing key is `None`).
pub(crate) fn py_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    let null = Value::Null;
    values_eq(a.unwrap_or(&null), b.unwrap_or(&null))
}

/// A number or bool as a Python numeric value (`True` is `1`).
enum Numeric {
    Int(i128),
    Float(f64),
}

fn numeric(value: &Value) -> Option<Numeric> {
    match value {
        Value::Bool(b) => Some(Numeric::Int(i128::from(*b))),
        Value::Number(n) => n
            .as_i64()
            .map(|i| Numeric::Int(i128::from(i)))
            .or_else(|| n.as_u64().map(|u| Numeric::Int(i128::from(u))))
            .or_else(|| n.as_f64().map(Numeric::Float)),
        _ => None,
    }
}

fn values_eq(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (numeric(a), numeric(b)) {
        return match (x, y) {
            (Numeric::Int(x), Numeric::Int(y)) => x == y,
            (Numeric::Float(x), Numeric::Float(y)) => x == y,
            // Exact int/float comparison: equal only when the float is integral and the same value.
            (Numeric::Int(i), Numeric::Float(f)) | (Numeric::Float(f), Numeric::Int(i)) => {
                f.fract() == 0.0 && f.is_finite() && (f as i128) == i && (i as f64) == f
            }
        };
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| values_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| values_eq(v, w)))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repr_of_scalars_and_containers() {
        assert_eq!(py_repr(&json!(null)), "None");
        assert_eq!(py_repr(&json!(true)), "True");
        assert_eq!(py_repr(&json!(false)), "False");
        assert_eq!(py_repr(&json!(5)), "5");
        assert_eq!(py_repr(&json!(-3)), "-3");
        assert_eq!(py_repr(&json!("abc")), "'abc'");
        assert_eq!(py_repr(&json!(["a", "b"])), "['a', 'b']");
        assert_eq!(py_repr(&json!([1, null, [true]])), "[1, None, [True]]");
        assert_eq!(py_repr(&json!({"k": [0.5]})), "{'k': [0.5]}");
        assert_eq!(py_repr(&json!([])), "[]");
        assert_eq!(py_repr(&json!({})), "{}");
        assert_eq!(py_repr_opt(None), "None");
    }

    #[test]
    fn repr_of_floats_matches_python() {
        let cases = [
            (0.5, "0.5"),
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1.5, "1.5"),
            (100.0, "100.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.25e16, "1.25e+16"),
            (123456.789, "123456.789"),
            (1e300, "1e+300"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
        ];
        for (value, expected) in cases {
            assert_eq!(repr_float(value), expected, "{value}");
        }
        assert_eq!(py_repr(&json!(1.0)), "1.0");
        assert_eq!(py_repr(&json!(1e2)), "100.0");
    }

    #[test]
    fn repr_of_strings_quotes_and_escapes_like_python() {
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("it's \"x\""), "'it\\'s \"x\"'");
        assert_eq!(repr_str("a\\b"), "'a\\\\b'");
        assert_eq!(repr_str("l1\nl2\t\r"), "'l1\\nl2\\t\\r'");
        assert_eq!(repr_str("\u{1b}\u{7f}"), "'\\x1b\\x7f'");
        assert_eq!(repr_str("é漢😀"), "'é漢😀'");
        assert_eq!(repr_str("\u{a0}\u{200b}\u{e000}\u{10fffd}"), "'\\xa0\\u200b\\ue000\\U0010fffd'");
        assert_eq!(py_repr_str_list(&["s1", "s3"]), "['s1', 's3']");
    }

    #[test]
    fn str_is_raw_for_strings_only() {
        assert_eq!(py_str(&json!("abc")), "abc");
        assert_eq!(py_str(&json!(20240101)), "20240101");
        assert_eq!(py_str(&json!(true)), "True");
        assert_eq!(py_str(&json!(["a"])), "['a']");
    }

    #[test]
    fn truthiness() {
        for falsy in [json!(null), json!(false), json!(0), json!(0.0), json!(""), json!([]), json!({})] {
            assert!(!truthy(Some(&falsy)), "{falsy}");
        }
        for true_ in [json!(true), json!(1), json!(-0.5), json!("x"), json!([0]), json!({"a": 1})] {
            assert!(truthy(Some(&true_)), "{true_}");
        }
        assert!(!truthy(None));
    }

    #[test]
    fn python_equality() {
        assert!(py_eq(None, Some(&json!(null))));
        assert!(py_eq(Some(&json!(1)), Some(&json!(1.0))));
        assert!(py_eq(Some(&json!(true)), Some(&json!(1))));
        assert!(!py_eq(Some(&json!(1)), Some(&json!(1.5))));
        assert!(!py_eq(Some(&json!("1")), Some(&json!(1))));
        assert!(py_eq(Some(&json!(["a", 1])), Some(&json!(["a", 1.0]))));
        assert!(!py_eq(Some(&json!({"a": 1})), Some(&json!({"b": 1}))));
        assert!(!py_eq(Some(&json!("c")), None));
    }
}
