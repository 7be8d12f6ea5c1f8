#!/usr/bin/env python3
"""Builds reference databases by driving the Python reference server (cks-mcp 1.77.0) over its
stdio MCP transport, and records what that server answers about them.

Run it with the Python of a virtualenv that has the reference installed:

    VENV/bin/python tests/reference-data/make-fixtures.py small OUT_DIR
    VENV/bin/python tests/reference-data/make-fixtures.py large OUT_DIR [--sessions N]

Each run writes OUT_DIR/reference.db (a compacted copy of the server's SQLite database, no WAL)
and OUT_DIR/expected.json: for every session, the server's own `list_versions`,
`serialize_knowledge` (parsed, reduced to `version` and `objects`) and `compare_versions` of every
version against the current state. Values the reference generates per call are left out.

The "small" history exercises every kind of version the reference writes: snapshots and patches
(more than ten versions in one session), updates, renames, removals with cascades, a branch at a
version and one at the head, a merge with a conflict resolved, a revert, closed sessions and
non-ASCII text. The "large" one repeats a smaller pattern over many sessions (50+ sessions, 500+
versions) to check the import at scale.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stdio_client import Server  # noqa: E402

REFERENCE = Path(sys.executable).parent / "cks-mcp"


def obj(oid: str, otype: str, name: str, **structure) -> dict:
    return {"identity": {"id": oid, "type": otype, "name": name}, "structure": structure}


def rel(oid: str, participants: list[str], relation_type: str, **structure) -> dict:
    return obj(oid, "Relation", relation_type, participants=participants, relation_type=relation_type, **structure)


def add(o: dict) -> dict:
    return {"type": "add_object", "identity": o["identity"], "structure": o["structure"]}


def add_rel(oid: str, participants: list[str], relation_type: str, **structure) -> dict:
    return {"type": "add_relation", "identity": {"id": oid, "type": "Relation", "name": relation_type},
            "participants": participants, "relation_type": relation_type, "structure": structure}


def update(oid: str, mode: str = "merge", **patch) -> dict:
    return {"type": "update_object", "object_id": oid, "structure_patch": patch, "mode": mode}


def create(server: Server, objects: list[dict]) -> tuple[str, str | None]:
    """A new session from `objects`; returns its id and its first version id, if any."""
    result = server.ok("validate_knowledge", json_data=json.dumps({"version": "1.0", "objects": objects}))
    session_id = result["session_id"]
    versions = server.ok("list_versions", session_id=session_id)["versions"]
    return session_id, versions[-1]["version_id"] if versions else None


def evolve(server: Server, session_id: str, operations: list[dict]) -> str:
    server.ok("evolve_knowledge", session_id=session_id, operations=operations)
    return server.ok("list_versions", session_id=session_id)["versions"][-1]["version_id"]


def small_history(server: Server) -> None:
    cities, _ = create(server, [
        obj("zurich", "City", "Zürich", population=421878, tags=["see", "bank"]),
        obj("tokyo", "City", "東京", population=13960000),
        obj("cairo", "City", "القاهرة"),
        obj("note", "Note", "naïve café — “quotes” ✓", text="Grüße, 𝄞 and tabs\tand\nnewlines"),
        rel("r-twin", ["zurich", "tokyo"], "twinned_with", since=1998),
    ])
    v1 = evolve(server, cities, [add(obj("oslo", "City", "Oslo")), add_rel("r-near", ["oslo", "zurich"], "near")])
    evolve(server, cities, [update("tokyo", population=14000000, nick="Edo")])
    evolve(server, cities, [{"type": "rename_object", "object_id": "cairo", "new_name": "Cairo (القاهرة)"}])
    for i in range(6):
        evolve(server, cities, [add(obj(f"fact-{i}", "Fact", f"Fakt Nr. {i} — ü", rank=i))])
    evolve(server, cities, [{"type": "remove_object", "object_id": "oslo"}])  # cascades r-near
    evolve(server, cities, [update("note", mode="replace", text="ersetzt ✓")])
    evolve(server, cities, [add_rel("r-facts", ["fact-0", "fact-1", "fact-2"], "cites", weight=0.5)])
    head = evolve(server, cities, [update("zurich", tags=None, canton="ZH")])

    # A branch at an earlier version, and one at the head with a conflicting edit.
    old_branch = server.ok("create_branch", session_id=cities, version_id=v1)["session_id"]
    evolve(server, old_branch, [add(obj("lima", "City", "Lima"))])
    branch = server.ok("create_branch", session_id=cities, version_id=head)["session_id"]
    evolve(server, branch, [update("tokyo", population=14100000), add(obj("kyiv", "City", "Київ"))])
    evolve(server, branch, [{"type": "remove_relation", "relation_id": "r-facts"}])
    evolve(server, cities, [update("tokyo", population=13900000)])
    first = server.call("merge_branch", target_session_id=cities, source_session_id=branch)
    if not first.get("conflicts"):
        raise RuntimeError(f"expected a merge conflict, got {first}")
    server.ok("merge_branch", target_session_id=cities, source_session_id=branch,
              resolutions={c["object_id"]: "branch_b" for c in first["conflicts"]})
    server.ok("close_session", session_id=branch)

    # A revert to an earlier version, and edits after it.
    server.ok("revert_version", session_id=cities, target_version_id=head)
    evolve(server, cities, [add(obj("zeta", "Letter", "ζήτα"))])

    # A session made only of relations and nodes, closed; and an empty one.
    closed, _ = create(server, [obj("a", "T", "A"), obj("b", "T", "B"), rel("ab", ["a", "b"], "derives")])
    evolve(server, closed, [update("a", flag=True)])
    server.ok("close_session", session_id=closed)
    create(server, [])


def large_history(server: Server, sessions: int) -> None:
    for s in range(sessions):
        base = [obj(f"n{i}", "Node", f"Knoten {i} · s{s}", i=i) for i in range(4)]
        base.append(rel("r0", ["n0", "n1"], "links"))
        sid, _ = create(server, base)
        for step in range(9):
            if step % 3 == 0:
                ops = [add(obj(f"x{step}", "Extra", f"extra {step} ✓", s=s))]
            elif step % 3 == 1:
                ops = [update(f"n{step % 4}", step=step)]
            else:
                ops = [add_rel(f"r{step}", [f"n{step % 4}", f"x{step - 2}"], "has")]
            head = evolve(server, sid, ops)
        if s % 5 == 0:
            branch = server.ok("create_branch", session_id=sid, version_id=head)["session_id"]
            evolve(server, branch, [update("n0", branch=True)])
            server.ok("merge_branch", target_session_id=sid, source_session_id=branch)
            server.ok("close_session", session_id=branch)
        if s % 7 == 0:
            server.ok("revert_version", session_id=sid, target_version_id=head)
        if s % 11 == 0:
            server.ok("close_session", session_id=sid)


def structure_of(serialized: str) -> dict:
    parsed = json.loads(serialized)
    return {"version": parsed.get("version"), "objects": parsed["objects"]}


def record(server: Server, db: Path) -> dict:
    """What the reference says about every session in `db`."""
    conn = sqlite3.connect(db)
    ids = sorted(row[0] for row in conn.execute("SELECT session_id FROM sessions"))
    conn.close()
    sessions = {}
    for sid in ids:
        versions = server.call("list_versions", session_id=sid)
        if versions.get("error") == "session_not_found":
            # The reference does not load closed sessions after a restart.
            sessions[sid] = {"list_versions": versions}
            continue
        serialized = server.ok("serialize_knowledge", session_id=sid)
        compare = {}
        for version in versions["versions"]:
            result = server.ok("compare_versions", session_id=sid, target_version_id=version["version_id"])
            compare[version["version_id"]] = result
        sessions[sid] = {
            "list_versions": versions,
            "serialize_knowledge": structure_of(serialized["serialized"]),
            "compare_versions": compare,
        }
    return {"reference": "cks-mcp 1.77.0", "sessions": sessions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["small", "large"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=55, help="sessions of the large history [55]")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        server = Server(REFERENCE, data_dir)
        try:
            small_history(server) if args.kind == "small" else large_history(server, args.sessions)
        finally:
            server.close()
        db = data_dir / "cks_mcp.db"
        target = args.out / "reference.db"
        target.unlink(missing_ok=True)
        conn = sqlite3.connect(db)
        conn.execute("VACUUM INTO ?", (str(target),))
        conn.close()
        # Smaller pages keep the committed copy small; the content is untouched.
        conn = sqlite3.connect(target)
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA page_size=1024")
        conn.execute("VACUUM")
        conn.close()
        # Ask a fresh server about the compacted copy, as a user's server would see it.
        copy_dir = data_dir / "copy"
        copy_dir.mkdir()
        shutil.copy(target, copy_dir / "cks_mcp.db")
        server = Server(REFERENCE, copy_dir)
        try:
            expected = record(server, copy_dir / "cks_mcp.db")
        finally:
            server.close()
    (args.out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    conn = sqlite3.connect(target)
    counts = [conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("sessions", "versions")]
    conn.close()
    print(f"{target}: {counts[0]} sessions, {counts[1]} versions, {target.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
