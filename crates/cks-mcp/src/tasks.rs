//! MCP Tasks (the `io.modelcontextprotocol/tasks` extension): a long tool call ([`LONG_TOOLS`])
//! from a client that declares the extension runs in the background and is answered at once with
//! a task; the client polls `tasks/get` for its status and result, and may `tasks/cancel` it.
//!
//! A task's record (its tool, status, times, result or error) is a setting in the store under
//! `mcp_task.`, so every replica on the store answers for it and a restart keeps a finished
//! result. The process running a task refreshes the record's heartbeat while it works; a working
//! task whose heartbeat is older than [`STALE`] (its server stopped) reads as failed. A task
//! started by a principal is found only by that principal (or `cks:admin`). The call's progress
//! reports (`remember`'s parts, `ai_chat`'s round trips) become the task's `statusMessage`. A
//! cancellation reaches the process running the task as any cancelled call's does (an event every
//! process on the store receives). Records are kept for [`TTL`] after creation, then forgotten.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, DetailedTask, ErrorCode, ErrorData,
    GetTaskParams, GetTaskResult, JsonObject, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use cks_runtime::tasks::now_ms;

use crate::server::{CallOptions, CksServer};

/// The tools whose calls become tasks for a client that can follow them.
pub(crate) const LONG_TOOLS: [&str; 7] = [
    "ai_chat",
    "construct_knowledge",
    "remember",
    "start_pipeline",
    "export_storage",
    "import_storage",
    "migrate_storage",
];
/// Where task records live among the store's settings.
const RECORD: &str = "mcp_task.";
/// The transport-session name cancellations of tasks travel under (see `sessions::Calls`).
pub(crate) const SCOPE: &str = "mcp_task";
/// How long a task and its result are kept after it was created.
const TTL: Duration = Duration::from_secs(3600);
/// How often a working task's record says it is still worked on.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// A working task not heard of for this long has lost its server.
const STALE: Duration = Duration::from_secs(60);
/// The least time between two prunes of the records in one process.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// How often a client is asked to poll.
const POLL_INTERVAL_MS: u64 = 500;

/// A task as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    tool: String,
    status: TaskStatus,
    created_at: String,
    updated_at: String,
    /// Milliseconds since the epoch: creation, and the last heartbeat.
    created_ms: i64,
    heartbeat_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<JsonObject>,
    /// Who started it, when an access token named them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<cks_runtime::access::PrincipalId>,
    /// The call's last progress report, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_message: Option<String>,
}

/// A task's call reports progress into a channel its runner reads.
struct TaskProgress(tokio::sync::mpsc::UnboundedSender<String>);

impl cks_tools::context::ProgressSink for TaskProgress {
    fn report(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let text = message.unwrap_or_else(|| match total {
            Some(total) => format!("{progress} of {total}"),
            None => format!("{progress}"),
        });
        let _ = self.0.send(text);
    }
}

impl Record {
    /// Whether `caller` may see the task: its starter, `cks:admin`, or anyone when either is no
    /// principal (single-principal mode).
    fn visible_to(&self, caller: Option<&cks_tools::Principal>) -> bool {
        match (&self.principal, caller) {
            (Some(starter), Some(caller)) => caller.allows(cks_tools::Scope::Admin) || caller.id() == *starter,
            _ => true,
        }
    }

    /// What the client is told: the status as of `now_ms` (a silent working task has failed).
    fn detailed(&self, id: &str, now_ms: i64) -> DetailedTask {
        let stale = self.status == TaskStatus::Working && now_ms - self.heartbeat_ms > STALE.as_millis() as i64;
        let payload = match (self.status, &self.result, &self.error) {
            _ if stale => TaskPayload::Failed {
                error: error_object(
                    ErrorCode::INTERNAL_ERROR,
                    "the server running this task stopped before it finished",
                ),
            },
            (TaskStatus::Completed, Some(result), _) => TaskPayload::Completed { result: result.clone() },
            (TaskStatus::Failed, _, Some(error)) => TaskPayload::Failed { error: error.clone() },
            (TaskStatus::Cancelled, _, _) => TaskPayload::Cancelled,
            _ => TaskPayload::Working,
        };
        let mut task = Task::new(id, payload.status(), &self.created_at, &self.updated_at)
            .with_ttl_ms(TTL.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        if let Some(message) = &self.status_message {
            task = task.with_status_message(message.clone());
        }
        DetailedTask::new(task, payload)
    }

    fn expired(&self, now_ms: i64) -> bool {
        now_ms - self.created_ms > TTL.as_millis() as i64
    }
}

fn error_object(code: ErrorCode, message: &str) -> JsonObject {
    match json!({"code": code.0, "message": message}) {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn store_error(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("task records: {e}"), None)
}

/// Whether this call runs as a task: a long tool, and a client that follows tasks (a retry
/// answering a question of the call runs as the call it continues did not).
pub(crate) fn runs_as_task(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> bool {
    LONG_TOOLS.contains(&request.name.as_ref())
        && request.request_state.is_none()
        && context.client_capabilities().is_some_and(|c| c.supports_tasks())
}

impl CksServer {
    async fn task_record(&self, id: &str) -> Result<Option<Record>, ErrorData> {
        let text = self.runtime.store().load_setting(&format!("{RECORD}{id}")).await.map_err(store_error)?;
        Ok(text.and_then(|t| serde_json::from_str::<Record>(&t).ok()).filter(|r| !r.expired(now_ms())))
    }

    async fn save_task(&self, id: &str, record: &Record) -> Result<(), ErrorData> {
        let text = serde_json::to_string(record).map_err(store_error)?;
        self.runtime.store().save_setting(&format!("{RECORD}{id}"), &text).await.map_err(store_error)
    }

    /// Forgets the records past their time, at most once every [`PRUNE_EVERY`] in a process (a
    /// record past its time reads as gone meanwhile).
    async fn prune_tasks(&self) -> Result<(), ErrorData> {
        static PRUNED_AT_MS: AtomicI64 = AtomicI64::new(0);
        let now = now_ms();
        let last = PRUNED_AT_MS.load(Ordering::Relaxed);
        if now - last < PRUNE_EVERY.as_millis() as i64
            || PRUNED_AT_MS.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return Ok(());
        }
        for (key, text) in self.runtime.store().list_settings(RECORD).await.map_err(store_error)? {
            let expired = serde_json::from_str::<Record>(&text).map_or(true, |r| r.expired(now));
            if expired {
                self.runtime.store().delete_setting(&key).await.map_err(store_error)?;
            }
        }
        Ok(())
    }

    /// Starts the call as a task and answers with it.
    pub(crate) async fn start_task(
        &self,
        request: CallToolRequestParams,
        principal: Option<Arc<cks_tools::Principal>>,
        admission: Arc<crate::limits::Admission>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.prune_tasks().await?;
        let id: String = rand::random::<[u8; 16]>().iter().map(|b| format!("{b:02x}")).collect();
        let (now, at) = (now_ms(), cks_runtime::runtime::now());
        let record = Record {
            tool: request.name.to_string(),
            status: TaskStatus::Working,
            created_at: at.clone(),
            updated_at: at,
            created_ms: now,
            heartbeat_ms: now,
            result: None,
            error: None,
            principal: principal.as_ref().map(|principal| principal.id()),
            status_message: None,
        };
        self.save_task(&id, &record).await?;
        let created = record.detailed(&id, now).task;
        tokio::spawn(self.clone().run_task(id, record, request, principal, admission).in_current_span());
        Ok(CreateTaskResult::new(created).into())
    }

    /// Runs a task's call to its end, saying so in its record while it works and when it ends.
    async fn run_task(
        self,
        id: String,
        mut record: Record,
        request: CallToolRequestParams,
        principal: Option<Arc<cks_tools::Principal>>,
        // The call counts against its caller's limits until the task ends.
        _admission: Arc<crate::limits::Admission>,
    ) {
        let token = CancellationToken::new();
        let _running = self.calls.run(SCOPE.to_owned(), id.clone(), token.clone());
        let (progress, mut reports) = tokio::sync::mpsc::unbounded_channel();
        let progress: Arc<dyn cks_tools::context::ProgressSink> = Arc::new(TaskProgress(progress));
        let options = CallOptions { progress: Some(progress), cancel: token.clone(), principal };
        let call = CksServer::call_tool(&self, &request.name, request.arguments, options);
        tokio::pin!(call);
        let mut beat = tokio::time::interval(HEARTBEAT);
        beat.tick().await;
        let outcome = loop {
            let saved = tokio::select! {
                outcome = &mut call => break outcome,
                _ = beat.tick() => "heartbeat",
                Some(message) = reports.recv() => {
                    record.status_message = Some(message);
                    record.updated_at = cks_runtime::runtime::now();
                    "progress"
                }
            };
            record.heartbeat_ms = now_ms();
            if let Err(e) = self.save_task(&id, &record).await {
                tracing::warn!(task = %id, what = saved, error = %e.message, "task record not saved");
            }
        };
        // Reports made just before the call returned.
        while let Ok(message) = reports.try_recv() {
            record.status_message = Some(message);
        }
        record.updated_at = cks_runtime::runtime::now();
        record.heartbeat_ms = now_ms();
        match outcome {
            _ if token.is_cancelled() => record.status = TaskStatus::Cancelled,
            Ok(result) => {
                record.status = TaskStatus::Completed;
                record.result = serde_json::to_value(&result).ok().and_then(|v| v.as_object().cloned());
            }
            Err(error) => {
                record.status = TaskStatus::Failed;
                record.error = Some(error_object(error.code, &error.message));
            }
        }
        if let Err(e) = self.save_task(&id, &record).await {
            tracing::error!(task = %id, error = %e.message, "the end of a task not saved");
        }
    }

    /// The task's record, if the caller may see it: a task a principal started is another
    /// principal's unknown task.
    async fn task_of(&self, id: &str, caller: Option<&cks_tools::Principal>) -> Result<Record, ErrorData> {
        let record = self.task_record(id).await?.ok_or_else(|| unknown(id))?;
        if record.visible_to(caller) { Ok(record) } else { Err(unknown(id)) }
    }

    /// `tasks/get`.
    pub(crate) async fn get_task(
        &self,
        request: GetTaskParams,
        caller: Option<&cks_tools::Principal>,
    ) -> Result<GetTaskResult, ErrorData> {
        let record = self.task_of(&request.task_id, caller).await?;
        Ok(GetTaskResult::new(record.detailed(&request.task_id, now_ms())))
    }

    /// `tasks/cancel`: the process running the task stops it (this one, or another on the store).
    pub(crate) async fn cancel_task(
        &self,
        request: CancelTaskParams,
        caller: Option<&cks_tools::Principal>,
    ) -> Result<(), ErrorData> {
        let record = self.task_of(&request.task_id, caller).await?;
        if record.status == TaskStatus::Working {
            self.calls.cancel(SCOPE, &request.task_id);
            self.runtime.cancel_call(SCOPE, &request.task_id);
        }
        Ok(())
    }

    /// `tasks/update`: no task of this server asks its client for input.
    pub(crate) async fn update_task(
        &self,
        request: UpdateTaskParams,
        caller: Option<&cks_tools::Principal>,
    ) -> Result<(), ErrorData> {
        self.task_of(&request.task_id, caller).await?;
        Err(ErrorData::invalid_params(format!("Task {} asks for no input", request.task_id), None))
    }
}

fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("Task not found (or past its time): {id}"), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: TaskStatus, heartbeat_ms: i64) -> Record {
        Record {
            tool: "ai_chat".into(),
            status,
            created_at: "2026-12-05T10:00:00Z".into(),
            updated_at: "2026-12-05T10:00:00Z".into(),
            created_ms: 0,
            heartbeat_ms,
            result: Some(error_object(ErrorCode(1), "r")),
            error: Some(error_object(ErrorCode(2), "e")),
            principal: None,
            status_message: None,
        }
    }

    #[test]
    fn a_task_a_principal_started_is_theirs() {
        let who = |subject: &str, scope| cks_tools::Principal {
            issuer: "https://id.example".into(),
            subject: subject.into(),
            scope: Some(scope),
            groups: Vec::new(),
        };
        let (a, b, admin) =
            (who("a", cks_tools::Scope::Write), who("b", cks_tools::Scope::Write), who("r", cks_tools::Scope::Admin));
        let started = Record { principal: Some(a.id()), ..record(TaskStatus::Working, 0) };
        assert!(started.visible_to(Some(&a)) && started.visible_to(Some(&admin)));
        assert!(!started.visible_to(Some(&b)));
        assert!(record(TaskStatus::Working, 0).visible_to(Some(&b)), "a task no principal started");
    }

    #[test]
    fn a_record_reads_as_its_status_and_a_silent_working_task_as_failed() {
        let working = record(TaskStatus::Working, 1_000);
        assert_eq!(working.detailed("t", 2_000).status(), TaskStatus::Working);
        let lost = working.detailed("t", 1_000 + STALE.as_millis() as i64 + 1);
        assert!(
            matches!(&lost.payload, TaskPayload::Failed { error } if error["message"].as_str().unwrap().contains("stopped"))
        );
        let done = record(TaskStatus::Completed, 0).detailed("t", 10_000_000);
        assert!(matches!(&done.payload, TaskPayload::Completed { result } if result["message"] == "r"));
        assert_eq!(done.task.ttl_ms, Some(TTL.as_millis() as u64));
        assert!(matches!(record(TaskStatus::Failed, 0).detailed("t", 0).payload, TaskPayload::Failed { .. }));
        assert_eq!(record(TaskStatus::Cancelled, 0).detailed("t", 0).status(), TaskStatus::Cancelled);
        assert!(!working.expired(TTL.as_millis() as i64) && working.expired(TTL.as_millis() as i64 + 1));
    }
}
