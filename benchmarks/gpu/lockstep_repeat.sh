#!/usr/bin/env bash
# One device call: the pre-registered lockstep finite runs (benchmarks/gpu/lockstep_drained.py) three times in three
# separate processes, to measure how far one build reproduces itself. Session 10 ran it bare
# (data/calibration-extra/lockstep-repeat-s10-preregistration.md; results $OUT/repeat.tgz); session 12 (skew17) with
# --probe, one 2 KiB run per K of the grid before the grid (data/calibration-extra/skew17-preregistration.md;
# benchmarks/gpu/lockstep_probe.sh; results $OUT/probe.tgz). Extra arguments go to lockstep_drained.py.
source "$(dirname "$0")/common.sh"
name=repeat
[[ " $* " == *" --probe "* ]] && name=probe
start_run "$name" 240
sha=${XSTAGE_GIT_COMMIT:0:7}
gpu_state "$D/gpu-start.txt"
for r in 1 2 3; do
  step "repeat $r"
  timeout $(( $(left) - 20 )) $PY benchmarks/gpu/lockstep_drained.py --out "$D/lockstep-$name-$sha-r$r" --budget-s 60 \
    "$@" > "$D/r$r.log" 2>&1 || { echo "repeat $r failed"; status=1; }
  tail -2 "$D/r$r.log"
done
gpu_state "$D/gpu-end.txt"
tar czf "$OUT/$name.tgz" -C "$D" .
exit $status
