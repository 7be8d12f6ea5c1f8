"""Differential test: drives the reference server and ours through the same scripted calls over
stdio and compares their results key by key (see compare.py for the rule and the normalisation).

Each server runs on its own fresh data directory with no LLM configured (no API keys, provider
"auto"), so the LLM tools' "no provider" answers are part of the comparison. Differences that the
compatibility ledger (ledger.json, described for people in COMPATIBILITY.md) excuses are counted
but do not fail the run; any other difference is printed with the tool, the step, the JSON path
and both values, and makes the exit status 1.

Usage: driver.py --reference CMD --ours CMD [--only TOOL]... [--report FILE] [--quiet]
"""

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fake_llm  # noqa: E402
from compare import IdPairing, UUID_RE, compare, compare_shape, normalise  # noqa: E402
from mcp_stdio import StdioServer  # noqa: E402
from scenarios import SCENARIOS  # noqa: E402
from steps import extract, resolve  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# The reference's stdio reader stops at 64 KiB a line; larger requests go to it framed.
REFERENCE_LINE_LIMIT = 60_000
SHOW_CHARS = 400
# Lists whose order the reference itself does not keep stable between runs (its serialized
# structures after a revert or merge, its diff operations): compared as multisets everywhere.
# The message the reference's last-resort handler gives an unhandled exception: the exception's
# class name first (its deliberate internal_error answers start with other words).
CRASH_MESSAGE = re.compile(r"^Internal error: [A-Z][A-Za-z]*(Error|Exception|Exit|Interrupt): ")
UNORDERED_EVERYWHERE = ("objects", "**.objects", "operations", "**.operations")


def server_env(data_dir):
    """A clean environment: no provider keys, no proxies, the server's data in `data_dir`."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR")}
    env.update({
        "HOME": data_dir,
        "CKS_MCP_DATA_DIR": data_dir,
        "CKS_MCP_DB_PATH": os.path.join(data_dir, "cks_mcp.db"),
        "CKS_LLM_PROVIDER": "auto",
        # Ours lists every tool, as the reference does, only when asked (COMPATIBILITY.md, tool-profiles).
        "CKS_MCP_TOOLS": "all",
        # Nothing listens on the discard port: an "auto" provider looking for Ollama finds none.
        "CKS_OLLAMA_HOST": "http://127.0.0.1:9",
        "PYTHONIOENCODING": "utf-8",
        "NO_COLOR": "1",
    })
    return env


def result_value(method, response):
    """What a step's answer is compared as: the tool result object (content[0].text parsed),
    {"$rpc_error": code} for a JSON-RPC error, {"$exception": text} for a raised tool error."""
    if "error" in response:
        return {"$rpc_error": response["error"].get("code")}
    result = response.get("result")
    if method == "resources/list" and isinstance(result, dict):
        # MCP Apps views hold no data, and the reference has none (ledger: apps-view).
        views = [r for r in result.get("resources") or [] if str(r.get("uri", "")).startswith("ui://")]
        result = {**result, "resources": [r for r in result.get("resources") or [] if r not in views]}
    if method != "tools/call":
        return result
    content = result.get("content") or []
    text = content[0].get("text", "") if content else ""
    try:
        return json.loads(text)
    except ValueError:
        if result.get("isError"):
            return {"$exception": text}
        return text


def classify(reference, ours, diffs):
    """Renames the differences that come from the reference raising (a JSON-RPC tool error, or
    the `internal_error` its last-resort handler makes of an unhandled exception), or from it
    putting a sentence where an error code belongs, so the ledger can name them as kinds."""
    if isinstance(reference, dict) and "$exception" in reference:
        if isinstance(ours, dict) and isinstance(ours.get("error"), str):
            return [("", "reference_exception", reference["$exception"], ours["error"])]
        return [("", "reference_exception_vs_result", reference["$exception"], ours)]
    crashed = (isinstance(reference, dict) and reference.get("error") == "internal_error"
               and isinstance(reference.get("message"), str) and CRASH_MESSAGE.match(reference["message"]))
    renamed = []
    for path, kind, ref_value, our_value in diffs:
        if path == "error" and kind == "value" and isinstance(our_value, str):
            if crashed:
                kind = "reference_crash"
            elif isinstance(ref_value, str) and " " in ref_value:
                kind = "error_sentence"
        renamed.append((path, kind, ref_value, our_value))
    return renamed


def _findings(pattern, text):
    """The distinct matches of `pattern` in a string (or a list of strings, one per line)."""
    if isinstance(text, list) and all(isinstance(t, str) for t in text):
        text = "\n".join(text)
    if not isinstance(text, str):
        return None
    return sorted(set(re.findall(pattern, text)))


def fact_differences(step, reference, ours):
    """The step's facts: what each regex finds in the text at its path, compared between sides."""
    diffs = []
    for path, pattern in step.facts:
        ref_text, our_text = extract(reference, path), extract(ours, path)
        ref_found, our_found = _findings(pattern, ref_text), _findings(pattern, our_text)
        if ref_found != our_found:
            # Ours finding everything the reference's text says and more is its own kind.
            superset = ref_found is not None and our_found is not None and set(ref_found) < set(our_found)
            diffs.append((f"{path} =~ /{pattern}/", "fact_superset" if superset else "fact", ref_found, our_found))
    return diffs


class Ledger:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.entries = json.load(f)["entries"]
        for entry in self.entries:
            entry["_paths"] = [re.compile(p) for p in entry.get("paths", [])]
            entry["_steps"] = [re.compile(p) for p in entry.get("steps", [])]
            entry["_reference"] = re.compile(entry["reference"]) if "reference" in entry else None

    def excuse(self, subject, step_name, path, kind, reference_value=None):
        for entry in self.entries:
            if entry.get("normalised"):
                continue
            if entry.get("tools") and subject not in entry["tools"] and "*" not in entry["tools"]:
                continue
            if entry.get("kinds") and kind not in entry["kinds"]:
                continue
            if entry["_paths"] and not any(p.fullmatch(path) for p in entry["_paths"]):
                continue
            if entry["_steps"] and not any(p.search(step_name) for p in entry["_steps"]):
                continue
            if entry["_reference"] and not entry["_reference"].search(
                    json.dumps(reference_value, ensure_ascii=False)):
                continue
            return entry["id"]
        return None


def short(value):
    text = json.dumps(value, ensure_ascii=False, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + f"... ({len(text)} chars)"


def check_tool_lists(reference, ours):
    """The shared tools, and (as differences) the reference's tools ours lacks, argument names the
    reference accepts and ours lacks, and arguments ours requires that the reference does not."""
    ref_tools = {t["name"]: t for t in reference.request("tools/list")["result"]["tools"]}
    our_tools = {t["name"]: t for t in ours.request("tools/list")["result"]["tools"]}
    diffs = []
    print(f"tools/list: {len(set(ref_tools) & set(our_tools))} of the reference's {len(ref_tools)} tools are ours too")
    for name in sorted(set(ref_tools) - set(our_tools)):
        diffs.append((name, "tools/list", "", "missing_tool", name, None))
    for name in sorted(set(our_tools) - set(ref_tools)):
        diffs.append((name, "tools/list", "", "ours_only_tool", None, name))
    shared = sorted(set(ref_tools) & set(our_tools))
    for name in shared:
        ref_props = ref_tools[name]["inputSchema"].get("properties", {})
        our_props = our_tools[name]["inputSchema"].get("properties", {})
        for prop in sorted(set(ref_props) - set(our_props)):
            diffs.append((name, "tools/list", f"inputSchema.properties.{prop}", "missing", ref_props[prop], None))
        # A call the reference accepts must not be refused for lacking an argument it does not need.
        ref_required = set(ref_tools[name]["inputSchema"].get("required") or [])
        our_required = set(our_tools[name]["inputSchema"].get("required") or [])
        for prop in sorted(our_required - ref_required):
            diffs.append((name, "tools/list", f"inputSchema.required.{prop}", "required", False, True))
    return shared, diffs


class ServerPair:
    """Both servers, started on fresh data directories with the same extra environment, and a
    scratch directory for the files steps have them write (`V("scratch")`), removed with them."""

    def __init__(self, args, extra_env):
        self.dirs = [tempfile.TemporaryDirectory(prefix="cks-diff-ref-"),
                     tempfile.TemporaryDirectory(prefix="cks-diff-ours-"),
                     tempfile.TemporaryDirectory(prefix="cks-diff-files-")]
        self.scratch = self.dirs[2].name
        self.reference = StdioServer(shlex.split(args.reference), {**server_env(self.dirs[0].name), **extra_env},
                                     REFERENCE_LINE_LIMIT, "reference")
        self.ours = StdioServer(shlex.split(args.ours), {**server_env(self.dirs[1].name), **extra_env},
                                args.ours_frame_over, "ours")
        self.reference.initialize()
        self.ours.initialize()

    def close(self):
        self.reference.close()
        self.ours.close()
        for d in self.dirs:
            d.cleanup()


def setup_env(setup, fake_provider):
    """The extra environment of a scenario's setup: none (also for `own-store`, a pair of its own
    whose stores hold only what its scenarios made), or an LLM provider that is the scripted one
    (`fake-llm`)."""
    if setup is None or setup == "own-store":
        return {}
    if setup == "fake-llm":
        return {"CKS_LLM_PROVIDER": "openai_compatible", "CKS_OPENAI_BASE_URL": fake_provider(),
                "CKS_OPENAI_API_KEY": "differential-test-key", "CKS_OPENAI_MODEL": "fake-model"}
    raise ValueError(f"unknown scenario setup {setup!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="command that starts the reference's stdio server")
    parser.add_argument("--ours", required=True, help="command that starts our stdio server")
    parser.add_argument("--only", action="append", default=[], help="compare only this tool (or MCP method); repeatable")
    parser.add_argument("--report", help="write every difference as one JSON line to this file")
    parser.add_argument("--ledger", default=os.path.join(HERE, "ledger.json"))
    parser.add_argument("--ours-frame-over", type=int, default=None,
                        help="send our server requests larger than this framed with Content-Length")
    parser.add_argument("--quiet", action="store_true", help="print only the summary and unexcused differences")
    args = parser.parse_args()

    report = open(args.report, "w", encoding="utf-8") if args.report else None
    results = Results(Ledger(args.ledger), report, args.quiet)
    only = set(args.only)
    started = time.monotonic()
    provider = {}

    def fake_provider():
        if "url" not in provider:
            provider["url"], provider["server"] = fake_llm.start()
        return provider["url"]

    # Scenarios run in order on the pair of servers their setup asks for; each setup gets its own
    # pair (the first one also compares the tool lists).
    setups = []
    for entry in SCENARIOS:
        setup = entry[2] if len(entry) > 2 else None
        if setup not in setups:
            setups.append(setup)
    shared = []
    try:
        for setup in setups:
            scenarios = [(e[0], e[1]) for e in SCENARIOS if (e[2] if len(e) > 2 else None) == setup]
            built = [(name, build()) for name, build in scenarios]
            built = [(name, steps) for name, steps in built
                     if not only or any(step.subject in only for step in steps)]
            if not built and shared:
                continue
            pair = ServerPair(args, setup_env(setup, fake_provider))
            try:
                if not shared:
                    shared, tool_list_diffs = check_tool_lists(pair.reference, pair.ours)
                    for subject, step_name, path, kind, ref_value, our_value in tool_list_diffs:
                        if not only or subject in only or "tools/list" in only:
                            results.record(subject, step_name, path, kind, ref_value, our_value)
                run_scenarios(pair, built, only, results)
            finally:
                pair.close()
    finally:
        if "server" in provider:
            provider["server"].shutdown()
    failures = results.summary(shared, only)
    if report:
        report.close()
    print(f"differential: {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 1 if failures else 0


class Results:
    """Counts per tool, the printed differences and the JSON-lines report."""

    def __init__(self, ledger, report, quiet):
        self.ledger = ledger
        self.report = report
        self.quiet = quiet
        self.calls = Counter()
        self.differing_calls = Counter()
        self.diff_counts = Counter()
        self.excused_counts = Counter()
        self.failures = 0
        self.covered = set()

    def record(self, subject, step_name, path, kind, ref_value, our_value):
        excused_by = self.ledger.excuse(subject, step_name, path, kind, ref_value)
        line = {"tool": subject, "step": step_name, "path": path, "kind": kind,
                "reference": ref_value, "ours": our_value, "ledger": excused_by}
        if self.report:
            self.report.write(json.dumps(line, ensure_ascii=False) + "\n")
        if excused_by:
            self.excused_counts[subject] += 1
            return
        self.diff_counts[subject] += 1
        self.failures += 1
        print(f"DIFF {subject} | step {step_name} | {path or '(result)'} | {kind}\n"
              f"     reference: {short(ref_value)}\n     ours:      {short(our_value)}")

    def summary(self, shared, only):
        print("\nper tool: calls, calls that differ, unexcused differences, differences the ledger excuses")
        for subject in sorted(set(self.calls) | set(self.diff_counts)):
            print(f"  {subject:24} {self.calls[subject]:4} {self.differing_calls[subject]:4} "
                  f"{self.diff_counts[subject]:4} {self.excused_counts[subject]:4}")
        print(f"total: {sum(self.calls.values())} compared calls, {len(shared)} shared tools, "
              f"{sum(self.differing_calls.values())} calls differ, {self.failures} unexcused differences, "
              f"{sum(self.excused_counts.values())} excused")
        failures = self.failures
        missing = sorted(set(shared) - self.covered) if not only else []
        if missing:
            print(f"FAIL shared tools no step covers: {', '.join(missing)}")
            failures += 1
        return failures


def run_scenarios(pair, scenarios, only, results):
    """Runs each step on both servers, saves what later steps need and compares the answers."""
    pairing = IdPairing()
    # Both sides get the same scratch directory; a file name holding a saved id keeps them apart.
    saved = {"reference": {"scratch": pair.scratch}, "ours": {"scratch": pair.scratch}}
    servers = (("reference", pair.reference), ("ours", pair.ours))
    for scenario_name, steps in scenarios:
        for index, step in enumerate(steps):
            step_name = f"{scenario_name}#{index}" + (f" {step.label}" if step.label else "")
            answers = {}
            for side, server in servers:
                if step.tool is not None:
                    params = {"name": step.tool, "arguments": resolve(step.args, saved[side])}
                else:
                    params = resolve(step.params, saved[side]) if step.params is not None else None
                answers[side] = result_value(step.method, server.request(step.method, params))
            for name, path in step.save.items():
                ref_saved = extract(answers["reference"], path)
                our_saved = extract(answers["ours"], path)
                if ref_saved is None:
                    print(f"WARNING step {step_name}: the reference's result has nothing at {path!r} to save as "
                          f"{name!r} (a scenario mistake, or the reference failed)")
                saved["reference"][name] = ref_saved
                saved["ours"][name] = our_saved
                if isinstance(ref_saved, str) and isinstance(our_saved, str) \
                        and UUID_RE.match(ref_saved) and UUID_RE.match(our_saved):
                    pairing.same(ref_saved, our_saved)
            if not step.compare or (only and step.subject not in only):
                continue
            results.calls[step.subject] += 1
            if step.tool:
                results.covered.add(step.tool)
            ref_norm, our_norm = normalise(answers["reference"]), normalise(answers["ours"])
            if step.shape_only:
                found = list(compare_shape(ref_norm, our_norm))
            else:
                found = list(compare(ref_norm, our_norm, pairing, step.unordered + UNORDERED_EVERYWHERE))
            diffs = classify(ref_norm, our_norm, found)
            diffs += fact_differences(step, answers["reference"], answers["ours"])
            if diffs:
                results.differing_calls[step.subject] += 1
            elif not results.quiet:
                print(f"same {step.subject} | step {step_name}")
            for path, kind, ref_value, our_value in diffs:
                results.record(step.subject, step_name, path, kind, ref_value, our_value)


if __name__ == "__main__":
    sys.exit(main())
