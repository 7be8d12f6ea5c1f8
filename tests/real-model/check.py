"""ai_chat against a real small model: a suite of everyday requests through our server over MCP stdio.

Started by scripts/real-model-check, which builds llama-server and serves the model. Between our
server and llama-server sits a recording proxy (this file), so that every LLM request's prompt
tokens are measured as the model server counted them.

Each task of SUITE is a fresh conversation on its own copy of GRAPH, checked on the graph or the
reply afterwards. What a weak model can be held to is asserted (the run fails otherwise):
  - every turn ends, within the tool-call cap, with a result rather than an error;
  - at least one tool ran without error over the run;
  - no other session changed;
  - a turn's `messages` go back in as the next turn's input;
  - `remember` of a few short texts commits valid knowledge or fails with a clear error.
What it cannot be held to is measured and printed, task by task: right or not, the tools called,
the prompt tokens of each request, seconds per turn.

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
        {"identity": {"id": "ada", "type": "Person", "name": "Ada Lovelace"},
         "structure": {"role": "mathematician", "born": 1815}},
        {"identity": {"id": "babbage", "type": "Person", "name": "Charles Babbage"},
         "structure": {"role": "inventor", "born": 1791}},
        {"identity": {"id": "engine", "type": "Machine", "name": "Analytical Engine"},
         "structure": {"note": "a mechanical general-purpose computer, never finished"}},
        {"identity": {"id": "notes", "type": "Document", "name": "Notes on the Engine"},
         "structure": {"year": 1843, "summary": "the first published program: it computes Bernoulli numbers"}},
        {"identity": {"id": "ada-wrote-notes", "type": "Relation", "name": "Ada Lovelace wrote the notes"},
         "structure": {"participants": ["ada", "notes"], "relation_type": "wrote"}},
        {"identity": {"id": "notes-describe-engine", "type": "Relation", "name": "the notes describe the engine"},
         "structure": {"participants": ["notes", "engine"], "relation_type": "describes"}},
        {"identity": {"id": "babbage-designed-engine", "type": "Relation", "name": "Babbage designed the engine"},
         "structure": {"participants": ["babbage", "engine"], "relation_type": "designed"}},
    ],
}
OTHER = {"version": "1.0", "objects": [
    {"identity": {"id": "elsewhere", "type": "Concept", "name": "Elsewhere"}, "structure": {}}]}

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
            "CKS_AI_CHAT_MAX_OUTPUT_TOKENS": "256",
            # remember's extraction: a short text's entities and facts fit well within this, and a
            # small model that loops inside the JSON stops here (an unusable answer, said clearly).
            "CKS_LLM_MAX_TOKENS": "768",
            "CKS_LLM_MAX_RETRIES": "0",
            # A request may wait long on a machine busy with other work; the turn's deadline stays
            # within the MCP client's own request timeout (300 s).
            "CKS_LLM_TIMEOUT_SECONDS": "230",
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


def by_id(objects):
    return {o["identity"]["id"]: o for o in objects}


def mentions(result, *words):
    """Whether the reply names one of `words` in its own words (not by echoing a tool's result)."""
    reply = result["reply"].lower()
    return "<tool_response>" not in reply and any(w in reply for w in words)


def named(objects, name):
    return [o for o in objects if o["identity"]["name"].strip().lower() == name]


def relates(objects, first, second):
    """Whether a relation other than the graph's own joins `first` and `second`."""
    return any(o["identity"]["id"] not in by_id(GRAPH["objects"])
               and {first, second} <= set((o.get("structure") or {}).get("participants") or [])
               for o in objects)


def change_engine(check, session):
    """A second version before the turn, for the tasks about history."""
    check.call("evolve_knowledge", {"session_id": session, "operations": [
        {"type": "update_object", "object_id": "engine", "structure_patch": {"note": "a steam-powered calculator"}}]})


def two_steps(objects):
    grace = named(objects, "grace hopper")
    return bool(grace) and relates(objects, grace[0]["identity"]["id"], "ada")


ORIGINAL_NOTE = by_id(GRAPH["objects"])["engine"]["structure"]["note"]

# A person's everyday requests, each a fresh conversation on its own copy of GRAPH, checked on the
# graph or the reply afterwards: (name, request, set-up before the turn, check after it).
SUITE = [
    ("count the objects", "How many objects are in this graph?", None,
     lambda c, s, r: mentions(r, "7", "seven")),
    ("find by meaning", "Which object is about the first computer program?", None,
     lambda c, s, r: mentions(r, "notes on the engine", "notes")),
    ("read an object", "In which year were the Notes on the Engine published?", None,
     lambda c, s, r: mentions(r, "1843")),
    ("follow a relation", "Who wrote the Notes on the Engine?", None,
     lambda c, s, r: mentions(r, "ada", "lovelace")),
    ("rename", "Rename the Analytical Engine to Difference Engine.", None,
     lambda c, s, r: by_id(c.objects(s))["engine"]["identity"]["name"].strip().lower() == "difference engine"),
    ("change a field", "Set Ada Lovelace's role to writer.", None,
     lambda c, s, r: str(by_id(c.objects(s))["ada"]["structure"].get("role", "")).strip().lower() == "writer"),
    ("add an object", "Add a person named Grace Hopper.", None,
     lambda c, s, r: any(o["identity"]["type"].lower() == "person" for o in named(c.objects(s), "grace hopper"))),
    ("relate two objects", "Record that Ada Lovelace knew Charles Babbage.", None,
     lambda c, s, r: relates(c.objects(s), "ada", "babbage")),
    ("remove an object", "Delete Charles Babbage from the graph.", None,
     lambda c, s, r: "babbage" not in by_id(c.objects(s))),
    ("validate", "Is this graph valid?", None,
     lambda c, s, r: bool(ran_ok(r, {"validate_knowledge"})) and mentions(r, "valid")
     and not mentions(r, "invalid", "not valid")),
    ("undo the last change", "Undo the last change.", change_engine,
     lambda c, s, r: by_id(c.objects(s))["engine"]["structure"].get("note") == ORIGINAL_NOTE),
    ("compare with an earlier version", "What changed in the graph since its first version?", change_engine,
     lambda c, s, r: mentions(r, "steam", "note", "engine")),
    ("two steps", "Add a person named Grace Hopper, then record that she admired Ada Lovelace.", None,
     lambda c, s, r: two_steps(c.objects(s))),
    ("a discovered tool", "Draw this graph as a diagram.", None,
     lambda c, s, r: bool(ran_ok(r, {"visualize_graph"}))),
]


# Short texts to remember (`remember`): the model must commit valid knowledge or fail clearly.
TEXTS = [
    "Grace Hopper met Ada Lovelace's notes in 1944; she later led the COBOL team.",
    "Charles Babbage moved from London to Paris. He now works on the Difference Engine.",
]
# What a failed `remember` may say: the model's answer unusable, or the model unreachable.
CLEAR_ERRORS = {"llm_output_parse_error", "llm_call_failed", "llm_provider_unavailable", "validation_failed"}


def remember_texts(check):
    """Each text remembered on a fresh copy of GRAPH: a success commits one version holding its
    episode, on a graph that still validates; a failure is one of CLEAR_ERRORS and changes nothing.
    Returns one row per text."""
    rows = []
    for text in TEXTS:
        session = check.call("validate_knowledge", {"json_data": json.dumps(GRAPH)})["session_id"]
        before = check.state(session)
        started = time.monotonic()
        result = check.call("remember", {"session_id": session, "text": text})
        seconds = time.monotonic() - started
        after = check.state(session)
        if isinstance(result, dict) and "error" in result:
            assert result["error"] in CLEAR_ERRORS, f"remember failed unclearly: {result}"
            assert result.get("message"), f"a failure says why: {result}"
            assert after == before, "a failed remember changed the graph"
            rows.append({"text": text, "outcome": result["error"], "seconds": seconds})
            continue
        assert isinstance(result, dict) and result.get("version_id"), f"remember answered no version: {result}"
        assert after[0] == before[0] + 1, "a remembered text is one commit"
        assert result["episode_id"] in by_id(after[1]), "the episode is stored"
        valid = check.call("validate_knowledge", {"session_id": session})
        assert valid.get("valid") is True, f"remember left an invalid graph: {valid}"
        made = len(result["created"]) + len(result["facts_added"])
        rows.append({"text": text, "outcome": f"committed: {made} created, {len(result['matched'])} matched",
                     "seconds": seconds})
    return rows


def run_suite(check, only=None):
    """Every task of SUITE (or those named in `only`) once; returns one row per task."""
    rows = []
    for name, prompt, setup, judge in SUITE:
        if only and name not in only:
            continue
        session = check.call("validate_knowledge", {"json_data": json.dumps(GRAPH)})["session_id"]
        if setup:
            setup(check, session)
        first_request = len(check.recorder.prompt_tokens)
        started = time.monotonic()
        result = check.call("ai_chat", {"session_id": session, "prompt": prompt})
        seconds = time.monotonic() - started
        tokens = check.recorder.prompt_tokens[first_request:]
        failed = not isinstance(result, dict) or "error" in result
        if failed:
            right, calls, reply = False, [], f"turn failed: {result}"
        else:
            right = bool(judge(check, session, result))
            calls = result["tool_calls"]
            assert len(calls) <= MAX_ITERATIONS * MAX_TOOL_CALLS, f"{len(calls)} tool calls exceed the cap"
            reply = result["reply"]
        rows.append({"task": name, "right": right, "failed": failed, "seconds": seconds, "tokens": tokens,
                     "calls": calls, "reply": reply, "result": result})
    return rows


def print_rows(rows, model):
    print(f"model: {model}")
    print("| task | right | tool calls | prompt tokens per request | s |")
    print("|---|---|---|---|---|")
    for row in rows:
        calls = ", ".join(c["name"] + (" (error)" if c["is_error"] else "") for c in row["calls"]) or "none"
        tokens = ", ".join(str(t) for t in row["tokens"])
        print(f"| {row['task']} | {'yes' if row['right'] else 'no'} | {calls} | {tokens} | {row['seconds']:.0f} |")
    for row in rows:
        if not row["right"]:
            print(f"  {row['task']}: reply {row['reply'][:200]!r}")


def measure(check, only=None):
    """The suite, asserting nothing (for the Python reference, run the same way)."""
    rows = run_suite(check, only)
    print_rows(rows, "(measured only)")
    print(f"tasks right: {sum(r['right'] for r in rows)} of {len(rows)}; turns failed: "
          f"{sum(r['failed'] for r in rows)}; first request: "
          f"{check.recorder.prompt_tokens[0] if check.recorder.prompt_tokens else None} prompt tokens")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="our cks-mcp binary")
    parser.add_argument("--model-url", required=True, help="the model server's base URL")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--record", action="store_true", help="print a Markdown table row of the figures")
    parser.add_argument("--dump", help="write every LLM request and answer to this file (JSON lines)")
    parser.add_argument("--measure-only", action="store_true",
                        help="assert nothing; report each task's outcome and the prompt tokens "
                             "(for the Python reference, run the same way)")
    parser.add_argument("--only", action="append", help="run only this task (repeatable; for a quick look)")
    args = parser.parse_args()

    check = Check(args.server, args.model_url, args.model)
    try:
        if args.measure_only:
            measure(check, args.only)
            return
        other = check.call("validate_knowledge", {"json_data": json.dumps(OTHER)})["session_id"]
        other_before = check.state(other)
        rows = run_suite(check, args.only)
        print_rows(rows, args.model)

        # A turn's messages go back in with a follow-up question.
        counted = next((r for r in rows if r["task"] == "count the objects"), None)
        if counted and not counted["failed"]:
            session = check.call("validate_knowledge", {"json_data": json.dumps(GRAPH)})["session_id"]
            follow_up = counted["result"]["messages"] + [{"role": "user", "content": "And how many are people?"}]
            second = check.call("ai_chat", {"session_id": session, "messages": follow_up})
            assert "error" not in second, f"the follow-up turn failed: {second}"
            assert second["messages"][:len(follow_up)] == follow_up, "the messages given come back first"
            assert len(second["messages"]) > len(follow_up), "the second turn adds its answer"

        failed = [r["task"] for r in rows if r["failed"]]
        assert not failed, f"turns ended in an error instead of a result: {failed}"
        if not args.only:
            for row in remember_texts(check):
                print(f"remember {row['text'][:40]!r}…: {row['outcome']} ({row['seconds']:.0f} s)")
        assert any(not c["is_error"] for r in rows for c in r["calls"]), "no offered tool ran without error"
        assert check.state(other) == other_before, "another session changed"

        first_prompt = check.recorder.prompt_tokens[0] if check.recorder.prompt_tokens else None
        right = sum(r["right"] for r in rows)
        seconds = [r["seconds"] for r in rows]
        print(f"tasks right: {right} of {len(rows)}; first request: {first_prompt} prompt tokens; "
              f"largest request: {max((t for t in check.recorder.prompt_tokens if t), default=None)} prompt tokens; "
              f"LLM requests: {len(check.recorder.prompt_tokens)}; seconds per turn: "
              f"{min(seconds):.0f}–{max(seconds):.0f} ({sum(seconds) / len(seconds):.0f} mean)")
        if args.record:
            print(f"| {args.model} | {right} of {len(rows)} | {first_prompt} | "
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
