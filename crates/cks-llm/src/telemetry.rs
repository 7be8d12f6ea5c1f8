//! Per-call telemetry in bounded memory, for `get_metrics`: provider, model, latency, tokens, retries and
//! outcome of each call. It never holds message content or keys (model names are redacted like everything
//! else that leaves the HTTP layer).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::conversation::{ProviderKind, Usage};
use crate::error::ErrorKind;

/// What was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// A chat call.
    Chat,
    /// A model listing.
    ListModels,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// An answer.
    Ok,
    /// An error of this class.
    Error(ErrorKind),
}

/// One call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallRecord {
    /// When it started, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// The provider (absent when none could be chosen).
    pub provider: Option<ProviderKind>,
    /// The model requested.
    pub model: String,
    /// What was called.
    pub operation: Operation,
    /// Whether the answer was asked for as a stream.
    pub streamed: bool,
    /// A stream was asked for and the provider answered with one whole (non-streamed) body, which was
    /// read as the answer (some gateways and local servers ignore `stream`).
    pub whole_answer: bool,
    /// Wall time including retries.
    pub latency_ms: u64,
    /// Prompt tokens (0 on error).
    pub input_tokens: u64,
    /// Generated tokens (0 on error).
    pub output_tokens: u64,
    /// Retries after the first attempt.
    pub retries: u32,
    /// How it ended.
    pub outcome: CallOutcome,
}

/// Counters over every call since start (not only those still in the ring).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Calls.
    pub calls: u64,
    /// Calls that got an answer.
    pub ok: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Retries made.
    pub retries: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Sum of latencies, for averages.
    pub latency_ms: u64,
}

impl Totals {
    fn add(&mut self, r: &CallRecord) {
        self.calls += 1;
        match r.outcome {
            CallOutcome::Ok => self.ok += 1,
            CallOutcome::Error(_) => self.errors += 1,
        }
        self.retries += u64::from(r.retries);
        self.input_tokens += r.input_tokens;
        self.output_tokens += r.output_tokens;
        self.latency_ms += r.latency_ms;
    }
}

/// A serializable copy of the telemetry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TelemetrySnapshot {
    /// How many calls the ring keeps.
    pub capacity: usize,
    /// The most recent calls, oldest first.
    pub recent: Vec<CallRecord>,
    /// Counters over all calls.
    pub totals: Totals,
    /// Counters per provider (`"none"` for calls that found no provider).
    pub by_provider: BTreeMap<String, Totals>,
    /// Error counts per class.
    pub errors_by_kind: BTreeMap<ErrorKind, u64>,
}

#[derive(Debug, Default)]
struct State {
    recent: VecDeque<CallRecord>,
    totals: Totals,
    by_provider: BTreeMap<String, Totals>,
    errors_by_kind: BTreeMap<ErrorKind, u64>,
}

/// The bounded store.
#[derive(Debug)]
pub(crate) struct Telemetry {
    capacity: usize,
    state: Mutex<State>,
}

/// What the client knows when a call ends.
#[derive(Debug)]
pub(crate) struct CallInfo<'a> {
    pub(crate) started: SystemTime,
    pub(crate) provider: Option<ProviderKind>,
    pub(crate) model: &'a str,
    pub(crate) operation: Operation,
    pub(crate) streamed: bool,
    pub(crate) whole_answer: bool,
    pub(crate) latency: Duration,
    pub(crate) usage: Usage,
    pub(crate) retries: u32,
    pub(crate) outcome: CallOutcome,
}

impl Telemetry {
    pub(crate) fn new(capacity: usize) -> Self {
        Telemetry { capacity: capacity.max(1), state: Mutex::new(State::default()) }
    }

    pub(crate) fn record(&self, c: CallInfo<'_>) {
        let record = CallRecord {
            started_unix_ms: c
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0)),
            provider: c.provider,
            model: c.model.to_owned(),
            operation: c.operation,
            streamed: c.streamed,
            whole_answer: c.whole_answer,
            latency_ms: u64::try_from(c.latency.as_millis()).unwrap_or(u64::MAX),
            input_tokens: c.usage.input_tokens,
            output_tokens: c.usage.output_tokens,
            retries: c.retries,
            outcome: c.outcome,
        };
        // A poisoned lock only means another thread panicked mid-update; counters are still usable.
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.totals.add(&record);
        let key = record.provider.map_or_else(|| "none".to_owned(), |p| p.to_string());
        s.by_provider.entry(key).or_default().add(&record);
        if let CallOutcome::Error(k) = record.outcome {
            *s.errors_by_kind.entry(k).or_default() += 1;
        }
        if s.recent.len() == self.capacity {
            s.recent.pop_front();
        }
        s.recent.push_back(record);
    }

    pub(crate) fn snapshot(&self) -> TelemetrySnapshot {
        let s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        TelemetrySnapshot {
            capacity: self.capacity,
            recent: s.recent.iter().cloned().collect(),
            totals: s.totals.clone(),
            by_provider: s.by_provider.clone(),
            errors_by_kind: s.errors_by_kind.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_totals_cover_everything() {
        let t = Telemetry::new(2);
        for i in 0..5u64 {
            t.record(CallInfo {
                started: SystemTime::now(),
                provider: Some(ProviderKind::Ollama),
                model: "m",
                operation: Operation::Chat,
                streamed: false,
                whole_answer: false,
                latency: Duration::from_millis(10),
                usage: Usage { input_tokens: i, output_tokens: 1 },
                retries: 1,
                outcome: if i == 0 { CallOutcome::Error(ErrorKind::Timeout) } else { CallOutcome::Ok },
            });
        }
        let s = t.snapshot();
        assert_eq!(s.recent.len(), 2);
        assert_eq!(s.recent[1].input_tokens, 4);
        assert_eq!(s.totals.calls, 5);
        assert_eq!(s.totals.errors, 1);
        assert_eq!(s.totals.retries, 5);
        assert_eq!(s.by_provider["ollama"].input_tokens, 10);
        assert_eq!(s.errors_by_kind[&ErrorKind::Timeout], 1);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["recent"][0]["outcome"], "ok");
    }
}
