//! Component versions: whether a registered graph still matches the code it describes. Each
//! `Component` object that records a `version` is compared with the version its code publishes,
//! and the outcome of the last check of each graph is kept in the store, so that
//! `check_graph_health` and the `graph_health` sweeper score from it without fetching anything.
//!
//! Reading a published version needs the network, which the runtime never touches: a
//! [`VersionSource`] given from above (the tools crate's, over the guarded fetcher) does it. The
//! comparison and the record are here, so the tool, the health score and the sweepers agree.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use cks_core::{KnowledgeStructure, Structure};

use crate::error::RuntimeError;
use crate::gallery::GraphEntry;
use crate::runtime::Runtime;
use crate::store::StoreError;

/// The type of the objects checked.
pub const COMPONENT_TYPE: &str = "Component";

/// The setting that keeps a graph's last check is this prefix and the graph's name.
const RECORD_PREFIX: &str = "component_versions.";

/// A `Component` object that records a version.
#[derive(Clone, Debug, PartialEq)]
pub struct Component {
    pub object_id: String,
    /// Its name, or its id when the name is empty: what checks report it as.
    pub name: String,
    /// The version recorded on the object, whatever its JSON type.
    pub version: Value,
    pub structure: Structure,
}

/// Every `Component` object of `structure` with a `version` key, in the structure's order.
pub fn components(structure: &KnowledgeStructure) -> Vec<Component> {
    structure
        .objects()
        .filter(|o| o.identity.r#type == COMPONENT_TYPE)
        .filter_map(|o| {
            let version = o.structure.get("version")?.clone();
            let name = if o.identity.name.is_empty() { &o.identity.id } else { &o.identity.name };
            Some(Component {
                object_id: o.id().to_owned(),
                name: name.to_string(),
                version,
                structure: o.structure.clone(),
            })
        })
        .collect()
}

/// How a component's recorded version stands against the published one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionStatus {
    UpToDate,
    Outdated,
    /// The graph records a newer version than the code publishes.
    Ahead,
    /// No repository or version file could be named for it.
    UnknownRepo,
    /// The version file could not be fetched or held no version.
    FetchFailed,
}

/// What a [`VersionSource`] found for one component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released {
    /// The published version and the URL of the file it was read from.
    Found { version: String, url: String },
    /// Nothing names where the component's code is; the message says what is missing.
    UnknownRepo(String),
    /// Every candidate file failed; the message says how the last one did.
    Failed(String),
}

/// Reads the version a component's code publishes.
#[async_trait]
pub trait VersionSource: Send + Sync {
    async fn released(&self, component: &Component) -> Released;
}

/// One component's check, as `check_component_versions` reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComponentCheck {
    pub component: String,
    pub graph_version: Value,
    pub actual_version: Option<String>,
    pub status: VersionStatus,
    /// Why no version was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The file the published version was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_url: Option<String>,
}

impl ComponentCheck {
    pub fn new(component: &Component, released: Released) -> Self {
        let (actual_version, status, message, source_url) = match released {
            Released::Found { version, url } => {
                let status = compare(&component.version, &version);
                (Some(version), status, None, Some(url))
            }
            Released::UnknownRepo(message) => (None, VersionStatus::UnknownRepo, Some(message), None),
            Released::Failed(message) => (None, VersionStatus::FetchFailed, Some(message), None),
        };
        ComponentCheck {
            component: component.name.clone(),
            graph_version: component.version.clone(),
            actual_version,
            status,
            message,
            source_url,
        }
    }
}

/// Compares a recorded version with a published one as the reference does: leading `v`s are
/// ignored, equal texts are current, dotted numbers compare number by number, and two different
/// texts that are not both dotted numbers count as outdated (the case the check exists to catch).
/// A recorded version that is not a string never equals a published one.
pub fn compare(graph_version: &Value, actual: &str) -> VersionStatus {
    let actual = actual.trim_start_matches('v');
    let Value::String(recorded) = graph_version else { return VersionStatus::Outdated };
    let recorded = recorded.trim_start_matches('v');
    if recorded == actual {
        return VersionStatus::UpToDate;
    }
    match (numbers(recorded), numbers(actual)) {
        (Some(recorded), Some(actual)) => match recorded.cmp(&actual) {
            std::cmp::Ordering::Less => VersionStatus::Outdated,
            std::cmp::Ordering::Greater => VersionStatus::Ahead,
            std::cmp::Ordering::Equal => VersionStatus::UpToDate,
        },
        _ => VersionStatus::Outdated,
    }
}

/// A version of dotted whole numbers (`1.21.0`), or `None` for anything else (`1.2.0-rc1`).
fn numbers(version: &str) -> Option<Vec<i128>> {
    version.split('.').map(|part| part.trim().parse().ok()).collect()
}

/// The last check of a registered graph's components.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// When the check ran (RFC 3339, UTC).
    pub checked_at: String,
    /// The session the graph was registered with then.
    pub session_id: String,
    pub components: Vec<ComponentCheck>,
}

impl VersionRecord {
    /// How many of `components` (the graph as it is now) record the version their code was found
    /// to publish: a component changed since the check is judged by what it records now, one the
    /// check did not find counts as not current.
    pub fn up_to_date(&self, components: &[Component]) -> usize {
        components
            .iter()
            .filter(|component| {
                let published = self
                    .components
                    .iter()
                    .find(|c| c.component == component.name && c.actual_version.is_some())
                    .and_then(|c| c.actual_version.as_deref());
                published.is_some_and(|v| compare(&component.version, v) == VersionStatus::UpToDate)
            })
            .count()
    }

    /// The checks whose component was outdated.
    pub fn outdated(&self) -> impl Iterator<Item = &ComponentCheck> {
        self.components.iter().filter(|c| c.status == VersionStatus::Outdated)
    }
}

impl Runtime {
    /// Checks every versioned `Component` of the graph registered as `entry` against `source`, one
    /// after the other, and records the outcome under the graph's name. `None` when the graph's
    /// session is closed or gone (nothing is recorded then).
    pub async fn check_component_versions(
        &self,
        entry: &GraphEntry,
        source: &dyn VersionSource,
    ) -> Result<Option<VersionRecord>, RuntimeError> {
        let Some(found) = self.graph_components(&entry.session_id).await? else { return Ok(None) };
        let mut checks = Vec::with_capacity(found.len());
        for component in &found {
            checks.push(ComponentCheck::new(component, source.released(component).await));
        }
        let record = VersionRecord {
            checked_at: crate::runtime::now(),
            session_id: entry.session_id.clone(),
            components: checks,
        };
        let text =
            serde_json::to_string(&record).map_err(|e| RuntimeError::Store(StoreError::Backend(e.to_string())))?;
        self.store().save_setting(&format!("{RECORD_PREFIX}{}", entry.name), &text).await?;
        Ok(Some(record))
    }

    /// The versioned components of an open session; `None` when it is closed or gone.
    pub async fn graph_components(&self, session_id: &str) -> Result<Option<Vec<Component>>, RuntimeError> {
        match self.read(session_id, |structure, info| (!info.closed).then(|| components(structure))).await {
            Ok(found) => Ok(found),
            Err(RuntimeError::SessionNotFound(_) | RuntimeError::SessionClosed(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The last check recorded for the graph registered as `name`.
    pub async fn recorded_versions(&self, name: &str) -> Result<Option<VersionRecord>, RuntimeError> {
        let text = self.store().load_setting(&format!("{RECORD_PREFIX}{name}")).await?;
        Ok(text.and_then(|text| decode(name, &text)))
    }

    /// Every graph's last recorded check, by graph name (one read).
    pub async fn all_recorded_versions(&self) -> Result<HashMap<String, VersionRecord>, RuntimeError> {
        let settings = self.store().list_settings(RECORD_PREFIX).await?;
        Ok(settings
            .into_iter()
            .filter_map(|(key, text)| {
                let name = key.strip_prefix(RECORD_PREFIX)?.to_owned();
                let record = decode(&name, &text)?;
                Some((name, record))
            })
            .collect())
    }
}

/// A stored record, or `None` (logged) when another writer left something unreadable: the graph
/// then counts as never checked.
fn decode(name: &str, text: &str) -> Option<VersionRecord> {
    serde_json::from_str(text)
        .inspect_err(|e| tracing::warn!(graph = name, error = %e, "an unreadable component version record is ignored"))
        .ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn compares_as_the_reference() {
        use VersionStatus::*;
        let cases = [
            (json!("1.2.0"), "1.2.0", UpToDate),
            (json!("v1.2.0"), "1.2.0", UpToDate),
            (json!("1.2"), "1.2.0", Outdated),
            (json!("1.10.0"), "1.9.3", Ahead),
            (json!("1.9.3"), "1.10.0", Outdated),
            (json!("1.2.0"), "1.02.0", UpToDate),
            (json!("1.2.0-rc1"), "1.2.0", Outdated),
            (json!("2.0-beta"), "1.0", Outdated),
            (json!(1.2), "1.2", Outdated),
            (json!(null), "1.2", Outdated),
        ];
        for (recorded, published, expected) in cases {
            assert_eq!(compare(&recorded, published), expected, "{recorded} against {published}");
        }
    }

    #[test]
    fn counts_current_components_by_what_they_record_now() {
        let structure = cks_core::json::parse_value(json!({"objects": [
            {"identity": {"id": "a", "type": "Component", "name": "alpha"}, "structure": {"version": "1.0"}},
            {"identity": {"id": "b", "type": "Component", "name": ""}, "structure": {"version": "2.0"}},
            {"identity": {"id": "c", "type": "Component", "name": "gamma"}, "structure": {}},
            {"identity": {"id": "d", "type": "Module", "name": "delta"}, "structure": {"version": "1.0"}},
        ]}))
        .unwrap();
        let found = components(&structure);
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["alpha", "b"], "unversioned components and other types are not checked");
        let check = |name: &str, version: Option<&str>, status| ComponentCheck {
            component: name.into(),
            graph_version: json!("1.0"),
            actual_version: version.map(str::to_owned),
            status,
            message: None,
            source_url: None,
        };
        let record = VersionRecord {
            checked_at: "2026-12-01T00:00:00Z".into(),
            session_id: "s".into(),
            components: vec![
                check("alpha", Some("1.1"), VersionStatus::Outdated),
                check("b", None, VersionStatus::FetchFailed),
            ],
        };
        assert_eq!(record.up_to_date(&found), 0);
        assert_eq!(record.outdated().count(), 1);
        // Alpha updated since the check: current.
        let mut updated = found.clone();
        updated[0].version = json!("1.1");
        assert_eq!(record.up_to_date(&updated), 1);
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(decode("g", &text), Some(record));
        assert_eq!(decode("g", "{"), None);
    }
}
