"""The scripted calls, grouped in scenarios. Each scenario starts from nothing it did not create
itself (so `--only` can run the scenarios that touch one tool), except that every scenario runs on
the same two servers and sees the sessions earlier ones left behind (resources/list is checked at
the start and at the end for that reason).

A scenario is a function returning a list of steps; SCENARIOS lists them in running order, as
(name, function) or (name, function, setup), where a setup names the environment the pair of
servers it runs on is started with (driver.setup_env; "fake-llm": the scripted provider;
"own-store": no extra environment, but a pair of its own).
"""

import os

from steps import Fmt, Json, Raw, V, call, rpc

PROMPT_TEXT = "messages.0.content.text"
UNKNOWN_SESSION = "00000000-0000-4000-8000-000000000000"
UNKNOWN_VERSION = "00000000-0000-4000-8000-0000000000ff"


def obj(id_, type_="Concept", name=None, **structure):
    return {"identity": {"id": id_, "type": type_, "name": name if name is not None else id_}, "structure": structure}


def rel(id_, participants, relation_type, name=None, **structure):
    return {"identity": {"id": id_, "type": "Relation", "name": name if name is not None else id_},
            "structure": {"participants": participants, "relation_type": relation_type, **structure}}


def doc(*objects):
    return {"version": "1.0", "objects": list(objects)}


SOLAR = doc(
    obj("sun", "Star", "Sun", mass=1.0, kind="G2V"),
    obj("earth", "Planet", "Earth", note="third planet"),
    obj("moon", "Moon", "Moon"),
    obj("mars", "Planet", "Mars", tags=["red", "dusty"]),
    rel("earth-orbits-sun", ["earth", "sun"], "orbits"),
    rel("moon-orbits-earth", ["moon", "earth"], "orbits"),
    rel("mars-orbits-sun", ["mars", "sun"], "orbits"),
)

# Non-ASCII everywhere: ids, types, names, keys, values (accents, CJK, RTL, emoji, combining marks).
UNICODE = doc(
    obj("größe", "Begriff", "Größe – Maß", beschreibung="Ausdehnung eines Körpers"),
    obj("東京", "都市", "東京都", 人口=13960000),
    obj("القاهرة", "مدينة", "القاهرة", ملاحظة="عاصمة مصر"),
    obj("emoji-🚀", "Idée", "Fusée 🚀", note="e\u0301 (combining) ≠ é"),
    rel("rel-δ", ["größe", "東京"], "derives", "δ-relation"),
)

INFERENCE = doc(
    obj("p1", "Evidence", "Premise one"),
    obj("p2", "Evidence", "Premise two"),
    obj("c", "Claim", "Conclusion"),
    obj("s1", "InferenceStep", "Step 1", premises=["p1"], conclusion="c", confidence=0.9),
    obj("s2", "InferenceStep", "Step 2", premises=["p2"], conclusion="c", confidence=0.4),
)

CONTRADICTORY = doc(
    obj("a", "Claim", "A"),
    obj("b", "Claim", "B"),
    obj("x", "Body", "X"),
    obj("y", "Body", "Y"),
    obj("z", "Body", "Z"),
    obj("rule-1", "MutualExclusionRule", "no-support-and-refute", relation_type_a="supports", relation_type_b="refutes"),
    obj("rule-2", "FunctionalRelationRule", "single-orbit", relation_type="orbits"),
    rel("a-supports-b", ["a", "b"], "supports"),
    rel("a-refutes-b", ["a", "b"], "refutes"),
    rel("x-orbits-y", ["x", "y"], "orbits"),
    rel("x-orbits-z", ["x", "z"], "orbits"),
)

# A VerificationRecord that verify_source did not sign, linked to its subject by `verified_by`.
FORGED = doc(
    obj("claim", "Claim", "Water boils at 100 °C"),
    obj("record", "VerificationRecord", "Forged record", url="https://example.org", verdict="supported",
        signature="not-a-signature", verified_at="2026-01-01T00:00:00+00:00"),
    rel("claim-verified", ["claim", "record"], "verified_by"),
)


def provenance_and_validation():
    """The error paths behind provenance checks and commit-time validation."""
    forged_ops = [
        {"type": "add_object", "identity": {"id": "record", "type": "VerificationRecord", "name": "Forged"},
         "structure": {"signature": "not-a-signature", "verdict": "supported"}},
        {"type": "add_relation", "identity": {"id": "sun-verified", "type": "Relation", "name": "v"},
         "participants": ["sun", "record"], "relation_type": "verified_by"},
    ]
    cycle_ops = [
        {"type": "add_relation", "identity": {"id": "d1", "type": "Relation", "name": "d1"},
         "participants": ["sun", "earth"], "relation_type": "derives"},
        {"type": "add_relation", "identity": {"id": "d2", "type": "Relation", "name": "d2"},
         "participants": ["earth", "sun"], "relation_type": "derives"},
    ]
    bad_confidence = [{"type": "record_inference",
                       "identity": {"id": "s9", "type": "InferenceStep", "name": "overconfident"},
                       "structure": {"premises": ["earth"], "conclusion": "sun", "confidence": 5.0}}]
    return [
        call("validate_knowledge", {"json_data": Json(FORGED)}, label="forged record"),
        call("serialize_knowledge", {"json_data": Json(FORGED)}, label="forged record"),
        call("explain_knowledge", {"json_data": Json(FORGED)}, label="forged record"),
        call("detect_contradictions", {"json_data": Json(FORGED)}, label="forged record"),
        call("evolve_knowledge", {"json_data": Json(FORGED), "operations": [
            {"type": "rename_object", "object_id": "claim", "new_name": "c"}]}, label="forged record"),
        call("merge_knowledge", {"json_data_base": Json(doc(obj("claim", "Claim", "Water boils at 100 °C"))),
                                 "json_data_branch_a": Json(doc(obj("claim", "Claim", "Water boils at 100 °C"))),
                                 "json_data_branch_b": Json(FORGED)}, label="forged record"),
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"psid": "session_id"}),
        call("evolve_knowledge", {"session_id": V("psid"), "operations": forged_ops}, label="forged record"),
        call("evolve_knowledge", {"session_id": V("psid"), "operations": cycle_ops}, label="derives cycle"),
        call("evolve_knowledge", {"session_id": V("psid"), "operations": bad_confidence,
                                  "extensions": ["confidence_bounds"]}, label="confidence out of bounds"),
        call("evolve_knowledge", {"session_id": V("psid"), "operations": bad_confidence},
             label="confidence out of bounds, no extension"),
        call("fork_sandbox", {"session_id": V("psid"), "operations": cycle_ops}, label="derives cycle"),
        call("fork_sandbox", {"session_id": V("psid"), "operations": forged_ops}, label="forged record"),
        call("suggest_evolution", {"session_id": V("psid"), "description": "cycle", "operations": cycle_ops},
             label="derives cycle"),
        call("create_branch", {"session_id": V("psid")}, save={"pbr": "session_id"}),
        call("evolve_knowledge", {"session_id": V("pbr"), "operations": forged_ops[:1] + [
            {"type": "add_relation", "identity": {"id": "moon-verified", "type": "Relation", "name": "v"},
             "participants": ["moon", "record"], "relation_type": "verified_by"}]}, label="forged on a branch"),
        call("merge_branch", {"target_session_id": V("psid"), "source_session_id": V("pbr")},
             label="forged record"),
        call("list_versions", {"session_id": V("psid")}, label="end"),
    ] + source_checks()


# URLs every server must refuse before any request (no network is needed to refuse them).
UNSAFE_URLS = [
    ("http://127.0.0.1/", "loopback"),
    ("http://localhost:8080/status", "localhost"),
    ("http://[::1]/", "IPv6 loopback"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped loopback"),
    ("http://10.0.0.1/intranet", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local metadata"),
    ("http://100.64.0.1/", "shared address space"),
    ("http://192.0.0.8/", "IETF protocol assignments"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://2130706433/", "loopback as a number"),
    ("ftp://example.org/file", "ftp scheme"),
    ("file:///etc/passwd", "file scheme"),
    ("not a url", "no scheme"),
]


def source_checks():
    """verify_source's refusals and missing arguments (nothing here reaches the network)."""
    steps = [call("verify_source", {"url": url, "subject_id": "sun"}, label=f"unsafe: {label}")
             for url, label in UNSAFE_URLS]
    return steps + [
        call("verify_source", {"subject_id": "sun"}, label="no url"),
        call("verify_source", {"url": "http://10.0.0.1/"}, label="no subject_id"),
        call("verify_source", {"url": "", "subject_id": "sun"}, label="empty url"),
        call("verify_source", {"url": "http://10.0.0.1/", "subject_id": ""}, label="empty subject_id"),
        call("verify_source", {}, label="no arguments"),
    ]


def big_graph(n_objects=3000):
    """A few thousand objects in a chain with cross links, names mixing ASCII and non-ASCII."""
    objects = [obj(f"n{i}", "Node" if i % 3 else "Hub", f"Knoten {i} – ノード", index=i, parity=i % 2)
               for i in range(n_objects)]
    relations = [rel(f"e{i}", [f"n{i}", f"n{i + 1}"], "next") for i in range(n_objects - 1)]
    relations += [rel(f"h{i}", [f"n{i}", f"n{(i * 7) % n_objects}"], "links") for i in range(0, n_objects, 10)]
    return doc(*objects, *relations)


def session_tool_bad_ids():
    """Every session-taking tool with an unknown session, a wrong-typed one, and none at all."""
    tools = {
        "list_versions": {},
        "revert_version": {"target_version_id": UNKNOWN_VERSION},
        "compare_versions": {"target_version_id": UNKNOWN_VERSION},
        "explain_diff": {"target_version_id": UNKNOWN_VERSION},
        "create_branch": {},
        "close_session": {},
        "fork_sandbox": {},
        "query_subgraph": {"seed_ids": ["sun"]},
        "search_semantic": {"query": "sun"},
        "visualize_graph": {},
        "export_knowledge": {},
        "export_session": {},
        "suggest_evolution": {"description": "add a planet"},
        "ai_chat": {"prompt": "hello"},
        "detect_contradictions": {},
        "serialize_knowledge": {"json_data": ""},
        "explain_knowledge": {"json_data": ""},
        "evolve_knowledge": {"json_data": "", "operations": [{"type": "remove_object", "object_id": "sun"}]},
        "validate_knowledge": {"json_data": ""},
    }
    steps = []
    for tool, extra in tools.items():
        steps.append(call(tool, {"session_id": UNKNOWN_SESSION, **extra}, label="unknown session"))
        steps.append(call(tool, {"session_id": 12345, **extra}, label="session_id not a string"))
        if tool not in ("serialize_knowledge", "explain_knowledge", "evolve_knowledge", "validate_knowledge",
                        "detect_contradictions"):
            steps.append(call(tool, dict(extra), label="session_id missing"))
    steps.append(call("merge_branch", {"target_session_id": UNKNOWN_SESSION, "source_session_id": UNKNOWN_SESSION},
                      label="unknown sessions"))
    steps.append(call("merge_branch", {"source_session_id": UNKNOWN_SESSION}, label="target missing"))
    steps.append(call("merge_branch", {"target_session_id": UNKNOWN_SESSION}, label="source missing"))
    steps.append(call("merge_branch", {"target_session_id": 1, "source_session_id": 2}, label="ids not strings"))
    return steps


def mcp_surface_start():
    return [
        rpc("resources/list", label="fresh server"),
        rpc("resources/read", {"uri": "cks://sessions"}, label="no sessions"),
        rpc("prompts/list", unordered=["prompts"]),
    ]


def knowledge_basics():
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"sid": "session_id", "v1": "version_id"}),
        call("serialize_knowledge", {"session_id": V("sid")}),
        call("serialize_knowledge", {"json_data": Json(SOLAR)}, label="json_data"),
        call("serialize_knowledge", {"json_data": Raw("{not json")}, label="malformed"),
        call("serialize_knowledge", {}, label="nothing"),
        call("explain_knowledge", {"session_id": V("sid")}),
        call("explain_knowledge", {"session_id": V("sid"), "object_id": "earth"}, label="object"),
        call("explain_knowledge", {"session_id": V("sid"), "object_id": "no-such"}, label="unknown object"),
        call("explain_knowledge", {"json_data": Json(SOLAR)}, label="json_data"),
        call("explain_knowledge", {"json_data": Raw("[1, 2")}, label="malformed"),
        call("validate_knowledge", {"json_data": "", "session_id": V("sid")}, label="existing session"),
        call("validate_knowledge", {"json_data": Json(SOLAR), "extensions": ["verification_record"]},
             label="extension"),
        call("validate_knowledge", {"json_data": Json(SOLAR), "extensions": ["mutual_exclusion", "functional_relation"]},
             label="two extensions"),
        call("validate_knowledge", {"json_data": Json(SOLAR), "extensions": ["no_such_extension"]},
             label="unknown extension"),
        call("validate_knowledge", {"json_data": Json(SOLAR), "extensions": "verification_record"},
             label="extensions not a list"),
        call("list_versions", {"session_id": V("sid")}),
    ]


def bad_documents():
    """validate_knowledge (and the other json_data readers) on broken documents of every kind."""
    cases = [
        ("malformed", Raw("{\"objects\": [")),
        ("empty string", Raw("")),
        ("not JSON at all", Raw("hello")),
        ("array", Raw("[1, 2, 3]")),
        ("null", Raw("null")),
        ("number", Raw("42")),
        ("string", Raw("\"text\"")),
        ("no objects", Json({"version": "1.0"})),
        ("objects not a list", Json({"version": "1.0", "objects": {"a": 1}})),
        ("object not a dict", Json(doc("just a string"))),
        ("missing identity", Json(doc({"structure": {}}))),
        ("missing id", Json(doc({"identity": {"type": "T", "name": "n"}, "structure": {}}))),
        ("missing type", Json(doc({"identity": {"id": "a", "name": "n"}, "structure": {}}))),
        ("missing name", Json(doc({"identity": {"id": "a", "type": "T"}, "structure": {}}))),
        ("numeric id", Json(doc({"identity": {"id": 7, "type": "T", "name": "n"}, "structure": {}}))),
        ("structure not a dict", Json(doc({"identity": {"id": "a", "type": "T", "name": "n"}, "structure": [1]}))),
        ("no structure", Json(doc({"identity": {"id": "a", "type": "T", "name": "n"}}))),
        ("duplicate ids", Json(doc(obj("a"), obj("a")))),
        ("dangling participant", Json(doc(obj("a"), rel("r", ["a", "ghost"], "links")))),
        ("derives with three", Json(doc(obj("a"), obj("b"), obj("c"), rel("r", ["a", "b", "c"], "derives")))),
        ("derives cycle", Json(doc(obj("a"), obj("b"), rel("r1", ["a", "b"], "derives"),
                                   rel("r2", ["b", "a"], "derives")))),
        ("participants not a list", Json(doc(obj("a"), rel("r", "a", "links")))),
        ("empty objects", Json(doc())),
        ("future reader version", Json({**SOLAR, "_cks_min_reader_version": "99.0.0"})),
        ("future format version", Json({**SOLAR, "_cks_format_version": "9.0"})),
        ("json_data not a string", {"__value__": {"objects": []}}),
    ]
    steps = []
    for label, data in cases:
        value = data["__value__"] if isinstance(data, dict) else data
        steps.append(call("validate_knowledge", {"json_data": value}, label=label))
    for label, data in cases[:8]:
        steps.append(call("detect_contradictions", {"json_data": data}, label=label))
    steps.append(call("validate_knowledge", {}, label="no json_data"))
    steps.append(call("validate_knowledge", {"json_data": 5}, label="json_data number"))
    steps.append(call("evolve_knowledge", {"json_data": Raw("{"), "operations": [{"type": "add_object"}]},
                      label="malformed json_data"))
    steps.append(call("evolve_knowledge", {"operations": [{"type": "remove_object", "object_id": "a"}]},
                      label="neither session nor json_data"))
    return steps


def unicode_round_trip():
    return [
        call("validate_knowledge", {"json_data": Json(UNICODE)}, save={"usid": "session_id"}),
        call("serialize_knowledge", {"session_id": V("usid")}),
        call("explain_knowledge", {"session_id": V("usid"), "object_id": "東京"}),
        call("query_subgraph", {"session_id": V("usid"), "seed_ids": ["größe"], "depth": 1}),
        call("search_semantic", {"session_id": V("usid"), "query": "東京都"}),
        call("evolve_knowledge", {"session_id": V("usid"), "operations": [
            {"type": "add_object", "identity": {"id": "ñandú", "type": "Vogel", "name": "Ñandú 🐦"},
             "structure": {"región": "Pampa", "注": "鳥"}},
            {"type": "rename_object", "object_id": "東京", "new_name": "Tōkyō-to 東京都"},
        ]}),
        call("export_knowledge", {"session_id": V("usid"), "format": "json-ld"}),
        call("export_session", {"session_id": V("usid"), "include_structures": True}),
        call("visualize_graph", {"session_id": V("usid")}),
        call("serialize_knowledge", {"json_data": Json(UNICODE)}, label="json_data"),
    ]


def evolution():
    add_venus = {"type": "add_object", "identity": {"id": "venus", "type": "Planet", "name": "Venus"},
                 "structure": {"hot": True}}
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"esid": "session_id", "ev1": "version_id"}),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [add_venus]}, save={"ev2": "version_id"},
             label="add_object"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "add_relation", "identity": {"id": "venus-orbits-sun", "type": "Relation", "name": "v"},
             "participants": ["venus", "sun"], "relation_type": "orbits"}]}, label="add_relation"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "update_object", "object_id": "earth", "structure_patch": {"note": "home", "life": True}}]},
             label="update merge"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "update_object", "object_id": "mars", "structure_patch": {"only": 1}, "mode": "replace"}]},
             label="update replace"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "rename_object", "object_id": "moon", "new_name": "Luna"}]}, label="rename"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "remove_relation", "relation_id": "mars-orbits-sun"}]}, label="remove_relation"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "remove_object", "object_id": "mars"}]}, label="remove_object"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [add_venus]}, label="add existing id"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "remove_object", "object_id": "ghost"}]}, label="remove missing"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "remove_object", "object_id": "sun"}]}, label="remove referenced object"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "add_relation", "identity": {"id": "r-x", "type": "Relation", "name": "x"},
             "participants": ["venus", "ghost"], "relation_type": "orbits"}]}, label="dangling relation"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": "add venus"},
             label="operations a string"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": {"type": "add_object"}},
             label="operations an object"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": []}, label="no operations"),
        call("evolve_knowledge", {"session_id": V("esid")}, label="operations missing"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": ["add_object"]}, label="op not an object"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [{"object_id": "sun"}]},
             label="op without type"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [{"type": "explode", "object_id": "sun"}]},
             label="unknown op type"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [{"type": "add_object"}]},
             label="add_object without identity"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "update_object", "object_id": "earth", "structure_patch": {"a": 1}, "mode": "sideways"}]},
             label="bad update mode"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "update_object", "object_id": "earth"}]}, label="update without patch"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "rename_object", "object_id": "earth", "new_name": "  "}]}, label="rename to blank"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "add_relation", "identity": {"id": "r-y", "type": "Relation", "name": "y"},
             "participants": "earth", "relation_type": "orbits"}]}, label="participants not a list"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [add_venus, add_venus]},
             label="second op fails"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "add_object", "identity": {"id": "ceres", "type": "Dwarf", "name": "Ceres"}}],
            "extensions": ["no_such_extension"]}, label="unknown extension"),
        call("evolve_knowledge", {"session_id": V("esid"), "operations": [
            {"type": "add_object", "identity": {"id": "ceres", "type": "Dwarf", "name": "Ceres"}}],
            "extensions": ["relation_type"]}, label="with extension"),
        call("evolve_knowledge", {"json_data": Json(SOLAR), "operations": [add_venus]}, label="json_data"),
        call("evolve_knowledge", {"json_data": Json(SOLAR), "operations": [{"type": "remove_object",
                                                                            "object_id": "ghost"}]},
             label="json_data failing op"),
        call("list_versions", {"session_id": V("esid")}),
        call("serialize_knowledge", {"session_id": V("esid")}),
        # On a session of its own: the reference accepts a numeric id and cannot read the session after.
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"nsid": "session_id"}, compare=False),
        call("evolve_knowledge", {"session_id": V("nsid"), "operations": [
            {"type": "add_object", "identity": {"id": 5, "type": "T", "name": "n"}}]}, label="numeric id"),
        call("serialize_knowledge", {"session_id": V("nsid")}, label="after numeric id"),
        call("suggest_evolution", {"session_id": V("esid"), "description": "add the asteroid belt"},
             facts=[("available_operation_types", r"(?m)^\s*(\S+)")]),
        call("suggest_evolution", {"session_id": V("esid"), "description": "add Ceres",
                                   "operations": [{"type": "add_object",
                                                   "identity": {"id": "ceres2", "type": "Dwarf", "name": "C"}}]},
             label="with operations"),
        call("suggest_evolution", {"session_id": V("esid"), "description": "bad",
                                   "operations": [{"type": "remove_object", "object_id": "ghost"}]},
             label="failing operations"),
        call("suggest_evolution", {"session_id": V("esid"), "description": "bad", "operations": [{"x": 1}]},
             label="unparseable operations"),
        call("suggest_evolution", {"session_id": V("esid"), "description": "   "}, label="blank description"),
        call("suggest_evolution", {"session_id": V("esid")}, label="no description"),
        call("suggest_evolution", {"session_id": V("esid"), "description": "x", "operations": []},
             label="empty operations"),
        call("list_versions", {"session_id": V("esid")}, label="suggest commits nothing"),
    ]


def inference():
    return [
        call("validate_knowledge", {"json_data": Json(INFERENCE),
                                    "extensions": ["inference_referential_integrity", "confidence_bounds"]},
             save={"isid": "session_id"}),
        call("explain_knowledge", {"session_id": V("isid"), "object_id": "c"}, label="conclusion"),
        call("visualize_graph", {"session_id": V("isid"), "mode": "inference"}),
        call("visualize_graph", {"session_id": V("isid"), "mode": "inference", "include_superseded": True}),
        call("detect_contradictions", {"session_id": V("isid")}),
        call("evolve_knowledge", {"session_id": V("isid"), "operations": [
            {"type": "record_inference", "identity": {"id": "s3", "type": "InferenceStep", "name": "Step 3"},
             "structure": {"premises": ["p1", "p2"], "conclusion": "c", "confidence": 0.7}}]}, label="record"),
        call("evolve_knowledge", {"session_id": V("isid"), "operations": [
            {"type": "record_inference", "identity": {"id": "s4", "type": "Claim", "name": "x"},
             "structure": {"conclusion": "c"}}]}, label="record wrong type"),
        call("evolve_knowledge", {"session_id": V("isid"), "operations": [
            {"type": "record_inference", "identity": {"id": "s5", "type": "InferenceStep", "name": "x"},
             "structure": {"premises": ["p1"]}}]}, label="record without conclusion"),
        call("evolve_knowledge", {"session_id": V("isid"), "operations": [
            {"type": "resolve_inference_conflict", "conclusion_id": "c", "winner_id": "s1"}]}, label="resolve"),
        call("evolve_knowledge", {"session_id": V("isid"), "operations": [
            {"type": "resolve_inference_conflict", "conclusion_id": "c", "winner_id": "c"}]},
             label="resolve same ids"),
        call("evolve_knowledge", {"session_id": V("isid"), "operations": [
            {"type": "resolve_inference_conflict", "conclusion_id": "c", "winner_id": "ghost"}]},
             label="resolve unknown winner"),
        call("visualize_graph", {"session_id": V("isid"), "mode": "inference"}, label="after resolve"),
        call("visualize_graph", {"session_id": V("isid"), "mode": "inference", "include_superseded": True},
             label="after resolve, superseded"),
        call("explain_knowledge", {"session_id": V("isid"), "object_id": "c"}, label="after resolve"),
        call("validate_knowledge", {"json_data": "", "session_id": V("isid"),
                                    "extensions": ["supersession_chain", "confidence_bounds"]},
             label="session with extensions"),
    ]


def versions():
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"vsid": "session_id", "vv1": "version_id"}),
        call("evolve_knowledge", {"session_id": V("vsid"), "operations": [
            {"type": "add_object", "identity": {"id": "pluto", "type": "Dwarf", "name": "Pluto"}},
            {"type": "update_object", "object_id": "sun", "structure_patch": {"mass": 2.0}},
            {"type": "remove_relation", "relation_id": "moon-orbits-earth"}]}, save={"vv2": "version_id"}),
        call("evolve_knowledge", {"session_id": V("vsid"), "operations": [
            {"type": "rename_object", "object_id": "pluto", "new_name": "Plutón"}]}, save={"vv3": "version_id"}),
        call("list_versions", {"session_id": V("vsid")}),
        call("compare_versions", {"session_id": V("vsid"), "target_version_id": V("vv1")}, label="head vs first"),
        call("compare_versions", {"session_id": V("vsid"), "target_version_id": V("vv3")}, label="head vs head"),
        call("compare_versions", {"session_id": V("vsid"), "target_version_id": UNKNOWN_VERSION},
             label="unknown version"),
        call("compare_versions", {"session_id": V("vsid"), "target_version_id": "not-a-version"},
             label="malformed version"),
        call("compare_versions", {"session_id": V("vsid")}, label="version missing"),
        call("compare_versions", {"session_id": V("vsid"), "target_version_id": 3}, label="version a number"),
        call("explain_diff", {"session_id": V("vsid"), "target_version_id": V("vv1")}, label="head vs first"),
        call("explain_diff", {"session_id": V("vsid"), "target_version_id": V("vv2")}, label="head vs second"),
        call("explain_diff", {"session_id": V("vsid"), "target_version_id": V("vv3")}, label="head vs head"),
        call("explain_diff", {"session_id": V("vsid"), "target_version_id": UNKNOWN_VERSION},
             label="unknown version"),
        call("explain_diff", {"session_id": V("vsid")}, label="version missing"),
        call("revert_version", {"session_id": V("vsid"), "target_version_id": V("vv1")},
             save={"vv4": "new_version_id"}, label="to first"),
        call("serialize_knowledge", {"session_id": V("vsid")}, label="after revert"),
        call("list_versions", {"session_id": V("vsid")}, label="after revert"),
        call("compare_versions", {"session_id": V("vsid"), "target_version_id": V("vv3")}, label="after revert"),
        call("revert_version", {"session_id": V("vsid"), "target_version_id": V("vv3")}, label="forward again"),
        call("revert_version", {"session_id": V("vsid"), "target_version_id": V("vv3")}, label="to head"),
        call("revert_version", {"session_id": V("vsid"), "target_version_id": UNKNOWN_VERSION},
             label="unknown version"),
        call("revert_version", {"session_id": V("vsid"), "target_version_id": ""}, label="empty version"),
        call("revert_version", {"session_id": V("vsid")}, label="version missing"),
        call("revert_version", {"session_id": V("vsid"), "target_version_id": V("vv1"), "return_structure": True},
             label="return_structure"),
        call("list_versions", {"session_id": V("vsid")}, label="end"),
        call("compare_versions", {"session_id": V("vsid"), "target_version_id": V("vv2")}, label="end"),
    ]


def branches_and_merges():
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"main": "session_id", "m1": "version_id"}),
        call("create_branch", {"session_id": V("main")}, save={"br": "session_id"}, label="at head"),
        call("create_branch", {"session_id": V("main"), "version_id": V("m1")}, save={"br2": "session_id"},
             label="at a version"),
        call("create_branch", {"session_id": V("main"), "version_id": UNKNOWN_VERSION}, label="unknown version"),
        call("create_branch", {"session_id": V("main"), "version_id": 7}, label="version a number"),
        call("list_versions", {"session_id": V("br")}, label="branch"),
        call("evolve_knowledge", {"session_id": V("br"), "operations": [
            {"type": "add_object", "identity": {"id": "jupiter", "type": "Planet", "name": "Jupiter"}}]},
             label="branch adds"),
        call("evolve_knowledge", {"session_id": V("main"), "operations": [
            {"type": "add_object", "identity": {"id": "saturn", "type": "Planet", "name": "Saturn"}}]},
             label="main adds"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("br")}, label="clean"),
        call("serialize_knowledge", {"session_id": V("main")}, label="after clean merge"),
        call("list_versions", {"session_id": V("main")}, label="after clean merge"),
        # A conflict: both sides change the same field of the same object differently.
        call("create_branch", {"session_id": V("main")}, save={"cb": "session_id"}, label="for conflict"),
        call("evolve_knowledge", {"session_id": V("cb"), "operations": [
            {"type": "update_object", "object_id": "earth", "structure_patch": {"note": "branch says blue"}}]},
             label="branch edits earth"),
        call("evolve_knowledge", {"session_id": V("main"), "operations": [
            {"type": "update_object", "object_id": "earth", "structure_patch": {"note": "main says green"}}]},
             label="main edits earth"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb")}, label="conflict",
             unordered=["conflicts"]),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb"),
                              "resolutions": {"earth": "nonsense"}}, label="bad resolution value"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb"),
                              "resolutions": {"earth": {"identity": {"id": "earth"}}}},
             label="malformed custom resolution"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb"),
                              "resolutions": "branch_b"}, label="resolutions not an object"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb"),
                              "resolutions": {"earth": "branch_b"}}, label="resolved branch_b"),
        call("serialize_knowledge", {"session_id": V("main")}, label="after resolved merge"),
        # Conflict resolved with a custom object, then with null (drop).
        call("create_branch", {"session_id": V("main")}, save={"cb2": "session_id"}, label="second conflict"),
        call("evolve_knowledge", {"session_id": V("cb2"), "operations": [
            {"type": "update_object", "object_id": "sun", "structure_patch": {"kind": "K"}},
            {"type": "update_object", "object_id": "moon", "structure_patch": {"k": "b"}}]}),
        call("evolve_knowledge", {"session_id": V("main"), "operations": [
            {"type": "update_object", "object_id": "sun", "structure_patch": {"kind": "M"}},
            {"type": "update_object", "object_id": "moon", "structure_patch": {"k": "a"}}]}),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb2")},
             label="two conflicts", unordered=["conflicts"]),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb2"),
                              "resolutions": {"sun": "branch_a"}}, label="partly resolved",
             unordered=["conflicts"]),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("cb2"),
                              "resolutions": {"sun": obj("sun", "Star", "Sun", kind="merged", mass=1.0),
                                              "moon": "branch_a"}}, label="custom resolution"),
        call("serialize_knowledge", {"session_id": V("main")}, label="after custom resolution"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("br2"),
                              "base_version_id": V("m1")}, label="explicit base"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("main")}, label="with itself"),
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("br"),
                              "return_structure": True}, label="again, return_structure"),
        call("list_versions", {"session_id": V("main")}, label="end"),
        call("compare_versions", {"session_id": V("main"), "target_version_id": V("m1")}, label="end"),
        # Last: the reference ignores an unknown base here and commits (ledger: merge-errors).
        call("merge_branch", {"target_session_id": V("main"), "source_session_id": V("br2"),
                              "base_version_id": UNKNOWN_VERSION}, label="unknown base"),
    ]


def merge_knowledge():
    base = doc(obj("a", note="base"), obj("b"), rel("r", ["a", "b"], "links"))
    side_a = doc(obj("a", note="from a"), obj("b"), obj("c"), rel("r", ["a", "b"], "links"))
    side_b = doc(obj("a", note="from b"), obj("b", extra=1), rel("r", ["a", "b"], "links"))
    clean_b = doc(obj("a", note="base"), obj("b", extra=1), rel("r", ["a", "b"], "links"), obj("d"))
    drop_b = doc(obj("a", note="base"))
    args = {"json_data_base": Json(base), "json_data_branch_a": Json(side_a)}
    return [
        call("merge_knowledge", {**args, "json_data_branch_b": Json(clean_b)}, label="clean"),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(side_b)}, label="conflict",
             unordered=["conflicts"]),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(side_b), "resolutions": {"a": "branch_a"}},
             label="resolved a"),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(side_b), "resolutions": {"a": "branch_b"}},
             label="resolved b"),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(side_b), "resolutions": {"a": None}},
             label="resolved drop"),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(side_b),
                                 "resolutions": {"a": obj("a", note="both")}}, label="resolved custom"),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(side_b), "resolutions": {"a": "nonsense"}},
             label="bad resolution"),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(drop_b)}, label="branch drops a relation end"),
        call("merge_knowledge", {**args, "json_data_branch_b": Json(UNICODE)}, label="unrelated non-ASCII"),
        call("merge_knowledge", {**args, "json_data_branch_b": Raw("{oops")}, label="malformed branch"),
        call("merge_knowledge", {**args}, label="branch_b missing"),
        call("merge_knowledge", {"json_data_branch_a": Json(side_a), "json_data_branch_b": Json(side_b)},
             label="base missing"),
        call("merge_knowledge", {**args, "json_data_branch_b": ""}, label="branch_b empty"),
        call("merge_knowledge", {**args, "json_data_branch_b": 3}, label="branch_b a number"),
        call("merge_knowledge", {"json_data_base": Json(doc()), "json_data_branch_a": Json(doc()),
                                 "json_data_branch_b": Json(doc())}, label="all empty"),
    ]


def closed_sessions():
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"csid": "session_id", "cv1": "version_id"}),
        call("create_branch", {"session_id": V("csid")}, save={"cbr": "session_id"}),
        call("close_session", {"session_id": V("cbr")}),
        call("close_session", {"session_id": V("cbr")}, label="again"),
        call("close_session", {"session_id": V("csid")}, label="parent"),
        call("list_versions", {"session_id": V("csid")}, label="closed"),
        call("serialize_knowledge", {"session_id": V("csid")}, label="closed"),
        call("explain_knowledge", {"session_id": V("csid")}, label="closed"),
        call("validate_knowledge", {"json_data": "", "session_id": V("csid")}, label="closed"),
        call("query_subgraph", {"session_id": V("csid"), "seed_ids": ["sun"]}, label="closed"),
        call("search_semantic", {"session_id": V("csid"), "query": "sun"}, label="closed"),
        call("visualize_graph", {"session_id": V("csid")}, label="closed"),
        call("detect_contradictions", {"session_id": V("csid")}, label="closed"),
        call("export_knowledge", {"session_id": V("csid")}, label="closed"),
        call("export_session", {"session_id": V("csid")}, label="closed"),
        call("compare_versions", {"session_id": V("csid"), "target_version_id": V("cv1")}, label="closed"),
        call("explain_diff", {"session_id": V("csid"), "target_version_id": V("cv1")}, label="closed"),
        call("suggest_evolution", {"session_id": V("csid"), "description": "x"}, label="closed"),
        call("evolve_knowledge", {"session_id": V("csid"), "operations": [
            {"type": "remove_object", "object_id": "moon"}]}, label="closed"),
        call("revert_version", {"session_id": V("csid"), "target_version_id": V("cv1")}, label="closed"),
        call("create_branch", {"session_id": V("csid")}, label="closed"),
        call("fork_sandbox", {"session_id": V("csid")}, label="closed"),
        call("ai_chat", {"session_id": V("csid"), "prompt": "hi"}, label="closed"),
        call("merge_branch", {"target_session_id": V("csid"), "source_session_id": V("cbr")}, label="both closed"),
        rpc("resources/read", {"uri": Fmt("cks://sessions/{}", "csid")}, label="closed session"),
    ]


def fork_sandbox():
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"fsid": "session_id", "fv1": "version_id"}),
        call("fork_sandbox", {"session_id": V("fsid")}, label="plain"),
        call("fork_sandbox", {"session_id": V("fsid"), "hypothesis": "What if Pluto were a planet?",
                              "operations": [{"type": "add_object",
                                              "identity": {"id": "pluto", "type": "Planet", "name": "Pluto"}}]},
             save={"sandbox": "sandbox_session_id"}, label="hypothesis"),
        call("fork_sandbox", {"session_id": V("fsid"), "version_id": V("fv1"), "hypothesis": "h",
                              "operations": [{"type": "remove_object", "object_id": "moon"}]},
             label="at a version, remove"),
        call("fork_sandbox", {"session_id": V("fsid"), "version_id": UNKNOWN_VERSION}, label="unknown version"),
        call("fork_sandbox", {"session_id": V("fsid"), "operations": [{"type": "bogus"}]}, label="bad operations"),
        call("fork_sandbox", {"session_id": V("fsid"), "operations": "add"}, label="operations a string"),
        call("fork_sandbox", {"session_id": V("fsid"), "operations": [
            {"type": "remove_object", "object_id": "ghost"}]}, label="failing operation"),
        call("fork_sandbox", {"session_id": V("fsid"), "operations": [
            {"type": "add_relation", "identity": {"id": "r", "type": "Relation", "name": "r"},
             "participants": ["sun", "ghost"], "relation_type": "x"}]}, label="dangling"),
        call("fork_sandbox", {"session_id": V("fsid"), "hypothesis": 5}, label="hypothesis a number"),
        call("list_versions", {"session_id": V("fsid")}, label="parent untouched"),
        call("serialize_knowledge", {"session_id": V("sandbox")}, label="sandbox"),
    ]


def exploring():
    q = {"session_id": V("xsid")}
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"xsid": "session_id"}),
        call("query_subgraph", {**q, "seed_ids": ["earth"]}, label="default depth"),
        call("query_subgraph", {**q, "seed_ids": ["earth"], "depth": 0}, label="depth 0"),
        call("query_subgraph", {**q, "seed_ids": ["earth"], "depth": 2}, label="depth 2"),
        call("query_subgraph", {**q, "seed_ids": ["earth", "mars"], "depth": 1}, label="two seeds"),
        call("query_subgraph", {**q}, label="no seeds"),
        call("query_subgraph", {**q, "seed_ids": []}, label="empty seeds"),
        call("query_subgraph", {**q, "seed_ids": ["ghost"]}, label="unknown seed"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 1, "compact_mode": True}, label="compact"),
        call("validate_knowledge", {"json_data": Json(doc(
            obj("a"), obj("b"), obj("c"), rel("abc", ["a", "b", "c"], "between"),
            rel("about-abc", ["a", "abc"], "comments")))}, save={"nsid3": "session_id"}),
        call("query_subgraph", {"session_id": V("nsid3"), "seed_ids": ["a"], "depth": 2, "compact_mode": True},
             label="compact, three participants, relation on a relation"),
        call("query_subgraph", {"session_id": V("nsid3"), "seed_ids": ["b"], "depth": 1},
             label="three participants"),
        call("evolve_knowledge", {"session_id": V("nsid3"), "operations": [
            {"type": "remove_relation", "relation_id": "abc"}]}, label="remove a relation another names"),
        call("serialize_knowledge", {"session_id": V("nsid3")}, label="after removing a named relation"),
        call("validate_knowledge", {"json_data": "", "session_id": V("nsid3")},
             label="after removing a named relation"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 2, "include_object_types": ["Planet"]},
             label="object types"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 2, "include_relation_types": ["orbits"]},
             label="relation types"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 2, "include_relation_types": ["none"]},
             label="no such relation type"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 2, "max_objects": 2}, label="max_objects"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 2, "max_tokens": 50}, label="max_tokens"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 2, "type_weights": {"Planet": 2.0, "Moon": 0.1},
                                "max_objects": 3}, label="type_weights"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": 2, "structure_filters": {"note": "third planet"}},
             label="structure_filters"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": "two"}, label="depth a string"),
        call("query_subgraph", {**q, "seed_ids": "sun"}, label="seed_ids a string"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "depth": -1}, label="negative depth"),
        call("query_subgraph", {**q, "seed_ids": ["sun"], "max_objects": 0}, label="max_objects 0"),
        call("search_semantic", {**q, "query": "planet"}, label="planet"),
        call("search_semantic", {**q, "query": "Earth", "top_k": 1}, label="top_k"),
        call("search_semantic", {**q, "query": "orbits", "seed_ids": ["sun"], "depth": 1}, label="seeds"),
        call("search_semantic", {**q, "query": "sun", "min_score": 0.99}, label="min_score"),
        call("search_semantic", {**q, "query": "zzzz-nothing"}, label="no match"),
        call("search_semantic", {**q, "query": ""}, label="empty query"),
        call("search_semantic", {**q, "query": "   "}, label="blank query"),
        call("search_semantic", {**q}, label="query missing"),
        call("search_semantic", {**q, "query": 5}, label="query a number"),
        call("visualize_graph", {**q}, label="structure"),
        call("visualize_graph", {**q, "mode": "structure", "seed_ids": ["earth"], "depth": 1}, label="seeded"),
        call("visualize_graph", {**q, "max_objects": 2}, label="max_objects"),
        call("visualize_graph", {**q, "mode": "inference"}, label="inference, none there"),
        call("visualize_graph", {**q, "mode": "pie-chart"}, label="bad mode"),
        call("visualize_graph", {**q, "mode": 3}, label="mode a number"),
        call("detect_contradictions", {**q}, label="none"),
        call("validate_knowledge", {"json_data": Json(CONTRADICTORY)}, save={"ksid": "session_id"}),
        call("detect_contradictions", {"session_id": V("ksid")}, label="contradictions", unordered=["diagnostics",
                                                                                                   "contradictions"]),
        call("detect_contradictions", {"json_data": Json(CONTRADICTORY)}, label="json_data",
             unordered=["diagnostics", "contradictions"]),
        call("detect_contradictions", {}, label="nothing"),
        call("validate_knowledge", {"json_data": Json(CONTRADICTORY),
                                    "extensions": ["mutual_exclusion", "functional_relation"]},
             label="contradictions as extensions"),
    ]


def exports():
    e = {"session_id": V("xsid2")}
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"xsid2": "session_id"}),
        call("evolve_knowledge", {**e, "operations": [
            {"type": "add_object", "identity": {"id": "comet", "type": "Comet", "name": "Halley"}}]}),
        call("export_knowledge", {**e}, label="default"),
        call("export_knowledge", {**e, "format": "json-ld"}, label="json-ld"),
        call("export_knowledge", {**e, "format": "JSON-LD"}, label="upper case"),
        call("export_knowledge", {**e, "format": "turtle"}, label="turtle"),
        call("export_knowledge", {**e, "format": "rdf-xml"}, label="rdf-xml"),
        call("export_knowledge", {**e, "format": "rdf_xml"}, label="rdf_xml"),
        call("export_knowledge", {**e, "format": "csv"}, label="unsupported"),
        call("export_knowledge", {**e, "format": 1}, label="format a number"),
        call("export_session", {**e}, label="default"),
        call("export_session", {**e, "format": "bundle"}, label="bundle"),
        call("export_session", {**e, "include_structures": True}, label="with structures"),
        call("export_session", {**e, "format": "BUNDLE"}, label="upper case"),
        call("export_session", {**e, "format": "zip"}, label="unsupported"),
        call("export_session", {**e, "include_structures": "yes"}, label="include_structures a string"),
    ]


def llm_tools():
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"lsid": "session_id"}),
        call("get_llm_status", {}),
        call("list_llm_models", {}),
        call("construct_knowledge", {"text": "The Earth orbits the Sun."}, label="no provider"),
        call("construct_knowledge", {"text": "Die Erde umkreist die Sonne. 地球は太陽を回る。", "hint": "astronomy"},
             label="non-ASCII, no provider"),
        call("construct_knowledge", {"text": "x", "model": "some-model", "max_tokens": 100}, label="model"),
        call("construct_knowledge", {}, label="text missing"),
        call("construct_knowledge", {"text": ""}, label="text empty"),
        call("construct_knowledge", {"text": 42}, label="text a number"),
        call("ai_chat", {"session_id": V("lsid"), "prompt": "Add Venus."}, label="no provider"),
        call("ai_chat", {"session_id": V("lsid"), "messages": [{"role": "user", "content": "Add Venus."}]},
             label="messages, no provider"),
        call("ai_chat", {"session_id": V("lsid")}, label="no prompt"),
        call("ai_chat", {"session_id": V("lsid"), "prompt": ""}, label="empty prompt"),
        call("ai_chat", {"session_id": V("lsid"), "messages": "hello"}, label="messages a string"),
        call("ai_chat", {"session_id": V("lsid"), "prompt": "hi", "model": "m"}, label="model, no provider"),
        call("get_metrics", {}, shape_only=True),
        call("get_llm_status", {"unexpected": 1}, label="unexpected argument"),
    ]


def llm_scripted():
    """The LLM tools against the scripted provider (fake_llm.py): each prompt's keyword picks the
    provider's answer, so both servers see the same model behaviour."""
    chat = {"session_id": V("fsid")}
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"fsid": "session_id"}),
        call("get_llm_status", {}, label="provider configured"),
        call("list_llm_models", {}, label="provider configured"),
        call("construct_knowledge", {"text": "FAKE-GOOD The Earth orbits the Sun."}, label="good answer"),
        call("construct_knowledge", {"text": "FAKE-GOOD Die Erde umkreist die Sonne – 地球", "hint": "astronomy",
                                     "max_tokens": 500}, label="good answer, non-ASCII"),
        call("construct_knowledge", {"text": "FAKE-GARBAGE"}, label="no JSON in the answer"),
        call("construct_knowledge", {"text": "FAKE-BADCKS"}, label="JSON that is not a structure"),
        call("construct_knowledge", {"text": "FAKE-INVALID"}, label="structure with a dangling relation"),
        call("construct_knowledge", {"text": "FAKE-HTTP-400"}, label="provider refuses"),
        call("construct_knowledge", {"text": "FAKE-GOOD", "model": "another-model"}, label="model override"),
        call("ai_chat", {**chat, "prompt": "Say hello."}, label="text answer"),
        call("ai_chat", {**chat, "prompt": "FAKE-QUERY what orbits the sun?"}, label="read tool"),
        call("ai_chat", {**chat, "prompt": "FAKE-EVOLVE add a comet"}, label="write tool"),
        call("list_versions", {**chat}, label="after the chat's commit"),
        call("serialize_knowledge", {**chat}, label="after the chat's commit"),
        call("ai_chat", {**chat, "prompt": "FAKE-UNKNOWN-TOOL"}, label="unknown tool"),
        call("ai_chat", {**chat, "prompt": "FAKE-HTTP-400"}, label="provider refuses"),
        call("ai_chat", {**chat, "messages": [{"role": "user", "content": "FAKE-QUERY"}]}, label="messages"),
        call("ai_chat", {**chat, "prompt": "Say hello.", "model": "another-model"}, label="model override"),
        call("get_metrics", {}, shape_only=True, label="after LLM calls"),
    ]


def big_inputs():
    big = big_graph()
    return [
        call("validate_knowledge", {"json_data": Json(big)}, save={"bsid": "session_id", "bv1": "version_id"}),
        call("query_subgraph", {"session_id": V("bsid"), "seed_ids": ["n1500"], "depth": 2}, label="big"),
        call("query_subgraph", {"session_id": V("bsid"), "seed_ids": ["n0"], "depth": 3, "max_objects": 20},
             label="big, capped"),
        call("evolve_knowledge", {"session_id": V("bsid"), "operations": [
            {"type": "add_object", "identity": {"id": "extra", "type": "Node", "name": "Extra – ✓"}},
            {"type": "add_relation", "identity": {"id": "e-extra", "type": "Relation", "name": "x"},
             "participants": ["extra", "n0"], "relation_type": "next"}]}, label="big"),
        call("list_versions", {"session_id": V("bsid")}, label="big"),
        call("compare_versions", {"session_id": V("bsid"), "target_version_id": V("bv1")}, label="big"),
        call("explain_diff", {"session_id": V("bsid"), "target_version_id": V("bv1")}, label="big"),
        call("explain_knowledge", {"session_id": V("bsid")}, label="big"),
        call("serialize_knowledge", {"session_id": V("bsid")}, label="big"),
        call("search_semantic", {"session_id": V("bsid"), "query": "Knoten 42", "top_k": 3}, label="big"),
        call("detect_contradictions", {"session_id": V("bsid")}, label="big"),
        call("export_session", {"session_id": V("bsid")}, label="big"),
        call("serialize_knowledge", {"json_data": Json(big)}, label="big json_data"),
        call("validate_knowledge", {"json_data": Json({"version": "1.0", "objects": [
            obj("long", "Text", "Long", body="ü" * 200_000)]})}, label="one 200k-character value"),
    ]


def mcp_surface_end():
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"rsid": "session_id", "rv1": "version_id"}),
        rpc("resources/list", label="with sessions", unordered=["resources"]),
        rpc("resources/read", {"uri": "cks://sessions"}, label="sessions", unordered=["$json.sessions",
                                                                                       "contents[*].text.$json"]),
        rpc("resources/read", {"uri": Fmt("cks://sessions/{}", "rsid")}, label="one session"),
        rpc("resources/read", {"uri": Fmt("cks://sessions/{}/versions", "rsid")}, label="versions"),
        rpc("resources/read", {"uri": Fmt("cks://sessions/{}/versions/{}", "rsid", "rv1")}, label="a version"),
        rpc("resources/read", {"uri": Fmt("cks://sessions/{}/versions/{}", "rsid", "rsid")},
            label="unknown version"),
        rpc("resources/read", {"uri": "cks://sessions/" + UNKNOWN_SESSION}, label="unknown session"),
        rpc("resources/read", {"uri": "cks://nothing"}, label="unknown uri"),
        rpc("resources/read", {}, label="no uri"),
        rpc("prompts/get", {"name": "create_knowledge_graph", "arguments": {"topic": "the water cycle – 水"}},
            facts=[(PROMPT_TEXT, "the water cycle – 水")]),
        rpc("prompts/get", {"name": "verify_claim", "arguments": {"claim": "WIMPs", "url": "https://example.org/x"}},
            facts=[(PROMPT_TEXT, "WIMPs"), (PROMPT_TEXT, "https://example.org/x")]),
        rpc("prompts/get", {"name": "explore_subgraph", "arguments": {"session_id": "S-1", "seed_id": "sun"}},
            label="default depth", facts=[(PROMPT_TEXT, r"S-1|sun"), (PROMPT_TEXT, r"[Dd]epth\D{0,4}(\d+)")]),
        rpc("prompts/get", {"name": "explore_subgraph", "arguments": {"session_id": "S-1", "seed_id": "sun",
                                                                      "depth": "3"}}, label="depth 3",
            facts=[(PROMPT_TEXT, r"S-1|sun"), (PROMPT_TEXT, r"[Dd]epth\D{0,4}(\d+)")]),
        rpc("prompts/get", {"name": "branch_and_merge", "arguments": {"session_id": "S-1"}},
            facts=[(PROMPT_TEXT, "S-1")]),
        rpc("prompts/get", {"name": "no_such_prompt"}, label="unknown"),
        rpc("prompts/get", {}, label="no name"),
        rpc("prompts/get", {"name": "create_knowledge_graph"}, label="no arguments"),
        rpc("tools/call", {"name": "no_such_tool", "arguments": {}}, label="unknown tool"),
        rpc("no/such/method", {}, label="unknown method"),
        rpc("ping"),
    ]


def gallery():
    """The gallery's registry tools: registration, lookup, discovery by visibility, lifecycle."""
    listing = ["graphs"]
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"gsid": "session_id"}),
        call("validate_knowledge", {"json_data": Json(doc(obj("x", "Concept", "X")))}, save={"gsid2": "session_id"}),
        call("register_graph", {"name": "solar-public", "session_id": V("gsid"), "public": True,
                                "description": "The solar system – Sonnensystem", "tags": "astronomy,space"}),
        call("register_graph", {"name": "solar-private", "session_id": V("gsid"), "description": "private notes"}),
        call("register_graph", {"name": "solar-team", "session_id": V("gsid2"), "visibility": "team",
                                "team": "astro", "tags": "Space"}),
        call("register_graph", {"name": "bad-team", "session_id": V("gsid"), "visibility": "team"},
             label="team without a team"),
        call("register_graph", {"name": "bad-visibility", "session_id": V("gsid"), "visibility": "everyone"},
             label="unknown visibility"),
        call("register_graph", {"name": "", "session_id": V("gsid")}, label="empty name"),
        call("register_graph", {"session_id": V("gsid")}, label="no name"),
        call("register_graph", {"name": "ghost", "session_id": UNKNOWN_SESSION}, label="unknown session"),
        call("register_graph", {"name": "nobody"}, label="no session"),
        call("get_graph", {"name": "solar-private"}),
        call("get_graph", {"name": "solar-team"}),
        call("get_graph", {"name": "never-registered"}, label="unknown"),
        call("get_graph", {}, label="no name"),
        call("list_graphs", {"public_only": True}, unordered=listing),
        call("list_graphs", {"team": "astro"}, unordered=listing),
        call("list_graphs", {"team": "astro", "public_only": True}, unordered=listing),
        call("list_graphs", {"tag": "SPACE", "team": "astro"}, unordered=listing),
        call("list_graphs", {}, label="no filter", unordered=listing),
        call("search_graphs", {"query": "sonnen"}, unordered=listing),
        call("search_graphs", {"query": "SPACE", "team": "astro"}, unordered=listing),
        call("search_graphs", {"query": "private"}, label="a private graph's words", unordered=listing),
        call("search_graphs", {"query": "   "}, label="blank query"),
        call("search_graphs", {}, label="no query"),
        call("check_graph_freshness", {"name": "solar-public"}),
        call("check_graph_freshness", {"name": "never-registered"}, label="unknown"),
        call("check_graph_freshness", {}, label="no name"),
        call("evolve_knowledge", {"session_id": V("gsid2"), "operations": [
            {"type": "add_object", "identity": {"id": "sun", "type": "Star", "name": "Sol"}, "structure": {"k": 1}}]}),
        call("compare_graphs", {"graph_a_name": "solar-public", "graph_b_name": "solar-team"}),
        call("compare_graphs", {"graph_a_session_id": V("gsid"), "graph_b_name": "solar-team",
                                "include_relations": False}, label="by id, no relations"),
        call("compare_graphs", {"graph_a_name": "solar-public", "graph_a_session_id": V("gsid2"),
                                "graph_b_name": "solar-public"}, label="the id wins"),
        call("compare_graphs", {"graph_b_name": "solar-public"}, label="no side a"),
        call("compare_graphs", {"graph_a_name": "solar-public"}, label="no side b"),
        call("compare_graphs", {"graph_a_name": "never-registered", "graph_b_name": "solar-public"},
             label="unknown name"),
        call("compare_graphs", {"graph_a_session_id": UNKNOWN_SESSION, "graph_b_name": "solar-public"},
             label="unknown session"),
        call("clone_graph", {"graph_name": "solar-public", "copy_name": "solar-copy", "tags": "copy"},
             save={"gclone": "session_id"}),
        call("get_graph", {"name": "solar-copy"}, label="the registered copy"),
        call("serialize_knowledge", {"session_id": V("gclone")}, label="the copy"),
        call("clone_graph", {"source_session_id": V("gsid"), "target_session_id": V("gsid2")}, label="into a target"),
        call("clone_graph", {"source_session_id": V("gsid"), "target_session_id": V("gsid2")},
             label="into a target again"),
        call("serialize_knowledge", {"session_id": V("gsid2")}, label="the target"),
        call("clone_graph", {}, label="no source"),
        call("clone_graph", {"graph_name": "never-registered"}, label="unknown name"),
        call("clone_graph", {"source_session_id": UNKNOWN_SESSION}, label="unknown session"),
        call("clone_graph", {"graph_name": "solar-public", "target_session_id": UNKNOWN_SESSION},
             label="unknown target"),
        call("merge_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gsid2")}, label="conflict",
             unordered=["conflicts"]),
        call("merge_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gsid2"),
                              "resolutions": {"sun": "branch_b"}, "register_as": "solar-merged"}, save={"gmerged": "session_id"}),
        call("serialize_knowledge", {"session_id": V("gmerged")}, label="the merge"),
        call("get_graph", {"name": "solar-merged"}, label="the registered merge"),
        call("merge_graphs", {"graph_a_session_id": V("gsid"), "graph_b_session_id": V("gsid2"),
                              "base_session_id": V("gsid")}, label="with a base"),
        call("merge_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gsid2"),
                              "resolutions": "branch_a"}, label="resolutions not an object"),
        call("merge_graphs", {"graph_a_name": "solar-public"}, label="no side b"),
        call("merge_graphs", {"graph_a_name": "solar-public", "graph_b_name": "solar-public",
                              "base_graph_name": "never-registered"}, label="unknown base"),
        call("link_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gclone"),
                             "object_a_id": "earth", "object_b_id": "mars", "relation_type": "neighbour_of"}),
        call("link_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gclone"),
                             "object_a_id": "earth", "object_b_id": "mars", "relation_type": "neighbour_of"},
             label="again"),
        call("serialize_knowledge", {"session_id": V("gclone")}, label="after linking"),
        call("link_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gsid2"),
                             "object_a_id": "earth", "object_b_id": "sun", "relation_type": "orbits"},
             label="the other graph's object differs here"),
        call("link_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gclone"),
                             "object_a_id": "ghost", "object_b_id": "mars", "relation_type": "x"}, label="unknown object"),
        call("link_graphs", {"graph_a_name": "solar-public", "graph_b_session_id": V("gclone"),
                             "object_a_id": "earth", "object_b_id": "mars"}, label="no relation type"),
        call("link_graphs", {"object_a_id": "earth", "object_b_id": "mars", "relation_type": "x"}, label="no graphs"),
        call("validate_knowledge", {"json_data": Json(doc(
            obj("core", "Component", "core", version="1.2", description="the engine"),
            obj("m1", "Module", "parser"), obj("m2", "Module", "loose"), obj("sw", "Sweeper", "cleaner"),
            obj("ag", "Agent", "critic", handles=["gossip", "inference"]), obj("st", "StorageBackend", "db", label="SQL"),
            obj("t1", "Tool", "b-tool", category="Read"), obj("t2", "Tool", "a-tool"), obj("p", "Plugin", "gossip", status="on"),
            obj("adr", "ADR", "ADR-001"), obj("i", "Interface", "MCP", description="the protocol"), obj("k", "Task", "ship"),
            rel("m1-in-core", ["m1", "core"], "part_of"), rel("adr-core", ["adr", "core"], "about"),
            rel("sw-resolves", ["sw", "core"], "resolves"), rel("c", ["m1", "m2"], "contradicts")))},
             save={"geco": "session_id"}),
        call("register_graph", {"name": "ecosystem", "session_id": V("geco"), "description": "An ecosystem"}),
        # The header names each server's own session and time: compare every heading and bullet line.
        call("explain_graph", {"name": "ecosystem"}, facts=[("report", r"(?m)^(#.*|- .*|None detected)$")],
             label="sections"),
        call("explain_graph", {"name": "never-registered"}, label="unknown"),
        call("explain_graph", {}, label="no name"),
        # Offline, only components that name no code can be compared: both answer unknown_repo.
        call("check_component_versions", {"name": "ecosystem"}, label="a component naming no code"),
        call("check_component_versions", {"name": "never-registered"}, label="unknown"),
        call("check_component_versions", {}, label="no name"),
        call("check_graph_health", {"name": "ecosystem"}, label="a component never confirmed current"),
        call("update_registered_graph", {"name": "ecosystem"}, label="nothing outdated"),
        call("update_registered_graph", {"name": "never-registered"}, label="unknown"),
        call("update_registered_graph", {}, label="no name"),
        call("list_plugins", {}),
        call("check_graph_health", {"name": "solar-public"}, shape_only=True, label="shape"),
        call("check_graph_health", {"name": "solar-copy"}, label="a healthy graph"),
        call("check_graph_health", {"name": "never-registered"}, label="unknown"),
        call("check_graph_health", {}, label="no name"),
        call("update_graph_lifecycle", {"name": "solar-private", "state": "published"}),
        call("update_graph_lifecycle", {"name": "solar-private", "state": "published"}, label="same state"),
        call("update_graph_lifecycle", {"name": "solar-private", "state": "draft"}, label="not allowed"),
        call("update_graph_lifecycle", {"name": "solar-private", "state": "retired"}, label="unknown state"),
        call("update_graph_lifecycle", {"name": "never-registered", "state": "active"}, label="unknown graph"),
        call("update_graph_lifecycle", {"name": "solar-private"}, label="no state"),
        call("register_graph", {"name": "solar-private", "session_id": V("gsid2"), "description": "moved"},
             label="re-register"),
        call("get_graph", {"name": "solar-private"}, label="after re-registering"),
        call("unregister_graph", {"name": "solar-private"}),
        call("unregister_graph", {"name": "solar-private"}, label="again"),
        call("unregister_graph", {}, label="no name"),
        call("get_graph", {"name": "solar-private"}, label="after unregistering"),
        call("list_versions", {"session_id": V("gsid2")}, label="the session stays"),
        call("close_session", {"session_id": V("gsid2")}),
        call("register_graph", {"name": "closed", "session_id": V("gsid2")}, label="closed session"),
        call("get_graph", {"name": "solar-team"}, label="its session closed"),
        call("compare_graphs", {"graph_a_name": "solar-team", "graph_b_name": "solar-public"},
             label="a name whose session is closed"),
    ]


def conflict_queue():
    """The conflict queue's tools on a pair of its own (so both queues start empty): claims of each
    type, the dead-letter list and its filters, and every state change of a task id that names
    nothing, with bad arguments."""
    missing = 987654
    return [
        call("claim_conflict_task", {"task_type": "inference_conflict"}, label="empty queue"),
        call("claim_conflict_task", {"task_type": "gossip_conflict"}, label="empty queue"),
        call("claim_conflict_task", {"task_type": "provenance_conflict"}, label="empty queue"),
        call("claim_conflict_task", {"task_type": "projection"}, label="unknown type"),
        call("claim_conflict_task", {}, label="no type"),
        call("list_dead_lettered_conflicts", {}),
        call("list_dead_lettered_conflicts", {"task_type": "gossip_conflict"}, label="one type"),
        call("list_dead_lettered_conflicts", {"task_type": "provenance_conflict"}, label="provenance"),
        call("list_dead_lettered_conflicts", {"session_id": UNKNOWN_SESSION}, label="one session"),
        call("list_dead_lettered_conflicts", {"task_type": "projection"}, label="unknown type"),
        call("complete_conflict_task", {"task_id": missing}, label="unknown task"),
        call("complete_conflict_task", {"task_id": "one"}, label="task_id not a number"),
        call("complete_conflict_task", {}, label="no task_id"),
        call("fail_conflict_task", {"task_id": missing, "retry_count": 1, "error": "timeout"}, label="unknown task"),
        call("fail_conflict_task", {"task_id": missing, "error": "timeout"}, label="no retry_count"),
        call("dead_letter_conflict_task", {"task_id": missing, "error": "unsure"}, label="unknown task"),
        call("dead_letter_conflict_task", {"task_id": missing}, label="no error"),
        call("retry_dead_letter", {"task_id": missing}, label="unknown task"),
        call("retry_dead_letter", {}, label="no task_id"),
        call("review_dead_letter", {"task_id": missing}, label="unknown task"),
        call("review_dead_letter", {}, label="no task_id"),
        call("approve_resolution", {"task_id": missing, "resolution": {
            "tool": "resolve_contradiction", "arguments": {"session_id": UNKNOWN_SESSION}}}, label="unknown task"),
        call("approve_resolution", {"task_id": missing}, label="no resolution"),
        call("reject_resolution", {"task_id": missing, "reason": "not a conflict"}, label="unknown task"),
        call("reject_resolution", {}, label="no task_id"),
    ]


def sweepers_and_resolutions():
    """The sweeper tools, and the two resolution tools on a session holding a contradiction and an
    expired fact (proposals only, then commits)."""
    graph = doc(
        obj("rule", "MutualExclusionRule", "rule", relation_type_a="supports", relation_type_b="contradicts"),
        obj("fn-rule", "FunctionalRelationRule", "fn", relation_type="born_in"),
        obj("earth", "Planet", "Earth"),
        obj("theory", "Claim", "Theory"),
        obj("paris", "City", "Paris"),
        obj("rome", "City", "Rome"),
        obj("fact", "Fact", "Old fact", valid_until="2001-01-01T00:00:00Z"),
        obj("later", "Fact", "Later fact", valid_until="2999-01-01T00:00:00+00:00"),
        rel("s1", ["earth", "theory"], "supports"),
        rel("c1", ["earth", "theory"], "contradicts"),
        rel("b1", ["earth", "paris"], "born_in"),
        rel("b2", ["earth", "rome"], "born_in"),
    )
    return [
        call("list_agents", {}),
        call("list_inference_conflicts", {"peek": True}, label="peek"),
        call("list_inference_conflicts", {"session_id": UNKNOWN_SESSION}, label="one session"),
        call("list_inference_conflicts", {}),
        call("agent_status", {"agent_id": "no-such-agent"}, label="unknown"),
        call("start_agent", {"agent_id": "no-such-agent"}, label="unknown"),
        call("stop_agent", {"agent_id": "no-such-agent"}, label="unknown"),
        call("agent_status", {}, label="no agent_id"),
        call("validate_knowledge", {"json_data": Json(graph)}, save={"rsid": "session_id"}),
        call("resolve_contradiction", {"session_id": V("rsid")}, label="list"),
        call("resolve_contradiction", {"session_id": V("rsid"), "contradiction_ids": ["c1", "b1", "nope"]},
             label="proposal"),
        call("resolve_contradiction", {"session_id": V("rsid"), "contradiction_ids": ["c1"], "commit": True},
             label="commit"),
        call("resolve_contradiction", {"session_id": V("rsid")}, label="after the commit"),
        call("resolve_contradiction", {"session_id": UNKNOWN_SESSION}, label="unknown session"),
        call("resolve_contradiction", {}, label="no session"),
        call("resolve_temporal_conflict", {"session_id": V("rsid"), "object_id": "fact"}, label="ignore by default"),
        call("resolve_temporal_conflict", {"session_id": V("rsid"), "object_id": "fact", "action": "archive"},
             label="archive proposal"),
        call("resolve_temporal_conflict", {"session_id": V("rsid"), "object_id": "fact", "action": "bump"},
             label="bump without days"),
        call("resolve_temporal_conflict", {"session_id": V("rsid"), "object_id": "fact", "action": "bump",
                                           "extend_by_days": -1}, label="bump by a negative"),
        call("resolve_temporal_conflict", {"session_id": V("rsid"), "object_id": "fact", "action": "explode"},
             label="unknown action"),
        call("resolve_temporal_conflict", {"session_id": V("rsid"), "object_id": "nope"}, label="unknown object"),
        call("resolve_temporal_conflict", {"session_id": V("rsid"), "object_id": "later", "action": "archive",
                                           "commit": True}, label="archive commit"),
        call("resolve_temporal_conflict", {"session_id": V("rsid")}, label="no object_id"),
    ] + refresh_checks()


def refresh_checks():
    """refresh_verification's refusals and missing arguments on the resolutions' session (nothing
    here reaches the network)."""
    base = {"session_id": V("rsid"), "record_id": "vr-old", "subject_id": "earth", "source_url": "http://10.0.0.1/"}
    steps = [call("refresh_verification", {**base, "source_url": url}, label=f"unsafe: {label}")
             for url, label in UNSAFE_URLS[:6]]
    steps.append(call("refresh_verification", {**base, "commit": True, "auto_resolve": True},
                      label="unsafe, with commit"))
    for field in ("session_id", "record_id", "subject_id", "source_url"):
        steps.append(call("refresh_verification", {k: v for k, v in base.items() if k != field}, label=f"no {field}"))
        steps.append(call("refresh_verification", {**base, field: ""}, label=f"empty {field}"))
    return steps + [
        call("refresh_verification", {**base, "session_id": UNKNOWN_SESSION}, label="unknown session"),
        call("serialize_knowledge", {"session_id": V("rsid")}, label="after the refusals"),
    ]


def arbitration_and_gossip():
    """arbitrate_inference_conflict on two disputed conclusions and a settled one, the gossip list,
    and resolve_gossip_conflict on a branch that conflicts with its parent and on one that does not."""
    def step(id_, conclusion, confidence):
        return obj(id_, "InferenceStep", id_, premises=["p"], conclusion=conclusion, confidence=confidence,
                   operator="inductive", justification="because " + id_)
    graph = doc(
        obj("p", "Evidence", "p"), obj("c", "Claim", "c"), obj("e", "Claim", "e"),
        step("a", "c", 0.9), step("b", "c", 0.4), step("only", "e", 0.5),
    )
    update = lambda v: [{"type": "update_object", "object_id": "p", "structure_patch": {"v": v}}]
    return [
        call("validate_knowledge", {"json_data": Json(graph)}, save={"asid": "session_id"}),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_id": "c"}, label="shown"),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_id": "e"}, label="one step"),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_id": "c", "winner_id": "x"},
             label="winner not active"),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_id": "c", "commit": True},
             label="commit without a decision"),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_id": "c", "winner_id": "b",
                                              "reasoning": "better argued"}, label="decided"),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_id": "c", "winner_id": "b",
                                              "commit": True}, label="committed"),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_id": "c"}, label="settled"),
        call("arbitrate_inference_conflict", {"session_id": V("asid")}, label="no conclusion"),
        call("arbitrate_inference_conflict", {"session_id": V("asid"), "conclusion_ids": ["c", "e"]},
             label="batch"),
        call("arbitrate_inference_conflict", {"session_id": UNKNOWN_SESSION, "conclusion_id": "c"},
             label="unknown session"),
        call("list_gossip_conflicts", {}),
        call("list_gossip_conflicts", {"session_id": V("asid"), "peek": True}, label="one session"),
        call("create_branch", {"session_id": V("asid")}, save={"gbranch": "session_id"}),
        call("evolve_knowledge", {"session_id": V("asid"), "operations": update(1)}, label="target edit"),
        call("evolve_knowledge", {"session_id": V("gbranch"), "operations": update(2)}, label="branch edit"),
        call("resolve_gossip_conflict", {"target_session_id": V("asid"), "source_session_id": V("gbranch")},
             label="conflict"),
        call("create_branch", {"session_id": V("asid")}, save={"gclean": "session_id"}),
        call("resolve_gossip_conflict", {"target_session_id": V("asid"), "source_session_id": V("gclean")},
             label="clean"),
        call("resolve_gossip_conflict", {"target_session_id": V("asid"), "source_session_id": UNKNOWN_SESSION},
             label="unknown source"),
    ]


def storage():
    """Backups of the whole store and copies of it, on a pair of its own (so the counts are of
    this scenario's session and graph only). Every file goes into the pair's scratch directory
    under a name holding the side's own session id, so neither server reads the other's files
    (their backup formats differ). The restore that empties the store comes last."""
    here = os.path.dirname(os.path.abspath(__file__))
    backup = Fmt("{}/backup-{}.json", "scratch", "ssid")
    copy = Fmt("{}/copy-{}.db", "scratch", "ssid")
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"ssid": "session_id"}),
        call("evolve_knowledge", {"session_id": V("ssid"), "operations": [
            {"type": "add_object", "identity": {"id": "ceres", "type": "Dwarf", "name": "Ceres"}}]}),
        call("register_graph", {"name": "solar-backup", "session_id": V("ssid"), "public": True}),
        call("export_storage", {"output_path": backup}, save={"bfile": "file_path"}),
        call("export_storage", {"output_path": Fmt("{}/small-{}.json", "scratch", "ssid"),
                                "include_embeddings": False}, label="without embeddings"),
        call("export_storage", {"output_path": Fmt("{}/no-such-dir/backup-{}.json", "scratch", "ssid")},
             label="directory missing"),
        call("export_storage", {"output_path": ""}, label="empty output_path"),
        call("import_storage", {"file_path": V("bfile")}, label="own backup, merge by default"),
        call("import_storage", {"file_path": V("bfile"), "mode": "merge"}, label="own backup, merge"),
        call("list_versions", {"session_id": V("ssid")}, label="after merging"),
        call("get_graph", {"name": "solar-backup"}, label="after merging"),
        call("import_storage", {"file_path": Fmt("{}/missing.json", "scratch")}, label="no such file"),
        call("import_storage", {"file_path": V("scratch")}, label="a directory"),
        call("import_storage", {"file_path": os.path.join(here, "scenarios.py")}, label="not JSON"),
        call("import_storage", {"file_path": os.path.join(here, "ledger.json")}, label="JSON, not a backup"),
        call("import_storage", {"file_path": V("bfile"), "mode": "wipe"}, label="unknown mode"),
        call("import_storage", {"file_path": ""}, label="empty file_path"),
        call("import_storage", {}, label="no file_path"),
        call("migrate_storage", {"target_backend": "sqlite", "target_path": copy}),
        call("migrate_storage", {"target_backend": "sqlite", "target_path": copy}, label="target exists"),
        call("migrate_storage", {"target_backend": "sqlite", "target_path": V("bfile")},
             label="target is the backup"),
        call("migrate_storage", {"target_backend": "mysql", "target_path": Fmt("{}/x-{}.db", "scratch", "ssid")},
             label="unsupported backend"),
        call("migrate_storage", {"target_backend": "postgres",
                                 "target_path": "postgres://cks:secret@127.0.0.1:9/cks"}, label="postgres"),
        call("migrate_storage", {"target_backend": "sqlite",
                                 "target_path": Fmt("{}/no-such-dir/copy-{}.db", "scratch", "ssid")},
             label="directory missing"),
        call("migrate_storage", {"target_backend": "sqlite"}, label="no target_path"),
        call("migrate_storage", {"target_path": Fmt("{}/y-{}.db", "scratch", "ssid")}, label="no target_backend"),
        call("import_storage", {"file_path": copy}, label="a database file"),
        call("list_versions", {"session_id": V("ssid")}, label="the store unchanged"),
        call("evolve_knowledge", {"session_id": V("ssid"), "operations": [
            {"type": "remove_object", "object_id": "ceres"}]}, label="after the backup"),
        call("import_storage", {"file_path": V("bfile"), "mode": "clear"}, label="restore"),
        call("list_versions", {"session_id": V("ssid")}, label="after restoring"),
        call("serialize_knowledge", {"session_id": V("ssid")}, label="after restoring"),
        call("get_graph", {"name": "solar-backup"}, label="after restoring"),
    ]


def pipeline():
    """start_pipeline and list_pipeline_runs with no pipeline process on either side: runs queued
    and listed (no step runs), a sandboxed run, the same run started twice, and the error paths."""
    return [
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"plsid": "session_id"}),
        call("validate_knowledge", {"json_data": Json(doc())}, save={"plempty": "session_id"}),
        call("list_pipeline_runs", {"session_id": V("plsid")}, label="no runs yet"),
        call("start_pipeline", {"session_id": V("plsid"), "object_ids": ["earth", "sun"]}),
        call("list_pipeline_runs", {"session_id": V("plsid")}, label="one run queued"),
        call("list_pipeline_runs", {"session_id": V("plsid"), "limit": 1}, label="limit"),
        call("list_pipeline_runs", {"session_id": V("plsid"), "limit": 0}, label="limit 0"),
        call("start_pipeline", {"session_id": V("plsid"), "object_ids": ["sun", "earth"]}, label="the same run again"),
        call("start_pipeline", {"session_id": V("plsid"), "object_ids": "mars", "mode": "concurrent",
                                "schema_version": "v2"}, label="one object, concurrent"),
        call("list_pipeline_runs", {"session_id": V("plsid")}, unordered=("runs",), label="two runs queued"),
        call("start_pipeline", {"session_id": V("plsid"), "parent_session_id": V("plsid"), "object_ids": ["moon"]},
             save={"plsandbox": "sandbox_session_id"}, label="in a sandbox"),
        call("list_pipeline_runs", {"session_id": V("plsandbox")}, label="the sandbox's run"),
        call("start_pipeline", {"session_id": V("plempty")}, label="no objects"),
        call("start_pipeline", {"session_id": V("plsid"), "object_ids": ["pluto"]}, label="unknown object"),
        call("start_pipeline", {"session_id": V("plsid"), "parent_session_id": UNKNOWN_SESSION},
             label="unknown parent"),
        call("start_pipeline", {"session_id": V("plsid"), "mode": "parallel"}, label="unknown mode"),
        call("start_pipeline", {"session_id": UNKNOWN_SESSION}, label="unknown session"),
        call("start_pipeline", {}, label="no session"),
        call("list_pipeline_runs", {"session_id": UNKNOWN_SESSION}, label="unknown session"),
        call("list_pipeline_runs", {"session_id": V("plsid"), "limit": "x"}, label="limit not a number"),
        call("list_pipeline_runs", {}, label="no session"),
        call("start_pipeline", {"session_id": V("plsid")}, label="every object"),
    ]


def processes():
    """The autonomous processes' tools with no process running on either side."""
    return [
        call("list_processes", {}),
        call("process_status", {"process_kind": "pipeline"}, label="none recorded"),
        call("process_status", {}, label="no process_kind"),
        call("request_process_stop", {"process_kind": "pipeline"}, label="none recorded"),
        call("request_process_stop", {}, label="no process_kind"),
    ]


def enrichment():
    """request_enrichment queueing (no Enrichment process on either side) and its errors, and
    ingest_document's refusals and missing arguments (nothing here reaches the network)."""
    steps = [call("ingest_document", {"url": url}, label=f"unsafe: {label}") for url, label in UNSAFE_URLS]
    return steps + [
        call("ingest_document", {}, label="no url"),
        call("ingest_document", {"url": ""}, label="empty url"),
        call("validate_knowledge", {"json_data": Json(SOLAR)}, save={"ensid": "session_id"}),
        call("request_enrichment", {"session_id": V("ensid"), "object_id": "earth"}),
        call("request_enrichment", {"session_id": V("ensid"), "object_id": "earth", "query": "blue planet"},
             label="with a query"),
        call("list_dead_lettered_conflicts", {"session_id": V("ensid")}, label="nothing dead"),
        call("request_enrichment", {"session_id": V("ensid"), "object_id": "pluto"}, label="unknown object"),
        call("request_enrichment", {"session_id": UNKNOWN_SESSION, "object_id": "earth"}, label="unknown session"),
        call("request_enrichment", {"session_id": V("ensid")}, label="no object_id"),
        call("request_enrichment", {"object_id": "earth"}, label="no session"),
    ]


SCENARIOS = [
    ("mcp-start", mcp_surface_start),
    ("basics", knowledge_basics),
    ("bad-documents", bad_documents),
    ("unicode", unicode_round_trip),
    ("evolution", evolution),
    ("inference", inference),
    ("versions", versions),
    ("branches", branches_and_merges),
    ("merge-knowledge", merge_knowledge),
    ("closed", closed_sessions),
    ("fork", fork_sandbox),
    ("provenance", provenance_and_validation),
    ("explore", exploring),
    ("exports", exports),
    ("gallery", gallery),
    ("llm", llm_tools),
    ("bad-session-ids", session_tool_bad_ids),
    ("big", big_inputs),
    ("mcp-end", mcp_surface_end),
    ("llm-scripted", llm_scripted, "fake-llm"),
    ("storage", storage, "own-store"),
    ("conflict-queue", conflict_queue, "own-store"),
    ("sweepers-and-resolutions", sweepers_and_resolutions),
    ("arbitration-and-gossip", arbitration_and_gossip),
    ("pipeline", pipeline),
    ("processes", processes, "own-store"),
    ("enrichment", enrichment, "own-store"),
]
