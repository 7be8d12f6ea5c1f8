//! Tools found by a need in words: the one ranking behind `find_tools`, the MCP tool a host calls
//! for tools beyond its list, and `ai_chat`'s own, which offers a chat's model the tools beyond its
//! first offer. Each caller chooses what it may find; this module only ranks.
//!
//! A tool ranks by the words it shares with the need (stems, stop words dropped), a rarer word
//! counting more, as in BM25's inverse document frequency; a tool's name counts its parts
//! (`visualize_graph` is "visualize graph"). A tool sharing no word is never found.

use std::collections::HashMap;

/// A text's words as the need and the tools are compared.
pub fn words(text: &str) -> Vec<String> {
    cks_core::text::tokens(&text.replace('_', " ")).collect()
}

/// What a tool is found by: the words of its name and of its description.
#[derive(Debug, Clone)]
pub struct ToolWords {
    name: Vec<String>,
    all: Vec<String>,
}

/// The words of a tool named `name` and described as `description`.
pub fn tool_words(name: &str, description: &str) -> ToolWords {
    let name = words(name);
    let mut all = words(description);
    all.extend(name.iter().cloned());
    all.sort_unstable();
    all.dedup();
    ToolWords { name, all }
}

/// At most `limit` candidates sharing the most of `need`'s words, best first; ties keep the
/// candidates' order. A word counts by its rarity among the candidates, and twice in a tool's
/// name: a name says what the tool is for, a description also names its neighbours.
pub fn best<'a, T>(candidates: &'a [(T, ToolWords)], need: &[String], limit: usize) -> Vec<&'a T> {
    let mut documents: HashMap<&str, usize> = HashMap::new();
    for (_, words) in candidates {
        for word in &words.all {
            *documents.entry(word.as_str()).or_default() += 1;
        }
    }
    let total = candidates.len() as f64;
    let mut scored: Vec<(f64, &T)> = candidates
        .iter()
        .map(|(candidate, words)| {
            let score: f64 = need
                .iter()
                .filter(|w| words.all.binary_search(w).is_ok())
                .map(|w| {
                    let rarity = (1.0 + total / documents.get(w.as_str()).copied().unwrap_or(1) as f64).ln();
                    if words.name.contains(w) { 2.0 * rarity } else { rarity }
                })
                .sum();
            (score, candidate)
        })
        .filter(|(score, _)| *score > 0.0)
        .collect();
    // Stable: equal scores keep the candidates' order.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(limit).map(|(_, candidate)| candidate).collect()
}

#[cfg(test)]
mod tests {
    use super::{best, tool_words, words};

    fn candidates() -> Vec<(&'static str, super::ToolWords)> {
        [
            ("visualize_graph", "Draw the graph as a Mermaid diagram."),
            ("export_knowledge", "Export the graph as linked data (JSON-LD or Turtle)."),
            ("list_versions", "List the graph's versions."),
        ]
        .into_iter()
        .map(|(name, description)| (name, tool_words(name, description)))
        .collect()
    }

    #[test]
    fn the_tool_sharing_the_rarest_words_comes_first() {
        let candidates = candidates();
        // "graph" is in every tool and counts least; "draw" decides which comes first.
        assert_eq!(best(&candidates, &words("list the graph"), 3)[0], &"list_versions");
        assert_eq!(best(&candidates, &words("draw the graph"), 3)[0], &"visualize_graph");
        assert_eq!(best(&candidates, &words("turtle export"), 3), vec![&"export_knowledge"]);
    }

    #[test]
    fn a_name_counts_its_parts_and_ties_keep_the_given_order() {
        let candidates = candidates();
        assert_eq!(best(&candidates, &words("versions"), 3), vec![&"list_versions"]);
        let all = best(&candidates, &words("graph"), 3);
        assert_eq!(all, vec![&"visualize_graph", &"export_knowledge", &"list_versions"]);
        assert_eq!(best(&candidates, &words("graph"), 1), vec![&"visualize_graph"]);
    }

    #[test]
    fn a_word_of_the_name_counts_more_than_one_of_the_description() {
        let candidates: Vec<_> = [
            ("claim_task", "Claim a task; a failed one is retried later."),
            ("retry_task", "Put a failed task back in the queue."),
        ]
        .into_iter()
        .map(|(name, description)| (name, tool_words(name, description)))
        .collect();
        assert_eq!(best(&candidates, &words("retry a failed task"), 2), vec![&"retry_task", &"claim_task"]);
    }

    #[test]
    fn nothing_is_found_without_a_shared_word() {
        assert!(best(&candidates(), &words("weather tomorrow"), 3).is_empty());
        assert!(best(&candidates(), &[], 3).is_empty());
    }
}
