//! How large an answer may grow by default: every answer that grows with the graph (lists, diffs,
//! subgraphs, documents after a commit) stays under [`ANSWER_BUDGET`] bytes of JSON unless the
//! caller asks for more (`limit`, `max_objects: 0`, `return_structure: true`), and says when it was
//! cut (`truncated: true` and `next_offset`, or the tool's own truncation keys).
//!
//! Storage and export tools answer the whole graph by definition and are not bounded here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_core::KnowledgeStructure;

use crate::convert::client_document;

/// The bytes of compact JSON a default answer's growing part may take (items are added while they
/// fit; the first always is). Well under 64 KB, leaving room for the answer's other keys.
pub(crate) const ANSWER_BUDGET: usize = 48 * 1024;

/// The bytes of canonical text a document embedded in an answer (`serialized`, `subgraph`) may
/// take by default: the text is escaped once more inside the answer, so less than
/// [`ANSWER_BUDGET`].
pub(crate) const DOCUMENT_BUDGET: usize = 40 * 1024;

/// Structures of more objects than this are never serialized into an answer by default (the
/// document is not even built).
pub(crate) const SERIALIZE_LIMIT: usize = 2_000;

/// One page of a list: the items from `offset`, `limit` of them (`Some(0)`: all the rest), or by
/// default as many as fit [`ANSWER_BUDGET`]; `next_offset` when items are left.
#[derive(Debug)]
pub(crate) struct Page<T> {
    pub(crate) items: Vec<T>,
    pub(crate) next_offset: Option<u64>,
}

impl<T> Page<T> {
    /// `Some(true)` when the page left items out (for a `truncated` key that is absent otherwise).
    pub(crate) fn truncated(&self) -> Option<bool> {
        self.next_offset.map(|_| true)
    }

    /// What the answer says of the items left out.
    pub(crate) fn cut(&self) -> Cut {
        Cut { truncated: self.truncated(), next_offset: self.next_offset }
    }
}

// A list's page in a tool's input (flattened into it): `limit` and `offset`. Not a doc comment:
// the schema would take it as the whole input's description.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct Paging {
    /// Most items to return (0: all; default: as many as fit 48 KB).
    pub(crate) limit: Option<u64>,
    /// Items to skip (a `next_offset`).
    #[serde(default)]
    pub(crate) offset: u64,
}

impl Paging {
    /// The page of `items` these arguments ask for, sized by compact JSON.
    pub(crate) fn page<T: Serialize>(&self, items: Vec<T>) -> Page<T> {
        page(items, self.offset, self.limit)
    }
}

// What an answer says when its page left items out (flattened into it): `truncated: true` and
// the `offset` that goes on; both absent when nothing was left out. Not a doc comment, as above.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Cut {
    /// True when items were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    /// The `offset` that continues the list.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<u64>,
}

/// Pages `items` (see [`Page`]); `size` tells an item's bytes in the answer.
pub(crate) fn page_by<T>(items: Vec<T>, offset: u64, limit: Option<u64>, size: impl Fn(&T) -> usize) -> Page<T> {
    let total = items.len();
    let offset = usize::try_from(offset).unwrap_or(usize::MAX).min(total);
    let mut rest = items.into_iter().skip(offset);
    let mut taken = Vec::new();
    match limit {
        Some(0) => taken.extend(rest.by_ref()),
        Some(limit) => taken.extend(rest.by_ref().take(usize::try_from(limit).unwrap_or(usize::MAX))),
        None => {
            let mut used = 0;
            for item in rest.by_ref() {
                let bytes = size(&item) + 1;
                if !taken.is_empty() && used + bytes > ANSWER_BUDGET {
                    break;
                }
                used += bytes;
                taken.push(item);
            }
        }
    }
    let end = offset + taken.len();
    Page { items: taken, next_offset: (end < total).then_some(end as u64) }
}

/// Pages serializable items by their compact JSON size.
pub(crate) fn page<T: Serialize>(items: Vec<T>, offset: u64, limit: Option<u64>) -> Page<T> {
    page_by(items, offset, limit, json_size)
}

/// An item's bytes as compact JSON.
pub(crate) fn json_size<T: Serialize>(item: &T) -> usize {
    serde_json::to_vec(item).map_or(0, |v| v.len())
}

/// The `serialized` document a commit's answer carries: always with `return_structure: true`,
/// never with `false`, and by default only for a structure of at most [`SERIALIZE_LIMIT`] objects
/// whose text fits [`DOCUMENT_BUDGET`].
pub(crate) fn serialized(structure: &KnowledgeStructure, return_structure: Option<bool>) -> Option<String> {
    match return_structure {
        Some(asked) => asked.then(|| client_document(structure)),
        None if structure.len() > SERIALIZE_LIMIT => None,
        None => Some(client_document(structure)).filter(|text| text.len() <= DOCUMENT_BUDGET),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_by_limit_offset_or_budget() {
        let items: Vec<u32> = (0..10).collect();
        let all = page(items.clone(), 0, Some(0));
        assert_eq!((all.items.len(), all.next_offset), (10, None));
        let some = page(items.clone(), 2, Some(3));
        assert_eq!((some.items, some.next_offset), (vec![2, 3, 4], Some(5)));
        let end = page(items.clone(), 8, Some(3));
        assert_eq!((end.truncated(), end.next_offset, end.items), (None, None, vec![8, 9]));
        let past = page(items.clone(), 50, None);
        assert_eq!((past.items.len(), past.next_offset), (0, None));
        let fits = page(items, 0, None);
        assert_eq!((fits.items.len(), fits.next_offset), (10, None));
        let big: Vec<String> = (0..100).map(|i| format!("{i:01000}")).collect();
        let cut = page(big, 0, None);
        assert!(cut.items.len() < 50 && cut.next_offset == Some(cut.items.len() as u64), "{}", cut.items.len());
        assert_eq!(cut.truncated(), Some(true));
        let huge = page(vec!["x".repeat(ANSWER_BUDGET * 2)], 0, None);
        assert_eq!(huge.items.len(), 1, "the first item always fits");
    }
}
