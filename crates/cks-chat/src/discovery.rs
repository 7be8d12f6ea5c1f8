//! `find_tools`: how a chat's model reaches the tools beyond its first offer. Given a need in
//! words, it answers the few reachable tools whose name and description share the most (and
//! rarest) words with it (`cks_tools::discovery`, the ranking of the MCP tool of the same name),
//! each with its offered schema; those stay offered for the rest of the
//! conversation (the executor reads them back from the history, [`found_in`]). Without a need, or
//! when nothing matches, it lists every reachable tool by name and description, a page at a time,
//! without schemas (which would make the next requests large).
//!
//! Only tools the executor would run are ever returned, so a denied tool, one naming a second
//! session, or one not exposed is never found; a found tool runs with every check an offered one
//! gets (pinning, arguments, approvals).

use serde_json::{Value, json};

use cks_llm::ToolSpec;
use cks_tools::discovery::{best, tool_words, words};
use cks_tools::{ErrorCode, ToolError};

use crate::executor::RegistryExecutor;
use crate::offer::FIND_TOOLS;

/// Tools answered for a need.
const MATCHES: usize = 3;
/// Tools listed per page.
const PAGE: usize = 10;

/// What the model asks for.
pub(crate) struct Need {
    words: Vec<String>,
    page: usize,
}

impl Need {
    /// The arguments read, or why they cannot be.
    pub(crate) fn read(arguments: &Value) -> Result<Need, ToolError> {
        let need = match arguments.get("need") {
            None | Some(Value::Null) => "",
            Some(Value::String(text)) => text.as_str(),
            Some(_) => return Err(ToolError::invalid_parameter("'need' is text: what you want to do, in a few words")),
        };
        let page = match arguments.get("page") {
            None | Some(Value::Null) => 1,
            Some(page) => match page.as_u64() {
                Some(page) if page >= 1 => page as usize,
                _ => return Err(ToolError::invalid_parameter("'page' is a whole number from 1")),
            },
        };
        Ok(Need { words: words(need), page })
    }
}

/// The arguments of a `find_tools` call that it takes: anything else the model wrote (a session
/// id, say) is dropped, so it is neither used nor recorded.
pub(crate) fn own_arguments(arguments: &Value) -> Value {
    let own = arguments
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| FIND_TOOLS.arguments.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()));
    Value::Object(own.collect())
}

/// The spec of `find_tools` as the model is offered it.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: FIND_TOOLS.name.to_owned(),
        description: FIND_TOOLS.description.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "need": {"type": "string", "description": "What you want to do, in a few words."},
                "page": {"type": "integer", "minimum": 1, "description": "Without 'need': the page of the whole list."},
            },
        }),
    }
}

/// The answer to a `find_tools` call.
pub(crate) fn find(executor: &RegistryExecutor, arguments: &Value) -> Value {
    let need = match Need::read(arguments) {
        Ok(need) => need,
        Err(error) => return error.to_value(),
    };
    let mut reachable: Vec<(ToolSpec, cks_tools::discovery::ToolWords)> = executor
        .discoverable()
        .map(|(tool, offer)| {
            let spec = offer.spec(tool);
            let words = tool_words(&spec.name, &spec.description);
            (spec, words)
        })
        .collect();
    reachable.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if !need.words.is_empty() {
        let matched = best(&reachable, &need.words, MATCHES);
        if !matched.is_empty() {
            let tools: Vec<Value> = matched
                .into_iter()
                .map(|spec| json!({"name": spec.name, "description": spec.description, "input_schema": spec.input_schema}))
                .collect();
            return json!({"tools": tools, "note": "These tools can now be called like the others."});
        }
    }
    let pages = reachable.len().div_ceil(PAGE).max(1);
    if need.page > pages {
        return ToolError::new(ErrorCode::InvalidParameter, format!("There are {pages} pages of tools."))
            .with("parameter", "page")
            .to_value();
    }
    let listed: Vec<Value> = reachable
        .iter()
        .skip((need.page - 1) * PAGE)
        .take(PAGE)
        .map(|(spec, _)| json!({"name": spec.name, "description": spec.description}))
        .collect();
    let note = if need.words.is_empty() {
        "Every other tool, by name. Call find_tools with a need to get a tool's arguments."
    } else {
        "No tool matched that need; here is the list. Call find_tools with other words to get a tool's arguments."
    };
    json!({"tools": listed, "page": need.page, "pages": pages, "note": note})
}

/// The tools a `find_tools` result gave with their arguments (a listed page gives none).
pub(crate) fn found_in(result: &str) -> Vec<String> {
    let Ok(value) = serde_json::from_str::<Value>(result) else { return Vec::new() };
    value["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|tool| tool.get("input_schema").is_some())
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect()
}
