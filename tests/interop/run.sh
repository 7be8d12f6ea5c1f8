#!/usr/bin/env bash
# Interoperability tests with clients we did not write: the official MCP Python SDK (client.py)
# and TypeScript SDKs v1 and v2 (ts/client.mjs), over stdio and streamable HTTP, in both protocol
# revisions (2025-11-25 with its handshake, stateless 2026-07-28).
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
if [ ! -d "$root/tests/interop/ts/node_modules/@modelcontextprotocol/client" ]; then
  (cd "$root/tests/interop/ts" && npm ci --no-audit --no-fund --silent)
fi
cargo build --release --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
"$venv/bin/python" "$root/tests/interop/client.py" "$root/target/release/cks-mcp"
node "$root/tests/interop/ts/client.mjs" "$root/target/release/cks-mcp"
