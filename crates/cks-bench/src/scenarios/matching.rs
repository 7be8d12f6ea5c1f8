//! The entity-matching group (`--er DIR`): how well `find_duplicates` tells which records of two
//! tables are the same thing.
//!
//! The directory is in the DeepMatcher/Magellan layout: `tableA.csv` and `tableB.csv` (an `id`
//! column, then the records' attributes) and the labelled pairs `test.csv` (`ltable_id`,
//! `rtable_id`, `label`, 1 for a match). A fresh server gets one session made by one
//! `validate_knowledge` call: every record of both tables one `Record` object (ids `a<id>` and
//! `b<id>`), named by its `name` or `title` column (else its first attribute), its other
//! attributes as text fields, empty cells left out. Nothing is told to the matcher about the
//! data: the same loading fits any such pair of tables.
//!
//! Then each left record of a labelled pair is asked once, `find_duplicates` with its id
//! (`min_score` 0, `limit` 0: every candidate), and each pair is predicted a match when the right
//! record comes back `same`. Scored as published: precision, recall and F1 of the match class
//! over the labelled pairs; `review` answers are counted apart (a person would look at them).
//!
//! The data is read by path and never copied; the tests use hand-made inputs only.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde_json::{Map, Value, json};

use super::{Bench, GRACE, ms};
use crate::report::{fmt_number, quantile};

/// What the group runs: the data set directories.
#[derive(Debug, Clone)]
pub(crate) struct MatchingPlan {
    pub(crate) dirs: Vec<PathBuf>,
}

/// A CSV file's rows (header first), with RFC 4180 quoting: fields with commas, quotes or line
/// breaks are quoted, a quote inside doubled.
pub(crate) fn csv_rows(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

/// A table's records as objects, ids prefixed with `prefix`.
pub(crate) fn records(text: &str, prefix: &str) -> anyhow::Result<Vec<Value>> {
    let rows = csv_rows(text);
    let (header, rows) = rows.split_first().context("an empty table")?;
    let id = header.iter().position(|h| h == "id").context("no id column")?;
    let attributes: Vec<usize> = (0..header.len()).filter(|&i| i != id).collect();
    let name = header
        .iter()
        .position(|h| h == "name" || h == "title")
        .or_else(|| attributes.first().copied())
        .context("no attribute columns")?;
    rows.iter()
        .filter(|row| row.len() == header.len())
        .map(|row| {
            let mut structure = Map::new();
            for &i in attributes.iter().filter(|&&i| i != name && !row[i].trim().is_empty()) {
                structure.insert(header[i].clone(), json!(row[i]));
            }
            let object_name = if row[name].trim().is_empty() { row[id].as_str() } else { row[name].as_str() };
            Ok(json!({
                "identity": {"id": format!("{prefix}{}", row[id]), "type": "Record", "name": object_name},
                "structure": structure,
            }))
        })
        .collect()
}

/// The labelled pairs: (left id, right id, match).
pub(crate) fn labelled(text: &str) -> anyhow::Result<Vec<(String, String, bool)>> {
    let rows = csv_rows(text);
    let (header, rows) = rows.split_first().context("an empty pair file")?;
    let column = |name: &str| header.iter().position(|h| h == name).with_context(|| format!("no {name} column"));
    let (left, right, label) = (column("ltable_id")?, column("rtable_id")?, column("label")?);
    Ok(rows
        .iter()
        .filter(|r| r.len() == header.len())
        .map(|r| (format!("a{}", r[left]), format!("b{}", r[right]), r[label].trim() == "1"))
        .collect())
}

/// The counts a run ends with.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Counts {
    pub(crate) true_positives: usize,
    pub(crate) false_positives: usize,
    pub(crate) false_negatives: usize,
    /// Matches answered `review` (not counted as found).
    pub(crate) matches_reviewed: usize,
    /// Non-matches answered `review`.
    pub(crate) others_reviewed: usize,
}

impl Counts {
    pub(crate) fn add(&mut self, matched: bool, decision: Option<&str>) {
        match (matched, decision) {
            (true, Some("same")) => self.true_positives += 1,
            (false, Some("same")) => self.false_positives += 1,
            (true, other) => {
                self.false_negatives += 1;
                self.matches_reviewed += usize::from(other == Some("review"));
            }
            (false, other) => self.others_reviewed += usize::from(other == Some("review")),
        }
    }

    pub(crate) fn precision(&self) -> f64 {
        ratio(self.true_positives, self.true_positives + self.false_positives)
    }

    pub(crate) fn recall(&self) -> f64 {
        ratio(self.true_positives, self.true_positives + self.false_negatives)
    }

    pub(crate) fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 { 0.0 } else { 2.0 * p * r / (p + r) }
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

impl Bench<'_> {
    /// The group: per data set one record (F1 as the value) and a Markdown table of the results.
    pub(crate) async fn matching(&mut self, plan: &MatchingPlan) -> anyhow::Result<String> {
        let mut tables = vec![
            "| data set | records | pairs (matches) | precision | recall | F1 | matches in review | others in review | find_duplicates p50 / p95 |".to_owned(),
            "|---|---|---|---|---|---|---|---|---|".to_owned(),
        ];
        for dir in &plan.dirs {
            tables.push(self.matching_set(dir).await.with_context(|| format!("entity matching on {}", dir.display()))?);
        }
        Ok(tables.join("\n"))
    }

    async fn matching_set(&mut self, dir: &Path) -> anyhow::Result<String> {
        let read = |file: &str| std::fs::read_to_string(dir.join(file)).with_context(|| format!("reading {file}"));
        let mut objects = records(&read("tableA.csv")?, "a")?;
        objects.extend(records(&read("tableB.csv")?, "b")?);
        let pairs = labelled(&read("test.csv")?)?;
        let name = dir.file_name().map_or_else(|| "er".to_owned(), |n| n.to_string_lossy().into_owned());
        let (mut client, session, took) =
            self.retrieval_session(&format!("er-{name}"), &objects).await.map_err(anyhow::Error::msg)?;
        eprintln!("cks-bench: {name}: {} records, session created in {:.0} ms", objects.len(), ms(took));
        let mut by_left: BTreeMap<&str, Vec<(&str, bool)>> = BTreeMap::new();
        for (left, right, matched) in &pairs {
            by_left.entry(left).or_default().push((right, *matched));
        }
        let mut counts = Counts::default();
        let mut latencies = Vec::new();
        for (left, rights) in &by_left {
            let started = Instant::now();
            let answer = client
                .call_tool(
                    "find_duplicates",
                    json!({"session_id": session, "object_id": left, "min_score": 0, "limit": 0}),
                )
                .await;
            latencies.push(ms(client.exchanged_in().unwrap_or_else(|| started.elapsed())));
            let decisions: HashMap<String, String> = match answer {
                Ok(value) => value["pairs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| Some((p["object_ids"][1].as_str()?.to_owned(), p["decision"].as_str()?.to_owned())))
                    .collect(),
                Err(e) => anyhow::bail!("find_duplicates {left}: {e}"),
            };
            for (right, matched) in rights {
                counts.add(*matched, decisions.get(*right).map(String::as_str));
            }
        }
        client.shutdown(GRACE).await;
        let matches = pairs.iter().filter(|p| p.2).count();
        let note = format!(
            "{} labelled pairs ({matches} matches), precision {:.4}, recall {:.4}; find_duplicates p50 {} ms",
            pairs.len(),
            counts.precision(),
            counts.recall(),
            fmt_number(quantile(&latencies, 0.5)),
        );
        self.rec.value(&format!("er_{name}_f1"), None, "F1", counts.f1(), Some(note));
        Ok(format!(
            "| {name} | {} | {} ({matches}) | {:.4} | {:.4} | **{:.4}** | {} | {} | {} / {} ms |",
            objects.len(),
            pairs.len(),
            counts.precision(),
            counts.recall(),
            counts.f1(),
            counts.matches_reviewed,
            counts.others_reviewed,
            fmt_number(quantile(&latencies, 0.5)),
            fmt_number(quantile(&latencies, 0.95)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_read_with_quotes_and_become_records_named_by_their_title() {
        let table = "id,title,authors,year\n0,\"a paper, with a comma\",\"x \"\"y\"\" z\",1999\n1,second,,2001\r\n";
        let objects = records(table, "a").unwrap();
        assert_eq!(
            objects[0],
            json!({"identity": {"id": "a0", "type": "Record", "name": "a paper, with a comma"},
                   "structure": {"authors": "x \"y\" z", "year": "1999"}})
        );
        assert_eq!(objects[1]["structure"], json!({"year": "2001"}), "empty cells are left out");
        let pairs = labelled("ltable_id,rtable_id,label\n0,5,1\n1,2,0\n").unwrap();
        assert_eq!(pairs, [("a0".into(), "b5".into(), true), ("a1".into(), "b2".into(), false)]);
    }

    #[test]
    fn counts_score_the_match_class_and_keep_reviews_apart() {
        let mut counts = Counts::default();
        counts.add(true, Some("same"));
        counts.add(true, Some("same"));
        counts.add(true, Some("review"));
        counts.add(false, Some("same"));
        counts.add(false, Some("review"));
        counts.add(false, None);
        assert_eq!((counts.precision(), counts.recall()), (2.0 / 3.0, 2.0 / 3.0));
        assert!((counts.f1() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!((counts.matches_reviewed, counts.others_reviewed), (1, 1));
    }
}
