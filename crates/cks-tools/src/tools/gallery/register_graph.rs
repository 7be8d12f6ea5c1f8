//! `register_graph`: give an open session's graph a name in the gallery (a taken name is replaced).

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::gallery::{Registration, Visibility};

use super::{given, required};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, Named, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// A short, memorable name: the registry key.
    pub(crate) name: String,
    /// The session whose graph the name points at.
    pub(crate) session_id: String,
    /// What the graph holds.
    pub(crate) description: Option<String>,
    /// Comma-separated tags (list_graphs and search_graphs filter on them).
    pub(crate) tags: Option<String>,
    /// Shorthand for visibility 'public' (true) or 'private' (false); ignored when 'visibility' is
    /// given. Default false.
    #[serde(default)]
    pub(crate) public: bool,
    /// Who can discover the graph by listing or searching (default: private, or public when
    /// 'public' is true).
    #[schemars(extend("enum" = ["private", "team", "public"]))]
    pub(crate) visibility: Option<String>,
    /// The team namespace; required when visibility is 'team'.
    pub(crate) team: Option<String>,
    /// The registered name of the graph this one was cloned from (omitted: the lineage already
    /// recorded under the name is kept).
    pub(crate) source_graph_name: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Always true.
    registered: bool,
    name: String,
    public: bool,
    visibility: String,
    team: Option<String>,
}

pub(crate) struct RegisterGraph;

#[async_trait::async_trait]
impl Tool for RegisterGraph {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("public", Coercion::Truthy)];
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Name a graph in the gallery";
    const META: ToolMeta = ToolMeta {
        name: "register_graph",
        description: "Give a session's knowledge graph a memorable name in the gallery, so that it can be found \
            again later (get_graph) instead of being rebuilt. Registering a name that is taken replaces its entry \
            (last write wins); the session itself is not copied or changed. Visibility only decides discovery: \
            'private' (default) graphs are found by their exact name, 'team' graphs also by list_graphs and \
            search_graphs callers who pass the same 'team', 'public' ones by everyone; 'team' is a namespace \
            the caller supplies, not authentication. Returns {registered: true, name, public, visibility, team}.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let name = required(&input.name, "name")?.to_owned();
        let team = given(input.team);
        let visibility = match given(input.visibility) {
            // The schema's enum has already refused anything else.
            Some(v) => v
                .parse()
                .map_err(|()| ToolError::invalid_parameter("visibility must be one of 'private', 'team', 'public'."))?,
            None if input.public => Visibility::Public,
            None => Visibility::Private,
        };
        if visibility == Visibility::Team && team.is_none() {
            return Err(ToolError::new(ErrorCode::MissingParameter, "visibility='team' requires a `team` name.")
                .with("parameter", "team"));
        }
        let entry = ctx
            .runtime
            .register_graph(Registration {
                name,
                session_id: input.session_id,
                description: input.description.unwrap_or_default(),
                tags: input.tags.unwrap_or_default(),
                visibility,
                team,
                source_graph_name: given(input.source_graph_name),
                lifecycle: None,
            })
            .await?;
        Ok(Output {
            registered: true,
            public: entry.visibility == Visibility::Public,
            visibility: entry.visibility.as_str().to_owned(),
            name: entry.name,
            team: entry.team,
        })
    }
}
