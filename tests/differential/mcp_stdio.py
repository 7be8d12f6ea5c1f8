"""A minimal MCP client over a child process's stdio, for the differential suite.

Requests go out as one JSON line, or with `Content-Length:` framing when they are larger than
`content_length_over` bytes (the reference's line reader stops at 64 KiB but reads framed
messages of any size). Answers are read in either framing. Notifications from the server are
skipped. Standard library only.
"""

import json
import queue
import subprocess
import threading

# How long one request may take before the server is declared stuck (the reference validates a
# few thousand objects in seconds; nothing in the scenarios should come near this).
REQUEST_TIMEOUT_SECS = 300


class ServerDied(Exception):
    """The child exited, closed its stdout, or did not answer in time."""


class StdioServer:
    def __init__(self, argv, env, content_length_over=None, name="server"):
        self.name = name
        self.content_length_over = content_length_over
        self.stderr_lines = []
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.messages = queue.Queue()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        threading.Thread(target=self._read_messages, daemon=True).start()
        self.next_id = 1

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace"))
            del self.stderr_lines[:-200]

    def _send(self, message):
        body = json.dumps(message, ensure_ascii=False).encode("utf-8")
        if self.content_length_over is not None and len(body) > self.content_length_over:
            framed = b"Content-Length: %d\r\n\r\n" % len(body) + body
        else:
            framed = body + b"\n"
        try:
            self.proc.stdin.write(framed)
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.proc.wait()
            raise ServerDied(f"{self.name} exited ({self.proc.returncode}); stderr tail:\n"
                             + "".join(self.stderr_lines[-20:])) from None

    def _read_messages(self):
        """Reads every message the child writes, in either framing, onto the queue; None at the end."""
        try:
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    break
                stripped = line.strip()
                if not stripped:
                    continue
                if stripped.lower().startswith(b"content-length:"):
                    length = int(stripped.split(b":", 1)[1])
                    while self.proc.stdout.readline().strip():
                        pass
                    self.messages.put(json.loads(self.proc.stdout.read(length).decode("utf-8")))
                else:
                    self.messages.put(json.loads(stripped.decode("utf-8")))
        finally:
            self.messages.put(None)

    def _read_message(self):
        try:
            message = self.messages.get(timeout=REQUEST_TIMEOUT_SECS)
        except queue.Empty:
            raise ServerDied(f"{self.name} did not answer within {REQUEST_TIMEOUT_SECS} s; stderr tail:\n"
                             + "".join(self.stderr_lines[-20:])) from None
        if message is None:
            self.messages.put(None)
            raise ServerDied(f"{self.name} closed stdout; stderr tail:\n" + "".join(self.stderr_lines[-20:]))
        return message

    def request(self, method, params=None):
        """Sends a request and returns the whole JSON-RPC response object."""
        request_id = self.next_id
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        while True:
            response = self._read_message()
            if response.get("id") == request_id and ("result" in response or "error" in response):
                return response

    def notify(self, method, params=None):
        message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def initialize(self):
        response = self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "cks-differential", "version": "1"},
        })
        self.notify("notifications/initialized")
        return response

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
