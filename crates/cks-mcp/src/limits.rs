//! Per-principal admission: how much of the server one caller may hold, so that one runaway agent
//! cannot take every worker from everyone else.
//!
//! Three limits, each per principal (the issuer and subject a token named; without one, the one
//! local caller of stdio or of HTTP with a static token or none):
//!
//! - tool calls in flight (`CKS_MCP_LIMIT_CONCURRENT_CALLS`, default 8): half the PostgreSQL
//!   pool's default size, so one caller cannot hold every connection, and more than an agent host
//!   runs at once (hosts run a model's calls one after another, or a few side by side);
//! - `ai_chat` turns in flight (`CKS_MCP_LIMIT_CHAT_TURNS`, default 2), which also count as calls:
//!   a turn holds many model calls and their tokens; a person has one chat going, and a second
//!   covers a reloaded page whose old turn has not yet noticed it was left;
//! - requests a minute (`CKS_MCP_LIMIT_REQUESTS_PER_MINUTE`, default 600), a token bucket that
//!   holds a sixth of a minute's requests (100 by default), so a client's start (initialize, the
//!   lists, a graph's first reads) goes through at once: an honest client at a model's pace makes
//!   a few requests a second, a loop that hammers the server is held to ten.
//!
//! 0 means no limit. The defaults apply to principals; the local caller is one user with nobody
//! to share with, limited only by the variables that are set (the same values then apply to it).
//!
//! Over HTTP a refused request gets `429 Too Many Requests` with `Retry-After` (`http.rs`); over
//! stdio a refused call is a business error, `rate_limited` (`mcp.rs`). Every HTTP request that
//! needs a token counts against the rate (the page and its assets do not); over stdio, each tool
//! call does. The limits are each process's own: behind a load balancer, each replica counts alone.
//!
//! The state is sharded by principal, each shard behind a lock held only to read and change a few
//! numbers (never across an await): a principal at its limit never waits on another's. A call in
//! flight is an [`Admission`], released when it is dropped, also when the client went away and
//! the call's future with it. An idle principal's entry (nothing in flight, its bucket full again)
//! says nothing an absent one would not, and is swept out as new principals come.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use cks_runtime::access::PrincipalId;
use cks_tools::Principal;

/// The variables that set the limits.
pub const CONCURRENT_CALLS_VAR: &str = "CKS_MCP_LIMIT_CONCURRENT_CALLS";
pub const CHAT_TURNS_VAR: &str = "CKS_MCP_LIMIT_CHAT_TURNS";
pub const REQUESTS_PER_MINUTE_VAR: &str = "CKS_MCP_LIMIT_REQUESTS_PER_MINUTE";

/// The tool whose calls are chat turns.
pub const CHAT_TOOL: &str = "ai_chat";

/// How long a caller refused for a concurrency limit is told to wait: calls usually end within it.
const BUSY_RETRY_SECONDS: u64 = 1;

/// Shards of the state: enough that principals seldom share one.
const SHARDS: usize = 16;

/// A shard's size at which idle entries are first swept out.
const FIRST_SWEEP: usize = 64;

/// What one caller may hold; 0: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub concurrent_calls: u32,
    pub chat_turns: u32,
    pub requests_per_minute: u32,
}

impl Caps {
    /// No limit at all.
    pub const NONE: Caps = Caps { concurrent_calls: 0, chat_turns: 0, requests_per_minute: 0 };

    /// The defaults for a principal (see the module's documentation for why).
    pub const DEFAULT: Caps = Caps { concurrent_calls: 8, chat_turns: 2, requests_per_minute: 600 };

    /// The bucket's size: a sixth of a minute's requests, at least one.
    fn burst(self) -> f64 {
        f64::from((self.requests_per_minute / 6).max(1))
    }

    /// Tokens the bucket gains a second.
    fn per_second(self) -> f64 {
        f64::from(self.requests_per_minute) / 60.0
    }
}

/// The limits of principals and of the local caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub principals: Caps,
    pub local: Caps,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { principals: Caps::DEFAULT, local: Caps::NONE }
    }
}

impl Settings {
    /// The limits the variables set (`get` reads one, already checked to be a whole number): a
    /// set variable applies to principals and the local caller alike; an unset one leaves the
    /// principals' default and no limit for the local caller.
    pub fn from_env<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Settings {
        let read = |name: &str| get(name).and_then(|v| v.parse::<u32>().ok());
        let caps = |default: Caps| Caps {
            concurrent_calls: read(CONCURRENT_CALLS_VAR).unwrap_or(default.concurrent_calls),
            chat_turns: read(CHAT_TURNS_VAR).unwrap_or(default.chat_turns),
            requests_per_minute: read(REQUESTS_PER_MINUTE_VAR).unwrap_or(default.requests_per_minute),
        };
        Settings { principals: caps(Caps::DEFAULT), local: caps(Caps::NONE) }
    }
}

/// Whose limits a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// The one caller without a principal.
    Local,
    Principal(PrincipalId),
}

impl Key {
    /// The key of a request's principal, if a token named one.
    pub fn of(principal: Option<&Principal>) -> Key {
        principal.map_or(Key::Local, |p| Key::Principal(p.id()))
    }
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    RequestsPerMinute,
    ConcurrentCalls,
    ChatTurns,
}

impl Limit {
    const ALL: [Limit; 3] = [Limit::RequestsPerMinute, Limit::ConcurrentCalls, Limit::ChatTurns];

    /// The limit's name in answers and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            Limit::RequestsPerMinute => "requests_per_minute",
            Limit::ConcurrentCalls => "concurrent_calls",
            Limit::ChatTurns => "chat_turns",
        }
    }

    const fn variable(self) -> &'static str {
        match self {
            Limit::RequestsPerMinute => REQUESTS_PER_MINUTE_VAR,
            Limit::ConcurrentCalls => CONCURRENT_CALLS_VAR,
            Limit::ChatTurns => CHAT_TURNS_VAR,
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// A request refused: the limit, its value, and when trying again may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Refusal {
    pub limit: Limit,
    pub value: u32,
    /// Whole seconds, at least 1.
    pub retry_after: u64,
}

impl Refusal {
    /// What the caller reads.
    pub fn message(&self) -> String {
        let (value, variable, retry) = (self.value, self.limit.variable(), self.retry_after);
        let what = match self.limit {
            Limit::RequestsPerMinute => format!("more than {value} requests a minute"),
            Limit::ConcurrentCalls => format!("more than {value} tool calls at once"),
            Limit::ChatTurns => format!("more than {value} ai_chat turns at once"),
        };
        format!("Rate limited: {what} for this caller ({variable}={value}); retry in {retry} s.")
    }
}

/// What is known of one caller.
#[derive(Debug)]
struct Entry {
    calls: u32,
    chats: u32,
    /// Requests the bucket holds, as of `refilled`.
    tokens: f64,
    refilled: Instant,
}

impl Entry {
    fn new(caps: Caps, now: Instant) -> Entry {
        Entry { calls: 0, chats: 0, tokens: caps.burst(), refilled: now }
    }

    fn refill(&mut self, caps: Caps, now: Instant) {
        let gained = now.saturating_duration_since(self.refilled).as_secs_f64() * caps.per_second();
        self.tokens = (self.tokens + gained).min(caps.burst());
        self.refilled = now;
    }

    /// Whether the entry says no more than an absent one: nothing in flight, the bucket full.
    fn idle(&mut self, caps: Caps, now: Instant) -> bool {
        self.refill(caps, now);
        self.calls == 0 && self.chats == 0 && (caps.requests_per_minute == 0 || self.tokens >= caps.burst())
    }
}

#[derive(Debug)]
struct Shard {
    entries: HashMap<Key, Entry>,
    /// The size at which idle entries are next swept out.
    sweep_at: usize,
}

/// The admission state of every caller.
#[derive(Debug)]
pub struct Limits {
    settings: Settings,
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    refused: [AtomicU64; Limit::ALL.len()],
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(Settings::default())
    }
}

impl Limits {
    pub fn new(settings: Settings) -> Limits {
        let shard = || Mutex::new(Shard { entries: HashMap::new(), sweep_at: FIRST_SWEEP });
        Limits {
            settings,
            shards: (0..SHARDS).map(|_| shard()).collect(),
            hasher: RandomState::new(),
            refused: Default::default(),
        }
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    fn caps(&self, key: &Key) -> Caps {
        match key {
            Key::Local => self.settings.local,
            Key::Principal(_) => self.settings.principals,
        }
    }

    /// Runs `change` on `key`'s entry (made when absent), its shard locked for no longer.
    fn with_entry<T>(&self, key: &Key, now: Instant, change: impl FnOnce(&mut Entry, Caps) -> T) -> T {
        let caps = self.caps(key);
        let index = (self.hasher.hash_one(key) as usize) % self.shards.len();
        let mut shard = self.shards[index].lock().unwrap_or_else(PoisonError::into_inner);
        if !shard.entries.contains_key(key) && shard.entries.len() >= shard.sweep_at {
            shard.entries.retain(|key, entry| !entry.idle(self.caps(key), now));
            // Twice what is left: the sweeps' cost stays in proportion to the entries made.
            shard.sweep_at = (shard.entries.len() * 2).max(FIRST_SWEEP);
        }
        let entry = shard.entries.entry(key.clone()).or_insert_with(|| Entry::new(caps, now));
        change(entry, caps)
    }

    fn refuse(&self, limit: Limit, value: u32, retry_after: u64) -> Refusal {
        self.refused[limit.index()].fetch_add(1, Ordering::Relaxed);
        Refusal { limit, value, retry_after: retry_after.max(1) }
    }

    /// Counts one request against `key`'s rate.
    pub fn request(&self, key: &Key) -> Result<(), Refusal> {
        self.request_at(key, Instant::now())
    }

    fn request_at(&self, key: &Key, now: Instant) -> Result<(), Refusal> {
        let caps = self.caps(key);
        if caps.requests_per_minute == 0 {
            return Ok(());
        }
        let short = self.with_entry(key, now, |entry, caps| {
            entry.refill(caps, now);
            if entry.tokens >= 1.0 {
                entry.tokens -= 1.0;
                None
            } else {
                Some(1.0 - entry.tokens)
            }
        });
        match short {
            None => Ok(()),
            Some(missing) => {
                // Whole seconds, rounded up: the bucket holds a request again by then.
                let wait = (missing / caps.per_second()).ceil() as u64;
                Err(self.refuse(Limit::RequestsPerMinute, caps.requests_per_minute, wait))
            }
        }
    }

    /// Admits a tool call of `key` (`chat`: an `ai_chat` turn, which counts against both limits),
    /// held until the [`Admission`] is dropped.
    pub fn call(self: &Arc<Self>, key: Key, chat: bool) -> Result<Admission, Refusal> {
        let refused = self.with_entry(&key, Instant::now(), |entry, caps| {
            let full = |held: u32, cap: u32| cap != 0 && held >= cap;
            if full(entry.calls, caps.concurrent_calls) {
                return Some((Limit::ConcurrentCalls, caps.concurrent_calls));
            }
            if chat && full(entry.chats, caps.chat_turns) {
                return Some((Limit::ChatTurns, caps.chat_turns));
            }
            entry.calls += 1;
            entry.chats += u32::from(chat);
            None
        });
        match refused {
            Some((limit, value)) => Err(self.refuse(limit, value, BUSY_RETRY_SECONDS)),
            None => Ok(Admission { limits: self.clone(), key, chat }),
        }
    }

    /// Refusals so far, by limit (`metrics.rs`).
    pub fn refusals(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Limit::ALL.into_iter().map(|limit| (limit.as_str(), self.refused[limit.index()].load(Ordering::Relaxed)))
    }

    #[cfg(test)]
    fn entries(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).entries.len()).sum()
    }
}

/// A tool call admitted; dropping it frees its place.
#[derive(Debug)]
pub struct Admission {
    limits: Arc<Limits>,
    key: Key,
    chat: bool,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let chat = self.chat;
        self.limits.with_entry(&self.key, Instant::now(), |entry, _| {
            entry.calls = entry.calls.saturating_sub(1);
            entry.chats = entry.chats.saturating_sub(u32::from(chat));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn principal(subject: &str) -> Key {
        Key::Principal(PrincipalId { issuer: "https://id.example".into(), subject: subject.into() })
    }

    fn limits(caps: Caps) -> Arc<Limits> {
        Arc::new(Limits::new(Settings { principals: caps, local: caps }))
    }

    fn refused(limits: &Limits, limit: &str) -> u64 {
        limits.refusals().find(|(name, _)| *name == limit).map_or(0, |(_, n)| n)
    }

    #[test]
    fn a_call_over_the_concurrency_limit_is_refused_until_one_ends() {
        let limits = limits(Caps { concurrent_calls: 2, ..Caps::NONE });
        let a = principal("a");
        let first = limits.call(a.clone(), false).unwrap();
        let _second = limits.call(a.clone(), false).unwrap();
        let refusal = limits.call(a.clone(), false).unwrap_err();
        assert_eq!((refusal.limit, refusal.value, refusal.retry_after), (Limit::ConcurrentCalls, 2, 1));
        assert!(refusal.message().contains("CKS_MCP_LIMIT_CONCURRENT_CALLS=2"), "{}", refusal.message());
        drop(first);
        let _third = limits.call(a.clone(), false).unwrap();
        assert_eq!(refused(&limits, "concurrent_calls"), 1);
    }

    #[tokio::test]
    async fn a_dropped_call_frees_its_place() {
        let limits = limits(Caps { concurrent_calls: 1, ..Caps::NONE });
        let admission = limits.call(Key::Local, false).unwrap();
        // A call's future holding its admission, dropped before it ends (a client that went away).
        let call = async move {
            let _held = admission;
            futures::future::pending::<()>().await;
        };
        let mut call = Box::pin(call);
        assert!(futures::poll!(call.as_mut()).is_pending());
        assert!(limits.call(Key::Local, false).is_err());
        drop(call);
        assert!(limits.call(Key::Local, false).is_ok());
    }

    #[test]
    fn a_chat_turn_counts_against_both_limits() {
        let limits = limits(Caps { concurrent_calls: 3, chat_turns: 1, requests_per_minute: 0 });
        let a = principal("a");
        let turn = limits.call(a.clone(), true).unwrap();
        assert_eq!(limits.call(a.clone(), true).unwrap_err().limit, Limit::ChatTurns);
        let _calls = [limits.call(a.clone(), false).unwrap(), limits.call(a.clone(), false).unwrap()];
        assert_eq!(limits.call(a.clone(), false).unwrap_err().limit, Limit::ConcurrentCalls, "the turn is a call");
        drop(turn);
        assert!(limits.call(a.clone(), true).is_ok());
    }

    #[test]
    fn the_rate_refuses_past_the_burst_and_says_when_to_come_back() {
        // 60 a minute: one a second, ten in the bucket.
        let limits = limits(Caps { requests_per_minute: 60, ..Caps::NONE });
        let (a, start) = (principal("a"), Instant::now());
        for _ in 0..10 {
            limits.request_at(&a, start).unwrap();
        }
        let refusal = limits.request_at(&a, start).unwrap_err();
        assert_eq!((refusal.limit, refusal.value, refusal.retry_after), (Limit::RequestsPerMinute, 60, 1));
        // Half a second later, half a request is still missing: one second, rounded up.
        assert_eq!(limits.request_at(&a, start + Duration::from_millis(500)).unwrap_err().retry_after, 1);
        limits.request_at(&a, start + Duration::from_secs(1)).unwrap();

        // 6 a minute: one every ten seconds, one in the bucket.
        let slow = self::limits(Caps { requests_per_minute: 6, ..Caps::NONE });
        slow.request_at(&a, start).unwrap();
        assert_eq!(slow.request_at(&a, start).unwrap_err().retry_after, 10);
        assert_eq!(slow.request_at(&a, start + Duration::from_secs(4)).unwrap_err().retry_after, 6);
        slow.request_at(&a, start + Duration::from_secs(10)).unwrap();
        assert_eq!(refused(&slow, "requests_per_minute"), 2);
    }

    #[test]
    fn one_principal_at_its_limit_leaves_another_alone() {
        let limits = limits(Caps { concurrent_calls: 1, chat_turns: 1, requests_per_minute: 6 });
        let (a, b, now) = (principal("a"), principal("b"), Instant::now());
        let _held = limits.call(a.clone(), true).unwrap();
        limits.request_at(&a, now).unwrap();
        assert!(limits.call(a.clone(), false).is_err() && limits.request_at(&a, now).is_err());
        let _other = limits.call(b.clone(), true).unwrap();
        limits.request_at(&b, now).unwrap();
        assert!(limits.call(Key::Local, true).is_ok(), "the local caller is another key");
    }

    #[test]
    fn zero_means_no_limit() {
        let limits = limits(Caps::NONE);
        let now = Instant::now();
        let held: Vec<Admission> = (0..1000).map(|_| limits.call(principal("a"), true).unwrap()).collect();
        assert!((0..1000).all(|_| limits.request_at(&principal("a"), now).is_ok()));
        assert_eq!(held.len(), 1000);
        assert!(limits.refusals().all(|(_, n)| n == 0));
    }

    #[test]
    fn the_defaults_limit_principals_and_set_variables_everyone() {
        let unset = Settings::from_env(|_| None);
        assert_eq!(unset, Settings::default());
        assert_eq!((unset.principals, unset.local), (Caps::DEFAULT, Caps::NONE));
        let set = Settings::from_env(|name| (name == CHAT_TURNS_VAR).then_some("0"));
        assert_eq!(set.principals, Caps { chat_turns: 0, ..Caps::DEFAULT });
        assert_eq!(set.local, Caps { chat_turns: 0, ..Caps::NONE });
        let limits = Arc::new(Limits::default());
        let now = Instant::now();
        assert!((0..1000).all(|_| limits.request_at(&Key::Local, now).is_ok()));
        assert!((0..100).all(|_| limits.request_at(&principal("a"), now).is_ok()));
        assert!(limits.request_at(&principal("a"), now).is_err(), "the default burst is 100");
    }

    #[test]
    fn idle_principals_are_swept_out() {
        let limits = limits(Caps { concurrent_calls: 4, chat_turns: 0, requests_per_minute: 60 });
        let start = Instant::now();
        let busy = limits.call(principal("busy"), false).unwrap();
        for n in 0..10_000 {
            limits.request_at(&principal(&format!("early {n}")), start).unwrap();
        }
        assert_eq!(limits.entries(), 10_001, "no bucket is full again yet: nothing is forgotten");
        // A minute on, every early bucket is full again: as new principals come, each shard is
        // swept and only the principal with a call in flight stays of the early ones.
        let later = start + Duration::from_secs(60);
        for n in 0..10_000 {
            limits.request_at(&principal(&format!("late {n}")), later).unwrap();
        }
        assert!(limits.entries() <= 10_001, "{}", limits.entries());
        assert!(limits.call(principal("busy"), false).is_ok());
        drop(busy);
    }
}
