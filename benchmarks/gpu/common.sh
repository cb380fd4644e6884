# Sourced by every benchmarks/gpu/*.sh (run from the repo root):
#   strict mode, no NVLink multicast anywhere, $OUT required, $PY (default python3), and
#   gpu_state FILE [FIELDS]   nvidia-smi's name, clocks, temperature and power (or FIELDS) into FILE and the log
#   need_gpus W SCRIPT         exit 1 with one line unless this machine has at least W GPUs
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?set OUT to the output folder}"
PY=${PYTHON:-python3}

gpu_state() {
  nvidia-smi --query-gpu="${2:-name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw}" --format=csv \
    | tee "$1"
}

need_gpus() {
  local ngpu
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$ngpu" -lt "$1" ]; then
    echo "$2: W=$1 ranks need $1 GPUs; this machine has $ngpu"
    exit 1
  fi
}
