//! Durability under `kill -9`: a child process commits in a loop and reports each acknowledged
//! commit; the parent kills it at a random moment, reopens the database, and checks that every
//! acknowledged version is present and reconstructs to its recorded state hash, and that SQLite's
//! integrity check passes. Repeated over many rounds on the same database.
//!
//! The child is this same test binary, re-executed with `CKS_DURABILITY_CHILD` set.

use rand::Rng;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cks_core::ops::parse_operations;
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{CommitRequest, NewSession, Runtime, RuntimeConfig};

const CHILD_ENV: &str = "CKS_DURABILITY_CHILD";
const ROUNDS: usize = 30;

fn runtime(path: &std::path::Path) -> Runtime {
    let store = SqliteStore::open(path, &SqliteOptions::default()).expect("open database");
    Runtime::new(Arc::new(store), RuntimeConfig { snapshot_interval: 4, ..Default::default() })
}

/// The child's entry point; a no-op unless this binary was started as the child.
#[tokio::test]
async fn durability_child_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (path, session_id, round) = {
        let mut parts = spec.splitn(3, '|');
        (parts.next().unwrap().to_owned(), parts.next().unwrap().to_owned(), parts.next().unwrap().to_owned())
    };
    let rt = runtime(std::path::Path::new(&path));
    let mut stdout = std::io::stdout().lock();
    for i in 0.. {
        let id = format!("r{round}-o{i}");
        let mut operations = vec![json!({"type": "add_object", "identity": {"id": id, "type": "Node", "name": id},
            "structure": {"payload": "x".repeat(i % 7 * 100)}})];
        if i % 3 == 2 {
            operations.push(json!({"type": "remove_object", "object_id": format!("r{round}-o{}", i - 1)}));
        }
        let request = CommitRequest::operations(parse_operations(&json!(operations)).unwrap());
        let committed = rt.commit(&session_id, request).await.expect("commit");
        writeln!(stdout, "ACK {} {}", committed.version.version_id, committed.version.state_hash).unwrap();
        stdout.flush().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_commits_survive_kill_9() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("durability.db");
    let session_id = runtime(&path).create_session(Default::default(), NewSession::default()).await.unwrap().session_id;
    let exe = std::env::current_exe().unwrap();
    let mut acknowledged: Vec<(String, String)> = Vec::new();
    // The last acknowledgement of each round: the commits most at risk from the kill.
    let mut last_of_round: Vec<usize> = Vec::new();
    let mut rng = rand::rng();
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["durability_child_process", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{}|{}|{}", path.display(), session_id, round))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|line| {
                    let mut parts = line.strip_prefix("ACK ")?.split(' ');
                    Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
                })
                .collect::<Vec<_>>()
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(5..250)));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        acknowledged.extend(reader.join().unwrap());
        if !acknowledged.is_empty() {
            last_of_round.push(acknowledged.len() - 1);
        }

        let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
        assert_eq!(store.integrity_check().unwrap(), "ok", "round {round}");
    }
    assert!(acknowledged.len() > ROUNDS, "the children committed something ({} acks)", acknowledged.len());

    let rt = runtime(&path);
    let versions = rt.list_versions(&session_id).await.unwrap();
    let stored: std::collections::HashMap<_, _> =
        versions.iter().map(|v| (v.version_id.clone(), v.state_hash.clone())).collect();
    for (version_id, state_hash) in &acknowledged {
        assert_eq!(stored.get(version_id), Some(state_hash), "acknowledged version {version_id} is stored");
    }
    // Reconstructing is the expensive part: every round's last acknowledged version plus a
    // random sample of the others (reconstruction verifies every delta's hash along the way).
    let sample = (0..100).map(|_| rng.random_range(0..acknowledged.len()));
    for index in last_of_round.iter().copied().chain(sample) {
        let (version_id, state_hash) = &acknowledged[index];
        let state = rt.version_state(&session_id, version_id).await.unwrap();
        assert_eq!(&state.root_hash().to_hex(), state_hash, "version {version_id} reconstructs");
    }
    let head = rt.read(&session_id, |s, info| (s.root_hash().to_hex(), info.state_hash.clone())).await.unwrap();
    assert_eq!(head.0, head.1, "the head state matches its recorded hash");
    assert_eq!(Some(&head.1), versions.last().map(|v| &v.state_hash));
}
