//! MCP prompts: ready-made instructions for common knowledge-graph tasks.

use rmcp::model::{ErrorCode, ErrorData};
use serde_json::{Map, Value, json};

/// Renders a prompt's text from an argument lookup.
type Render = fn(&dyn Fn(&str) -> String) -> String;

struct PromptDef {
    name: &'static str,
    description: &'static str,
    /// (name, description, required)
    arguments: &'static [(&'static str, &'static str, bool)],
    render: Render,
}

const PROMPTS: &[PromptDef] = &[
    PromptDef {
        name: "create_knowledge_graph",
        description: "Build a new knowledge graph about a topic.",
        arguments: &[("topic", "What the graph should describe.", true)],
        render: |arg| {
            format!(
                "Build a knowledge graph about: {}.\n\nWrite it as canonical CKS JSON: objects with an identity \
                 {{id, type, name}} and a structure; relations are objects whose structure has 'participants' (object \
                 ids) and 'relation_type'. Call validate_knowledge with it as json_data; when it is valid you get a \
                 session_id. Then refine it with evolve_knowledge and inspect it with query_subgraph.",
                arg("topic")
            )
        },
    },
    PromptDef {
        name: "verify_claim",
        description: "Check a claim against a source and record the outcome in the graph.",
        arguments: &[("claim", "The claim to verify.", true), ("url", "The URL of the source to check.", true)],
        render: |arg| {
            format!(
                "Verify this claim: {}.\nSource to check: {}.\nRepresent the claim as a Claim object (statement, confidence, author, \
                 created_at, status), link supporting or contradicting evidence with relations, and validate with the \
                 claim_integrity extension.",
                arg("claim"),
                arg("url")
            )
        },
    },
    PromptDef {
        name: "explore_subgraph",
        description: "Explore the neighbourhood of an object in a session.",
        arguments: &[
            ("session_id", "The session to explore.", true),
            ("seed_id", "The object to start from.", true),
            ("depth", "How many hops to follow (default 1).", false),
        ],
        render: |arg| {
            let depth = arg("depth");
            format!(
                "Explore the knowledge graph of session {} around object {}: call query_subgraph with seed_ids [\"{}\"] \
                 and depth {}, summarise what the neighbourhood says, and suggest the next object worth exploring \
                 (see suggested_next_seed).",
                arg("session_id"),
                arg("seed_id"),
                arg("seed_id"),
                if depth.is_empty() { "1".into() } else { depth }
            )
        },
    },
    PromptDef {
        name: "branch_and_merge",
        description: "Try a change on a branch, then merge it back.",
        arguments: &[("session_id", "The session to branch from.", true)],
        render: |arg| {
            format!(
                "Work on a branch of session {}: create_branch (note its version_id fork point), apply your changes \
                 there with evolve_knowledge, review them with compare_versions, then merge_branch the branch back. If \
                 merge_branch reports conflicts, retry with resolutions for each conflicting object_id.",
                arg("session_id")
            )
        },
    },
];

/// Whether the prompt `name` takes the argument `argument`.
pub(crate) fn has_argument(name: &str, argument: &str) -> bool {
    PROMPTS.iter().any(|p| p.name == name && p.arguments.iter().any(|(arg, _, _)| *arg == argument))
}

/// `prompts/list`.
pub(crate) fn list() -> Value {
    let prompts: Vec<Value> = PROMPTS
        .iter()
        .map(|p| {
            let arguments: Vec<Value> = p
                .arguments
                .iter()
                .map(|(name, description, required)| json!({"name": name, "description": description, "required": required}))
                .collect();
            json!({"name": p.name, "description": p.description, "arguments": arguments})
        })
        .collect();
    json!({"prompts": prompts})
}

/// `prompts/get`.
pub(crate) fn get(name: &str, arguments: &Map<String, Value>) -> Result<Value, ErrorData> {
    let prompt = PROMPTS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ErrorData::new(ErrorCode::INVALID_PARAMS, format!("Prompt not found: {name}"), None))?;
    for (arg, _, required) in prompt.arguments {
        let given = arguments.get(*arg).is_some_and(|v| !v.is_null() && v != "");
        if *required && !given {
            return Err(ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                format!("Missing required argument '{arg}' for prompt '{name}'"),
                None,
            ));
        }
    }
    let lookup = |key: &str| match arguments.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let text = (prompt.render)(&lookup);
    Ok(json!({
        "description": prompt.description,
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_render_and_check_arguments() {
        assert_eq!(list()["prompts"].as_array().unwrap().len(), 4);
        let args: Map<String, Value> = serde_json::from_value(json!({"session_id": "s1", "seed_id": "n1"})).unwrap();
        let prompt = get("explore_subgraph", &args).unwrap();
        let text = prompt["messages"][0]["content"]["text"].as_str().unwrap();
        assert!(text.contains("session s1") && text.contains("[\"n1\"]") && text.contains("depth 1"), "{text}");
        assert!(get("explore_subgraph", &Map::new()).unwrap_err().message.contains("session_id"));
        assert!(get("nope", &Map::new()).unwrap_err().message.contains("Prompt not found"));

        let verify =
            list()["prompts"].as_array().unwrap().iter().find(|p| p["name"] == "verify_claim").cloned().unwrap();
        let required: Vec<(&str, bool)> = verify["arguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["name"].as_str().unwrap(), a["required"].as_bool().unwrap()))
            .collect();
        assert_eq!(required, [("claim", true), ("url", true)]);
        let claim_only: Map<String, Value> = serde_json::from_value(json!({"claim": "c"})).unwrap();
        assert!(get("verify_claim", &claim_only).unwrap_err().message.contains("'url'"));
    }
}
