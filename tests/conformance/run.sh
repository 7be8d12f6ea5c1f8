#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, on Node.js 22 from npm:
# the suite needs it) against the release binary's HTTP server, once for each revision the suite
# covers. Every server scenario runs; those that need the suite's own fixtures are listed, with
# why, in out-of-scope.yml, and any other that fails fails this script.
#
# Usage: tests/conformance/run.sh [path to cks-mcp]   (default: the release binary, built first)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/tests/conformance"
if ! command -v npm >/dev/null; then
  apt-get install -y --no-install-recommends nodejs npm >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends nodejs npm >/dev/null; }
fi
if [ ! -x "$here/node_modules/.bin/conformance" ] || [ ! -x "$here/node_modules/.bin/node" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --silent)
fi
binary="${1:-}"
if [ -z "$binary" ]; then
  cargo build --release --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
  binary="$root/target/release/cks-mcp"
fi

data=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
CKS_MCP_DATA_DIR="$data" "$binary" --http "127.0.0.1:$port" --no-stdio 2>"$data/server.log" &
server=$!
# The server dies of the SIGTERM (143): its status is not this script's.
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.1
done

for revision in 2025-06-18 2025-11-25; do
  echo "conformance: revision $revision"
  PATH="$here/node_modules/.bin:$PATH" conformance server --url "http://127.0.0.1:$port/mcp" \
    --spec-version "$revision" --expected-failures "$here/out-of-scope.yml" >"$data/$revision.txt" 2>&1 ||
    { cat "$data/$revision.txt"; exit 1; }
  sed -n '/=== SUMMARY ===/,$p' "$data/$revision.txt"
done
