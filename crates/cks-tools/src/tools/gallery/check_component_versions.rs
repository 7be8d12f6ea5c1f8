//! `check_component_versions`: whether a registered graph's `Component` objects record the
//! versions their code publishes now. Each version file is fetched through the guarded fetcher
//! ([`super::component_versions`]); a component whose file cannot be found or read is reported
//! as such, never as a failure of the call. The outcome is recorded for `check_graph_health` and
//! the `graph_health` sweeper; the graph itself is never changed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use cks_runtime::versions::{ComponentCheck, VersionRecord, VersionStatus};

use super::component_versions::WebVersions;
use super::required;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The graph's registered name, e.g. 'cks-ecosystem'.
    pub(crate) name: String,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False when no graph is registered under the name.
    found: bool,
    /// One entry per `Component` object that records a version, in the graph's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    components: Option<Vec<ComponentView>>,
    /// When the check ran (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    checked_at: Option<String>,
    /// The graph's session, when it is not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// `session_not_available` when the registered session was closed or is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// One component's check.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ComponentView {
    /// The component's name (its id when the name is empty).
    component: String,
    /// The version the graph records, as recorded.
    graph_version: Value,
    /// The version its code publishes; null when none was found.
    actual_version: Option<String>,
    #[schemars(extend("enum" = ["up_to_date", "outdated", "ahead", "unknown_repo", "fetch_failed"]))]
    status: String,
    /// Why no version was found (`unknown_repo`, `fetch_failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// The file the published version was read from.
    #[serde(skip_serializing_if = "Option::is_none")]
    source_url: Option<String>,
}

impl From<ComponentCheck> for ComponentView {
    fn from(check: ComponentCheck) -> Self {
        ComponentView {
            component: check.component,
            graph_version: check.graph_version,
            actual_version: check.actual_version,
            status: status_name(check.status).to_owned(),
            message: check.message,
            source_url: check.source_url,
        }
    }
}

pub(crate) fn status_name(status: VersionStatus) -> &'static str {
    match status {
        VersionStatus::UpToDate => "up_to_date",
        VersionStatus::Outdated => "outdated",
        VersionStatus::Ahead => "ahead",
        VersionStatus::UnknownRepo => "unknown_repo",
        VersionStatus::FetchFailed => "fetch_failed",
    }
}

/// What a check of a registered name came to.
pub(crate) enum Checked {
    Unknown,
    /// Registered, but its session is closed or gone.
    Unavailable {
        session_id: String,
        message: String,
    },
    Done {
        entry: Box<cks_runtime::gallery::GraphEntry>,
        record: VersionRecord,
    },
}

/// Checks the graph registered as `name` and records the outcome.
pub(crate) async fn check(ctx: &ToolContext, name: &str) -> Result<Checked, ToolError> {
    let Some(entry) = ctx.runtime.graph(name).await? else { return Ok(Checked::Unknown) };
    let source = WebVersions::new(ctx.fetcher.clone());
    match ctx.runtime.check_component_versions(&entry, &source).await? {
        Some(record) => Ok(Checked::Done { entry: Box::new(entry), record }),
        None => Ok(Checked::Unavailable {
            message: format!("Session '{}' for graph '{name}' is not available.", entry.session_id),
            session_id: entry.session_id,
        }),
    }
}

pub(crate) struct CheckComponentVersions;

#[async_trait::async_trait]
impl Tool for CheckComponentVersions {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Check component versions";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "check_component_versions",
        description: "Check whether a registered graph still matches its code: for each Component object recording a \
            'version', fetch the version its code publishes (from its 'repo_url' on GitHub or its 'version_url'; the \
            file named by 'version_source': package.json, pyproject.toml or Cargo.toml, default _version.py) and \
            compare. Changes nothing. Returns {found, components: [{component, graph_version, actual_version, \
            status: up_to_date | outdated | ahead | unknown_repo | fetch_failed}]}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        // It names a registered graph, not the chat's session, and reads the network at URLs the
        // graph's content chooses: a chat could reach another graph and make this server fetch
        // what an instruction planted in its graph says.
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let name = required(&input.name, "name")?;
        Ok(match check(ctx, name).await? {
            Checked::Unknown => Output::default(),
            Checked::Unavailable { session_id, message } => Output {
                found: true,
                session_id: Some(session_id),
                error: Some("session_not_available".into()),
                message: Some(message),
                ..Output::default()
            },
            Checked::Done { record, .. } => Output {
                found: true,
                components: Some(record.components.into_iter().map(ComponentView::from).collect()),
                checked_at: Some(record.checked_at),
                ..Output::default()
            },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::time::Duration;

    use cks_runtime::{Sweepers, SweepersConfig};

    use super::super::component_versions::WebVersions;
    use crate::ToolContext;
    use crate::testing::{HttpServer, Reply, call, obj, session, structure};
    use crate::tools::knowledge::verify_source::tests::local_context;

    /// A server publishing `core` 1.2.0 (_version.py), `web` 2.0.0 (package.json), `cli` 0.9.0
    /// (Cargo.toml) and `lib` 3.0 (pyproject.toml); anything else is not found.
    pub(crate) async fn published() -> (HttpServer, String) {
        let server = HttpServer::start(|_, path| match path {
            "/core/_version.py" => Reply::status(200).body("__version__ = \"1.2.0\"\n"),
            "/web/package.json" => Reply::status(200).body(r#"{"name": "web", "version": "2.0.0"}"#),
            "/cli/Cargo.toml" => Reply::status(200).body("[package]\nname = \"cli\"\nversion = \"0.9.0\"\n"),
            "/lib/pyproject.toml" => Reply::status(200).body("[project]\nname = \"lib\"\nversion = \"3.0\"\n"),
            _ => Reply::status(404),
        })
        .await;
        let base = format!("http://127.0.0.1:{}", server.addr.port());
        (server, base)
    }

    fn component(id: &str, version: &str, file: &str, base: &str) -> Value {
        obj(id, "Component", id, json!({"version": version, "version_url": format!("{base}/{file}")}))
    }

    /// A registered graph `eco` of five components: core outdated, web current, cli ahead, lib
    /// current, gone unreachable; and one that names no code at all.
    pub(crate) async fn ecosystem(ctx: &ToolContext, base: &str) -> String {
        let objects = vec![
            component("core", "1.0.0", "core/_version.py", base),
            component("web", "v2.0.0", "web/package.json", base),
            component("cli", "1.0.0", "cli/Cargo.toml", base),
            component("lib", "3.0", "lib/pyproject.toml", base),
            component("gone", "1.0", "gone/_version.py", base),
            obj("mystery", "Component", "mystery", json!({"version": "0.1"})),
            obj("notes", "Component", "notes", json!({"description": "no version recorded"})),
        ];
        let sid = session(ctx, structure(objects)).await;
        call(ctx, "register_graph", json!({"name": "eco", "session_id": sid})).await;
        sid
    }

    fn statuses(result: &Value) -> Vec<(String, String)> {
        result["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["component"].as_str().unwrap().to_owned(), c["status"].as_str().unwrap().to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn each_component_is_compared_and_the_health_score_follows_the_check() {
        let (server, base) = published().await;
        let ctx = local_context();
        ecosystem(&ctx, &base).await;

        // Before any check, no component counts as current.
        let health = call(&ctx, "check_graph_health", json!({"name": "eco"})).await;
        assert_eq!(
            health["metrics"]["version_freshness"],
            json!({"up_to_date": 0, "total": 6, "score": 0.0, "checked_at": null})
        );
        let before = health["health_score"].as_f64().unwrap();

        let result = call(&ctx, "check_component_versions", json!({"name": "eco"})).await;
        assert_eq!(result["found"], true);
        let expected = [
            ("core", "outdated"),
            ("web", "up_to_date"),
            ("cli", "ahead"),
            ("lib", "up_to_date"),
            ("gone", "fetch_failed"),
            ("mystery", "unknown_repo"),
        ];
        let expected: Vec<(String, String)> = expected.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect();
        assert_eq!(statuses(&result), expected);
        let components = result["components"].as_array().unwrap();
        assert_eq!(
            components[0],
            json!({"component": "core", "graph_version": "1.0.0", "actual_version": "1.2.0", "status": "outdated",
                   "source_url": format!("{base}/core/_version.py")})
        );
        assert_eq!(components[4]["actual_version"], Value::Null);
        assert!(components[4]["message"].as_str().unwrap().contains("HTTP 404"));
        assert!(components[5]["message"].as_str().unwrap().contains("Could not determine a GitHub repository"));
        assert!(result["checked_at"].is_string());
        assert_eq!(server.requests().len(), 5, "one request per component that names its file");

        let health = call(&ctx, "check_graph_health", json!({"name": "eco"})).await;
        let freshness = &health["metrics"]["version_freshness"];
        assert_eq!((freshness["up_to_date"].clone(), freshness["total"].clone()), (json!(2), json!(6)));
        assert_eq!(freshness["checked_at"], result["checked_at"]);
        let after = health["health_score"].as_f64().unwrap();
        assert!((after - before - 0.3 * 2.0 / 6.0).abs() < 1e-9, "{before} → {after}");
        assert_eq!(server.requests().len(), 5, "scoring fetches nothing");
    }

    #[tokio::test]
    async fn unknown_names_closed_sessions_and_missing_names() {
        let ctx = local_context();
        assert_eq!(call(&ctx, "check_component_versions", json!({"name": "nope"})).await, json!({"found": false}));
        assert_eq!(call(&ctx, "check_component_versions", json!({"name": ""})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "check_component_versions", json!({})).await["error"], "missing_parameter");
        let sid = session(&ctx, structure(vec![obj("a", "Claim", "A", json!({}))])).await;
        call(&ctx, "register_graph", json!({"name": "g", "session_id": sid})).await;
        let none = call(&ctx, "check_component_versions", json!({"name": "g"})).await;
        assert_eq!((none["found"].clone(), none["components"].clone()), (json!(true), json!([])));
        let health = call(&ctx, "check_graph_health", json!({"name": "g"})).await;
        assert_eq!(health["metrics"]["version_freshness"]["score"], 1.0, "no components: vacuously current");
        ctx.runtime.close(&sid).await.unwrap();
        let closed = call(&ctx, "check_component_versions", json!({"name": "g"})).await;
        assert_eq!((closed["found"].clone(), closed["error"].clone()), (json!(true), json!("session_not_available")));
        assert_eq!(closed["session_id"], json!(sid));
    }

    #[tokio::test]
    async fn the_auto_update_sweeper_runs_the_check() {
        let (_server, base) = published().await;
        let mut ctx = local_context();
        let sid = ecosystem(&ctx, &base).await;
        let source = Arc::new(WebVersions::new(ctx.fetcher.clone()));
        let config = SweepersConfig { interval: Duration::from_secs(3_600), start: false, ..SweepersConfig::default() };
        let sweepers = Sweepers::start_reading_versions(ctx.runtime.clone(), &config, Some(source)).await.unwrap();
        ctx.sweepers = Some(sweepers.clone());
        let status = sweepers.run_once("graph_auto_update").await.unwrap().unwrap();
        assert_eq!((status.last_sessions_checked, status.last_result_count), (Some(1), Some(1)));
        let queued = ctx.runtime.tasks().list(&Default::default()).await.unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!((queued[0].task_type.as_str(), queued[0].session_id.as_str()), ("graph_outdated", sid.as_str()));
        let payload: Value = serde_json::from_str(&queued[0].payload).unwrap();
        assert_eq!(
            payload["outdated_components"],
            json!([{"component": "core", "graph_version": "1.0.0", "actual_version": "1.2.0"}])
        );
        // The sweep's check is what the health score reads.
        let health = call(&ctx, "check_graph_health", json!({"name": "eco"})).await;
        assert_eq!(health["metrics"]["version_freshness"]["up_to_date"], 2);
        let agents = call(&ctx, "list_agents", json!({})).await;
        assert!(agents.to_string().contains("graph_auto_update"), "{agents}");
    }
}
