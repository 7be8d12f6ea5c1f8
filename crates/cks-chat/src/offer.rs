//! What a chat model is offered: a compact, fixed set of tools first, with short descriptions
//! written for the model and for each tool the arguments it may use, and [`FIND_TOOLS`], through
//! which the model reaches every other exposed tool ([`DISCOVERABLE`]).
//!
//! Why a separate text from the tools' own descriptions: those are written for MCP clients and
//! explain every option and every difference from the reference server; a small local model given
//! ~13 of them picks wrong tools (it called `list_versions` to list objects, and `compare_versions`
//! to add one). These say plainly when to use each tool, and the offered arguments are the few a
//! chat needs. The first offer does not grow with the registry: a new exposed tool reaches chats
//! through discovery, so the first request stays small (see the offer-size test).
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
        description: "Read the objects and relations of the graph. Without arguments it returns the graph, or its \
            first part when large (pass its 'next_offset' as 'offset' for more): use it to list or count objects. With 'seed_ids' \
            it returns those objects and everything related to them: use it for 'what relates to X' (find X's id \
            with search_semantic if you do not know it).",
        arguments: &["seed_ids", "depth", "include_relation_types", "include_object_types", "max_objects", "offset"],
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

/// The tool that finds the others: offered first, answered by the executor itself.
pub const FIND_TOOLS: ChatTool = ChatTool {
    name: "find_tools",
    description: "Find more tools when none above fits the request (e.g. draw the graph, export it, resolve a \
        contradiction): 'need' in a few words. The tools it returns can then be called.",
    arguments: &["need", "page"],
    switched_on: &[],
};

/// Tools a chat reaches through [`FIND_TOOLS`], with descriptions written for the model. An exposed
/// tool without an entry here is still found, described by the first sentence of its own
/// description and offered every argument but the withheld ones ([`WITHHELD_ARGUMENTS`]).
///
/// Not here, and not exposed: tools that fetch a URL the model would choose (`verify_source`,
/// `refresh_verification`, `ingest_document`), since an instruction planted in a graph could then
/// send the graph's content to any public server inside that URL.
pub const DISCOVERABLE: &[ChatTool] = &[
    ChatTool {
        name: "visualize_graph",
        description: "Draw the graph (or the part around 'seed_ids') as a Mermaid diagram; 'mode' inference draws \
            the reasoning behind conclusions instead.",
        arguments: &["mode", "seed_ids", "depth", "max_objects", "include_superseded"],
        switched_on: &[],
    },
    ChatTool {
        name: "export_knowledge",
        description: "Export the graph as linked data: 'format' json-ld (default) or turtle.",
        arguments: &["format"],
        switched_on: &[],
    },
    ChatTool {
        name: "serialize_knowledge",
        description: "The whole graph as one canonical JSON document.",
        arguments: &["compact"],
        switched_on: &[],
    },
    ChatTool {
        name: "export_session",
        description: "Export the graph with its whole version history as a bundle.",
        arguments: &["format", "include_structures"],
        switched_on: &[],
    },
    ChatTool {
        name: "suggest_evolution",
        description: "Try changes without committing them: says whether 'operations' would apply and what they \
            would change.",
        arguments: &["operations", "description"],
        switched_on: &[],
    },
    ChatTool {
        name: "explain_diff",
        description: "Explain in words what changed since an earlier version ('target_version_id' from \
            list_versions).",
        arguments: &["target_version_id"],
        switched_on: &[],
    },
    ChatTool {
        name: "list_inference_conflicts",
        description: "List conclusions that the background reasoning found to conflict.",
        arguments: &[],
        // Looking does not take the findings away from the people who review them.
        switched_on: &["peek"],
    },
    ChatTool {
        name: "list_gossip_conflicts",
        description: "List conflicts found between this graph and its copies elsewhere.",
        arguments: &[],
        switched_on: &["peek"],
    },
    ChatTool {
        name: "list_dead_lettered_conflicts",
        description: "List conflicts that automatic resolution gave up on and that wait for a person.",
        arguments: &["task_type"],
        switched_on: &[],
    },
    ChatTool {
        name: "resolve_contradiction",
        description: "List the relations that contradict each other, or resolve those in 'contradiction_ids' by \
            removing one side ('commit': true to save).",
        arguments: &["contradiction_ids", "task_id", "commit"],
        switched_on: &[],
    },
    ChatTool {
        name: "resolve_temporal_conflict",
        description: "Settle an object whose valid_until has passed: 'action' bump (by 'extend_by_days'), archive \
            or ignore.",
        arguments: &["object_id", "action", "extend_by_days", "task_id", "commit"],
        switched_on: &[],
    },
    ChatTool {
        name: "resolve_duplicate",
        description: "Settle two objects found to be the same thing: merge them ('keep_id') or mark them distinct.",
        arguments: &["task_id", "decision", "keep_id"],
        switched_on: &[],
    },
    ChatTool {
        name: "arbitrate_inference_conflict",
        description: "Show conflicting reasoning steps behind a conclusion, or decide between them ('winner_id').",
        arguments: &["task_id", "winner_id", "winners", "conclusion_id", "conclusion_ids", "reasoning", "commit"],
        switched_on: &[],
    },
    ChatTool {
        name: "remember",
        description: "Remember a text (a note, a fact the user tells): its people, places, things and facts go into \
            the graph, matched to objects already there, and a fact that replaces an old one ends it.",
        arguments: &["text", "source", "observed_at"],
        switched_on: &[],
    },
    ChatTool {
        name: "forget_episode",
        description: "Undo what one remembered text added ('episode_id' from remember).",
        arguments: &["episode_id"],
        switched_on: &[],
    },
    ChatTool {
        name: "find_duplicates",
        description: "Find objects that are likely the same thing (for one 'object_id', or the whole graph), each \
            pair judged same, review or different.",
        arguments: &["object_id", "min_score", "limit"],
        switched_on: &[],
    },
    ChatTool {
        name: "list_pipeline_runs",
        description: "List the runs of the processing pipeline on this graph.",
        arguments: &["limit"],
        switched_on: &[],
    },
];

/// Arguments never offered to a model: another graph to work on instead of the chat's (which
/// would make a new session), and a model or budget of the model's own choosing.
pub const WITHHELD_ARGUMENTS: [&str; 3] = ["json_data", "model", "max_tokens"];

/// The offer for `name`, if chats are offered that tool first or it has a written discovery offer.
pub fn chat_tool(name: &str) -> Option<&'static ChatTool> {
    CHAT_TOOLS.iter().chain(DISCOVERABLE).find(|t| t.name == name)
}

/// Whether `name` is in the first offer.
pub fn offered_first(name: &str) -> bool {
    CHAT_TOOLS.iter().any(|t| t.name == name)
}
