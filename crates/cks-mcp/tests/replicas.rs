//! Several `cks-mcp` processes on one PostgreSQL database behave as one server: a commit on one is
//! read on another, `/events` on one streams the commits of another, writers on the same session
//! through different replicas lose no update, and a queued task is worked once whichever replica's
//! process claims it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{Value, json};

use cks_testkit::postgres::TestDatabase;

mod support;
use support::{text_result, tool_call};

/// One server process serving HTTP only, on a free loopback port.
struct Replica {
    child: Child,
    base: String,
    client: reqwest::Client,
    _data: tempfile::TempDir,
}

impl Replica {
    async fn start(db_url: &str) -> Replica {
        Replica::start_with(db_url, &[]).await
    }

    /// A replica with more environment variables.
    async fn start_with(db_url: &str, env: &[(&str, String)]) -> Replica {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let data = tempfile::tempdir().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
            .args(["--http", &format!("127.0.0.1:{port}"), "--no-stdio"])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", data.path())
            .env("CKS_MCP_DATA_DIR", data.path())
            .env("CKS_MCP_DB_PATH", db_url)
            .env("CKS_MCP_PG_POOL_SIZE", "8")
            .env("CKS_MCP_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let replica =
            Replica { child, base: format!("http://127.0.0.1:{port}"), client: reqwest::Client::new(), _data: data };
        let deadline = Instant::now() + Duration::from_secs(30);
        while replica.client.get(format!("{}/health", replica.base)).send().await.is_err() {
            assert!(Instant::now() < deadline, "the replica did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        replica
    }

    /// A tool call; its result (which may be a business error).
    async fn call(&self, name: &str, arguments: Value) -> Value {
        let reply: Value = self
            .client
            .post(format!("{}/mcp", self.base))
            .json(&tool_call(name, arguments))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        text_result(&reply)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn graph(ids: &[&str]) -> String {
    let objects: Vec<Value> =
        ids.iter().map(|id| json!({"identity": {"id": id, "type": "Note", "name": id}})).collect();
    json!({"objects": objects, "relations": []}).to_string()
}

fn add(session: &str, id: &str) -> Value {
    json!({"session_id": session, "operations": [
        {"type": "add_object", "identity": {"id": id, "type": "Note", "name": id}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_database_are_one_server() {
    let db = TestDatabase::create();
    let a = Replica::start(db.url()).await;
    let b = Replica::start(db.url()).await;

    // B streams the events of one session before anything happens there.
    let created = a.call("validate_knowledge", json!({"json_data": graph(&["alpha"])})).await;
    let session = created["session_id"].as_str().expect("a session").to_owned();
    let events = b.client.get(format!("{}/events/{session}?event_types=VersionCreated", b.base)).send().await.unwrap();
    assert_eq!(events.status(), 200);
    let mut events = events.bytes_stream();
    // The listener of B is up once B answers calls; a short pause covers its LISTEN round trip.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A commit on A is read on B at once: B had the session loaded before the commit.
    let before = b.call("query_subgraph", json!({"session_id": session, "seed_ids": ["alpha"], "depth": 1})).await;
    assert_eq!(before["returned_nodes"], 1, "{before}");
    let committed = a.call("evolve_knowledge", add(&session, "beta")).await;
    let version = committed["version_id"].as_str().expect("committed").to_owned();
    let on_b = b.call("query_subgraph", json!({"session_id": session, "seed_ids": ["beta"], "depth": 0})).await;
    assert_eq!(on_b["returned_nodes"], 1, "B did not see A's commit: {on_b}");
    assert!(on_b["subgraph"].as_str().unwrap_or_default().contains("\"beta\""), "{on_b}");

    // /events on B streamed A's commit.
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains(&version) {
        let chunk = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), events.next())
            .await
            .unwrap_or_else(|_| panic!("B streamed no VersionCreated for A's commit; got {text:?}"))
            .expect("the stream ended")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("VersionCreated"), "{text}");

    // Writers on one session through both replicas at once: every commit lands.
    let per_replica = 15;
    let mut writers = Vec::new();
    for (name, replica) in [("a", &a), ("b", &b)] {
        for i in 0..per_replica {
            let (client, base, session) = (replica.client.clone(), replica.base.clone(), session.clone());
            writers.push(tokio::spawn(async move {
                let reply: Value = client
                    .post(format!("{base}/mcp"))
                    .json(&tool_call("evolve_knowledge", add(&session, &format!("{name}-{i}"))))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                text_result(&reply)
            }));
        }
    }
    for writer in writers {
        let result = writer.await.unwrap();
        assert!(result.get("error").is_none(), "a concurrent commit failed: {result}");
    }
    for replica in [&a, &b] {
        let versions = replica.call("list_versions", json!({"session_id": session})).await;
        let count = versions["versions"].as_array().map(Vec::len).unwrap_or_default();
        // The first version (the created state), beta, and every writer's commit.
        assert_eq!(count, 2 + 2 * per_replica, "{versions}");
        let all = replica.call("serialize_knowledge", json!({"session_id": session})).await;
        let text = all.to_string();
        for name in ["a", "b"] {
            for i in 0..per_replica {
                assert!(text.contains(&format!("{name}-{i}")), "{name}-{i} is missing");
            }
        }
    }
}

/// What one writer saw: the ids whose commits were acknowledged (and when), and the errors of the
/// rest.
#[derive(Default, Debug)]
struct Written {
    acknowledged: Vec<(String, Instant)>,
    failures: Vec<String>,
}

impl Written {
    fn ids(&self) -> impl Iterator<Item = &String> {
        self.acknowledged.iter().map(|(id, _)| id)
    }
}

/// Commits one new object after another through `replica` until `stop` is set.
fn writer(
    client: reqwest::Client,
    base: String,
    session: String,
    name: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Written> {
    tokio::spawn(async move {
        let mut written = Written::default();
        let mut i = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            i += 1;
            let id = format!("{name}-{i}");
            let sent = client
                .post(format!("{base}/mcp"))
                .timeout(Duration::from_secs(60))
                .json(&tool_call("evolve_knowledge", add(&session, &id)))
                .send()
                .await;
            let reply: Value = match sent {
                Ok(response) => match response.json().await {
                    Ok(reply) => reply,
                    Err(e) => {
                        written.failures.push(format!("unreadable answer: {e}"));
                        continue;
                    }
                },
                // The replica itself is gone (the kill test): that writer is done.
                Err(_) => break,
            };
            let result = text_result(&reply);
            match result.get("error").and_then(Value::as_str) {
                None => written.acknowledged.push((id, Instant::now())),
                Some(code) => written.failures.push(format!("{code}: {}", result["message"])),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        written
    })
}

/// The session's canonical text, as `replica` has it.
async fn serialized(replica: &Replica, session: &str) -> String {
    let all = replica.call("serialize_knowledge", json!({"session_id": session})).await;
    all["serialized"].as_str().unwrap_or_else(|| panic!("no serialized text: {all}")).to_owned()
}

/// Whether the canonical text holds an object with this id.
fn holds(text: &str, id: &str) -> bool {
    text.contains(&format!("\"id\": \"{id}\"")) || text.contains(&format!("\"id\":\"{id}\""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_loses_no_acknowledged_commit_and_the_replicas_reconnect() {
    let mut server = cks_testkit::postgres::PgServer::start();
    cks_testkit::postgres::psql(&server.admin_url(), "CREATE DATABASE cks");
    let url = server.url("cks");
    let a = Replica::start(&url).await;
    let b = Replica::start(&url).await;
    let created = a.call("validate_knowledge", json!({"json_data": graph(&["alpha"])})).await;
    let session = created["session_id"].as_str().expect("a session").to_owned();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = [
        writer(a.client.clone(), a.base.clone(), session.clone(), "a", stop.clone()),
        writer(b.client.clone(), b.base.clone(), session.clone(), "b", stop.clone()),
    ];
    tokio::time::sleep(Duration::from_millis(800)).await;
    tokio::task::block_in_place(|| server.stop());
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| server.start_again());
    let restarted = Instant::now();
    // Long enough for both replicas to be back and commit again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);

    let mut acknowledged = Vec::new();
    let mut failures = Vec::new();
    for (name, writer) in ["a", "b"].into_iter().zip(writers) {
        let written = writer.await.unwrap();
        assert!(written.acknowledged.len() > 2, "replica {name} committed too little: {written:?}");
        // After the restart the replica commits again by itself.
        assert!(
            written.acknowledged.iter().any(|(_, at)| *at > restarted),
            "replica {name} committed nothing after the restart: {written:?}"
        );
        acknowledged.extend(written.ids().cloned());
        failures.extend(written.failures);
    }
    assert!(!failures.is_empty(), "the restart was not seen by any call");
    for failure in &failures {
        assert!(failure.starts_with("storage_unavailable: "), "a call failed otherwise: {failure}");
    }
    for replica in [&a, &b] {
        let text = serialized(replica, &session).await;
        for id in &acknowledged {
            assert!(holds(&text, id), "acknowledged commit {id} is missing");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_commit_leaves_the_others_and_the_database_consistent() {
    let db = TestDatabase::create();
    let mut a = Replica::start(db.url()).await;
    let b = Replica::start(db.url()).await;
    let created = b.call("validate_knowledge", json!({"json_data": graph(&["alpha"])})).await;
    let session = created["session_id"].as_str().expect("a session").to_owned();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on_a = writer(a.client.clone(), a.base.clone(), session.clone(), "a", stop.clone());
    let on_b = writer(b.client.clone(), b.base.clone(), session.clone(), "b", stop.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (on_a, on_b) = (on_a.await.unwrap(), on_b.await.unwrap());
    assert!(on_b.failures.is_empty(), "B failed while A died: {:?}", on_b.failures);

    // A replica that loads the session from scratch verifies every version's state hash on the
    // way; it must agree with B, and hold every acknowledged commit of both.
    let c = Replica::start(db.url()).await;
    let on_c_text = serialized(&c, &session).await;
    let graph_of = |text: &str| {
        let mut document: Value = serde_json::from_str(text).unwrap();
        document.as_object_mut().unwrap().remove("_cks_metadata");
        document
    };
    let on_b_graph = graph_of(&serialized(&b, &session).await);
    assert!(on_b_graph == graph_of(&on_c_text), "B and a fresh replica disagree");
    for id in on_a.ids().chain(on_b.ids()) {
        assert!(holds(&on_c_text, id), "acknowledged commit {id} is missing");
    }
    let versions = c.call("list_versions", json!({"session_id": session})).await;
    let seqs: Vec<u64> = versions["versions"].as_array().unwrap().iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "history has holes: {seqs:?}");
}

/// Enrichment on two replicas: twelve requests queued through both, each worked by exactly one
/// process — one commit per task, each page fetched once — and the two processes' counts adding up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_worked_once_whichever_replica_claims_it() {
    use cks_testkit::web::{HttpServer, Reply};
    let site = HttpServer::start(|_, path| {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        if path == "/w/api.php" {
            let topic = query.split('&').find_map(|p| p.strip_prefix("search=")).unwrap_or("none");
            let answer = json!([topic, [topic], [""], [format!("http://127.0.0.1:{{port}}/wiki/{topic}")]]);
            return Reply::status(200).body(answer.to_string());
        }
        match path.strip_prefix("/wiki/") {
            Some(topic) => {
                Reply::status(200).body(format!("<title>{topic}</title><h1>{topic}</h1><p>About {topic}.</p>"))
            }
            None => Reply::status(404),
        }
    })
    .await;
    let env = [
        ("CKS_SWEEPERS", "off".to_owned()),
        ("CKS_EMBED_ENRICHMENT_AGENT", "true".into()),
        ("CKS_ENRICHMENT_POLL_INTERVAL", "1".into()),
        ("CKS_ENRICHMENT_LIVENESS_INTERVAL", "1".into()),
        ("CKS_ENRICHMENT_ADAPTERS", "wikipedia".into()),
        ("CKS_ENRICHMENT_WIKIPEDIA_URL", format!("http://127.0.0.1:{}/w/api.php", site.addr.port())),
        ("CKS_FETCH_ALLOWED_NETWORKS", "127.0.0.1".into()),
    ];
    let db = TestDatabase::create();
    let a = Replica::start_with(db.url(), &env).await;
    let b = Replica::start_with(db.url(), &env).await;
    let topics: Vec<String> = (0..12).map(|i| format!("topic{i}")).collect();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let created = a.call("validate_knowledge", json!({"json_data": graph(&names)})).await;
    let session = created["session_id"].as_str().expect("a session").to_owned();
    let mut tasks = Vec::new();
    for (i, topic) in topics.iter().enumerate() {
        let through = if i % 2 == 0 { &a } else { &b };
        let asked = through.call("request_enrichment", json!({"session_id": session, "object_id": topic})).await;
        tasks.push(asked["task_id"].as_i64().expect("queued"));
    }

    let enriched = |versions: &Value| -> Vec<i64> {
        let all = versions["versions"].as_array().cloned().unwrap_or_default();
        all.iter()
            .filter(|v| v["metadata"]["process"] == "enrichment")
            .filter_map(|v| v["metadata"]["task_id"].as_i64())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while enriched(&b.call("list_versions", json!({"session_id": session})).await).len() < tasks.len() {
        assert!(Instant::now() < deadline, "the requests were not all worked");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Time for a second worker to (wrongly) redo a task.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut done = enriched(&a.call("list_versions", json!({"session_id": session})).await);
    done.sort_unstable();
    assert_eq!(done, tasks, "one commit per task");
    for topic in &topics {
        let gets = site.requests().iter().filter(|r| r.method == "GET" && r.path == format!("/wiki/{topic}")).count();
        assert_eq!(gets, 1, "{topic} fetched once");
    }
    let listed = a.call("list_processes", json!({})).await;
    let processes: Vec<&Value> =
        listed["processes"].as_array().unwrap().iter().filter(|p| p["process_kind"] == "enrichment").collect();
    assert_eq!(processes.len(), 2, "one per replica, listed on either: {listed}");
    let total: u64 = processes.iter().map(|p| p["tasks_done"].as_u64().unwrap()).sum();
    assert_eq!(total, 12, "{listed}");
}

/// A streamable-HTTP client's session, each request sent to the replica the test names, as a
/// round-robin load balancer would.
struct McpSession {
    client: reqwest::Client,
    id: String,
}

impl McpSession {
    async fn open(replica: &Replica) -> McpSession {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "replicas", "version": "1"}}});
        let response = Self::request(&replica.client, replica, None, &initialize).send().await.unwrap();
        let id = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        response.bytes().await.unwrap();
        McpSession { client: replica.client.clone(), id }
    }

    fn request(
        client: &reqwest::Client,
        replica: &Replica,
        session: Option<&str>,
        body: &Value,
    ) -> reqwest::RequestBuilder {
        let mut request = client
            .post(format!("{}/mcp", replica.base))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request
    }

    fn post(&self, replica: &Replica, body: &Value) -> reqwest::RequestBuilder {
        Self::request(&self.client, replica, Some(&self.id), body)
    }

    /// A request's status and the answer in its stream (the message with its id).
    async fn ask(&self, replica: &Replica, id: u64, method: &str, params: Value) -> (u16, Value) {
        let (status, messages) = self.exchange(replica, id, method, params).await;
        (status, messages.into_iter().find(|message| message["id"] == json!(id)).unwrap_or(Value::Null))
    }

    /// A request's status and every message of its stream.
    async fn exchange(&self, replica: &Replica, id: u64, method: &str, params: Value) -> (u16, Vec<Value>) {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.post(replica, &body).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let messages = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .collect();
        (status, messages)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_is_served_by_every_replica_and_its_calls_cancelled_and_ended_from_any() {
    let db = TestDatabase::create();
    let provider = cks_testkit::ProviderServer::start().await;
    // A model that never answers in time: only a cancellation ends the chat below.
    provider.set_default(Some(cks_testkit::Reply::text("too late").delayed(Duration::from_secs(600))));
    let env = support::provider_env("anthropic", &provider.base_url());
    let a = Replica::start_with(db.url(), &env).await;
    let b = Replica::start_with(db.url(), &env).await;

    let session = McpSession::open(&a).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(session.post(&b, &initialized).send().await.unwrap().status(), 202);
    let (status, listed) = session.ask(&b, 1, "tools/list", json!({})).await;
    assert_eq!(status, 200, "a replica that did not open the session serves it");
    assert!(listed["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{listed}");
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    let (_, created) = session
        .ask(&a, 2, "tools/call", json!({"name": "validate_knowledge", "arguments": {"json_data": graph}}))
        .await;
    let sid = created["result"]["structuredContent"]["session_id"].as_str().expect("a session").to_owned();
    // A log level chosen through A holds for a call through B: its log line comes on the
    // session's stream from B (log lines go to the session's stream, not the call's).
    let (_, chosen) = session.ask(&a, 3, "logging/setLevel", json!({"level": "info"})).await;
    assert_eq!(chosen["result"], json!({}), "{chosen}");
    let mut stream = session
        .client
        .get(format!("{}/mcp", b.base))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session.id)
        .send()
        .await
        .unwrap()
        .bytes_stream();
    // B hears of the change through the database's notifications: a call made before that may
    // still go unlogged, so calls are made until one is.
    let mut seen = String::new();
    let mut logged = false;
    for id in 30..40 {
        let list = json!({"name": "list_versions", "arguments": {"session_id": sid}});
        let (_, versions) = session.ask(&b, id, "tools/call", list).await;
        assert_eq!(versions["result"]["structuredContent"]["versions"].as_array().map(Vec::len), Some(1), "{versions}");
        let read = tokio::time::timeout(Duration::from_secs(1), async {
            while let Some(Ok(chunk)) = stream.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if seen.contains("notifications/message") {
                    return true;
                }
            }
            false
        })
        .await;
        if read == Ok(true) {
            logged = true;
            break;
        }
    }
    assert!(logged, "a call's log line: {seen}");
    assert!(seen.contains("\"tool\":\"list_versions\""), "{seen}");

    // Subscribed through A, a commit through A is heard on the stream B holds.
    let uri = format!("cks://sessions/{sid}");
    let (_, subscribed) = session.ask(&a, 41, "resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    let add = json!({"name": "evolve_knowledge", "arguments": {"session_id": sid, "operations": [
        {"type": "add_object", "identity": {"id": "b", "type": "T", "name": "B"}}]}});
    let (_, evolved) = session.ask(&a, 42, "tools/call", add).await;
    assert_eq!(evolved["result"]["isError"], false, "{evolved}");
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(chunk)) = stream.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("notifications/resources/updated") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(heard, Ok(true), "the commit's resources/updated: {seen}");
    assert!(seen.contains(&format!("\"uri\":\"{uri}\"")), "{seen}");
    drop(stream);

    // A chat on A, cancelled through B.
    let chat = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "ai_chat", "arguments": {"session_id": sid, "messages": [{"role": "user", "content": "Describe it."}]}}});
    let running = tokio::spawn(session.post(&a, &chat).send());
    let deadline = Instant::now() + Duration::from_secs(30);
    while provider.requests().is_empty() {
        assert!(Instant::now() < deadline, "the chat never asked the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4, "reason": "stop"}});
    assert_eq!(session.post(&b, &cancel).send().await.unwrap().status(), 202);
    let response =
        tokio::time::timeout(Duration::from_secs(30), running).await.expect("the call ended").unwrap().unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), response.text()).await;
    assert!(ended.is_ok(), "the cancelled call's stream ended, long before the model would have answered");

    // Ended through B, the session is gone on A as well.
    let closed =
        session.client.delete(format!("{}/mcp", b.base)).header("mcp-session-id", &session.id).send().await.unwrap();
    assert_eq!(closed.status(), 204);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = session.ask(&a, 5, "ping", json!({})).await;
        if status == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "A still serves the ended session ({status})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_revoked_on_one_replica_is_refused_by_the_others_at_once() {
    let db = TestDatabase::create();
    // The static token administers; the keys are what is checked.
    let env = [("CKS_MCP_HTTP_TOKEN", "replica-admin-token".to_owned())];
    let a = Replica::start_with(db.url(), &env).await;
    let b = Replica::start_with(db.url(), &env).await;
    let admin = |replica: &Replica, name: &str, arguments: Value| {
        let request = replica.client.post(format!("{}/mcp", replica.base)).bearer_auth("replica-admin-token");
        request.json(&tool_call(name, arguments)).send()
    };
    let made = admin(&a, "create_api_key", json!({"subject": "ci", "scope": "cks:read"})).await.unwrap();
    let made = text_result(&made.json().await.unwrap());
    let key = made["key"].as_str().unwrap().to_owned();
    let with_key = |replica: &Replica| {
        let request = replica.client.post(format!("{}/mcp", replica.base)).bearer_auth(&key);
        request.json(&tool_call("list_graphs", json!({}))).send()
    };
    // Made on A, accepted on B.
    assert_eq!(with_key(&b).await.unwrap().status(), 200);

    admin(&a, "revoke_api_key", json!({"id": made["id"]})).await.unwrap();
    // B hears of it from the database, well within its two-second refresh interval.
    let revoked = Instant::now();
    loop {
        let status = with_key(&b).await.unwrap().status();
        if status == 401 {
            break;
        }
        assert!(revoked.elapsed() < Duration::from_millis(1500), "B still accepts the revoked key ({status})");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(with_key(&a).await.unwrap().status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_shows_its_pooled_connections() {
    let db = TestDatabase::create();
    let replica = Replica::start(db.url()).await;
    replica.call("list_graphs", json!({})).await;
    let scrape = replica.client.get(format!("{}/metrics", replica.base)).send().await.unwrap().text().await.unwrap();
    let sample = |series: &str| -> Option<f64> {
        scrape.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    // CKS_MCP_PG_POOL_SIZE, as the replica is started.
    assert_eq!(sample("cks_store_connections_max"), Some(8.0), "{scrape}");
    let open = sample("cks_store_connections{state=\"in_use\"}").unwrap()
        + sample("cks_store_connections{state=\"idle\"}").unwrap();
    assert!((1.0..=8.0).contains(&open), "a call was answered on a pooled connection: {scrape}");
    assert_eq!(sample("cks_store_connections{state=\"waiting\"}"), Some(0.0), "{scrape}");
}
