//! Secret redaction, applied once at the boundary of the HTTP layer and the client.
//!
//! Every configured secret (the values of [`secret_variables`]) is replaced by `[REDACTED]` in error
//! messages, log fields and decoded responses before they leave this crate. The reference implementation
//! forgot the Google keys and the real HTTP token variable; that function is the one place to keep
//! complete (each provider's key variables come from its table entry).

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::conversation::{ContentBlock, Message};
use crate::error::LlmError;

/// Environment variables whose values are secrets: every provider's key variables and the HTTP token.
pub fn secret_variables() -> impl Iterator<Item = &'static str> {
    crate::providers::variables()
        .filter(|(setting, _)| *setting == crate::providers::Setting::Key)
        .map(|(_, variable)| variable.name)
        .chain(["CKS_MCP_HTTP_TOKEN"])
}

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Values shorter than this are not treated as secrets: replacing every occurrence of, say, `"x"` would
/// destroy messages, and a value that short protects nothing anyway (dummy keys for local servers).
const MIN_SECRET_LEN: usize = 4;

/// Replaces configured secret values in text. Cheap to clone.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so that a secret containing another is replaced whole.
    secrets: Arc<[String]>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secrets themselves.
        f.debug_struct("Redactor").field("secrets", &self.secrets.len()).finish()
    }
}

impl Redactor {
    /// A redactor for these values (empty and very short values are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut v: Vec<String> =
            secrets.into_iter().map(Into::into).filter(|s: &String| s.trim().len() >= MIN_SECRET_LEN).collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        v.dedup();
        Redactor { secrets: v.into() }
    }

    /// A redactor for the values of [`secret_variables`] in an injected environment.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        Redactor::new(secret_variables().filter_map(env))
    }

    /// The secret values (for merging redactors).
    pub(crate) fn secrets(&self) -> &[String] {
        &self.secrets
    }

    /// `text` with every secret replaced.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in self.secrets.iter() {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }

    /// Whether `text` contains a secret.
    pub fn leaks(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// The error with its message redacted.
    pub fn redact_error(&self, mut err: LlmError) -> LlmError {
        let ctx = err.context_mut();
        ctx.message = self.redact(&ctx.message);
        if let Some(m) = &ctx.model {
            ctx.model = Some(self.redact(m));
        }
        err
    }

    /// Redact every string in a JSON value, keys included.
    pub fn redact_value(&self, v: &mut Value) {
        if self.secrets.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                if self.leaks(s) {
                    *s = self.redact(s);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|x| self.redact_value(x)),
            Value::Object(map) => {
                if map.keys().any(|k| self.leaks(k)) {
                    let old = std::mem::take(map);
                    for (k, mut x) in old {
                        self.redact_value(&mut x);
                        map.insert(self.redact(&k), x);
                    }
                } else {
                    map.values_mut().for_each(|x| self.redact_value(x));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Redact a decoded message (a provider could echo a key back in text or tool arguments).
    pub fn redact_message(&self, m: &mut Message) {
        if self.secrets.is_empty() {
            return;
        }
        for b in &mut m.content {
            match b {
                ContentBlock::Text { text, .. } => *text = self.redact(text),
                ContentBlock::ToolUse { input, name, .. } => {
                    self.redact_value(input);
                    *name = self.redact(name);
                }
                ContentBlock::ToolResult { content, .. } => *content = self.redact(content),
                ContentBlock::Thinking { thinking, .. } => *thinking = self.redact(thinking),
                ContentBlock::RedactedThinking { .. } => {}
            }
        }
    }
}

/// Redacts text that arrives in pieces (the deltas of a streamed answer) before each piece is handed on,
/// so that a secret split across pieces is replaced as surely as one inside a piece.
///
/// A piece's tail that could be the start of a secret is held back until later pieces show whether it is one
/// (a secret occurrence that the held tail would cut is held back whole); [`StreamRedactor::finish`] releases
/// what is still held once the answer is complete. Without configured secrets every piece passes at once.
#[derive(Debug)]
pub(crate) struct StreamRedactor<'a> {
    redactor: &'a Redactor,
    held: String,
}

impl<'a> StreamRedactor<'a> {
    pub(crate) fn new(redactor: &'a Redactor) -> Self {
        StreamRedactor { redactor, held: String::new() }
    }

    /// The redacted text that can be handed on now that `piece` has arrived (possibly empty).
    pub(crate) fn push(&mut self, piece: &str) -> String {
        let secrets = self.redactor.secrets();
        if secrets.is_empty() {
            return piece.to_owned();
        }
        self.held.push_str(piece);
        let cut = hold_from(&self.held, secrets);
        let ready: String = self.held.drain(..cut).collect();
        self.redactor.redact(&ready)
    }

    /// The rest, redacted: the stream has ended, so what is held is not the start of a secret.
    pub(crate) fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.held);
        self.redactor.redact(&rest)
    }
}

/// Where the held-back tail of `text` starts: at the earliest suffix that is a proper prefix of a secret,
/// moved back over any complete secret occurrence that the cut would split.
fn hold_from(text: &str, secrets: &[String]) -> usize {
    let longest = secrets.first().map_or(0, String::len);
    let mut cut = text.len();
    let mut from = text.len().saturating_sub(longest);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    for (offset, _) in text[from..].char_indices() {
        let suffix = &text[from + offset..];
        if secrets.iter().any(|s| s.len() > suffix.len() && s.starts_with(suffix)) {
            cut = from + offset;
            break;
        }
    }
    loop {
        let straddling = secrets
            .iter()
            .flat_map(|s| text.match_indices(s.as_str()).map(|(start, m)| (start, start + m.len())))
            .filter(|&(start, end)| start < cut && end > cut)
            .map(|(start, _)| start)
            .min();
        match straddling {
            Some(start) => cut = start,
            None => return cut,
        }
    }
}

/// A secret value: never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for building a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replaces_every_secret_longest_first() {
        let r = Redactor::new(["sk-abc", "sk-abcdef", "", "x"]);
        assert_eq!(r.redact("a sk-abcdef b sk-abc c x"), "a [REDACTED] b [REDACTED] c x");
        let mut v = json!({"k": ["sk-abc"], "sk-abc": 1});
        r.redact_value(&mut v);
        assert_eq!(v, json!({"k": ["[REDACTED]"], "[REDACTED]": 1}));
        assert!(!format!("{r:?}").contains("sk-abc"));
        assert!(!format!("{:?}", Secret::new("sk-abc")).contains("sk-abc"));
    }

    #[test]
    fn streamed_pieces_never_leak_a_secret_however_the_text_is_split() {
        let r = Redactor::new(["sk-abcdef", "sk-abc", "cdxyz1"]);
        let texts = [
            "key sk-abcdef here",
            "short sk-abc. end",
            "prefix sk-ab only",
            "ends with sk-abcde",
            "both sk-abcdxyz1 ok",
            "é sk-abcdef ü",
            "no secret at all",
        ];
        for text in texts {
            let whole = r.redact(text);
            for a in 0..=text.len() {
                for b in a..=text.len() {
                    if !(text.is_char_boundary(a) && text.is_char_boundary(b)) {
                        continue;
                    }
                    let mut stream = StreamRedactor::new(&r);
                    let mut out = Vec::new();
                    for piece in [&text[..a], &text[a..b], &text[b..]] {
                        out.push(stream.push(piece));
                    }
                    out.push(stream.finish());
                    let joined: String = out.concat();
                    assert!(!r.leaks(&joined), "{text:?} split at {a},{b}: {out:?}");
                    for (i, piece) in out.iter().enumerate() {
                        // No piece, and no run of pieces handed on, shows a secret's start and end apart.
                        assert!(!r.leaks(piece), "{text:?} piece {i}: {piece:?}");
                    }
                    if !text.contains("cdxyz1") {
                        assert_eq!(joined, whole, "{text:?} split at {a},{b}");
                    }
                }
            }
        }
        // Without secrets, pieces pass at once.
        let none = Redactor::default();
        let mut stream = StreamRedactor::new(&none);
        assert_eq!(stream.push("sk-ab"), "sk-ab");
        assert_eq!(stream.finish(), "");
    }

    #[test]
    fn from_env_reads_all_secret_variables() {
        let r = Redactor::from_env(|n| Some(format!("secret-of-{n}")));
        let names: Vec<&str> = secret_variables().collect();
        assert_eq!(
            names,
            ["ANTHROPIC_API_KEY", "CKS_GOOGLE_API_KEY", "GOOGLE_API_KEY", "CKS_OPENAI_API_KEY", "CKS_MCP_HTTP_TOKEN"]
        );
        for n in names {
            assert!(r.leaks(&format!("secret-of-{n}")));
        }
    }
}
