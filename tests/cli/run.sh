#!/usr/bin/env bash
# Differential test of the `cks` command line: our binary and the Python reference's `cks` (from
# cks-mcp[gossip]==1.77.0's cks-core) on the same files with the same arguments, every difference
# not in tests/cli/ledger.json failing the run (compare.py says what is compared).
#
# Usage: tests/cli/run.sh PATH-TO-OUR-cks [--quiet]
# Environment:
#   REFERENCE_VENV=DIR   where the reference's virtual environment lives [target/reference-venv]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
ours="${1:?usage: tests/cli/run.sh PATH-TO-OUR-cks [--quiet]}"
shift
venv="${REFERENCE_VENV:-$root/target/reference-venv}"
"$root/scripts/reference-venv" "$venv"
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" "$root/tests/cli/compare.py" --reference "$venv/bin/cks" --ours "$ours" "$@"
