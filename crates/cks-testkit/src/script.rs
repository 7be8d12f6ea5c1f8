//! The script: what the server answers, independent of the wire format.
//!
//! A [`Reply`] describes one answer (or one fault). The server pops replies from a FIFO queue shared by all
//! endpoints and renders each in the wire format of the endpoint that was hit, so one script drives any of the
//! four providers. Wrappers ([`Reply::Usage`], [`Reply::Delay`], [`Reply::Paced`], [`Reply::NotStreamed`]) nest
//! freely around any other variant.

use std::time::Duration;

use serde_json::Value;

/// Token counts used when a reply is not wrapped in [`Reply::Usage`].
pub const DEFAULT_USAGE: (u32, u32) = (11, 7);

/// One scripted answer or fault.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A plain text answer (`end_turn` / `stop` / `STOP`).
    Text(String),
    /// One or several tool calls in one answer, no text.
    ToolCalls(Vec<ToolCall>),
    /// Text followed by tool calls in one answer.
    TextAndToolCalls(String, Vec<ToolCall>),
    /// A structured answer: the JSON value a model gives a request that asks for an output schema. Anthropic,
    /// when the request forces a tool (`tool_choice: {"type": "tool", "name": …}`), answers as the real API does: one
    /// `tool_use` block calling that tool with the value as its input (a non-object wrapped as `{"value": …}`, as
    /// for [`ToolCall::arguments`]) and stop reason `tool_use`. Everywhere else the answer is the value's JSON
    /// text, as a text answer.
    Json(Value),
    /// Sets the input and output token counts reported for the wrapped reply (the outermost wins when nested;
    /// without it: [`DEFAULT_USAGE`]).
    Usage(Box<Reply>, u32, u32),
    /// Waits this long before answering with the wrapped reply.
    Delay(Duration, Box<Reply>),
    /// Streaming requests: the wrapped reply's chunks are written this far apart (the first at once), as a
    /// model generating its answer piece by piece; each chunk is recorded with when it was handed to the
    /// connection ([`crate::RecordedRequest::sent`]). Other requests are answered as without it.
    Paced(Duration, Box<Reply>),
    /// Streaming requests: the wrapped reply as the endpoint renders it for a request that did not ask to stream,
    /// one whole JSON body (`content-type: application/json`), as some gateways and local servers answer whatever
    /// was asked. Gemini's streaming endpoint gets the `generateContent` body. Other requests are answered as
    /// without it.
    NotStreamed(Box<Reply>),
    /// A raw reply: this status, these headers and this body, whatever the endpoint.
    Status {
        /// HTTP status code.
        status: u16,
        /// Extra response headers (name, value).
        headers: Vec<(String, String)>,
        /// The body, served as is.
        body: String,
    },
    /// 429 in the provider's own error shape, with a `retry-after` header when `retry_after_secs` is set (Gemini
    /// also gets a `google.rpc.RetryInfo` `retryDelay` in the body).
    RateLimited {
        /// Seconds to wait, announced in `retry-after` (and Gemini's `retryDelay`); `None` sends neither.
        retry_after_secs: Option<u64>,
    },
    /// Anthropic: 529 `overloaded_error`; the others: 503 in their error shape.
    Overloaded,
    /// 500 in the provider's error shape.
    ServerError,
    /// 200 with a body that is not JSON (for streaming requests: a stream whose data is not JSON).
    Garbage,
    /// 200 with a normal answer body cut in half (for streaming requests: the stream cut in half).
    Truncated,
    /// Streaming requests: some chunks, then the provider's in-stream error. Non-streaming requests: 200 whose body
    /// is the provider's error JSON.
    ErrorMidStream,
    /// Closes the TCP connection without sending a response.
    DropConnection,
}

impl Reply {
    /// Shorthand for [`Reply::Text`].
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    /// Wraps `self` in [`Reply::Usage`].
    pub fn with_usage(self, input_tokens: u32, output_tokens: u32) -> Reply {
        Reply::Usage(Box::new(self), input_tokens, output_tokens)
    }

    /// Wraps `self` in [`Reply::Delay`].
    pub fn delayed(self, delay: Duration) -> Reply {
        Reply::Delay(delay, Box::new(self))
    }

    /// Wraps `self` in [`Reply::Paced`].
    pub fn paced(self, gap: Duration) -> Reply {
        Reply::Paced(gap, Box::new(self))
    }

    /// Wraps `self` in [`Reply::NotStreamed`].
    pub fn not_streamed(self) -> Reply {
        Reply::NotStreamed(Box::new(self))
    }

    /// Unwraps the wrappers: total delay, the gap between streamed chunks (the outermost wins), whether a
    /// streaming request gets the whole body, and the outcome to render.
    pub(crate) fn resolve(self) -> Resolved {
        let mut delay = Duration::ZERO;
        let mut usage = None;
        let mut pace = None;
        let mut not_streamed = false;
        let mut reply = self;
        loop {
            match reply {
                Reply::NotStreamed(inner) => {
                    not_streamed = true;
                    reply = *inner;
                }
                Reply::Delay(d, inner) => {
                    delay += d;
                    reply = *inner;
                }
                Reply::Paced(gap, inner) => {
                    pace.get_or_insert(gap);
                    reply = *inner;
                }
                Reply::Usage(inner, i, o) => {
                    // The outermost wrapper wins.
                    usage.get_or_insert((i, o));
                    reply = *inner;
                }
                other => {
                    let (input_tokens, output_tokens) = usage.unwrap_or(DEFAULT_USAGE);
                    let answer = |text: Option<String>, calls: Vec<ToolCall>| {
                        Outcome::Answer(Answer { text, calls, json: None, input_tokens, output_tokens })
                    };
                    let outcome = match other {
                        Reply::Text(t) => answer(Some(t), Vec::new()),
                        Reply::Json(v) => Outcome::Answer(Answer {
                            text: Some(v.to_string()),
                            calls: Vec::new(),
                            json: Some(v),
                            input_tokens,
                            output_tokens,
                        }),
                        Reply::ToolCalls(c) => answer(None, c),
                        Reply::TextAndToolCalls(t, c) => answer(Some(t), c),
                        Reply::Status { status, headers, body } => {
                            Outcome::Fault(Fault::Status { status, headers, body })
                        }
                        Reply::RateLimited { retry_after_secs } => {
                            Outcome::Fault(Fault::RateLimited { retry_after_secs })
                        }
                        Reply::Overloaded => Outcome::Fault(Fault::Overloaded),
                        Reply::ServerError => Outcome::Fault(Fault::ServerError),
                        Reply::Garbage => Outcome::Fault(Fault::Garbage),
                        Reply::Truncated => Outcome::Fault(Fault::Truncated),
                        Reply::ErrorMidStream => Outcome::Fault(Fault::ErrorMidStream),
                        Reply::DropConnection => Outcome::Fault(Fault::DropConnection),
                        Reply::Delay(..) | Reply::Usage(..) | Reply::Paced(..) | Reply::NotStreamed(..) => {
                            unreachable!("unwrapped above")
                        }
                    };
                    return Resolved { delay, pace, not_streamed, outcome };
                }
            }
        }
    }
}

impl From<&str> for Reply {
    fn from(text: &str) -> Reply {
        Reply::Text(text.to_owned())
    }
}

/// A tool call in a scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call id. `None`: the server omits it where the format allows (Gemini, Ollama) and makes one up where it
    /// is required (Anthropic `toolu_…`, OpenAI `call_…`).
    pub id: Option<String>,
    /// The tool name.
    pub name: String,
    /// The arguments, normally a JSON object. A JSON **string** is sent verbatim where the wire carries arguments
    /// as text (OpenAI `arguments`, Anthropic streamed `partial_json`), so tests can script malformed arguments;
    /// where the wire needs an object, non-objects are wrapped as `{"value": …}`.
    pub arguments: Value,
}

impl ToolCall {
    /// A call without an id.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        ToolCall { id: None, name: name.into(), arguments }
    }

    /// A call with a fixed id.
    pub fn with_id(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall { id: Some(id.into()), name: name.into(), arguments }
    }
}

/// A reply with its wrappers unwrapped.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// How long to wait before answering.
    pub(crate) delay: Duration,
    /// The gap between streamed chunks.
    pub(crate) pace: Option<Duration>,
    /// A streaming request is answered as a non-streaming one would be.
    pub(crate) not_streamed: bool,
    pub(crate) outcome: Outcome,
}

/// A resolved reply.
#[derive(Debug)]
pub(crate) enum Outcome {
    Answer(Answer),
    Fault(Fault),
}

/// A successful answer, ready to render.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) text: Option<String>,
    pub(crate) calls: Vec<ToolCall>,
    /// [`Reply::Json`]'s value (`text` is then its JSON text): what a forced tool's call carries.
    pub(crate) json: Option<Value>,
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
}

impl Answer {
    /// The canned answer used for [`Reply::Truncated`] and the partial chunks of [`Reply::ErrorMidStream`].
    pub(crate) fn canned(text: &str) -> Answer {
        let (input_tokens, output_tokens) = DEFAULT_USAGE;
        Answer { text: Some(text.to_owned()), calls: Vec::new(), json: None, input_tokens, output_tokens }
    }
}

/// A fault, ready to render.
#[derive(Debug)]
pub(crate) enum Fault {
    Status { status: u16, headers: Vec<(String, String)>, body: String },
    RateLimited { retry_after_secs: Option<u64> },
    Overloaded,
    ServerError,
    Garbage,
    Truncated,
    ErrorMidStream,
    DropConnection,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_resolve_outermost_usage_and_sum_delays() {
        let r = Reply::text("hi")
            .with_usage(1, 2)
            .delayed(Duration::from_millis(5))
            .with_usage(3, 4)
            .delayed(Duration::from_millis(7));
        let Resolved { delay, pace, not_streamed, outcome } = r.resolve();
        assert_eq!(delay, Duration::from_millis(12));
        assert_eq!(pace, None);
        assert!(!not_streamed);
        match outcome {
            Outcome::Answer(a) => {
                assert_eq!(a.text.as_deref(), Some("hi"));
                assert_eq!((a.input_tokens, a.output_tokens), (3, 4));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_json_reply_is_its_text_and_keeps_its_value() {
        let value = serde_json::json!({"a": [1, 2]});
        let Resolved { outcome, .. } = Reply::Json(value.clone()).with_usage(5, 6).resolve();
        let Outcome::Answer(a) = outcome else { panic!() };
        assert_eq!(a.text.as_deref(), Some("{\"a\":[1,2]}"));
        assert_eq!(a.json, Some(value));
        assert!(a.calls.is_empty());
        assert_eq!((a.input_tokens, a.output_tokens), (5, 6));
    }

    #[test]
    fn default_usage_is_small_and_nonzero() {
        let Resolved { pace, not_streamed, outcome, .. } =
            Reply::ToolCalls(vec![ToolCall::new("f", serde_json::json!({}))])
                .paced(Duration::from_millis(3))
                .not_streamed()
                .resolve();
        assert_eq!(pace, Some(Duration::from_millis(3)));
        assert!(not_streamed);
        let Outcome::Answer(a) = outcome else { panic!() };
        assert!(a.input_tokens > 0 && a.output_tokens > 0);
        assert_eq!(a.calls.len(), 1);
        assert!(a.text.is_none());
    }
}
