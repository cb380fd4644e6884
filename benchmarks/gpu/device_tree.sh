#!/usr/bin/env bash
# The working tree a device call sends (at most 64 MiB with what it carries), made small and put back, and the
# prelude every device script expects. The committed records under data/ (about 72 MB) are what make the tree too
# large; no device script and no GPU-marked test reads them, so a call is made with them removed from the working
# tree and `restore` brings them back from git. Run from the checkout's root (the one the session started in):
#   bash benchmarks/gpu/device_tree.sh hide       # remove every tracked file under data/ (refuses if data/ has changes)
#   bash benchmarks/gpu/device_tree.sh size       # bytes of the tracked files that would travel
#   bash benchmarks/gpu/device_tree.sh restore    # git checkout -- data
#   bash benchmarks/gpu/device_tree.sh prelude [SHA]   # the line to begin a device command with (SHA: HEAD)
# The prelude installs the wheels carried in .whl/ (simpy, plotly, narwhals: what the GPU machine lacks) and the
# checkout (editable, no dependencies), sets the variables that keep NVLink multicast off, and names the commit for
# the records' provenance (the copy there has no .git). Carry [".whl"] with it.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
case "${1:-}" in
  hide)
    if [ -n "$(git status --porcelain -- data)" ]; then
      echo "device_tree: data/ has uncommitted changes; commit them first (nothing removed)" >&2; exit 2
    fi
    git ls-files -z data | xargs -0 rm -f
    echo "data/ hidden ($(git ls-files data | wc -l) files); put it back with: bash $0 restore"
    "$0" size ;;
  size)
    # du fails on the files `hide` removed: the sum is of those still there
    git ls-files -z | { xargs -0 du -cb 2>/dev/null || true; } | tail -1 |
       awk '{printf "tracked files that travel: %.1f MB\n", $1/1e6}' ;;
  restore)
    git checkout -- data && echo "data/ restored" ;;
  prelude)
    sha=$(git rev-parse --verify "${2:-HEAD}^{commit}") || exit 2   # always the full hash (session 21: a hand-built one went wrong)
    echo "export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 XSTAGE_GIT_COMMIT=$sha; python3 -m pip install -q --no-deps --no-index .whl/*.whl && python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 9;" ;;
  *)
    sed -n 2,12p "$0"; exit 2 ;;
esac
