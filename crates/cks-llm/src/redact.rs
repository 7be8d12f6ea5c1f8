//! Secret redaction, applied once at the boundary of the HTTP layer and the client.
//!
//! Every configured secret (the values of [`SECRET_ENV_VARS`]) is replaced by `[REDACTED]` in error
//! messages, log fields and decoded responses before they leave this crate. The reference implementation
//! forgot the Google keys and the real HTTP token variable; this list is the one place to keep complete.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::conversation::{ContentBlock, Message};
use crate::error::LlmError;

/// Environment variables whose values are secrets.
pub const SECRET_ENV_VARS: [&str; 5] =
    ["ANTHROPIC_API_KEY", "CKS_OPENAI_API_KEY", "CKS_GOOGLE_API_KEY", "GOOGLE_API_KEY", "CKS_MCP_HTTP_TOKEN"];

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

    /// A redactor for the values of [`SECRET_ENV_VARS`] in an injected environment.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        Redactor::new(SECRET_ENV_VARS.iter().filter_map(|name| env(name)))
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
    fn from_env_reads_all_secret_variables() {
        let r = Redactor::from_env(|n| Some(format!("secret-of-{n}")));
        for n in SECRET_ENV_VARS {
            assert!(r.leaks(&format!("secret-of-{n}")));
        }
    }
}
