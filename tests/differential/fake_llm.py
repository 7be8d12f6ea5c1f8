"""A scripted OpenAI-compatible provider on 127.0.0.1, so both servers' LLM tools can be driven
through the same answers: `POST /v1/chat/completions` (plain JSON, or server-sent events when the
request asks to stream) and `GET /v1/models`. Standard library only.

What it answers depends on a keyword in the newest user text of the request (see SCRIPT); when
the newest message is a tool result it ends the turn with a short text.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GOOD_CKS = {"version": "1.0", "objects": [
    {"identity": {"id": "earth", "type": "Planet", "name": "Earth"}, "structure": {}},
    {"identity": {"id": "sun", "type": "Star", "name": "Sun"}, "structure": {}},
    {"identity": {"id": "earth-orbits-sun", "type": "Relation", "name": "orbits"},
     "structure": {"participants": ["earth", "sun"], "relation_type": "orbits"}},
]}
DANGLING_CKS = {"version": "1.0", "objects": [
    {"identity": {"id": "earth", "type": "Planet", "name": "Earth"}, "structure": {}},
    {"identity": {"id": "r", "type": "Relation", "name": "r"},
     "structure": {"participants": ["earth", "ghost"], "relation_type": "orbits"}},
]}

# keyword -> ("text", content) | ("tool", name, arguments) | ("status", http status)
SCRIPT = [
    ("FAKE-GOOD", ("text", "Here it is:\n```json\n" + json.dumps(GOOD_CKS) + "\n```")),
    ("FAKE-GARBAGE", ("text", "I would rather not produce any JSON today.")),
    ("FAKE-BADCKS", ("text", json.dumps({"objects": [{"identity": {"id": "x"}}]}))),
    ("FAKE-INVALID", ("text", json.dumps(DANGLING_CKS))),
    ("FAKE-UNKNOWN-TOOL", ("tool", "drop_everything", {"really": True})),
    ("FAKE-EVOLVE", ("tool", "evolve_knowledge", {"session_id": "any", "operations": [
        {"type": "add_object", "identity": {"id": "comet", "type": "Comet", "name": "Halley"}}]})),
    ("FAKE-QUERY", ("tool", "query_subgraph", {"session_id": "any", "seed_ids": ["sun"], "depth": 1})),
    ("FAKE-HTTP-400", ("status", 400)),
]
DEFAULT = ("text", "Hello from the scripted model.")
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def _texts(message):
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def choose(request):
    messages = request.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return ("text", "Done.")
    users = [m for m in messages if m.get("role") == "user"]
    text = _texts(users[-1]) if users else ""
    for keyword, answer in SCRIPT:
        if keyword in text:
            return answer
    return DEFAULT


def _message(answer):
    if answer[0] == "text":
        return {"role": "assistant", "content": answer[1]}, "stop"
    call = {"id": "call_1", "type": "function",
            "function": {"name": answer[1], "arguments": json.dumps(answer[2])}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body, content_type="application/json"):
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "fake-model", "object": "model", "owned_by": "differential"}]}))
        else:
            self._send(404, json.dumps({"error": {"message": "not found"}}))

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, json.dumps({"error": {"message": "not found"}}))
            return
        answer = choose(request)
        if answer[0] == "status":
            self._send(answer[1], json.dumps({"error": {"message": "scripted failure", "type": "invalid_request"}}))
            return
        message, finish = _message(answer)
        model = request.get("model") or "fake-model"
        if request.get("stream"):
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(delta["tool_calls"])]
            chunks = [
                {"id": "c1", "object": "chat.completion.chunk", "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"id": "c1", "object": "chat.completion.chunk", "model": model,
                 "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": USAGE},
            ]
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self._send(200, body, "text/event-stream")
            return
        self._send(200, json.dumps({"id": "c1", "object": "chat.completion", "model": model,
                                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                    "usage": USAGE}))


def start():
    """Starts the provider in a daemon thread; returns its base URL (ending in /v1) and the server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", server
