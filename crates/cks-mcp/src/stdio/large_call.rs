//! A large tool call, read without copying its large arguments.
//!
//! rmcp reads a message through serde's buffering (an untagged enum holding a flattened one),
//! which copies each string it holds several times: a 300 MB `json_data` would be in memory four
//! times over at once. Here the message's structure is skimmed as far as the call's arguments,
//! the arguments' strings decoded as they are found, each once, into a buffer of its own
//! ([`json_text::decode_string`]); the rest of the message, the large strings left out, goes
//! through rmcp, and the strings are then moved into the parsed call.
//!
//! The skim reads only what locates the arguments: the top-level object, its `params` object,
//! that object's `arguments` object. Whatever else the message holds is passed over, and checked
//! when rmcp reads the rest: a large string is a whole string token in value position (where
//! `null` stands in for it), so the rest is well-formed exactly when the message was.

use std::borrow::Cow;
use std::ops::Range;

use rmcp::RoleServer;
use rmcp::model::{ClientRequest, JsonRpcMessage};
use rmcp::service::RxJsonRpcMessage;
use serde_json::{Map, Value};

use crate::json_text::{self, LARGE_TEXT_BYTES};

/// The message read with its large string arguments decoded once; `None` for every message
/// without one, and for any fault, which the ordinary path then reports in its own words.
pub(super) fn large_message(body: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
    if body.len() < LARGE_TEXT_BYTES {
        return None;
    }
    let large = large_arguments(body)?;
    if large.is_empty() {
        return None;
    }
    let mut rest = Vec::with_capacity(body.len() - large.iter().map(|(range, ..)| range.len()).sum::<usize>() + 64);
    let mut taken = Map::new();
    let mut end = 0;
    for (range, name, text) in large {
        rest.extend_from_slice(&body[end..range.start]);
        rest.extend_from_slice(b"null");
        end = range.end;
        // A name given twice keeps its last value, as everywhere in serde_json.
        taken.insert(name, Value::String(text));
    }
    rest.extend_from_slice(&body[end..]);
    let mut message = serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(&rest).ok()?;
    let JsonRpcMessage::Request(request) = &mut message else { return None };
    let ClientRequest::CallToolRequest(call) = &mut request.request else { return None };
    call.params.arguments.as_mut()?.extend(taken);
    Some(message)
}

/// A large string argument: its token's place in the body, its name and its text.
type LargeArgument = (Range<usize>, String, String);

/// The string arguments of [`LARGE_TEXT_BYTES`] or more, in the order they come; `None` where
/// the skim finds something it cannot read (or `params` or `arguments` given twice, which serde
/// refuses and the ordinary path then reports).
fn large_arguments(body: &[u8]) -> Option<Vec<LargeArgument>> {
    let mut skim = Skim { body, at: 0 };
    let mut large = Vec::new();
    let (mut params_seen, mut arguments_seen) = (false, false);
    skim.members(|skim, key| {
        skim.object_once(&key, "params", &mut params_seen, |skim| {
            skim.members(|skim, key| {
                skim.object_once(&key, "arguments", &mut arguments_seen, |skim| {
                    skim.members(|skim, name| {
                        if skim.peek()? != b'"' {
                            return skim.pass_value();
                        }
                        let start = skim.at;
                        let (text, end) = json_text::decode_string(skim.body, start)?;
                        skim.at = end;
                        if text.len() >= LARGE_TEXT_BYTES {
                            large.push((start..end, name.into_owned(), text));
                        }
                        Some(())
                    })
                })
            })
        })
    })?;
    Some(large)
}

/// A cursor over a message's bytes.
struct Skim<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Skim<'a> {
    /// The next byte past whitespace, not taken.
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.body.get(self.at) {
            self.at += 1;
        }
        self.body.get(self.at).copied()
    }

    fn take(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object's members, each key handed to `each` with the cursor at its value, which `each`
    /// reads or passes over.
    fn members(&mut self, mut each: impl FnMut(&mut Self, Cow<'a, str>) -> Option<()>) -> Option<()> {
        self.take(b'{')?;
        if self.take(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.take(b':')?;
            each(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// At a member's value: `read` it when the member is `wanted` and holds an object (the first
    /// time only: `seen`, then `None`), pass over it otherwise.
    fn object_once(
        &mut self,
        key: &str,
        wanted: &str,
        seen: &mut bool,
        read: impl FnOnce(&mut Self) -> Option<()>,
    ) -> Option<()> {
        if key != wanted || self.peek()? != b'{' {
            return self.pass_value();
        }
        if std::mem::replace(seen, true) {
            return None;
        }
        read(self)
    }

    /// A key, decoded only when it holds an escape.
    fn key(&mut self) -> Option<Cow<'a, str>> {
        self.peek()?;
        let start = self.at;
        let end = self.pass_string()?;
        let inner = &self.body[start + 1..end - 1];
        if inner.contains(&b'\\') {
            serde_json::from_slice::<String>(&self.body[start..end]).ok().map(Cow::Owned)
        } else {
            std::str::from_utf8(inner).ok().map(Cow::Borrowed)
        }
    }

    /// Past a string token at the cursor; the index past its closing quote.
    fn pass_string(&mut self) -> Option<usize> {
        if self.body.get(self.at) != Some(&b'"') {
            return None;
        }
        let mut at = self.at + 1;
        loop {
            at += memchr::memchr2(b'"', b'\\', self.body.get(at..)?)?;
            if self.body[at] == b'"' {
                self.at = at + 1;
                return Some(self.at);
            }
            at += 2;
        }
    }

    /// Past a value of any kind, its brackets counted and its strings passed over, not checked.
    fn pass_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pass_string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.at += 1;
                }
                b',' | b':' if depth > 0 => self.at += 1,
                _ => {
                    // A number or a literal: up to what ends it.
                    let len = self.body[self.at..]
                        .iter()
                        .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                        .unwrap_or(self.body.len() - self.at);
                    if len == 0 {
                        return None;
                    }
                    self.at += len;
                }
            }
            if depth == 0 {
                return Some(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the ordinary path reads from `body`.
    fn ordinary(body: &[u8]) -> Option<Value> {
        serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(body).ok().map(|m| serde_json::to_value(m).unwrap())
    }

    fn read(body: &[u8]) -> Option<Value> {
        large_message(body).map(|m| serde_json::to_value(m).unwrap())
    }

    fn large_text() -> String {
        "{\"objects\": [\"é\\n\"]}".repeat(LARGE_TEXT_BYTES / 10)
    }

    #[test]
    fn a_large_call_reads_as_the_ordinary_path_reads_it() {
        let large = large_text();
        // Control characters and astral ones are written as `\u` escapes.
        let controls = format!("\u{1}{large}😀");
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "validate_knowledge",
            "_meta": {"progressToken": "t", "list": [1, {"a": "]}"}, null, true, -2.5e3]},
            "arguments": {"json_data": large, "nested": {"also": large}, "extensions": ["x"], "controls": controls,
                "empty": {}, "n": 3}}});
        let body = serde_json::to_vec(&call).unwrap();
        assert_eq!(read(&body).expect("read"), ordinary(&body).unwrap());
        // Spaced out, with escaped keys, a name given twice (the last one counts), members in
        // another order.
        let spaced = format!(
            " {{ \"par\\u0061ms\" : {{ \"arguments\" : {{ \"json_data\" : {small} , \"json_data\" : {large} }} , \
             \"name\" : \"validate_knowledge\" }} , \"method\" : \"tools/call\" , \"id\" : 4 , \"jsonrpc\" : \"2.0\" }} ",
            small = serde_json::to_string(&large[..10]).unwrap(),
            large = serde_json::to_string(&large).unwrap(),
        );
        let read_spaced = read(spaced.as_bytes()).expect("read");
        assert_eq!(read_spaced, ordinary(spaced.as_bytes()).unwrap());
        assert_eq!(read_spaced["params"]["arguments"]["json_data"], json!(large));
    }

    #[test]
    fn anything_else_takes_the_ordinary_path() {
        let large = large_text();
        let others = [
            json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get", "params": {"name": "p", "arguments": {"text": large}}}),
            json!({"jsonrpc": "2.0", "id": 5, "params": {"arguments": {"text": large}}}),
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "x", "arguments": {"small": "s"}}}),
            json!([{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x", "arguments": {"t": large}}}]),
        ];
        for other in others {
            assert!(large_message(&serde_json::to_vec(&other).unwrap()).is_none(), "{:.200}", other.to_string());
        }
        // Well-formed calls around a large string, and broken ones (each refused by serde too).
        let text = serde_json::to_string(&large).unwrap();
        let call = |arguments: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"x","arguments":{arguments}}}}}"#
            )
        };
        let broken = [
            call(&format!(r#"{{"t":{}}}"#, &text[..text.len() - 1])),
            call(&format!(r#"{{"t":{text} "u":1}}"#)),
            call(&format!(r#"{{"t":{text},}}"#)),
            call(&format!(r#"{{"t":{text}}}"#)) + "}",
            call(&format!(r#"{{"t":{text}}}"#)).replace(r#""params""#, r#""params":{},"params""#),
            call(&format!(r#"{{"t":{text}}}"#)).replacen(r#"\""#, r#"\q"#, 1),
            call(&format!(r#"{{"t":{text}}}"#)).replacen('é', "\u{1}", 1),
            call(&format!(r#"{{"t":{text}, "u": [1,}}"#)),
        ];
        for body in broken {
            assert!(ordinary(body.as_bytes()).is_none(), "serde read {:.200}", body);
            assert!(read(body.as_bytes()).is_none(), "read {:.200}", body);
        }
    }
}
