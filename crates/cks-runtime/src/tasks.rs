//! The task queue's policy over the store's rows ([`crate::store::tasks`]): the clock, the lease a
//! claim holds, and what a failure costs — a retry after `2^n` seconds (capped at an hour, the
//! reference's schedule) until the retries are used up, then the dead-letter list.

use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::{NewTask, Store, StoreError, TaskFilter, TaskRef, TaskRow};

/// The queue's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// How long a claim holds without being renewed before another worker may take the task.
    pub lease: Duration,
    /// Failed attempts after which a task is dead-lettered instead of retried.
    pub max_retries: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { lease: Duration::from_secs(300), max_retries: 5 }
    }
}

/// The longest wait before a retry.
const MAX_BACKOFF_SECONDS: u64 = 3_600;

/// What became of a failed task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failed {
    /// Pending again, claimable from this time (ms since the epoch).
    Retrying { next_retry_at_ms: i64 },
    /// Out of retries: dead-lettered with the error.
    DeadLettered,
    /// No such task, or the claim named no longer holds it.
    NotFound,
}

/// The queue, as the runtime's users see it.
#[derive(Clone, Debug)]
pub struct TaskQueue {
    store: Arc<dyn Store>,
    config: QueueConfig,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The wait before retry number `retry_count`: `2^retry_count` seconds, at most an hour.
pub fn backoff(retry_count: u32) -> Duration {
    Duration::from_secs(2u64.checked_pow(retry_count).map_or(MAX_BACKOFF_SECONDS, |s| s.min(MAX_BACKOFF_SECONDS)))
}

/// What a dead-lettered task's error ends with: how many attempts failed.
pub fn gave_up(attempts: u32) -> String {
    let plural = if attempts == 1 { "" } else { "s" };
    format!(" (gave up after {attempts} failed attempt{plural})")
}

impl TaskQueue {
    pub fn new(store: Arc<dyn Store>, config: QueueConfig) -> Self {
        TaskQueue { store, config }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Queues a task now; `None` when the same finding (`dedup_key`) is already queued. An object
    /// payload queued during a principal's call records them ([`crate::access::PRINCIPAL_KEY`]).
    pub async fn enqueue(
        &self,
        task_type: &str,
        session_id: &str,
        payload: &Value,
        dedup_key: Option<String>,
    ) -> Result<Option<i64>, StoreError> {
        let task = NewTask {
            task_type: task_type.to_owned(),
            session_id: session_id.to_owned(),
            payload: with_principal(payload).to_string(),
            dedup_key,
            created_at_ms: now_ms(),
        };
        self.store.enqueue_task(&task).await
    }

    /// Claims the oldest claimable task of `task_type` (any type when `None`).
    pub async fn claim(&self, task_type: Option<&str>) -> Result<Option<TaskRow>, StoreError> {
        self.store.claim_task(task_type, now_ms(), self.config.lease.as_millis() as i64).await
    }

    pub async fn get(&self, task_id: i64) -> Result<Option<TaskRow>, StoreError> {
        self.store.get_task(task_id).await
    }

    pub async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
        self.store.list_tasks(filter).await
    }

    pub async fn complete(&self, task: TaskRef) -> Result<bool, StoreError> {
        self.store.complete_task(task).await
    }

    /// Records failed attempt number `retry_count`: retried after its backoff while retries are
    /// left, dead-lettered once `retry_count` exceeds the limit.
    pub async fn fail(&self, task: TaskRef, retry_count: u32, error: &str) -> Result<Failed, StoreError> {
        if retry_count > self.config.max_retries {
            let error = format!("{error}{}", gave_up(retry_count));
            return Ok(if self.store.dead_letter_task(task, &error, Some(retry_count)).await? {
                Failed::DeadLettered
            } else {
                Failed::NotFound
            });
        }
        let next_retry_at_ms = now_ms().saturating_add(backoff(retry_count).as_millis() as i64);
        Ok(if self.store.fail_task(task, retry_count, error, next_retry_at_ms).await? {
            Failed::Retrying { next_retry_at_ms }
        } else {
            Failed::NotFound
        })
    }

    pub async fn dead_letter(&self, task: TaskRef, error: &str) -> Result<bool, StoreError> {
        self.store.dead_letter_task(task, error, None).await
    }

    /// Returns a dead task to the queue, claimable now.
    pub async fn retry_dead(&self, task_id: i64) -> Result<bool, StoreError> {
        self.store.retry_dead_task(task_id, now_ms()).await
    }

    /// Renews a claim; the claim is then `claimed_at_ms == ` the returned time.
    pub async fn renew(&self, task: TaskRef) -> Result<Option<i64>, StoreError> {
        let now = now_ms();
        Ok(self.store.renew_task(task, now).await?.then_some(now))
    }
}

/// The payload, with the principal of the current call added to an object payload.
fn with_principal(payload: &Value) -> std::borrow::Cow<'_, Value> {
    match (payload, crate::access::current_principal()) {
        (Value::Object(map), Some(principal)) => {
            let mut map = map.clone();
            let principal = serde_json::to_value(principal).expect("principals encode");
            map.insert(crate::access::PRINCIPAL_KEY.into(), principal);
            std::borrow::Cow::Owned(Value::Object(map))
        }
        _ => std::borrow::Cow::Borrowed(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskStatus;
    use crate::store::memory::MemoryStore;
    use serde_json::json;

    #[test]
    fn backoff_doubles_up_to_an_hour() {
        let seconds: Vec<u64> = [0, 1, 2, 5, 11, 12, 40, 100].iter().map(|n| backoff(*n).as_secs()).collect();
        assert_eq!(seconds, [1, 2, 4, 32, 2_048, 3_600, 3_600, 3_600]);
    }

    #[tokio::test]
    async fn failures_retry_until_the_limit_then_dead_letter() {
        let queue = TaskQueue::new(Arc::new(MemoryStore::new()), QueueConfig { max_retries: 2, ..Default::default() });
        let id = queue.enqueue("t", "s", &json!({"k": 1}), None).await.unwrap().unwrap();
        let task = queue.claim(Some("t")).await.unwrap().unwrap();
        let before = now_ms();
        let Failed::Retrying { next_retry_at_ms } = queue.fail(TaskRef::claimed(&task), 1, "e1").await.unwrap() else {
            panic!("retried")
        };
        assert!(next_retry_at_ms >= before + 2_000 && next_retry_at_ms <= now_ms() + 2_000);
        assert!(queue.claim(Some("t")).await.unwrap().is_none(), "not before its backoff");
        assert!(matches!(queue.fail(TaskRef::any(id), 2, "e2").await.unwrap(), Failed::Retrying { .. }));
        assert_eq!(queue.fail(TaskRef::any(id), 3, "e3").await.unwrap(), Failed::DeadLettered);
        let dead = queue.get(id).await.unwrap().unwrap();
        assert_eq!(dead.status, TaskStatus::Dead);
        assert_eq!(dead.last_error.unwrap(), "e3 (gave up after 3 failed attempts)");
        assert_eq!(queue.fail(TaskRef::any(id + 1), 1, "e").await.unwrap(), Failed::NotFound);
    }

    #[tokio::test]
    async fn a_task_without_retries_gives_up_after_one_failed_attempt() {
        let queue = TaskQueue::new(Arc::new(MemoryStore::new()), QueueConfig { max_retries: 0, ..Default::default() });
        let id = queue.enqueue("t", "s", &json!({}), None).await.unwrap().unwrap();
        assert_eq!(queue.fail(TaskRef::any(id), 1, "e1").await.unwrap(), Failed::DeadLettered);
        assert_eq!(queue.get(id).await.unwrap().unwrap().last_error.unwrap(), "e1 (gave up after 1 failed attempt)");
    }
}
