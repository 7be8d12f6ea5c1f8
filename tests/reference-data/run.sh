#!/usr/bin/env bash
# Moving from the reference server, checked against the reference itself (PyPI cks-mcp 1.77.0):
# builds a large reference database (50+ sessions, 500+ versions) with make-fixtures.py, checks
# that import-reference agrees with the reference's own answers on it (and on the committed small
# fixture), and that export_session bundles travel both ways (bundles.py).
#
# The reference lives in target/reference-venv (REFERENCE_VENV overrides), shared with the other
# tests that run it; scripts/reference-venv installs it there when it is absent.
#
# Environment:
#   REFERENCE_VENV   virtualenv with cks-mcp 1.77.0 [target/reference-venv]
#   PYTHON_VERSION   pyenv version for a new virtualenv (see scripts/reference-venv)
#   LARGE_SESSIONS   root sessions of the large database [55]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
venv=${REFERENCE_VENV:-$root/target/reference-venv}

"$root/scripts/reference-venv" "$venv"

large="$root/target/reference-data/large"
"$venv/bin/python" tests/reference-data/make-fixtures.py large "$large" --sessions "${LARGE_SESSIONS:-55}"
CKS_REFERENCE_FIXTURES="$large" cargo test --locked -p cks-mcp --test import_reference
cargo build --locked -p cks-mcp
"$venv/bin/python" tests/reference-data/bundles.py "$root/target/debug/cks-mcp"
