#!/usr/bin/env bash
# FA4 as the FA core of FlashAttention + Ulysses A2A on one H200 (issue 16): checks, then timing.
# Run from the repo root with $OUT set and the FA4 stack importable (shared/DEVICE-WHEELS.md: PYTHONPATH=
# /tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site). Writes $OUT/attention-fa4/ (kernel records,
# checks, summary, log), and with PERSISTENT=1 also the SM90 persistent-scheduler experiment (own process;
# wrong results, kept as the record of why). PersistentSm90 (hw/attention/fa4_persistent.py: pfa4*, *_pers*)
# is in the sweep by default (--no-pers leaves it out); run benchmarks/gpu/fa4_persistent_smoke.py first
# (under timeout) on a new stack: a kernel that hangs there must not take the sweep with it.
# ~2-4 min (+1 min for the experiment).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the output folder}"
D="$OUT/attention-fa4"
mkdir -p "$D"
PY=${PYTHON:-python3}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,pcie.link.gen.current,pcie.link.width.current --format=csv
  timeout "${FA4_TIMEOUT:-420}" "$PY" -m xstage.hw.attention.fa4_bench --out "$D" --overwrite "$@"
  echo "fa4_bench exit status $?"
  if [ "${PERSISTENT:-0}" = 1 ]; then
    # EXPERIMENT, unverified upstream (may hang or race): its own process, its own timeout, its own records
    timeout "${PERSISTENT_TIMEOUT:-150}" "$PY" -m xstage.hw.attention.fa4_bench --out "$D" --overwrite --persistent \
      --tag persistent --seq-lens 16384,65536 --no-vmm --tile-mn '' \
      --variants fa4,cudnn,ce,serial_fa4,serial_cudnn,fused_allhost,fused_perchunk,fused_cm,fused_hbm
    echo "fa4_bench --persistent exit status $?"
  fi
  nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv
} 2>&1 | tee "$D/log.txt"
