//! MCP Tasks over the real binary's stdio, with a scripted provider: a long call from a client
//! that declares the tasks extension answers at once with a task, polled to its result; a task
//! cancelled while it works; short tools and clients without the extension answered as before;
//! unknown task ids refused; and a finished task's result read by the next server on the data.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

use cks_testkit::{ProviderServer, Reply};

mod support;
use support::provider_env;
use support::stdio::Mcp;

const STATELESS: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The stateless revision's `_meta`, declaring the tasks extension when `tasks`.
fn meta(tasks: bool) -> Value {
    let capabilities = if tasks { json!({"extensions": {TASKS: {}}}) } else { json!({}) };
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
    })
}

async fn request(mcp: &mut Mcp, method: &str, mut params: Value, tasks: bool) -> Value {
    params["_meta"] = meta(tasks);
    mcp.request(method, params).await
}

async fn call(mcp: &mut Mcp, tool: &str, arguments: Value, tasks: bool) -> Value {
    request(mcp, "tools/call", json!({"name": tool, "arguments": arguments}), tasks).await
}

async fn session(mcp: &mut Mcp) -> String {
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "Note", "name": "alpha"}}]}).to_string();
    let created = call(mcp, "validate_knowledge", json!({"json_data": graph}), true).await;
    created["result"]["structuredContent"]["session_id"].as_str().unwrap().to_owned()
}

/// `tasks/get` until the task leaves `working` (within a minute).
async fn settled(mcp: &mut Mcp, task: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = request(mcp, "tasks/get", json!({"taskId": task}), true).await;
        let status = got["result"]["status"].as_str().unwrap_or_else(|| panic!("{got}")).to_owned();
        if status != "working" {
            return got["result"].clone();
        }
        assert!(Instant::now() < deadline, "still working: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_long_call_becomes_a_task_polled_to_its_result_and_kept_across_a_restart() {
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = provider_env("anthropic", &provider.base_url());
    let mut mcp = Mcp::spawn(dir.path(), &env, &[]).await;
    let discovered = request(&mut mcp, "server/discover", json!({}), true).await;
    assert_eq!(discovered["result"]["capabilities"]["extensions"][TASKS], json!({}), "{discovered}");
    let sid = session(&mut mcp).await;

    // A short tool is answered at once, even for a client that follows tasks.
    let listed = call(&mut mcp, "list_versions", json!({"session_id": sid}), true).await;
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");

    provider.push(Reply::text("The graph holds alpha.").delayed(Duration::from_millis(300)));
    let created = call(&mut mcp, "ai_chat", json!({"session_id": sid, "prompt": "what is there?"}), true).await;
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working");
    assert!(task["pollIntervalMs"].as_u64().is_some() && task["ttlMs"].as_u64().is_some(), "{task}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    let done = settled(&mut mcp, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["reply"], "The graph holds alpha.", "{done}");
    assert_eq!(done["result"]["isError"], false);

    // Unknown ids, and a client that does not follow tasks asking about one, are refused.
    let unknown = request(&mut mcp, "tasks/get", json!({"taskId": "no-such-task"}), true).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let undeclared = request(&mut mcp, "tasks/get", json!({"taskId": id}), false).await;
    assert!(undeclared.get("error").is_some(), "{undeclared}");
    // Without the extension, the same call is answered in place.
    provider.push(Reply::text("Still alpha."));
    let direct = call(&mut mcp, "ai_chat", json!({"session_id": sid, "prompt": "and now?"}), false).await;
    assert_eq!(direct["result"]["structuredContent"]["reply"], "Still alpha.", "{direct}");
    drop(mcp);

    // The next server on the same data still has the result.
    let mut mcp = Mcp::spawn(dir.path(), &env, &[]).await;
    let again = request(&mut mcp, "tasks/get", json!({"taskId": id}), true).await;
    assert_eq!(again["result"]["status"], "completed", "{again}");
    assert_eq!(again["result"]["result"], done["result"]);
}

#[tokio::test]
async fn a_cancelled_task_stops_and_says_so() {
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::spawn(dir.path(), &provider_env("anthropic", &provider.base_url()), &[]).await;
    let sid = session(&mut mcp).await;
    provider.push(Reply::text("too late").delayed(Duration::from_secs(30)));
    let created = call(&mut mcp, "ai_chat", json!({"session_id": sid, "prompt": "take your time"}), true).await;
    let id = created["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    let started = Instant::now();
    while provider.requests().iter().all(|r| r.method != "POST") {
        assert!(started.elapsed() < Duration::from_secs(30), "the model was never asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = request(&mut mcp, "tasks/cancel", json!({"taskId": id}), true).await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    let ended = settled(&mut mcp, &id).await;
    assert_eq!(ended["status"], "cancelled", "{ended}");
    assert!(started.elapsed() < Duration::from_secs(20), "stopped, not waited out");
    let no_input = request(&mut mcp, "tasks/update", json!({"taskId": id, "inputResponses": {}}), true).await;
    assert_eq!(no_input["error"]["code"], -32602, "{no_input}");
}

#[tokio::test]
async fn a_handshake_client_that_declares_the_extension_gets_tasks_too() {
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::spawn(dir.path(), &provider_env("anthropic", &provider.base_url()), &[]).await;
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"extensions": {TASKS: {}}}, "clientInfo": {"name": "e2e", "version": "1"}});
    let answer = mcp.request("initialize", init).await;
    assert_eq!(answer["result"]["capabilities"]["extensions"][TASKS], json!({}), "{answer}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "Note", "name": "alpha"}}]}).to_string();
    let sid =
        mcp.call("validate_knowledge", json!({"json_data": graph})).await["session_id"].as_str().unwrap().to_owned();
    provider.push(Reply::text("Alpha."));
    let created =
        mcp.request("tools/call", json!({"name": "ai_chat", "arguments": {"session_id": sid, "prompt": "?"}})).await;
    let id = created["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = mcp.request("tasks/get", json!({"taskId": id})).await;
        if got["result"]["status"] == "completed" {
            assert_eq!(got["result"]["result"]["structuredContent"]["reply"], "Alpha.", "{got}");
            break;
        }
        assert_eq!(got["result"]["status"], "working", "{got}");
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_long_text_remembered_as_a_task_says_how_far_it_got() {
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::spawn(dir.path(), &provider_env("anthropic", &provider.base_url()), &[]).await;
    let sid = session(&mut mcp).await;
    let paragraph = |who: &str| format!("{who} works at Acme. {}", "More about the work there. ".repeat(200));
    let text = [paragraph("Ann"), paragraph("Ben"), paragraph("Cat")].join("\n\n");
    let person = |who: &str| {
        Reply::Json(json!({"entities": [{"name": who, "type": "Person"}, {"name": "Acme", "type": "Company"}],
                           "facts": [{"subject": who, "predicate": "works_at", "object": "Acme"}]}))
    };
    provider.push_all([person("Ann"), person("Ben"), person("Cat").delayed(Duration::from_secs(2))]);
    let created = call(&mut mcp, "remember", json!({"session_id": sid, "text": text}), true).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();

    // While the last part waits for the model, the task says the first two are in.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = request(&mut mcp, "tasks/get", json!({"taskId": id}), true).await;
        if got["result"]["statusMessage"] == "part 2 of 3 remembered" {
            assert_eq!(got["result"]["status"], "working", "{got}");
            break;
        }
        assert!(Instant::now() < deadline, "no progress seen: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = settled(&mut mcp, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"]["structuredContent"];
    assert_eq!(result["parts"], 3, "{done}");
    assert_eq!(result["created"].as_array().map(Vec::len), Some(4), "Ann, Acme, Ben, Cat: {done}");
    assert_eq!(done["statusMessage"], "part 3 of 3 remembered");
}
