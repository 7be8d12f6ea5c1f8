"""ai_chat against a real small model: a few explicit tasks through our server over MCP stdio.

Started by scripts/real-model-check, which builds llama-server and serves the model. Between our
server and llama-server sits a recording proxy (this file), so that every LLM request's prompt
tokens are measured as the model server counted them.

What a weak model can be held to is asserted (the run fails otherwise):
  - every turn ends, within the tool-call cap, with a result rather than an error;
  - at least one offered tool ran without error over the run;
  - no other session changed;
  - a turn's `messages` go back in as the next turn's input.
What it cannot be held to is measured and printed: how many tasks were done right, the prompt
tokens of the first request, seconds per turn.

Standard library only.
"""

import argparse
import http.server
import json
import os
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "differential"))
from mcp_stdio import StdioServer  # noqa: E402

MAX_ITERATIONS = 6
MAX_TOOL_CALLS = 4

GRAPH = {
    "version": "1.0",
    "objects": [
        {"identity": {"id": "alpha", "type": "Concept", "name": "Alpha"}, "structure": {"note": "the first idea"}},
        {"identity": {"id": "beta", "type": "Concept", "name": "Beta"}, "structure": {"note": "builds on alpha"}},
        {"identity": {"id": "gamma", "type": "Person", "name": "Gamma"}, "structure": {}},
        {"identity": {"id": "beta-extends-alpha", "type": "Relation", "name": "beta extends alpha"},
         "structure": {"participants": ["beta", "alpha"], "relation_type": "extends"}},
        {"identity": {"id": "gamma-wrote-alpha", "type": "Relation", "name": "gamma wrote alpha"},
         "structure": {"participants": ["gamma", "alpha"], "relation_type": "wrote"}},
    ],
}
OTHER = {"version": "1.0", "objects": [
    {"identity": {"id": "elsewhere", "type": "Concept", "name": "Elsewhere"}, "structure": {}}]}

READ_TOOLS = {"query_subgraph", "serialize_knowledge", "explain_knowledge", "search_semantic", "visualize_graph"}


class Recorder:
    """A proxy in front of the model server that keeps each chat request's prompt token count."""

    def __init__(self, upstream):
        self.upstream = upstream.rstrip("/")
        self.prompt_tokens = []
        # Every chat request and answer as JSON text, for --dump.
        self.exchanges = []
        self.lock = threading.Lock()
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._forward(None)

            def do_POST(self):
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body):
                request = urllib.request.Request(recorder.upstream + self.path, data=body, method=self.command,
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=600) as response:
                        status, payload = response.status, response.read()
                except urllib.error.HTTPError as e:
                    status, payload = e.code, e.read()
                if self.path.endswith("/chat/completions"):
                    # Counted by the model server: in the answer's usage, or in the error of a request
                    # that does not fit the context.
                    try:
                        answer = json.loads(payload)
                        tokens = (answer.get("usage") or {}).get("prompt_tokens") \
                            or (answer.get("error") or {}).get("n_prompt_tokens")
                    except (ValueError, AttributeError):
                        tokens = None
                    with recorder.lock:
                        recorder.prompt_tokens.append(tokens)
                        recorder.exchanges.append({"request": body.decode("utf-8", "replace"),
                                                   "status": status,
                                                   "response": payload.decode("utf-8", "replace")})
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def tool_result(response):
    """The tool's result object from a tools/call answer (content[0].text parsed)."""
    if "error" in response:
        raise AssertionError(f"JSON-RPC error: {response['error']}")
    text = response["result"]["content"][0]["text"]
    try:
        return json.loads(text)
    except ValueError:
        return text


class Check:
    def __init__(self, server_bin, model_url, model_name):
        self.data_dir = tempfile.mkdtemp(prefix="cks-real-model-")
        self.recorder = Recorder(model_url)
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
        env.update({
            "HOME": self.data_dir,
            "CKS_MCP_DATA_DIR": self.data_dir,
            "CKS_MCP_DB_PATH": os.path.join(self.data_dir, "cks_mcp.db"),
            "CKS_LLM_PROVIDER": "openai_compatible",
            "CKS_OPENAI_BASE_URL": self.recorder.url + "/v1",
            "CKS_OPENAI_MODEL": model_name,
            # The model server needs no key; the reference server refuses to call without one.
            "CKS_OPENAI_API_KEY": "local",
            "CKS_AI_CHAT_MAX_ITERATIONS": str(MAX_ITERATIONS),
            "CKS_AI_CHAT_MAX_TOOL_CALLS": str(MAX_TOOL_CALLS),
            "CKS_AI_CHAT_MAX_OUTPUT_TOKENS": "512",
            "CKS_LLM_MAX_RETRIES": "0",
            # Within the MCP client's own request timeout (300 s).
            "CKS_AI_CHAT_TIMEOUT_SECONDS": "240",
        })
        self.server = StdioServer([server_bin], env, name="cks-mcp")
        self.server.initialize()
        self.turns = []

    def call(self, tool, arguments):
        return tool_result(self.server.request("tools/call", {"name": tool, "arguments": arguments}))

    def chat(self, session_id, **arguments):
        started = time.monotonic()
        result = self.call("ai_chat", {"session_id": session_id, **arguments})
        seconds = time.monotonic() - started
        assert isinstance(result, dict) and "error" not in result, f"the turn failed: {result}"
        calls = result["tool_calls"]
        assert len(calls) <= MAX_ITERATIONS * MAX_TOOL_CALLS, f"{len(calls)} tool calls exceed the cap"
        self.turns.append({"seconds": seconds, "result": result})
        return result

    def objects(self, session_id):
        document = self.call("serialize_knowledge", {"session_id": session_id})["serialized"]
        return json.loads(document)["objects"]

    def state(self, session_id):
        versions = self.call("list_versions", {"session_id": session_id})["versions"]
        return len(versions), self.objects(session_id)

    def close(self):
        self.server.close()
        self.recorder.server.shutdown()


def ran_ok(result, names):
    return [c for c in result["tool_calls"] if c["name"] in names and not c["is_error"]]


def measure(check):
    """One turn per task, whatever happens: the outcome and the prompt tokens the model server counted."""
    session = check.call("validate_knowledge", {"json_data": json.dumps(GRAPH)})["session_id"]
    for prompt in ("List the objects in this graph. Use the tool.",
                   "What relates to alpha? Use the tools."):
        started = time.monotonic()
        result = check.call("ai_chat", {"session_id": session, "prompt": prompt})
        outcome = result.get("error") or result.get("message") if isinstance(result, dict) else result
        if isinstance(result, dict) and "error" not in result:
            outcome = f"{len(result.get('tool_calls', []))} tool calls, reply {result.get('reply', '')[:80]!r}"
        print(f"  {prompt!r}: {time.monotonic() - started:.0f} s; {str(outcome)[:300]}")
    for exchange in check.recorder.exchanges[:1]:
        print(f"  first request: {len(exchange['request']):,} bytes; model server answered {exchange['status']}: "
              f"{exchange['response'][:300]}")
    print(f"first request: {check.recorder.prompt_tokens[0] if check.recorder.prompt_tokens else None} prompt tokens")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="our cks-mcp binary")
    parser.add_argument("--model-url", required=True, help="the model server's base URL")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--record", action="store_true", help="print a Markdown table row of the figures")
    parser.add_argument("--dump", help="write every LLM request and answer to this file (JSON lines)")
    parser.add_argument("--measure-only", action="store_true",
                        help="assert nothing; report the first request's prompt tokens and each turn's outcome "
                             "(for the Python reference, run the same way)")
    args = parser.parse_args()

    check = Check(args.server, args.model_url, args.model)
    if args.measure_only:
        try:
            measure(check)
        finally:
            check.close()
        return
    try:
        session = check.call("validate_knowledge", {"json_data": json.dumps(GRAPH)})["session_id"]
        other = check.call("validate_knowledge", {"json_data": json.dumps(OTHER)})["session_id"]
        other_before = check.state(other)

        tasks = []
        listed = check.chat(session, prompt="List the objects in this graph. Use the tool.")
        tasks.append(("list the objects", bool(ran_ok(listed, READ_TOOLS - {"search_semantic"}))))

        check.chat(session, prompt="Add an object to the graph with id 'delta', type 'Concept' and name 'Delta'.")
        added = any(o["identity"]["id"] == "delta" for o in check.objects(session))
        tasks.append(("add an object", added))

        related = check.chat(session, prompt="What relates to alpha? Use the tools.")
        # Right: it read the graph and names what relates to alpha in its own words (not by echoing a
        # tool's result back).
        reply = related["reply"].lower()
        answered = ("beta" in reply or "gamma" in reply) and "<tool_response>" not in reply
        tasks.append(("what relates to alpha", bool(ran_ok(related, READ_TOOLS)) and answered))

        # The first turn's messages go back in with a follow-up question.
        follow_up = listed["messages"] + [{"role": "user", "content": "How many objects is that?"}]
        second = check.chat(session, messages=follow_up)
        assert second["messages"][:len(follow_up)] == follow_up, "the messages given come back first"
        assert len(second["messages"]) > len(follow_up), "the second turn adds its answer"

        for turn in check.turns:
            calls = ", ".join(c["name"] + (" (error)" if c["is_error"] else "") for c in turn["result"]["tool_calls"])
            print(f"  turn: {turn['seconds']:.0f} s, calls: {calls or 'none'}; reply: {turn['result']['reply'][:160]!r}")
        assert any(not c["is_error"] for t in check.turns for c in t["result"]["tool_calls"]), \
            "no offered tool ran without error in any turn"
        assert check.state(other) == other_before, "another session changed"

        first_prompt = check.recorder.prompt_tokens[0] if check.recorder.prompt_tokens else None
        right = sum(ok for _, ok in tasks)
        seconds = [t["seconds"] for t in check.turns]
        for name, ok in tasks:
            print(f"  {'right' if ok else 'wrong'}: {name}")
        print(f"tasks right: {right} of {len(tasks)}; first request: {first_prompt} prompt tokens; "
              f"seconds per turn: {', '.join(f'{s:.0f}' for s in seconds)}; "
              f"LLM requests: {len(check.recorder.prompt_tokens)}")
        if args.record:
            print(f"| {right} of {len(tasks)} | {first_prompt} | "
                  f"{min(seconds):.0f}–{max(seconds):.0f} s ({sum(seconds) / len(seconds):.0f} s mean) |")
    except Exception:
        sys.stderr.write("".join(check.server.stderr_lines[-30:]))
        raise
    finally:
        if args.dump:
            with open(args.dump, "w", encoding="utf-8") as f:
                for exchange in check.recorder.exchanges:
                    f.write(json.dumps(exchange, ensure_ascii=False) + "\n")
        check.close()


if __name__ == "__main__":
    main()
