#!/usr/bin/env bash
# Real MCP clients through a load balancer: two release-binary replicas on one throw-away
# PostgreSQL database behind Debian's nginx (round robin, nginx.conf), and the TypeScript SDKs v1
# and v2 (ts/replicas.mjs) and the Python SDK (replicas.py), each running a workflow with every
# request going to the next replica. Fails if any step fails, if a request was refused (404: a
# replica did not know the session), or if either replica went unused. The model is the scripted
# Anthropic server in replicas-provider.mjs.
#
# Needs what tests/interop/run.sh installs (the SDKs); installs PostgreSQL and nginx when missing.
#
# `--bench [calls]` measures instead: sequential calls (examples/http_sequential.rs) in a 2025-11-25
# session and as stateless 2026-07-28 requests, to one replica and through nginx to both in turn,
# in rounds (BENCH_ROUNDS, 6), and prints the median ratio of nginx's rate to one replica's.
set -euo pipefail
bench=
if [ "${1:-}" = --bench ]; then bench=${2:-2000}; fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/tests/interop"
"$root/scripts/install-postgres"
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  echo "replicas: installing Debian's nginx" >&2
  apt-get install -y --no-install-recommends nginx-light >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends nginx-light >/dev/null; }
fi
cargo build --release --locked -q -p cks-mcp --manifest-path "$root/Cargo.toml"
cargo build --locked -q -p cks-testkit --bin with-postgres --manifest-path "$root/Cargo.toml"
if [ -n "$bench" ]; then
  cargo build --release --locked -q -p cks-mcp --example http_sequential --manifest-path "$root/Cargo.toml"
fi
export ROOT="$root" HERE="$here" BENCH="$bench"
exec "$root/target/debug/with-postgres" bash -c '
set -euo pipefail
free_port() { python3 -c "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])"; }
dir=$(mktemp -d)
chmod 755 "$dir"
trap "[ -f $dir/nginx.pid ] && kill \$(cat $dir/nginx.pid) 2>/dev/null; kill \$(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf $dir" EXIT
url=${CKS_TEST_PG_URL%/*}/cks_replicas
psql -X -q -d "$CKS_TEST_PG_URL" -c "CREATE DATABASE cks_replicas"
model=$(free_port); status=$(free_port); proxy=$(free_port)
node "$HERE/replicas-provider.mjs" "http://127.0.0.1:$model" "$status" &
replicas=()
for name in a b; do
  port=$(free_port)
  mkdir -p "$dir/$name"
  CKS_MCP_DATA_DIR="$dir/$name" CKS_MCP_DB_PATH="$url" CKS_MCP_LOG=error \
    CKS_LLM_PROVIDER=anthropic ANTHROPIC_API_KEY=sk-ant-replicas ANTHROPIC_BASE_URL="http://127.0.0.1:$model" \
    CKS_LLM_MAX_RETRIES=0 "$ROOT/target/release/cks-mcp" --http "127.0.0.1:$port" --no-stdio 2>>"$dir/$name.log" &
  replicas+=("127.0.0.1:$port")
done
for replica in "${replicas[@]}" "127.0.0.1:$status"; do
  for _ in $(seq 300); do curl -fs "http://$replica/health" >/dev/null 2>&1 || curl -fs "http://$replica/" >/dev/null 2>&1 && break; sleep 0.1; done
done
mkdir -p "$dir/body" "$dir/proxy"
{ [ "$(id -u)" = 0 ] && echo "user root;"
  sed -e "s|REPLICA_A|${replicas[0]}|; s|REPLICA_B|${replicas[1]}|; s|PORT|$proxy|; s|DIR|$dir|g" "$HERE/nginx.conf"; } >"$dir/nginx.conf"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
"$nginx_bin" -p "$dir" -c "$dir/nginx.conf"
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$proxy/health" >/dev/null && break; sleep 0.1; done

if [ -n "$BENCH" ]; then
  # Each run alternates its calls between one replica and nginx (http_sequential --versus), so
  # both meet the same moments of a machine whose other load comes and goes; which of the two
  # goes first alternates by round. The summary is the median ratio of the rounds.
  for round in $(seq "${BENCH_ROUNDS:-6}"); do
    for mode in session --stateless; do
      targets=("${replicas[0]}" "127.0.0.1:$proxy")
      if [ $((round % 2)) = 0 ]; then targets=("127.0.0.1:$proxy" "${replicas[0]}"); fi
      printf "bench: round %s, %s\n" "$round" "${mode#--}"
      "$ROOT/target/release/examples/http_sequential" "$BENCH" $([ "$mode" = session ] || echo "$mode") \
        --url "http://${targets[0]}/mcp" --versus "http://${targets[1]}/mcp"
    done
  done | tee "$dir/bench.log"
  python3 - "$dir/bench.log" "${replicas[0]}" <<PY
import collections, re, statistics, sys
rates = collections.defaultdict(dict)
def format_all(ratios):
    return ", ".join(format(x, ".0%") for x in ratios)
key = None
for line in open(sys.argv[1]):
    m = re.match(r"bench: round (\d+), (\w+)", line)
    if m:
        key = (m[2], int(m[1]))
    m = re.search(r" to http://([^/]+)/mcp: (\d+) calls/s", line)
    if m and key:
        rates[key]["one replica" if m[1] == sys.argv[2] else "nginx"] = int(m[2])
for mode in ("session", "stateless"):
    ratios = sorted(r["nginx"] / r["one replica"] for (m, _), r in rates.items() if m == mode and len(r) == 2)
    print(f"bench: {mode}: nginx / one replica, median of {len(ratios)} rounds {statistics.median(ratios):.1%} "
          f"(rounds: {format_all(ratios)})")
PY
  exit 0
fi
node "$HERE/ts/replicas.mjs" "http://127.0.0.1:$proxy/mcp" "http://127.0.0.1:$status/calls" ||
  { tail -n 40 "$dir"/*.log; exit 1; }
"$ROOT/target/interop-venv/bin/python" "$HERE/replicas.py" "http://127.0.0.1:$proxy/mcp" "http://127.0.0.1:$status/calls" ||
  { tail -n 40 "$dir"/*.log; exit 1; }

# Stopped gracefully, nginx writes out what its log still holds.
kill -QUIT "$(cat "$dir/nginx.pid")"
for _ in $(seq 100); do [ -f "$dir/nginx.pid" ] || break; sleep 0.1; done
python3 - "$dir/upstream.log" "${replicas[@]}" <<PY
import collections, sys
lines = [line.split() for line in open(sys.argv[1]) if line.strip()]
posts = [(addr, status) for method, addr, status in lines if method == "POST"]
refused = [line for line in lines if line[2] == "404" or line[2].startswith("5")]
assert not refused, f"refused requests: {refused}"
served = collections.Counter(addr for addr, _ in posts)
for replica in sys.argv[2:]:
    assert served[replica] >= len(posts) * 0.3, f"replica {replica} served {served[replica]} of {len(posts)} requests"
turns = sum(1 for (a, _), (b, _) in zip(posts, posts[1:]) if a != b)
print(f"replicas: {len(posts)} requests, {dict(served)}, the replica changed {turns} times")
PY
'
