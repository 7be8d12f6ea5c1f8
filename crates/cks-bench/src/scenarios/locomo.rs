//! The LoCoMo retrieval group (`--locomo PATH`): how well `search_semantic` finds the turns of a
//! conversation that answer a question about it.
//!
//! Each conversation of the file gets a server of its own (fresh data directory, the environment
//! passed through, so `CKS_EMBEDDING_PROVIDER`, `CKS_EMBEDDING_MODEL` and `XDG_CACHE_HOME` apply)
//! and one session made by one `validate_knowledge` call: one `Utterance` object per turn (id and
//! name the turn's `dia_id`; structure `speaker`, `date`, `text`, `image_caption`), no relations,
//! nothing from the questions. When a mode needs embeddings, the group first waits until the
//! server has embedded every turn (`retrieval::await_embeddings`: as long as the embedding
//! progresses). Then every question of categories 1–4 is asked with `search_semantic` (`top_k` 10,
//! `depth` 0) in each mode, and its `matched_seeds` are scored against the question's evidence:
//! recall@k and hit@k for k = 1, 5, 10 ([`score`]). A `not_found` answer is no result.
//!
//! The data is read by path and never copied; the tests use hand-made inputs only.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::retrieval::{await_embeddings, joined, search, write_notes};
use super::{Bench, GRACE, ms};
use crate::report::{fmt_number, quantile};

/// The cut-offs of recall@k and hit@k.
pub(crate) const KS: [usize; 3] = [1, 5, 10];
/// `top_k` of every question's search: the largest cut-off.
const TOP_K: usize = 10;
/// The categories asked, with their names (5, adversarial, has no evidence to find).
const CATEGORIES: [(u8, &str); 4] = [(1, "multi-hop"), (2, "temporal"), (3, "open-domain"), (4, "single-hop")];

/// What the group runs: the file, the modes, and which of its conversations.
#[derive(Debug, Clone)]
pub(crate) struct LocomoPlan {
    pub(crate) path: PathBuf,
    /// `search_semantic` modes, in the order asked (`retrieval::MODES`).
    pub(crate) modes: Vec<String>,
    /// Indexes into the file's list of conversations; `None`: all of them.
    pub(crate) conversations: Option<Vec<usize>>,
}

/// One conversation of the file, with what the group reads of it (the summaries and observations
/// are skipped).
#[derive(Debug, Deserialize)]
struct Sample {
    #[serde(default)]
    sample_id: Option<String>,
    conversation: Map<String, Value>,
    #[serde(default)]
    qa: Vec<Question>,
}

#[derive(Debug, Deserialize)]
struct Question {
    question: String,
    #[serde(default)]
    evidence: Vec<String>,
    category: u8,
}

#[derive(Debug, Deserialize)]
struct Turn {
    speaker: String,
    dia_id: String,
    text: String,
    #[serde(default)]
    blip_caption: Option<String>,
}

/// The token budget of every question's `context` (`max_tokens`).
pub(crate) const CONTEXT_TOKENS: u32 = 1000;

/// One question's scores at each of [`KS`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct QuestionScore {
    /// |evidence ∩ first k seeds| / |evidence|.
    pub(crate) recall: [f64; 3],
    /// At least one evidence id among the first k seeds.
    pub(crate) hit: [bool; 3],
    /// Every evidence id within the answer's `context` ([`CONTEXT_TOKENS`] tokens).
    pub(crate) in_context: bool,
}

/// Scores the seeds a search returned (best first) against a question's evidence. Evidence ids are
/// counted once each; ids that name no turn stay in the denominator (they can never be found), and
/// a seed repeated counts once. `None` when the question has no evidence (nothing to recall).
pub(crate) fn score(evidence: &[String], seeds: &[String], context: &[String]) -> Option<QuestionScore> {
    let evidence: BTreeSet<&str> = evidence.iter().map(String::as_str).collect();
    if evidence.is_empty() {
        return None;
    }
    let in_context = evidence.iter().all(|id| context.iter().any(|c| c == id));
    let mut score = QuestionScore { in_context, ..QuestionScore::default() };
    for (i, k) in KS.into_iter().enumerate() {
        let found: BTreeSet<&str> =
            seeds.iter().take(k).map(String::as_str).filter(|id| evidence.contains(id)).collect();
        score.recall[i] = found.len() as f64 / evidence.len() as f64;
        score.hit[i] = !found.is_empty();
    }
    Some(score)
}

/// The scores of a group of questions (one mode, one category).
#[derive(Debug, Clone, Default)]
struct Tally {
    questions: usize,
    recall: [f64; 3],
    hits: [usize; 3],
    in_context: usize,
    latencies_ms: Vec<f64>,
}

impl Tally {
    fn add(&mut self, score: &QuestionScore, latency_ms: f64) {
        self.questions += 1;
        for i in 0..KS.len() {
            self.recall[i] += score.recall[i];
            self.hits[i] += usize::from(score.hit[i]);
        }
        self.in_context += usize::from(score.in_context);
        self.latencies_ms.push(latency_ms);
    }

    fn merge(&mut self, other: &Tally) {
        self.questions += other.questions;
        for i in 0..KS.len() {
            self.recall[i] += other.recall[i];
            self.hits[i] += other.hits[i];
        }
        self.in_context += other.in_context;
        self.latencies_ms.extend_from_slice(&other.latencies_ms);
    }

    fn recall(&self, i: usize) -> f64 {
        self.recall[i] / self.questions as f64
    }

    fn hit(&self, i: usize) -> f64 {
        self.hits[i] as f64 / self.questions as f64
    }

    /// The share of questions whose evidence is all within the budgeted context.
    fn in_context(&self) -> f64 {
        self.in_context as f64 / self.questions as f64
    }
}

/// What one mode saw over all conversations.
#[derive(Debug, Default)]
struct ModeRun {
    mode: String,
    by_category: BTreeMap<u8, Tally>,
    /// The `ranking` values the answers carried.
    rankings: BTreeSet<String>,
    /// The `embeddings.model` values the answers carried.
    models: BTreeSet<String>,
    /// Why the mode could not run (vector search on a server without embeddings).
    unavailable: Option<String>,
    /// Questions of categories 1–4 with no evidence (not scored).
    no_evidence: usize,
}

impl ModeRun {
    fn all(&self) -> Tally {
        let mut all = Tally::default();
        for tally in self.by_category.values() {
            all.merge(tally);
        }
        all
    }
}

/// The conversation's turns as one object each, session by session in order: the knowledge
/// document `validate_knowledge` makes the session of.
fn corpus(conversation: &Map<String, Value>) -> anyhow::Result<Vec<Value>> {
    let mut sessions: Vec<(u64, &Value)> = conversation
        .iter()
        .filter_map(|(key, turns)| {
            let n = key.strip_prefix("session_")?.parse::<u64>().ok()?;
            turns.is_array().then_some((n, turns))
        })
        .collect();
    sessions.sort_by_key(|(n, _)| *n);
    let mut objects = Vec::new();
    for (n, turns) in sessions {
        let date = conversation.get(&format!("session_{n}_date_time")).and_then(Value::as_str);
        let turns: Vec<Turn> =
            serde_json::from_value(turns.clone()).with_context(|| format!("reading the turns of session_{n}"))?;
        for turn in turns {
            let mut structure = Map::new();
            structure.insert("speaker".into(), json!(turn.speaker));
            if let Some(date) = date {
                structure.insert("date".into(), json!(date));
            }
            structure.insert("text".into(), json!(turn.text));
            if let Some(caption) = turn.blip_caption {
                structure.insert("image_caption".into(), json!(caption));
            }
            objects.push(json!({
                "identity": {"id": turn.dia_id, "type": "Utterance", "name": turn.dia_id},
                "structure": structure,
            }));
        }
    }
    Ok(objects)
}

impl Bench<'_> {
    /// The LoCoMo group: records one measurement per mode and category ("all" first) and returns
    /// the Markdown table of the results.
    pub(crate) async fn locomo(&mut self, plan: &LocomoPlan) -> anyhow::Result<String> {
        let text = std::fs::read_to_string(&plan.path).with_context(|| format!("reading {}", plan.path.display()))?;
        let samples: Vec<Sample> =
            serde_json::from_str(&text).with_context(|| format!("reading {} as LoCoMo", plan.path.display()))?;
        drop(text);
        let chosen = plan.conversations.clone().unwrap_or_else(|| (0..samples.len()).collect());
        if let Some(bad) = chosen.iter().find(|i| **i >= samples.len()) {
            anyhow::bail!("conversation {bad} is not in {} ({} conversations)", plan.path.display(), samples.len());
        }
        let needs_embeddings = plan.modes.iter().any(|m| m == "hybrid" || m == "vector");
        let mut runs: Vec<ModeRun> =
            plan.modes.iter().map(|m| ModeRun { mode: m.clone(), ..Default::default() }).collect();
        let mut notes: Vec<String> = Vec::new();
        let mut turns_total = 0;
        let started = Instant::now();
        for &index in &chosen {
            let sample = &samples[index];
            let name = format!("conversation {index} ({})", sample.sample_id.as_deref().unwrap_or("no sample_id"));
            let objects = corpus(&sample.conversation).with_context(|| format!("reading {name}"))?;
            turns_total += objects.len();
            let questions: Vec<&Question> =
                sample.qa.iter().filter(|q| CATEGORIES.iter().any(|(c, _)| *c == q.category)).collect();
            let label = format!("locomo-{index}");
            let (mut client, session, created) = match self.retrieval_session(&label, &objects).await {
                Ok(started) => started,
                Err(why) => {
                    notes.push(format!("{name}: not measured: {why}"));
                    continue;
                }
            };
            eprintln!(
                "cks-bench: {name}: {} turns, session created in {:.0} ms; {} questions",
                objects.len(),
                ms(created),
                questions.len()
            );
            let mut embedded = None;
            if needs_embeddings {
                match await_embeddings(&mut client, &session, &objects, &name, &mut notes).await {
                    Ok(has) => embedded = Some(has),
                    Err(e) => {
                        notes.push(format!("{name}: not measured: waiting for the embeddings failed: {e}"));
                        client.kill().await;
                        continue;
                    }
                }
            }
            let mut broken = false;
            'modes: for run in &mut runs {
                if run.mode == "vector" && embedded == Some(false) {
                    run.unavailable = Some("not available: the server has no embeddings".into());
                    continue;
                }
                for (asked, question) in questions.iter().enumerate() {
                    let arguments = json!({"session_id": session, "query": question.question, "top_k": TOP_K,
                        "depth": 0, "mode": run.mode, "max_tokens": CONTEXT_TOKENS});
                    let (answer, took) = match search(&mut client, arguments).await {
                        Ok(answered) => answered,
                        Err(e) => {
                            notes.push(format!(
                                "{name}: {} search failed after {asked} of {} questions (the rest of the \
                                 conversation not measured): {e}",
                                run.mode,
                                questions.len()
                            ));
                            broken = true;
                            break 'modes;
                        }
                    };
                    run.rankings.extend(answer.ranking);
                    run.models.extend(answer.embeddings.map(|(model, _)| model));
                    match score(&question.evidence, &answer.seeds, &answer.context) {
                        Some(s) => run.by_category.entry(question.category).or_default().add(&s, ms(took)),
                        None => run.no_evidence += 1,
                    }
                }
            }
            if broken {
                client.kill().await;
            } else {
                client.shutdown(GRACE).await;
            }
        }
        let elapsed = started.elapsed();
        if needs_embeddings && runs.iter().any(|r| r.mode == "hybrid" && r.models.is_empty()) {
            notes.push("no embeddings: hybrid ranked by BM25 alone (ranking `bm25`)".into());
        }
        let conversations = chosen.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let context = format!("conversations {conversations}, {turns_total} turns, top_k {TOP_K}, depth 0");
        self.record_locomo(&runs, &context);
        Ok(locomo_table(&runs, &context, &notes, elapsed))
    }

    /// One record per mode and category: recall@10 as the value, the other numbers in the note.
    fn record_locomo(&mut self, runs: &[ModeRun], context: &str) {
        for run in runs {
            for (category, tally) in rows(run) {
                let measurement = format!("locomo_{}_{}", run.mode, category.replace('-', "_"));
                if let Some(why) = &run.unavailable {
                    self.rec.status(&measurement, None, "recall@10", why.clone());
                    continue;
                }
                if tally.questions == 0 {
                    self.rec.status(&measurement, None, "recall@10", "error: no question answered");
                    continue;
                }
                let mut note = format!("questions {}", tally.questions);
                for (i, k) in KS.into_iter().enumerate() {
                    let _ = write!(note, ", recall@{k} {:.4}", tally.recall(i));
                }
                for (i, k) in KS.into_iter().enumerate() {
                    let _ = write!(note, ", hit@{k} {:.4}", tally.hit(i));
                }
                let _ = write!(note, ", evidence in {CONTEXT_TOKENS} tokens {:.4}", tally.in_context());
                let _ = write!(
                    note,
                    ", search p50 {} ms, p95 {} ms, ranking {}, embedding model {}; {context}",
                    fmt_number(quantile(&tally.latencies_ms, 0.5)),
                    fmt_number(quantile(&tally.latencies_ms, 0.95)),
                    joined(&run.rankings),
                    joined(&run.models)
                );
                if run.no_evidence > 0 {
                    let _ = write!(note, "; {} questions without evidence not scored", run.no_evidence);
                }
                self.rec.value(&measurement, None, "recall@10", tally.recall(2), Some(note));
            }
        }
    }
}

/// A mode's rows: "all", then each category.
fn rows(run: &ModeRun) -> Vec<(&'static str, Tally)> {
    let mut rows = vec![("all", run.all())];
    for (category, name) in CATEGORIES {
        rows.push((name, run.by_category.get(&category).cloned().unwrap_or_default()));
    }
    rows
}

/// The results as a Markdown table (a row per mode and category), then what the run covered and
/// what went wrong.
fn locomo_table(runs: &[ModeRun], context: &str, notes: &[String], elapsed: Duration) -> String {
    let mut out = String::from(
        "| mode | category | questions | recall@1 | recall@5 | recall@10 | hit@1 | hit@5 | hit@10 | evidence in 1,000 \
         tokens | search p50 | search p95 | ranking | embedding model |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for run in runs {
        for (category, tally) in rows(run) {
            if let Some(why) = &run.unavailable {
                let _ = writeln!(out, "| {} | {category} | — | {why} | | | | | | | | | | |", run.mode);
                continue;
            }
            let _ = write!(out, "| {} | {category} | {} |", run.mode, tally.questions);
            if tally.questions == 0 {
                out.push_str(" — | — | — | — | — | — | — | — | — |");
            } else {
                for i in 0..KS.len() {
                    let _ = write!(out, " {:.3} |", tally.recall(i));
                }
                for i in 0..KS.len() {
                    let _ = write!(out, " {:.3} |", tally.hit(i));
                }
                let _ = write!(out, " {:.3} |", tally.in_context());
                let _ = write!(
                    out,
                    " {} ms | {} ms |",
                    fmt_number(quantile(&tally.latencies_ms, 0.5)),
                    fmt_number(quantile(&tally.latencies_ms, 0.95))
                );
            }
            let _ = writeln!(out, " {} | {} |", joined(&run.rankings), joined(&run.models));
        }
    }
    let _ = write!(out, "\nLoCoMo retrieval: {context}; run time {:.1} s.", elapsed.as_secs_f64());
    let no_evidence = runs.iter().map(|r| r.no_evidence).max().unwrap_or(0);
    if no_evidence > 0 {
        let _ = write!(out, " {no_evidence} questions without evidence not scored.");
    }
    out.push('\n');
    write_notes(&mut out, notes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    fn close(a: [f64; 3], b: [f64; 3]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn evidence_within_the_context_is_all_of_it_or_none() {
        let context = ids(&["D1:2", "D1:9", "D2:1"]);
        assert!(score(&ids(&["D1:9", "D2:1"]), &[], &context).unwrap().in_context);
        assert!(!score(&ids(&["D1:9", "D3:3"]), &[], &context).unwrap().in_context, "one piece missing");
        assert!(!score(&ids(&["D1:9"]), &context, &[]).unwrap().in_context, "seeds are not the context");
    }

    #[test]
    fn recall_and_hit_at_k() {
        let seeds = ids(&["D1:1", "D1:2", "D1:3", "D1:4", "D1:5", "D1:6", "D1:7", "D1:8", "D1:9", "D1:10", "D1:11"]);
        // One evidence id, found third: a miss at 1, a hit at 5 and 10.
        let s = score(&ids(&["D1:3"]), &seeds, &[]).unwrap();
        assert!(close(s.recall, [0.0, 1.0, 1.0]), "{s:?}");
        assert_eq!(s.hit, [false, true, true]);
        // Two ids, one first and one eighth.
        let s = score(&ids(&["D1:8", "D1:1"]), &seeds, &[]).unwrap();
        assert!(close(s.recall, [0.5, 0.5, 1.0]), "{s:?}");
        assert_eq!(s.hit, [true, true, true]);
        // Beyond the tenth seed counts for nothing.
        let s = score(&ids(&["D1:11"]), &seeds, &[]).unwrap();
        assert!(close(s.recall, [0.0; 3]), "{s:?}");
        assert_eq!(s.hit, [false; 3]);
    }

    #[test]
    fn duplicate_evidence_counts_once_and_missing_ids_stay_in_the_denominator() {
        let seeds = ids(&["a", "b", "c"]);
        let s = score(&ids(&["b", "b", "a"]), &seeds, &[]).unwrap();
        assert!(close(s.recall, [0.5, 1.0, 1.0]), "{s:?}");
        // "D8:6; D9:17" names no turn: it can never be found, but it is still evidence.
        let s = score(&ids(&["a", "D8:6; D9:17"]), &seeds, &[]).unwrap();
        assert!(close(s.recall, [0.5, 0.5, 0.5]), "{s:?}");
        assert_eq!(s.hit, [true; 3]);
        // A seed repeated is found once.
        let s = score(&ids(&["a", "b"]), &ids(&["a", "a", "a"]), &[]).unwrap();
        assert!(close(s.recall, [0.5; 3]), "{s:?}");
    }

    #[test]
    fn empty_results_and_empty_evidence() {
        let s = score(&ids(&["a"]), &[], &[]).unwrap();
        assert_eq!(s, QuestionScore::default());
        assert_eq!(score(&[], &ids(&["a"]), &[]), None);
        assert_eq!(score(&[], &[], &[]), None);
    }

    #[test]
    fn tallies_average_over_questions() {
        let mut run = ModeRun { mode: "lexical".into(), ..Default::default() };
        let hit = score(&ids(&["a", "b"]), &ids(&["a", "x", "b"]), &ids(&["b", "a"])).unwrap();
        let miss = score(&ids(&["c"]), &ids(&["a"]), &[]).unwrap();
        run.by_category.entry(1).or_default().add(&hit, 2.0);
        run.by_category.entry(4).or_default().add(&miss, 4.0);
        let all = run.all();
        assert_eq!(all.questions, 2);
        assert!((all.recall(0) - 0.25).abs() < 1e-12);
        assert!((all.recall(1) - 0.5).abs() < 1e-12);
        assert!((all.hit(0) - 0.5).abs() < 1e-12);
        let table = locomo_table(&[run], "conversations 0", &["a note".into()], Duration::from_secs(3));
        assert!(
            table.contains(
                "| lexical | all | 2 | 0.250 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | 2.000 ms | 4.000 ms |"
            ),
            "{table}"
        );
        assert!(table.contains("| lexical | multi-hop | 1 | 0.500 | 1.000 | 1.000 | 1.000 |"), "{table}");
        assert!(table.contains("| lexical | temporal | 0 | — |"), "{table}");
        assert!(table.contains("\n- a note\n"), "{table}");
        for row in table.lines().filter(|r| r.starts_with("| lexical")) {
            assert_eq!(row.matches(" |").count(), 14, "{row}");
        }
    }

    #[test]
    fn the_corpus_is_one_object_per_turn_in_session_order() {
        let conversation = json!({
            "speaker_a": "Ann", "speaker_b": "Bo",
            "session_10_date_time": "1:00 pm on 2 May, 2023",
            "session_10": [{"speaker": "Bo", "dia_id": "D10:1", "text": "Later."}],
            "session_2_date_time": "9:00 am on 1 May, 2023",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "Look!", "blip_caption": "a photo of a cat",
                 "img_url": ["x"], "query": "cat"},
                {"speaker": "Bo", "dia_id": "D2:2", "text": "Nice.", "blip_caption": null},
            ],
        });
        let objects = corpus(conversation.as_object().unwrap()).unwrap();
        let ids: Vec<&str> = objects.iter().map(|o| o["identity"]["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["D2:1", "D2:2", "D10:1"]);
        assert_eq!(
            objects[0],
            json!({"identity": {"id": "D2:1", "type": "Utterance", "name": "D2:1"},
                "structure": {"speaker": "Ann", "date": "9:00 am on 1 May, 2023", "text": "Look!",
                    "image_caption": "a photo of a cat"}})
        );
        assert_eq!(
            objects[1]["structure"],
            json!({"speaker": "Bo", "date": "9:00 am on 1 May, 2023", "text": "Nice."})
        );
        assert_eq!(super::super::retrieval::poll_query(&objects), Some("Later."));
    }
}
