#!/usr/bin/env bash
# Peer (NVLink) calibration on one multi-GPU node (issue 8, run 1): both peer patterns in one go.
#   next  one sender -> the next rank (every rank sends at once: a ring)
#   all   all-to-all: each rank's K producers spread over the W-1 other ranks, all ranks at once
# Correctness first (self-test of each pattern at world size W, with a deliberately corrupted word),
# then `xstage calibrate --target peer --peer-pattern <p>` for each, under torchrun with one process
# per GPU. Run from the repo root with $OUT set; writes $OUT/calib-nvlink/ (records per pattern in
# next/ and all/, logs, topology).
#   W=8 (default) on the 8-GPU node;  W=2 bash benchmarks/gpu/calib_nvlink.sh;  W=1 runs both patterns
#   with --self-peer against this GPU's own buffer (a smoke test of the code paths, not a link) and a
#   quick sweep. NAME (default h200-nvlink; h200-self-peer at W=1) names the platforms: NAME for next,
#   NAME-a2a for all.
#   CALIB_EXTRA adds options to both `xstage calibrate` calls (e.g. --quick).
# Budget: <= 6 min wall on the 8-GPU node (every step has a timeout inside a 330 s overall deadline,
# plus at most 10 s to kill a step that overruns; expected ~3 min: torch/NCCL start-up dominates each
# torchrun, the 2-GPU peer sweep itself took 8 s). A last, optional memcheck
# (MEMCHECK=0 skips it) takes at most 90 s of what is left.
# NVLink multicast is never used.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
W=${W:-8}
NAME=${NAME:-$([ "$W" -eq 1 ] && echo h200-self-peer || echo h200-nvlink)}
start_run calib-nvlink "${DEADLINE_S:-330}"

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$ngpu" -lt "$W" ]; then
  echo "calib_nvlink: W=$W needs $W GPUs, this node has $ngpu" >&2
  exit 2
fi
SELF=(); QUICK=()
if [ "$W" -eq 1 ]; then SELF=(--self-peer); QUICK=(--quick); fi

nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$D/gpu-start.txt"
nvidia-smi topo -m > "$D/nvidia-smi-topo.txt" 2>&1
nvidia-smi nvlink --status > "$D/nvidia-smi-nvlink.txt" 2>&1 || true
head -n $(( W + 2 )) "$D/nvidia-smi-topo.txt" >&2
echo "W=$W  NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST" \
     "NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS" | tee "$D/env.txt" >&2

# 1) correctness at world size W: pattern checks through the peer mappings in every mode and gap kind,
#    a word corrupted on purpose must be caught. Every rank checks its own stores (torchrun fails if any
#    rank fails); rank 0 prints the JSON, the others one line each on stderr.
declare -A ok
for pat in next all; do
  step "selftest --target peer --peer-pattern $pat (W=$W)"
  timeout -k 10 75 "$PY" -m torch.distributed.run --standalone --nproc-per-node="$W" \
    -m xstage.hw.microbench.runner --selftest --target peer --peer-pattern "$pat" \
    > "$D/selftest-$pat.json" 2> "$D/selftest-$pat.log"
  rc=$?; grep -E "corrupted word caught|passed in|Error|error" "$D/selftest-$pat.log" | tail -n 4 >&2
  if [ $rc -eq 0 ]; then ok[$pat]=1; else ok[$pat]=0; status=1; echo "selftest $pat FAILED (rc=$rc)" >&2; tail -n 15 "$D/selftest-$pat.log" >&2; fi
done

# 2) the calibrations (rank 0 records; records, platform.json and the model check per pattern)
for pat in next all; do
  if [ "${ok[$pat]}" != 1 ]; then echo "calibrate $pat skipped: its selftest failed" >&2; continue; fi
  name="$NAME"; [ "$pat" = all ] && name="$NAME-a2a"
  lim=$(left)
  [ "$pat" = next ] && [ "${ok[all]}" = 1 ] && lim=$(( (lim - 10) / 2 ))
  [ "$lim" -gt 150 ] && lim=150
  if [ "$lim" -lt 30 ]; then echo "calibrate $pat skipped: no time left (${lim}s)" >&2; status=1; continue; fi
  step "calibrate --target peer --peer-pattern $pat --name $name (W=$W, timeout ${lim}s)"
  timeout -k 10 "$lim" "$PY" -m torch.distributed.run --standalone --nproc-per-node="$W" -m xstage.cli calibrate \
    --target peer --peer-pattern "$pat" --name "$name" --out "$D/$pat" --overwrite --json \
    ${SELF[@]+"${SELF[@]}"} ${QUICK[@]+"${QUICK[@]}"} ${CALIB_EXTRA:-} > "$D/summary-$pat.json" 2> "$D/calibrate-$pat.log"
  rc=$?; grep -vE "it/s|cfg/s" "$D/calibrate-$pat.log" | tail -n 2 >&2
  if [ $rc -ne 0 ]; then echo "calibrate $pat FAILED (rc=$rc)" >&2; tail -n 20 "$D/calibrate-$pat.log" >&2; status=1; fi
  cp "$D/nvidia-smi-topo.txt" "$D/$pat/" 2>/dev/null
done

# 3) compute-sanitizer memcheck of the all-to-all kernels at world size 1 (own buffer), only with time
#    left; non-fatal (the W=1 path runs burst_kernel_multi, verify_rows and flip_bits)
lim=$(( $(left) - 15 )); [ "$lim" -gt 90 ] && lim=90
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null && [ "$lim" -gt 40 ]; then
  step "compute-sanitizer memcheck, --peer-pattern all at W=1 (timeout ${lim}s, non-fatal)"
  timeout -k 5 "$lim" compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node=1 -m xstage.hw.microbench.runner --selftest --small \
    --target peer --peer-pattern all --timeout-ms 30000 > "$D/memcheck-all.log" 2>&1
  rc=$?; grep -E "ERROR SUMMARY|passed in" "$D/memcheck-all.log" >&2
  [ $rc -eq 124 ] && echo "memcheck: timed out (not a failure of the kernel)" >&2
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "memcheck all: rc=$rc (non-fatal; see memcheck-all.log)" >&2
else
  echo "memcheck skipped (no compute-sanitizer or no time left)" >&2
fi

nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$D/gpu-end.txt"

# 4) the short table (read from the files rank 0 wrote)
"$PY" - "$D" "$W" <<'EOF'
import json, sys
from pathlib import Path
d, world = Path(sys.argv[1]), sys.argv[2]
def load(p):
    try:
        return json.loads(p.read_text())
    except Exception:
        return {}
for pat in ("next", "all"):
    st = load(d / f"selftest-{pat}.json")
    print(f"selftest {pat}: world size {st.get('world_size')}, {len(st.get('runs', []))} runs verified, "
          f"corrupted word caught: {bool(st.get('corruption_caught'))}")
print(f"W = {world}; per sender, one direction; NVLink4 nominal: 450 GB/s per direction per GPU")
EOF
summary_table --width 16 --label-width 32 next="$D/next/summary.json" all="$D/all/summary.json" -- \
  platform peer_pattern R_GBps T_iss0_us_at_32KiB Q_MiB t_fixed_us producer_issue_GBps injection_GBps \
  median_rel_err_T_iss p90_rel_err_T_iss median_rel_err_period p90_rel_err_period isolated_median_rel_err_T_iss \
  isolated_p90_rel_err_T_iss free_median_rel_err_period free_p90_rel_err_period n_points \
  R_drain_dominated_points kernel_GBps_rate_max kernel_GBps_rate_median free_rate_GBps_max
step "calib_nvlink.sh done (W=$W), status $status"
exit "$status"
