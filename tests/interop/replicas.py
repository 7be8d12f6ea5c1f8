"""The replicas check's Python client: the official MCP Python SDK (2.x), in its auto and legacy
modes, runs one workflow through a load balancer that sends each request to the next replica:
create, evolve, query, an ai_chat with progress, and an ai_chat cancelled while the model thinks,
checked to stop on the replica that runs it (the model's server sees the call abandoned).

Usage: python replicas.py <MCP URL behind the balancer> <model status URL>
"""

import asyncio
import json
import sys
import time
import urllib.request

from mcp import Client

URL, STATUS_URL = sys.argv[1], sys.argv[2]


def model() -> dict:
    with urllib.request.urlopen(STATUS_URL, timeout=10) as response:
        return json.loads(response.read())


async def wait_for(what: str, check) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def workflow(client: Client, label: str) -> None:
    async def call(name, arguments, **options):
        result = await client.call_tool(name, arguments, **options)
        value = json.loads(result.content[0].text)
        assert not result.is_error, (label, name, value)
        return value

    graph = {"objects": [{"identity": {"id": "sun", "type": "Star", "name": "Sun"}},
                         {"identity": {"id": "earth", "type": "Planet", "name": "Earth"}}]}
    sid = (await call("validate_knowledge", {"json_data": json.dumps(graph)}))["session_id"]
    evolved = await call("evolve_knowledge", {"session_id": sid, "operations": [
        {"type": "add_relation", "identity": {"id": "orbit", "type": "Relation", "name": "orbits"},
         "participants": ["earth", "sun"], "relation_type": "orbits"}]})
    assert evolved["operations_applied"] == 1, evolved
    sub = await call("query_subgraph", {"session_id": sid, "seed_ids": ["earth"], "depth": 1})
    assert sub["returned_nodes"] == 2, sub

    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    chat = await call("ai_chat", {"session_id": sid, "messages": [{"role": "user", "content": "Describe the graph."}]},
                      progress_callback=on_progress)
    assert "sun and a planet" in chat["reply"], chat
    assert progress, f"{label}: no progress notification"

    before = model()
    turn = asyncio.create_task(client.call_tool(
        "ai_chat", {"session_id": sid, "messages": [{"role": "user", "content": "take your time"}]}))
    await wait_for("the model to be asked", lambda: model()["calls"] > before["calls"])
    turn.cancel()
    try:
        await turn
    except asyncio.CancelledError:
        pass
    await wait_for(f"{label}: the cancelled turn to stop on its replica",
                   lambda: model()["abandoned"] > before["abandoned"])


async def main() -> None:
    for mode in ("auto", "legacy"):
        async with Client(URL, mode=mode) as client:
            await workflow(client, f"python {mode}")
        print(f"replicas python {mode}: ok")


if __name__ == "__main__":
    asyncio.run(main())
