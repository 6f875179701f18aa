# Sourced by scripts/_env.sh, scripts/lock, scripts/upgrade and scripts/check_extras: the pinned uv.
# Defines setup_note/setup_done (progress lines on stderr) and gpufleet_uv, which sets UV to the uv binary of
# version GPUFLEET_UV_VERSION, installing it once per machine with pip into
# ${XDG_CACHE_HOME:-~/.cache}/gpufleet-tools/uv-VERSION (GPUFLEET_UV=/path/to/uv uses that binary instead).
# Needs only Python 3.11+ with pip, and the package registry.
GPUFLEET_UV_VERSION=0.13.9  # CI and the workflows use this one too; scripts/upgrade does not change it
PY=${PYTHON:-python3}
UV=  # set by gpufleet_uv; never one inherited (`uv run` exports UV, maybe of another version)
# uv may use only the interpreter we give it (it would otherwise download one), and the project's .venv.
export UV_PYTHON_DOWNLOADS=never
# Trust the system's certificate store, as pip does, not only uv's bundled roots: behind a proxy that re-signs
# TLS with a corporate root (trusted by the system, as here) uv otherwise fails with "invalid peer certificate".
if [ -z "${UV_SYSTEM_CERTS:-}${UV_NATIVE_TLS:-}${SSL_CERT_FILE:-}" ]; then export UV_SYSTEM_CERTS=1; fi

_setup_t0=
setup_note() {  # "setup: WHAT ... " on stderr, finished by setup_done
  _setup_t0=${EPOCHREALTIME:-$SECONDS}
  printf 'setup: %s ... ' "$1" >&2
}
setup_done() {  # "... DETAIL, N.N s"
  local now=${EPOCHREALTIME:-$SECONDS}
  printf '%s%s s\n' "${1:+$1, }" "$(awk -v a="$_setup_t0" -v b="$now" 'BEGIN { printf "%.1f", b - a }')" >&2
}

gpufleet_python() {  # sets PY to the absolute path of a Python 3.11+, or exits 2 saying how to name one
  if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    local found="no $PY"
    command -v "$PY" >/dev/null 2>&1 && found=$("$PY" --version 2>&1 | head -n 1 || true)
    echo "gpufleet needs Python 3.11 or newer (found: $found); set PYTHON=/path/to/python3.11" >&2
    exit 2
  fi
  PY=$("$PY" -c 'import sys; print(sys.executable)')
}

gpufleet_uv() {
  [ -n "${UV:-}" ] && return 0
  if [ -n "${GPUFLEET_UV:-}" ]; then UV=$GPUFLEET_UV; return 0; fi
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet-tools/uv-$GPUFLEET_UV_VERSION"
  if [ ! -x "$dir/bin/uv" ]; then
    rm -rf "$dir"  # a copy without its binary (removed by hand): install it again
    gpufleet_python
    if ! "$PY" -m pip --version >/dev/null 2>&1; then
      echo "setup: $PY has no pip to install uv $GPUFLEET_UV_VERSION with; install pip (Debian: apt-get install python3-pip) or set GPUFLEET_UV=/path/to/uv" >&2
      exit 2
    fi
    setup_note "uv $GPUFLEET_UV_VERSION into ${dir/#$HOME/~} (pip, once per machine)"
    mkdir -p "$(dirname "$dir")"
    local tmp log
    tmp=$(mktemp -d "$dir.XXXXXX")
    log="$tmp.log"
    # --target: no venv needed, and allowed where the system Python is externally managed (PEP 668).
    if ! "$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-warn-script-location \
         --target "$tmp" "uv==$GPUFLEET_UV_VERSION" >"$log" 2>&1; then
      echo >&2
      grep -v "Location 'file:" "$log" | tail -n 15 >&2
      echo "setup: installing uv $GPUFLEET_UV_VERSION with pip failed (above); check access to PyPI, then re-run" >&2
      rm -rf "$tmp" "$log"
      exit 1
    fi
    # Another checkout may have finished first: keep whichever copy arrived, never a half-written one.
    mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
    rm -f "$log"
    setup_done ""
  fi
  UV="$dir/bin/uv"
}
