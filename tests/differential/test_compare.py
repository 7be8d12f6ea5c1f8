"""Tests of the comparison rule and the ledger (run.sh runs them before the servers start):
the suite is only as good as its ability to see a difference and to excuse nothing more than an
entry names."""

import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare import IdPairing, compare, compare_shape, normalise  # noqa: E402
from driver import Ledger, classify, fact_differences  # noqa: E402
from steps import Json, V, call, extract, resolve  # noqa: E402

A = "11111111-1111-4111-8111-111111111111"
B = "22222222-2222-4222-8222-222222222222"
C = "33333333-3333-4333-8333-333333333333"
D = "44444444-4444-4444-8444-444444444444"


def diffs(reference, ours, pairing=None, unordered=()):
    return list(compare(normalise(reference), normalise(ours), pairing or IdPairing(), unordered))


class ComparisonRule(unittest.TestCase):
    def test_extra_keys_in_ours_are_allowed_missing_ones_are_not(self):
        self.assertEqual(diffs({"a": 1}, {"a": 1, "b": 2}), [])
        self.assertEqual(diffs({"a": 1, "b": 2}, {"a": 1}), [("b", "missing", 2, None)])

    def test_types_and_values_are_compared(self):
        self.assertEqual(diffs({"a": 1}, {"a": "1"}), [("a", "type", 1, "1")])
        self.assertEqual(diffs({"a": True}, {"a": 1}), [("a", "type", True, 1)])
        self.assertEqual(diffs({"a": 1}, {"a": 1.0}), [])
        self.assertEqual(diffs({"a": [1, 2]}, {"a": [2, 1]}), [("a[0]", "value", 1, 2), ("a[1]", "value", 2, 1)])
        self.assertEqual(diffs({"a": [1, 2]}, {"a": [2, 1]}, unordered=["a"]), [])
        self.assertEqual(diffs({"a": [1]}, {"a": [1, 2]})[0][1], "length")

    def test_messages_are_not_compared_but_error_codes_are(self):
        self.assertEqual(diffs({"error": "x", "message": "one"}, {"error": "x", "message": "two"}), [])
        self.assertEqual(diffs({"error": "x", "message": "m"}, {"error": "y", "message": "m"}),
                         [("error", "value", "x", "y")])
        self.assertEqual(diffs({"error": "x", "message": "m"}, {"error": "x"}), [("message", "missing", "m", None)])

    def test_embedded_json_is_compared_as_json_and_keeps_its_type(self):
        self.assertEqual(diffs({"s": '{"a": 1, "b": 2}'}, {"s": '{\n  "b": 2,\n  "a": 1\n}'}), [])
        self.assertEqual(diffs({"s": '{"a": 1}'}, {"s": '{"a": 2}'}), [("s.$json.a", "value", 1, 2)])
        self.assertEqual(diffs({"s": '{"a": 1}'}, {"s": {"a": 1}})[0][1], "missing")

    def test_generated_values_are_normalised(self):
        self.assertEqual(diffs({"at": "2026-01-01T00:00:00.5+00:00", "root_hash": "ab", "took_ms": 3},
                               {"at": "2027-02-02T10:00:00Z", "root_hash": "cd", "took_ms": 9}), [])
        self.assertEqual(diffs({"run_id": "a" * 64}, {"run_id": "b" * 64}), [])
        self.assertEqual(diffs({"run_id": None}, {"run_id": "b" * 64})[0][1], "type")

    def test_ids_pair_once_and_must_stay_paired(self):
        pairing = IdPairing()
        self.assertEqual(diffs({"s": A, "p": A}, {"s": C, "p": C}, pairing), [])
        self.assertEqual(diffs({"s": A}, {"s": D}, pairing)[0][1], "id")
        self.assertEqual(diffs({"s": B}, {"s": C}, pairing)[0][1], "id")
        self.assertEqual(diffs({"m": f"branch {B} of {A}"}, {"m": f"branch {D} of {C}"}, pairing), [])
        self.assertEqual(diffs({"v": {A: 1}}, {"v": {C: 1}}, pairing), [])
        self.assertEqual(diffs({"v": {A: 1}}, {"v": {C: 2}}, pairing), [(f'v["{A}"]', "value", 1, 2)])

    def test_shape_only_ignores_values(self):
        self.assertEqual(list(compare_shape({"n": 1, "l": [{"k": 1}]}, {"n": 5, "l": [{"k": 2}, {"k": 3}]})), [])
        self.assertEqual(list(compare_shape({"n": 1}, {"m": 1})), [("n", "missing", 1, None)])


class Classification(unittest.TestCase):
    def test_a_crash_of_the_reference_is_named_as_such(self):
        reference = {"error": "internal_error", "message": "Internal error: KeyError: 'json_data'"}
        ours = {"error": "missing_parameter", "message": "..."}
        kinds = [d[1] for d in classify(reference, ours, diffs(reference, ours))]
        self.assertEqual(kinds, ["reference_crash"])
        deliberate = {"error": "internal_error", "message": "Internal error: LLM call failed: none"}
        kinds = [d[1] for d in classify(deliberate, ours, diffs(deliberate, ours))]
        self.assertEqual(kinds, ["value"])

    def test_a_sentence_in_error_is_named_as_such(self):
        reference = {"error": "Evolution failed: Object 'a' already exists."}
        ours = {"error": "invalid_operations", "message": "..."}
        self.assertEqual([d[1] for d in classify(reference, ours, diffs(reference, ours))], ["error_sentence"])

    def test_facts_compare_what_a_pattern_finds(self):
        step = call("x", facts=[("text", r"depth (\d+)")])
        self.assertEqual(fact_differences(step, {"text": "depth 1"}, {"text": "at depth 1."}), [])
        self.assertEqual([d[1] for d in fact_differences(step, {"text": "depth 1"}, {"text": "depth 2"})], ["fact"])
        self.assertEqual([d[1] for d in fact_differences(step, {"text": "depth 1"}, {"text": "depth 1, depth 2"})],
                         ["fact_superset"])


class LedgerMatching(unittest.TestCase):
    def test_an_entry_excuses_only_what_all_its_fields_match(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"entries": [
                {"id": "n", "normalised": True},
                {"id": "e", "tools": ["t"], "kinds": ["value"], "paths": ["a\\.b"], "steps": ["#3 "]},
            ]}, f)
        try:
            ledger = Ledger(f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual(ledger.excuse("t", "s#3 label", "a.b", "value"), "e")
        self.assertIsNone(ledger.excuse("u", "s#3 label", "a.b", "value"))
        self.assertIsNone(ledger.excuse("t", "s#4 label", "a.b", "value"))
        self.assertIsNone(ledger.excuse("t", "s#3 label", "a.b.c", "value"))
        self.assertIsNone(ledger.excuse("t", "s#3 label", "a.b", "missing"))

    def test_an_entry_can_require_the_reference_value(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"entries": [{"id": "r", "tools": ["t"], "kinds": ["missing"], "reference": '^"not_found"$'}]}, f)
        try:
            ledger = Ledger(f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual(ledger.excuse("t", "s", "error", "missing", "not_found"), "r")
        self.assertIsNone(ledger.excuse("t", "s", "error", "missing", "session_not_found"))

    def test_the_shipped_ledger_loads_and_every_entry_is_narrowed(self):
        ledger = Ledger(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ledger.json"))
        for entry in ledger.entries:
            if not entry.get("normalised"):
                self.assertTrue(entry.get("tools"), entry["id"])
                self.assertTrue(entry.get("kinds") or entry.get("steps"), entry["id"])

    def test_every_entry_is_described_for_people(self):
        here = os.path.dirname(os.path.abspath(__file__))
        ledger = Ledger(os.path.join(here, "ledger.json"))
        with open(os.path.join(here, "..", "..", "COMPATIBILITY.md"), encoding="utf-8") as f:
            described = set(re.findall(r"^### `([^`]+)`", f.read(), re.M))
        for entry in ledger.entries:
            self.assertIn(entry["id"], described, "ledger.json entry without a COMPATIBILITY.md section")


class Steps(unittest.TestCase):
    def test_saved_values_are_resolved_per_server(self):
        args = {"session_id": V("sid"), "json_data": Json({"s": V("sid")})}
        self.assertEqual(resolve(args, {"sid": "x"}), {"session_id": "x", "json_data": '{"s": "x"}'})
        self.assertEqual(extract({"a": [{"b": 1}]}, "a.0.b"), 1)
        self.assertEqual(extract({"a": '{"b": 2}'}, "a.b"), 2)
        self.assertIsNone(extract({"a": 1}, "b.c"))


if __name__ == "__main__":
    unittest.main()
