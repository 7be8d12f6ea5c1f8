#!/usr/bin/env bash
# cks-mcp's OAuth resource server against a real authorization server: oidc-provider (OpenID
# Certified, from npm, on Node.js 22) issues JWT access tokens for cks-mcp's resource.
# interop.mjs drives the release binary's HTTP server with machine clients' tokens (client
# credentials); page.mjs signs two users in to the chat page in Debian's Chromium (authorization
# code with PKCE); host.mjs signs users in as MCP hosts do, with the official MCP SDK's OAuth client
# (discovery from the 401, Dynamic Client Registration and Client ID Metadata Documents,
# authorization code with PKCE and `resource`, refresh with rotation). builtin.mjs does what host.mjs
# does against cks-mcp's own authorization server (CKS_MCP_AUTH=builtin) and its local users: its
# sign-in page in Chromium, Dynamic Client Registration and Client ID Metadata Documents, refresh
# tokens whose reuse revokes their family.
#
# Usage: tests/oauth/run.sh [path to cks-mcp]   (default: the release binary, built first)
# Environment: CHROMIUM (default /usr/bin/chromium), SCREENSHOTS (default target/oauth-page).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/tests/oauth"
install() { apt-get install -y --no-install-recommends "$@" >/dev/null || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "$@" >/dev/null; }; }
command -v npm >/dev/null || install nodejs npm
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] || install chromium
# builtin.mjs makes a test certificate authority for the https metadata document.
command -v openssl >/dev/null || install openssl
if [ ! -d "$here/node_modules/oidc-provider" ] || [ ! -d "$here/node_modules/@modelcontextprotocol/sdk" ] \
  || [ ! -x "$here/node_modules/.bin/node" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --silent)
fi
# The page check drives Chromium with the page check's harness (playwright-core).
if [ ! -d "$root/tests/page/node_modules/playwright-core" ]; then
  (cd "$root/tests/page" && npm ci --no-audit --no-fund --silent)
fi
binary="${1:-}"
if [ -z "$binary" ]; then
  cargo build --release --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
  binary="$root/target/release/cks-mcp"
fi
"$here/node_modules/.bin/node" "$here/interop.mjs" "$binary"
export SCREENSHOTS="${SCREENSHOTS:-$root/target/oauth-page}"
mkdir -p "$SCREENSHOTS"
rm -f "$SCREENSHOTS"/*.png
"$here/node_modules/.bin/node" "$here/page.mjs" "$binary"
"$here/node_modules/.bin/node" "$here/host.mjs" "$binary"
"$here/node_modules/.bin/node" "$here/builtin.mjs" "$binary"
