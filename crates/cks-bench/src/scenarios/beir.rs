//! The BEIR retrieval group (`--beir DIR`): how well `search_semantic` ranks the documents of a
//! BEIR data set for its test queries.
//!
//! A BEIR directory holds `corpus.jsonl` (`{"_id", "title", "text", "metadata"}` per line),
//! `queries.jsonl` (`{"_id", "text", "metadata"}`) and the test judgements, `qrels_test.tsv` or
//! `qrels/test.tsv` (`query-id`, `corpus-id`, `score`, tab-separated, after a header line). Each
//! data set gets a server of its own (fresh data directory, the environment passed through, as in
//! the LoCoMo group) and one session made by one `validate_knowledge` call: one `Document` object
//! per document, its id the document's `_id`, its name the title (the id when the title is
//! empty), its structure `text` and, when not empty, `title`. Object ids are any non-empty string
//! in this server, so BEIR's ids (`test-environment-aeghhgwpe-pro02a`, `4983`) are used as they
//! are, with no mapping; a number id is read as its decimal text. When a mode needs embeddings, the
//! group first waits until every document is embedded (`retrieval::await_embeddings`); otherwise
//! one lexical search, untimed, builds the session's text index.
//!
//! Then every judged query, in the file's order (the first `--beir-queries` of them), is asked
//! with `search_semantic` (`top_k` [`TOP_K`], `depth` 0) in each mode and scored at [`CUTOFF`]
//! ([`score`]) as BEIR scores it: the document whose id is the query's is dropped first
//! (`ignore_identical_ids`: in ArguAna most queries are documents of the corpus too), hence one
//! more asked for than scored; nDCG, recall, hit and reciprocal rank from the graded judgements,
//! as trec_eval computes them. Judged documents missing from the corpus stay in the ideal ranking,
//! so such queries can never score fully, as in the published numbers. A `not_found` answer is an
//! empty ranking.
//!
//! The data is read by path and never copied; the tests use hand-made inputs only.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::retrieval::{await_embeddings, joined, search, write_notes};
use super::{Bench, GRACE, ms};
use crate::client::McpClient;
use crate::report::{fmt_number, quantile};

/// The rank cut-off of every score.
pub(crate) const CUTOFF: usize = 10;
/// `top_k` of every search: the cut-off and one more, for the query's own document.
const TOP_K: usize = CUTOFF + 1;

/// What the group runs: the data sets, the modes, and how many of each set's queries.
#[derive(Debug, Clone)]
pub(crate) struct BeirPlan {
    /// BEIR directories, run one after the other.
    pub(crate) dirs: Vec<PathBuf>,
    /// `search_semantic` modes, in the order asked (`retrieval::MODES`).
    pub(crate) modes: Vec<String>,
    /// Only the first this many judged queries of each set; `None`: all of them.
    pub(crate) queries: Option<usize>,
}

/// The judgements of one query: graded relevance by document id.
type Judged = BTreeMap<String, i64>;

/// One query's scores at [`CUTOFF`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct QueryScore {
    pub(crate) ndcg: f64,
    /// Relevant documents (grade > 0) among the first [`CUTOFF`] / all relevant ones judged.
    pub(crate) recall: f64,
    /// At least one relevant document among the first [`CUTOFF`].
    pub(crate) hit: bool,
    /// 1 / the rank of the first relevant document; 0 when none is among the first [`CUTOFF`].
    pub(crate) reciprocal_rank: f64,
}

/// The ranking scored: the seeds (best first) without the query's own id (BEIR's
/// `ignore_identical_ids`), each id once, the first [`CUTOFF`].
pub(crate) fn ranking<'a>(query_id: &str, seeds: &'a [String]) -> Vec<&'a str> {
    let mut seen = HashSet::new();
    seeds.iter().map(String::as_str).filter(|id| *id != query_id && seen.insert(*id)).take(CUTOFF).collect()
}

/// `gain / log2(rank + 1)` summed over ranks 1, 2, …: the discounted cumulative gain.
fn dcg(gains: impl IntoIterator<Item = f64>) -> f64 {
    gains.into_iter().enumerate().map(|(i, gain)| gain / ((i + 2) as f64).log2()).sum()
}

/// Scores the seeds a search returned (best first) for the query `query_id` against its
/// judgements, as BEIR does through trec_eval (`ndcg_cut.10`, `recall_10`): the query's own
/// document dropped first ([`ranking`]); a document's gain is its grade (trec_eval's gain is the
/// grade itself, not `2^grade - 1`: the same for the 0/1 grades of most BEIR sets), grades ≤ 0 and
/// unjudged documents gain nothing; the ideal ranking is every judged document by grade, found or
/// not, so a judged document missing from the corpus lowers the query's nDCG and recall for good.
/// A query with no positive judgement scores 0.
pub(crate) fn score(judged: &Judged, query_id: &str, seeds: &[String]) -> QueryScore {
    let grade = |id: &str| judged.get(id).copied().unwrap_or(0).max(0);
    let ranked = ranking(query_id, seeds);
    let mut ideal: Vec<i64> = judged.values().copied().filter(|g| *g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let relevant = ideal.len();
    let ideal = dcg(ideal.into_iter().take(CUTOFF).map(|g| g as f64));
    let found = ranked.iter().filter(|id| grade(id) > 0).count();
    let first = ranked.iter().position(|id| grade(id) > 0);
    QueryScore {
        ndcg: if ideal > 0.0 { dcg(ranked.iter().map(|id| grade(id) as f64)) / ideal } else { 0.0 },
        recall: if relevant > 0 { found as f64 / relevant as f64 } else { 0.0 },
        hit: first.is_some(),
        reciprocal_rank: first.map_or(0.0, |rank| 1.0 / (rank + 1) as f64),
    }
}

/// The scores of one mode's queries.
#[derive(Debug, Clone, Default)]
struct Tally {
    queries: usize,
    ndcg: f64,
    recall: f64,
    hits: usize,
    reciprocal_rank: f64,
    latencies_ms: Vec<f64>,
}

impl Tally {
    fn add(&mut self, score: &QueryScore, latency_ms: f64) {
        self.queries += 1;
        self.ndcg += score.ndcg;
        self.recall += score.recall;
        self.hits += usize::from(score.hit);
        self.reciprocal_rank += score.reciprocal_rank;
        self.latencies_ms.push(latency_ms);
    }

    fn mean(&self, sum: f64) -> f64 {
        sum / self.queries as f64
    }

    fn ndcg(&self) -> f64 {
        self.mean(self.ndcg)
    }

    fn recall(&self) -> f64 {
        self.mean(self.recall)
    }

    fn hit(&self) -> f64 {
        self.mean(self.hits as f64)
    }

    fn mrr(&self) -> f64 {
        self.mean(self.reciprocal_rank)
    }
}

/// What one mode saw on one data set.
#[derive(Debug, Default)]
struct ModeRun {
    mode: String,
    tally: Tally,
    /// The `ranking` values the answers carried.
    rankings: BTreeSet<String>,
    /// The `embeddings.model` values the answers carried.
    models: BTreeSet<String>,
    /// Why the mode could not run (vector search on a server without embeddings).
    unavailable: Option<String>,
    /// Queries whose own document came back among the seeds (dropped before scoring).
    self_hits: usize,
}

/// A data set as the group reads it.
#[derive(Debug)]
struct DataSet {
    /// The directory's name: `arguana`.
    name: String,
    /// One `Document` object per document, in the corpus's order.
    objects: Vec<Value>,
    /// The judged queries asked, (id, text) in the file's order.
    queries: Vec<(String, String)>,
    /// Judged queries in the file before `--beir-queries` cut them.
    judged_queries: usize,
    judged: HashMap<String, Judged>,
    /// Judged query ids with no line in `queries.jsonl` (not asked).
    unknown_queries: usize,
}

#[derive(Debug, Deserialize)]
struct CorpusLine {
    #[serde(rename = "_id")]
    id: Value,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct QueryLine {
    #[serde(rename = "_id")]
    id: Value,
    text: String,
}

/// An `_id` as text: a string as it is, a number in decimal.
fn id_text(id: &Value) -> Option<String> {
    match id {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A document as the session's object (see the module's documentation).
fn document(id: &str, title: &str, text: &str) -> Value {
    let titled = !title.trim().is_empty();
    let mut structure = Map::new();
    if titled {
        structure.insert("title".into(), json!(title));
    }
    structure.insert("text".into(), json!(text));
    json!({
        "identity": {"id": id, "type": "Document", "name": if titled { title } else { id }},
        "structure": structure,
    })
}

/// Each non-empty line of a JSON-lines file, parsed, with its line number.
fn json_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> anyhow::Result<Vec<(usize, T)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let value = serde_json::from_str(line).with_context(|| format!("{}:{}", path.display(), i + 1))?;
            Ok((i + 1, value))
        })
        .collect()
}

/// The corpus as objects; an id missing, empty or repeated is an error (the session would refuse
/// it anyway, less clearly).
fn read_corpus(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut seen = HashSet::new();
    let mut objects = Vec::new();
    for (line, doc) in json_lines::<CorpusLine>(path)? {
        let id = id_text(&doc.id).with_context(|| format!("{}:{line}: no usable _id", path.display()))?;
        anyhow::ensure!(seen.insert(id.clone()), "{}:{line}: _id {id} repeated", path.display());
        objects.push(document(&id, doc.title.as_deref().unwrap_or(""), doc.text.as_deref().unwrap_or("")));
    }
    Ok(objects)
}

/// The test judgements' file: `qrels_test.tsv`, else `qrels/test.tsv`.
fn qrels_path(dir: &Path) -> anyhow::Result<PathBuf> {
    let candidates = [dir.join("qrels_test.tsv"), dir.join("qrels").join("test.tsv")];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .with_context(|| format!("no judgements in {}: neither qrels_test.tsv nor qrels/test.tsv", dir.display()))
}

/// The judgements by query: `query-id`, `corpus-id`, `score` per line, tab-separated, CRLF or
/// LF; a first line whose score is not a number is the header.
fn parse_qrels(text: &str, origin: &str) -> anyhow::Result<HashMap<String, Judged>> {
    let mut judged: HashMap<String, Judged> = HashMap::new();
    let mut first = true;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let columns: Vec<&str> = line.split('\t').map(str::trim).collect();
        anyhow::ensure!(columns.len() >= 3, "{origin}:{}: not query-id, corpus-id and score: {line:?}", i + 1);
        let grade = columns[2]
            .parse::<i64>()
            .ok()
            .or_else(|| columns[2].parse::<f64>().ok().filter(|g| g.fract() == 0.0 && g.is_finite()).map(|g| g as i64));
        let is_first = std::mem::replace(&mut first, false);
        let Some(grade) = grade else {
            anyhow::ensure!(is_first, "{origin}:{}: score {:?} is not a whole number", i + 1, columns[2]);
            continue;
        };
        judged.entry(columns[0].to_owned()).or_default().insert(columns[1].to_owned(), grade);
    }
    Ok(judged)
}

impl DataSet {
    fn read(dir: &Path, limit: Option<usize>) -> anyhow::Result<DataSet> {
        let name = dir
            .canonicalize()
            .unwrap_or_else(|_| dir.to_path_buf())
            .file_name()
            .map_or_else(|| "beir".to_owned(), |n| n.to_string_lossy().into_owned());
        let objects = read_corpus(&dir.join("corpus.jsonl"))?;
        let qrels = qrels_path(dir)?;
        let text = std::fs::read_to_string(&qrels).with_context(|| format!("reading {}", qrels.display()))?;
        let judged = parse_qrels(&text, &qrels.display().to_string())?;
        let path = dir.join("queries.jsonl");
        let mut queries = Vec::new();
        for (line, query) in json_lines::<QueryLine>(&path)? {
            let id = id_text(&query.id).with_context(|| format!("{}:{line}: no usable _id", path.display()))?;
            if judged.contains_key(&id) {
                queries.push((id, query.text));
            }
        }
        let asked: HashSet<&str> = queries.iter().map(|(id, _)| id.as_str()).collect();
        let unknown_queries = judged.keys().filter(|id| !asked.contains(id.as_str())).count();
        let judged_queries = queries.len();
        if let Some(limit) = limit {
            queries.truncate(limit);
        }
        Ok(DataSet { name, objects, queries, judged_queries, judged, unknown_queries })
    }

    /// The name as part of a measurement's name: `beir_<name>_<mode>`.
    fn measurement(&self, mode: &str) -> String {
        let name: String =
            self.name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
        format!("beir_{name}_{mode}")
    }

    /// Of the queries asked: how many are documents of the corpus too, and how many judge a
    /// document the corpus lacks.
    fn coverage(&self) -> (usize, usize) {
        let ids: HashSet<&str> = self.objects.iter().filter_map(|o| o["identity"]["id"].as_str()).collect();
        let in_corpus = self.queries.iter().filter(|(id, _)| ids.contains(id.as_str())).count();
        let missing = self
            .queries
            .iter()
            .filter(|(id, _)| self.judged[id].iter().any(|(doc, grade)| *grade > 0 && !ids.contains(doc.as_str())))
            .count();
        (in_corpus, missing)
    }
}

impl Bench<'_> {
    /// The BEIR group: per data set, records one measurement per mode and returns the Markdown
    /// tables of the results, one per data set.
    pub(crate) async fn beir(&mut self, plan: &BeirPlan) -> anyhow::Result<String> {
        let mut tables = Vec::new();
        for dir in &plan.dirs {
            tables.push(self.beir_set(dir, plan).await?);
        }
        Ok(tables.join("\n"))
    }

    async fn beir_set(&mut self, dir: &Path, plan: &BeirPlan) -> anyhow::Result<String> {
        let read = Instant::now();
        let set = DataSet::read(dir, plan.queries).with_context(|| format!("reading {} as BEIR", dir.display()))?;
        let name = set.name.clone();
        eprintln!(
            "cks-bench: BEIR {name}: {} documents, {} of {} judged queries, read in {:.1} s",
            set.objects.len(),
            set.queries.len(),
            set.judged_queries,
            read.elapsed().as_secs_f64()
        );
        let needs_embeddings = plan.modes.iter().any(|m| m == "hybrid" || m == "vector");
        let mut runs: Vec<ModeRun> =
            plan.modes.iter().map(|m| ModeRun { mode: m.clone(), ..Default::default() }).collect();
        let mut notes: Vec<String> = Vec::new();
        let started = Instant::now();
        let mut created = None;
        match self.retrieval_session(&format!("beir-{name}"), &set.objects).await {
            Err(why) => notes.push(format!("{name}: not measured: {why}")),
            Ok((mut client, session, took)) => {
                created = Some(took);
                eprintln!("cks-bench: BEIR {name}: session created in {:.0} ms", ms(took));
                let broken = ask(&set, &mut client, &session, needs_embeddings, &mut runs, &mut notes).await;
                if broken {
                    client.kill().await;
                } else {
                    client.shutdown(GRACE).await;
                }
            }
        }
        let elapsed = started.elapsed();
        if needs_embeddings && runs.iter().any(|r| r.mode == "hybrid" && r.tally.queries > 0 && r.models.is_empty()) {
            notes.push("no embeddings: hybrid ranked by BM25 alone (ranking `bm25`)".into());
        }
        let (in_corpus, missing) = set.coverage();
        if missing > 0 {
            notes.push(format!(
                "{} a document the corpus lacks: it stays in the ideal ranking, so the query cannot score fully \
                 (as in BEIR's published numbers)",
                counted(missing, "query judges", "queries judge")
            ));
        }
        if set.unknown_queries > 0 {
            let unknown = counted(set.unknown_queries, "judged query id is", "judged query ids are");
            notes.push(format!("{unknown} not in queries.jsonl: not asked"));
        }
        for run in runs.iter().filter(|r| r.self_hits > 0) {
            notes.push(format!(
                "{}: the query's own document came back for {} of {} queries and was dropped before scoring",
                run.mode, run.self_hits, run.tally.queries
            ));
        }
        let mut context = format!(
            "{} documents, {} of {} judged queries ({in_corpus} of them documents of the corpus too), top_k {TOP_K} \
             less the query's own document, scored at {CUTOFF}, depth 0",
            set.objects.len(),
            set.queries.len(),
            set.judged_queries,
        );
        if let Some(took) = created {
            let _ = write!(context, ", session created in {} ms", fmt_number(ms(took)));
        }
        self.record_beir(&set, &runs, &context);
        Ok(beir_table(&name, &runs, &context, &notes, elapsed))
    }

    /// One record per mode: nDCG@10 as the value, the other numbers in the note.
    fn record_beir(&mut self, set: &DataSet, runs: &[ModeRun], context: &str) {
        let unit = format!("nDCG@{CUTOFF}");
        for run in runs {
            let measurement = set.measurement(&run.mode);
            if let Some(why) = &run.unavailable {
                self.rec.status(&measurement, None, &unit, why.clone());
                continue;
            }
            let tally = &run.tally;
            if tally.queries == 0 {
                self.rec.status(&measurement, None, &unit, "error: no query answered");
                continue;
            }
            let note = format!(
                "queries {}, recall@{CUTOFF} {:.4}, hit@{CUTOFF} {:.4}, MRR@{CUTOFF} {:.4}, search p50 {} ms, p95 {} ms, \
                 ranking {}, embedding model {}; BEIR {}: {context}",
                tally.queries,
                tally.recall(),
                tally.hit(),
                tally.mrr(),
                fmt_number(quantile(&tally.latencies_ms, 0.5)),
                fmt_number(quantile(&tally.latencies_ms, 0.95)),
                joined(&run.rankings),
                joined(&run.models),
                set.name,
            );
            self.rec.value(&measurement, None, &unit, tally.ndcg(), Some(note));
        }
    }
}

/// Asks every query in every mode; true when a search failed (the rest not measured).
async fn ask(
    set: &DataSet,
    client: &mut McpClient,
    session: &str,
    needs_embeddings: bool,
    runs: &mut [ModeRun],
    notes: &mut Vec<String>,
) -> bool {
    let name = &set.name;
    let mut embedded = None;
    let ready = if needs_embeddings {
        await_embeddings(client, session, &set.objects, name, notes).await.map(|has| embedded = Some(has))
    } else {
        // The first search builds the session's text index: not a query's time.
        let query = set.queries.first().map_or("hello", |(_, text)| text.as_str());
        let arguments = json!({"session_id": session, "query": query, "top_k": 1, "depth": 0, "mode": "lexical"});
        search(client, arguments).await.map(|_| ())
    };
    if let Err(e) = ready {
        notes.push(format!("{name}: not measured: the first search failed: {e}"));
        return true;
    }
    for run in runs {
        if run.mode == "vector" && embedded == Some(false) {
            run.unavailable = Some("not available: the server has no embeddings".into());
            continue;
        }
        let started = Instant::now();
        for (asked, (id, text)) in set.queries.iter().enumerate() {
            let arguments = json!({"session_id": session, "query": text, "top_k": TOP_K, "depth": 0, "mode": run.mode});
            let (answer, took) = match search(client, arguments).await {
                Ok(answered) => answered,
                Err(e) => {
                    notes.push(format!(
                        "{name}: {} search failed after {asked} of {} queries (the rest not measured): {e}",
                        run.mode,
                        set.queries.len()
                    ));
                    return true;
                }
            };
            run.rankings.extend(answer.ranking);
            run.models.extend(answer.embeddings.map(|(model, _)| model));
            run.self_hits += usize::from(answer.seeds.iter().any(|seed| seed == id));
            run.tally.add(&score(&set.judged[id], id, &answer.seeds), ms(took));
        }
        eprintln!(
            "cks-bench: BEIR {name}: {}: {} queries in {:.1} s, nDCG@{CUTOFF} {:.4}",
            run.mode,
            run.tally.queries,
            started.elapsed().as_secs_f64(),
            run.tally.ndcg()
        );
    }
    false
}

/// "1 query", "5 queries".
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// One data set's results as a Markdown table (a row per mode), then what the run covered and
/// what went wrong.
fn beir_table(name: &str, runs: &[ModeRun], context: &str, notes: &[String], elapsed: Duration) -> String {
    let mut out = format!(
        "| mode | queries | nDCG@{CUTOFF} | recall@{CUTOFF} | hit@{CUTOFF} | MRR@{CUTOFF} | search p50 | search p95 | \
         ranking | embedding model |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for run in runs {
        if let Some(why) = &run.unavailable {
            let _ = writeln!(out, "| {} | — | {why} | | | | | | | |", run.mode);
            continue;
        }
        let tally = &run.tally;
        let _ = write!(out, "| {} | {} |", run.mode, tally.queries);
        if tally.queries == 0 {
            out.push_str(" — | — | — | — | — | — |");
        } else {
            let _ = write!(
                out,
                " {:.4} | {:.4} | {:.4} | {:.4} | {} ms | {} ms |",
                tally.ndcg(),
                tally.recall(),
                tally.hit(),
                tally.mrr(),
                fmt_number(quantile(&tally.latencies_ms, 0.5)),
                fmt_number(quantile(&tally.latencies_ms, 0.95))
            );
        }
        let _ = writeln!(out, " {} | {} |", joined(&run.rankings), joined(&run.models));
    }
    let _ = writeln!(out, "\nBEIR retrieval, {name}: {context}; run time {:.1} s.", elapsed.as_secs_f64());
    write_notes(&mut out, notes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    fn judged(grades: &[(&str, i64)]) -> Judged {
        grades.iter().map(|(id, g)| ((*id).to_owned(), *g)).collect()
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn ndcg_by_hand_with_graded_judgements() {
        // Judged: a 2, b 1, c 1, z 0. Ranked: x, a, c, z (x unjudged).
        // DCG = 0/log2(2) + 2/log2(3) + 1/log2(4) + 0 = 1.261860 + 0.5 = 1.761860.
        // Ideal a, b, c: 2/1 + 1/log2(3) + 1/2 = 3.130930. nDCG = 0.562727.
        let judged = judged(&[("a", 2), ("b", 1), ("c", 1), ("z", 0)]);
        let s = score(&judged, "q", &ids(&["x", "a", "c", "z"]));
        let dcg = 2.0 / 3f64.log2() + 0.5;
        let ideal = 2.0 + 1.0 / 3f64.log2() + 0.5;
        assert!(near(s.ndcg, dcg / ideal), "{s:?}");
        assert!((s.ndcg - 0.562_727).abs() < 1e-6, "{s:?}");
        assert!(near(s.recall, 2.0 / 3.0), "{s:?}");
        assert!(s.hit);
        assert!(near(s.reciprocal_rank, 0.5), "{s:?}");
        // The best order scores 1; nothing relevant scores 0.
        assert!(near(score(&judged, "q", &ids(&["a", "b", "c"])).ndcg, 1.0));
        assert_eq!(score(&judged, "q", &ids(&["x", "z"])), QueryScore::default());
        assert_eq!(score(&judged, "q", &[]), QueryScore::default());
    }

    #[test]
    fn the_query_s_own_document_is_dropped_before_the_cut() {
        // The query q1 is a document too and comes back first; its counter-argument d is eleventh
        // of the answer's eleven, tenth once q1 is gone.
        let judged = judged(&[("d", 1)]);
        let mut seeds: Vec<String> = (1..=9).map(|i| format!("x{i}")).collect();
        seeds.insert(0, "q1".into());
        seeds.push("d".into());
        assert_eq!(seeds.len(), TOP_K);
        let s = score(&judged, "q1", &seeds);
        assert!(near(s.ndcg, 1.0 / 11f64.log2()), "{s:?}");
        assert!(s.hit && near(s.recall, 1.0) && near(s.reciprocal_rank, 0.1), "{s:?}");
        // Without the drop, d is eleventh: past the cut.
        assert_eq!(score(&judged, "other", &seeds), QueryScore::default());
        assert_eq!(ranking("q1", &seeds).len(), CUTOFF);
        // A repeated seed counts once.
        assert_eq!(ranking("q", &ids(&["a", "a", "q", "b"])), ["a", "b"]);
        // A judged query id (even judged relevant) is dropped all the same, as BEIR does.
        let s = score(&self::judged(&[("q", 1), ("d", 1)]), "q", &ids(&["q", "d"]));
        assert!(near(s.recall, 0.5) && near(s.reciprocal_rank, 1.0), "{s:?}");
    }

    #[test]
    fn a_judged_document_missing_from_the_corpus_stays_in_the_ideal() {
        // gone (grade 1) is not in the corpus, so no search returns it: found a first, the best
        // that can be done, still scores 1 / (1 + 1/log2(3)).
        let judged = judged(&[("a", 1), ("gone", 1)]);
        let s = score(&judged, "q", &ids(&["a", "b"]));
        assert!(near(s.ndcg, 1.0 / (1.0 + 1.0 / 3f64.log2())), "{s:?}");
        assert!(near(s.recall, 0.5), "{s:?}");
        // Its only judged document missing: the query can never score.
        assert_eq!(score(&self::judged(&[("gone", 1)]), "q", &ids(&["a"])), QueryScore::default());
    }

    #[test]
    fn only_the_first_ten_ideal_documents_count() {
        // Twelve relevant documents, the ten first found: nDCG 1, recall 10/12.
        let all: Vec<String> = (0..12).map(|i| format!("d{i}")).collect();
        let judged: Judged = all.iter().map(|id| (id.clone(), 1)).collect();
        let s = score(&judged, "q", &all);
        assert!(near(s.ndcg, 1.0) && near(s.recall, 10.0 / 12.0), "{s:?}");
    }

    #[test]
    fn qrels_read_with_their_header_and_crlf() {
        let text = "query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td2\t2\r\nq2\td3\t0\r\n\r\n";
        let qrels = parse_qrels(text, "t").unwrap();
        assert_eq!(qrels["q1"], judged(&[("d1", 1), ("d2", 2)]));
        assert_eq!(qrels["q2"], judged(&[("d3", 0)]));
        assert!(parse_qrels("q1\td1\t1\nq1\td2\tx\n", "t").unwrap_err().to_string().contains("t:2"));
        assert!(parse_qrels("q1\td1\n", "t").is_err());
        assert_eq!(parse_qrels("q1\td1\t1\n", "t").unwrap().len(), 1);
    }

    #[test]
    fn a_beir_directory_reads_into_documents_and_judged_queries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tiny");
        std::fs::create_dir_all(root.join("qrels")).unwrap();
        std::fs::write(
            root.join("corpus.jsonl"),
            concat!(
                r#"{"_id": "test-env-pro01a", "title": "", "text": "Meat is murder.", "metadata": {}}"#,
                "\n",
                r#"{"_id": "test-env-pro01b", "title": "animals environment", "text": "It is not.", "metadata": {}}"#,
                "\n",
                r#"{"_id": 42, "text": "A number id."}"#,
                "\n"
            ),
        )
        .unwrap();
        std::fs::write(
            root.join("queries.jsonl"),
            concat!(
                r#"{"_id": "unjudged", "text": "Nobody judged me.", "metadata": {}}"#,
                "\n",
                r#"{"_id": "test-env-pro01a", "text": "Meat is murder.", "metadata": {}}"#,
                "\n",
                r#"{"_id": "q2", "text": "Numbers?", "metadata": {}}"#,
                "\n"
            ),
        )
        .unwrap();
        std::fs::write(
            root.join("qrels").join("test.tsv"),
            "query-id\tcorpus-id\tscore\r\ntest-env-pro01a\ttest-env-pro01b\t1\r\nq2\t42\t1\r\nq2\tgone\t1\r\nq3\t42\t1\r\n",
        )
        .unwrap();
        let set = DataSet::read(&root, None).unwrap();
        assert_eq!(set.name, "tiny");
        assert_eq!(
            set.objects,
            [
                json!({"identity": {"id": "test-env-pro01a", "type": "Document", "name": "test-env-pro01a"},
                    "structure": {"text": "Meat is murder."}}),
                json!({"identity": {"id": "test-env-pro01b", "type": "Document", "name": "animals environment"},
                    "structure": {"title": "animals environment", "text": "It is not."}}),
                json!({"identity": {"id": "42", "type": "Document", "name": "42"}, "structure": {"text": "A number id."}}),
            ]
        );
        let asked: Vec<&str> = set.queries.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(asked, ["test-env-pro01a", "q2"]);
        assert_eq!((set.judged_queries, set.unknown_queries), (2, 1));
        assert_eq!(set.coverage(), (1, 1));
        assert_eq!(set.measurement("lexical"), "beir_tiny_lexical");
        // --beir-queries 1: the first judged query only.
        assert_eq!(DataSet::read(&root, Some(1)).unwrap().queries.len(), 1);
        // A repeated id is refused.
        std::fs::write(
            root.join("corpus.jsonl"),
            "{\"_id\": \"a\", \"text\": \"x\"}\n{\"_id\": \"a\", \"text\": \"y\"}\n",
        )
        .unwrap();
        let e = format!("{:#}", DataSet::read(&root, None).unwrap_err());
        assert!(e.contains("repeated"), "{e}");
    }

    #[test]
    fn the_table_has_a_row_per_mode() {
        let mut lexical = ModeRun { mode: "lexical".into(), ..Default::default() };
        lexical.tally.add(&score(&judged(&[("a", 1)]), "q", &ids(&["a"])), 2.0);
        lexical.tally.add(&score(&judged(&[("b", 1)]), "q", &ids(&["x", "b"])), 4.0);
        lexical.rankings.insert("bm25".into());
        let vector = ModeRun {
            mode: "vector".into(),
            unavailable: Some("not available: the server has no embeddings".into()),
            ..Default::default()
        };
        let table = beir_table("tiny", &[lexical, vector], "2 documents", &["a note".into()], Duration::from_secs(1));
        let half = (1.0 + 1.0 / 3f64.log2()) / 2.0;
        assert!(
            table.contains(&format!(
                "| lexical | 2 | {half:.4} | 1.0000 | 1.0000 | 0.7500 | 2.000 ms | 4.000 ms | bm25 | — |"
            )),
            "{table}"
        );
        assert!(table.contains("| vector | — | not available: the server has no embeddings |"), "{table}");
        assert!(table.contains("BEIR retrieval, tiny: 2 documents; run time 1.0 s."), "{table}");
        assert!(table.contains("\n- a note\n"), "{table}");
        for row in table.lines().filter(|r| r.starts_with("| lexical") || r.starts_with("| vector")) {
            assert_eq!(row.matches(" |").count(), 10, "{row}");
        }
    }
}
