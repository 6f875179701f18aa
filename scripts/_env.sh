# Sourced by scripts/demo and scripts/test: create .venv and install the project with the given extra,
# once per change of pyproject.toml. Needs only Python 3.11+ and the package registry.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "gpufleet needs Python 3.11 or newer (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extra=${1:-}
hash=$(sha256sum pyproject.toml | cut -c1-16)
stamp=".venv/.installed-${extra:-base}-$hash"
# The dev extra includes every other one: after ./scripts/test, the demo and the preview need no install.
[ -f ".venv/.installed-dev-$hash" ] && stamp=".venv/.installed-dev-$hash"
if [ ! -f "$stamp" ]; then
  echo "setting up .venv (${extra:-base}) ..." >&2
  log=.venv/install.log
  if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip &&
         .venv/bin/python -m pip install --disable-pip-version-check -e ".${extra:+[$extra]}"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup failed; the full pip log is in $log" >&2
    exit 1
  fi
  touch "$stamp"
fi
