//! The Critic: claims conflict tasks and settles each with the resolution `review_dead_letter`
//! would propose for it — the resolving tool, run through the registry, its commit naming the
//! process and the task. A resolution that settles the task completes it; one that does not fails
//! it (retried after its backoff, dead-lettered past the retry limit); a task no tool can settle
//! is dead-lettered at once. A model decides where the resolution asks one to (an inference
//! conflict's winner, a merge's conflicts); rules decide the rest.

use serde_json::Value;
use tokio::sync::watch;

use cks_runtime::store::TaskRow;

use super::{Held, Outcome, Recorded, Worker};
use cks_tools::critic_metrics::CriticEvent;
use cks_tools::services::{propose, settled};

pub(super) async fn run(mut worker: Worker, task_types: Vec<String>, mut stopped: watch::Receiver<bool>) {
    worker.report().await;
    let metrics = worker.ctx.critic_metrics.clone();
    while let Some(task) = worker.next_task(&task_types, &mut stopped).await {
        metrics.count(CriticEvent::Processed, &task.task_type);
        let event = match worker.hold(&task, resolve(&worker, &task)).await {
            Held::Done(outcome, held) => match worker.finish(&task, held, &outcome).await {
                Recorded::Completed => Some(CriticEvent::Completed),
                Recorded::Retrying => Some(CriticEvent::Retried),
                Recorded::DeadLettered => Some(CriticEvent::DeadLettered),
                Recorded::Unchanged => None,
            },
            Held::Lost(why) => {
                worker.abandon(why).await;
                Some(CriticEvent::LeaseLost)
            }
        };
        if let Some(event) = event {
            metrics.count(event, &task.task_type);
        }
    }
    worker.stopped().await;
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
    let ctx = worker.task_context(task);
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
