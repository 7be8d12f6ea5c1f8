//! Retry planning: which waits the provider asked for, and whether another attempt fits the bounds.
//!
//! Pure functions, so the rules are unit-tested without a clock; the HTTP layer only sleeps what
//! [`plan`] returns.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use reqwest::header::HeaderMap;

use crate::config::RetryPolicy;

/// The wait a response asks for: `retry-after-ms` (milliseconds, Anthropic/OpenAI SDK convention), else
/// `retry-after` as seconds or as an HTTP date.
pub(crate) fn retry_after_from_headers(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds_to_duration(ms / 1000.0);
    }
    let v = text("retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return seconds_to_duration(secs);
    }
    let at = parse_http_date(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `x-should-retry: true|false` overrides the status-based decision (Anthropic and OpenAI servers send it).
pub(crate) fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// A protobuf `Duration` in JSON form (`"47s"`, `"0.5s"`), as in Gemini's `RetryInfo.retryDelay`.
pub(crate) fn parse_proto_duration(s: &str) -> Option<Duration> {
    seconds_to_duration(s.trim().strip_suffix('s')?.parse::<f64>().ok()?)
}

fn seconds_to_duration(secs: f64) -> Option<Duration> {
    // Reject negative, NaN and absurd values rather than panicking in `from_secs_f64`.
    (secs.is_finite() && (0.0..1.0e9).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only HTTP date format servers send today.
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let mut it = s.split_whitespace();
    let _weekday = it.next()?;
    let day: u64 = it.next()?.parse().ok()?;
    let month = match it.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':').map(|x| x.parse::<u64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if it.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(year, month, i64::try_from(day).ok()?);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + sec;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The wait before retry number `retries_done + 1`, or `None` when no retry should be made.
///
/// `hint` is the wait the provider asked for; it is honoured exactly (the provider knows when capacity
/// returns) unless it exceeds `max_retry_after`, in which case waiting is pointless for an interactive
/// call and the error is returned. Without a hint the wait is full-jitter exponential backoff. No retry
/// starts that would end after `max_elapsed`.
pub(crate) fn plan(
    policy: &RetryPolicy,
    retries_done: u32,
    hint: Option<Duration>,
    elapsed: Duration,
    rng: &mut impl Rng,
) -> Option<Duration> {
    if retries_done >= policy.max_retries {
        return None;
    }
    let wait = match hint {
        Some(h) if h > policy.max_retry_after => return None,
        Some(h) => h,
        None => {
            let ceiling = policy.base_delay.saturating_mul(1u32 << retries_done.min(20)).min(policy.max_delay);
            let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(rng.random_range(0..=nanos))
        }
    };
    (elapsed.saturating_add(wait) <= policy.max_elapsed).then_some(wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_767); // Sun, 06 Nov 1994 08:49:27 GMT
        assert_eq!(retry_after_from_headers(&headers(&[("retry-after", "20")]), now), Some(Duration::from_secs(20)));
        assert_eq!(
            retry_after_from_headers(&headers(&[("retry-after", "20"), ("retry-after-ms", "250")]), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after_from_headers(&headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]), now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(retry_after_from_headers(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after_from_headers(&headers(&[("retry-after", "-3")]), now), None);
        assert_eq!(should_retry_header(&headers(&[("x-should-retry", "false")])), Some(false));
    }

    #[test]
    fn proto_durations() {
        assert_eq!(parse_proto_duration("47s"), Some(Duration::from_secs(47)));
        assert_eq!(parse_proto_duration("0.5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_proto_duration("47"), None);
    }

    #[test]
    fn plan_is_bounded() {
        let p = RetryPolicy::default();
        let mut rng = rand::rng();
        for n in 0..3 {
            let w = plan(&p, n, None, Duration::ZERO, &mut rng).unwrap();
            assert!(w <= p.base_delay * (1 << n));
        }
        assert_eq!(plan(&p, 3, None, Duration::ZERO, &mut rng), None);
        assert_eq!(plan(&p, 0, Some(Duration::from_secs(47)), Duration::ZERO, &mut rng), Some(Duration::from_secs(47)));
        assert_eq!(plan(&p, 0, Some(Duration::from_secs(3600)), Duration::ZERO, &mut rng), None);
        assert_eq!(plan(&p, 0, Some(Duration::from_secs(10)), Duration::from_secs(295), &mut rng), None);
    }
}
