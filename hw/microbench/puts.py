"""The microbenchmark's second issue path: NVSHMEM device puts instead of 16-byte stores (issue 18).

    xstage calibrate --target peer --self-peer --backend nvshmem --issue put-nbi --out DIR
    torchrun --standalone --nproc-per-node=2 -m xstage.cli calibrate --target peer --backend nvshmem --issue put --out DIR

Issue paths (``ISSUES``):
    store     the store kernel (``microbench.cu``): st.global.v4 through the peer pointer (either backend)
    put-nbi   every producer CTA puts its B bytes per burst with ``nvshmemx_uint32_put_nbi_block`` from a
              local source buffer to the symmetric destination on the peer PE; ``nvshmem_quiet`` after the
              last burst (isolated mode: after every burst, in place of ``__threadfence_system``)
    put       the same with the blocking ``nvshmemx_uint32_put_block``
The put kernel (``put_kernel.py``, Numba-CUDA + nvshmem4py's device bindings) runs the store kernel's protocol:
same modes, gaps, barriers, bounded spins and records; `PutMicrobench` is `runner.Microbench` with only the
launch replaced, so the trial loop, the zero fill before every trial, the per-trial check of every destination
word through the peer mapping and the frames are the store path's. Source: ``n_bursts`` x K x B bytes of local
device memory filled once per configuration with the words the store kernel would write (``pattern_word`` of
``microbench.cu``, compiled from that file), so the destination check is the store path's too.

What differs besides the issue: a put reads its source (local HBM / L2) as well as writing the destination, and
at world size 1 (self-PE) NVSHMEM's put to its own PE is a local copy, not an NVLink transfer; the
``kernel(us)`` column includes Numba's host-side launch (the events are recorded around the launch call).
`issue_path_figures` reads the model-free figures off a calibration's points (the fit assumes a post-issue
stage that drains; at W = 1 neither path shows one). GPU libraries (cupy, numba, nvshmem4py) are imported
inside functions; on a machine without them a put issue path refuses with one `InputError` line.
"""

import numpy as np

from xstage.errors import InputError
from xstage.hw.microbench.runner import Microbench, kernel_source

ISSUES = ("store", "put-nbi", "put")
DESCRIBE = {"store": "st.global.v4 (16-byte stores) through the peer pointer",
            "put-nbi": "nvshmemx_uint32_put_nbi_block per CTA and burst (Numba-CUDA), nvshmem_quiet after the last",
            "put": "nvshmemx_uint32_put_block per CTA and burst (Numba-CUDA), nvshmem_quiet after the last"}
MAX_SOURCE_BYTES = 8 * 2**30
NEEDS = ("needs Numba-CUDA (numba-cuda >= 0.28) with nvshmem4py's device bindings "
         "(nvshmem.bindings.device.numba) and the NVSHMEM / CCCL headers")

_FILL = r"""
// The put path's source: src[(b * K + p) * W + i] = the word the store kernel writes (tag of row p, burst b, i).
extern "C" __global__ void fill_source(uint4* src, const u32* tags, u32 K, u32 W, u32 n) {
    const u64 total = (u64)n * K * W;
    for (u64 g = blockIdx.x * (u64)blockDim.x + threadIdx.x; g < total; g += (u64)gridDim.x * blockDim.x) {
        u32 i = (u32)(g % W);
        u64 r = g / W;
        src[g] = pattern_word(tags[r % K], (u32)(r / K), i);
    }
}
"""


def check_issue(issue: str, backend: str = "torch", target: str | None = "peer") -> str:
    """A valid issue path for ``backend`` and ``target``: the puts need ``--backend nvshmem --target peer``."""
    if issue not in ISSUES:
        raise InputError("--issue", issue, f"must be one of {', '.join(ISSUES)}")
    if issue != "store" and (backend != "nvshmem" or target != "peer"):
        raise InputError("--issue", issue, f"needs --target peer --backend nvshmem (got --target {target} "
                         f"--backend {backend})")
    return issue


def device_bindings(issue: str = "put"):
    """nvshmem4py's Numba device bindings, or one InputError line saying what is missing."""
    from xstage.hw.microbench.put_kernel import numpy_compat
    numpy_compat()
    try:
        import nvshmem.bindings.device.numba as nvb
        from numba.cuda import types  # noqa: F401 - the bindings' type system (numba-cuda >= 0.2x)
    except Exception as err:  # noqa: BLE001 - ImportError, or the bindings' own RuntimeError (headers not found)
        raise InputError("--issue", issue, f"{NEEDS} ({type(err).__name__}: {str(err)[:120]})") from None
    return nvb


def put_plan(info: dict, regions: list[dict], producers: int, target_ptr: int, peer_ptrs=()) -> dict:
    """Where each producer puts (pure): per destination region its local symmetric address (the put's
    ``dest``, NVSHMEM maps it to the PE) and PE, and per producer its region and row.

    ``regions`` are ``Microbench.regions``: one (``dest`` None, pattern next: the peer's whole buffer at
    ``target_ptr``) or one per destination rank (pattern all: ``peer_ptrs[dest]`` + this sender's offset)."""
    from xstage.hw.common.targets import PeerLayout
    local = int(info["local_base"])
    if regions[0]["dest"] is None:
        if int(regions[0]["ptr"]) != int(target_ptr):
            raise InputError("regions", regions[0]["ptr"], f"must start at the target pointer {target_ptr}")
        return {"dst_local": [local], "pe": [int(info["peer_rank"])], "dst_of": np.zeros(producers, np.uint32),
                "row_of": np.arange(producers, dtype=np.uint32), "rows": producers,
                "tags": np.arange(producers, dtype=np.uint32)}
    lay = PeerLayout(int(info["rank"]), int(info["world_size"]), producers, "all")
    index = {r["dest"]: k for k, r in enumerate(regions)}
    return {"dst_local": [local + int(r["ptr"]) - int(peer_ptrs[r["dest"]]) for r in regions],
            "pe": [int(r["dest"]) for r in regions],
            "dst_of": np.array([index[int(d)] for d in lay.dest_of], dtype=np.uint32),
            "row_of": lay.row_of.astype(np.uint32), "rows": lay.rows,
            "tags": (lay.tag_base | np.arange(producers)).astype(np.uint32)}


def source_words(producers: int, words_per_producer: int, bursts: int, tags=None) -> np.ndarray:
    """The numpy twin of ``fill_source``: uint32 [bursts, K, W, 4] (tests; small sizes)."""
    from xstage.hw.microbench.pattern import pattern_words
    tags = np.arange(producers) if tags is None else np.asarray(tags, dtype=np.uint32)
    b = np.arange(bursts)[:, None, None]
    return pattern_words(tags[None, :, None], b, np.arange(words_per_producer)[None, None, :])


def issue_path_figures(points) -> dict:
    """Model-free figures of one calibration's points (``points.parquet``), to set issue paths side by side
    where the fit's R and Q do not apply (a path that never drains after its issue, as the puts at W = 1):
    at the largest K, the plateau T_iss at 32 KiB, the isolated T_iss and the tail after it (fence - issue)
    per B, the zero-gap periodic and free-running rates (V / period), the per-producer issue rate (B /
    producer T_iss, isolated, median) and the zero-gap period minus T_iss (the barrier and gap overhead)."""
    K = int(points["producers"].max())
    at = points[points["producers"] == K]
    iso = at[at["phase"] == "isolated"].sort_values("bytes_per_producer")
    plateau = at[(at["phase"] == "plateau") & (at["bytes_per_producer"] == 32 * 1024)]
    rate = points[points["phase"] == "rate"]
    free = points[points["phase"] == "free-rate"]
    kib = lambda frame: (frame["bytes_per_producer"] // 1024).astype(int).astype(str)  # noqa: E731
    rates = lambda frame: float((frame["volume(bytes)"] / frame["period(us)"]).max() / 1e3) if len(frame) else None  # noqa: E731
    return {"K": K,
            "T_iss_plateau_us_32KiB": float(plateau["T_iss(us)"].median()) if len(plateau) else None,
            "T_iss_isolated_us": dict(zip(kib(iso), iso["T_iss(us)"].astype(float))),
            "tail_after_issue_us": dict(zip(kib(iso), (iso["fence(us)"] - iso["T_iss(us)"]).astype(float))),
            "producer_issue_GBps": float((iso["bytes_per_producer"] / iso["T_iss_producer(us)"]).median() / 1e3)
            if len(iso) else None,
            "periodic_rate_GBps_max": rates(rate), "free_rate_GBps_max": rates(free),
            "zero_gap_overhead_us": float((rate["period(us)"] - rate["T_iss(us)"]).median()) if len(rate) else None}


def compare_issue_paths(figures: dict, base: str = "store") -> dict:
    """``figures`` (issue -> `issue_path_figures`) with each scalar's ratio to ``base``'s."""
    out = {"figures": figures, "ratio_to_" + base: {}}
    for issue, fig in figures.items():
        if issue == base:
            continue
        out["ratio_to_" + base][issue] = {
            k: (v / figures[base][k] if isinstance(v, float) and figures[base].get(k) else None)
            for k, v in fig.items() if not isinstance(v, dict) and k != "K"}
    return out


class PutMicrobench(Microbench):
    """`Microbench` on the NVSHMEM put path: the same trial loop, check and records, the put kernel launched."""

    supports_end_fence = False    # the put kernel has no end-fence flag (runner.Microbench.run refuses it)

    def __init__(self, target, *, issue: str = "put-nbi", timeout_ms: float = 2000.0, ring_bytes: int = 256 * 2**20):
        if issue not in ISSUES[1:]:
            raise InputError("--issue", issue, f"must be one of {', '.join(ISSUES[1:])} for the put kernel")
        if "local_base" not in target.info:
            raise InputError("--backend", target.info.get("backend"), "must be nvshmem for the put issue paths")
        super().__init__(target, timeout_ms=timeout_ms, ring_bytes=ring_bytes)
        device_bindings(issue)
        from xstage.hw.microbench.put_kernel import NumbaLaunch, build
        self.issue = issue
        self.launch = NumbaLaunch(build(), self.pad_bytes)
        self.k_source = self.cp.RawModule(code=kernel_source() + _FILL, options=("--std=c++17",)).get_function(
            "fill_source")
        self._source = (None, None)           # (key, cupy buffer) of the last configuration
        target.info.update(issue=DESCRIBE[issue], issue_path=issue, placement=self.launch.placement)

    def source(self, spec, tags: np.ndarray) -> int:
        """The device address of this configuration's source, filled once per (K, W, bursts, tags)."""
        cp = self.cp
        K, W, n = spec.producers, spec.words_per_producer, spec.bursts
        key = (K, W, n, int(tags[0]) if len(tags) else 0)
        if self._source[0] != key:
            need = n * K * W * 16
            if need > MAX_SOURCE_BYTES:
                raise InputError("bursts x producers x bytes_per_producer", need,
                                 f"must be <= {MAX_SOURCE_BYTES} bytes of put source")
            self._source = (None, None)
            buf = cp.empty(n * K * W * 4, dtype=cp.uint32)
            dtags = cp.asarray(tags, dtype=cp.uint32)
            self.k_source((min(4 * self.sm_count, max(1, n * K * W // 256)),), (256,),
                          (buf, dtags, np.uint32(K), np.uint32(W), np.uint32(n)))
            cp.cuda.runtime.deviceSynchronize()
            self._source = (key, buf)
        return int(self._source[1].data.ptr)

    def _burst_launch(self, spec, regions):
        cp = self.cp
        plan = put_plan(self.target.info, regions, spec.producers, self.target.ptr, self.target.peer_ptrs)
        self._bufs = {"table": cp.asarray(np.array(plan["dst_local"], dtype=np.uint64)),
                      "pe": cp.asarray(np.array(plan["pe"], dtype=np.int32)),
                      "dst_of": cp.asarray(plan["dst_of"]), "row_of": cp.asarray(plan["row_of"]),
                      "rows": int(plan["rows"])}
        src = self.source(spec, plan["tags"])
        return _Launch(self, src), ()

    def close(self):
        self._source = (None, None)
        super().close()


class _Launch:
    """The put kernel behind the store kernel's argument list: ``runner.Microbench.run`` calls it with
    (words_per_producer, slots, n, mode, gap_kind, gap_param, settle, timeout, counter, rec, sm_of, sink, err);
    the head (tables, control addresses, source, blocking flag) is added here."""

    def __init__(self, mb: PutMicrobench, src: int):
        self.mb, self.src = mb, src

    def __call__(self, grid, block, args, shared_mem=0):
        b = self.mb._bufs
        counter, err = args[8], args[12]
        head = (b["table"], b["pe"], b["dst_of"], b["row_of"], np.uint32(b["rows"]),
                np.uint64(int(counter.data.ptr)), np.uint64(int(err.data.ptr)), np.uint64(self.src),
                np.uint32(self.mb.issue == "put"))
        self.mb.launch(grid, block, (*head, *args), shared_mem=shared_mem)

