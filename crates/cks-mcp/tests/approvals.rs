//! Approvals through the protocol, over the real binary's stdio with a scripted provider: a chat's
//! destructive call put to the client's user by `elicitation/create` (handshake revisions) or by
//! an `input_required` result and the client's retry (2026-07-28), and the turn continued in the
//! same `tools/call` with the answer: approved, declined, dismissed, and a forged or misplaced
//! retry refused with nothing changed.

use serde_json::{Value, json};
use std::time::Duration;

use cks_testkit::{ProviderServer, Reply, ToolCall};

mod support;
use support::provider_env;
use support::stdio::Mcp;

const STATELESS: &str = "2026-07-28";

/// The server and its provider, the client declaring form elicitation, and a session with three
/// versions.
struct Chat {
    provider: ProviderServer,
    mcp: Mcp,
    handshake: bool,
    session: String,
    versions: Vec<Value>,
    _dir: tempfile::TempDir,
}

impl Chat {
    /// With `handshake`, the client starts with `initialize` (2025-11-25); else it speaks the
    /// stateless revision.
    async fn start(handshake: bool) -> Chat {
        let provider = ProviderServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let mut mcp = Mcp::spawn(dir.path(), &provider_env("anthropic", &provider.base_url()), &[]).await;
        if handshake {
            let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "e2e", "version": "1"}});
            let answer = mcp.request("initialize", init).await;
            assert_eq!(answer["result"]["protocolVersion"], "2025-11-25", "{answer}");
            mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        }
        let mut chat = Chat { provider, mcp, handshake, session: String::new(), versions: Vec::new(), _dir: dir };
        let graph = json!({"objects": [{"identity": {"id": "a", "type": "Note", "name": "alpha"}}]});
        chat.session = chat.tool("validate_knowledge", json!({"json_data": graph.to_string()})).await["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
        for id in ["b", "c"] {
            let ops = json!([{"type": "add_object", "identity": {"id": id, "type": "Note", "name": id}}]);
            chat.tool("evolve_knowledge", json!({"session_id": chat.session, "operations": ops})).await;
        }
        chat.versions = chat.list_versions().await;
        chat
    }

    /// A `tools/call`'s params, with the stateless revision's `_meta` when the client speaks it.
    fn params(&self, name: &str, arguments: Value, handshake: bool) -> Value {
        let mut params = json!({"name": name, "arguments": arguments});
        if !handshake {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS,
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
            });
        }
        params
    }

    /// A tool's result object.
    async fn tool(&mut self, name: &str, arguments: Value) -> Value {
        let reply = self.mcp.request("tools/call", self.params(name, arguments, self.handshake)).await;
        reply["result"]["structuredContent"].clone()
    }

    async fn list_versions(&mut self) -> Vec<Value> {
        let session = self.session.clone();
        self.tool("list_versions", json!({"session_id": session})).await["versions"].as_array().unwrap().clone()
    }

    /// The model's answer: revert the session to its first version.
    fn revert_to_first(&self) -> Reply {
        let target = self.versions[0]["version_id"].clone();
        Reply::ToolCalls(vec![ToolCall::new("revert_version", json!({"target_version_id": target, "confirm": true}))])
    }

    fn undo(&self) -> Value {
        json!({"session_id": self.session, "prompt": "undo everything", "approvals": true})
    }

    /// Sends `ai_chat` (handshake revision), answers the server's `elicitation/create` with
    /// `answer`, and returns the question and the call's result.
    async fn ask_and_answer(&mut self, answer: Value) -> (Value, Value) {
        let id = self.mcp.send_request("tools/call", self.params("ai_chat", self.undo(), true)).await;
        let question = loop {
            let message = self.mcp.read(Duration::from_secs(60)).await.expect("the server's question");
            assert_ne!(message.get("id"), Some(&json!(id)), "answered without asking: {message}");
            if message["method"] == "elicitation/create" {
                break message;
            }
        };
        self.mcp.send(json!({"jsonrpc": "2.0", "id": question["id"], "result": answer})).await;
        let reply = self.mcp.response(id).await;
        (question["params"].clone(), reply["result"].clone())
    }
}

#[tokio::test]
async fn a_handshake_client_is_asked_and_the_same_call_goes_on_with_its_answer() {
    let mut chat = Chat::start(true).await;
    let before = chat.versions.len();

    // Approved: the call runs and the model answers, in one tools/call.
    chat.provider.push(chat.revert_to_first());
    chat.provider.push(Reply::text("Reverted."));
    let (question, result) = chat.ask_and_answer(json!({"action": "accept", "content": {"approve": true}})).await;
    assert_eq!(question["mode"], "form", "{question}");
    let message = question["message"].as_str().unwrap();
    assert!(message.contains("revert_version") && message.contains(&chat.session), "{message}");
    assert_eq!(question["requestedSchema"]["required"], json!(["approve"]));
    let out = &result["structuredContent"];
    assert_eq!(out["reply"], "Reverted.", "{out}");
    assert!(out.get("pending_approval").is_none(), "{out}");
    assert_eq!(out["tool_calls"][0]["name"], "revert_version");
    assert_eq!(out["tool_calls"][0]["is_error"], false, "{out}");
    assert_eq!(out["usage"]["llm_calls"], 2, "the whole turn's requests: {out}");
    assert_eq!(chat.list_versions().await.len(), before + 1, "reverted");

    // Declined, with a reason: the model is told, nothing runs.
    chat.provider.push(chat.revert_to_first());
    chat.provider.push(Reply::text("Left as it is."));
    let declined = json!({"action": "accept", "content": {"approve": false, "reason": "keep it"}});
    let (_, result) = chat.ask_and_answer(declined).await;
    let out = &result["structuredContent"];
    assert_eq!(out["reply"], "Left as it is.", "{out}");
    assert_eq!(out["tool_calls"][0]["result"]["error"], "not_approved", "{out}");
    assert!(out["tool_calls"][0]["result"]["message"].as_str().unwrap().contains("keep it"), "{out}");
    assert_eq!(chat.list_versions().await.len(), before + 1, "nothing reverted");

    // Dismissed: the turn waits as it would without the question; nothing runs.
    chat.provider.push(chat.revert_to_first());
    let (_, result) = chat.ask_and_answer(json!({"action": "cancel"})).await;
    let out = &result["structuredContent"];
    assert_eq!(out["pending_approval"]["name"], "revert_version", "{out}");
    assert_eq!(chat.list_versions().await.len(), before + 1);
    assert_eq!(chat.provider.pending(), 0);
}

#[tokio::test]
async fn a_stateless_client_gets_input_required_and_its_retry_goes_on() {
    let mut chat = Chat::start(false).await;
    let before = chat.versions.len();
    chat.provider.push(chat.revert_to_first());
    let params = chat.params("ai_chat", chat.undo(), false);
    let first = chat.mcp.request("tools/call", params.clone()).await;
    let asked = &first["result"];
    assert_eq!(asked["resultType"], "input_required", "{first}");
    let question = &asked["inputRequests"]["approval"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    assert!(question["params"]["message"].as_str().unwrap().contains("revert_version"));
    let state = asked["requestState"].as_str().unwrap().to_owned();
    assert_eq!(chat.list_versions().await.len(), before, "nothing ran while asking");

    let retry = |state: &str, arguments: Option<Value>, answer: Value| {
        let mut p = params.clone();
        if let Some(arguments) = arguments {
            p["arguments"] = arguments;
        }
        p["requestState"] = state.into();
        p["inputResponses"] = json!({"approval": answer});
        p
    };
    let approve = json!({"action": "accept", "content": {"approve": true}});

    // A changed state, or the state with another call's arguments: refused, nothing runs.
    let mut forged = state.clone();
    forged.insert(forged.len() / 2, 'A');
    let refused = chat.mcp.request("tools/call", retry(&forged, None, approve.clone())).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let elsewhere = json!({"session_id": chat.session, "prompt": "something else", "approvals": true});
    let refused = chat.mcp.request("tools/call", retry(&state, Some(elsewhere), approve.clone())).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(chat.list_versions().await.len(), before);

    // The retry with the answer: the call runs, the model answers, the turn is one result.
    chat.provider.push(Reply::text("Reverted."));
    let done = chat.mcp.request("tools/call", retry(&state, None, approve)).await;
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    let out = &result["structuredContent"];
    assert_eq!(out["reply"], "Reverted.", "{out}");
    assert_eq!(out["tool_calls"][0]["is_error"], false, "{out}");
    assert_eq!(out["usage"]["llm_calls"], 2, "{out}");
    assert_eq!(chat.list_versions().await.len(), before + 1);
}
