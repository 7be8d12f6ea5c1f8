"""A minimal MCP client over a server's stdio (one JSON-RPC message per line), shared by the
scripts in this directory. It drives both servers: the reference's `cks-mcp` and ours."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


class Server:
    """A server started on its stdio with its data in `data_dir`."""

    def __init__(self, exe: Path, data_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CKS_")}
        env.update(CKS_MCP_DATA_DIR=str(data_dir), CKS_MCP_DB_PATH=str(data_dir / "cks_mcp.db"))
        self.proc = subprocess.Popen(
            [str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, text=True, encoding="utf-8",
        )
        self.next_id = 0
        self.request("initialize", {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "cks-reference-data", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"reference server exited during {method}")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def call(self, tool: str, **arguments) -> dict:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        return json.loads(result["content"][0]["text"])

    def ok(self, tool: str, **arguments) -> dict:
        result = self.call(tool, **arguments)
        if "error" in result:
            raise RuntimeError(f"{tool} failed: {result}")
        return result

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
