#!/usr/bin/env bash
# Run GPU parts on a lent GPU machine from the repo root:  OUT=<folder> bash benchmarks/gpu/run_all.sh PART...
# PART: calibrate | attention | moe | tests | calib_nvlink | attention_dist | moe_dist (W=<ranks>, default 8;
# W=1 SMALL=1 for one GPU). Wheels for what the machine lacks (simpy, plotly) are read from .whl/.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 \
  || { echo "editable install failed:"; tail -5 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, triton, cupy; print("torch", torch.__version__, "triton", triton.__version__, "cupy", cupy.__version__)'
status=0
for part in "$@"; do
  echo "=== $part ($(date -u +%H:%M:%S)) ==="
  case "$part" in
    tests) python3 -m pytest -q -m gpu tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -25 || status=1 ;;
    *) bash "benchmarks/gpu/$part.sh" || status=1 ;;
  esac
done
exit $status
