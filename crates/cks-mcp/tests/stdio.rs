//! MCP over stdio against the real binary: both framings, answered in kind, batches, an error
//! answer (never silence) for unparseable, invalid and over-size messages, and the tool list a
//! profile offers, grown by `find_tools`; the log lines on stderr, JSON naming their request.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// One answer and how it was framed.
#[derive(Debug)]
struct Reply {
    content_length: bool,
    body: Value,
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<Reply>,
    _dir: tempfile::TempDir,
}

fn start(max_message_bytes: Option<usize>) -> Server {
    start_with(max_message_bytes, None)
}

/// A server listing the tools of `profile` (`CKS_MCP_TOOLS`; unset: the default).
fn start_with(max_message_bytes: Option<usize>, profile: Option<&str>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
    command
        .env("CKS_MCP_DATA_DIR", dir.path())
        .env("CKS_MCP_DB_PATH", ":memory:")
        .env_remove("CKS_MCP_MAX_MESSAGE_BYTES")
        .env_remove("CKS_MCP_TOOLS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(max) = max_message_bytes {
        command.env("CKS_MCP_MAX_MESSAGE_BYTES", max.to_string());
    }
    if let Some(profile) = profile {
        command.env("CKS_MCP_TOOLS", profile);
    }
    let mut child = command.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (send, replies) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let reply = match line.trim().strip_prefix("Content-Length:") {
                Some(length) => {
                    let length: usize = length.trim().parse().unwrap();
                    let mut blank = String::new();
                    reader.read_line(&mut blank).unwrap();
                    assert_eq!(blank, "\r\n");
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    Reply { content_length: true, body: serde_json::from_slice(&body).unwrap() }
                }
                None => Reply { content_length: false, body: serde_json::from_str(&line).unwrap() },
            };
            if send.send(reply).is_err() {
                return;
            }
        }
    });
    let mut server = Server { child, stdin, replies, _dir: dir };
    server.line(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}));
    assert_eq!(server.next().body["id"], 0);
    server.line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    server
}

impl Server {
    fn raw(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).unwrap();
        self.stdin.flush().unwrap();
    }

    fn line(&mut self, message: &Value) {
        self.raw(format!("{message}\n").as_bytes());
    }

    fn framed(&mut self, message: &Value) {
        let body = message.to_string();
        self.raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    }

    /// The next answer; a server that stays silent fails the test instead of hanging it.
    fn next(&self) -> Reply {
        self.replies.recv_timeout(Duration::from_secs(60)).expect("the server did not answer")
    }

    /// The answer to request `id`, and the methods of the notifications that came before it.
    fn answer(&self, id: i64) -> (Value, Vec<String>) {
        let mut notified = Vec::new();
        loop {
            let body = self.next().body;
            if body["id"] == id {
                return (body, notified);
            }
            notified.extend(body["method"].as_str().map(str::to_owned));
        }
    }

    /// The names `tools/list` answers.
    fn listed(&mut self, id: i64) -> Vec<String> {
        self.line(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        let (reply, _) = self.answer(id);
        let tools = reply["result"]["tools"].as_array().unwrap();
        tools.iter().map(|tool| tool["name"].as_str().unwrap().to_owned()).collect()
    }

    fn call(&mut self, id: i64, tool: &str, arguments: Value) -> (Value, Vec<String>) {
        let call = json!({"name": tool, "arguments": arguments});
        self.line(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call}));
        let (reply, notified) = self.answer(id);
        (reply["result"].clone(), notified)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ping(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

#[test]
fn content_length_messages_are_answered_in_kind_between_plain_lines() {
    let mut s = start(None);
    s.framed(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let reply = s.next();
    assert!(reply.content_length);
    assert_eq!(reply.body["id"], 1);
    assert!(reply.body["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()));
    // Titles and hints reach the wire (server.rs tests what each tool declares).
    let tools = reply.body["result"]["tools"].as_array().unwrap();
    let query = tools.iter().find(|t| t["name"] == "query_subgraph").unwrap();
    assert_eq!(query["title"], "Query a subgraph", "{query}");
    assert_eq!(query["annotations"]["title"], "Query a subgraph", "{query}");
    assert_eq!(query["annotations"]["readOnlyHint"], true, "{query}");
    s.line(&ping(json!(2)));
    let reply = s.next();
    assert!(!reply.content_length);
    assert_eq!(reply.body, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    // Headers are case-insensitive, may come with others, and the body may span lines.
    let body = "{\"jsonrpc\": \"2.0\",\n \"id\": \"three\", \"method\": \"ping\"}";
    s.raw(format!("content-length: {}\r\nContent-Type: application/json\r\n\r\n{body}", body.len()).as_bytes());
    let reply = s.next();
    assert!(reply.content_length);
    assert_eq!(reply.body["id"], "three");
}

#[test]
fn unparseable_and_invalid_messages_get_error_answers() {
    let mut s = start(None);
    s.raw(b"{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": \n");
    let reply = s.next();
    assert_eq!(reply.body["error"]["code"], -32700, "{:?}", reply.body);
    s.line(&json!({"jsonrpc": "2.0", "id": "bad", "params": {}}));
    let reply = s.next();
    assert_eq!(reply.body["error"]["code"], -32600);
    assert_eq!(reply.body["id"], "bad");
    s.framed(&json!(42));
    let reply = s.next();
    assert!(reply.content_length);
    assert_eq!(reply.body["error"]["code"], -32600);
    assert_eq!(reply.body["id"], Value::Null);
    s.raw(b"Content-Length: lots\r\n\r\n");
    assert_eq!(s.next().body["error"]["code"], -32700);
    // Still serving afterwards.
    s.line(&ping(json!(6)));
    assert_eq!(s.next().body["id"], 6);
}

#[test]
fn over_size_messages_are_refused_by_name_in_both_framings() {
    let mut s = start(Some(4096));
    let padding = "x".repeat(10_000);
    let big = json!({"jsonrpc": "2.0", "method": "tools/call",
        "params": {"name": "validate_knowledge", "arguments": {"json_data": padding}}, "id": 77});
    s.line(&big);
    let reply = s.next();
    assert_eq!(reply.body["id"], 77);
    assert_eq!(reply.body["error"]["code"], -32600);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("4096") && message.contains("CKS_MCP_MAX_MESSAGE_BYTES"), "{message}");
    let mut big = big;
    big["id"] = json!("framed");
    s.framed(&big);
    let reply = s.next();
    assert!(reply.content_length);
    assert_eq!(reply.body["id"], "framed");
    assert_eq!(reply.body["error"]["code"], -32600);
    s.line(&ping(json!(8)));
    assert_eq!(s.next().body["id"], 8);
}

#[test]
fn batches_get_one_array_answer() {
    let mut s = start(None);
    s.line(&json!([ping(json!(1)), {"jsonrpc": "2.0", "method": "notifications/initialized"}, ping(json!(2)), 3]));
    let reply = s.next();
    let answers = reply.body.as_array().expect("an array answer");
    assert_eq!(answers.len(), 3, "{answers:?}");
    let mut ids: Vec<String> = answers.iter().map(|a| a["id"].to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["1", "2", "null"]);
    s.line(&json!([]));
    assert_eq!(s.next().body["error"]["code"], -32600);
}

#[test]
fn a_large_document_arrives_whole_in_every_framing_and_in_a_batch() {
    let mut s = start(None);
    // Text that needs escaping at both levels: quotes, a backslash, a control character, é.
    let objects: Vec<Value> = (0..6000)
        .map(|i| {
            json!({"identity": {"id": format!("n{i}"), "type": "Claim", "name": format!("Claim \"{i}\"")},
                "structure": {"note": format!("a \\ b\u{1} é {i}")}})
        })
        .collect();
    let graph = json!({"objects": objects}).to_string();
    s.line(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "validate_knowledge", "arguments": {"json_data": graph}}}));
    let created: Value = serde_json::from_str(s.next().body["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let session = created["session_id"].as_str().expect("a session").to_owned();

    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "serialize_knowledge", "arguments": {"session_id": session}}})
    };
    let check = |answer: &Value| {
        let block = &answer["result"]["content"][0];
        assert!(block.get("_meta").is_none(), "no mark of the transport's work is sent: {:?}", block.get("_meta"));
        let result: Value = serde_json::from_str(block["text"].as_str().unwrap()).unwrap();
        assert_eq!(result["session_id"], json!(session));
        let text = result["serialized"].as_str().unwrap();
        assert!(text.len() > 1 << 20, "a document large enough to be streamed ({} bytes)", text.len());
        let document: Value = serde_json::from_str(text).unwrap();
        assert_eq!(document["objects"], json!(objects));
    };
    s.line(&call(2));
    let reply = s.next();
    assert!(!reply.content_length);
    check(&reply.body);
    s.framed(&call(3));
    let reply = s.next();
    assert!(reply.content_length);
    check(&reply.body);
    s.line(&json!([call(4)]));
    let reply = s.next();
    check(&reply.body.as_array().expect("an array answer")[0]);
}

#[test]
fn the_default_list_is_core_and_every_tool_stays_callable() {
    let mut s = start_with(None, None);
    let listed = s.listed(1);
    assert!(listed.len() <= 25, "{listed:?}");
    for core in ["evolve_knowledge", "search_semantic", "revert_version", "ai_chat", "find_tools"] {
        assert!(listed.contains(&core.to_owned()), "{core} not in {listed:?}");
    }
    assert!(!listed.contains(&"list_agents".to_owned()), "{listed:?}");
    // Unlisted is not unreachable: a client that knows the name calls it.
    let (result, _) = s.call(2, "list_agents", json!({}));
    assert_eq!(result["isError"], false, "{result}");
    assert!(result["structuredContent"]["agents"].is_array(), "{result}");

    let all = start_with(None, Some("all")).listed(1);
    assert!(all.len() > 70 && all.contains(&"list_agents".to_owned()), "{}", all.len());
    let chosen = start_with(None, Some("versions, list_agents")).listed(1);
    assert!(chosen.contains(&"list_agents".to_owned()) && chosen.contains(&"revert_version".to_owned()));
    assert!(!chosen.contains(&"evolve_knowledge".to_owned()), "{chosen:?}");
}

#[test]
fn tools_found_join_the_list_and_the_client_is_told() {
    let mut s = start_with(None, None);
    let (found, notified) = s.call(1, "find_tools", json!({"need": "retry a dead-lettered conflict task"}));
    let tools = found["structuredContent"]["tools"].as_array().unwrap();
    assert!(tools.len() <= 5, "{found}");
    let retry = tools.iter().find(|tool| tool["name"] == "retry_dead_letter").expect("retry_dead_letter found");
    assert_eq!(retry["inputSchema"]["required"], json!(["task_id"]), "{retry}");
    assert!(retry["title"].is_string() && retry["description"].is_string(), "{retry}");
    assert!(notified.contains(&"notifications/tools/list_changed".to_owned()), "{notified:?}");
    let listed = s.listed(2);
    assert!(listed.contains(&"retry_dead_letter".to_owned()), "{listed:?}");
    // Found again: the list does not change, so nothing is said.
    let (_, notified) = s.call(3, "find_tools", json!({"need": "retry a dead-lettered conflict task", "limit": 1}));
    assert!(notified.is_empty(), "{notified:?}");

    // No need: every other tool by name and title, without schemas, and the list stays as it was.
    let (every, _) = s.call(4, "find_tools", json!({}));
    let every = every["structuredContent"]["tools"].as_array().unwrap();
    assert!(every.len() > 70, "{}", every.len());
    assert!(every.iter().all(|tool| tool.get("inputSchema").is_none() && tool["title"].is_string()));
    assert_eq!(s.listed(5), listed);
    let (refused, _) = s.call(6, "find_tools", json!({"need": "x", "limit": 0}));
    assert_eq!(refused["isError"], true, "{refused}");
}

#[test]
fn log_lines_are_json_naming_their_request_and_hold_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .env("CKS_MCP_DATA_DIR", dir.path())
        .env("CKS_MCP_DB_PATH", ":memory:")
        .env("CKS_LLM_PROVIDER", "anthropic")
        .env("ANTHROPIC_API_KEY", "sk-ant-log-secret")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("CKS_LLM_MAX_RETRIES", "0")
        .env_remove("CKS_MCP_LOG")
        .env_remove("CKS_MCP_LOG_FORMAT")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    for message in [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": "seven", "method": "tools/call",
            "params": {"name": "list_versions", "arguments": {"session_id": "nope"}}}),
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "construct_knowledge", "arguments": {"text": graph}}}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    // The model cannot be reached: the call fails at once, and the server ends with its input.
    std::thread::sleep(Duration::from_secs(2));
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains("sk-ant-log-secret"), "{stderr}");
    let calls: Vec<Value> = stderr
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .filter(|line: &Value| line["target"] == "cks_tool_call")
        .collect();
    let call =
        |tool: &str| calls.iter().find(|line| line["fields"]["tool"] == tool).unwrap_or_else(|| panic!("{stderr}"));
    let versions = call("list_versions");
    assert_eq!(versions["span"]["request_id"], "\"seven\"", "{versions}");
    assert_eq!(versions["fields"]["error"], "session_not_found", "{versions}");
    let construct = call("construct_knowledge");
    assert_eq!(construct["span"]["request_id"], "8", "{construct}");
    assert_eq!(construct["fields"]["outcome"], "error", "{construct}");
}

#[test]
fn log_lines_are_text_when_asked_and_hold_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .env("CKS_MCP_DATA_DIR", dir.path())
        .env("CKS_MCP_DB_PATH", ":memory:")
        .env("CKS_LLM_PROVIDER", "anthropic")
        .env("ANTHROPIC_API_KEY", "sk-ant-text-log-secret")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("CKS_LLM_MAX_RETRIES", "0")
        .env("CKS_MCP_LOG_FORMAT", "text")
        .env_remove("CKS_MCP_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    for message in [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "list_versions", "arguments": {"session_id": "nope"}}}),
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "construct_knowledge", "arguments": {"text": graph}}}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    std::thread::sleep(Duration::from_secs(2));
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains("sk-ant-text-log-secret"), "{stderr}");
    let calls: Vec<&str> = stderr.lines().filter(|line| line.contains("cks_tool_call")).collect();
    assert_eq!(calls.len(), 2, "{stderr}");
    for line in &calls {
        assert!(serde_json::from_str::<Value>(line).is_err(), "not JSON: {line}");
        assert!(!line.contains("trace_id"), "no trace without an endpoint: {line}");
    }
    let versions = calls.iter().find(|line| line.contains("list_versions")).unwrap();
    assert!(versions.contains("INFO") && versions.contains("request{request_id=\"7\"}"), "{versions}");
    assert!(versions.contains("error=\"session_not_found\""), "{versions}");
}
