#!/usr/bin/env bash
# Platform calibration on one H200 (issue 4): correctness first, then `xstage calibrate` on the
# host-mapped (PCIe) and local (HBM) targets, then compute-sanitizer memcheck on a small run.
# Run from the repo root with $OUT set; writes $OUT/calib/ (records, platform files, logs).
# CALIB_EXTRA adds options to both `xstage calibrate` calls (e.g. CALIB_EXTRA=--aligned).
# Budget: <= 5 min wall on one H200 (each step has its own timeout; measurements ~1 min each).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
start_run calib 290 3

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,temperature.gpu,power.draw --format=csv \
  | tee "$D/gpu-start.txt"

# 1) correctness: %globaltimer tick, pattern checks in every mode/gap kind, a corrupted word is caught
for tgt in host local; do
  step "selftest --target $tgt"
  timeout 120 "$PY" -m xstage.hw.microbench.runner --selftest --target "$tgt" \
    > "$D/selftest-$tgt.json" 2> "$D/selftest-$tgt.log"
  rc=$?; tail -n 3 "$D/selftest-$tgt.log" >&2
  if [ $rc -ne 0 ]; then echo "selftest $tgt FAILED (rc=$rc)" >&2; status=1; fi
done

# 2) calibration sweeps (records + platform.json + model check per target)
for tgt in host local; do
  step "xstage calibrate --target $tgt"
  name=""; [ "$tgt" = host ] && name="--name h200-pcie-host"
  timeout 170 "$PY" -m xstage.cli calibrate --target "$tgt" --out "$D/$tgt" $name --overwrite --json ${CALIB_EXTRA:-} \
    > "$D/summary-$tgt.json" 2> "$D/calibrate-$tgt.log"
  rc=$?; tail -n 2 "$D/calibrate-$tgt.log" >&2
  if [ $rc -ne 0 ]; then echo "calibrate $tgt FAILED (rc=$rc)" >&2; tail -n 20 "$D/calibrate-$tgt.log" >&2; status=1; fi
done

# 2b) the peer path's setup at world size 1 (torch symmetric memory; a smoke test, non-fatal)
step "selftest --target peer at world size 1 (torchrun, non-fatal)"
timeout 90 "$PY" -m torch.distributed.run --standalone --nproc-per-node=1 -m xstage.hw.microbench.runner \
  --selftest --target peer --small > "$D/selftest-peer-w1.json" 2> "$D/selftest-peer-w1.log"
rc=$?; tail -n 2 "$D/selftest-peer-w1.log" >&2; [ $rc -ne 0 ] && echo "peer w1 smoke test failed (rc=$rc, non-fatal)" >&2

# 3) compute-sanitizer memcheck on a small microbenchmark run (last: it is slow; bounded)
left=$(left)
if command -v compute-sanitizer >/dev/null && [ $left -gt 30 ]; then
  step "compute-sanitizer memcheck (timeout ${left}s)"
  timeout "$left" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$PY" -m xstage.hw.microbench.runner --selftest --small --target host --timeout-ms 30000 \
    > "$D/memcheck.log" 2>&1
  rc=$?; grep -E "ERROR SUMMARY|passed in" "$D/memcheck.log" >&2
  [ $rc -eq 124 ] && echo "memcheck: timed out (not a failure of the kernel)" >&2
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && { echo "memcheck FAILED (rc=$rc)" >&2; status=1; }
else
  echo "memcheck skipped (no compute-sanitizer or no time left)" >&2
fi

nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv | tee "$D/gpu-end.txt"

# 4) the short table
"$PY" - "$D" <<'EOF'
import json, sys
from pathlib import Path
try:
    tick = json.loads((Path(sys.argv[1]) / "selftest-host.json").read_text()).get("timer", {})
except Exception:
    tick = {}
print(f"%globaltimer tick {tick.get('tick_ns')} ns; distinct deltas {tick.get('distinct_deltas_ns')}; "
      f"SM clock {tick.get('sm_clock_GHz')} GHz; timebase {tick.get('timebase')}")
EOF
summary_table --label-width 32 host="$D/summary-host.json" local="$D/summary-local.json" -- \
  R_GBps T_iss0_us_at_32KiB Q_MiB t_fixed_us producer_issue_GBps injection_GBps \
  median_rel_err_T_iss p90_rel_err_T_iss median_rel_err_period p90_rel_err_period \
  eq3_median_rel_err_T_iss eq3_p90_rel_err_T_iss isolated_median_rel_err_T_iss \
  isolated_p90_rel_err_T_iss free_median_rel_err_period free_p90_rel_err_period \
  aligned_median_rel_err_T_iss aligned_p90_rel_err_T_iss aligned_eq3_p90_rel_err_T_iss n_points \
  kernel_GBps_rate_max kernel_GBps_rate_median free_rate_GBps_max copy_engine_GBps pcie_limit_GBps
step "calibrate.sh done, status $status"
exit "$status"
