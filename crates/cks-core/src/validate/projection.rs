//! `embedding_projection` (CKS-EXT-EMBEDDING-PROJECTION): an `EmbeddingProjection` records which
//! source object it represents and where its vector lives, never the vector itself.
//!
//! Links are the `represents` relations with exactly two participants `(source, projection)`.
//! For each `EmbeddingProjection`, independently (location = the projection id):
//! 1. the number of linked sources is exactly 1, and that source exists;
//! 2. `store_ref` is truthy;
//! 3. neither `vector` nor `embedding` is present (whatever the value).

use std::collections::HashMap;

use super::pyrepr::truthy;
use super::{Diagnostic, binary, semantic_error};
use crate::structure::KnowledgeStructure;

const CODE: &str = "CKS-EXT-EMBEDDING-PROJECTION";
const PROJECTION_TYPE: &str = "EmbeddingProjection";
const REPRESENTS: &str = "represents";
const INLINE_PAYLOAD_KEYS: [&str; 2] = ["vector", "embedding"];

pub(crate) fn check(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    let mut sources_by_projection: HashMap<&str, Vec<&str>> = HashMap::new();
    for object in structure.relations() {
        let Some(relation) = object.relation() else {
            continue;
        };
        if relation.relation_type != REPRESENTS {
            continue;
        }
        if let Some((source, projection)) = binary(&relation) {
            sources_by_projection.entry(projection).or_default().push(source);
        }
    }

    for object in structure.objects() {
        if object.identity.r#type != PROJECTION_TYPE {
            continue;
        }
        let id = object.id();
        let sources = sources_by_projection.get(id).map_or(&[][..], Vec::as_slice);
        match sources {
            [source] if !structure.contains(source) => out.push(semantic_error(
                CODE,
                format!("EmbeddingProjection '{id}' references unknown source object '{source}'."),
                id,
            )),
            [_] => {}
            _ => out.push(semantic_error(
                CODE,
                format!(
                    "EmbeddingProjection '{id}' must have exactly one '{REPRESENTS}' relation to its source object \
                     (found {}).",
                    sources.len()
                ),
                id,
            )),
        }

        if !truthy(object.structure.get("store_ref")) {
            out.push(semantic_error(
                CODE,
                format!(
                    "EmbeddingProjection '{id}' must reference its payload via a non-empty 'store_ref' rather than \
                     embedding it."
                ),
                id,
            ));
        }

        let mut leaked: Vec<&str> =
            INLINE_PAYLOAD_KEYS.iter().copied().filter(|k| object.structure.contains_key(k)).collect();
        if !leaked.is_empty() {
            leaked.sort_unstable();
            out.push(semantic_error(
                CODE,
                format!(
                    "EmbeddingProjection '{id}' must not embed raw vector payloads inline ({}); store the vector \
                     externally and reference it via 'store_ref'.",
                    leaked.join(", ")
                ),
                id,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Extension;
    use super::super::test_support::*;
    use serde_json::json;

    fn run(objects: Vec<crate::object::KnowledgeObject>) -> Vec<(String, String)> {
        located(&run_ext(Extension::EmbeddingProjection, objects))
    }

    #[test]
    fn well_formed_projection_passes() {
        let objects = vec![
            node("doc"),
            obj("p", "EmbeddingProjection", json!({"store_ref": "s3://bucket/p"})),
            rel("link", &["doc", "p"], "represents"),
        ];
        assert_eq!(run(objects), []);
    }

    #[test]
    fn missing_link_store_ref_and_inline_vector() {
        let objects =
            vec![obj("p", "EmbeddingProjection", json!({"store_ref": "", "vector": null, "embedding": [0.1]}))];
        assert_eq!(
            run(objects),
            pairs(&[
                (
                    "p",
                    "EmbeddingProjection 'p' must have exactly one 'represents' relation to its source object (found 0)."
                ),
                (
                    "p",
                    "EmbeddingProjection 'p' must not embed raw vector payloads inline (embedding, vector); store the vector externally and reference it via 'store_ref'."
                ),
                (
                    "p",
                    "EmbeddingProjection 'p' must reference its payload via a non-empty 'store_ref' rather than embedding it."
                ),
            ])
        );
    }

    #[test]
    fn link_direction_count_and_unknown_source() {
        // Reversed link does not count; two links are too many.
        let objects = vec![
            node("a"),
            node("b"),
            obj("p", "EmbeddingProjection", json!({"store_ref": "x"})),
            obj("q", "EmbeddingProjection", json!({"store_ref": "y"})),
            rel("l1", &["p", "a"], "represents"),
            rel("l2", &["a", "q"], "represents"),
            rel("l3", &["b", "q"], "represents"),
        ];
        assert_eq!(
            run(objects),
            pairs(&[
                (
                    "p",
                    "EmbeddingProjection 'p' must have exactly one 'represents' relation to its source object (found 0)."
                ),
                (
                    "q",
                    "EmbeddingProjection 'q' must have exactly one 'represents' relation to its source object (found 2)."
                ),
            ])
        );
        let dangling =
            vec![obj("p", "EmbeddingProjection", json!({"store_ref": "x"})), rel("l", &["ghost", "p"], "represents")];
        assert_eq!(run(dangling), pairs(&[("p", "EmbeddingProjection 'p' references unknown source object 'ghost'.")]));
    }
}
