//! `forget_episode`: takes back what one remembered text said, in one commit (`memory::forget`):
//! what it created goes unless another episode said it too, fields it changed get their values
//! back, facts it ended are current again, and the episode goes with its links.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use cks_runtime::CommitRequest;

use crate::ErrorCode;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::memory::forget::{Forgotten, NotAnEpisode, forget};
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    pub(crate) session_id: String,
    /// The Episode object to forget (remember's `episode_id`).
    pub(crate) episode_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    episode_id: String,
    version_id: String,
    /// removed, restored (fields given back, facts current again), kept (said by another episode too).
    #[serde(flatten)]
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    forgotten: Forgotten,
}

pub(crate) struct ForgetEpisode;

#[async_trait::async_trait]
impl Tool for ForgetEpisode {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Forget a remembered text";
    const META: ToolMeta = ToolMeta {
        name: "forget_episode",
        description: "Undo what one remembered text (an Episode from remember) said, in one commit: objects and \
            facts it created are removed unless another episode said them too, fields it changed get their old \
            values, facts it ended are current again, and the episode goes. Returns {episode_id, version_id, \
            removed, restored, kept}. The history keeps every version.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let Input { session_id, episode_id } = input;
        let (operations, forgotten) =
            ctx.runtime.read(&session_id, |s, _| forget(s, &episode_id)).await?.map_err(|why| match why {
                NotAnEpisode::Missing => ToolError::new(
                    ErrorCode::ObjectNotFound,
                    format!("Episode '{episode_id}' not found in the session."),
                )
                .with("object_id", episode_id.as_str()),
                NotAnEpisode::OtherType(ty) => ToolError::invalid_parameter(format!(
                    "'{episode_id}' is a {ty}, not an Episode: only what remember stored can be forgotten."
                )),
            })?;
        let metadata = ctx.version_metadata("forget_episode", [("episode_id", json!(episode_id))]);
        let committed =
            ctx.runtime.commit(&session_id, CommitRequest::operations(operations).with_metadata(metadata)).await?;
        Ok(Output { session_id, episode_id, version_id: committed.version.version_id, forgotten })
    }
}
