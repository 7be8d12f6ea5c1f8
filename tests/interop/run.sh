#!/usr/bin/env bash
# Interoperability tests with clients we did not write: the official MCP Python SDK (client.py)
# and TypeScript SDKs v1 and v2 (ts/client.mjs), over stdio and streamable HTTP, in both protocol
# revisions (2025-11-25 with its handshake, stateless 2026-07-28), approvals by elicitation
# included; MCP Tasks through the official Tasks extension client (ts/tasks.mjs); and MCP
# Inspector's strict check of every published schema, and its CLI calling a tool, a prompt and the
# resources.
# Creates (once) a virtual environment under target/ with `mcp` from PyPI, installs the TypeScript
# SDKs from npm (Debian's Node.js when there is none), and builds the release binary.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/target/interop-venv"
python="${PYTHON:-python3}"
sdk=2.3.0
if [ ! -x "$venv/bin/python" ] ||
  ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$sdk')" 2>/dev/null; then
  "$python" -m venv --clear "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$sdk"
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt-get install -y --no-install-recommends nodejs npm >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends nodejs npm >/dev/null; }
fi
if [ ! -d "$root/tests/interop/ts/node_modules/@modelcontextprotocol/inspector" ]; then
  (cd "$root/tests/interop/ts" && npm ci --no-audit --no-fund --silent)
fi
cargo build --release --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
"$venv/bin/python" "$root/tests/interop/client.py" "$root/target/release/cks-mcp"
node "$root/tests/interop/ts/client.mjs" "$root/target/release/cks-mcp"
node "$root/tests/interop/ts/tasks.mjs" "$root/target/release/cks-mcp"
# Every published schema passes MCP Inspector's strict portability check without a warning, in
# the default list and in the whole one.
report=$(mktemp)
for tools in core all; do
  if ! "$root/tests/interop/ts/node_modules/.bin/mcp-inspector" --cli "$root/target/release/cks-mcp" \
    -e CKS_MCP_DB_PATH=:memory: -e CKS_MCP_TOOLS=$tools --method tools/list --strict >/dev/null 2>"$report" ||
    grep -q "Warning" "$report"; then
    grep -v '^{' "$report"
    echo "interop: MCP Inspector --strict found schema problems (CKS_MCP_TOOLS=$tools)" >&2
    exit 1
  fi
done
rm -f "$report"
echo "inspector --strict: ok"
# Inspector's CLI as a user drives it: a tool call, a prompt and the resources (each call starts a
# server of its own on an in-memory store).
inspector() {
  "$root/tests/interop/ts/node_modules/.bin/mcp-inspector" --cli "$root/target/release/cks-mcp" \
    -e CKS_MCP_DB_PATH=:memory: "$@" 2>/dev/null
}
inspector --method tools/call --tool-name validate_knowledge \
  --tool-arg 'json_data={"objects":[{"identity":{"id":"earth","type":"Planet","name":"Earth"}}]}' |
  python3 -c 'import json, sys; r = json.load(sys.stdin); assert r["isError"] is False and r["structuredContent"]["valid"] is True, r'
inspector --method prompts/get --prompt-name create_knowledge_graph --prompt-args topic=volcanoes |
  python3 -c 'import json, sys; r = json.load(sys.stdin); assert "volcanoes" in r["messages"][0]["content"]["text"], r'
inspector --method resources/list |
  python3 -c 'import json, sys; r = json.load(sys.stdin); assert "cks://sessions" in [x["uri"] for x in r["resources"]], r'
echo "inspector tools, prompts, resources: ok"
