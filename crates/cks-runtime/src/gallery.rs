//! The gallery: registered names for sessions' graphs, who may discover them, and their lifecycle.
//!
//! Visibility decides discovery only. A `private` graph is found by its exact name alone, a `team`
//! graph also by callers who name the same team, a `public` one by everyone. The team is a
//! caller-supplied namespace, not authentication: whoever knows a name can read its entry.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use crate::store::GraphRow;
use crate::{Runtime, RuntimeError};

/// Who can discover a registered graph by listing or searching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    Private,
    Team,
    Public,
}

impl Visibility {
    pub const NAMES: [&'static str; 3] = ["private", "team", "public"];

    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Private => "private",
            Visibility::Team => "team",
            Visibility::Public => "public",
        }
    }
}

impl FromStr for Visibility {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "private" => Ok(Visibility::Private),
            "team" => Ok(Visibility::Team),
            "public" => Ok(Visibility::Public),
            _ => Err(()),
        }
    }
}

/// A registered graph's maturity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Draft,
    Published,
    Active,
    Stale,
    UnderReview,
    Archived,
}

impl Lifecycle {
    pub const ALL: [Lifecycle; 6] = [
        Lifecycle::Draft,
        Lifecycle::Published,
        Lifecycle::Active,
        Lifecycle::Stale,
        Lifecycle::UnderReview,
        Lifecycle::Archived,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Draft => "draft",
            Lifecycle::Published => "published",
            Lifecycle::Active => "active",
            Lifecycle::Stale => "stale",
            Lifecycle::UnderReview => "under_review",
            Lifecycle::Archived => "archived",
        }
    }

    /// The states this one may move to (the reference's transitions: draft → published → active,
    /// sideways to under_review or stale, and archived, which is final, from anywhere).
    pub fn next(self) -> &'static [Lifecycle] {
        use Lifecycle::*;
        match self {
            Draft => &[Published, Archived],
            Published => &[Active, UnderReview, Archived],
            Active => &[Stale, UnderReview, Archived],
            Stale => &[UnderReview, Active, Archived],
            UnderReview => &[Active, Published, Archived],
            Archived => &[],
        }
    }
}

impl FromStr for Lifecycle {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Lifecycle::ALL.into_iter().find(|l| l.as_str() == s).ok_or(())
    }
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A registered graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphEntry {
    pub name: String,
    pub session_id: String,
    pub description: String,
    pub tags: String,
    pub created_at: String,
    pub updated_at: String,
    pub source_graph_name: Option<String>,
    pub visibility: Visibility,
    pub team: Option<String>,
    /// Until a transition sets it: `published` for a public graph, else `draft`.
    pub lifecycle: Lifecycle,
}

impl From<GraphRow> for GraphEntry {
    fn from(row: GraphRow) -> Self {
        // Rows are written only through `Runtime::register_graph`; an unknown value can come only
        // from another writer of the same database, and reads as the most restrictive one.
        let visibility = row.visibility.parse().unwrap_or(Visibility::Private);
        let lifecycle = row
            .lifecycle_state
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(if visibility == Visibility::Public { Lifecycle::Published } else { Lifecycle::Draft });
        GraphEntry {
            name: row.name,
            session_id: row.session_id,
            description: row.description,
            tags: row.tags,
            created_at: row.created_at,
            updated_at: row.updated_at,
            source_graph_name: row.source_graph_name,
            visibility,
            team: row.team,
            lifecycle,
        }
    }
}

/// What to register under a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub name: String,
    pub session_id: String,
    pub description: String,
    pub tags: String,
    pub visibility: Visibility,
    /// Required for [`Visibility::Team`].
    pub team: Option<String>,
    /// Unset keeps the lineage already recorded under the name.
    pub source_graph_name: Option<String>,
    /// Unset keeps the state already recorded under the name.
    pub lifecycle: Option<Lifecycle>,
}

/// Which registered graphs a listing may show: public ones, and the team's when a team is named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphFilter {
    /// Only public graphs, even when a team is named.
    pub public_only: bool,
    pub team: Option<String>,
    /// A case-insensitive substring of the tags.
    pub tag: Option<String>,
    /// A case-insensitive substring of the name, the description or the tags.
    pub query: Option<String>,
}

impl GraphFilter {
    pub fn admits(&self, entry: &GraphEntry) -> bool {
        self.lowered().admits_indexed(&Indexed::new(entry.clone()))
    }

    fn lowered(&self) -> GraphFilter {
        GraphFilter {
            tag: self.tag.as_deref().map(str::to_lowercase),
            query: self.query.as_deref().map(str::to_lowercase),
            ..self.clone()
        }
    }
}

/// An entry with its searchable text lowercased once, when it is read from the store.
#[derive(Debug)]
struct Indexed {
    entry: GraphEntry,
    name: String,
    description: String,
    tags: String,
}

impl Indexed {
    fn new(entry: GraphEntry) -> Self {
        Indexed {
            name: entry.name.to_lowercase(),
            description: entry.description.to_lowercase(),
            tags: entry.tags.to_lowercase(),
            entry,
        }
    }
}

impl GraphFilter {
    /// `self` with `tag` and `query` already lowercased.
    fn admits_indexed(&self, indexed: &Indexed) -> bool {
        let entry = &indexed.entry;
        let discoverable = match entry.visibility {
            Visibility::Public => true,
            Visibility::Team => !self.public_only && self.team.is_some() && entry.team == self.team,
            Visibility::Private => false,
        };
        discoverable
            && self.tag.as_deref().is_none_or(|t| indexed.tags.contains(t))
            && self
                .query
                .as_deref()
                .is_none_or(|q| indexed.name.contains(q) || indexed.description.contains(q) || indexed.tags.contains(q))
    }
}

/// The registry as last read, valid while the store's change token stays where it was; the
/// runtime's own writes clear it (a store's token need not move on its own connection's writes).
#[derive(Debug, Default)]
pub(crate) struct Cache {
    read: Mutex<Option<(u64, Arc<Vec<Indexed>>)>>,
}

impl Cache {
    fn get(&self, token: Option<u64>) -> Option<Arc<Vec<Indexed>>> {
        let read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        read.as_ref().filter(|(t, _)| Some(*t) == token).map(|(_, entries)| entries.clone())
    }

    fn put(&self, token: Option<u64>, entries: Arc<Vec<Indexed>>) {
        if let Some(token) = token {
            *self.read.lock().unwrap_or_else(|p| p.into_inner()) = Some((token, entries));
        }
    }

    pub(crate) fn clear(&self) {
        *self.read.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The outcome of a lifecycle transition request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The state changed.
    Moved { from: Lifecycle, to: Lifecycle },
    /// The graph was already in the requested state.
    Unchanged(Lifecycle),
    /// The transition is not allowed from the current state.
    Refused { from: Lifecycle, to: Lifecycle },
}

impl Runtime {
    /// Registers (or re-registers) a name for an open session's graph; returns the stored entry.
    pub async fn register_graph(&self, registration: Registration) -> Result<GraphEntry, RuntimeError> {
        // Closed sessions are gone for every tool, so they cannot be registered either.
        if self.info(&registration.session_id).await?.closed {
            return Err(RuntimeError::SessionNotFound(registration.session_id));
        }
        let now = crate::runtime::now();
        let row = GraphRow {
            name: registration.name,
            session_id: registration.session_id,
            description: registration.description,
            tags: registration.tags,
            created_at: now.clone(),
            updated_at: now,
            source_graph_name: registration.source_graph_name,
            visibility: registration.visibility.as_str().to_owned(),
            team: registration.team,
            lifecycle_state: registration.lifecycle.map(|l| l.as_str().to_owned()),
        };
        let stored = self.store().put_graph(row).await;
        self.gallery.clear();
        Ok(stored?.into())
    }

    /// The graph registered under `name`, whatever its visibility.
    pub async fn graph(&self, name: &str) -> Result<Option<GraphEntry>, RuntimeError> {
        Ok(self.store().get_graph(name).await?.map(GraphEntry::from))
    }

    /// Removes the registry entry (never the session); false when no graph had that name.
    pub async fn unregister_graph(&self, name: &str) -> Result<bool, RuntimeError> {
        let deleted = self.store().delete_graph(name).await;
        self.gallery.clear();
        Ok(deleted?)
    }

    /// The registered graphs `filter` admits, most recently updated first.
    pub async fn graphs(&self, filter: &GraphFilter) -> Result<Vec<GraphEntry>, RuntimeError> {
        let filter = filter.lowered();
        Ok(self.indexed_graphs().await?.iter().filter(|e| filter.admits_indexed(e)).map(|e| e.entry.clone()).collect())
    }

    /// Every registered graph, whatever its visibility (what the sweepers look at), most recently
    /// updated first.
    pub async fn all_graphs(&self) -> Result<Vec<GraphEntry>, RuntimeError> {
        Ok(self.indexed_graphs().await?.iter().map(|e| e.entry.clone()).collect())
    }

    async fn indexed_graphs(&self) -> Result<Arc<Vec<Indexed>>, RuntimeError> {
        // The token is read before the rows: a write landing in between moves it, so the next
        // call reads again rather than trusting rows that may predate the write.
        let token = self.store().change_token();
        Ok(match self.gallery.get(token) {
            Some(entries) => entries,
            None => {
                let rows = self.store().list_graphs().await?;
                let entries: Arc<Vec<Indexed>> =
                    Arc::new(rows.into_iter().map(|row| Indexed::new(row.into())).collect());
                self.gallery.put(token, entries.clone());
                entries
            }
        })
    }

    /// Moves a registered graph to another lifecycle state when the transition is allowed.
    /// `None`: no graph has that name.
    pub async fn transition_graph(&self, name: &str, to: Lifecycle) -> Result<Option<Transition>, RuntimeError> {
        let Some(row) = self.store().get_graph(name).await? else { return Ok(None) };
        let from = GraphEntry::from(row.clone()).lifecycle;
        if from == to {
            return Ok(Some(Transition::Unchanged(from)));
        }
        if !from.next().contains(&to) {
            return Ok(Some(Transition::Refused { from, to }));
        }
        // Straight to the store: a graph whose session was closed can still be archived.
        let moved =
            GraphRow { updated_at: crate::runtime::now(), lifecycle_state: Some(to.as_str().to_owned()), ..row };
        let stored = self.store().put_graph(moved).await;
        self.gallery.clear();
        stored?;
        Ok(Some(Transition::Moved { from, to }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(visibility: Visibility, team: Option<&str>) -> GraphEntry {
        GraphEntry {
            name: "Solar System".into(),
            session_id: "s".into(),
            description: "Planets and moons".into(),
            tags: "astronomy,Space".into(),
            created_at: String::new(),
            updated_at: String::new(),
            source_graph_name: None,
            visibility,
            team: team.map(str::to_owned),
            lifecycle: Lifecycle::Draft,
        }
    }

    #[test]
    fn visibility_decides_discovery() {
        let everyone = GraphFilter::default();
        let team_a = GraphFilter { team: Some("a".into()), ..Default::default() };
        let public_only = GraphFilter { public_only: true, team: Some("a".into()), ..Default::default() };
        assert!(!everyone.admits(&entry(Visibility::Private, None)), "private: by exact name only");
        assert!(!team_a.admits(&entry(Visibility::Private, None)));
        assert!(everyone.admits(&entry(Visibility::Public, None)));
        assert!(public_only.admits(&entry(Visibility::Public, None)));
        assert!(team_a.admits(&entry(Visibility::Team, Some("a"))));
        assert!(!team_a.admits(&entry(Visibility::Team, Some("b"))), "another team");
        assert!(!everyone.admits(&entry(Visibility::Team, Some("a"))), "no team named");
        assert!(!public_only.admits(&entry(Visibility::Team, Some("a"))));
    }

    #[test]
    fn tag_and_query_match_case_insensitive_substrings() {
        let public = entry(Visibility::Public, None);
        let with = |tag: Option<&str>, query: Option<&str>| GraphFilter {
            tag: tag.map(str::to_owned),
            query: query.map(str::to_owned),
            ..Default::default()
        };
        assert!(with(Some("space"), None).admits(&public));
        assert!(with(Some("ASTRO"), None).admits(&public));
        assert!(!with(Some("biology"), None).admits(&public));
        assert!(with(None, Some("solar")).admits(&public), "the name");
        assert!(with(None, Some("MOONS")).admits(&public), "the description");
        assert!(with(None, Some("space")).admits(&public), "the tags");
        assert!(!with(None, Some("galaxy")).admits(&public));
    }

    #[test]
    fn lifecycle_transitions_are_the_references() {
        use Lifecycle::*;
        assert_eq!(Draft.next(), [Published, Archived]);
        assert!(Archived.next().is_empty(), "archived is final");
        for state in Lifecycle::ALL {
            assert_eq!(state.as_str().parse::<Lifecycle>(), Ok(state));
            assert!(!state.next().contains(&state), "{state} never moves to itself");
            if state != Archived {
                assert!(state.next().contains(&Archived), "{state} can be archived");
            }
        }
        assert!("retired".parse::<Lifecycle>().is_err());
    }

    fn runtime() -> Runtime {
        let store = std::sync::Arc::new(crate::store::memory::MemoryStore::new());
        Runtime::new(store, crate::RuntimeConfig::default())
    }

    fn registration(name: &str, session_id: &str, visibility: Visibility) -> Registration {
        Registration {
            name: name.into(),
            session_id: session_id.into(),
            description: String::new(),
            tags: String::new(),
            visibility,
            team: None,
            source_graph_name: None,
            lifecycle: None,
        }
    }

    #[tokio::test]
    async fn registering_listing_moving_and_removing() {
        let rt = runtime();
        let a = rt.create_session(Default::default(), Default::default()).await.unwrap().session_id;
        let b = rt.create_session(Default::default(), Default::default()).await.unwrap().session_id;
        rt.register_graph(registration("open", &a, Visibility::Public)).await.unwrap();
        rt.register_graph(registration("hidden", &b, Visibility::Private)).await.unwrap();
        let listed = rt.graphs(&GraphFilter::default()).await.unwrap();
        assert_eq!(listed.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["open"]);
        assert_eq!(rt.graph("hidden").await.unwrap().unwrap().session_id, b, "found by exact name");

        // Last write wins: the name now points at b.
        rt.register_graph(registration("open", &b, Visibility::Public)).await.unwrap();
        assert_eq!(rt.graph("open").await.unwrap().unwrap().session_id, b);

        assert_eq!(
            rt.transition_graph("open", Lifecycle::Published).await.unwrap(),
            Some(Transition::Unchanged(Lifecycle::Published))
        );
        assert_eq!(
            rt.transition_graph("open", Lifecycle::Draft).await.unwrap(),
            Some(Transition::Refused { from: Lifecycle::Published, to: Lifecycle::Draft })
        );
        assert_eq!(
            rt.transition_graph("open", Lifecycle::Active).await.unwrap(),
            Some(Transition::Moved { from: Lifecycle::Published, to: Lifecycle::Active })
        );
        assert_eq!(rt.graph("open").await.unwrap().unwrap().lifecycle, Lifecycle::Active);
        // Re-registering keeps the state a transition set.
        rt.register_graph(registration("open", &b, Visibility::Public)).await.unwrap();
        assert_eq!(rt.graph("open").await.unwrap().unwrap().lifecycle, Lifecycle::Active);
        assert_eq!(rt.transition_graph("nobody", Lifecycle::Active).await.unwrap(), None);

        // A closed session cannot be registered, but its entry can still be archived.
        rt.close(&b).await.unwrap();
        let refused = rt.register_graph(registration("late", &b, Visibility::Public)).await;
        assert!(matches!(refused, Err(RuntimeError::SessionNotFound(_))), "{refused:?}");
        assert!(matches!(
            rt.transition_graph("open", Lifecycle::Archived).await.unwrap(),
            Some(Transition::Moved { .. })
        ));

        assert!(rt.unregister_graph("hidden").await.unwrap());
        assert!(!rt.unregister_graph("hidden").await.unwrap());
        assert!(rt.info(&a).await.is_ok(), "unregistering never removes a session");
    }

    #[tokio::test]
    async fn a_listing_sees_writes_made_through_another_connection() {
        use crate::store::sqlite::{SqliteOptions, SqliteStore};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.db");
        let open = || {
            let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
            Runtime::new(std::sync::Arc::new(store), crate::RuntimeConfig::default())
        };
        let (writer, reader) = (open(), open());
        let sid = writer.create_session(Default::default(), Default::default()).await.unwrap().session_id;
        let names = |graphs: Vec<GraphEntry>| graphs.into_iter().map(|g| g.name).collect::<Vec<_>>();
        writer.register_graph(registration("one", &sid, Visibility::Public)).await.unwrap();
        assert_eq!(names(reader.graphs(&GraphFilter::default()).await.unwrap()), ["one"]);
        assert_eq!(names(reader.graphs(&GraphFilter::default()).await.unwrap()), ["one"], "from the cache");
        writer.register_graph(registration("two", &sid, Visibility::Public)).await.unwrap();
        let mut listed = names(reader.graphs(&GraphFilter::default()).await.unwrap());
        listed.sort();
        assert_eq!(listed, ["one", "two"], "the other connection's write is seen");
        // And the runtime's own writes, which need not move its own connection's token.
        reader.unregister_graph("one").await.unwrap();
        assert_eq!(names(reader.graphs(&GraphFilter::default()).await.unwrap()), ["two"]);
    }

    #[test]
    fn an_unset_lifecycle_follows_visibility() {
        let row = |visibility: &str, state: Option<&str>| GraphRow {
            name: "n".into(),
            session_id: "s".into(),
            description: String::new(),
            tags: String::new(),
            created_at: String::new(),
            updated_at: String::new(),
            source_graph_name: None,
            visibility: visibility.into(),
            team: None,
            lifecycle_state: state.map(str::to_owned),
        };
        assert_eq!(GraphEntry::from(row("public", None)).lifecycle, Lifecycle::Published);
        assert_eq!(GraphEntry::from(row("team", None)).lifecycle, Lifecycle::Draft);
        assert_eq!(GraphEntry::from(row("public", Some("stale"))).lifecycle, Lifecycle::Stale);
        assert_eq!(GraphEntry::from(row("bogus", None)).visibility, Visibility::Private);
    }
}
