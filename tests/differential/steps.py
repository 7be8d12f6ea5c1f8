"""The vocabulary of scenarios: a step is one call made on both servers with the same arguments.

Values that each server generates for itself (session ids, version ids, texts it serialized) are
saved under a name by one step (`save={"sid": "session_id"}`) and used by later ones as `V("sid")`;
each server gets its own value. `Json(obj)` sends `obj` as a JSON string, after resolving any
`V` inside it. `V("scratch")` is a directory, the same for both servers, where steps may have them
write files (give each side's file a name holding one of its own saved ids).
"""

import json


class V:
    """A value saved by an earlier step, resolved separately for each server."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"V({self.name!r})"


class Json:
    """Sent as the JSON text of `value` (with every V inside resolved first)."""

    def __init__(self, value):
        self.value = value


class Raw:
    """Sent as the exact string given (for malformed JSON and other deliberately broken text)."""

    def __init__(self, text):
        self.text = text


class Fmt:
    """A string built from saved values (for resource URIs): Fmt("cks://sessions/{}", "sid")."""

    def __init__(self, template, *names):
        self.template = template
        self.names = names


class Step:
    """One request made on both servers.

    method: "tools/call" (then `tool` and `args`) or another MCP method with `params`.
    save: name -> path into the result (dotted, integers index lists; "$text" is the whole result).
    unordered: JSON paths (with [*] for any index) whose lists are compared as multisets.
    compare: False for steps that only prepare state (their results are still recorded).
    facts: (path, regex) pairs: in prose whose wording is our own (prompt texts), what the regex
        finds at that path must be the same on both sides (e.g. the depth a prompt asks for).
    shape_only: compare keys and JSON types only, not values or list lengths (for counters that
        every earlier difference shifts, such as get_metrics).
    """

    def __init__(self, tool=None, args=None, *, method="tools/call", params=None, save=None,
                 unordered=(), compare=True, facts=(), shape_only=False, label=""):
        self.tool = tool
        self.args = args if args is not None else {}
        self.method = method
        self.params = params
        self.save = save or {}
        self.unordered = tuple(unordered)
        self.compare = compare
        self.facts = tuple(facts)
        self.shape_only = shape_only
        self.label = label

    @property
    def subject(self):
        """What the step is counted under: the tool name, or the MCP method."""
        return self.tool or self.method


def call(tool, args=None, **kw):
    return Step(tool, args, **kw)


def rpc(method, params=None, **kw):
    return Step(None, None, method=method, params=params, **kw)


def resolve(value, saved):
    """`value` with every V, Json and Raw replaced by what this server should be sent."""
    if isinstance(value, V):
        return saved.get(value.name)
    if isinstance(value, Json):
        return json.dumps(resolve(value.value, saved), ensure_ascii=False)
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Fmt):
        return value.template.format(*(saved.get(name) for name in value.names))
    if isinstance(value, dict):
        return {k: resolve(v, saved) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, saved) for v in value]
    return value


def extract(result, path):
    """The value at a dotted path of a result, or None when the path is absent."""
    if path == "$text":
        return result
    current = result
    for part in path.split("."):
        if isinstance(current, str):
            try:
                current = json.loads(current)
            except ValueError:
                return None
        if isinstance(current, list) and part.lstrip("-").isdigit():
            index = int(part)
            current = current[index] if -len(current) <= index < len(current) else None
        elif isinstance(current, dict):
            current = current.get(part)
        else:
            return None
    return current
