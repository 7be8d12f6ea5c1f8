//! Stored chats end to end: the real binary over MCP stdio on a SQLite data directory, the real
//! LLM client against the scripted provider server. A chat started with `new_chat`, continued
//! with `chat_id` and `prompt` alone, read back with `get_chat`, there after a restart, and a turn
//! answered just before a `kill -9` still there after it.

use serde_json::{Value, json};

use cks_testkit::{ProviderServer, Reply, ToolCall};

mod support;
use support::stdio::Mcp;

fn env(base: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CKS_LLM_PROVIDER", "anthropic".into()),
        ("CKS_LLM_MAX_RETRIES", "0".into()),
        ("ANTHROPIC_API_KEY", "sk-ant-chats-secret".into()),
        ("ANTHROPIC_BASE_URL", base.to_owned()),
    ]
}

fn add(id: &str) -> Value {
    json!({"operations": [{"type": "add_object", "identity": {"id": id, "type": "Note", "name": id}}]})
}

fn count(value: &Value) -> usize {
    value.as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_stored_chat_survives_restarts_and_a_kill_right_after_its_answer() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &env(&server.base_url())).await;
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "Claim", "name": "alpha"}}]}).to_string();
    let session = mcp.call("validate_knowledge", json!({"json_data": graph})).await["session_id"].clone();

    // A stored chat: the first turn calls a tool.
    server.push(Reply::ToolCalls(vec![ToolCall::new("evolve_knowledge", add("n1"))]));
    server.push(Reply::Text("Added n1.".into()));
    let first =
        mcp.call("ai_chat", json!({"session_id": session, "prompt": "Add a note called n1", "new_chat": true})).await;
    assert_eq!(first["reply"], "Added n1.", "{first}");
    let chat_id = first["chat_id"].clone();
    assert!(chat_id.is_string(), "{first}");

    // The next turn sends only the prompt; the model still gets the whole conversation.
    server.push(Reply::Text("Two objects.".into()));
    let second =
        mcp.call("ai_chat", json!({"session_id": session, "chat_id": chat_id, "prompt": "How many now?"})).await;
    assert_eq!((second["reply"].as_str(), &second["chat_id"]), (Some("Two objects."), &chat_id), "{second}");
    let asked = server.requests().last().unwrap().raw_body.clone();
    assert!(asked.contains("Add a note called n1") && asked.contains("How many now?"), "{asked}");
    assert_eq!(count(&second["messages"]), 6);

    let chat = mcp.call("get_chat", json!({"chat_id": chat_id})).await;
    assert_eq!(chat["messages"], second["messages"], "{chat}");
    assert_eq!(count(&chat["tool_calls"]), 2, "both turns: {chat}");
    assert_eq!(chat["tool_calls"][0]["calls"], first["tool_calls"]);
    assert_eq!(chat["tool_calls"][0]["calls"][0]["name"], "evolve_knowledge");
    assert_eq!(chat["revision"], 2);
    let listed = mcp.call("list_chats", json!({"session_id": session})).await;
    assert_eq!((listed["count"].as_u64(), &listed["chats"][0]["chat_id"]), (Some(1), &chat_id), "{listed}");
    assert_eq!(listed["chats"][0]["title"], "Add a note called n1");

    // A restart on the same data directory finds it whole.
    drop(mcp);
    let mut mcp = Mcp::start(dir.path(), &env(&server.base_url())).await;
    assert_eq!(mcp.call("get_chat", json!({"chat_id": chat_id})).await, chat);

    // Killed (SIGKILL) as soon as a turn's answer has arrived: the turn is stored.
    server.push(Reply::Text("Still two.".into()));
    let third = mcp.call("ai_chat", json!({"session_id": session, "chat_id": chat_id, "prompt": "And now?"})).await;
    assert_eq!(third["reply"], "Still two.", "{third}");
    mcp.child.kill().await.unwrap();
    drop(mcp);
    let mut mcp = Mcp::start(dir.path(), &env(&server.base_url())).await;
    let after = mcp.call("get_chat", json!({"chat_id": chat_id})).await;
    assert_eq!(after["messages"], third["messages"], "{after}");
    assert_eq!((after["revision"].as_u64(), count(&after["tool_calls"])), (Some(3), 3));

    // The stateless form is untouched: nothing stored, no chat_id.
    server.push(Reply::Text("Plain.".into()));
    let plain = mcp.call("ai_chat", json!({"session_id": session, "prompt": "hi"})).await;
    assert_eq!(plain["reply"], "Plain.");
    assert!(plain.get("chat_id").is_none(), "{plain}");
    assert_eq!(mcp.call("list_chats", json!({"session_id": session})).await["count"], 1);

    // Deleted, it is gone for good.
    assert_eq!(mcp.call("delete_chat", json!({"chat_id": chat_id})).await, json!({"deleted": true}));
    assert_eq!(mcp.call("get_chat", json!({"chat_id": chat_id})).await["error"], "chat_not_found");
    let gone = mcp.call("ai_chat", json!({"session_id": session, "chat_id": chat_id, "prompt": "hello?"})).await;
    assert_eq!(gone["error"], "chat_not_found", "{gone}");
}
