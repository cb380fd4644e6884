#!/usr/bin/env bash
# session 12 (skew17): one device call: the pre-registered lockstep finite runs with a same-process skew probe
# (benchmarks/gpu/lockstep_drained.py --probe: per target, one 2 KiB run per K of the grid before the grid) three
# times in three separate processes (data/calibration-extra/skew17-preregistration.md). Results: $OUT/probe.tgz.
source "$(dirname "$0")/common.sh"
start_run probe 240
sha=${XSTAGE_GIT_COMMIT:0:7}
gpu_state "$D/gpu-start.txt"
for r in 1 2 3; do
  step "repeat $r"
  timeout $(( $(left) - 20 )) $PY benchmarks/gpu/lockstep_drained.py --out "$D/lockstep-probe-$sha-r$r" --budget-s 60 \
    --probe > "$D/r$r.log" 2>&1 || { echo "repeat $r failed"; status=1; }
  tail -2 "$D/r$r.log"
done
gpu_state "$D/gpu-end.txt"
tar czf "$OUT/probe.tgz" -C "$D" .
exit $status
