#!/usr/bin/env bash
# Interoperability test with a client we did not write: the official MCP Python SDK.
# Creates (once) a virtual environment under target/, installs `mcp` from PyPI, builds the release
# binary, and runs client.py against it over stdio and streamable HTTP.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/target/interop-venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import mcp" 2>/dev/null; then
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp>=1.20,<2"
fi
cargo build --release --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
"$venv/bin/python" "$root/tests/interop/client.py" "$root/target/release/cks-mcp"
