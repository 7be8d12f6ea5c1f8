//! What a chat model is offered: a compact, fixed set of tools with short descriptions written for
//! the model, and for each tool the arguments it may use.
//!
//! Why a separate text from the tools' own descriptions: those are written for MCP clients and
//! explain every option and every difference from the reference server; a small local model given
//! ~13 of them picks wrong tools (it called `list_versions` to list objects, and `compare_versions`
//! to add one). These say plainly when to use each tool, and the offered arguments are the few a
//! chat needs. The set does not grow with the registry: a new tool reaches chats only by an entry
//! here (and `llm_exposed`), so the first request stays small (see the offer-size test).
//!
//! One tool per need: no second way to read the whole graph (`serialize_knowledge`), to try a change
//! (`suggest_evolution`), to draw a part (`visualize_graph`) or to describe a change
//! (`explain_diff`). Each duplicate cost every model prompt tokens and a weak one its choice: with
//! them, a 135M-parameter local model answered "list the objects" with `evolve_knowledge`.
//!
//! Arguments a tool has but the chat is not offered (e.g. `json_data`, which would make
//! `evolve_knowledge` create a new session) are refused by the executor, not merely hidden.

/// One tool as offered to a chat model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatTool {
    pub name: &'static str,
    /// What the model reads: what it is for, plainly.
    pub description: &'static str,
    /// The arguments offered (besides the session arguments, which the executor fills in).
    pub arguments: &'static [&'static str],
    /// Boolean arguments the executor always sets to true (not offered to the model).
    pub switched_on: &'static [&'static str],
}

/// The tools a chat is offered, in the order the model sees them (readers first, then writers,
/// then history).
pub const CHAT_TOOLS: &[ChatTool] = &[
    ChatTool {
        name: "query_subgraph",
        description: "Read the objects and relations of the graph. Without arguments it returns the whole graph: use \
            it to list or count objects. With 'seed_ids' it returns those objects and everything related to them: \
            use it for 'what relates to X' (find X's id with search_semantic if you do not know it).",
        arguments: &["seed_ids", "depth", "include_relation_types", "include_object_types", "max_objects"],
        // Nodes and typed edges read far more easily than a canonical document inside a string.
        switched_on: &["compact_mode"],
    },
    ChatTool {
        name: "search_semantic",
        description: "Find objects by words or meaning in their name, type or content; returns the best matches \
            with their ids and related objects. Use it to find the id of an object mentioned by name.",
        arguments: &["query", "top_k", "depth"],
        switched_on: &[],
    },
    ChatTool {
        name: "explain_knowledge",
        description: "Describe the graph in words: its types, counts and main relations.",
        arguments: &[],
        switched_on: &[],
    },
    ChatTool {
        name: "evolve_knowledge",
        description: "Change the graph: add, update, rename or remove objects and relations, committed as a new \
            version. To add an object: operations [{\"type\": \"add_object\", \"identity\": {\"id\": \"...\", \
            \"type\": \"...\", \"name\": \"...\"}}]. To relate objects: add_relation. All operations apply or none.",
        arguments: &["operations"],
        switched_on: &[],
    },
    ChatTool {
        name: "validate_knowledge",
        description: "Check the graph against the validation rules; changes no object (a passing check is \
            recorded in the history).",
        arguments: &["extensions"],
        switched_on: &[],
    },
    ChatTool {
        name: "detect_contradictions",
        description: "Find claims and relations in the graph that contradict each other; changes nothing.",
        arguments: &[],
        switched_on: &[],
    },
    ChatTool {
        name: "list_versions",
        description: "List the graph's history: its versions (commits), not its objects. Gives the version ids that \
            compare_versions and revert_version need.",
        arguments: &[],
        switched_on: &[],
    },
    ChatTool {
        name: "compare_versions",
        description: "Show what changed since an earlier version. 'target_version_id' is a version id from \
            list_versions, never an object id.",
        arguments: &["target_version_id"],
        switched_on: &[],
    },
    ChatTool {
        name: "revert_version",
        description: "Undo changes: make an earlier version (a version id from list_versions) the current state \
            again, as a new version. Only when the user asks to undo or restore.",
        arguments: &["target_version_id"],
        switched_on: &[],
    },
];

/// The offer for `name`, if chats are offered that tool.
pub fn chat_tool(name: &str) -> Option<&'static ChatTool> {
    CHAT_TOOLS.iter().find(|t| t.name == name)
}
