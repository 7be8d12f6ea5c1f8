#!/usr/bin/env bash
# Moving from the reference server, checked against the reference itself (PyPI cks-mcp 1.77.0):
# builds a large reference database (50+ sessions, 500+ versions) with make-fixtures.py, checks
# that import-reference agrees with the reference's own answers on it (and on the committed small
# fixture), and that export_session bundles travel both ways (bundles.py).
#
# The reference lives in target/reference-venv (REFERENCE_VENV overrides), shared with the other
# tests that run it; when it is absent it is installed there into a Python >= 3.12 from pyenv.
#
# Environment:
#   REFERENCE_VENV   virtualenv with cks-mcp 1.77.0 [target/reference-venv]
#   PYTHON_VERSION   pyenv version to use (>= 3.12) [the newest 3.12+ installed]
#   LARGE_SESSIONS   root sessions of the large database [55]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
venv=${REFERENCE_VENV:-$root/target/reference-venv}
die() { echo "reference-data: $*" >&2; exit 1; }

if [[ ! -x "$venv/bin/cks-mcp" ]]; then
  echo "reference-data: installing the reference (cks-mcp[gossip]==1.77.0) into $venv" >&2
  pyenv_bin=${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv
  command -v pyenv >/dev/null 2>&1 && pyenv_bin=$(command -v pyenv)
  [[ -x "$pyenv_bin" ]] || die "pyenv not found; install Python >= 3.12 with pyenv, or set REFERENCE_VENV to a virtualenv that has cks-mcp 1.77.0"
  version=${PYTHON_VERSION:-$("$pyenv_bin" versions --bare | grep -E '^3\.(1[2-9]|[2-9][0-9])(\.[0-9]+)?$' | sort -V | tail -n 1 || true)}
  [[ -n "$version" ]] || die "no Python >= 3.12 in pyenv (try 'pyenv install 3.12')"
  rm -rf "$venv"
  PYENV_VERSION=$version "$pyenv_bin" exec python -m venv "$venv" || die "could not create a virtualenv with Python $version"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'cks-mcp[gossip]==1.77.0' \
    || die "pip could not install cks-mcp[gossip]==1.77.0 (no network or no index?)"
fi
ref_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("cks-mcp"))')
[[ "$ref_version" == 1.77.0 ]] || die "$venv has cks-mcp $ref_version, not 1.77.0"

large="$root/target/reference-data/large"
"$venv/bin/python" tests/reference-data/make-fixtures.py large "$large" --sessions "${LARGE_SESSIONS:-55}"
CKS_REFERENCE_FIXTURES="$large" cargo test --locked -p cks-mcp --test import_reference
cargo build --locked -p cks-mcp
"$venv/bin/python" tests/reference-data/bundles.py "$root/target/debug/cks-mcp"
