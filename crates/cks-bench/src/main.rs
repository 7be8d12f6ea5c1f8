//! `cks-bench`: the end-to-end benchmark client of cks-mcp.
//!
//! Starts an MCP server command over stdio, as a real client would, each time on a fresh
//! temporary data directory (`CKS_MCP_DATA_DIR` and `CKS_MCP_DB_PATH` point into it), and measures
//! these: cold start, `query_subgraph` latency and throughput, an `ai_chat` turn
//! against a scripted local provider, and graph-scale operations at 1k / 10k / 50k objects. Writes
//! one JSON line per measurement and a Markdown table; `--compare` prints ours against the
//! reference with ratios and the goals. `--locomo PATH` and `--beir DIR` run, instead, the
//! retrieval groups (either or both): how well `search_semantic` finds the turns of a LoCoMo
//! conversation that answer a question, and the judged documents of a BEIR data set's queries.

mod client;
mod host;
mod postgres;
mod replicas;
mod report;
mod scenarios;
mod soak;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use crate::client::ServerCommand;
use crate::report::{RESULTS, Recorder, compare_table, markdown_table, read_jsonl, replace_between_markers};
use crate::scenarios::{BeirPlan, Bench, LocomoPlan, MODES, MatchingPlan, Plan};

/// The BEIR group's modes when --modes is not given.
const BEIR_MODES: [&str; 3] = ["lexical", "hybrid", "vector"];

#[derive(Debug, Parser)]
#[command(
    name = "cks-bench",
    version,
    about = "End-to-end benchmark of an MCP server command (cks-mcp or the Python reference)."
)]
struct Cli {
    /// The server command line (split like a shell would, without any other shell syntax).
    /// Default: the `cks-mcp` next to this executable.
    #[arg(long)]
    server: Option<String>,
    /// The server's name in the records [ours, or the command's file name].
    #[arg(long)]
    name: Option<String>,
    /// Write the JSON lines here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the Markdown table here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Tiny sizes that finish in seconds (3 starts, 20 queries, 50 objects, 5 commits).
    #[arg(long)]
    smoke: bool,
    /// Graph sizes in objects, comma-separated [1000,10000,50000].
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<u64>>,
    /// Timed cold starts [10].
    #[arg(long)]
    starts: Option<usize>,
    /// Sequential query_subgraph calls on the small session [2000].
    #[arg(long)]
    queries: Option<usize>,
    /// Timed ai_chat turns [100].
    #[arg(long)]
    ai_turns: Option<usize>,
    /// One-object commits per size, before list_versions and compare_versions [30].
    #[arg(long)]
    commits: Option<usize>,
    /// query_subgraph depth-2 calls per size, and list_versions calls [50].
    #[arg(long)]
    scale_queries: Option<usize>,
    /// Groups to run, comma-separated: cold, query, ai_chat, ai_chat_concurrent, scale, reload [all;
    /// --smoke: all but ai_chat_concurrent].
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// CKS_LLM_PROVIDER for the ai_chat measurement: anthropic (ANTHROPIC_BASE_URL) or
    /// openai_compatible (CKS_OPENAI_BASE_URL), both pointed at the local scripted server.
    #[arg(long, default_value = "anthropic", value_parser = ["anthropic", "openai_compatible"])]
    ai_provider: String,
    /// Per-call timeout; a call that takes longer is recorded as "timeout".
    #[arg(long, default_value_t = 120)]
    call_timeout_secs: u64,
    /// Timeout of the `validate_knowledge` call that creates a session from a whole graph (the
    /// scale group's largest sizes) [the per-call timeout].
    #[arg(long)]
    create_timeout_secs: Option<u64>,
    /// Time budget of one repeated measurement (commits, depth-2 queries, the repeats of serialize
    /// / list_versions / compare_versions, session creation for the reload group): once spent, the
    /// loop stops after at least 3 samples, and the record's note says how many were taken.
    #[arg(long, default_value_t = 120)]
    measurement_budget_secs: u64,
    /// Send requests longer than this many bytes with LSP-style `Content-Length:` framing instead
    /// of as one line (the reference's stdio reader dies on a line over 64 KiB; our server reads
    /// lines only).
    #[arg(long, value_name = "BYTES")]
    content_length_over: Option<usize>,
    /// The servers' data directories go here, kept after the run (default: a temporary
    /// directory, removed). A second run with the same directory finds the first run's stores in
    /// the same order: the retrieval groups then embed nothing the last run embedded.
    #[arg(long, value_name = "DIR")]
    work: Option<PathBuf>,
    /// Stored-session counts for the reload group, comma-separated [1,100,1000].
    #[arg(long, value_delimiter = ',')]
    session_counts: Option<Vec<u64>>,
    /// Objects in each of the reload group's sessions [the small session's size, 100].
    #[arg(long)]
    reload_objects: Option<u64>,
    /// Keep the scratch directory (data directories, server stderr) and print its path.
    #[arg(long)]
    keep_work: bool,
    /// Instead of the benchmark: the soak run, this many minutes of mixed load on one server
    /// started with `--http` (our server only), sampling RSS and open descriptors; prints a
    /// Markdown report and fails when the goals are missed (no unexpected error, both flat within
    /// 10 % after the warm-up).
    #[arg(long, value_name = "MINUTES")]
    soak_minutes: Option<f64>,
    /// Instead of the benchmark: the LoCoMo retrieval group on this file (a JSON list of
    /// conversations with their questions, read in place): per conversation a fresh server and
    /// one session of its turns, then every question of categories 1–4 through `search_semantic`;
    /// prints recall@1/5/10 and hit@1/5/10 per mode and category. The server inherits this
    /// process's environment (CKS_EMBEDDING_PROVIDER, CKS_EMBEDDING_MODEL, XDG_CACHE_HOME).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["soak_minutes", "replicas", "compare"])]
    locomo: Option<PathBuf>,
    /// With --locomo or --beir: the `search_semantic` modes to ask in, comma-separated [--locomo:
    /// hybrid,lexical; --beir: lexical,hybrid,vector; both: lexical,hybrid,vector].
    #[arg(long, visible_alias = "locomo-modes", value_delimiter = ',', value_parser = MODES, value_name = "MODES")]
    modes: Option<Vec<String>>,
    /// With --locomo: the conversations to run, as indexes into the file, comma-separated [all].
    #[arg(long, value_delimiter = ',', requires = "locomo", value_name = "INDEXES")]
    locomo_conversations: Option<Vec<usize>>,
    /// Instead of the benchmark (beside --locomo when both are given): the BEIR retrieval group on
    /// this data set directory (`corpus.jsonl`, `queries.jsonl`, `qrels_test.tsv` or
    /// `qrels/test.tsv`, read in place); repeat the flag or separate directories with commas to run
    /// several. Per data set a fresh server and one session of its documents, then every judged
    /// query through `search_semantic`; prints nDCG@10, recall@10, hit@10 and MRR@10 per mode, the
    /// query's own document dropped as BEIR does. The server inherits this process's environment,
    /// as with --locomo.
    #[arg(long, value_name = "DIR", value_delimiter = ',', conflicts_with_all = ["soak_minutes", "replicas", "compare"])]
    beir: Vec<PathBuf>,
    /// Instead of the benchmark: the entity-matching group on this directory (`tableA.csv`,
    /// `tableB.csv`, `test.csv` in the DeepMatcher layout, read in place); repeat the flag or
    /// separate directories with commas to run several. Both tables one session, each left record
    /// of a labelled pair asked through `find_duplicates`; prints precision, recall and F1 of the
    /// match class.
    #[arg(long, value_name = "DIR", value_delimiter = ',', conflicts_with_all = ["soak_minutes", "replicas", "compare", "locomo", "beir"])]
    er: Vec<PathBuf>,
    /// With --beir: only the first N judged queries of each data set [all].
    #[arg(long, value_name = "N", requires = "beir")]
    beir_queries: Option<usize>,
    /// Store into PostgreSQL instead of SQLite: a fresh database per measurement on the server
    /// this admin URL names, or, given no URL, on a throw-away server started here (our server
    /// only).
    #[arg(long, value_name = "ADMIN_URL", num_args = 0..=1, default_missing_value = "")]
    postgres: Option<String>,
    /// Instead of the benchmark: the replicas run on PostgreSQL (implies --postgres), with these
    /// replica counts, comma-separated [1,2,4].
    #[arg(long, value_delimiter = ',', num_args = 0.., value_name = "COUNTS")]
    replicas: Option<Vec<usize>>,
    /// With --replicas: writers on distinct sessions, spread evenly over the replicas [16].
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// With --replicas: seconds of writing per replica count [15].
    #[arg(long, default_value_t = 15)]
    replica_seconds: u64,
    /// Compare two JSON-lines files (ours, then the reference's) instead of running a benchmark.
    #[arg(long, num_args = 2, value_names = ["OURS", "REFERENCE"])]
    compare: Option<Vec<PathBuf>>,
    /// With --compare: replace the results section of this Markdown file (between the
    /// `cks-bench:results` markers) with the comparison.
    #[arg(long, requires = "compare")]
    update_markdown: Option<PathBuf>,
    /// With --update-markdown: the name of the markers to replace between,
    /// `<!-- cks-bench:NAME:start -->` and `<!-- cks-bench:NAME:end -->` [results].
    #[arg(long, requires = "update_markdown", default_value = RESULTS, value_name = "NAME")]
    markers: String,
    /// With --update-markdown: text put above the table (e.g. the run's date and versions).
    #[arg(long, requires = "update_markdown")]
    preamble: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(files) = &cli.compare {
        return compare(&cli, &files[0], &files[1]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(run(cli))
}

fn compare(cli: &Cli, ours: &Path, reference: &Path) -> anyhow::Result<()> {
    let ours = read_jsonl(ours)?;
    let reference = if reference.exists() { read_jsonl(reference)? } else { Vec::new() };
    let table = compare_table(&ours, &reference);
    println!("{table}");
    if let Some(path) = &cli.update_markdown {
        let document = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let body = match &cli.preamble {
            Some(preamble) => format!("{}\n\n{table}", preamble.trim_end()),
            None => table,
        };
        std::fs::write(path, replace_between_markers(&document, &cli.markers, &body)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("updated {}", path.display());
    }
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut plan = if cli.smoke { Plan::smoke() } else { Plan::full() };
    if let Some(v) = cli.sizes.clone() {
        plan.sizes = v;
    }
    if let Some(v) = cli.starts {
        plan.starts = v;
    }
    if let Some(v) = cli.queries {
        plan.queries = v;
    }
    if let Some(v) = cli.ai_turns {
        plan.ai_turns = v;
    }
    if let Some(v) = cli.commits {
        plan.commits = v;
    }
    if let Some(v) = cli.scale_queries {
        plan.scale_queries = v;
    }
    if let Some(v) = cli.only.clone() {
        plan.groups = v;
    }
    plan.reload_objects = cli.reload_objects;
    if let Some(v) = cli.session_counts.clone() {
        plan.session_counts = v;
    }
    plan.measurement_budget = Duration::from_secs(cli.measurement_budget_secs.max(1));
    plan.ai_provider = cli.ai_provider.clone();
    plan.call_timeout = Duration::from_secs(cli.call_timeout_secs.max(1));
    plan.create_timeout = cli.create_timeout_secs.map(|secs| Duration::from_secs(secs.max(1)));

    let mut command = match &cli.server {
        Some(line) => ServerCommand::parse(line)?,
        None => {
            let exe = std::env::current_exe()?;
            let sibling = exe.with_file_name(format!("cks-mcp{}", std::env::consts::EXE_SUFFIX));
            anyhow::ensure!(sibling.exists(), "no --server given and no cks-mcp beside {}", exe.display());
            ServerCommand {
                program: sibling.display().to_string(),
                args: Vec::new(),
                env: Default::default(),
                content_length_over: None,
            }
        }
    };
    command.content_length_over = cli.content_length_over;
    let name = cli.name.clone().unwrap_or_else(|| {
        if cli.server.is_none() {
            "ours".into()
        } else {
            PathBuf::from(&command.program).file_name().map_or("server".into(), |n| n.to_string_lossy().into_owned())
        }
    });
    if let Some(minutes) = cli.soak_minutes {
        let work = tempfile::Builder::new().prefix("cks-soak-").tempdir()?;
        let report = soak::soak(&command, &soak::SoakPlan::minutes(minutes), work.path()).await?;
        let markdown = report.markdown(minutes);
        println!("{markdown}");
        if let Some(path) = &cli.markdown {
            std::fs::write(path, &markdown).with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &cli.out {
            std::fs::write(path, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        anyhow::ensure!(report.passed(), "the soak run missed its goals (see the report above)");
        return Ok(());
    }
    let out: Box<dyn Write + Send> = match &cli.out {
        Some(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            Box::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?)
        }
        None => Box::new(std::io::stdout()),
    };
    let temporary = tempfile::Builder::new().prefix("cks-bench-").tempdir()?;
    let work = match &cli.work {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.clone()
        }
        None => temporary.path().to_owned(),
    };
    let mut recorder = Recorder::new(name, out);
    let postgres = (cli.postgres.is_some() || cli.replicas.is_some())
        .then(|| postgres::Postgres::new(cli.postgres.as_deref().filter(|url| !url.is_empty())));
    if let Some(counts) = &cli.replicas {
        let plan = replicas::ReplicaPlan {
            replica_counts: if counts.is_empty() { vec![1, 2, 4] } else { counts.clone() },
            writers: cli.writers.max(1),
            duration: Duration::from_secs(cli.replica_seconds.max(1)),
            probe_interval: Duration::from_millis(20),
        };
        eprintln!("cks-bench: replicas on PostgreSQL ({plan:?})");
        let postgres = postgres.as_ref().expect("--replicas runs on PostgreSQL");
        replicas::run(&command, postgres, &plan, &work, &mut recorder).await?;
    } else if !cli.er.is_empty() {
        let server = recorder.server.clone();
        eprintln!("cks-bench: entity matching, {server} on {} ({:?})", command.program, cli.er);
        let mut bench = Bench::new(command.clone(), plan, work.clone(), &mut recorder);
        let table = bench.matching(&MatchingPlan { dirs: cli.er.clone() }).await?;
        println!("\n{table}");
        if let Some(path) = &cli.markdown {
            std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(());
    } else if cli.locomo.is_some() || !cli.beir.is_empty() {
        let modes = |default: &[&str]| -> Vec<String> {
            let mut modes: Vec<String> = Vec::new();
            let asked = cli.modes.clone().unwrap_or_else(|| default.iter().map(|m| (*m).to_owned()).collect());
            for mode in asked {
                if !modes.contains(&mode) {
                    modes.push(mode);
                }
            }
            modes
        };
        // Without --modes each group asks its own default, or, run together, the same modes.
        let locomo_default: &[&str] = if cli.beir.is_empty() { &["hybrid", "lexical"] } else { &BEIR_MODES };
        let locomo = cli.locomo.as_ref().map(|path| LocomoPlan {
            path: path.clone(),
            modes: modes(locomo_default),
            conversations: cli.locomo_conversations.clone(),
        });
        let beir = (!cli.beir.is_empty()).then(|| BeirPlan {
            dirs: cli.beir.clone(),
            modes: modes(&BEIR_MODES),
            queries: cli.beir_queries,
        });
        let server = recorder.server.clone();
        let mut bench = Bench::new(command.clone(), plan, work.clone(), &mut recorder);
        bench.postgres = postgres;
        let mut tables = Vec::new();
        if let Some(locomo) = &locomo {
            eprintln!("cks-bench: LoCoMo retrieval, {server} on {} ({locomo:?})", command.program);
            tables.push(bench.locomo(locomo).await?);
        }
        if let Some(beir) = &beir {
            eprintln!("cks-bench: BEIR retrieval, {server} on {} ({beir:?})", command.program);
            tables.push(bench.beir(beir).await?);
        }
        let tables = tables.join("\n");
        println!("\n{tables}");
        if let Some(path) = &cli.markdown {
            std::fs::write(path, &tables).with_context(|| format!("writing {}", path.display()))?;
        }
        if cli.keep_work {
            let kept = temporary.keep();
            eprintln!("scratch directory kept: {}", kept.display());
        }
        return Ok(());
    } else {
        eprintln!("cks-bench: {} on {} ({:?})", recorder.server, command.program, plan);
        let mut bench = Bench::new(command, plan, work.clone(), &mut recorder);
        bench.postgres = postgres;
        bench.run_all().await?;
    }
    let table = markdown_table(&recorder.records);
    if let Some(path) = &cli.markdown {
        std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("\n{table}");
    if cli.keep_work {
        let kept = temporary.keep();
        eprintln!("scratch directory kept: {}", kept.display());
    }
    Ok(())
}
