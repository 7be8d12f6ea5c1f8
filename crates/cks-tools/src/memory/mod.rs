//! Memory from text: what `remember` and `forget_episode` share. A text is sent to the configured
//! model, which answers the typed extraction (`extraction.rs`); the extraction is resolved against
//! the session and planned into one batch of operations (`plan.rs`); an episode is taken back by
//! `forget.rs`.

pub mod extraction;
pub mod forget;
pub mod plan;

use cks_llm::{ChatRequest, Message, OutputSchema};
use serde_json::Value;

use crate::ErrorCode;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tools::llm::json_answer::{ask_text, parse_json};
use extraction::{Dropped, Extraction};

/// Characters of a model's answer quoted back when it cannot be used.
const RAW_OUTPUT_CHARS: usize = 1000;

/// What the model extracted, and which model it was.
#[derive(Debug)]
pub struct Extracted {
    pub extraction: Extraction,
    pub dropped: Vec<Dropped>,
    pub model: String,
    pub provider: &'static str,
    /// Whether the first answer was unusable and the second was used.
    pub retried: bool,
}

/// Asks the configured model for the extraction of `text`: structured output where the provider
/// has it, the first JSON object of the answer read either way. An unusable answer is sent back
/// once with the reason; a second fails with `llm_output_parse_error`, the reason and the answer's
/// start, and nothing is stored.
pub async fn extract(ctx: &ToolContext, text: &str, model: Option<String>, tool: &str) -> Result<Extracted, ToolError> {
    let prompt = format!("Extract the entities and facts of this text.\n\nText:\n{text}");
    let mut request = ChatRequest {
        model,
        system: Some(extraction::SYSTEM_PROMPT.to_owned()),
        messages: vec![Message::user(prompt)],
        temperature: Some(0.0),
        output: Some(OutputSchema::new("knowledge_extraction", extraction::schema())),
        ..ChatRequest::default()
    };
    let mut retried = false;
    loop {
        let answer = ask_text(ctx, request.clone(), tool).await?;
        let read =
            parse_json(&answer.text, false).map_err(|e| e.message).and_then(|value: Value| Extraction::read(value));
        match read {
            Ok((extraction, dropped)) => {
                return Ok(Extracted { extraction, dropped, model: answer.model, provider: answer.provider, retried });
            }
            Err(why) if !retried => {
                retried = true;
                request.messages.push(Message::assistant(answer.text));
                request.messages.push(Message::user(format!(
                    "That answer could not be used: {why}. Answer again with only the JSON object, following the rules."
                )));
            }
            Err(why) => {
                let raw: String = answer.text.chars().take(RAW_OUTPUT_CHARS).collect();
                return Err(ToolError::new(
                    ErrorCode::LlmOutputParseError,
                    format!("The model's answer could not be used, twice (nothing was stored): {why}"),
                )
                .with("raw_output", raw)
                .with("model", answer.model));
            }
        }
    }
}
