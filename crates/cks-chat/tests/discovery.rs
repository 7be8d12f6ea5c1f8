//! Tools found with `find_tools`, with a scripted model through the registry: a need in words finds
//! the tool, which is then offered and runs pinned to the chat's session; denied tools and tools
//! that name a second session are never found and never run; approvals hold for found destructive
//! tools; the returned `messages` keep found tools offered in the next turn; the whole list is
//! paged.

mod support;

use serde_json::{Value, json};

use cks_chat::{CHAT_TOOLS, DENIED_TOOLS, DISCOVERABLE, FIND_TOOLS};

use support::{Answer, Harness, Scripted, graph};

fn tools(calls: &[(&str, Value)]) -> Answer {
    Answer::Tools(calls.iter().map(|(n, a)| ((*n).to_owned(), a.clone())).collect())
}

fn find(need: &str) -> Answer {
    tools(&[("find_tools", json!({"need": need}))])
}

fn names(tools: &[cks_llm::ToolSpec]) -> Vec<String> {
    tools.iter().map(|t| t.name.clone()).collect()
}

fn found(result: &Value) -> Vec<String> {
    result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_need_in_words_finds_the_tool_which_is_then_offered_and_runs_pinned() {
    let model = Scripted::new(vec![
        find("draw the graph as a diagram"),
        tools(&[("visualize_graph", json!({"session_id": "someone-else"}))]),
        Answer::Text("Here it is.".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "draw it"})).await;

    let search = &out["tool_calls"][0];
    assert_eq!(search["name"], "find_tools");
    assert_eq!(found(&search["result"])[0], "visualize_graph", "{search}");
    let schema = &search["result"]["tools"][0]["input_schema"];
    assert!(schema["properties"].get("session_id").is_none(), "pinned, not offered: {schema}");
    assert!(schema["properties"].get("seed_ids").is_some(), "{schema}");
    assert!(!names(&model.request(0).tools).contains(&"visualize_graph".to_owned()), "not in the first offer");
    assert!(names(&model.request(1).tools).contains(&"visualize_graph".to_owned()), "offered once found");

    let drawn = &out["tool_calls"][1];
    assert_eq!(drawn["arguments"]["session_id"], json!(sid), "{drawn}");
    assert_eq!(drawn["is_error"], false, "{drawn}");
    assert!(drawn["result"].to_string().contains("s alpha"), "the chat's own graph: {drawn}");
    assert_eq!(out["reply"], "Here it is.");
    assert_eq!(model.calls(), 3, "one extra round trip for the search");
}

#[tokio::test]
async fn a_found_tool_never_reaches_another_session() {
    let model = Scripted::new(vec![
        find("export the graph as turtle"),
        tools(&[("export_knowledge", json!({"format": "turtle", "session_id": "placeholder"}))]),
        Answer::Text("ok".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("mine")).await;
    let other = h.session(graph("theirs")).await;
    let other_before = h.state(&other).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "export"})).await;
    assert!(found(&out["tool_calls"][0]["result"]).contains(&"export_knowledge".to_owned()), "{out}");
    let export = &out["tool_calls"][1];
    assert_eq!(export["arguments"]["session_id"], json!(sid));
    let data = export["result"]["data"].as_str().unwrap();
    assert!(data.contains("mine alpha") && !data.contains("theirs"), "{data}");
    assert_eq!(h.state(&other).await, other_before);
}

#[tokio::test]
async fn denied_tools_and_second_session_tools_are_never_found_and_never_run() {
    let needs = [
        "merge a branch into another session",
        "create a branch or fork a sandbox",
        "export storage migrate import backup",
        "list the registered graphs and link graphs",
        "close the session",
        "start a pipeline or an agent",
        "list chats delete chat",
    ];
    let searches: Vec<(&str, Value)> = needs.iter().map(|n| ("find_tools", json!({"need": n}))).collect();
    let model = Scripted::new(vec![
        tools(&searches),
        tools(&[("find_tools", json!({})), ("find_tools", json!({"page": 2}))]),
        tools(&[
            ("merge_branch", json!({"source_session_id": "x"})),
            ("create_branch", json!({})),
            ("export_storage", json!({"output_path": "/tmp/x"})),
        ]),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let before = h.state(&sid).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "anything"})).await;
    let calls = out["tool_calls"].as_array().unwrap();

    let never = ["merge_branch", "create_branch", "fork_sandbox", "close_session", "list_graphs", "link_graphs"];
    let mut listed = Vec::new();
    for (index, call) in calls[..needs.len() + 2].iter().enumerate() {
        assert_eq!(call["name"], "find_tools");
        assert_eq!(call["is_error"], false, "{call}");
        for name in found(&call["result"]) {
            assert!(!DENIED_TOOLS.contains(&name.as_str()) && !never.contains(&name.as_str()), "found {name}");
            assert!(!CHAT_TOOLS.iter().any(|t| t.name == name), "{name} is offered first already");
            if index >= needs.len() {
                listed.push(name);
            }
        }
    }
    // The two pages hold every tool that can be found, and nothing else.
    listed.sort();
    let mut reachable: Vec<String> = DISCOVERABLE.iter().map(|t| t.name.to_owned()).collect();
    reachable.sort();
    assert_eq!(listed, reachable);
    for call in &calls[needs.len() + 2..] {
        assert_eq!(call["result"]["error"], "unknown_or_disallowed_tool", "{call}");
    }
    assert_eq!(h.state(&sid).await, before, "nothing changed");
    assert_eq!(h.ctx.runtime.list_sessions().await.unwrap().len(), 1, "no session was created");
}

#[tokio::test]
async fn approvals_hold_for_a_found_destructive_tool() {
    let model = Scripted::new(vec![
        find("resolve a contradiction"),
        tools(&[("resolve_contradiction", json!({"contradiction_ids": ["c1"], "commit": true}))]),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let before = h.state(&sid).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "fix it", "approvals": true})).await;
    assert!(found(&out["tool_calls"][0]["result"]).contains(&"resolve_contradiction".to_owned()), "{out}");
    assert_eq!(out["pending_approval"]["name"], "resolve_contradiction", "{out}");
    assert_eq!(out["pending_approval"]["arguments"]["session_id"], json!(sid));
    assert_eq!(out["tool_calls"].as_array().unwrap().len(), 1, "the destructive call did not run");
    assert_eq!(h.state(&sid).await, before);
}

#[tokio::test]
async fn the_returned_messages_keep_found_tools_offered_in_the_next_turn() {
    let model = Scripted::new(vec![
        find("draw the graph as a diagram"),
        Answer::Text("I can draw it.".into()),
        Answer::Text("Drawing now.".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let first = h.chat(json!({"session_id": sid, "prompt": "can you draw?"})).await;
    let mut messages = first["messages"].as_array().unwrap().clone();
    messages.push(json!({"role": "user", "content": "please do"}));
    let second = h.chat(json!({"session_id": sid, "messages": messages})).await;
    assert_eq!(second["reply"], "Drawing now.", "{second}");
    let offered = names(&model.request(2).tools);
    assert!(offered.contains(&"visualize_graph".to_owned()), "{offered:?}");
    assert_eq!(offered.iter().filter(|n| *n == FIND_TOOLS.name).count(), 1);
}

#[tokio::test]
async fn the_whole_list_is_paged_and_a_bad_page_is_an_error() {
    let model = Scripted::new(vec![
        tools(&[("find_tools", json!({"page": 1}))]),
        tools(&[("find_tools", json!({"page": 99}))]),
        tools(&[("find_tools", json!({"need": 42}))]),
        tools(&[("find_tools", json!({"need": "qwertyuiop zxcvb"}))]),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "what else can you do?"})).await;
    let calls = out["tool_calls"].as_array().unwrap();
    let first = &calls[0]["result"];
    assert_eq!(first["tools"].as_array().unwrap().len(), 10, "{first}");
    assert_eq!(first["pages"], DISCOVERABLE.len().div_ceil(10));
    assert!(first["tools"][0].get("input_schema").is_none(), "a listed page carries no schemas");
    assert_eq!(calls[1]["result"]["error"], "invalid_parameter", "{}", calls[1]);
    assert_eq!(calls[2]["result"]["error"], "invalid_parameter", "{}", calls[2]);
    let unmatched = &calls[3]["result"];
    assert_eq!(unmatched["page"], 1, "no match gives the list: {unmatched}");
    // Listing does not add the listed tools to the offer.
    assert_eq!(names(&model.request(4).tools), names(&model.request(0).tools));
}
