//! Validation of a [`KnowledgeStructure`]: the always-on constraints, the twelve opt-in extension
//! constraints, and an incremental always-on check for the commit path.
//!
//! This is a port of the Python reference validator (`cks.validate`), with the same codes,
//! severities, locations, message wording and ordering.
//!
//! # Pipeline
//!
//! [`validate`] runs three fixed stages and never stops early: **structural**
//! (`CKS-STRUCT-UNIQUE-IDENTITY`, `CKS-STRUCT-DANGLING-REF`), then **semantic**
//! (`CKS-SEM-DERIVATION-ARITY`, `CKS-SEM-CYCLE`, then every requested extension in the order
//! requested, each once), then **constraints** (empty). The final list is sorted by severity rank
//! ascending (information, warning, error), then code, then location (`""` when none), then
//! message; the sort is stable and nothing is deduplicated. A report is valid when every
//! non-information diagnostic ranks below `min_severity` (with the default `Error`: no errors).
//!
//! `CKS-STRUCT-UNIQUE-IDENTITY` is evaluated but can never fire here: a [`KnowledgeStructure`] is
//! keyed by id, so duplicate ids are rejected when it is built (as the reference's parser and
//! constructor also do). The code is kept for reporting and for parsers that build diagnostics.
//!
//! # Always-on rules (severity error)
//!
//! | code | stage | rule |
//! |---|---|---|
//! | `CKS-STRUCT-UNIQUE-IDENTITY` | structural | every repeated id is an error (unreachable on a `KnowledgeStructure`) |
//! | `CKS-STRUCT-DANGLING-REF` | structural | every participant of every relation names an existing object; one error per missing occurrence, at the relation |
//! | `CKS-SEM-DERIVATION-ARITY` | semantic | a `derives` relation has exactly two participants |
//! | `CKS-SEM-CYCLE` | semantic | binary `derives` edges between existing objects are acyclic; one error per DFS back edge, at its tail |
//!
//! # Opt-in extensions (all semantic stage)
//!
//! | name | code | severity | rule |
//! |---|---|---|---|
//! | `embedding_projection` | `CKS-EXT-EMBEDDING-PROJECTION` | error | an `EmbeddingProjection` has exactly one `represents (source, projection)` link to an existing source, a truthy `store_ref`, and no `vector`/`embedding` key |
//! | `verification_record` | `CKS-EXT-VERIFICATION-RECORD` | error | a `VerificationRecord` has exactly one `verified_by (subject, record)` link to an existing subject, an ISO 8601 `checked_at`, a known `checked_via`, an integer `http_status` in 100–599 when present, and no judgment keys |
//! | `type_hierarchy` | `CKS-EXT-TYPE-HIERARCHY-CYCLE` | error | `TypeDefinition` `parent_type` links form no cycle; one error per type on a cycle, at its first declaration |
//! | `relation_type` | `CKS-EXT-RELATION-TYPE` | error | a binary relation whose type has a `TypeRule` (last wins) connects a source and target whose types are allowed or declared subtypes of allowed ones |
//! | `mutual_exclusion` | `CKS-EXT-MUTUAL-EXCLUSION` | error | two relation types paired by a `MutualExclusionRule` never connect the same ordered pair |
//! | `functional_relation` | `CKS-EXT-FUNCTIONAL-RELATION` | error | a relation type named by a `FunctionalRelationRule` has at most one distinct target per source |
//! | `inference_referential_integrity` | `CKS-EXT-INFERENCE-REFERENTIAL-INTEGRITY` | error | an `InferenceStep`'s `premises` and non-null `conclusion` name existing objects |
//! | `confidence_bounds` | `CKS-EXT-CONFIDENCE-BOUNDS` | error | an `InferenceStep`'s `confidence`, when present, is a non-bool number in [0, 1] |
//! | `supersession_chain` | `CKS-EXT-SUPERSESSION-CHAIN` | error | a truthy `superseded_by` names an existing `InferenceStep` with an equal `conclusion`, and supersession forms no cycle |
//! | `inference_confidence_conflict` | `CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT` | warning | active `InferenceStep`s (own `superseded_by` falsy) sharing a conclusion agree on `confidence` |
//! | `stale_premise` | `CKS-EXT-STALE-PREMISE` | warning | an active `InferenceStep` does not cite, among its `premises`, an `InferenceStep` that has itself been superseded |
//! | `temporal_validity` | `CKS-EXT-TEMPORAL-VALIDITY` | warning / error | any object's non-null `valid_until` parses (error otherwise) and is not before `now` (warning otherwise) |
//! | `claim_integrity` | `CKS-EXT-CLAIM-INTEGRITY` | error | a `Claim` has well-typed required fields, valid timestamps and id lists, resolving references, claim-typed support links, no self-reference and no id both supporting and contradicting |
//!
//! # Decisions taken where the reference crashes or is unspecified
//!
//! - Values Python cannot hash (lists, objects) used as ids (`premises` items, `superseded_by`,
//!   `conclusion`) are reported as unknown; as `checked_via` or `status` they are reported as not
//!   recognised. Only string `type_name`, `parent_type`, `relation_type`, `relation_type_a/b`
//!   values are read from rule objects (others can never match a relation or object type).
//! - A non-list `premises` means no premises; a non-list `allowed_source_types` /
//!   `allowed_target_types` means no restriction (Python would iterate a string by character).
//! - `inference_confidence_conflict` only groups string conclusions (Python cannot sort mixed keys).
//! - `claim_integrity` has the code `CKS-EXT-CLAIM-INTEGRITY` and the name `claim_integrity`.
//! - `temporal_validity` reads the clock from [`ValidationOptions::now`] (default: `now_utc`).
//! - The cks-mcp rule that forces `verification_record` when a `VerificationRecord` exists is a
//!   server concern and is not applied here.

mod builtin;
mod claim;
mod contradiction;
mod dates;
mod freshness;
mod ontology;
mod projection;
pub mod provenance;
pub mod pyrepr;
mod reasoning;
mod temporal;
mod verification;

use serde::Serialize;
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::fmt;
use time::OffsetDateTime;

use crate::object::RelationView;
use crate::structure::KnowledgeStructure;

pub use builtin::check_changes;
pub use contradiction::{Contradiction, ENDED_BY, contradictions, ended};
pub use freshness::{ProvenanceFreshness, StaleRecord, provenance_freshness};
pub use provenance::{ProvenanceKey, check_provenance};
pub use reasoning::{confidence_conflicts, stale_premises};
pub use temporal::{ExpiryIndex, expired_and_malformed, next_expiry, valid_until_instant};

/// Code of the duplicate-identity check (cannot fire on a [`KnowledgeStructure`]).
pub const UNIQUE_IDENTITY: &str = "CKS-STRUCT-UNIQUE-IDENTITY";
/// Code of the dangling-participant check.
pub const DANGLING_REF: &str = "CKS-STRUCT-DANGLING-REF";
/// Code of the `derives` arity check.
pub const DERIVATION_ARITY: &str = "CKS-SEM-DERIVATION-ARITY";
/// Code of the `derives` cycle check.
pub const CYCLE: &str = "CKS-SEM-CYCLE";

/// The always-on codes, in run order.
pub const ALWAYS_ON: [&str; 4] = [UNIQUE_IDENTITY, DANGLING_REF, DERIVATION_ARITY, CYCLE];

/// Diagnostic severity, ordered by rank: information < warning < error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Information,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Information => "information",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }

    /// The reference's priority: information 0, warning 1, error 2.
    pub fn rank(self) -> u8 {
        match self {
            Severity::Information => 0,
            Severity::Warning => 1,
            Severity::Error => 2,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The validation stage a constraint belongs to; stages run in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Structural,
    Semantic,
    Constraints,
}

/// One finding of the validator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnostic {
    pub code: String,
    pub severity: Severity,
    pub message: String,
    pub location: Option<String>,
    pub stage: Stage,
    pub metadata: Map<String, Value>,
}

impl Diagnostic {
    pub fn new(
        code: &str,
        severity: Severity,
        stage: Stage,
        message: impl Into<String>,
        location: Option<&str>,
    ) -> Self {
        Diagnostic {
            code: code.to_owned(),
            severity,
            message: message.into(),
            location: location.map(str::to_owned),
            stage,
            metadata: Map::new(),
        }
    }

    /// The reference's sort key: `(severity rank, code, location or "", message)`.
    fn sort_cmp(&self, other: &Self) -> Ordering {
        self.severity
            .cmp(&other.severity)
            .then_with(|| self.code.cmp(&other.code))
            .then_with(|| self.location.as_deref().unwrap_or("").cmp(other.location.as_deref().unwrap_or("")))
            .then_with(|| self.message.cmp(&other.message))
    }
}

/// An error diagnostic of the semantic stage (what every extension emits by default).
pub(crate) fn semantic_error(code: &str, message: String, location: &str) -> Diagnostic {
    Diagnostic::new(code, Severity::Error, Stage::Semantic, message, Some(location))
}

/// `(source, target)` of a relation with exactly two participants, borrowed from the object
/// (unlike [`RelationView::source_target`], which borrows the view).
pub(crate) fn binary<'a>(relation: &RelationView<'a>) -> Option<(&'a str, &'a str)> {
    match relation.participants.as_slice() {
        [source, target] => Some((source, target)),
        _ => None,
    }
}

/// Sorts diagnostics the way the reference does (stable).
pub fn sort_diagnostics(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(Diagnostic::sort_cmp);
}

/// The opt-in extension constraints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Extension {
    EmbeddingProjection,
    VerificationRecord,
    TypeHierarchy,
    RelationType,
    MutualExclusion,
    FunctionalRelation,
    InferenceReferentialIntegrity,
    ConfidenceBounds,
    SupersessionChain,
    InferenceConfidenceConflict,
    StalePremise,
    TemporalValidity,
    ClaimIntegrity,
}

impl Extension {
    pub const ALL: [Extension; 13] = [
        Extension::EmbeddingProjection,
        Extension::VerificationRecord,
        Extension::TypeHierarchy,
        Extension::RelationType,
        Extension::MutualExclusion,
        Extension::FunctionalRelation,
        Extension::InferenceReferentialIntegrity,
        Extension::ConfidenceBounds,
        Extension::SupersessionChain,
        Extension::InferenceConfidenceConflict,
        Extension::StalePremise,
        Extension::TemporalValidity,
        Extension::ClaimIntegrity,
    ];

    /// The snake_case name callers use to request the extension.
    pub fn name(self) -> &'static str {
        match self {
            Extension::EmbeddingProjection => "embedding_projection",
            Extension::VerificationRecord => "verification_record",
            Extension::TypeHierarchy => "type_hierarchy",
            Extension::RelationType => "relation_type",
            Extension::MutualExclusion => "mutual_exclusion",
            Extension::FunctionalRelation => "functional_relation",
            Extension::InferenceReferentialIntegrity => "inference_referential_integrity",
            Extension::ConfidenceBounds => "confidence_bounds",
            Extension::SupersessionChain => "supersession_chain",
            Extension::InferenceConfidenceConflict => "inference_confidence_conflict",
            Extension::StalePremise => "stale_premise",
            Extension::TemporalValidity => "temporal_validity",
            Extension::ClaimIntegrity => "claim_integrity",
        }
    }

    /// The diagnostic code the extension emits.
    pub fn code(self) -> &'static str {
        match self {
            Extension::EmbeddingProjection => "CKS-EXT-EMBEDDING-PROJECTION",
            Extension::VerificationRecord => "CKS-EXT-VERIFICATION-RECORD",
            Extension::TypeHierarchy => "CKS-EXT-TYPE-HIERARCHY-CYCLE",
            Extension::RelationType => "CKS-EXT-RELATION-TYPE",
            Extension::MutualExclusion => "CKS-EXT-MUTUAL-EXCLUSION",
            Extension::FunctionalRelation => "CKS-EXT-FUNCTIONAL-RELATION",
            Extension::InferenceReferentialIntegrity => "CKS-EXT-INFERENCE-REFERENTIAL-INTEGRITY",
            Extension::ConfidenceBounds => "CKS-EXT-CONFIDENCE-BOUNDS",
            Extension::SupersessionChain => "CKS-EXT-SUPERSESSION-CHAIN",
            Extension::InferenceConfidenceConflict => "CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT",
            Extension::StalePremise => "CKS-EXT-STALE-PREMISE",
            Extension::TemporalValidity => "CKS-EXT-TEMPORAL-VALIDITY",
            Extension::ClaimIntegrity => "CKS-EXT-CLAIM-INTEGRITY",
        }
    }

    /// Looks an extension up by name or by code (exact, case-sensitive).
    pub fn from_name_or_code(text: &str) -> Option<Extension> {
        Extension::ALL.into_iter().find(|e| e.name() == text || e.code() == text)
    }

    /// Resolves requested names (or codes). Duplicates are kept once, in first-request order;
    /// any unknown name fails the whole request, listing the unknown names in request order.
    pub fn parse_list(names: &[impl AsRef<str>]) -> Result<Vec<Extension>, UnknownExtension> {
        let mut resolved = Vec::new();
        let mut unknown = Vec::new();
        for name in names {
            match Extension::from_name_or_code(name.as_ref()) {
                Some(ext) if !resolved.contains(&ext) => resolved.push(ext),
                Some(_) => {}
                None => unknown.push(name.as_ref().to_owned()),
            }
        }
        if unknown.is_empty() { Ok(resolved) } else { Err(UnknownExtension { unknown }) }
    }

    fn run(self, structure: &KnowledgeStructure, now: &mut Option<OffsetDateTime>, out: &mut Vec<Diagnostic>) {
        match self {
            Extension::EmbeddingProjection => projection::check(structure, out),
            Extension::VerificationRecord => verification::check(structure, out),
            Extension::TypeHierarchy => ontology::check_type_hierarchy(structure, out),
            Extension::RelationType => ontology::check_relation_types(structure, out),
            Extension::MutualExclusion => contradiction::check_mutual_exclusion(structure, out),
            Extension::FunctionalRelation => contradiction::check_functional_relations(structure, out),
            Extension::InferenceReferentialIntegrity => reasoning::check_referential_integrity(structure, out),
            Extension::ConfidenceBounds => reasoning::check_confidence_bounds(structure, out),
            Extension::SupersessionChain => reasoning::check_supersession_chain(structure, out),
            Extension::InferenceConfidenceConflict => reasoning::check_confidence_conflict(structure, out),
            Extension::StalePremise => reasoning::check_stale_premises(structure, out),
            Extension::TemporalValidity => {
                let now = *now.get_or_insert_with(OffsetDateTime::now_utc);
                temporal::check(structure, now, out);
            }
            Extension::ClaimIntegrity => claim::check(structure, out),
        }
    }
}

impl fmt::Display for Extension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A request named extensions that do not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownExtension {
    /// The unknown names, in request order.
    pub unknown: Vec<String>,
}

impl fmt::Display for UnknownExtension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut available: Vec<&str> = Extension::ALL.iter().map(|e| e.name()).collect();
        available.sort_unstable();
        write!(
            f,
            "Unknown validation extension(s): {}. Available extensions: {}.",
            self.unknown.join(", "),
            available.join(", ")
        )
    }
}

impl std::error::Error for UnknownExtension {}

/// What to validate and how to judge it.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidationOptions {
    /// Extensions to run after the always-on constraints (duplicates run once).
    pub extensions: Vec<Extension>,
    /// The severity at which a diagnostic makes the structure invalid (see [`ValidationReport::is_valid`]).
    pub min_severity: Severity,
    /// The clock for `temporal_validity`; `None` reads `OffsetDateTime::now_utc()`.
    pub now: Option<OffsetDateTime>,
}

impl Default for ValidationOptions {
    fn default() -> Self {
        ValidationOptions { extensions: Vec::new(), min_severity: Severity::Error, now: None }
    }
}

impl ValidationOptions {
    /// Options running the given extensions, with the other defaults.
    pub fn with_extensions(extensions: impl IntoIterator<Item = Extension>) -> Self {
        ValidationOptions { extensions: extensions.into_iter().collect(), ..Self::default() }
    }
}

/// The outcome of [`validate`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ValidationReport {
    /// Sorted diagnostics (see the module docs).
    pub diagnostics: Vec<Diagnostic>,
    /// The codes of the constraints that ran, in run order.
    pub evaluated: Vec<&'static str>,
    /// The `min_severity` of the options the report was made with; used by [`Self::is_valid`].
    pub min_severity: Severity,
}

impl ValidationReport {
    /// Valid under the options' `min_severity` (by default: no error diagnostics).
    pub fn is_valid(&self) -> bool {
        self.is_valid_at(self.min_severity)
    }

    /// The reference rule: every diagnostic that is not information ranks below `min_severity`.
    /// (So `Information` and `Warning` both reject warnings; information never invalidates.)
    pub fn is_valid_at(&self, min_severity: Severity) -> bool {
        self.diagnostics.iter().filter(|d| d.severity != Severity::Information).all(|d| d.severity < min_severity)
    }

    /// The error diagnostics, in report order.
    pub fn errors(&self) -> Vec<&Diagnostic> {
        self.diagnostics.iter().filter(|d| d.severity == Severity::Error).collect()
    }
}

/// A structure whose validation found no error: what a session may be made of without checking
/// it again. Only [`Validated::check`] makes one, so the report and the structure always agree.
#[derive(Debug)]
pub struct Validated(KnowledgeStructure);

impl Validated {
    /// Validates `structure` (see [`validate`]). With the report comes the structure, as
    /// `Validated` when no diagnostic is an error — whatever the options' `min_severity`, so that
    /// it also passed the default rule — or handed back as it was.
    pub fn check(
        structure: KnowledgeStructure,
        options: &ValidationOptions,
    ) -> (ValidationReport, Result<Validated, KnowledgeStructure>) {
        let report = validate(&structure, options);
        let checked = if report.is_valid_at(Severity::Error) { Ok(Validated(structure)) } else { Err(structure) };
        (report, checked)
    }

    pub fn structure(&self) -> &KnowledgeStructure {
        &self.0
    }

    pub fn into_inner(self) -> KnowledgeStructure {
        self.0
    }
}

/// Validates a whole structure: all always-on constraints plus the requested extensions.
pub fn validate(structure: &KnowledgeStructure, options: &ValidationOptions) -> ValidationReport {
    let mut diagnostics = Vec::new();
    let mut evaluated = Vec::new();

    // Structural stage. Ids are unique by construction, so UNIQUE_IDENTITY has nothing to find.
    evaluated.push(UNIQUE_IDENTITY);
    evaluated.push(DANGLING_REF);
    builtin::check_dangling_refs(structure, &mut diagnostics);

    // Semantic stage: the built-ins, then the extensions in request order, each once.
    evaluated.push(DERIVATION_ARITY);
    builtin::check_derivation_arity(structure, &mut diagnostics);
    evaluated.push(CYCLE);
    builtin::check_derivation_cycles(structure, &mut diagnostics);
    let mut now = options.now;
    let mut ran: Vec<Extension> = Vec::new();
    for &extension in &options.extensions {
        if ran.contains(&extension) {
            continue;
        }
        ran.push(extension);
        evaluated.push(extension.code());
        extension.run(structure, &mut now, &mut diagnostics);
    }

    // Constraints stage: no constraint is registered there.

    sort_diagnostics(&mut diagnostics);
    ValidationReport { diagnostics, evaluated, min_severity: options.min_severity }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Builders shared by the validation tests.

    use super::*;
    use crate::object::{Identity, KnowledgeObject};

    pub(crate) fn obj(id: &str, ty: &str, structure: Value) -> KnowledgeObject {
        let structure = match structure {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        KnowledgeObject::new(Identity::new(id, ty, id), structure)
    }

    pub(crate) fn node(id: &str) -> KnowledgeObject {
        obj(id, "Node", Value::Object(Map::new()))
    }

    pub(crate) fn rel(id: &str, participants: &[&str], relation_type: &str) -> KnowledgeObject {
        obj(id, "Relation", serde_json::json!({"participants": participants, "relation_type": relation_type}))
    }

    pub(crate) fn structure(objects: Vec<KnowledgeObject>) -> KnowledgeStructure {
        KnowledgeStructure::from_objects(objects).expect("test structure is well-formed")
    }

    /// Runs one extension (plus the always-on constraints) and keeps only its diagnostics.
    pub(crate) fn run_ext(extension: Extension, objects: Vec<KnowledgeObject>) -> Vec<Diagnostic> {
        let report = validate(&structure(objects), &ValidationOptions::with_extensions([extension]));
        report.diagnostics.into_iter().filter(|d| d.code == extension.code()).collect()
    }

    /// `(location, message)` pairs, for compact assertions.
    pub(crate) fn located(diagnostics: &[Diagnostic]) -> Vec<(String, String)> {
        diagnostics.iter().map(|d| (d.location.clone().unwrap_or_default(), d.message.clone())).collect()
    }

    pub(crate) fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items.iter().map(|(l, m)| ((*l).to_owned(), (*m).to_owned())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_structure_without_errors_is_validated_and_a_rejected_one_comes_back_whole() {
        let valid = structure(vec![node("a"), node("b"), rel("r", &["a", "b"], "knows")]);
        let (report, checked) = Validated::check(valid.clone(), &ValidationOptions::default());
        assert!(report.is_valid());
        assert_eq!(checked.expect("validated").into_inner(), valid);

        let dangling = structure(vec![node("a"), rel("r", &["a", "missing"], "knows")]);
        let (report, checked) = Validated::check(dangling.clone(), &ValidationOptions::default());
        assert!(!report.errors().is_empty());
        assert_eq!(checked.expect_err("rejected"), dangling);
    }

    #[test]
    fn extension_names_and_codes_round_trip() {
        for extension in Extension::ALL {
            assert_eq!(Extension::from_name_or_code(extension.name()), Some(extension));
            assert_eq!(Extension::from_name_or_code(extension.code()), Some(extension));
        }
        assert_eq!(Extension::TypeHierarchy.code(), "CKS-EXT-TYPE-HIERARCHY-CYCLE");
        assert_eq!(Extension::from_name_or_code("Type_Hierarchy"), None);
    }

    #[test]
    fn parse_list_accepts_names_and_codes_and_dedups() {
        let parsed =
            Extension::parse_list(&["claim_integrity", "CKS-EXT-CLAIM-INTEGRITY", "type_hierarchy", "claim_integrity"]);
        assert_eq!(parsed, Ok(vec![Extension::ClaimIntegrity, Extension::TypeHierarchy]));
        let empty: [&str; 0] = [];
        assert_eq!(Extension::parse_list(&empty), Ok(vec![]));
    }

    #[test]
    fn unknown_extension_error_text() {
        let err = Extension::parse_list(&["zeta", "claim_integrity", "alpha"]).unwrap_err();
        assert_eq!(err.unknown, ["zeta", "alpha"]);
        assert_eq!(
            err.to_string(),
            "Unknown validation extension(s): zeta, alpha. Available extensions: claim_integrity, \
             confidence_bounds, embedding_projection, functional_relation, inference_confidence_conflict, \
             inference_referential_integrity, mutual_exclusion, relation_type, stale_premise, supersession_chain, \
             temporal_validity, type_hierarchy, verification_record."
        );
    }

    #[test]
    fn severity_order_strings_and_serialization() {
        assert!(Severity::Information < Severity::Warning && Severity::Warning < Severity::Error);
        assert_eq!(Severity::Warning.as_str(), "warning");
        assert_eq!(serde_json::to_value(Severity::Information).unwrap(), json!("information"));
        assert_eq!(serde_json::to_value(Severity::Error).unwrap(), json!("error"));
        let d = Diagnostic::new(CYCLE, Severity::Error, Stage::Semantic, "m", None);
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            json!({"code": CYCLE, "severity": "error", "message": "m", "location": null, "stage": "semantic", "metadata": {}})
        );
    }

    #[test]
    fn diagnostics_sort_by_severity_code_location_message() {
        let mk = |code: &str, sev, loc: Option<&str>, msg: &str| Diagnostic::new(code, sev, Stage::Semantic, msg, loc);
        let mut ds = vec![
            mk("B", Severity::Error, Some("x"), "m"),
            mk("A", Severity::Error, Some("y"), "m"),
            mk("A", Severity::Error, Some("x"), "n"),
            mk("A", Severity::Error, Some("x"), "m"),
            mk("A", Severity::Error, None, "z"),
            mk("Z", Severity::Warning, Some("a"), "m"),
            mk("Z", Severity::Information, Some("a"), "m"),
        ];
        sort_diagnostics(&mut ds);
        let keys: Vec<_> =
            ds.iter().map(|d| (d.severity, d.code.as_str(), d.location.as_deref(), d.message.as_str())).collect();
        assert_eq!(
            keys,
            [
                (Severity::Information, "Z", Some("a"), "m"),
                (Severity::Warning, "Z", Some("a"), "m"),
                (Severity::Error, "A", None, "z"),
                (Severity::Error, "A", Some("x"), "m"),
                (Severity::Error, "A", Some("x"), "n"),
                (Severity::Error, "A", Some("y"), "m"),
                (Severity::Error, "B", Some("x"), "m"),
            ]
        );
    }

    #[test]
    fn validate_runs_every_stage_and_sorts_the_result() {
        // A dangling participant (structural) and an expired value (warning) and a cycle (semantic).
        let objects = vec![
            obj("a", "Node", json!({"valid_until": "2000-01-01"})),
            node("b"),
            rel("r1", &["a", "b"], "derives"),
            rel("r2", &["b", "a"], "derives"),
            rel("r3", &["a", "ghost"], "mentions"),
        ];
        let options = ValidationOptions {
            extensions: vec![Extension::TemporalValidity, Extension::TemporalValidity],
            ..ValidationOptions::default()
        };
        let report = validate(&structure(objects), &options);
        assert_eq!(
            report.evaluated,
            [UNIQUE_IDENTITY, DANGLING_REF, DERIVATION_ARITY, CYCLE, "CKS-EXT-TEMPORAL-VALIDITY"]
        );
        let got: Vec<_> =
            report.diagnostics.iter().map(|d| (d.code.as_str(), d.location.as_deref(), d.stage)).collect();
        assert_eq!(
            got,
            [
                ("CKS-EXT-TEMPORAL-VALIDITY", Some("a"), Stage::Semantic),
                (CYCLE, Some("b"), Stage::Semantic),
                (DANGLING_REF, Some("r3"), Stage::Structural),
            ]
        );
        assert!(!report.is_valid());
        assert_eq!(report.errors().len(), 2);
    }

    #[test]
    fn validity_follows_min_severity() {
        let warning_only = vec![obj("a", "Node", json!({"valid_until": "2000-01-01"}))];
        let options = ValidationOptions::with_extensions([Extension::TemporalValidity]);
        let report = validate(&structure(warning_only), &options);
        assert_eq!(report.diagnostics.len(), 1);
        assert!(report.is_valid());
        assert!(report.is_valid_at(Severity::Error));
        assert!(!report.is_valid_at(Severity::Warning));
        assert!(!report.is_valid_at(Severity::Information));
        let strict = ValidationOptions { min_severity: Severity::Warning, ..options };
        assert!(
            !validate(&structure(vec![obj("a", "Node", json!({"valid_until": "2000-01-01"}))]), &strict).is_valid()
        );
        let info = ValidationReport {
            diagnostics: vec![Diagnostic::new("X", Severity::Information, Stage::Semantic, "i", None)],
            evaluated: vec![],
            min_severity: Severity::Information,
        };
        assert!(info.is_valid(), "information never invalidates");
    }

    #[test]
    fn empty_structure_is_valid_with_every_extension() {
        let report = validate(&KnowledgeStructure::new(), &ValidationOptions::with_extensions(Extension::ALL));
        assert!(report.diagnostics.is_empty());
        assert_eq!(report.evaluated.len(), 4 + Extension::ALL.len());
    }
}
