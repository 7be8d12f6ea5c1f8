//! What the retrieval groups (LoCoMo, `scenarios/locomo.rs`; BEIR, `scenarios/beir.rs`) share: a
//! server with one session made of a list of objects, the wait for its embeddings, and
//! `search_semantic` asked and read as a client reads it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Bench, created_session, ms, with_message_limit};
use crate::client::{CallError, McpClient, truncate};

/// The modes `--modes` accepts.
pub(crate) const MODES: [&str; 3] = ["hybrid", "lexical", "vector"];
/// How long the wait for a session's embeddings goes on with no object embedded before its
/// questions are asked anyway (reported, not fatal): a slow embedder that keeps going is waited
/// for, however large the session.
const EMBEDDING_STALL: Duration = Duration::from_secs(120);
/// How often a long wait for embeddings says how far it got.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(15);
/// The pause between two polls of the embedding progress.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What a search answered.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Answer {
    /// `matched_seeds`, best first; empty for `not_found`.
    pub(super) seeds: Vec<String>,
    pub(super) ranking: Option<String>,
    /// `embeddings`: the model, and how many objects had no vector yet.
    pub(super) embeddings: Option<(String, u64)>,
    /// The ids of `context` (asked for with `max_tokens`), in its order.
    pub(super) context: Vec<String>,
}

/// A search's answer from a `tools/call` result: its `matched_seeds`, `ranking` and `embeddings`;
/// a `not_found` error is an answer with no seeds, any other error a failure.
pub(super) fn read_answer(result: &Value) -> Result<Answer, CallError> {
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    let value: Value = serde_json::from_str(text)
        .map_err(|_| CallError::Failed(format!("search_semantic: not a JSON answer: {}", truncate(text, 300))))?;
    match value.get("error") {
        Some(code) if code == "not_found" => return Ok(Answer::default()),
        Some(code) => {
            let message = value["message"].as_str().unwrap_or_default();
            return Err(CallError::Failed(format!("search_semantic: {code}: {}", truncate(message, 300))));
        }
        None if result["isError"] == json!(true) => {
            return Err(CallError::Failed(format!("search_semantic: isError: {}", truncate(text, 300))));
        }
        None => {}
    }
    let seeds = value["matched_seeds"]
        .as_array()
        .ok_or_else(|| CallError::Failed(format!("search_semantic: no matched_seeds: {}", truncate(text, 300))))?
        .iter()
        .filter_map(|id| id.as_str().map(str::to_owned))
        .collect();
    let embeddings = value
        .get("embeddings")
        .filter(|e| e.is_object())
        .map(|e| (e["model"].as_str().unwrap_or_default().to_owned(), e["pending"].as_u64().unwrap_or_default()));
    let context = value["context"]
        .as_array()
        .map(|pieces| pieces.iter().filter_map(|p| p["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    Ok(Answer { seeds, ranking: value["ranking"].as_str().map(str::to_owned), embeddings, context })
}

/// A group's notes under its table, a line each.
pub(super) fn write_notes(out: &mut String, notes: &[String]) {
    use std::fmt::Write as _;
    for note in notes {
        let _ = writeln!(out, "\n- {}", note.replace(['\r', '\n'], " "));
    }
}

/// One `search_semantic` call, as a client sends it; returns the answer and how long it took.
pub(super) async fn search(client: &mut McpClient, arguments: Value) -> Result<(Answer, Duration), CallError> {
    let started = Instant::now();
    let result = client.request("tools/call", json!({"name": "search_semantic", "arguments": arguments})).await?;
    let elapsed = started.elapsed();
    Ok((read_answer(&result)?, elapsed))
}

/// How the wait for a session's embeddings ended.
#[derive(Debug)]
enum Embedded {
    /// The answers carry no `embeddings`: the server has none (hybrid ranks by BM25 alone).
    Absent,
    /// Every object has a vector.
    Ready { model: String, waited: Duration },
    /// Still `pending` objects without a vector after [`EMBEDDING_STALL`] without progress.
    Stalled { model: String, pending: u64, waited: Duration },
}

/// Polls `search_semantic` with `query` until the answer says no object waits for a vector, or
/// carries no `embeddings` (a `not_found` answer carries none either), or the count of objects
/// waiting has not fallen for [`EMBEDDING_STALL`]. `name` names the session in progress lines.
async fn wait_for_embeddings(
    client: &mut McpClient,
    session: &str,
    query: &str,
    name: &str,
) -> Result<Embedded, CallError> {
    let started = Instant::now();
    let mut last_progress = started;
    let mut last_report = started;
    let mut fewest = u64::MAX;
    loop {
        let arguments = json!({"session_id": session, "query": query, "top_k": 1, "depth": 0});
        let (answer, _) = search(client, arguments).await?;
        match answer.embeddings {
            None => return Ok(Embedded::Absent),
            Some((model, 0)) => return Ok(Embedded::Ready { model, waited: started.elapsed() }),
            Some((model, pending)) => {
                if pending < fewest {
                    fewest = pending;
                    last_progress = Instant::now();
                } else if last_progress.elapsed() >= EMBEDDING_STALL {
                    return Ok(Embedded::Stalled { model, pending, waited: started.elapsed() });
                }
                if last_report.elapsed() >= PROGRESS_INTERVAL {
                    last_report = Instant::now();
                    eprintln!(
                        "cks-bench: {name}: {pending} objects still waiting for {model} after {:.0} s",
                        started.elapsed().as_secs_f64()
                    );
                }
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        }
    }
}

/// Waits until every one of the session's `objects` is embedded (see [`wait_for_embeddings`]),
/// polling with the longest of their texts. Returns whether the server has embeddings at all; a
/// wait that stalled is a note (the questions are asked anyway), a failed poll an error.
pub(super) async fn await_embeddings(
    client: &mut McpClient,
    session: &str,
    objects: &[Value],
    name: &str,
    notes: &mut Vec<String>,
) -> Result<bool, CallError> {
    let query = poll_query(objects).unwrap_or("hello");
    match wait_for_embeddings(client, session, query, name).await? {
        Embedded::Absent => Ok(false),
        Embedded::Ready { model, waited } => {
            eprintln!("cks-bench: {name}: embedded by {model} in {:.1} s", waited.as_secs_f64());
            Ok(true)
        }
        Embedded::Stalled { model, pending, waited } => {
            notes.push(format!(
                "{name}: {pending} objects not yet embedded by {model} after {:.0} s, none in the last {} s; \
                 asked anyway",
                waited.as_secs_f64(),
                EMBEDDING_STALL.as_secs()
            ));
            Ok(true)
        }
    }
}

/// The longest `structure.text` of the objects: a query that surely matches something, to poll
/// with.
pub(super) fn poll_query(objects: &[Value]) -> Option<&str> {
    objects.iter().filter_map(|o| o["structure"]["text"].as_str()).max_by_key(|text| text.len())
}

/// Values for a table cell: "—" when none, else comma-separated.
pub(super) fn joined(values: &BTreeSet<String>) -> String {
    if values.is_empty() { "—".into() } else { values.iter().cloned().collect::<Vec<_>>().join(", ") }
}

impl Bench<'_> {
    /// A server on a fresh directory (named after `label`) with one session of `objects`, made by
    /// one `validate_knowledge` call (our server's message limit raised to fit it, see
    /// [`with_message_limit`]); returns the client, the session id and how long creating it took.
    pub(super) async fn retrieval_session(
        &mut self,
        label: &str,
        objects: &[Value],
    ) -> Result<(McpClient, String, Duration), String> {
        let document = json!({"version": "1.0", "objects": objects}).to_string();
        let dir = self.fresh_dir(label).map_err(|e| format!("{e:#}"))?;
        let inherited = std::env::var("CKS_MCP_MAX_MESSAGE_BYTES").ok();
        let command = with_message_limit(&self.command, document.len(), inherited.as_deref());
        let mut client = self.spawn(&command, &dir).map_err(|e| e.to_string())?;
        if let Err(e) = client.initialize().await {
            client.kill().await;
            return Err(format!("initialize: {e}"));
        }
        if let Some(timeout) = self.plan.create_timeout {
            client.set_timeout(timeout);
        }
        let started = Instant::now();
        let result = client.call_tool("validate_knowledge", json!({"json_data": document})).await;
        drop(document);
        let elapsed = client.exchanged_in().unwrap_or_else(|| started.elapsed());
        client.set_timeout(self.plan.call_timeout);
        match result.and_then(|result| created_session(&result)) {
            Ok((session, _)) => Ok((client, session, elapsed)),
            Err(e) => {
                client.kill().await;
                Err(format!("session creation after {:.0} ms: {e}", ms(elapsed)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_a_client_reads_them() {
        let ids = |ids: &[&str]| ids.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let answer = |value: Value, is_error: bool| json!({"content": [{"type": "text", "text": value.to_string()}], "isError": is_error});
        let found = json!({"status": "success", "matched_seeds": ["D1:2", "D3:4"], "ranking": "hybrid",
            "embeddings": {"model": "m", "pending": 3},
            "context": [{"id": "D1:2", "score": 1.0, "text": "x"}, {"id": "D1:3", "score": 0.5, "text": "y"}]});
        assert_eq!(
            read_answer(&answer(found, false)).unwrap(),
            Answer {
                seeds: ids(&["D1:2", "D3:4"]),
                ranking: Some("hybrid".into()),
                embeddings: Some(("m".into(), 3)),
                context: ids(&["D1:2", "D1:3"]),
            }
        );
        let lexical = json!({"status": "success", "matched_seeds": ["a"], "ranking": "bm25"});
        assert_eq!(read_answer(&answer(lexical, false)).unwrap().embeddings, None);
        let none = json!({"error": "not_found", "message": "No object matches the query."});
        assert_eq!(read_answer(&answer(none, true)).unwrap(), Answer::default());
        let refused = json!({"error": "invalid_parameter", "message": "mode 'vector' needs embeddings"});
        let e = read_answer(&answer(refused, true)).unwrap_err().to_string();
        assert!(e.contains("invalid_parameter") && e.contains("needs embeddings"), "{e}");
        assert!(read_answer(&json!({"content": [{"type": "text", "text": "oops"}]})).is_err());
    }

    #[test]
    fn the_poll_query_is_the_longest_text() {
        let objects = [
            json!({"structure": {"text": "short"}}),
            json!({"structure": {"title": "a much longer title than any text"}}),
            json!({"structure": {"text": "the longest text"}}),
        ];
        assert_eq!(poll_query(&objects), Some("the longest text"));
        assert_eq!(poll_query(&[]), None);
    }
}
