//! The Critic: claims conflict tasks and settles each with the resolution `review_dead_letter`
//! would propose for it — the resolving tool, run through the registry, its commit naming the
//! process and the task. A resolution that settles the task completes it; one that does not fails
//! it (retried after its backoff, dead-lettered past the retry limit); a task no tool can settle
//! is dead-lettered at once. A model decides where the resolution asks one to (an inference
//! conflict's winner, a merge's conflicts); rules decide the rest.

use serde_json::{Value, json};
use tokio::sync::watch;

use cks_runtime::store::{StoreError, TaskRef, TaskRow};

use super::Worker;
use crate::tools::conflicts::review::{propose, settled};

pub(super) async fn run(mut worker: Worker, task_types: Vec<String>, mut stopped: watch::Receiver<bool>) {
    worker.report().await;
    while !worker.should_stop(&stopped).await {
        worker.beat().await;
        if !worker.within_budget() {
            worker.idle(&mut stopped).await;
            continue;
        }
        match claim(&worker, &task_types).await {
            Ok(Some(task)) => settle(&mut worker, task).await,
            Ok(None) => worker.idle(&mut stopped).await,
            Err(e) => {
                worker.record.last_error = Some(format!("claiming a task: {e}"));
                worker.idle(&mut stopped).await;
            }
        }
    }
    worker.stopped().await;
}

/// The next claimable task of the first type that has one.
async fn claim(worker: &Worker, task_types: &[String]) -> Result<Option<TaskRow>, StoreError> {
    for task_type in task_types {
        if let Some(task) = worker.ctx.runtime.tasks().claim(Some(task_type)).await? {
            return Ok(Some(task));
        }
    }
    Ok(None)
}

enum Outcome {
    Settled,
    /// Worth another try (a provider failed, a commit raced).
    Failed(String),
    /// No resolution exists for it.
    Unsettleable(String),
}

async fn settle(worker: &mut Worker, task: TaskRow) {
    worker.record.current_task_id = Some(task.task_id);
    worker.record.current_task_type = Some(task.task_type.clone());
    worker.report().await;
    let outcome = resolve(worker, &task).await;
    let queue = worker.ctx.runtime.tasks();
    let held = TaskRef::claimed(&task);
    // A store error here leaves the task claimed; its lease ends and it is claimed again.
    let recorded = match &outcome {
        Outcome::Settled => queue.complete(held).await.map(drop),
        Outcome::Failed(why) => queue.fail(held, task.retry_count + 1, why).await.map(drop),
        Outcome::Unsettleable(why) => queue.dead_letter(held, why).await.map(drop),
    };
    match (&outcome, recorded) {
        (_, Err(e)) => worker.record.last_error = Some(format!("recording task {}: {e}", task.task_id)),
        (Outcome::Settled, Ok(())) => worker.record.tasks_done += 1,
        (Outcome::Failed(why) | Outcome::Unsettleable(why), Ok(())) => {
            worker.record.tasks_failed += 1;
            worker.record.last_error = Some(format!("task {}: {why}", task.task_id));
        }
    }
    worker.record.current_task_id = None;
    worker.record.current_task_type = None;
    worker.within_budget();
    worker.report().await;
}

async fn resolve(worker: &Worker, task: &TaskRow) -> Outcome {
    let payload = serde_json::from_str(&task.payload).unwrap_or_else(|_| Value::String(task.payload.clone()));
    let proposal = propose(task, &payload);
    let (Some(tool), Some(arguments)) = (proposal.get("tool").and_then(Value::as_str), proposal.get("arguments"))
    else {
        return Outcome::Unsettleable(describe(&proposal));
    };
    let Some(registry) = worker.ctx.registry.clone() else {
        return Outcome::Failed("no tool registry to run the resolution".into());
    };
    let mut ctx = worker.ctx.clone();
    ctx.audit.insert("process".into(), json!(worker.record.process_kind));
    ctx.audit.insert("process_instance".into(), json!(worker.record.instance_id));
    ctx.audit.insert("task_id".into(), json!(task.task_id));
    match registry.call(tool, arguments.clone(), &ctx).await {
        Ok(result) if settled(&result) => Outcome::Settled,
        Ok(result) => Outcome::Failed(format!("{tool}: {}", describe(&result))),
        Err(e) => Outcome::Unsettleable(e.to_string()),
    }
}

/// A result that did not settle, in a line: its error, or why it changed nothing.
fn describe(result: &Value) -> String {
    let error = result.get("error").or_else(|| result.pointer("/commit_result/error"));
    match error {
        Some(code) => {
            let message = result.get("message").or_else(|| result.pointer("/commit_result/message"));
            format!("{} ({})", code.as_str().unwrap_or("error"), message.and_then(Value::as_str).unwrap_or(""))
        }
        None => "the resolution changed nothing".into(),
    }
}
