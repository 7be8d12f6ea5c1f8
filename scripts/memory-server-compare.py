#!/usr/bin/env python3
"""Our server against the official MCP memory server (npm `@modelcontextprotocol/server-memory`,
a JSONL file) on the same graph, the same operations, over stdio: N entities and N relations.

Driven by `scripts/bench-memory-server`, which installs the memory server and passes its path.
Each operation is timed from the request's first byte to its answer (the request is encoded
first); repeated ones report the median. Peak RSS is the server's VmHWM at the end of its run.

  scripts/memory-server-compare.py --ours target/release/cks-mcp --memory-server DIST/index.js \
      --entities 100000 [--markdown FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

QUERIES = 20
UPDATES = 20


class Server:
    """A stdio MCP server: newline-delimited JSON-RPC, one request at a time."""

    def __init__(self, command, env):
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env={**os.environ, **env})
        self.next_id = 1
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "memory-server-compare", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        """(result, seconds from the first byte written to the answer read, answer bytes)."""
        ident = self.next_id
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}).encode() + b"\n"
        started = time.perf_counter()
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        while True:
            answer = self.proc.stdout.readline()
            if not answer:
                raise RuntimeError(f"the server closed its stdout during {method}")
            elapsed = time.perf_counter() - started
            message = json.loads(answer)
            if message.get("id") == ident:
                break
        if "error" in message:
            raise RuntimeError(f"{method}: {message['error']}")
        return message["result"], elapsed, len(answer)

    def call(self, tool, arguments):
        result, elapsed, size = self.request("tools/call", {"name": tool, "arguments": arguments})
        text = result["content"][0]["text"] if result.get("content") else ""
        if result.get("isError") or text.startswith('{"error"'):
            raise RuntimeError(f"{tool} failed: {text[:300]}")
        return text, elapsed, size

    def peak_rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def close(self):
        """Closes stdin and waits for the server to exit; returns its peak RSS, read until it
        exits (work it finishes after its last answer counts too)."""
        peak = self.peak_rss_mib()
        self.proc.stdin.close()
        deadline = time.monotonic() + 120
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                peak = max(peak, self.peak_rss_mib())
            except OSError:
                break
            time.sleep(0.002)
        self.proc.wait(timeout=max(1, deadline - time.monotonic()))
        return peak


def graph(n):
    """N entities, each with one observation holding a word of its own, and N relations."""
    entities = [{"name": f"e{i}", "entityType": "concept",
                 "observations": [f"Entity {i} is about topic {i % 1000} and marker{i}"]} for i in range(n)]
    relations = [{"from": f"e{i}", "to": f"e{(i * 7 + 1) % n}", "relationType": "relates_to"} for i in range(n)]
    return entities, relations


def as_cks(entities, relations):
    objects = [{"identity": {"id": e["name"], "type": e["entityType"], "name": e["name"]},
                "structure": {"observations": e["observations"]}} for e in entities]
    objects += [{"identity": {"id": f"r{i}", "type": "Relation", "name": r["relationType"]},
                 "structure": {"participants": [r["from"], r["to"]], "relation_type": r["relationType"]}}
                for i, r in enumerate(relations)]
    return json.dumps({"version": "1.0", "objects": objects})


def seeds(n):
    return [f"e{(i * 7919) % n}" for i in range(QUERIES)]


def run_memory_server(script, n, entities, relations, data):
    env = {"MEMORY_FILE_PATH": os.path.join(data, "memory.jsonl")}
    command = ["node", script]
    out = {}
    server = Server(command, env)
    batch = 10_000
    started = time.perf_counter()
    for at in range(0, n, batch):
        server.call("create_entities", {"entities": entities[at:at + batch]})
    for at in range(0, n, batch):
        server.call("create_relations", {"relations": relations[at:at + batch]})
    out["create"] = time.perf_counter() - started
    out["update"] = statistics.median(
        server.call("add_observations", {"observations": [{"entityName": name, "contents": [f"note {k}"]}]})[1]
        for k, name in enumerate(seeds(n)[:UPDATES]))
    out["neighbourhood"] = statistics.median(server.call("open_nodes", {"names": [name]})[1] for name in seeds(n))
    out["search"] = statistics.median(
        server.call("search_nodes", {"query": f"marker{(k * 7919) % n}"})[1] for k in range(QUERIES))
    full = [server.call("read_graph", {}) for _ in range(3)]
    out["full_read"] = statistics.median(t for _, t, _ in full)
    out["full_read_bytes"] = full[0][2]
    out["peak_rss"] = server.close()
    started = time.perf_counter()
    server = Server(command, env)
    server.call("open_nodes", {"names": [seeds(n)[0]]})
    out["restart"] = time.perf_counter() - started
    out["peak_rss_restart"] = server.close()
    return out


def run_ours(binary, n, entities, relations, data):
    env = {"CKS_MCP_DATA_DIR": data, "CKS_MCP_DB_PATH": os.path.join(data, "cks_mcp.db"),
           "CKS_MCP_MAX_MESSAGE_BYTES": str(1 << 30)}
    out = {}
    server = Server([binary], env)
    text, elapsed, _ = server.call("validate_knowledge", {"json_data": as_cks(entities, relations)})
    session = json.loads(text)["session_id"]
    out["create"] = elapsed
    updates = []
    for k, name in enumerate(seeds(n)[:UPDATES]):
        operation = {"type": "update_object", "object_id": name,
                     "structure_patch": {"note": f"note {k}"}}
        updates.append(server.call("evolve_knowledge", {"session_id": session, "operations": [operation]})[1])
    out["update"] = statistics.median(updates)
    out["neighbourhood"] = statistics.median(
        server.call("query_subgraph", {"session_id": session, "seed_ids": [name], "depth": 1, "max_objects": 50})[1]
        for name in seeds(n))
    out["search"] = statistics.median(
        server.call("search_semantic", {"session_id": session, "query": f"marker{(k * 7919) % n}", "depth": 0})[1]
        for k in range(QUERIES))
    full = [server.call("serialize_knowledge", {"session_id": session, "compact": True}) for _ in range(3)]
    out["full_read"] = statistics.median(t for _, t, _ in full)
    out["full_read_bytes"] = full[0][2]
    out["peak_rss"] = server.close()
    started = time.perf_counter()
    server = Server([binary], env)
    server.call("query_subgraph", {"session_id": session, "seed_ids": [seeds(n)[0]], "depth": 1, "max_objects": 50})
    out["restart"] = time.perf_counter() - started
    out["peak_rss_restart"] = server.close()
    return out


ROWS = [
    ("create", "creating the graph (ours: one `validate_knowledge`; theirs: `create_entities` and `create_relations` in batches of 10,000)", "s"),
    ("update", f"one update, median of {UPDATES} (`evolve_knowledge` update_object / `add_observations`)", "ms"),
    ("neighbourhood", f"one entity and its relations, median of {QUERIES} (`query_subgraph` depth 1 / `open_nodes`)", "ms"),
    ("search", f"text search for one entity's word, median of {QUERIES} (`search_semantic` / `search_nodes`)", "ms"),
    ("full_read", "full read, median of 3 (`serialize_knowledge` compact / `read_graph`)", "ms"),
    ("full_read_bytes", "full read: bytes on the wire (the JSON-RPC line)", "bytes"),
    ("restart", "restart → first neighbourhood read (spawn, initialize, one call)", "ms"),
    ("peak_rss", "peak RSS of the first run (VmHWM)", "MiB"),
    ("peak_rss_restart", "peak RSS after a restart and one read (until the server exits)", "MiB"),
]


def shown(value, unit):
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "ms":
        return f"{value * 1000:.2f} ms" if value < 1 else f"{value * 1000:.0f} ms"
    if unit == "bytes":
        return f"{value / (1 << 20):.1f} MiB"
    return f"{value:.1f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", required=True)
    parser.add_argument("--memory-server", required=True, help="the memory server's dist/index.js")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    n = args.entities
    entities, relations = graph(n)
    results = {}
    for name, run, target in [("ours", run_ours, args.ours), ("memory server", run_memory_server, args.memory_server)]:
        data = tempfile.mkdtemp(prefix="memory-compare-")
        try:
            results[name] = run(target, n, entities, relations, data)
        finally:
            shutil.rmtree(data, ignore_errors=True)
        print(name, json.dumps(results[name]), flush=True)
    lines = [f"{n:,} entities and {n:,} relations:", "",
             "| measurement | ours | memory server | ours vs theirs |", "|---|---:|---:|---:|"]
    for key, label, unit in ROWS:
        ours, theirs = results["ours"][key], results["memory server"][key]
        lines.append(f"| {label} | {shown(ours, unit)} | {shown(theirs, unit)} | {theirs / ours:.2f}× |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(table + "\n")


if __name__ == "__main__":
    main()
