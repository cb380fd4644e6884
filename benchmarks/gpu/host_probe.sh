#!/usr/bin/env bash
# Host-path probe (issue 15, item 2) on one H200: benchmarks/gpu/host_probe.py into $OUT/host-probe/
# (runs.csv.gz, bursts.csv.gz, copy.csv.gz, meta.json, probe.log). Run from the repo root:
#   OUT=<folder> bash benchmarks/gpu/run_all.sh host_probe
# PROBE_BUDGET_S (default 200) bounds the sweep; the script itself is killed at that + 30 s.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
D="$OUT/host-probe"
mkdir -p "$D"
B=${PROBE_BUDGET_S:-200}
timeout $(( B + 30 )) "$PY" benchmarks/gpu/host_probe.py --out "$D" --budget-s "$B" ${PROBE_EXTRA:-} 2>&1 | tee "$D/probe.log"
exit "${PIPESTATUS[0]}"
