#!/usr/bin/env bash
# cks-mcp's OAuth resource server against a real authorization server: oidc-provider (OpenID
# Certified, from npm, on Node.js 22) issues client-credentials JWT access tokens for cks-mcp's
# resource, and interop.mjs drives the release binary's HTTP server with them.
#
# Usage: tests/oauth/run.sh [path to cks-mcp]   (default: the release binary, built first)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/tests/oauth"
if ! command -v npm >/dev/null; then
  apt-get install -y --no-install-recommends nodejs npm >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends nodejs npm >/dev/null; }
fi
if [ ! -d "$here/node_modules/oidc-provider" ] || [ ! -x "$here/node_modules/.bin/node" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --silent)
fi
binary="${1:-}"
if [ -z "$binary" ]; then
  cargo build --release --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
  binary="$root/target/release/cks-mcp"
fi
"$here/node_modules/.bin/node" "$here/interop.mjs" "$binary"
