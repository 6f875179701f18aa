# Sourced by scripts/demo, scripts/test and scripts/preview, run as `bash scripts/_env.sh EXTRA` by CI: make .venv
# hold the versions in uv.lock for the project with EXTRA ("" = the CLI alone; dev = every extra and the test
# tools), once per change of uv.lock or pyproject.toml (a stamp in .venv), printing each step and its time on
# stderr. The project itself is installed editable (the checkout's code, the `placement` command).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_uv.sh
extra=${1:-}
[ -f uv.lock ] || { echo "setup: uv.lock is missing; run scripts/lock to write it" >&2; exit 2; }
key=$(cat uv.lock pyproject.toml | sha256sum | cut -c1-16)
stamp=".venv/.installed-${extra:-base}-$key"
# The dev extra includes every other one: after ./scripts/test, the demo and the preview need no install.
[ -f ".venv/.installed-dev-$key" ] && stamp=".venv/.installed-dev-$key"
if [ ! -f "$stamp" ]; then
  gpufleet_python
  gpufleet_uv
  export UV_PROJECT_ENVIRONMENT="$PWD/.venv"
  if [ ! -x .venv/bin/python ]; then
    setup_note ".venv with Python $("$PY" -c 'import platform; print(platform.python_version())') ($PY)"
    "$UV" venv --quiet --clear --python "$PY" .venv >&2
    setup_done ""
  fi
  log=.venv/setup.log
  args=(sync --locked)
  if [ -n "$extra" ]; then args+=(--extra "$extra"); fi
  # dev makes .venv exactly the lock (removing anything else); a smaller extra keeps what is already there.
  if [ "$extra" != dev ]; then args+=(--inexact); fi
  setup_note "the versions in uv.lock (${extra:-no extra}) into .venv: uv ${args[*]}"
  if ! "$UV" "${args[@]}" >"$log" 2>&1; then
    echo >&2
    if grep -q "needs to be updated" "$log"; then
      echo "setup: uv.lock does not match pyproject.toml; run scripts/lock (keeps every other pin) and commit uv.lock" >&2
      exit 2
    fi
    tail -n 15 "$log" >&2
    echo "setup: installing from uv.lock failed (above; the full log is $log); fix that and re-run" >&2
    exit 1
  fi
  # uv's own summary: "Prepared 128 packages in 31.20s" (downloaded, or built, into uv's cache) and "Installed 131
  # packages in 2.10s" (linked from that cache into .venv); the packages with their versions are in the log.
  summary=$(sed -n -E -e 's/^Prepared ([0-9]+) packages? in (.*)/fetched \1 in \2/p' \
                      -e 's/^Uninstalled ([0-9]+) packages? in (.*)/removed \1 in \2/p' \
                      -e 's/^Installed ([0-9]+) packages? in (.*)/installed \1 in \2/p' "$log" | paste -sd ';' - |
            sed 's/;/, /g')
  setup_done "${summary:-nothing to change}; the list: $log"
  if [ "$extra" = dev ]; then rm -f .venv/.installed-*
  else find .venv -maxdepth 1 -name '.installed-*' ! -name "*-$key" -delete; fi
  touch "$stamp"
fi
