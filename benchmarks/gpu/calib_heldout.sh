#!/usr/bin/env bash
# Held-out calibration on one H200 (issue 15, items 1-2): the microbenchmark self-test, then
# `xstage calibrate --grid wide` with the held-out split (whole (K, B) pairs, seeded, recorded) on the
# host-mapped (PCIe) target and, with the time left, the local (HBM) control, into
# $OUT/calib-heldout/<target>/ (records, platform.json, summary.json), and a table of fitted vs held-out
# errors.  Run from the repo root:   OUT=<folder> bash benchmarks/gpu/run_all.sh calib_heldout
# Budget: the whole script stays under 5 minutes (BUDGET_S, default 285 s; every step has a hard timeout).
# The wide grid is 659 configurations per target (90 (K, B) pairs x rate/plateau/free-rate, 10 gap sweeps
# lockstep and free-running, 5 FMA gaps, 144 isolated); from the committed runs' timings (84 / 62 ms per
# configuration + kernel time) about 66 s on host and 45-65 s on local.
# SIM=<platform> (and SIM_LOCAL=<platform> for the local target; default SIM) runs the same calibrate
# commands on the simulator instead (no GPU, no self-test): a CPU dry run of this script.
# HELDOUT (0.3) and SPLIT_SEED (0) set the split; CALIB_EXTRA adds options to both calibrate calls.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
start_run calib-heldout "${BUDGET_S:-285}"
SPLIT=(--heldout-fraction "${HELDOUT:-0.3}" --split-seed "${SPLIT_SEED:-0}")

if [ -z "${SIM:-}" ]; then
  gpu_state "$D/gpu-start.txt" name,driver_version,clocks.sm,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max,temperature.gpu,power.draw
  step "selftest --target host"
  timeout 90 "$PY" -m xstage.hw.microbench.runner --selftest --target host \
    > "$D/selftest-host.json" 2> "$D/selftest-host.log"
  rc=$?; tail -n 3 "$D/selftest-host.log" >&2
  if [ $rc -ne 0 ]; then echo "selftest host FAILED (rc=$rc): no calibration on a failed self-test" >&2; exit 1; fi
fi

for tgt in host local; do
  t=$(( $(left) - 15 ))                        # keep 15 s for the table
  [ "$tgt" = host ] && [ $t -gt 180 ] && t=180  # the host run must leave the local one its minute
  if [ $t -lt 50 ]; then echo "calibrate $tgt skipped: ${t}s left of the ${BUDGET}s budget" >&2; continue; fi
  name=h200-local; [ "$tgt" = host ] && name=h200-pcie-host
  sim=(); [ -n "${SIM:-}" ] && { sim=(--sim "$SIM"); [ "$tgt" = local ] && sim=(--sim "${SIM_LOCAL:-$SIM}"); name="sim-$name"; }
  step "xstage calibrate --target $tgt --grid wide ${SPLIT[*]} ${sim[*]} (timeout ${t}s)"
  timeout "$t" "$PY" -m xstage.cli calibrate --target "$tgt" --grid wide "${SPLIT[@]}" "${sim[@]}" --name "$name" \
    --out "$D/$tgt" --overwrite --json ${CALIB_EXTRA:-} > "$D/summary-$tgt.json" 2> "$D/calibrate-$tgt.log"
  rc=$?; tail -n 2 "$D/calibrate-$tgt.log" >&2
  if [ $rc -ne 0 ]; then echo "calibrate $tgt FAILED (rc=$rc; 124 = timed out)" >&2; tail -n 20 "$D/calibrate-$tgt.log" >&2; status=1; fi
done

[ -z "${SIM:-}" ] && gpu_state "$D/gpu-end.txt" clocks.sm,temperature.gpu,power.draw

# fitted vs held-out, per target (medians / p90 of |relative error|)
parts=(median_rel_err_T_iss p90_rel_err_T_iss median_rel_err_period p90_rel_err_period
       isolated_median_rel_err_T_iss isolated_p90_rel_err_T_iss free_median_rel_err_T_iss
       free_p90_rel_err_T_iss free_median_rel_err_period free_p90_rel_err_period n_points
       n_isolated_points n_free_points n_pairs)
summary_table --label-width 38 host="$D/summary-host.json" local="$D/summary-local.json" -- \
  R_GBps T_iss0_us_at_32KiB Q_MiB $(for p in "${parts[@]}"; do echo "fit_$p heldout_$p"; done)
"$PY" - "$D" <<'EOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
def load(p):
    try:
        return json.loads(p.read_text())
    except Exception:
        return {}
cols = {t: load(d / f"summary-{t}.json") for t in ("host", "local")}
for t in ("host", "local"):
    s = cols[t]
    if s:
        ok = s.get("heldout_median_rel_err_T_iss", 1) <= 0.05 and s.get("heldout_p90_rel_err_T_iss", 1) <= 0.15 \
            and s.get("heldout_median_rel_err_period", 1) <= 0.05 and s.get("heldout_p90_rel_err_period", 1) <= 0.15
        print(f"{t}: issue-15 target (held-out T_iss and period median <= 5 %, p90 <= 15 %): {'met' if ok else 'NOT met'}")
EOF
step "calib_heldout.sh done, status $status"
exit "$status"
