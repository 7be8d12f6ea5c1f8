"""Differential test of the `cks` command line: runs the reference's `cks` and ours on the same
files with the same arguments, in the same directory, and compares exit status, standard output,
the first words of standard error, and any file written.

What is compared, per case:
- the exit status, always;
- standard output: exactly for text, as parsed JSON for JSON (key order aside; `serialized_at`
  blanked), and for RDF imports as a multiset of objects with blank-node names blanked;
- standard error: both empty or both not; when the reference wrote one line, ours must start with
  the same words up to its first colon (the rest of the sentence is each tool's own);
- a file named by `-o` or a migration's destination, like standard output.

A difference is excused by an entry of ledger.json naming its kind and the case (COMPATIBILITY.md
says why for people). Any other difference is printed and makes the exit status 1.

The comparison is itself checked by giving the reference on both sides: every case must then be
identical (`compare.py --reference R --ours R`).

Usage: compare.py --reference PATH --ours PATH [--quiet]
"""

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

GRAPH = {
    "version": "1.0",
    "objects": [
        {"identity": {"id": "a", "type": "Concept", "name": "Alpha"},
         "structure": {"x": 1, "ratio": 0.25, "note": "café ☕", "tags": ["t1", "t2"], "nested": {"k": [1, {"z": None}]}}},
        {"identity": {"id": "b", "type": "Concept", "name": "Beta"}, "structure": {"flag": True}},
        {"identity": {"id": "c", "type": "Claim", "name": "Gamma <&> \"q\""}, "structure": {}},
        {"identity": {"id": "r1", "type": "Relation", "name": "r1"},
         "structure": {"participants": ["a", "b"], "relation_type": "derives"}},
        {"identity": {"id": "r2", "type": "Relation", "name": "r2"},
         "structure": {"participants": ["b", "c"], "relation_type": "supports", "weight": 2}},
        {"identity": {"id": "r3", "type": "Relation", "name": "r3"},
         "structure": {"participants": ["r1", "a"], "relation_type": "mentions"}},
    ],
}

BAD = {
    "objects": [
        {"identity": {"id": "a", "type": "Concept", "name": "A"}, "structure": {}},
        {"identity": {"id": "b", "type": "Concept", "name": "B"}, "structure": {}},
        {"identity": {"id": "r1", "type": "Relation", "name": "r1"},
         "structure": {"participants": ["a", "zz"], "relation_type": "uses"}},
        {"identity": {"id": "d1", "type": "Relation", "name": "d1"},
         "structure": {"participants": ["a", "b"], "relation_type": "derives"}},
        {"identity": {"id": "d2", "type": "Relation", "name": "d2"},
         "structure": {"participants": ["b", "a"], "relation_type": "derives"}},
        {"identity": {"id": "d3", "type": "Relation", "name": "d3"},
         "structure": {"participants": ["a", "b", "zz2"], "relation_type": "derives"}},
    ]
}

TURTLE = """@prefix ex: <http://example.org/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
ex:a a <http://example.org/vocab#Person> ; rdfs:label "Ann" ; ex:age 33 ; ex:knows ex:b, ex:c .
ex:b a ex:Robot ; ex:knows ex:a .
<local> ex:seeAlso ex:a .
"""

TURTLE_BLANK = """@prefix ex: <http://example.org/> .
ex:a ex:owns [ ex:madeBy ex:c ; ex:label "thing" ] .
"""

RDF_XML = """<?xml version="1.0" encoding="utf-8"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
         xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#" xmlns:ex="http://example.org/">
  <rdf:Description rdf:about="http://example.org/a">
    <rdf:type rdf:resource="http://example.org/v#Person"/>
    <rdfs:label>Ann</rdfs:label>
    <ex:knows rdf:resource="http://example.org/b"/>
  </rdf:Description>
  <ex:Robot rdf:about="http://example.org/b"><ex:knows rdf:resource="http://example.org/a"/></ex:Robot>
</rdf:RDF>
"""

BOMB = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://example.org/">
  <rdf:Description rdf:about="http://example.org/a"><ex:p>&lol3;</ex:p></rdf:Description>
</rdf:RDF>
"""

JSONLD = {
    "@context": {"name": "http://schema.org/name"},
    "@graph": [
        {"@id": "a", "@type": ["Person", "Agent"], "name": "Ann", "knows": [{"@id": "b"}, "c"], "age": 3,
         "address": {"city": "Paris"}},
        {"@id": "b", "@type": "Person", "rdfs:label": "Bob", "knows": {"@id": "a"}},
        {"@id": "a", "email": "ann@example.org"},
        {"@id": "d"},
    ],
}

OPS = [
    {"type": "add_object", "identity": {"id": "n", "type": "Concept", "name": "New"}, "structure": {"v": 1}},
    {"type": "add_relation", "identity": {"id": "rn", "type": "Relation", "name": "rn"},
     "participants": ["n", "a"], "relation_type": "supports"},
    {"type": "update_object", "object_id": "b", "structure_patch": {"flag": None, "extra": "x"}},
    {"type": "rename_object", "object_id": "c", "new_name": "Renamed"},
    {"type": "remove_relation", "relation_id": "r3"},
]

# The reference's JSON-LD export fails on a nested object (ledger: cli-export-jsonld-nested);
# this graph has none, so the two exports compare, as text: its keys are in sorted order, the
# order ours writes a structure's keys in (the reference keeps the file's).
FLAT = {"objects": [
    {"identity": {"id": "a", "type": "Concept", "name": "Alpha"},
     "structure": {"big": 1e20, "note": "café ☕ \u0001", "ok": False, "ratio": 0.25, "tags": ["t1", 2, None], "x": 1}},
    *GRAPH["objects"][1:],
]}

TURTLE_EDGES = """@prefix ex: <http://example.org/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@base <http://base.org/dir/> .
ex:a a "LiteralType" ; rdfs:label "" ; ex:p ex:b .
ex:a ex:p ex:b .
<rel> rdfs:label "Hallo"@de ; a <http://x.org/T#> ; ex:list ( ex:c ex:d ) .
ex:e rdfs:label ex:f ; a ex:g .
"""

RDF_XML_RELATIVE = """<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://example.org/"
         xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#">
  <rdf:Description rdf:about="local"><ex:p rdf:resource="other"/><rdfs:label xml:lang="en">Local</rdfs:label></rdf:Description>
  <rdf:Description rdf:ID="frag"><ex:q>lit</ex:q></rdf:Description>
</rdf:RDF>
"""

JSONLD_EDGES = {"@graph": [
    {"@type": [], "name": None, "x": "y"},
    {"@id": "p", "name": {"@value": "P", "n": [1, 2.5, True]}, "@type": [{"a": 1}], "rdfs:label": "L",
     "ref": [{"@id": None}, {"foo": 1}, 3, "q"]},
    {"@id": "", "k": "v"},
]}

FILES = {
    "good.json": json.dumps(GRAPH, ensure_ascii=False),
    "flat.json": json.dumps(FLAT, ensure_ascii=False),
    "bad.json": json.dumps(BAD),
    "current.json": json.dumps({"_cks_format_version": "1.0", **GRAPH}),
    "empty.json": '{"objects": []}',
    "no-objects.json": "{}",
    "objects-not-list.json": '{"objects": {}}',
    "no-identity.json": '{"objects": [{"structure": {}}]}',
    "extra-field.json": '{"objects": [{"identity": {"id": "a", "type": "T", "name": "n", "x": 1}}]}',
    "dup-ids.json": '{"objects": [{"identity": {"id": "a", "type": "T", "name": "n"}},'
                    ' {"identity": {"id": "a", "type": "T", "name": "m"}}]}',
    "version2.json": '{"version": "2.0", "objects": []}',
    "newer.json": '{"_cks_min_reader_version": "99.0.0", "objects": []}',
    "not-json.json": '{"objects": [',
    "list.json": "[1, 2]",
    "latin1.json": b'{"objects": [], "x": "caf\xe9"}',
    "ops.json": json.dumps(OPS),
    "ops-unknown.json": '[{"type": "explode"}]',
    "ops-missing-field.json": '[{"type": "remove_object"}]',
    "ops-not-json.json": "[",
    "ops-exists.json": '[{"type": "add_object", "identity": {"id": "a", "type": "T", "name": "n"}}]',
    "g.jsonld": json.dumps(JSONLD),
    "single.jsonld": json.dumps({"@id": "x", "@type": "Thing", "related": "y", "n": 1}),
    "numeric-id.jsonld": json.dumps({"@graph": [{"@id": 5, "@type": "T"}]}),
    "dup.jsonld": json.dumps({"@id": "x", "p": ["y", "y"]}),
    "list.jsonld": "[1]",
    "broken.jsonld": "{",
    "g.ttl": TURTLE,
    "edges.ttl": TURTLE_EDGES,
    "relative.rdf": RDF_XML_RELATIVE,
    "edges.jsonld": json.dumps(JSONLD_EDGES),
    "top.jsonld": json.dumps({"@id": "top", "@graph": {"@id": "inner"}, "@context": "c", "link": {"@id": "o"}}),
    "blank.ttl": TURTLE_BLANK,
    "bad.ttl": '@prefix ex: <http://example.org/> .\nex:a ex:b "unterminated .\n',
    "g.rdf": RDF_XML,
    "bomb.rdf": BOMB,
    "deep.json": '{"objects": ' + "[" * 50_000 + "]" * 50_000 + "}",
    "deep.jsonld": '{"@id": "a", "p": ' + "[" * 50_000 + "]" * 50_000 + "}",
    "deep.ttl": "<http://e/a> <http://e/p> " + "[ <http://e/p> " * 2_000 + "<http://e/b>" + " ]" * 2_000 + " .\n",
    "bad.rdf": '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><x>',
}

# (case name, arguments, how standard output compares, file the command writes or None)
CASES = [
    ("validate text", ["validate", "good.json"], "text", None),
    ("validate invalid text", ["validate", "bad.json"], "text", None),
    ("validate json", ["validate", "-f", "json", "bad.json"], "json", None),
    ("validate html", ["validate", "--format", "html", "bad.json"], "text", None),
    ("validate markdown", ["validate", "-f", "markdown", "bad.json"], "text", None),
    ("validate valid markdown", ["validate", "-f", "markdown", "good.json"], "text", None),
    ("validate several text", ["validate", "good.json", "./bad.json", "empty.json"], "text", None),
    ("validate several json", ["validate", "-f", "json", "good.json", "bad.json"], "json", None),
    ("validate several html", ["validate", "-f", "html", "good.json", "bad.json"], "text", None),
    ("validate several markdown", ["validate", "-f", "markdown", "good.json", "bad.json"], "text", None),
    ("validate min-severity warning", ["validate", "--min-severity", "warning", "good.json"], "text", None),
    ("validate min-severity information", ["validate", "--min-severity", "information", "bad.json"], "text", None),
    ("validate to a file", ["validate", "-f", "json", "-o", "report.json", "bad.json"], "text", "report.json"),
    ("validate missing file", ["validate", "missing.json"], "text", None),
    ("validate no objects", ["validate", "no-objects.json"], "text", None),
    ("validate objects not a list", ["validate", "objects-not-list.json"], "text", None),
    ("validate no identity", ["validate", "no-identity.json"], "text", None),
    ("validate unknown identity field", ["validate", "extra-field.json"], "text", None),
    ("validate duplicate ids", ["validate", "dup-ids.json"], "text", None),
    ("validate version 2", ["validate", "version2.json"], "text", None),
    ("validate newer reader", ["validate", "newer.json"], "text", None),
    ("validate not JSON", ["validate", "not-json.json"], "text", None),
    ("validate a list", ["validate", "list.json"], "text", None),
    ("validate not UTF-8", ["validate", "latin1.json"], "text", None),
    ("validate a directory", ["validate", "."], "text", None),
    ("validate deep nesting", ["validate", "deep.json"], "text", None),
    ("evolve deep operations", ["evolve", "good.json", "deep.json"], "text", None),
    ("convert json-ld deep nesting", ["convert", "deep.jsonld"], "text", None),
    ("convert turtle deep blank nodes", ["convert", "-f", "turtle", "deep.ttl"], "rdf", None),
    ("parse", ["parse", "good.json"], "text", None),
    ("parse invalid structure", ["parse", "bad.json"], "text", None),
    ("parse missing file", ["parse", "missing.json"], "text", None),
    ("parse no objects", ["parse", "no-objects.json"], "text", None),
    ("inspect text", ["inspect", "good.json"], "text", None),
    ("inspect json", ["inspect", "-f", "json", "good.json"], "json", None),
    ("inspect to a file", ["inspect", "-o", "inspect.txt", "bad.json"], "text", "inspect.txt"),
    ("inspect missing file", ["inspect", "missing.json"], "text", None),
    ("evolve", ["evolve", "good.json", "ops.json"], "json", None),
    ("evolve to a file", ["evolve", "good.json", "ops.json", "-o", "evolved.json"], "text", "evolved.json"),
    ("evolve unknown operation", ["evolve", "good.json", "ops-unknown.json"], "text", None),
    ("evolve missing field", ["evolve", "good.json", "ops-missing-field.json"], "text", None),
    ("evolve operations not JSON", ["evolve", "good.json", "ops-not-json.json"], "text", None),
    ("evolve operation fails", ["evolve", "good.json", "ops-exists.json"], "text", None),
    ("evolve operations missing", ["evolve", "good.json", "missing.json"], "text", None),
    ("evolve input missing", ["evolve", "missing.json", "ops.json"], "text", None),
    ("convert json-ld", ["convert", "g.jsonld"], "json", None),
    ("convert json-ld node", ["convert", "--format", "json-ld", "single.jsonld"], "json", None),
    ("convert json-ld to a file", ["convert", "g.jsonld", "-o", "converted.json"], "text", "converted.json"),
    ("convert json-ld odd nodes", ["convert", "edges.jsonld"], "json", None),
    ("convert json-ld @graph not a list", ["convert", "top.jsonld"], "json", None),
    ("convert json-ld numeric id", ["convert", "numeric-id.jsonld"], "text", None),
    ("convert json-ld duplicate relation", ["convert", "dup.jsonld"], "text", None),
    ("convert json-ld list", ["convert", "list.jsonld"], "text", None),
    ("convert json-ld not JSON", ["convert", "broken.jsonld"], "text", None),
    ("convert json-ld missing", ["convert", "missing.jsonld"], "text", None),
    ("convert turtle", ["convert", "-f", "turtle", "g.ttl"], "rdf", None),
    ("convert turtle blank node", ["convert", "-f", "turtle", "blank.ttl"], "rdf", None),
    ("convert turtle edges", ["convert", "-f", "turtle", "edges.ttl"], "rdf", None),
    ("convert turtle malformed", ["convert", "-f", "turtle", "bad.ttl"], "text", None),
    ("convert rdf-xml", ["convert", "-f", "rdf-xml", "g.rdf"], "rdf", None),
    ("convert rdf-xml relative IRIs", ["convert", "-f", "rdf-xml", "relative.rdf"], "rdf", None),
    ("convert rdf-xml entity bomb", ["convert", "-f", "rdf-xml", "bomb.rdf"], "text", None),
    ("convert rdf-xml malformed", ["convert", "-f", "rdf-xml", "bad.rdf"], "text", None),
    ("export json-ld", ["export", "good.json"], "json", None),
    ("export json-ld flat", ["export", "flat.json"], "text", None),
    ("inspect json flat", ["inspect", "-f", "json", "flat.json"], "text", None),
    ("evolve flat", ["evolve", "flat.json", "ops.json"], "json", None),
    ("export json-ld dangling", ["export", "--format", "json-ld", "bad.json"], "json", None),
    ("export json-ld to a file", ["export", "good.json", "-o", "out.jsonld"], "text", "out.jsonld"),
    ("export turtle", ["export", "-f", "turtle", "good.json"], "text", None),
    ("export rdf-xml", ["export", "-f", "rdf-xml", "good.json"], "text", None),
    ("export missing file", ["export", "missing.json"], "text", None),
    ("export not a structure", ["export", "no-objects.json"], "text", None),
    ("schema valid", ["schema", "validate", "good.json"], "text", None),
    ("schema no objects", ["schema", "validate", "empty.json"], "text", None),
    ("schema unknown identity field", ["schema", "validate", "extra-field.json"], "text", None),
    ("schema not JSON", ["schema", "validate", "not-json.json"], "text", None),
    ("schema missing file", ["schema", "validate", "missing.json"], "text", None),
    ("plugin list", ["plugin", "list"], "text", None),
    ("plugin list strict", ["--strict", "plugin", "list"], "text", None),
    ("migrate check legacy", ["migrate", "--check", "good.json"], "text", None),
    ("migrate check current", ["migrate", "--check", "current.json"], "text", None),
    ("migrate", ["migrate", "good.json", "migrated.json"], "text", "migrated.json"),
    ("migrate in place", ["migrate", "-i", "good.json"], "text", "good.json"),
    ("migrate without destination", ["migrate", "good.json"], "text", None),
    ("migrate current", ["migrate", "current.json", "x.json"], "text", None),
    ("migrate missing file", ["migrate", "missing.json", "x.json"], "text", None),
    ("migrate not JSON", ["migrate", "not-json.json", "x.json"], "text", None),
    ("migrate not a structure", ["migrate", "no-objects.json", "x.json"], "text", None),
    ("usage no command", [], "text", None),
    ("usage no input", ["validate"], "text", None),
    ("usage unknown format", ["export", "-f", "n3", "good.json"], "text", None),
    ("usage unknown command", ["frobnicate"], "text", None),
]

TIMESTAMP = re.compile(r'"serialized_at": "[^"]*"')
REFERENCE_BLANK = re.compile(r"\bn[0-9a-f]{32}b\d+")
OUR_BLANK = re.compile(r"_:b\d+")


def run(command, args, directory):
    """Writes the files afresh, runs the command, returns (status, stdout, stderr, files)."""
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    for name, contents in FILES.items():
        mode = "wb" if isinstance(contents, bytes) else "w"
        with open(os.path.join(directory, name), mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
            f.write(contents)
    done = subprocess.run([command, *args], cwd=directory, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def read(directory, name):
    try:
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def normalise(text, how):
    """The comparable form of an output: text as it is, JSON parsed, RDF imports as multisets, a
    written file as JSON when it is JSON."""
    if text is None or how == "text":
        return text
    if how == "file":
        try:
            return normalise(text, "json")
        except ValueError:
            return text
    text = TIMESTAMP.sub('"serialized_at": "<timestamp>"', text)
    if how == "rdf":
        text = OUR_BLANK.sub("<blank>", REFERENCE_BLANK.sub("<blank>", text))
        document = json.loads(text)
        document["objects"] = sorted(json.dumps(o, sort_keys=True) for o in document.get("objects", []))
        return document
    return json.loads(text)


def stderr_words(text):
    """The words before the first colon of standard error's first line ('File not found', ...)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first.split(":", 1)[0]


def differences(reference, ours, how, written):
    """The kinds of difference between two runs, each with a short description."""
    (r_status, r_out, r_err, r_file), (o_status, o_out, o_err, o_file) = reference, ours
    found = []
    if r_status != o_status:
        found.append(("status", f"status {r_status} vs {o_status}"))
    try:
        same_out = r_out == o_out or normalise(r_out, how) == normalise(o_out, how)
    except ValueError as e:
        same_out = False
        r_out = f"{r_out}\n(unparsable: {e})"
    if not same_out:
        found.append(("stdout", f"stdout:\n--- reference\n{r_out[:1500]}\n--- ours\n{o_out[:1500]}"))
    if written and normalise(r_file, "file") != normalise(o_file, "file"):
        found.append(("file", f"{written}:\n--- reference\n{(r_file or '')[:1500]}\n--- ours\n{(o_file or '')[:1500]}"))
    if r_err.strip() == o_err.strip():
        pass
    elif r_err.startswith("Traceback") or "\nTraceback" in r_err:
        found.append(("reference_crash", f"the reference crashed: {r_err.strip().splitlines()[-1]}; ours: {o_err.strip()}"))
    elif bool(r_err.strip()) != bool(o_err.strip()):
        found.append(("stderr", f"stderr:\n--- reference\n{r_err}\n--- ours\n{o_err}"))
    elif r_err.startswith("usage:"):
        found.append(("usage_text", "usage text differs"))
    elif stderr_words(r_err) != stderr_words(o_err):
        found.append(("stderr", f"stderr:\n--- reference\n{r_err}\n--- ours\n{o_err}"))
    elif r_err.strip() != o_err.strip():
        found.append(("error_sentence", f"stderr: {r_err.strip()!r} vs {o_err.strip()!r}"))
    return found


def excused(ledger, case, kind):
    for entry in ledger["entries"]:
        if kind in entry.get("kinds", []) and any(fnmatch.fnmatchcase(case, p) for p in entry.get("cases", ["*"])):
            return entry["id"]
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    with open(os.path.join(HERE, "ledger.json"), encoding="utf-8") as f:
        ledger = json.load(f)
    failures, excuses, same = 0, {}, 0
    # One directory for both: relative IRIs resolve against it, and messages name the same paths.
    with tempfile.TemporaryDirectory() as directory:
        for case, argv, how, written in CASES:
            outcomes = []
            for command in (os.path.abspath(args.reference), os.path.abspath(args.ours)):
                status, out, err = run(command, argv, directory)
                outcomes.append((status, out, err, read(directory, written) if written else None))
            found = differences(outcomes[0], outcomes[1], how, written)
            if not found:
                same += 1
            for kind, detail in found:
                entry = excused(ledger, case, kind)
                if entry:
                    excuses[entry] = excuses.get(entry, 0) + 1
                    if not args.quiet:
                        print(f"excused ({entry}): {case}: {kind}")
                else:
                    failures += 1
                    print(f"DIFFERENCE: {case} (cks {' '.join(argv)}): {kind}\n{detail}\n")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(excuses.items()))
    print(f"cli differential: {len(CASES)} cases, {same} identical, {failures} unexcused differences"
          f"{'; excused: ' + summary if summary else ''}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
