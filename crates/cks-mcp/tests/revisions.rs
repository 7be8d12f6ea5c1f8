//! Protocol revisions: the stateless 2026-07-28 revision (`server/discover`, self-contained
//! requests, `resultType` and cache hints, no session) beside 2025-11-25 with its handshake, over
//! HTTP and stdio, and what a request of the new revision gets when it names no revision or one
//! the server does not speak.

use serde_json::{Value, json};

mod support;
use support::stdio::Mcp;
use support::{TestServer, start};

const STATELESS: &str = "2026-07-28";

/// The `_meta` every request of the stateless revision carries.
fn meta(version: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "revisions", "version": "1"},
    })
}

fn request(id: u64, method: &str, mut params: Value, version: &str) -> Value {
    params["_meta"] = meta(version);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Posts one message as a client of the stateless revision does (with the routing headers that
/// repeat its method and what it names); the answer (read from a JSON body or the stream's last
/// event) and whether a session id came back.
async fn post(s: &TestServer, body: &Value, header_version: &str) -> (u16, Value, bool) {
    let mut request = s
        .post(body)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", header_version);
    if let Some(method) = body["method"].as_str() {
        request = request.header("mcp-method", method);
    }
    let params = &body["params"];
    if let Some(name) = params["name"].as_str().or(params["uri"].as_str()) {
        request = request.header("mcp-name", name);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let session = response.headers().contains_key("mcp-session-id");
    let text = response.text().await.unwrap();
    let answer = match serde_json::from_str(&text) {
        Ok(answer) => answer,
        Err(_) => text
            .lines()
            .rev()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .unwrap_or(Value::String(text)),
    };
    (status, answer, session)
}

fn tool(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

fn graph() -> String {
    json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string()
}

#[tokio::test]
async fn http_speaks_the_stateless_revision_without_a_session() {
    let s = start(None, 1 << 20).await;
    let (status, discovered, session) = post(&s, &request(1, "server/discover", json!({}), STATELESS), STATELESS).await;
    assert_eq!(status, 200, "{discovered}");
    assert!(!session, "the stateless revision has no sessions");
    let versions = discovered["result"]["supportedVersions"].as_array().unwrap();
    assert!(versions.contains(&json!(STATELESS)) && versions.contains(&json!("2025-11-25")), "{discovered}");
    assert_eq!(discovered["result"]["resultType"], "complete");

    let (_, tools, session) = post(&s, &request(2, "tools/list", json!({}), STATELESS), STATELESS).await;
    assert!(!session);
    let result = &tools["result"];
    assert_eq!(result["resultType"], "complete", "{tools}");
    assert_eq!(result["ttlMs"], 300_000);
    assert_eq!(result["cacheScope"], "private");
    assert!(result["tools"].as_array().unwrap().iter().any(|t| t["name"] == "validate_knowledge"));

    let call = request(3, "tools/call", tool("validate_knowledge", json!({"json_data": graph()})), STATELESS);
    let (_, created, _) = post(&s, &call, STATELESS).await;
    assert_eq!(created["result"]["resultType"], "complete", "{created}");
    assert_eq!(created["result"]["isError"], false);
    let sid = created["result"]["structuredContent"]["session_id"].as_str().unwrap().to_owned();

    let read = request(4, "resources/read", json!({"uri": format!("cks://sessions/{sid}")}), STATELESS);
    let (_, read, _) = post(&s, &read, STATELESS).await;
    assert_eq!(read["result"]["resultType"], "complete", "{read}");
    assert_eq!(read["result"]["ttlMs"], 0, "a session changes with every commit");
    let (_, listed, _) = post(&s, &request(5, "resources/list", json!({}), STATELESS), STATELESS).await;
    assert_eq!(listed["result"]["ttlMs"], 0, "{listed}");
    let (_, prompts, _) = post(&s, &request(6, "prompts/list", json!({}), STATELESS), STATELESS).await;
    assert_eq!(prompts["result"]["ttlMs"], 300_000, "{prompts}");
    let get =
        request(7, "prompts/get", json!({"name": "branch_and_merge", "arguments": {"session_id": sid}}), STATELESS);
    let (_, prompt, _) = post(&s, &get, STATELESS).await;
    assert_eq!(prompt["result"]["resultType"], "complete", "{prompt}");

    let missing = request(8, "tools/call", tool("list_versions", json!({"session_id": "no-such"})), STATELESS);
    let (_, missing, _) = post(&s, &missing, STATELESS).await;
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    assert_eq!(missing["result"]["structuredContent"]["error"], "session_not_found");
    let unknown = request(9, "tools/call", tool("no_such_tool", json!({})), STATELESS);
    let (_, unknown, _) = post(&s, &unknown, STATELESS).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

/// What `resources/list` shows of sessions: their number.
async fn sessions(s: &TestServer) -> usize {
    let (_, listed, _) = post(s, &request(99, "resources/list", json!({}), STATELESS), STATELESS).await;
    let resources = listed["result"]["resources"].as_array().unwrap();
    let session = |uri: &str| uri.strip_prefix("cks://sessions/").is_some_and(|id| !id.contains('/'));
    resources.iter().filter(|r| session(r["uri"].as_str().unwrap())).count()
}

#[tokio::test]
async fn http_stateless_requests_naming_no_revision_or_an_unknown_one_are_refused_and_change_nothing() {
    let s = start(None, 1 << 20).await;
    let create = |id, version: &str| {
        request(id, "tools/call", tool("validate_knowledge", json!({"json_data": graph()})), version)
    };

    let (status, unknown, _) = post(&s, &create(1, "2099-01-01"), "2099-01-01").await;
    assert_eq!(unknown["error"]["code"], -32022, "{status} {unknown}");
    let supported = unknown["error"]["data"]["supported"].as_array().unwrap();
    assert!(supported.contains(&json!(STATELESS)), "{unknown}");

    let mut bare = create(2, STATELESS);
    bare["params"].as_object_mut().unwrap().remove("_meta");
    let (status, missing, _) = post(&s, &bare, STATELESS).await;
    assert_eq!(missing["error"]["code"], -32602, "{status} {missing}");
    assert!(missing["error"]["message"].as_str().unwrap().contains("protocolVersion"), "{missing}");

    let (_, no_method, _) = post(&s, &request(3, "no/such/method", json!({}), STATELESS), STATELESS).await;
    assert_eq!(no_method["error"]["code"], -32601, "{no_method}");

    assert_eq!(sessions(&s).await, 0, "no refused request created a session");
    let (_, created, _) = post(&s, &create(4, STATELESS), STATELESS).await;
    assert_eq!(created["result"]["isError"], false, "{created}");
    assert_eq!(sessions(&s).await, 1);
}

#[tokio::test]
async fn http_sessions_of_the_handshake_revision_keep_its_shape_and_end_with_204() {
    let s = start(None, 1 << 20).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}});
    let (_, init, _) = post(&s, &initialize, "2025-11-25").await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let response = s.post(&initialize).header("accept", "application/json, text/event-stream").send().await.unwrap();
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    response.bytes().await.unwrap();
    let in_session = |body: &Value| {
        s.post(body)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &session)
    };
    let listed = in_session(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).send().await.unwrap();
    let text = listed.text().await.unwrap();
    let data = text.lines().filter_map(|l| l.strip_prefix("data:")).find(|d| d.contains("\"tools\"")).unwrap();
    let listed: Value = serde_json::from_str(data.trim()).unwrap();
    assert!(listed["result"].get("resultType").is_none(), "a 2025-11-25 result has no resultType");
    assert!(listed["result"].get("ttlMs").is_none());

    let ended = s
        .client
        .delete(format!("{}/mcp", s.base))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 204);
    let after = in_session(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).send().await.unwrap();
    assert_eq!(after.status(), 404, "the session ended");
}

#[tokio::test]
async fn stdio_speaks_both_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::spawn(dir.path(), &[], &[]).await;
    let discovered = mcp.request("server/discover", json!({"_meta": meta(STATELESS)})).await;
    let versions = discovered["result"]["supportedVersions"].as_array().unwrap();
    assert!(versions.contains(&json!(STATELESS)), "{discovered}");
    let listed = mcp.request("tools/list", json!({"_meta": meta(STATELESS)})).await;
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    assert_eq!(listed["result"]["ttlMs"], 300_000);
    let call = json!({"name": "validate_knowledge", "arguments": {"json_data": graph()}, "_meta": meta(STATELESS)});
    let created = mcp.request("tools/call", call).await;
    assert_eq!(created["result"]["resultType"], "complete", "{created}");
    assert_eq!(created["result"]["structuredContent"]["valid"], true);
    let unknown = mcp.request("tools/list", json!({"_meta": meta("2099-01-01")})).await;
    assert_eq!(unknown["error"]["code"], -32022, "{unknown}");
    drop(mcp);

    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &[]).await;
    let listed = mcp.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    assert!(listed["result"].get("resultType").is_none(), "a handshake revision's result has no resultType");
    let missing = mcp.request("tools/call", json!({"name": "list_versions", "arguments": {"session_id": "x"}})).await;
    assert_eq!(missing["result"]["isError"], true, "{missing}");
}

/// The notifications that arrived before the answer to the last request.
fn log_lines(mcp: &mut Mcp) -> Vec<Value> {
    let lines = mcp.notifications.iter().filter(|n| n["method"] == "notifications/message").cloned().collect();
    mcp.notifications.clear();
    lines
}

#[tokio::test]
async fn call_logs_reach_clients_at_the_level_they_chose_in_each_revision() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &[]).await;
    let graph_call = json!({"name": "validate_knowledge", "arguments": {"json_data": graph()}});
    let failing_call = json!({"name": "list_versions", "arguments": {"session_id": "no-such"}});
    mcp.request("tools/call", graph_call.clone()).await;
    assert!(log_lines(&mut mcp).is_empty(), "nothing before a level is chosen");

    assert_eq!(mcp.request("logging/setLevel", json!({"level": "info"})).await["result"], json!({}));
    mcp.request("tools/call", graph_call.clone()).await;
    let lines = log_lines(&mut mcp);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let params = &lines[0]["params"];
    assert_eq!((params["level"].clone(), params["logger"].clone()), (json!("info"), json!("cks_tool_call")));
    assert_eq!(params["data"]["tool"], "validate_knowledge");
    assert_eq!(params["data"]["outcome"], "ok");
    assert!(params["data"]["duration_ms"].as_f64().unwrap() >= 0.0);

    mcp.request("logging/setLevel", json!({"level": "warning"})).await;
    mcp.request("tools/call", graph_call.clone()).await;
    assert!(log_lines(&mut mcp).is_empty(), "an info line is below warning");
    mcp.request("tools/call", failing_call.clone()).await;
    let lines = log_lines(&mut mcp);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["params"]["level"], "warning");
    assert_eq!(lines[0]["params"]["data"]["error"], "session_not_found");
    drop(mcp);

    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::spawn(dir.path(), &[], &[]).await;
    let refused = mcp.request("logging/setLevel", json!({"level": "info", "_meta": meta(STATELESS)})).await;
    assert_eq!(refused["error"]["code"], -32601, "2026-07-28 has no logging/setLevel: {refused}");
    let mut quiet = graph_call.clone();
    quiet["_meta"] = meta(STATELESS);
    mcp.request("tools/call", quiet.clone()).await;
    assert!(log_lines(&mut mcp).is_empty(), "no level asked for");
    let mut asked = quiet;
    asked["_meta"]["io.modelcontextprotocol/logLevel"] = json!("debug");
    mcp.request("tools/call", asked).await;
    let lines = log_lines(&mut mcp);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["params"]["data"]["tool"], "validate_knowledge");
}

#[tokio::test]
async fn completions_suggest_sessions_versions_and_objects_for_prompts_and_templates() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::spawn(dir.path(), &[], &[]).await;
    let init = mcp
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    let capabilities = &init["result"]["capabilities"];
    assert!(capabilities["completions"].is_object() && capabilities["logging"].is_object(), "{init}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let created = mcp.call("validate_knowledge", json!({"json_data": graph()})).await;
    let (sid, version) = (created["session_id"].as_str().unwrap(), created["version_id"].as_str().unwrap());

    let complete = |reference: Value, name: &str, value: &str, context: Value| json!({"ref": reference, "argument": {"name": name, "value": value}, "context": {"arguments": context}});
    let prompt = json!({"type": "ref/prompt", "name": "explore_subgraph"});
    let answer = mcp.request("completion/complete", complete(prompt.clone(), "session_id", &sid[..4], json!({}))).await;
    assert_eq!(answer["result"]["completion"]["values"], json!([sid]), "{answer}");
    assert_eq!(answer["result"]["completion"]["hasMore"], false);
    let answer =
        mcp.request("completion/complete", complete(prompt.clone(), "seed_id", "", json!({"session_id": sid}))).await;
    assert_eq!(answer["result"]["completion"]["values"], json!(["a"]), "{answer}");
    let answer = mcp.request("completion/complete", complete(prompt, "topic", "", json!({}))).await;
    assert_eq!(answer["result"]["completion"]["values"], json!([]), "explore_subgraph has no 'topic'");

    let templates = mcp.request("resources/templates/list", json!({})).await;
    let uris: Vec<&str> = templates["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["uriTemplate"].as_str())
        .collect();
    let template = "cks://sessions/{session_id}/versions/{version_id}";
    assert!(uris.contains(&template), "{templates}");
    let reference = json!({"type": "ref/resource", "uri": template});
    let answer =
        mcp.request("completion/complete", complete(reference, "version_id", "", json!({"session_id": sid}))).await;
    assert_eq!(answer["result"]["completion"]["values"], json!([version]), "{answer}");
}

/// Waits up to `wait` for `notifications/resources/updated` about `uri`, keeping the others.
async fn updated_within(mcp: &mut Mcp, uri: &str, wait: std::time::Duration) -> Option<Value> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if let Some(i) = mcp
            .notifications
            .iter()
            .position(|n| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == uri)
        {
            return Some(mcp.notifications.remove(i));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match mcp.read(left).await {
            Some(message) => mcp.notifications.push(message),
            None => return None,
        }
    }
}

/// A notification that should come: waits long for it.
async fn updated(mcp: &mut Mcp, uri: &str) -> Option<Value> {
    updated_within(mcp, uri, std::time::Duration::from_secs(10)).await
}

/// A notification that should not come: waits a second for it (it comes at once or not at all).
async fn not_updated(mcp: &mut Mcp, uri: &str) -> bool {
    updated_within(mcp, uri, std::time::Duration::from_secs(1)).await.is_none()
}

fn add_object(sid: &str, id: &str) -> Value {
    json!({"name": "evolve_knowledge", "arguments": {"session_id": sid, "operations": [
        {"type": "add_object", "identity": {"id": id, "type": "T", "name": id}}]}})
}

#[tokio::test]
async fn subscribers_hear_of_each_commit_in_both_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &[]).await;
    let created = mcp.call("validate_knowledge", json!({"json_data": graph()})).await;
    let sid = created["session_id"].as_str().unwrap().to_owned();
    let uri = format!("cks://sessions/{sid}");
    for refused in
        [format!("{uri}/versions/{}", created["version_id"].as_str().unwrap()), "cks://sessions/no-such".into()]
    {
        let answer = mcp.request("resources/subscribe", json!({"uri": refused})).await;
        assert_eq!(answer["error"]["code"], -32602, "{refused}: {answer}");
    }
    assert_eq!(mcp.request("resources/subscribe", json!({"uri": uri})).await["result"], json!({}));
    mcp.request("tools/call", add_object(&sid, "b")).await;
    let heard = updated(&mut mcp, &uri).await.expect("resources/updated after the commit");
    assert_eq!(heard["params"]["uri"], uri);
    assert!(not_updated(&mut mcp, "cks://sessions").await, "the list was not subscribed to");
    mcp.request("resources/unsubscribe", json!({"uri": uri})).await;
    // Word of a commit made just before the subscription (the session's creation) may still have
    // come meanwhile; the pipe is in order, so only what follows the unsubscribe's answer counts.
    mcp.notifications.clear();
    mcp.request("tools/call", add_object(&sid, "c")).await;
    assert!(not_updated(&mut mcp, &uri).await, "no word after unsubscribing");
    drop(mcp);

    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::spawn(dir.path(), &[], &[]).await;
    let mut create = json!({"name": "validate_knowledge", "arguments": {"json_data": graph()}});
    create["_meta"] = meta(STATELESS);
    let created = mcp.request("tools/call", create).await;
    let sid = created["result"]["structuredContent"]["session_id"].as_str().unwrap().to_owned();
    let uri = format!("cks://sessions/{sid}");
    let listen =
        json!({"notifications": {"resourceSubscriptions": [uri, "test://not-ours"]}, "_meta": meta(STATELESS)});
    let listening = mcp.send_request("subscriptions/listen", listen).await;
    let acknowledged = loop {
        let message = mcp.read(std::time::Duration::from_secs(10)).await.expect("an acknowledgment");
        if message["method"] == "notifications/subscriptions/acknowledged" {
            break message;
        }
    };
    assert_eq!(acknowledged["params"]["notifications"]["resourceSubscriptions"], json!([uri]), "{acknowledged}");
    let mut evolve = add_object(&sid, "b");
    evolve["_meta"] = meta(STATELESS);
    let id = mcp.send_request("tools/call", evolve).await;
    mcp.response(id).await;
    let heard = updated(&mut mcp, &uri).await.expect("resources/updated on the listening stream");
    assert_eq!(heard["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], json!(listening), "{heard}");
}
