//! `cks-mcp worker`: the autonomous workers (Critic, pipeline, Enrichment) on the configured store
//! with no client transport, so a deployment scales its workers apart from the servers that answer
//! clients. On PostgreSQL any number of worker processes and servers share one task queue; each
//! task is claimed by one of them at a time (`cks_workers`).
//!
//! It runs until SIGTERM or Ctrl-C, then lets each worker finish the task in hand for at most the
//! shutdown timeout (`CKS_EMBEDDED_AGENTS_SHUTDOWN_TIMEOUT`); a task still unfinished then is
//! claimed again once its lease ends.

use anyhow::Context as _;

use cks_workers::{Processes, ProcessesConfig};

use crate::config::Config;

/// Arguments of `cks-mcp worker`. With none of the flags, every worker runs.
#[derive(Debug, Default, clap::Args)]
pub struct WorkerArgs {
    /// Run the Critic: it settles queued conflicts (`CKS_CRITIC_*` tune it).
    #[arg(long)]
    pub critic: bool,
    /// Run the pipeline: Researcher, Reviewer, Synthesizer and Arbiter (`CKS_PIPELINE_*`).
    #[arg(long)]
    pub pipeline: bool,
    /// Run Enrichment: it adds what searched sources say about an object (`CKS_ENRICHMENT_*`).
    #[arg(long)]
    pub enrichment: bool,
}

impl WorkerArgs {
    /// The configured processes, with the ones named on the command line turned on (all of them
    /// when none is named) and the others off, whatever `CKS_EMBED_*` says: those variables choose
    /// what a serving process runs beside its clients.
    pub fn processes(&self, configured: &ProcessesConfig) -> ProcessesConfig {
        let all = !(self.critic || self.pipeline || self.enrichment);
        let mut processes = configured.clone();
        processes.critic = all || self.critic;
        processes.pipeline.enabled = all || self.pipeline;
        processes.enrichment.enabled = all || self.enrichment;
        processes
    }

    /// The workers that run, by the names their liveness records carry.
    fn names(processes: &ProcessesConfig) -> Vec<&'static str> {
        [
            (processes.critic, "critic"),
            (processes.pipeline.enabled, "pipeline"),
            (processes.enrichment.enabled, "enrichment"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// Runs the chosen workers until told to stop.
pub async fn run(args: &WorkerArgs, config: &Config) -> anyhow::Result<()> {
    let server = crate::open_server(config).await?;
    let processes_config = args.processes(&config.processes);
    let processes = Processes::start(server.context(), &processes_config);
    eprintln!("cks-mcp worker: running {}", WorkerArgs::names(&processes_config).join(", "));
    stop_signal().await?;
    eprintln!(
        "cks-mcp worker: stopping; the tasks in hand get at most {} s to finish",
        processes_config.shutdown_timeout.as_secs_f64()
    );
    processes.shutdown().await;
    eprintln!("cks-mcp worker: stopped");
    Ok(())
}

/// Waits for SIGTERM (how service managers and container runtimes stop a process) or Ctrl-C.
async fn stop_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        tokio::select! {
            _ = terminate.recv() => Ok(()),
            interrupted = tokio::signal::ctrl_c() => interrupted.context("listening for Ctrl-C"),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.context("listening for Ctrl-C")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_choose_the_workers_and_none_means_all() {
        let configured = ProcessesConfig::default();
        let all = WorkerArgs::default().processes(&configured);
        assert_eq!(WorkerArgs::names(&all), ["critic", "pipeline", "enrichment"]);
        let critic = WorkerArgs { critic: true, ..WorkerArgs::default() }.processes(&configured);
        assert_eq!(WorkerArgs::names(&critic), ["critic"]);
        let mut embedded = ProcessesConfig { critic: true, ..configured };
        embedded.pipeline.poll_interval = std::time::Duration::from_secs(7);
        let two = WorkerArgs { pipeline: true, enrichment: true, ..WorkerArgs::default() }.processes(&embedded);
        assert_eq!(WorkerArgs::names(&two), ["pipeline", "enrichment"], "CKS_EMBED_* does not choose here");
        assert_eq!(two.pipeline.poll_interval, std::time::Duration::from_secs(7), "the rest is as configured");
    }
}
