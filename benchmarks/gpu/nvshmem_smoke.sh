#!/usr/bin/env bash
# The nvshmem backend at world size 1 on one GPU (issue 18, self-PE): install the carried nvshmem4py
# wheel, init NVSHMEM, allocate a symmetric buffer, store into it from a CUDA kernel through its
# nvshmem_ptr peer pointer and check every word, then `xstage calibrate --target peer --self-peer --quick`
# with --backend nvshmem and (time allowing) --backend torch side by side. Run from the repo root with
# $OUT set and .carry-nv/ carried; writes $OUT/nvshmem/. Budget: < 4 min wall (every step has a timeout).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
start_run nvshmem 230 3
unset WORLD_SIZE RANK LOCAL_RANK MASTER_ADDR      # self-PE: no torchrun

gpu_state "$D/gpu-start.txt" >/dev/null
"$PY" -m pip show cuda-core cuda-bindings cuda-pathfinder nvidia-nvshmem-cu13 2>/dev/null \
  | grep -E '^(Name|Version)' > "$D/packages.txt"
step "install the carried nvshmem4py wheel"
timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry-nv/*.whl \
  > "$D/install.log" 2>&1 || { echo "nvshmem4py install FAILED" >&2; tail -n 5 "$D/install.log" >&2; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
"$PY" -c 'import nvshmem.core, nvshmem; print(nvshmem.core.__file__)' >> "$D/packages.txt" 2>&1

# 1) init, symmetric allocation, kernel stores through the self peer pointer, every word checked
step "self-PE smoke (init / alloc / kernel store via nvshmem_ptr / verify)"
timeout 90 "$PY" -c 'import json; from xstage.hw.common import nvshmem as n
r = n.self_check(1 << 24); n.finalize(); print(json.dumps(r))' > "$D/self-check.json" 2> "$D/self-check.log"
rc=$?; tail -n 2 "$D/self-check.log" >&2
if [ $rc -ne 0 ] || ! grep -q '"ok": true' "$D/self-check.json"; then
  echo "self-PE smoke FAILED (rc=$rc)" >&2; tail -n 20 "$D/self-check.log" >&2; status=1
fi

# 2) the quick calibration through each backend (nvshmem first; torch only if time is left)
for backend in nvshmem torch; do
  t=$(left); [ "$t" -gt 150 ] && t=150
  if [ "$t" -lt 40 ]; then echo "calibrate --backend $backend skipped (no time left)" >&2; continue; fi
  step "xstage calibrate --target peer --self-peer --backend $backend --quick (timeout ${t}s)"
  timeout "$t" "$PY" -m xstage.cli calibrate --target peer --self-peer --backend "$backend" --quick --no-copy \
    --out "$OUT/$backend-calib" --overwrite --json > "$D/summary-$backend.json" 2> "$D/calibrate-$backend.log"
  rc=$?; tail -n 2 "$D/calibrate-$backend.log" >&2
  if [ $rc -ne 0 ]; then
    echo "calibrate --backend $backend FAILED (rc=$rc)" >&2; tail -n 20 "$D/calibrate-$backend.log" >&2
    [ "$backend" = nvshmem ] && status=1
  fi
done

# 3) the short table
"$PY" - "$D" "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
d, out = Path(sys.argv[1]), Path(sys.argv[2])
def load(p):
    try:
        return json.loads(p.read_text())
    except Exception:
        return {}
s = load(d / "self-check.json")
print(f"self-PE: ok={s.get('ok')} words={s.get('words')} mismatches={s.get('mismatches')} "
      f"table={s.get('table')} local={s.get('local_ptr')}")
keys = ["R_GBps", "T_iss0_us_at_32KiB", "Q_MiB", "t_fixed_us", "producer_issue_GBps", "median_rel_err_T_iss",
        "p90_rel_err_T_iss", "n_points", "kernel_GBps_rate_max", "backend_in_records"]
cols = {b: load(d / f"summary-{b}.json") for b in ("nvshmem", "torch")}
for b in cols:
    try:
        from xstage.records import load_records
        _, meta = load_records(out / f"{b}-calib" / "points.parquet", "point")
        cols[b]["backend_in_records"] = meta["runner"]["target_info"]["backend"]
    except Exception as err:
        cols[b]["backend_in_records"] = f"- ({type(err).__name__})"
print(f"{'':28}{'nvshmem':>14}{'torch':>14}")
for k in keys:
    cells = [f"{v:14.4g}" if isinstance(v := cols[b].get(k), (int, float)) else f"{str(v):>14}" for b in cols]
    print(f"{k:28}{''.join(cells)}")
PYEOF
gpu_state "$D/gpu-end.txt" >/dev/null
step "nvshmem_smoke.sh done, status $status"
exit "$status"
