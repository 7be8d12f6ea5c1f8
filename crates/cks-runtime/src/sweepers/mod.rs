//! Sweepers: supervised background re-checks that put what they find in the task queue
//! ([`crate::tasks`]) for a person or a worker process to resolve. The reference calls them
//! agents (`list_agents`, `start_agent`, ...).
//!
//! Which sessions a sweep reads follows the change, not the store: a sweeper looks only at the
//! sessions that changed since its last sweep (it hears every commit, this process's and, through
//! the store, other replicas'), plus the sessions whose own content said when to look again (a
//! fact that expires at a known time). A server with thousands of idle sessions does no work per
//! sweep. Only a sweeper's first pass, and a pass after it missed events, looks at every session.
//! A session it looks at is checked whole.
//!
//! The checks are the opt-in validation extensions' own (`cks_core::validate`): a sweeper decides
//! what to queue, never what a rule means. A finding is queued once while it is unresolved: the
//! task's de-duplication key names the sweeper, the session and the finding.

mod contradiction;
mod duplicates;
mod graphs;
mod inference;
mod provenance;
mod temporal;

use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use time::OffsetDateTime;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use cks_core::KnowledgeStructure;

use crate::error::RuntimeError;
use crate::events::EventKind;
use crate::gallery::GraphEntry;
use crate::health::{GraphContent, GraphHealth, is_fresh};
use crate::runtime::Runtime;
use crate::session::SessionInfo;
use crate::store::{TaskFilter, TaskStatus};
use crate::versions::VersionSource;

pub use duplicates::{DISTINCT_FROM, DUPLICATE_CANDIDATE, queue_pairs};

/// One kind of background check.
pub(crate) trait Sweep: Send + Sync + 'static {
    /// The sweeper's name in `list_agents` (the reference's agent id).
    fn agent_id(&self) -> &'static str;
    /// The type of the tasks it queues.
    fn task_type(&self) -> &'static str;
    /// What one session's structure shows as of `now` (sweeps over sessions).
    fn check(&self, _structure: &KnowledgeStructure, _info: &SessionInfo, _now: OffsetDateTime) -> Check {
        Check { findings: Vec::new(), recheck_at: None }
    }
    /// For a sweep over registered graphs rather than sessions: what it reads of each graph.
    fn over_graphs(&self) -> Option<graphs::GraphReads> {
        None
    }
    /// What one registered graph shows as of `now` (sweeps over graphs), from what was read of it.
    fn check_graph(&self, _entry: &GraphEntry, _reads: &graphs::Read<'_>, _now: OffsetDateTime) -> Check {
        Check { findings: Vec::new(), recheck_at: None }
    }
    /// Whether what it newly queues is also kept in the inbox (`list_inference_conflicts`).
    fn keeps_inbox(&self) -> bool {
        false
    }
    /// Whether its check reads the structure's vector index, which the sweep then settles
    /// against the vectors known (when search by meaning is on) before the check.
    fn reads_vectors(&self) -> bool {
        false
    }
}

/// A finding kept in the inbox: what the reference's in-process conflict inbox holds, read and
/// drained by `list_inference_conflicts` independently of the task queue.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxRecord {
    pub record_id: String,
    /// Seconds since the epoch.
    pub detected_at: f64,
    pub session_id: String,
    /// The queued task's payload.
    pub payload: Value,
}

/// A sweeper's stored setting values: whether it should run.
const RUNNING: &str = "running";
const STOPPED: &str = "stopped";

/// The most inbox records kept; older ones make room.
const INBOX_CAPACITY: usize = 1_000;

/// One thing found in a session.
pub(crate) struct Finding {
    /// Names the finding within its session (de-duplication).
    pub(crate) key: String,
    pub(crate) payload: Value,
}

/// What a check of one session found, and when to look again if nothing changes.
pub(crate) struct Check {
    pub(crate) findings: Vec<Finding>,
    pub(crate) recheck_at: Option<OffsetDateTime>,
}

/// The sweepers' settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepersConfig {
    /// Time between the end of one sweep and the start of the next.
    pub interval: Duration,
    /// Whether the sweepers run from the start (otherwise `start_agent` starts them).
    pub start: bool,
    /// How long a `VerificationRecord`'s check stays fresh (`provenance_staleness`).
    pub provenance_ttl: Duration,
}

impl Default for SweepersConfig {
    fn default() -> Self {
        SweepersConfig {
            interval: Duration::from_secs(3_600),
            start: true,
            provenance_ttl: Duration::from_secs(30 * 24 * 3_600),
        }
    }
}

/// What a sweeper reports about itself.
#[derive(Clone, Debug, PartialEq)]
pub struct SweeperStatus {
    pub agent_id: &'static str,
    pub task_type: &'static str,
    pub running: bool,
    pub interval: Duration,
    /// When the last sweep started (ms since the epoch).
    pub last_run_at_ms: Option<i64>,
    pub last_run_duration: Option<Duration>,
    /// Findings in the sessions the last sweep looked at (queued then or before).
    pub last_result_count: Option<u64>,
    /// Sessions the last sweep looked at.
    pub last_sessions_checked: Option<u64>,
    pub last_error: Option<String>,
    /// The session `last_error` names (one the sweep could not read), so that only those who may
    /// reach it are shown the error; `None` when it names none.
    pub last_error_session_id: Option<String>,
    /// Sweeps finished since start-up (failed ones included).
    pub sweeps: u64,
}

/// The sweepers of one runtime.
pub struct Sweepers {
    runtime: Arc<Runtime>,
    sweepers: Vec<Arc<Sweeper>>,
    feeder: JoinHandle<()>,
    inbox: Arc<Mutex<VecDeque<InboxRecord>>>,
}

impl std::fmt::Debug for Sweepers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweepers")
            .field("agents", &self.sweepers.iter().map(|s| s.sweep.agent_id()).collect::<Vec<_>>())
            .finish()
    }
}

struct Sweeper {
    sweep: Box<dyn Sweep>,
    inbox: Arc<Mutex<VecDeque<InboxRecord>>>,
    /// Reads the versions components publish, for a sweep that checks them.
    versions: Option<Arc<dyn VersionSource>>,
    interval: Duration,
    state: Mutex<State>,
    /// One sweep at a time (the loop's and `run_once`'s).
    sweeping: tokio::sync::Mutex<()>,
    /// The running loop, if any: its stop signal and task.
    running: Mutex<Option<(watch::Sender<bool>, JoinHandle<()>)>>,
}

#[derive(Default)]
struct State {
    /// Every session must be looked at (the first pass, or events were missed).
    all: bool,
    dirty: HashSet<String>,
    /// (when, session, or graph name for a sweep over graphs): look again then even if nothing
    /// changed.
    rechecks: BTreeSet<(i64, String)>,
    recheck_of: HashMap<String, i64>,
    /// A sweep over graphs: each graph's entry as last looked at (name → updated_at, and for
    /// health the time of the version check it scored with).
    graphs_seen: HashMap<String, String>,
    last_run_at_ms: Option<i64>,
    last_run_duration: Option<Duration>,
    last_result_count: Option<u64>,
    last_sessions_checked: Option<u64>,
    last_error: Option<String>,
    last_error_session_id: Option<String>,
    sweeps: u64,
}

impl State {
    fn schedule(&mut self, session_id: &str, at_ms: Option<i64>) {
        if let Some(previous) = self.recheck_of.remove(session_id) {
            self.rechecks.remove(&(previous, session_id.to_owned()));
        }
        if let Some(at_ms) = at_ms {
            self.rechecks.insert((at_ms, session_id.to_owned()));
            self.recheck_of.insert(session_id.to_owned(), at_ms);
        }
    }

    /// Takes what is due now: whether every session is, and the sessions changed or due again.
    fn take_due(&mut self, now_ms: i64) -> (bool, BTreeSet<String>) {
        let mut due: BTreeSet<String> = self.dirty.drain().collect();
        while let Some(first) = self.rechecks.first().filter(|(at, _)| *at <= now_ms).cloned() {
            self.rechecks.remove(&first);
            self.recheck_of.remove(&first.1);
            due.insert(first.1);
        }
        (std::mem::take(&mut self.all), due)
    }
}

/// What one sweep did.
#[derive(Default)]
struct Swept {
    sessions: u64,
    findings: u64,
    /// The last session it could not read, and why.
    skipped: Option<String>,
    /// That session.
    skipped_session: Option<String>,
}

fn millis(at: OffsetDateTime) -> i64 {
    (at.unix_timestamp_nanos() / 1_000_000) as i64
}

impl Sweepers {
    /// The standard sweepers of `runtime`, each started when `config.start` says so and no
    /// `stop_agent` since (kept in the store) said otherwise. Without a [`VersionSource`],
    /// `graph_auto_update` finds nothing and says so in its status.
    pub async fn start(runtime: Arc<Runtime>, config: &SweepersConfig) -> Result<Arc<Self>, RuntimeError> {
        Self::start_reading_versions(runtime, config, None).await
    }

    /// [`Sweepers::start`], with `graph_auto_update` reading published versions from `versions`.
    pub async fn start_reading_versions(
        runtime: Arc<Runtime>,
        config: &SweepersConfig,
        versions: Option<Arc<dyn VersionSource>>,
    ) -> Result<Arc<Self>, RuntimeError> {
        let ttl = time::Duration::try_from(config.provenance_ttl).unwrap_or(time::Duration::MAX);
        let kinds: Vec<Box<dyn Sweep>> = vec![
            Box::new(inference::ConfidenceConflicts),
            Box::new(provenance::Stale { ttl }),
            Box::new(temporal::Expired),
            Box::new(graphs::Freshness),
            Box::new(graphs::AutoUpdate),
            Box::new(graphs::Health),
            Box::new(contradiction::Contradictions),
            Box::new(duplicates::Duplicates),
        ];
        Self::with(runtime, config, kinds, versions).await
    }

    async fn with(
        runtime: Arc<Runtime>,
        config: &SweepersConfig,
        kinds: Vec<Box<dyn Sweep>>,
        versions: Option<Arc<dyn VersionSource>>,
    ) -> Result<Arc<Self>, RuntimeError> {
        let inbox = Arc::new(Mutex::new(VecDeque::new()));
        let sweepers: Vec<Arc<Sweeper>> = kinds
            .into_iter()
            .map(|sweep| {
                Arc::new(Sweeper {
                    sweep,
                    inbox: inbox.clone(),
                    versions: versions.clone(),
                    interval: config.interval,
                    state: Mutex::new(State { all: true, ..State::default() }),
                    sweeping: tokio::sync::Mutex::new(()),
                    running: Mutex::new(None),
                })
            })
            .collect();
        // Subscribed before any sweep, so no commit falls between a sweep and the first event.
        let feeder = tokio::spawn(feed(runtime.subscribe(), sweepers.clone()));
        let this = Arc::new(Sweepers { runtime, sweepers, feeder, inbox });
        for sweeper in &this.sweepers {
            let wanted = this.runtime.store().load_setting(&sweeper.setting()).await?;
            if wanted.as_deref().map_or(config.start, |w| w == RUNNING) {
                // The first pass looks at every session: not at start-up, which loads none.
                sweeper.start(&this.runtime, false);
            }
        }
        Ok(this)
    }

    /// Every sweeper's status, in listing order.
    pub fn statuses(&self) -> Vec<SweeperStatus> {
        self.sweepers.iter().map(|s| s.status()).collect()
    }

    pub fn status(&self, agent_id: &str) -> Option<SweeperStatus> {
        self.find(agent_id).map(|s| s.status())
    }

    /// Starts a sweeper (it sweeps at once), here and after restarts; `None` for an unknown id.
    /// Starting a running one changes nothing.
    pub async fn start_agent(&self, agent_id: &str) -> Result<Option<SweeperStatus>, RuntimeError> {
        let Some(sweeper) = self.find(agent_id) else { return Ok(None) };
        self.runtime.store().save_setting(&sweeper.setting(), RUNNING).await?;
        sweeper.start(&self.runtime, true);
        Ok(Some(sweeper.status()))
    }

    /// Stops a sweeper after its current sweep, here and after restarts (other processes on the
    /// store stop theirs at their next sweep); `None` for an unknown id.
    pub async fn stop_agent(&self, agent_id: &str) -> Result<Option<SweeperStatus>, RuntimeError> {
        let Some(sweeper) = self.find(agent_id) else { return Ok(None) };
        self.runtime.store().save_setting(&sweeper.setting(), STOPPED).await?;
        sweeper.stop().await;
        Ok(Some(sweeper.status()))
    }

    /// Runs one sweep of a sweeper now and returns its status; `None` for an unknown id.
    pub async fn run_once(&self, agent_id: &str) -> Option<Result<SweeperStatus, RuntimeError>> {
        let sweeper = self.find(agent_id)?;
        Some(sweeper.sweep_once(&self.runtime).await.map(|()| sweeper.status()))
    }

    /// The inbox's records (of `session_id` only, when given), oldest first; `drain` removes the
    /// records returned.
    pub fn inbox(&self, session_id: Option<&str>, drain: bool) -> Vec<InboxRecord> {
        let mut inbox = self.inbox.lock().unwrap_or_else(|p| p.into_inner());
        let wanted = |r: &InboxRecord| session_id.is_none_or(|s| r.session_id == s);
        let records: Vec<InboxRecord> = inbox.iter().filter(|r| wanted(r)).cloned().collect();
        if drain {
            inbox.retain(|r| !wanted(r));
        }
        records
    }

    /// Stops every sweeper (each after its current sweep) and the event feed.
    pub async fn shutdown(&self) {
        for sweeper in &self.sweepers {
            sweeper.stop().await;
        }
        self.feeder.abort();
    }

    fn find(&self, agent_id: &str) -> Option<&Arc<Sweeper>> {
        self.sweepers.iter().find(|s| s.sweep.agent_id() == agent_id)
    }
}

impl Drop for Sweepers {
    fn drop(&mut self) {
        self.feeder.abort();
        for sweeper in &self.sweepers {
            if let Some((_, handle)) = sweeper.running.lock().unwrap_or_else(|p| p.into_inner()).take() {
                handle.abort();
            }
        }
    }
}

/// Marks the sessions each event touches as changed, in every sweeper.
async fn feed(mut events: broadcast::Receiver<crate::events::Event>, sweepers: Vec<Arc<Sweeper>>) {
    loop {
        match events.recv().await {
            Ok(event) => {
                if let EventKind::VersionCreated { session_id, .. } | EventKind::SessionCreated { session_id } =
                    &event.kind
                {
                    for sweeper in &sweepers {
                        sweeper.lock().dirty.insert(session_id.clone());
                    }
                }
            }
            // Changes were missed: only a look at everything is sure to see them.
            Err(broadcast::error::RecvError::Lagged(_)) => {
                for sweeper in &sweepers {
                    sweeper.lock().all = true;
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

impl Sweeper {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key of its stored "should run" setting.
    fn setting(&self) -> String {
        format!("sweeper.{}", self.sweep.agent_id())
    }

    fn status(&self) -> SweeperStatus {
        let running =
            self.running.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|(_, h)| !h.is_finished());
        let state = self.lock();
        SweeperStatus {
            agent_id: self.sweep.agent_id(),
            task_type: self.sweep.task_type(),
            running,
            interval: self.interval,
            last_run_at_ms: state.last_run_at_ms,
            last_run_duration: state.last_run_duration,
            last_result_count: state.last_result_count,
            last_sessions_checked: state.last_sessions_checked,
            last_error: state.last_error.clone(),
            last_error_session_id: state.last_error_session_id.clone(),
            sweeps: state.sweeps,
        }
    }

    fn start(self: &Arc<Self>, runtime: &Arc<Runtime>, sweep_first: bool) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.as_ref().is_some_and(|(_, handle)| !handle.is_finished()) {
            return;
        }
        let (stop, stopped) = watch::channel(false);
        let handle = tokio::spawn(self.clone().run(runtime.clone(), stopped, sweep_first));
        *running = Some((stop, handle));
    }

    async fn stop(&self) {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((stop, handle)) = running {
            let _ = stop.send(true);
            let _ = handle.await;
        }
    }

    async fn run(self: Arc<Self>, runtime: Arc<Runtime>, mut stopped: watch::Receiver<bool>, mut sweep_now: bool) {
        loop {
            if sweep_now {
                // A failed sweep is in the status; the next one tries again.
                let _ = self.sweep_once(&runtime).await;
            }
            sweep_now = true;
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = stopped.changed() => return,
            }
            // A stop_agent in another process sharing the store stops this one too.
            if let Ok(Some(wanted)) = runtime.store().load_setting(&self.setting()).await
                && wanted == STOPPED
            {
                return;
            }
        }
    }

    fn keep(&self, session_id: &str, payload: &Value, now: OffsetDateTime) {
        let mut inbox = self.inbox.lock().unwrap_or_else(|p| p.into_inner());
        if inbox.len() == INBOX_CAPACITY {
            inbox.pop_front();
        }
        inbox.push_back(InboxRecord {
            record_id: uuid::Uuid::new_v4().to_string(),
            detected_at: now.unix_timestamp_nanos() as f64 / 1e9,
            session_id: session_id.to_owned(),
            payload: payload.clone(),
        });
    }

    /// Looks at the sessions due and queues what it finds. On a failure the sessions not yet
    /// looked at stay due, so nothing is skipped.
    async fn sweep_once(&self, runtime: &Runtime) -> Result<(), RuntimeError> {
        let _one_at_a_time = self.sweeping.lock().await;
        let started = Instant::now();
        let now = OffsetDateTime::now_utc();
        let (all, mut due) = self.lock().take_due(millis(now));
        let outcome = match self.sweep.over_graphs() {
            None => self.sweep_sessions(runtime, all, &mut due, now).await,
            Some(reads) => self.sweep_graphs(runtime, all, &mut due, reads, now).await,
        };
        let mut state = self.lock();
        state.last_run_at_ms = Some(millis(now));
        state.last_run_duration = Some(started.elapsed());
        state.sweeps += 1;
        match outcome {
            Ok(swept) => {
                state.last_result_count = Some(swept.findings);
                state.last_sessions_checked = Some(swept.sessions);
                state.last_error = swept.skipped;
                state.last_error_session_id = swept.skipped_session;
                Ok(())
            }
            Err(e) => {
                state.all |= all;
                state.dirty.extend(due);
                state.last_error = Some(e.to_string());
                state.last_error_session_id = None;
                Err(e)
            }
        }
    }

    /// Checks `due` (every session when `all`), removing each session from `due` once it is
    /// done; says how many sessions were looked at and what they held.
    async fn sweep_sessions(
        &self,
        runtime: &Runtime,
        all: bool,
        due: &mut BTreeSet<String>,
        now: OffsetDateTime,
    ) -> Result<Swept, RuntimeError> {
        if all {
            due.extend(runtime.list_sessions().await?.into_iter().map(|s| s.session_id));
        }
        let agent_id = self.sweep.agent_id();
        let embeddings = if self.sweep.reads_vectors() { runtime.embeddings().cloned() } else { None };
        if let Some(embeddings) = &embeddings
            && let Err(e) = embeddings.load().await
        {
            tracing::warn!(agent_id, error = %e, "stored embeddings not read");
        }
        let mut swept = Swept::default();
        while let Some(session_id) = due.first().cloned() {
            let read = runtime
                .read(&session_id, |structure, info| {
                    if let Some(embeddings) = &embeddings {
                        embeddings.settle(structure, |_, _| ());
                    }
                    self.sweep.check(structure, info, now)
                })
                .await;
            let check = match read {
                Ok(check) => check,
                // Gone since it was listed (or never stored): nothing to look at.
                Err(RuntimeError::SessionNotFound(_)) => {
                    due.remove(&session_id);
                    continue;
                }
                // The store is away: stop here, and look at what is left next time.
                Err(e @ RuntimeError::Store(_)) => return Err(e),
                // One session that cannot be read (its stored history is damaged) must not keep
                // the others from being looked at; it is looked at again when it changes.
                Err(e) => {
                    tracing::warn!(agent_id, session_id, error = %e, "a sweep skipped a session it could not read");
                    swept.skipped = Some(format!("session '{session_id}' skipped: {e}"));
                    swept.skipped_session = Some(session_id.clone());
                    due.remove(&session_id);
                    continue;
                }
            };
            self.queue(runtime, &session_id, &session_id, &check, now).await?;
            swept.sessions += 1;
            swept.findings += check.findings.len() as u64;
            self.lock().schedule(&session_id, check.recheck_at.map(millis));
            due.remove(&session_id);
        }
        Ok(swept)
    }

    /// Queues a check's findings on `session_id`, each once while unresolved (named within
    /// `subject`: the session, or the graph).
    async fn queue(
        &self,
        runtime: &Runtime,
        subject: &str,
        session_id: &str,
        check: &Check,
        now: OffsetDateTime,
    ) -> Result<(), RuntimeError> {
        let (agent_id, task_type) = (self.sweep.agent_id(), self.sweep.task_type());
        for finding in &check.findings {
            let key = format!("{agent_id}:{subject}:{}", finding.key);
            let queued = runtime.tasks().enqueue(task_type, session_id, &finding.payload, Some(key)).await?;
            if queued.is_some() && self.sweep.keeps_inbox() {
                self.keep(session_id, &finding.payload, now);
                // The reference's event for a reasoning conflict found anew.
                let version_id = runtime.info(session_id).await.ok().and_then(|i| i.latest_version_id);
                let diagnostics = finding.payload.get("diagnostics").and_then(Value::as_array).cloned();
                runtime.emit(EventKind::InferenceConflictDetected {
                    session_id: session_id.to_owned(),
                    version_id: version_id.unwrap_or_default(),
                    diagnostics: diagnostics.unwrap_or_default(),
                });
            }
        }
        Ok(())
    }

    /// Looks at the registered graphs that are due: every one when `all` or when the sweep checks
    /// component versions (a release changes nothing here), else those whose entry or recorded
    /// version check changed, whose name is in `due` (due again by time) or, for a sweep that
    /// reads the graphs, whose session is (changed).
    async fn sweep_graphs(
        &self,
        runtime: &Runtime,
        all: bool,
        due: &mut BTreeSet<String>,
        reads: graphs::GraphReads,
        now: OffsetDateTime,
    ) -> Result<Swept, RuntimeError> {
        let mut swept = Swept::default();
        if reads.versions && self.versions.is_none() {
            swept.skipped = Some("no version source: this process cannot read the versions components publish".into());
            due.clear();
            return Ok(swept);
        }
        // Every entry, private and team graphs too: a sweep is the operator's, not a listing.
        let entries = runtime.all_graphs().await?;
        let mut recorded = if reads.health { runtime.all_recorded_versions().await? } else { HashMap::new() };
        let mut dead_letters: Option<HashMap<String, usize>> = None;
        for entry in &entries {
            let record = recorded.remove(&entry.name);
            let seen_as = match &record {
                Some(record) => format!("{} {}", entry.updated_at, record.checked_at),
                None => entry.updated_at.clone(),
            };
            let seen = self.lock().graphs_seen.get(&entry.name) == Some(&seen_as);
            let session_changed = reads.health && due.contains(&entry.session_id);
            if !(all || reads.versions || !seen || session_changed || due.contains(&entry.name)) {
                continue;
            }
            let health = if reads.health {
                let measured =
                    runtime.read(&entry.session_id, |s, _| GraphContent::measure(s, now, record.as_ref())).await;
                let content = match measured {
                    Ok(content) => content,
                    Err(e @ RuntimeError::Store(_)) => return Err(e),
                    // A graph whose session is gone or closed has no health to report.
                    Err(_) => continue,
                };
                if dead_letters.is_none() {
                    dead_letters = Some(count_dead_letters(runtime).await?);
                }
                let dead = dead_letters.as_ref().and_then(|d| d.get(&entry.session_id)).copied().unwrap_or(0);
                Some(GraphHealth { content, fresh: is_fresh(&entry.updated_at, now), dead_letters: dead })
            } else {
                None
            };
            let checked = match &self.versions {
                Some(source) if reads.versions => match runtime.check_component_versions(entry, source.as_ref()).await?
                {
                    Some(checked) => Some(checked),
                    // A graph whose session is gone or closed has no components to check.
                    None => continue,
                },
                _ => None,
            };
            let read = graphs::Read { health: health.as_ref(), versions: checked.as_ref() };
            let check = self.sweep.check_graph(entry, &read, now);
            self.queue(runtime, &entry.name, &entry.session_id, &check, now).await?;
            swept.sessions += 1;
            swept.findings += check.findings.len() as u64;
            let mut state = self.lock();
            state.graphs_seen.insert(entry.name.clone(), seen_as);
            state.schedule(&entry.name, check.recheck_at.map(millis));
        }
        due.clear();
        Ok(swept)
    }
}

#[cfg(test)]
mod tests;

/// Dead-lettered tasks per session.
async fn count_dead_letters(runtime: &Runtime) -> Result<HashMap<String, usize>, RuntimeError> {
    let dead = TaskFilter { status: Some(TaskStatus::Dead), ..TaskFilter::default() };
    let mut counts = HashMap::new();
    for task in runtime.tasks().list(&dead).await? {
        *counts.entry(task.session_id).or_insert(0) += 1;
    }
    Ok(counts)
}
