"""Interoperability test: drives the cks-mcp release binary with the official MCP Python SDK
(2.x) over stdio and streamable HTTP, in both of its modes: "auto" (the default: `server/discover`,
then the stateless 2026-07-28 revision) and "legacy" (the `initialize` handshake, 2025-11-25).
Also the bare JSON-RPC POST form cks-studio uses, an `ai_chat` whose destructive call the SDK's
elicitation callback approves (a scripted Anthropic server plays the model), a subscription told
of a commit, and completions. Checks results, not just that calls return.

Usage: python client.py <path to cks-mcp binary>
"""

import asyncio
import http.server
import warnings
import json
import threading
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning

BINARY = sys.argv[1]

GRAPH = {
    "version": "1.0",
    "objects": [
        {"identity": {"id": "sun", "type": "Star", "name": "Sun"}, "structure": {"mass": 1.0}},
        {"identity": {"id": "earth", "type": "Planet", "name": "Earth"}, "structure": {"note": "blå"}},
        {"identity": {"id": "orbit", "type": "Relation", "name": "Earth orbits Sun"},
         "structure": {"participants": ["earth", "sun"], "relation_type": "orbits"}},
    ],
}


# The revision each mode of the client must end up speaking with us.
MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}


def result_of(call_result):
    """The tool result object: content[0].text parsed, which must equal structuredContent; a
    business error (an "error" key) must be marked isError, and nothing else may be."""
    assert call_result.content and call_result.content[0].type == "text", call_result
    value = json.loads(call_result.content[0].text)
    if call_result.structured_content is not None:
        assert call_result.structured_content == value, (call_result.structured_content, value)
    is_business_error = isinstance(value, dict) and isinstance(value.get("error"), str)
    assert call_result.is_error == is_business_error, call_result
    return value


async def knowledge_flow(session: Client, label: str) -> dict:
    init_tools = await session.list_tools()
    names = {t.name for t in init_tools.tools}
    for required in ["validate_knowledge", "evolve_knowledge", "query_subgraph", "list_versions",
                     "revert_version", "compare_versions"]:
        assert required in names, f"{label}: {required} missing from tools/list"
    query_tool = next(t for t in init_tools.tools if t.name == "query_subgraph")
    assert query_tool.annotations is not None and query_tool.annotations.read_only_hint is True, query_tool
    evolve_tool = next(t for t in init_tools.tools if t.name == "evolve_knowledge")
    assert evolve_tool.annotations.read_only_hint is False

    validated = result_of(await session.call_tool("validate_knowledge", {"json_data": json.dumps(GRAPH)}))
    assert validated["valid"] is True and validated["diagnostics"] == [], validated
    sid, v1 = validated["session_id"], validated["version_id"]

    evolved = result_of(await session.call_tool("evolve_knowledge", {"session_id": sid, "operations": [
        {"type": "add_object", "identity": {"id": "moon", "type": "Moon", "name": "Moon"}},
        {"type": "add_relation", "identity": {"id": "m-orbit", "type": "Relation", "name": "Moon orbits Earth"},
         "participants": ["moon", "earth"], "relation_type": "orbits"},
    ]}))
    assert evolved["evolved"] is True and evolved["operations_applied"] == 2, evolved
    v2 = evolved["version_id"]

    bad = result_of(await session.call_tool("evolve_knowledge", {"session_id": sid, "operations": [
        {"type": "add_relation", "identity": {"id": "x", "type": "Relation", "name": "x"},
         "participants": ["moon", "ghost"], "relation_type": "orbits"}]}))
    assert bad["error"] == "invalid_operations" and "Operation #0" in bad["message"], bad

    sub = result_of(await session.call_tool("query_subgraph", {"session_id": sid, "seed_ids": ["moon"], "depth": 1}))
    sub_graph = json.loads(sub["subgraph"])
    ids = {o["identity"]["id"] for o in sub_graph["objects"]}
    assert ids == {"moon", "earth", "m-orbit"}, ids
    assert sub["returned_nodes"] == 2 and sub["is_truncated"] is False, sub

    versions = result_of(await session.call_tool("list_versions", {"session_id": sid}))
    assert [v["version_id"] for v in versions["versions"]] == [v1, v2], versions

    reverted = result_of(await session.call_tool("revert_version", {"session_id": sid, "target_version_id": v1}))
    assert "error" not in reverted, reverted
    versions = result_of(await session.call_tool("list_versions", {"session_id": sid}))
    assert len(versions["versions"]) == 3, versions

    compared = result_of(await session.call_tool("compare_versions", {"session_id": sid, "target_version_id": v2}))
    assert "error" not in compared, compared
    flat = json.dumps(compared)
    assert "moon" in flat, compared

    missing = result_of(await session.call_tool("list_versions", {"session_id": "no-such-session"}))
    assert missing["error"] == "session_not_found", missing

    resources = await session.list_resources()
    uris = {str(r.uri) for r in resources.resources}
    assert "cks://sessions" in uris and f"cks://sessions/{sid}" in uris, uris
    read = await session.read_resource(f"cks://sessions/{sid}")
    state = json.loads(read.contents[0].text)
    assert {o["identity"]["id"] for o in state["objects"]} == {"sun", "earth", "orbit"}, state
    read_v2 = await session.read_resource(f"cks://sessions/{sid}/versions/{v2}")
    assert "moon" in read_v2.contents[0].text

    prompts = await session.list_prompts()
    assert {p.name for p in prompts.prompts} == {"create_knowledge_graph", "verify_claim", "explore_subgraph",
                                                 "branch_and_merge"}
    prompt = await session.get_prompt("explore_subgraph", {"session_id": sid, "seed_id": "moon"})
    assert sid in prompt.messages[0].content.text
    return {"session_id": sid, "versions": [v["version_id"] for v in versions["versions"]]}


class ScriptedModel(http.server.BaseHTTPRequestHandler):
    """The Anthropic Messages API as a model that reverts to the version its prompt names, then,
    once the call's result is back, says what it got."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        last = body["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            outcome = "an error" if results[0].get("is_error") else "done"
            content, stop = [{"type": "text", "text": f"Revert: {outcome}."}], "end_turn"
        else:
            target = blocks[-1]["text"].rsplit(" ", 1)[-1]
            content = [{"type": "tool_use", "id": "toolu_1", "name": "revert_version",
                        "input": {"target_version_id": target}}]
            stop = "tool_use"
        reply = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                            "content": content, "stop_reason": stop, "stop_sequence": None,
                            "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def start_model() -> tuple[http.server.ThreadingHTTPServer, dict]:
    """The scripted model, and the server's environment pointing at it."""
    model = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    env = {"CKS_LLM_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-interop",
           "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{model.server_address[1]}"}
    return model, env


async def approve(context, params) -> mcp_types.ElicitResult:
    """The user's answer to the server's question: run it."""
    assert "revert_version" in params.message, params
    approve.asked += 1
    return mcp_types.ElicitResult(action="accept", content={"approve": True})


approve.asked = 0


async def approval_flow(session: Client, outcome: dict, label: str) -> None:
    """A chat with approvals whose model reverts the session: the SDK's elicitation callback is
    asked, approves, and the same call comes back with the revert done (`outcome` then lists the
    session's versions, the revert's included)."""
    sid, first = outcome["session_id"], outcome["versions"][0]
    asked = approve.asked
    before = len(result_of(await session.call_tool("list_versions", {"session_id": sid}))["versions"])
    chat = result_of(await session.call_tool("ai_chat", {"session_id": sid, "approvals": True,
                                                         "prompt": f"undo to {first}"}))
    assert approve.asked == asked + 1, label
    assert "pending_approval" not in chat and chat["reply"] == "Revert: done.", (label, chat)
    assert chat["tool_calls"][0]["name"] == "revert_version" and chat["tool_calls"][0]["is_error"] is False, chat
    after = result_of(await session.call_tool("list_versions", {"session_id": sid}))["versions"]
    assert len(after) == before + 1, (label, before, after)
    outcome["versions"] = [v["version_id"] for v in after]


class Updates:
    """The `notifications/resources/updated` a client of the handshake revision received, by URI,
    and how often it was told its tool list changed."""

    def __init__(self):
        self.uris = []
        self.tool_lists_changed = 0

    async def __call__(self, message) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            self.uris.append(message.params.uri)
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.tool_lists_changed += 1


async def changes_and_completions(session: Client, outcome: dict, mode: str, updates: Updates, label: str) -> None:
    """A subscription to the session tells of a commit to it (`subscriptions/listen` on
    2026-07-28, `resources/subscribe` before); completions suggest the session's id and its
    objects' ids. `outcome` then lists the session's versions, the commit's included."""
    sid = outcome["session_id"]
    uri = f"cks://sessions/{sid}"
    evolve = {"session_id": sid, "operations": [
        {"type": "add_object", "identity": {"id": f"probe-{mode}", "type": "Probe", "name": "probe"}}]}
    if MODES[mode] == "2026-07-28":
        async with session.listen(resource_subscriptions=[uri]) as subscription:
            result_of(await session.call_tool("evolve_knowledge", evolve))
            with anyio.fail_after(20):
                async for event in subscription:
                    if getattr(event, "uri", None) == uri:
                        break
    else:
        # The handshake revision's way, which the SDK marks deprecated for 2026-07-28 servers.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await session.subscribe_resource(uri)
            result_of(await session.call_tool("evolve_knowledge", evolve))
            with anyio.fail_after(20):
                while uri not in updates.uris:
                    await anyio.sleep(0.05)
            await session.unsubscribe_resource(uri)
    versions = result_of(await session.call_tool("list_versions", {"session_id": sid}))["versions"]
    outcome["versions"] = [v["version_id"] for v in versions]
    prompt = mcp_types.PromptReference(type="ref/prompt", name="explore_subgraph")
    ids = await session.complete(prompt, {"name": "session_id", "value": sid[:6]})
    assert sid in ids.completion.values, (label, ids)
    objects = await session.complete(prompt, {"name": "seed_id", "value": "ea"}, {"session_id": sid})
    assert objects.completion.values == ["earth"], (label, objects)


async def connected(client: Client, mode: str, label: str) -> None:
    """Checks what the client negotiated in `mode`."""
    assert client.protocol_version == MODES[mode], (label, mode, client.protocol_version)
    assert client.server_info is not None and client.server_info.name == "cks-mcp", (label, client.server_info)


async def profile_flow(session: Client, mode: str, updates: Updates, label: str) -> None:
    """The default list is the core profile; an unlisted tool is called by name; `find_tools`
    finds one, which is then called, and (on a revision with sessions) joins the list."""
    names = {t.name for t in (await session.list_tools()).tools}
    assert len(names) <= 25 and "find_tools" in names and "list_agents" not in names, (label, sorted(names))
    assert isinstance(result_of(await session.call_tool("list_processes", {}))["processes"], list), label
    found = result_of(await session.call_tool("find_tools", {"need": "list the sweepers"}))
    sweepers = next(t for t in found["tools"] if t["name"] == "list_agents")
    assert sweepers["inputSchema"]["type"] == "object", (label, sweepers)
    assert isinstance(result_of(await session.call_tool("list_agents", {}))["agents"], list), label
    listed = {t.name for t in (await session.list_tools()).tools}
    if MODES[mode] == "2026-07-28":
        assert listed == names, (label, listed ^ names)
    else:
        assert listed == names | {t["name"] for t in found["tools"]}, (label, listed ^ names)
        with anyio.fail_after(10):
            while updates.tool_lists_changed == 0:
                await anyio.sleep(0.05)


async def every_tool_listed(data_dir: str) -> None:
    """`CKS_MCP_TOOLS=all` lists every tool, as the reference does."""
    env = {**os.environ, "CKS_MCP_DATA_DIR": data_dir, "CKS_MCP_TOOLS": "all"}
    async with Client(StdioServerParameters(command=BINARY, args=[], env=env)) as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert len(names) > 70 and {"list_agents", "find_tools", "migrate_storage"} <= names, len(names)


async def over_stdio(data_dir: str, mode: str, model_env: dict) -> dict:
    env = {**os.environ, **model_env, "CKS_MCP_DATA_DIR": data_dir}
    params = StdioServerParameters(command=BINARY, args=[], env=env)
    updates = Updates()
    async with Client(params, mode=mode, elicitation_callback=approve, message_handler=updates) as session:
        await connected(session, mode, "stdio")
        await profile_flow(session, mode, updates, f"stdio {mode}")
        outcome = await knowledge_flow(session, f"stdio {mode}")
        await approval_flow(session, outcome, f"stdio {mode}")
        await changes_and_completions(session, outcome, mode, updates, f"stdio {mode}")
        # Large messages (above 1 MiB: read and answered without copies of their text) travel
        # both ways, with what needs escaping intact.
        big = {"version": "1.0", "objects": [
            {"identity": {"id": f"n{i}", "type": "Node", "name": f"node {i} \"quoted\" é\n\t\\ " + "x" * 40}}
            for i in range(12000)]}
        request = json.dumps(big)
        assert len(request) > 1 << 20
        validated = result_of(await session.call_tool("validate_knowledge", {"json_data": request}))
        assert validated["valid"] is True, validated
        answer = await session.call_tool("serialize_knowledge", {"session_id": validated["session_id"]})
        assert len(answer.content[0].text) > 1 << 20
        document = json.loads(result_of(answer)["serialized"])
        names = {o["identity"]["id"]: o["identity"]["name"] for o in document["objects"]}
        assert names == {o["identity"]["id"]: o["identity"]["name"] for o in big["objects"]}
        return outcome


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http(data_dir: str, port: int, model_env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([BINARY, "--http", f"127.0.0.1:{port}", "--no-stdio"],
                            env={**os.environ, **(model_env or {}), "CKS_MCP_DATA_DIR": data_dir},
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("HTTP server did not start")


def post(port: int, body, headers=None):
    data = json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None


async def over_http(data_dir: str, model_env: dict) -> None:
    port = free_port()
    proc = start_http(data_dir, port, model_env)
    try:
        for mode in MODES:
            updates = Updates()
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode, elicitation_callback=approve,
                              message_handler=updates) as session:
                await connected(session, mode, "http")
                outcome = await knowledge_flow(session, f"http {mode}")
                await approval_flow(session, outcome, f"http {mode}")
                await changes_and_completions(session, outcome, mode, updates, f"http {mode}")
        # The bare form cks-studio uses: tools/call with no initialize, plain JSON back.
        status, reply = post(port, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": {"name": "list_versions",
                                               "arguments": {"session_id": outcome["session_id"]}}})
        assert status == 200, status
        result = json.loads(reply["result"]["content"][0]["text"])
        assert [v["version_id"] for v in result["versions"]] == outcome["versions"], result
        status, reply = post(port, [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}])
        assert status == 200 and len(reply) == 2 and reply[1]["result"]["tools"], reply
        status, reply = post(port, {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                    "params": {"name": "no_such_tool", "arguments": {}}})
        assert reply["error"]["code"] == -32602 and "no_such_tool" in reply["error"]["message"], reply
        status, _ = post(port, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"Origin": "https://evil.example"})
        assert status == 403, status
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    # A restarted server on the same data serves every committed session and version.
    proc = start_http(data_dir, port)
    try:
        status, reply = post(port, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": {"name": "list_versions",
                                               "arguments": {"session_id": outcome["session_id"]}}})
        result = json.loads(reply["result"]["content"][0]["text"])
        assert [v["version_id"] for v in result["versions"]] == outcome["versions"], result
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class Warnings(logging.Handler):
    """What the SDK warns of (a failed session termination, a result it could not read)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


async def main() -> None:
    warnings = Warnings()
    logging.getLogger("mcp").addHandler(warnings)
    model, model_env = start_model()
    with tempfile.TemporaryDirectory() as stdio_dir, tempfile.TemporaryDirectory() as http_dir:
        for mode in MODES:
            await over_stdio(stdio_dir, mode, model_env)
            print(f"stdio {mode}: ok")
        await every_tool_listed(stdio_dir)
        print("stdio, every tool listed: ok")
        await over_http(http_dir, model_env)
        print("http: ok")
    model.shutdown()
    assert warnings.messages == [], warnings.messages


if __name__ == "__main__":
    asyncio.run(main())
