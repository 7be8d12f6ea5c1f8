//! `ai_chat`'s settings, read from the environment (`CKS_AI_CHAT_*`).

use super::*;

/// Settings of `ai_chat`, from the environment.
#[derive(Debug, Clone)]
pub struct AiChatConfig {
    pub turn: TurnConfig,
}

impl Default for AiChatConfig {
    fn default() -> Self {
        AiChatConfig { turn: TurnConfig { system: Some(SYSTEM_PROMPT.to_owned()), ..TurnConfig::default() } }
    }
}

/// A limit variable whose value is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not valid: {problem}; expected {expected}")]
pub struct AiChatConfigError {
    pub variable: &'static str,
    pub value: String,
    pub problem: String,
    pub expected: &'static str,
}

/// The limit variables of `ai_chat` and what each bounds. Each is a whole number of at least 1.
pub const AI_CHAT_VARIABLES: [(&str, &str); 7] = [
    ("CKS_AI_CHAT_MAX_ITERATIONS", "LLM round trips per turn"),
    ("CKS_AI_CHAT_TIMEOUT_SECONDS", "deadline of one turn, in seconds"),
    ("CKS_AI_CHAT_MAX_TOKENS", "token budget of one turn (input + output tokens)"),
    ("CKS_AI_CHAT_MAX_OUTPUT_TOKENS", "output tokens per LLM call"),
    ("CKS_AI_CHAT_MAX_TOOL_CALLS", "tool calls run per LLM answer"),
    ("CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES", "bytes of one tool result sent to the LLM"),
    ("CKS_AI_CHAT_RESULT_MAX_BYTES", "bytes of the recorded tool calls in one turn's result"),
];

impl AiChatConfig {
    /// Reads the limit variables ([`AI_CHAT_VARIABLES`]); unset (or empty) ones keep their
    /// defaults, and a value that is not a whole number from 1 up is an error naming the variable.
    pub fn from_env(env: &HashMap<String, String>) -> Result<Self, AiChatConfigError> {
        let mut config = AiChatConfig::default();
        let number = |name: &'static str| -> Result<Option<u64>, AiChatConfigError> {
            let Some(raw) = env.get(name).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
            let error = |problem: String| AiChatConfigError {
                variable: name,
                value: raw.clone(),
                problem,
                expected: "a whole number of at least 1 (e.g. 8), or unset for the default",
            };
            match raw.trim().parse::<u64>() {
                Ok(0) => Err(error("0 is not a usable limit".into())),
                Ok(n) => Ok(Some(n)),
                Err(e) => Err(error(format!("not a whole number ({e})"))),
            }
        };
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(n) = number("CKS_AI_CHAT_MAX_ITERATIONS")? {
            config.turn.max_iterations = size(n);
        }
        if let Some(s) = number("CKS_AI_CHAT_TIMEOUT_SECONDS")? {
            config.turn.deadline = Duration::from_secs(s);
        }
        config.turn.token_budget = number("CKS_AI_CHAT_MAX_TOKENS")?;
        if let Some(n) = number("CKS_AI_CHAT_MAX_OUTPUT_TOKENS")? {
            config.turn.max_tokens = Some(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if let Some(n) = number("CKS_AI_CHAT_MAX_TOOL_CALLS")? {
            config.turn.max_tool_calls_per_answer = size(n);
        }
        if let Some(n) = number("CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES")? {
            config.turn.tool_result_cap = size(n);
        }
        if let Some(n) = number("CKS_AI_CHAT_RESULT_MAX_BYTES")? {
            config.turn.max_result_bytes = size(n);
        }
        Ok(config)
    }
}
