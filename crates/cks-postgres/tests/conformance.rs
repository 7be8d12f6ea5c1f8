//! The store conformance suite against a real PostgreSQL, and what only this store does: schema
//! versions, start-up errors, events between processes.

use std::sync::Arc;
use std::time::Duration;

use cks_core::KnowledgeStructure;
use cks_postgres::{ConnectError, PostgresOptions, PostgresStore};
use cks_runtime::conformance::{Open, run_all};
use cks_runtime::store::Store;
use cks_runtime::{NewSession, Runtime, RuntimeConfig};
use cks_testkit::postgres::{TestDatabase, psql};

/// A new store handle (its own pool and listener, as another process would have) on `url`.
fn open_blocking(url: &str) -> Arc<dyn Store> {
    let url = url.to_owned();
    tokio::task::block_in_place(move || {
        tokio::runtime::Handle::current()
            .block_on(PostgresStore::connect(&url, &PostgresOptions::default()))
            .map(|s| Arc::new(s) as Arc<dyn Store>)
            .unwrap_or_else(|e| panic!("connect: {e}"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_conforms() {
    let db = TestDatabase::create();
    let url = db.url().to_owned();
    let open: Open = Arc::new(move || open_blocking(&url));
    run_all(open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_versioned_made_once_and_a_newer_one_is_refused() {
    let db = TestDatabase::create();
    // Four replicas starting at once against an empty database.
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url().to_owned();
            tokio::spawn(async move { PostgresStore::connect(&url, &PostgresOptions::default()).await })
        })
        .collect();
    for start in starts {
        let store = start.await.unwrap().unwrap_or_else(|e| panic!("a concurrent start failed: {e}"));
        assert_eq!(store.schema_version().await.unwrap() as usize, cks_postgres::MIGRATIONS.len());
    }
    psql(db.url(), "UPDATE cks_schema SET version = 99");
    let err = PostgresStore::connect(db.url(), &PostgresOptions::default()).await.unwrap_err();
    assert!(matches!(err, ConnectError::Schema(_)), "{err:?}");
    assert!(err.to_string().contains("newer than this server supports"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_errors_say_which_and_never_show_the_password() {
    let db = TestDatabase::create();
    let options = PostgresOptions { connect_timeout: Duration::from_secs(5), ..Default::default() };

    let wrong_password = db.url().replacen(cks_testkit::postgres::PG_PASSWORD, "not-the-password", 1);
    let err = PostgresStore::connect(&wrong_password, &options).await.unwrap_err();
    assert!(matches!(err, ConnectError::Authentication { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("user 'cks'") && text.contains("password"), "{text}");
    assert!(!text.contains("not-the-password"), "{text}");

    let missing = format!("{}_missing", db.url());
    let err = PostgresStore::connect(&missing, &options).await.unwrap_err();
    assert!(matches!(err, ConnectError::DatabaseMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("createdb"), "{err}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let nobody = format!("postgres://cks:secret-pw@127.0.0.1:{port}/cks");
    let err = PostgresStore::connect(&nobody, &options).await.unwrap_err();
    assert!(matches!(err, ConnectError::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}/cks")) && !text.contains("secret-pw"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_the_other_processes_and_not_their_own() {
    let db = TestDatabase::create();
    let a = Runtime::new(open_blocking(db.url()), RuntimeConfig::default());
    let b = Runtime::new(open_blocking(db.url()), RuntimeConfig::default());
    let mut seen_by_a = a.subscribe();
    let mut seen_by_b = b.subscribe();
    // The listeners connect in the background; give them a moment before the first event.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let created = a.create_session(KnowledgeStructure::default(), NewSession::default()).await.unwrap();

    let local = tokio::time::timeout(Duration::from_secs(5), seen_by_a.recv()).await.unwrap().unwrap();
    let remote = tokio::time::timeout(Duration::from_secs(5), seen_by_b.recv()).await.unwrap().unwrap();
    assert_eq!(remote, local, "the same event, id and all");
    assert_eq!(remote.kind.session_id(), created.session_id);
    // A's own event came back from the database too, but was not published twice.
    let again = tokio::time::timeout(Duration::from_millis(500), seen_by_a.recv()).await;
    assert!(again.is_err(), "A saw its own event twice: {again:?}");
}
