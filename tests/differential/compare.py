"""Normalisation and key-by-key comparison of one step's results (the reference's against ours).

The rule: every key the reference returns is present in ours with the same JSON type and, after
normalisation, the same value; extra keys in ours are allowed. Lists are compared element by
element (same length), or as multisets where a step says their order carries no meaning.

Normalised before comparing:
- strings that hold JSON (the canonical text, subgraphs, exports) are parsed and compared as
  JSON, wrapped as {"$json": value} on both sides so a string-versus-object difference still shows;
- ISO-8601 timestamps become "<timestamp>";
- values under keys that name hashes, durations or the writer's version become placeholders, and
  so do pipeline run ids (a hash over the session's id);
- generated ids (UUIDs) are paired: the first time a reference id meets one of ours at the same
  place they are bound to each other, and every later meeting must respect that pairing (both
  servers mint their own ids, so only the pattern of which id is which is comparable).

Messages: a `message` key must be present with the same type, but its text is not compared
(messages are prose, in each server's own words). Error results are therefore compared by their
`error` code; any other key of an error result is compared like any other key.
"""

import json
import re

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
UUID_ANYWHERE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SHORT_ID_RE = re.compile(r"\b[0-9a-f]{8}(…|\.\.\.)")
TIMESTAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$")
HASH_KEYS = re.compile(r"(hash|checksum|digest|fingerprint|signature|etag)", re.I)
DURATION_KEYS = re.compile(r"(_ms$|_secs?$|_seconds$|duration|elapsed|latency|uptime)", re.I)
LIBRARY_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
VERSION_KEYS = {"cks_core_version", "server_version", "cks_mcp_version"}
# A pipeline run's id is a SHA-256 over its session's id, which each server mints for itself.
RUN_ID_RE = re.compile(r"^[0-9a-f]{64}$")


def parse_embedded(value):
    """Parses strings that hold a JSON object or array; everything else is returned unchanged."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[") and text[-1:] in ("}", "]"):
            try:
                return {"$json": normalise(json.loads(text))}
            except ValueError:
                return value
        return value
    return value


def normalise(value, key=None):
    """Replaces generated values by placeholders and parses embedded JSON, recursively."""
    if isinstance(value, dict):
        return {k: normalise(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v, key) for v in value]
    if key is not None and isinstance(key, str):
        if HASH_KEYS.search(key) and isinstance(value, str):
            return "<hash>"
        if DURATION_KEYS.search(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return "<duration>"
        if key in VERSION_KEYS and isinstance(value, str):
            return "<version>"
        if key == "run_id" and isinstance(value, str) and RUN_ID_RE.match(value):
            return "<run id>"
        if key == "version" and isinstance(value, str) and LIBRARY_VERSION_RE.match(value):
            # A three-part version is the writing library's (explain's summary); the format's
            # `version` ("1.0") has two parts and is compared.
            return "<version>"
    if isinstance(value, str):
        if TIMESTAMP_RE.match(value):
            return "<timestamp>"
        # An abbreviated id (its first eight hex digits and an ellipsis) cannot be paired.
        value = SHORT_ID_RE.sub("<id…>", value)
        return parse_embedded(value)
    return value


def json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class IdPairing:
    """The bijection between the reference's generated ids and ours, built as they are met."""

    def __init__(self):
        self.ours_of = {}
        self.reference_of = {}

    def bind(self, reference_id, our_id):
        self.ours_of[reference_id] = our_id
        self.reference_of[our_id] = reference_id

    def stable_name(self, id_, ours):
        """The same name for both ids of a pair (their reference id), "<id>" for an unpaired one."""
        if ours:
            return self.reference_of.get(id_, "<id>")
        return id_ if id_ in self.ours_of else "<id>"

    def same(self, reference_id, our_id):
        known_ours = self.ours_of.get(reference_id)
        known_reference = self.reference_of.get(our_id)
        if known_ours is None and known_reference is None:
            self.bind(reference_id, our_id)
            return True
        return known_ours == our_id and known_reference == reference_id



def _pair_id_keys(reference, ours, pairing):
    """Maps the reference's id-named keys (a version vector's node ids) to ours: known pairs first,
    then the rest in order of appearance."""
    ref_ids = [k for k in reference if UUID_RE.match(k)]
    if not ref_ids:
        return {}
    our_ids = [k for k in ours if UUID_RE.match(k)]
    mapping = {}
    for key in ref_ids:
        known = pairing.ours_of.get(key)
        if known in ours:
            mapping[key] = known
    free = [k for k in our_ids if k not in mapping.values() and k not in pairing.reference_of]
    for key in ref_ids:
        if key not in mapping and free:
            mapping[key] = free.pop(0)
            pairing.bind(key, mapping[key])
    return mapping


def _path_join(path, key):
    if isinstance(key, int):
        return f"{path}[{key}]"
    if re.match(r"^[A-Za-z_$][A-Za-z0-9_$]*$", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _sort_key(value, pairing, ours):
    """A list element's sort key for order-insensitive comparison: paired ids are named alike."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return UUID_ANYWHERE.sub(lambda m: pairing.stable_name(m.group(0), ours), text)


def path_pattern(pattern):
    """A compiled regex for a JSON path pattern in which `[*]` is any index, `*` any key and `**`
    anything (so "**objects" is any list named objects, at any depth)."""
    parts = re.split(r"(\*\*|\[\*\]|\*)", pattern)
    regex = "".join(".*" if p == "**" else r"\[\d+\]" if p == "[*]" else r"[^.\[]*" if p == "*"
                    else re.escape(p) for p in parts)
    return re.compile(regex)


def _matches(path, patterns):
    return any(path_pattern(p).fullmatch(path) for p in patterns)


def compare_shape(reference, ours, path=""):
    """Yields the differences of keys and JSON types only (list elements against the first of ours)."""
    if isinstance(reference, dict) and isinstance(ours, dict):
        for key, ref_value in reference.items():
            sub = _path_join(path, key)
            if UUID_RE.match(key):
                continue
            if key not in ours:
                yield sub, "missing", ref_value, None
            else:
                yield from compare_shape(ref_value, ours[key], sub)
        return
    if isinstance(reference, list) and isinstance(ours, list):
        if reference and ours:
            yield from compare_shape(reference[0], ours[0], _path_join(path, 0))
        return
    if json_type(reference) != json_type(ours) and reference is not None:
        yield path, "type", reference, ours


def compare(reference, ours, pairing, unordered=(), path=""):
    """Yields (path, kind, reference value, our value) for every difference."""
    if isinstance(reference, dict) and isinstance(ours, dict):
        our_key_of = _pair_id_keys(reference, ours, pairing)
        for key, ref_value in reference.items():
            sub = _path_join(path, key)
            our_key = our_key_of.get(key, key)
            if our_key not in ours:
                yield sub, "missing", ref_value, None
                continue
            if key == "message":
                # Messages are prose in each server's own words: present, a string, not compared.
                if json_type(ref_value) != json_type(ours[key]):
                    yield sub, "type", ref_value, ours[key]
                continue
            yield from compare(ref_value, ours[our_key], pairing, unordered, sub)
        return
    if isinstance(reference, list) and isinstance(ours, list):
        if len(reference) != len(ours):
            yield path, "length", reference, ours
            return
        if _matches(path, unordered):
            reference = sorted(reference, key=lambda v: _sort_key(v, pairing, False))
            ours = sorted(ours, key=lambda v: _sort_key(v, pairing, True))
        for index, (ref_item, our_item) in enumerate(zip(reference, ours)):
            yield from compare(ref_item, our_item, pairing, unordered, _path_join(path, index))
        return
    ref_type, our_type = json_type(reference), json_type(ours)
    if ref_type != our_type:
        yield path, "type", reference, ours
        return
    if ref_type == "string" and UUID_RE.match(reference) and UUID_RE.match(ours):
        if not pairing.same(reference, ours):
            # Say what each id was paired with before, which is what makes them differ.
            yield (path, "id", f"{reference} (earlier paired with ours {pairing.ours_of.get(reference)})",
                   f"{ours} (earlier paired with the reference's {pairing.reference_of.get(ours)})")
        return
    if ref_type == "string" and UUID_ANYWHERE.search(reference) and UUID_ANYWHERE.search(ours):
        ref_ids, our_ids = UUID_ANYWHERE.findall(reference), UUID_ANYWHERE.findall(ours)
        if len(ref_ids) != len(our_ids) or not all(pairing.same(r, o) for r, o in zip(ref_ids, our_ids)) \
                or UUID_ANYWHERE.sub("<id>", reference) != UUID_ANYWHERE.sub("<id>", ours):
            yield path, "value", reference, ours
        return
    if ref_type == "number":
        if reference != ours and abs(reference - ours) > 1e-9 * max(1.0, abs(reference), abs(ours)):
            yield path, "value", reference, ours
        return
    if reference != ours:
        yield path, "value", reference, ours
