#!/usr/bin/env bash
# Test set-up (scripts/test, .ci/run): the Prometheus server `placement calibrate` is tested against
# (tests/placement/prometheus/test_calibrate_prometheus.py), from the system's packages (Debian: `prometheus`, with promtool).
# Idempotent: nothing happens when `prometheus` is on PATH. Where it cannot be installed (no apt-get, not root,
# no package index) it says so and the tests that need it skip with that reason.
set -uo pipefail
command -v prometheus >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: prometheus is not installed and there is no apt-get; install the prometheus package to run the calibrate tests" >&2
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    echo "setup: prometheus is not installed and installing it needs root; run: sudo apt-get install -y prometheus" >&2
    exit 0
  fi
fi
start=$(date +%s)
echo -n "setup: prometheus from the system's packages (apt-get install -y prometheus) ..." >&2
export DEBIAN_FRONTEND=noninteractive
if $sudo apt-get install -y --no-install-recommends prometheus >/tmp/gpufleet-prometheus-apt.log 2>&1 || {
     $sudo apt-get update >>/tmp/gpufleet-prometheus-apt.log 2>&1 &&
     $sudo apt-get install -y --no-install-recommends prometheus >>/tmp/gpufleet-prometheus-apt.log 2>&1; }; then
  echo " $(( $(date +%s) - start )) s" >&2
else
  echo " failed (log: /tmp/gpufleet-prometheus-apt.log); the calibrate tests will skip" >&2
fi
exit 0
