//! The three date rules of the reference validator, built on a port of CPython 3.11's
//! `datetime.fromisoformat` (the C implementation in `Modules/_datetimemodule.c`).
//!
//! The reference deliberately uses three different preprocessing steps before `fromisoformat`,
//! and the port keeps them apart:
//!
//! | rule | used by | input | preprocessing |
//! |---|---|---|---|
//! | [`verification_timestamp_ok`] | `verification_record` `checked_at` (and the provenance sweeper's age of a record, [`verification_instant`]) | non-empty string | every `Z` becomes `+00:00`; a naive value is taken as UTC |
//! | [`claim_timestamp_ok`] | `claim_integrity` `created_at`, `valid_from`, `valid_until` | non-empty string | one trailing `Z` removed, then `+00:00` appended (so an explicit offset is rejected) |
//! | [`temporal_instant`] | `temporal_validity` `valid_until` | any value, via Python `str()` | none; a naive value is taken as UTC |
//!
//! Accepted by `fromisoformat` (3.11): a date `YYYY-MM-DD`, `YYYYMMDD`, `YYYY-Www`, `YYYYWww`,
//! `YYYY-Www-D`, `YYYYWwwD`; optionally followed by **any single ASCII separator** and a time
//! `HH[:MM[:SS[.f…]]]` or `HH[MM[SS[.f…]]]` (`,` works as the decimal mark, digits past the sixth
//! are dropped); optionally followed by `Z` or `±HH[:MM[:SS[.f…]]]` (strictly less than 24 hours).
//! Ranges are those of Python's `datetime` (years 1–9999, hours 0–23, seconds 0–59).
//! The port mirrors the C scanner byte for byte, quirks included (for example `2026-08-15T`
//! is rejected because an empty time follows the separator).
//!
//! Decision (not in the reference): hour `24` is rejected, as in CPython 3.11.

use time::{Date, Duration, Month, OffsetDateTime, PrimitiveDateTime, Time, Weekday};

/// The fields `fromisoformat` produced; `offset_micros` is `None` for a naive value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IsoDateTime {
    pub(crate) date: Date,
    pub(crate) time: Time,
    pub(crate) offset_micros: Option<i64>,
}

impl IsoDateTime {
    /// The instant this value denotes, taking a naive value as UTC.
    pub(crate) fn instant(&self) -> OffsetDateTime {
        let utc = PrimitiveDateTime::new(self.date, self.time).assume_utc();
        match self.offset_micros {
            Some(micros) => utc.checked_sub(Duration::microseconds(micros)).unwrap_or(utc),
            None => utc,
        }
    }
}

/// `verification_record`'s `checked_at` rule: a non-empty string that parses after replacing
/// every `Z` with `+00:00`.
pub(crate) fn verification_timestamp_ok(value: Option<&serde_json::Value>) -> bool {
    verification_instant(value).is_some()
}

/// The instant a `checked_at` accepted by [`verification_timestamp_ok`] denotes (a naive value
/// taken as UTC); `None` exactly when the rule rejects the value.
pub(crate) fn verification_instant(value: Option<&serde_json::Value>) -> Option<OffsetDateTime> {
    match value {
        Some(serde_json::Value::String(s)) if !s.is_empty() => {
            fromisoformat(&s.replace('Z', "+00:00")).map(|parsed| parsed.instant())
        }
        _ => None,
    }
}

/// `claim_integrity`'s rule: a non-empty string that parses after removing one trailing `Z` and
/// appending `+00:00`.
pub(crate) fn claim_timestamp_ok(value: Option<&serde_json::Value>) -> bool {
    match value {
        Some(serde_json::Value::String(s)) if !s.is_empty() => {
            let base = s.strip_suffix('Z').unwrap_or(s);
            fromisoformat(&format!("{base}+00:00")).is_some()
        }
        _ => false,
    }
}

/// `temporal_validity`'s rule: `fromisoformat(str(v))`, naive values taken as UTC.
pub(crate) fn temporal_instant(text: &str) -> Option<OffsetDateTime> {
    fromisoformat(text).map(|parsed| parsed.instant())
}

/// Byte at `i`, or NUL past the end (the C code reads the terminating NUL).
fn at(bytes: &[u8], i: usize) -> u8 {
    bytes.get(i).copied().unwrap_or(0)
}

/// Exactly `n` ASCII digits starting at `pos`.
fn digits(bytes: &[u8], pos: usize, n: usize) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for i in 0..n {
        let c = at(bytes, pos + i);
        if !c.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(c - b'0');
    }
    Some((value, pos + n))
}

/// CPython 3.11 `datetime.fromisoformat`.
pub(crate) fn fromisoformat(text: &str) -> Option<IsoDateTime> {
    if text.chars().count() < 7 {
        return None;
    }
    let bytes = text.as_bytes();
    let len = bytes.len();
    let separator = find_separator(bytes)?;
    let (year, month, day) = parse_date(bytes, separator)?;
    let (hms, micros, offset_micros) =
        if len > separator { parse_time(&bytes[separator + 1..])? } else { ([0; 3], 0, None) };
    if !(1..=9999).contains(&year) {
        return None;
    }
    let month = Month::try_from(u8::try_from(month).ok()?).ok()?;
    let date = Date::from_calendar_date(i32::try_from(year).ok()?, month, u8::try_from(day).ok()?).ok()?;
    let [hour, minute, second] = hms;
    let time =
        Time::from_hms_micro(u8::try_from(hour).ok()?, u8::try_from(minute).ok()?, u8::try_from(second).ok()?, micros)
            .ok()?;
    if let Some(offset) = offset_micros {
        // `datetime.timezone` requires an offset strictly inside (-24h, 24h).
        if offset.unsigned_abs() >= 86_400_000_000 {
            return None;
        }
    }
    Some(IsoDateTime { date, time, offset_micros })
}

/// `_find_isoformat_datetime_separator`.
fn find_separator(bytes: &[u8]) -> Option<usize> {
    let len = bytes.len();
    if len == 7 {
        return Some(7);
    }
    if at(bytes, 4) == b'-' {
        if at(bytes, 5) == b'W' {
            if len < 8 {
                return None;
            }
            if len > 8 && at(bytes, 8) == b'-' {
                if len == 9 {
                    return None;
                }
                if len > 10 && at(bytes, 10).is_ascii_digit() {
                    return Some(8);
                }
                return Some(10);
            }
            return Some(8);
        }
        return Some(10);
    }
    if at(bytes, 4) == b'W' {
        let mut idx = 7;
        while idx < len && at(bytes, idx).is_ascii_digit() {
            idx += 1;
        }
        if idx < 9 {
            return Some(idx);
        }
        return Some(if idx % 2 == 0 { 7 } else { 8 });
    }
    Some(8)
}

/// `parse_isoformat_date`: the date occupies `bytes[..date_len]` (the scanner may look one byte
/// further, exactly as the C code does).
fn parse_date(bytes: &[u8], date_len: usize) -> Option<(u32, u32, u32)> {
    let (year, mut p) = digits(bytes, 0, 4)?;
    let uses_separator = at(bytes, p) == b'-';
    if uses_separator {
        p += 1;
    }
    if at(bytes, p) == b'W' {
        p += 1;
        let (week, next) = digits(bytes, p, 2)?;
        p = next;
        let weekday = if p < date_len {
            if uses_separator {
                if at(bytes, p) != b'-' {
                    return None;
                }
                p += 1;
            }
            digits(bytes, p, 1)?.0
        } else {
            1
        };
        return iso_week_to_ymd(year, week, weekday);
    }
    let (month, next) = digits(bytes, p, 2)?;
    p = next;
    if uses_separator {
        if at(bytes, p) != b'-' {
            return None;
        }
        p += 1;
    }
    let (day, _) = digits(bytes, p, 2)?;
    Some((year, month, day))
}

fn iso_week_to_ymd(year: u32, week: u32, weekday: u32) -> Option<(u32, u32, u32)> {
    let weekday = match weekday {
        1 => Weekday::Monday,
        2 => Weekday::Tuesday,
        3 => Weekday::Wednesday,
        4 => Weekday::Thursday,
        5 => Weekday::Friday,
        6 => Weekday::Saturday,
        7 => Weekday::Sunday,
        _ => return None,
    };
    let date = Date::from_iso_week_date(i32::try_from(year).ok()?, u8::try_from(week).ok()?, weekday).ok()?;
    Some((u32::try_from(date.year()).ok()?, u32::from(u8::from(date.month())), u32::from(date.day())))
}

/// `parse_hh_mm_ss_ff` over `bytes[start..end]`: returns `(not_at_end, [h, m, s], micros)`.
fn parse_hh_mm_ss_ff(bytes: &[u8], start: usize, end: usize) -> Option<(bool, [u32; 3], u32)> {
    let mut values = [0u32; 3];
    let mut p = start;
    let mut has_separator = true;
    for (i, slot) in values.iter_mut().enumerate() {
        let (value, next) = digits(bytes, p, 2)?;
        *slot = value;
        p = next;
        let c = at(bytes, p);
        p += 1;
        if i == 0 {
            has_separator = c == b':';
        }
        if p >= end {
            return Some((c != 0, values, 0));
        } else if has_separator && c == b':' {
            continue;
        } else if c == b'.' || c == b',' {
            break;
        } else if !has_separator {
            p -= 1;
        } else {
            return None;
        }
    }
    let remaining = end.saturating_sub(p);
    let to_parse = remaining.min(6);
    let (mut micros, next) = digits(bytes, p, to_parse)?;
    if to_parse < 6 {
        micros *= 10u32.pow(u32::try_from(6 - to_parse).ok()?);
    }
    p = next;
    while at(bytes, p).is_ascii_digit() {
        p += 1;
    }
    Some((at(bytes, p) != 0, values, micros))
}

/// `parse_isoformat_time`: `([h, m, s], micros, offset in microseconds)`.
fn parse_time(bytes: &[u8]) -> Option<([u32; 3], u32, Option<i64>)> {
    let len = bytes.len();
    let mut tz = 0usize;
    loop {
        if matches!(at(bytes, tz), b'Z' | b'+' | b'-') {
            break;
        }
        tz += 1;
        if tz >= len {
            break;
        }
    }
    let (not_at_end, hms, micros) = parse_hh_mm_ss_ff(bytes, 0, tz)?;
    if tz == len {
        return if not_at_end { None } else { Some((hms, micros, None)) };
    }
    if at(bytes, tz) == b'Z' {
        return if at(bytes, tz + 1) != 0 { None } else { Some((hms, micros, Some(0))) };
    }
    let sign: i64 = if at(bytes, tz) == b'-' { -1 } else { 1 };
    let (trailing, [h, m, s], tz_micros) = parse_hh_mm_ss_ff(bytes, tz + 1, len)?;
    if trailing {
        return None;
    }
    let seconds = i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(s);
    Some((hms, micros, Some(sign * (seconds * 1_000_000 + i64::from(tz_micros)))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn utc(text: &str) -> Option<OffsetDateTime> {
        temporal_instant(text)
    }

    /// A UTC instant from its fields (the `time` macros feature is not enabled here).
    fn at_utc(y: i32, mo: u8, d: u8, h: u8, mi: u8, s: u8, micro: u32) -> Option<OffsetDateTime> {
        let date = Date::from_calendar_date(y, Month::try_from(mo).expect("month"), d).expect("date");
        Some(PrimitiveDateTime::new(date, Time::from_hms_micro(h, mi, s, micro).expect("time")).assume_utc())
    }

    #[test]
    fn accepts_the_cpython_311_forms() {
        assert_eq!(utc("2026-08-15"), at_utc(2026, 8, 15, 0, 0, 0, 0));
        assert_eq!(utc("20240101"), at_utc(2024, 1, 1, 0, 0, 0, 0));
        assert_eq!(utc("2026-08-15T10"), at_utc(2026, 8, 15, 10, 0, 0, 0));
        assert_eq!(utc("2026-08-15T10:00"), at_utc(2026, 8, 15, 10, 0, 0, 0));
        assert_eq!(utc("2026-08-15 10:00:00"), at_utc(2026, 8, 15, 10, 0, 0, 0));
        assert_eq!(utc("2026-08-15T10:00:00Z"), at_utc(2026, 8, 15, 10, 0, 0, 0));
        assert_eq!(utc("2026-08-15T10:00+02:00"), at_utc(2026, 8, 15, 8, 0, 0, 0));
        assert_eq!(utc("2026-08-15T10:00-0130"), at_utc(2026, 8, 15, 11, 30, 0, 0));
        assert_eq!(utc("2026-08-15T10:00:00.5"), at_utc(2026, 8, 15, 10, 0, 0, 500000));
        assert_eq!(utc("2026-08-15T10:00:00,1234567"), at_utc(2026, 8, 15, 10, 0, 0, 123456));
        assert_eq!(utc("20260815T101530"), at_utc(2026, 8, 15, 10, 15, 30, 0));
        assert_eq!(utc("2026-W33-5"), at_utc(2026, 8, 14, 0, 0, 0, 0));
        assert_eq!(utc("2026W335"), at_utc(2026, 8, 14, 0, 0, 0, 0));
        assert_eq!(utc("2026-W33"), at_utc(2026, 8, 10, 0, 0, 0, 0));
        assert_eq!(utc("2026W33"), at_utc(2026, 8, 10, 0, 0, 0, 0));
        assert_eq!(utc("2026-W33-5T12:00"), at_utc(2026, 8, 14, 12, 0, 0, 0));
        assert_eq!(utc("2026-08-15x10:00"), at_utc(2026, 8, 15, 10, 0, 0, 0));
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in [
            "",
            "True",
            "5",
            "2026-08",
            "2026-8-15",
            "2026-13-01",
            "2026-02-30",
            "0000-01-01",
            "2026-08-15T",
            "2026-08-15T25:00",
            "2026-08-15T24:00",
            "2026-08-15T10:60",
            "2026-08-15T10:00:",
            "2026-08-15T10:00+24:00",
            "2026-08-15T10:00Zjunk",
            "2026-08-15T10:00+02:00+00:00",
            "2026-W54-1",
            "2026-W33-8",
            "2026-08-15T10:3015",
            "2026-08-15T10.",
            "20240101.0",
            "2026-08-15\u{e9}10:00",
        ] {
            assert_eq!(fromisoformat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_three_rules_differ_on_offsets_and_z() {
        let offset = json!("2026-08-15T10:00:00+02:00");
        let zulu = json!("2026-08-15T10:00:00Z");
        let date_only = json!("2026-08-15");
        assert!(verification_timestamp_ok(Some(&offset)));
        assert!(verification_timestamp_ok(Some(&zulu)));
        assert!(verification_timestamp_ok(Some(&date_only)));
        assert!(!claim_timestamp_ok(Some(&offset)), "claims reject explicit offsets");
        assert!(claim_timestamp_ok(Some(&zulu)));
        assert!(claim_timestamp_ok(Some(&date_only)));
        for bad in [json!(""), json!(null), json!(20240101)] {
            assert!(!verification_timestamp_ok(Some(&bad)));
            assert!(!claim_timestamp_ok(Some(&bad)));
        }
        assert!(!verification_timestamp_ok(None));
        assert!(!claim_timestamp_ok(None));
        // Every `Z` is replaced in the verification rule, only a trailing one in the claim rule.
        let two_z = json!("2026-08-15T10:00ZZ");
        assert!(!verification_timestamp_ok(Some(&two_z)));
        assert!(!claim_timestamp_ok(Some(&two_z)));
    }
}
