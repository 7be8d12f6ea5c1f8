#!/usr/bin/env python3
"""Checks that export_session bundles travel both ways between the reference server (cks-mcp
1.77.0) and ours, each read by the other side's own code:

- a bundle the reference exports (with and without include_structures) imports into ours with
  our import_session: same session id, version ids, timestamps and transaction ids for every
  version it carries, the same current structure;
- a bundle we export carries every key of the reference's bundle, each embedded structure parses
  with the reference's own parser (cks.parse) to the structure we hold, and its current structure
  imports into the reference the way the reference's docs say (validate_knowledge with the
  bundle's cks_json), where it serializes to the same objects.

Run with the Python of the reference's virtualenv:

    VENV/bin/python tests/reference-data/bundles.py PATH/TO/OUR/cks-mcp
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stdio_client import Server  # noqa: E402

import cks  # noqa: E402  (the reference's own core library)

REFERENCE = Path(sys.executable).parent / "cks-mcp"

OBJECTS = [
    {"identity": {"id": "k", "type": "City", "name": "Köln"}, "structure": {"pop": 1}},
    {"identity": {"id": "t", "type": "City", "name": "東京"}, "structure": {}},
    {"identity": {"id": "r", "type": "Relation", "name": "twin"},
     "structure": {"participants": ["k", "t"], "relation_type": "twinned_with"}},
]


def build_history(server: Server) -> str:
    """A session with a dozen versions (so some are snapshots and most are not), a rename, an
    update and a removal."""
    sid = server.ok("validate_knowledge", json_data=json.dumps({"objects": OBJECTS}))["session_id"]
    for i in range(10):
        server.ok("evolve_knowledge", session_id=sid, operations=[
            {"type": "add_object", "identity": {"id": f"n{i}", "type": "Note", "name": f"Notiz {i} ✓"}}])
    server.ok("evolve_knowledge", session_id=sid, operations=[
        {"type": "update_object", "object_id": "k", "structure_patch": {"pop": 2}, "mode": "merge"},
        {"type": "rename_object", "object_id": "t", "new_name": "Tōkyō"},
        {"type": "remove_object", "object_id": "n3"}])
    return sid


def objects_of(serialized: str) -> list:
    return json.loads(serialized)["objects"]


def keys(value, prefix=""):
    """Every key path of a bundle (list entries merged; metadata is content, not shape)."""
    found = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            found.add(prefix + key)
            if key != "metadata":
                found |= keys(inner, prefix + key + ".")
    elif isinstance(value, list):
        for inner in value:
            found |= keys(inner, prefix + "[].")
    return found


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"bundles.py: FAILED: {message}")


def reference_to_ours(ours_exe: Path, tmp: Path) -> dict:
    reference = Server(REFERENCE, tmp / "ref1")
    try:
        sid = build_history(reference)
        listed = reference.ok("list_versions", session_id=sid)["versions"]
        current = reference.ok("serialize_knowledge", session_id=sid)["serialized"]
        bundles = {full: reference.ok("export_session", session_id=sid, include_structures=full)
                   for full in (True, False)}
    finally:
        reference.close()
    for full, exported in bundles.items():
        ours = Server(ours_exe, tmp / f"ours-{full}")
        try:
            result = ours.ok("import_session", bundle_json=exported["bundle_json"])
            check(result["session_id"] == sid, f"session id kept ({result})")
            carried = {v["version_id"] for v in exported["bundle"]["version_history"]["versions"]
                       if "cks_json" in v} | {listed[-1]["version_id"]}
            ours_listed = ours.ok("list_versions", session_id=sid)["versions"]
            check([v["version_id"] for v in ours_listed] == [v["version_id"] for v in listed if v["version_id"] in carried],
                  "the versions the bundle carries keep their ids and order")
            by_id = {v["version_id"]: v for v in listed}
            for v in ours_listed:
                for key in ("created_at", "transaction_id"):
                    check(v[key] == by_id[v["version_id"]][key], f"{key} of {v['version_id']} kept")
            check(len(result["versions_without_structure"]) == len(listed) - len(carried),
                  "the versions left out are listed")
            ours_current = ours.ok("serialize_knowledge", session_id=sid)["serialized"]
            check(objects_of(ours_current) == objects_of(current), "current structure kept, in order")
        finally:
            ours.close()
    return {"reference_bundle_keys": sorted(keys(bundles[True]["bundle"]))}


def ours_to_reference(ours_exe: Path, tmp: Path, reference_keys: list) -> None:
    ours = Server(ours_exe, tmp / "ours2")
    try:
        sid = build_history(ours)
        exported = ours.ok("export_session", session_id=sid, include_structures=True)
        states = [ours.ok("serialize_knowledge", session_id=sid)["serialized"]]
    finally:
        ours.close()
    bundle = json.loads(exported["bundle_json"])
    missing = set(reference_keys) - keys(bundle)
    check(not missing, f"our bundle lacks the reference's keys {sorted(missing)}")
    # The reference's own parser reads every structure we embed.
    for version in bundle["version_history"]["versions"]:
        cks.parse(version["cks_json"])
    current = cks.parse(bundle["current_structure"]["cks_json"])
    check(len(current.objects) == len(json.loads(states[0])["objects"]), "current structure parses whole")
    reference = Server(REFERENCE, tmp / "ref2")
    try:
        created = reference.ok("validate_knowledge", json_data=bundle["current_structure"]["cks_json"])
        serialized = reference.ok("serialize_knowledge", session_id=created["session_id"])["serialized"]
    finally:
        reference.close()
    check(objects_of(serialized) == objects_of(states[0]), "the reference holds what we exported, in order")


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    ours_exe = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        found = reference_to_ours(ours_exe, Path(tmp))
        ours_to_reference(ours_exe, Path(tmp), found["reference_bundle_keys"])
    print("bundles.py: export_session bundles travel both ways", file=sys.stderr)


if __name__ == "__main__":
    main()
