//! `refresh_verification`: resolves a `provenance_conflict` task (a subject whose newest
//! `VerificationRecord` is older than the TTL) by checking the source again, as verify_source
//! does, and adding the new signed record and its `verified_by` relation.
//!
//! The stale record is kept: records are signed statements of a past check and are never edited.
//! The new one supersedes it because the provenance sweeper judges a subject by its newest record
//! (`cks_core::validate::provenance_freshness`). The reference judges every record on its own, so
//! there a refreshed subject's old record stays stale and is queued again for ever.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Resolution, resolution_task};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, SessionCheck, Tool, ToolMeta};
use crate::tools::knowledge::verify_source::{VerificationView, required, verify};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session holding the stale record.
    pub(crate) session_id: String,
    /// The stale record (the task's payload.record_id).
    pub(crate) record_id: String,
    /// The object the new record verifies (payload.subject_id).
    pub(crate) subject_id: String,
    /// The URL to check again (payload.source_url).
    pub(crate) source_url: String,
    /// No effect (no LLM is involved).
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) auto_resolve: bool,
    /// Commit the new record and relation (default false: only return them).
    #[serde(default)]
    pub(crate) commit: bool,
    /// The provenance_conflict task this resolves (completed once committed).
    pub(crate) task_id: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    /// The record superseded (as given in 'record_id').
    stale_record_id: String,
    subject_id: String,
    source_url: String,
    /// The new VerificationRecord (objects[0]).
    new_record: Value,
    #[serde(flatten)]
    verification: VerificationView,
    #[serde(flatten)]
    resolution: Resolution,
}

pub(crate) struct RefreshVerification;

#[async_trait::async_trait]
impl Tool for RefreshVerification {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Refresh a verification";
    const META: ToolMeta = ToolMeta {
        name: "refresh_verification",
        description: "Resolve a provenance_conflict task (a stale VerificationRecord): check 'source_url' again as \
            verify_source does and sign a new VerificationRecord for 'subject_id', with a verified_by relation; the \
            stale record is kept, and superseded. Returns {new_record, objects, check_error (the source did not \
            answer)}; 'commit' adds them as a new version ('commit_result'). A URL that may not be fetched is \
            unsafe_url. 'auto_resolve' has no effect.",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: true,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let Input { session_id, record_id, subject_id, source_url, commit, task_id, .. } = input;
        required(&record_id, "record_id")?;
        required(&subject_id, "subject_id")?;
        required(&source_url, "source_url")?;
        let task = resolution_task(ctx, task_id, &session_id).await?;
        let verification = verify(ctx, &source_url, &subject_id).await.map_err(|e| {
            e.with("stale_record_id", record_id.as_str())
                .with("subject_id", subject_id.as_str())
                .with("source_url", source_url.as_str())
        })?;
        let view = verification.view();
        let new_record = view.objects[0].clone();
        let resolution = Resolution::commit_if(
            ctx,
            commit,
            &session_id,
            verification.operations(),
            &["verification_record"],
            Self::META.name,
            task,
        )
        .await;
        Ok(Output {
            session_id,
            stale_record_id: record_id,
            subject_id,
            source_url,
            new_record,
            verification: view,
            resolution,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use cks_core::validate::provenance::sign;

    use crate::testing::queue;
    use crate::testing::{HttpServer, Reply, call, obj, rel, session, structure};
    use crate::tools::knowledge::verify_source::tests::{local_context, signed};

    #[tokio::test]
    async fn a_refresh_adds_a_newer_signed_record_and_completes_the_task() {
        let server = HttpServer::start(|_, _| Reply::status(200)).await;
        let ctx = local_context();
        let url = format!("http://127.0.0.1:{}/paper", server.addr.port());
        let mut old = json!({"checked_at": "2001-01-01T00:00:00Z", "checked_via": "automated_http_check"});
        let signature = sign(&ctx.provenance, "vr-old", "doc", &serde_json::from_value(old.clone()).unwrap());
        old["_cks_mcp_signature"] = json!(signature);
        let id = session(
            &ctx,
            structure(vec![
                obj("doc", "Document", "Paper", json!({"url": url})),
                obj("vr-old", "VerificationRecord", "verification", old),
                rel("link-old", &["doc", "vr-old"], "verified_by"),
            ]),
        )
        .await;
        let payload = json!({"record_id": "vr-old", "subject_id": "doc", "source_url": url, "reason": "ttl_expired"});
        let task = queue(&ctx, "provenance_conflict", &id, payload).await;
        let args = json!({"session_id": id, "record_id": "vr-old", "subject_id": "doc", "source_url": url});

        let proposed = call(&ctx, "refresh_verification", args.clone()).await;
        assert_eq!(
            (proposed["session_id"].as_str(), proposed["stale_record_id"].as_str()),
            (Some(id.as_str()), Some("vr-old"))
        );
        assert_eq!(proposed["new_record"], proposed["objects"][0]);
        assert_eq!(proposed["new_record"]["structure"]["http_status"], 200);
        assert!(signed(&ctx, &proposed["new_record"], "doc"));
        assert!(proposed.get("commit_result").is_none() && proposed.get("task_completed").is_none());
        assert_eq!(ctx.runtime.read(&id, |s, _| s.len()).await.unwrap(), 3, "a proposal changes nothing");

        let mut committing = args.clone();
        committing["commit"] = json!(true);
        committing["task_id"] = json!(task);
        committing["auto_resolve"] = json!(true);
        let refreshed = call(&ctx, "refresh_verification", committing).await;
        assert_eq!(refreshed["commit_result"]["evolved"], true, "{refreshed}");
        assert_eq!(refreshed["task_completed"], true);
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none(), "completed");
        let new_id = refreshed["new_record"]["identity"]["id"].as_str().unwrap().to_owned();
        let (kept, added) = ctx
            .runtime
            .read(&id, |s, _| {
                (s.contains("vr-old"), s.get(&new_id).map(|o| o.structure.contains_key("_cks_mcp_signature")))
            })
            .await
            .unwrap();
        assert_eq!((kept, added), (true, Some(true)), "the old record is kept, the new one stored signed");
        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        let metadata = &versions.last().unwrap().metadata;
        assert_eq!(
            (metadata["tool"].as_str(), metadata["task_id"].as_i64()),
            (Some("refresh_verification"), Some(task))
        );

        // The subject is fresh again: its newest record is the new one.
        let freshness = ctx
            .runtime
            .read(&id, |s, _| {
                let found = cks_core::validate::provenance_freshness(
                    s,
                    time::Duration::days(30),
                    time::OffsetDateTime::now_utc(),
                );
                found.stale.len()
            })
            .await
            .unwrap();
        assert_eq!(freshness, 0);
    }

    #[tokio::test]
    async fn a_dead_lettered_provenance_conflict_is_proposed_and_approved() {
        let server = HttpServer::start(|_, _| Reply::status(200)).await;
        let mut ctx = local_context();
        ctx.registry = Some(std::sync::Arc::new(crate::Registry::standard()));
        let url = format!("http://127.0.0.1:{}/", server.addr.port());
        let id = session(&ctx, structure(vec![obj("doc", "Document", "Paper", json!({"url": url}))])).await;
        let dead = |payload: serde_json::Value| {
            let (ctx, id) = (&ctx, id.clone());
            async move {
                let task = queue(ctx, "provenance_conflict", &id, payload).await;
                ctx.runtime.tasks().dead_letter(cks_runtime::store::TaskRef::any(task), "unsure").await.unwrap();
                task
            }
        };
        let task = dead(json!({"record_id": "vr-old", "subject_id": "doc", "source_url": url})).await;
        let review = call(&ctx, "review_dead_letter", json!({"task_id": task})).await;
        let proposed = review["proposed_resolution"].clone();
        assert_eq!(
            proposed,
            json!({"tool": "refresh_verification", "arguments": {"session_id": id, "record_id": "vr-old",
                   "subject_id": "doc", "source_url": url, "auto_resolve": true, "commit": true}})
        );
        let approved = call(&ctx, "approve_resolution", json!({"task_id": task, "resolution": proposed})).await;
        assert_eq!(approved["approved"], true, "{approved}");
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none(), "completed");
        assert_eq!(ctx.runtime.read(&id, |s, _| s.len()).await.unwrap(), 3, "the record and its relation added");

        for payload in
            [json!({"subject_id": "doc", "source_url": url}), json!({"record_id": "vr-old", "subject_id": "doc"})]
        {
            let task = dead(payload.clone()).await;
            let review = call(&ctx, "review_dead_letter", json!({"task_id": task})).await;
            assert_eq!(review["proposed_resolution"]["error"], "cannot_propose", "{payload}");
        }
    }

    #[tokio::test]
    async fn refusals_and_bad_arguments() {
        let ctx = local_context();
        let id = session(&ctx, structure(vec![obj("doc", "Document", "Paper", json!({}))])).await;
        let base =
            json!({"session_id": id, "record_id": "vr-old", "subject_id": "doc", "source_url": "http://10.1.1.1/"});
        let refused = call(&ctx, "refresh_verification", base.clone()).await;
        assert_eq!(refused["error"], "unsafe_url");
        assert_eq!(
            (refused["stale_record_id"].as_str(), refused["subject_id"].as_str(), refused["source_url"].as_str()),
            (Some("vr-old"), Some("doc"), Some("http://10.1.1.1/"))
        );
        assert!(refused.get("session_id").is_none(), "as the reference answers");
        assert_eq!(ctx.runtime.read(&id, |s, _| s.len()).await.unwrap(), 1);

        for field in ["session_id", "record_id", "subject_id", "source_url"] {
            let mut args = base.clone();
            args.as_object_mut().unwrap().remove(field);
            assert_eq!(call(&ctx, "refresh_verification", args.clone()).await["error"], "missing_parameter", "{field}");
            args[field] = json!("");
            assert_eq!(call(&ctx, "refresh_verification", args).await["error"], "missing_parameter", "empty {field}");
        }
        let mut unknown = base.clone();
        unknown["session_id"] = json!("no-such-session");
        assert_eq!(call(&ctx, "refresh_verification", unknown).await["error"], "session_not_found");
        let mut no_task = base.clone();
        no_task["task_id"] = json!(424242);
        assert_eq!(call(&ctx, "refresh_verification", no_task).await["error"], "task_not_found");
    }
}
