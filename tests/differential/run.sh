#!/usr/bin/env bash
# Differential test: our server against the Python reference (PyPI cks-mcp[gossip]==1.77.0),
# side by side over stdio, every difference not in the compatibility ledger failing the run.
# Creates (once) the reference's virtual environment under target/ with scripts/reference-venv,
# builds our binary, runs the tests of the comparison itself (test_compare.py), then driver.py;
# arguments are passed on to it (--only TOOL, --report FILE, --quiet).
#
# Our binary is the release build by default: the test suite's interop test has just built it,
# so this costs no second build there. Environment:
#   CKS_DIFF_PROFILE=debug   use (and build) the debug binary instead
#   CKS_DIFF_SERVER=PATH     use this binary as is, building nothing
#   CARGO_TARGET_DIR=DIR     cargo's target directory, where the binary is built and looked for
#   REFERENCE_VENV=DIR       where the reference's virtual environment lives [target/reference-venv]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${REFERENCE_VENV:-$root/target/reference-venv}"
"$root/scripts/reference-venv" "$venv"

# Where cargo puts what it builds (CARGO_TARGET_DIR, when set, as cargo itself reads it).
target="${CARGO_TARGET_DIR:-$root/target}"
if [[ -n "${CKS_DIFF_SERVER:-}" ]]; then
  ours="$CKS_DIFF_SERVER"
elif [[ "${CKS_DIFF_PROFILE:-release}" == debug ]]; then
  cargo build --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
  ours="$target/debug/cks-mcp"
else
  cargo build --release --locked -p cks-mcp --manifest-path "$root/Cargo.toml"
  ours="$target/release/cks-mcp"
fi

export PYTHONDONTWRITEBYTECODE=1
"$venv/bin/python" "$root/tests/differential/test_compare.py"
exec "$venv/bin/python" "$root/tests/differential/driver.py" \
  --reference "$venv/bin/cks-mcp" --ours "$ours" "$@"
