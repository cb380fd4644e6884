"""The FA4 variants of one M on one GPU (W ranks emulated): what each runs, and what it must write.

Destinations: ONE host-mapped ``[M, W·H, d]`` buffer (chunk j = rank j's receive buffer, pinned host
memory: device stores to it cross PCIe as posted writes, the ``h200-pcie-host`` platform) and this
rank's own receive buffer in HBM; optionally a ``MixedRange`` (own chunk HBM, others host, one range).

| variant | what runs |
|---|---|
| ``fa4`` | FA4 into a contiguous HBM ``(1, M, H, d)`` (FA-only) |
| ``cudnn`` | torch SDPA, cuDNN backend |
| ``ce`` | the copy-engine transfer alone: one ``cudaMemcpy2DAsync`` per rank of its rows into its buffer |
| ``serial_fa4`` / ``serial_cudnn`` | FA, then ``ce`` (Serial; Serial-best = the faster) |
| ``pipelined`` | FA4 per destination chunk on W streams into HBM; each chunk copied on a copy stream as soon as it is done |
| ``pipelined_g<G>`` | FA4 in G sequential launches (W/G chunks each); each group copied while the next computes |
| ``fused_allhost`` | one FA4 call, ``out=`` this rank's heads of the host buffer (own chunk host-mapped too) |
| ``fused_perchunk`` | W FA4 calls on W streams, each into its destination chunk: the exact layout (own chunk HBM) |
| ``fused_perchunk_st<us>`` | the same, stream j started j·us later (staggered tile ends across chunks) |
| ``fused_cm`` | one call, chunk-major: q ``(W, M/W, H, d)``, k/v stride-0 broadcast, out ``(W, M/W, H, d)`` |
| ``fused_vmm`` / ``fused_vmm_cm`` | one call into the mixed VMM range: the exact layout in one launch |
| ``fused_hbm`` | diagnostic: one call into an HBM ``[M, W·H, d]`` (the strided epilogue without PCIe) |
| ``fa4_t<m>x<n>`` / ``fused_allhost_t<m>x<n>`` | FA-only / fused_allhost with FA4's ``tile_mn`` |
| ``pfa4``, ``serial_pfa4`` | FA-only / Serial with ``PersistentSm90`` (``fa4_persistent``: persistent, sO apart, stores drained behind the next tile) |
| ``fused_<v>_pers`` | fused variant ``<v>`` (allhost, cm, vmm, vmm_cm, hbm) with ``PersistentSm90`` |
| ``pfa4_<d>``, ``fused_vmm_pers_<d>`` | the same with a diagnostic kernel ``<d>`` of ``fa4_persistent.KERNELS`` (waitend, lsu) |
"""

from xstage.hw.attention import fa4_layout as L
from xstage.hw.attention.fa4 import sdpa_cudnn
from xstage.hw.common import hostmap


def _sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Fa4Case:
    """Inputs, destinations and variant callables of one ``ReceiveLayout`` (fresh random inputs per seed).

    ``fa``: an ``fa4.Fa4``; ``host_alloc(nbytes, dtype)`` / ``vmm_alloc(chunk_bytes, W, rank, dtype)`` make
    the host-mapped buffer and the mixed range (objects with ``.tensor`` and ``.free()``; ``vmm_alloc``
    None: no VMM variants); ``pfa``: a second ``fa4.Fa4`` (the persistent kernel) for the ``*pers`` variants;
    ``pdiag``: {name: ``fa4.Fa4``} of diagnostic kernels (``pfa4_<name>``, ``fused_vmm_pers_<name>``)."""

    def __init__(self, lay: L.ReceiveLayout, fa, *, device="cuda", seed=0, host_alloc=None, vmm_alloc=None,
                 tile_mns=(), stagger_us=(), groups=(2, 4), clock_khz=1_980_000, pfa=None, pdiag=None):
        import torch

        from xstage.hw.common.vmm import HostMapped

        self.lay, self.fa, self.pfa, self.torch, self.device = lay, fa, pfa, torch, torch.device(device)
        self.pdiag = dict(pdiag or {})
        self.tile_mns, self.stagger_us, self.groups, self.clock_khz = tuple(tile_mns), tuple(stagger_us), groups, clock_khz
        M, H, D, W = lay.seq_len, lay.heads, lay.head_dim, lay.world_size
        gen = torch.Generator(device=self.device).manual_seed(seed)
        self.q, self.k, self.v = (torch.randn((1, M, H, D), device=self.device, generator=gen).to(torch.bfloat16)
                                  for _ in range(3))
        bf16 = torch.bfloat16
        self.fa_out = torch.empty((1, M, H, D), device=self.device, dtype=bf16)
        self.host = (host_alloc or HostMapped)(lay.total_bytes, bf16)
        self.host_t = L.receive_view(self.host.tensor, lay)
        self.local_t = torch.empty((lay.chunk_rows, W * H, D), device=self.device, dtype=bf16)
        self.hbm_t = torch.empty((M, W * H, D), device=self.device, dtype=bf16)
        self.vmm, self.vmm_t, self.vmm_error = None, None, None
        if vmm_alloc is not None:
            try:
                self.vmm = vmm_alloc(lay.chunk_bytes, W, lay.rank, bf16)
                self.vmm_t = L.receive_view(self.vmm.tensor, lay)
            except Exception as err:  # noqa: BLE001 - a driver or VM without host-located VMM: no VMM variants
                self.vmm_error = f"{type(err).__name__}: {err}"
        self.side = [torch.cuda.Stream() for _ in range(W)]
        self.kv_cm, self.kv_mode = None, "broadcast"  # chunk-major K/V: stride-0 batch, or materialised
        self.copy_stream = torch.cuda.Stream()

    # --- building blocks

    def exact(self, j):
        """Rank j's receive buffer in the exact layout: own chunk in HBM, the others host-mapped."""
        return self.local_t if j == self.lay.rank else L.chunk(self.host_t, self.lay, j)

    def copy_chunk(self, src, j, stream) -> None:
        """Copy-engine copy of rows of chunk j of ``src`` ``(1, M, H, d)`` into rank j's receive buffer."""
        lay, es = self.lay, src.element_size()
        rows, dst = src[0, j * lay.chunk_rows:(j + 1) * lay.chunk_rows], self.exact(j)
        base = dst.data_ptr() + lay.rank * lay.heads * lay.head_dim * es
        if src.stride(2) == lay.head_dim:  # (H, d) contiguous per row: one 2-D copy
            hostmap.memcpy2d_async(base, lay.row_bytes, rows.data_ptr(), src.stride(1) * es, lay.slice_bytes,
                                   lay.chunk_rows, stream)
            return
        for h in range(lay.heads):
            hostmap.memcpy2d_async(base + h * lay.head_dim * es, lay.row_bytes, rows[:, h].data_ptr(),
                                   src.stride(1) * es, lay.head_dim * es, lay.chunk_rows, stream)

    def ce(self, src) -> None:
        stream = int(self.torch.cuda.current_stream().cuda_stream)
        for j in range(self.lay.world_size):
            self.copy_chunk(src, j, stream)

    def _fork_join(self, bodies) -> None:
        """Run ``bodies[j]()`` on side stream j after the current stream's work; the current stream waits for all."""
        torch = self.torch
        main = torch.cuda.current_stream()
        fork = torch.cuda.Event()
        fork.record(main)
        joins = []
        for stream, body in zip(self.side, bodies):
            stream.wait_event(fork)
            with torch.cuda.stream(stream):
                body()
                done = torch.cuda.Event()
                done.record(stream)
            joins.append(done)
        for done in joins:
            main.wait_event(done)

    def _q_rows(self, j0, j1):
        mc = self.lay.chunk_rows
        return self.q[:, j0 * mc:(j1) * mc]

    def perchunk(self, stagger_us: float = 0.0) -> None:
        lay = self.lay
        cycles = int(stagger_us * self.clock_khz / 1e3)

        def body(j):
            def run():
                if cycles and j:
                    self.torch.cuda._sleep(j * cycles)
                self.fa(self._q_rows(j, j + 1), self.k, self.v, L.my_heads(self.exact(j), lay))
            return run

        self._fork_join([body(j) for j in range(lay.world_size)])

    def pipelined(self, groups: int = 0) -> None:
        """FA4 per chunk (``groups`` = 0: W launches on W streams; else G sequential launches) into HBM,
        each chunk's copy issued on the copy stream once its launch is done."""
        torch, lay, W = self.torch, self.lay, self.lay.world_size
        main, cs = torch.cuda.current_stream(), self.copy_stream
        cs.wait_stream(main)  # the copy stream's slots must follow earlier work on the main stream
        copy_handle = int(cs.cuda_stream)
        if groups == 0:
            def body(j):
                def run():
                    self.fa(self._q_rows(j, j + 1), self.k, self.v, self.fa_out[:, j * lay.chunk_rows:(j + 1) * lay.chunk_rows])
                    done = torch.cuda.Event()
                    done.record(torch.cuda.current_stream())
                    cs.wait_event(done)
                    self.copy_chunk(self.fa_out, j, copy_handle)
                return run
            self._fork_join([body(j) for j in range(W)])
        else:
            per = W // groups
            for g in range(groups):
                j0, j1 = g * per, (g + 1) * per
                self.fa(self._q_rows(j0, j1), self.k, self.v, self.fa_out[:, j0 * lay.chunk_rows:j1 * lay.chunk_rows])
                done = torch.cuda.Event()
                done.record(main)
                cs.wait_event(done)
                for j in range(j0, j1):
                    self.copy_chunk(self.fa_out, j, copy_handle)
        finished = torch.cuda.Event()
        finished.record(cs)
        main.wait_event(finished)

    def materialise_kv(self) -> None:
        """Chunk-major K/V as W real copies (if FA4 refuses the stride-0 broadcast): more HBM, less L2 reuse."""
        self.kv_cm = (L.chunk_major_kv(self.k, self.lay).contiguous(), L.chunk_major_kv(self.v, self.lay).contiguous())
        self.kv_mode = "materialised"

    # --- the variants

    def variants(self) -> dict:
        """{name: callable} of every variant this case can run."""
        lay, q, k, v, fa = self.lay, self.q, self.k, self.v, self.fa
        mine = L.my_heads
        qb = L.chunk_major_q(q, lay)
        if self.kv_cm is None:
            self.kv_cm = (L.chunk_major_kv(k, lay), L.chunk_major_kv(v, lay))
        fns = {
            "fa4": lambda: fa(q, k, v, self.fa_out),
            "cudnn": lambda: sdpa_cudnn(q, k, v),
            "ce": lambda: self.ce(self.fa_out),
            "serial_fa4": lambda: self.ce(fa(q, k, v, self.fa_out)),
            "serial_cudnn": lambda: self.ce(sdpa_cudnn(q, k, v)),
            "pipelined": lambda: self.pipelined(0),
            "fused_allhost": lambda: fa(q, k, v, mine(self.host_t, lay)),
            "fused_perchunk": lambda: self.perchunk(),
            "fused_cm": lambda: fa(qb, *self.kv_cm, L.chunk_major_out(self.host_t, lay)),
            "fused_hbm": lambda: fa(q, k, v, mine(self.hbm_t, lay)),
        }
        for g in self.groups:
            if lay.world_size % g == 0 and 1 < g < lay.world_size:
                fns[f"pipelined_g{g}"] = lambda g=g: self.pipelined(g)
        for us in self.stagger_us:
            fns[f"fused_perchunk_st{int(round(us))}"] = lambda us=us: self.perchunk(us)
        if self.vmm_t is not None:
            fns["fused_vmm"] = lambda: fa(q, k, v, mine(self.vmm_t, lay))
            fns["fused_vmm_cm"] = lambda: fa(qb, *self.kv_cm, L.chunk_major_out(self.vmm_t, lay))
        if self.pfa is not None:
            pf = self.pfa
            fns.update({
                "pfa4": lambda: pf(q, k, v, self.fa_out),
                "serial_pfa4": lambda: self.ce(pf(q, k, v, self.fa_out)),
                "fused_allhost_pers": lambda: pf(q, k, v, mine(self.host_t, lay)),
                "fused_cm_pers": lambda: pf(qb, *self.kv_cm, L.chunk_major_out(self.host_t, lay)),
                "fused_hbm_pers": lambda: pf(q, k, v, mine(self.hbm_t, lay)),
            })
            if self.vmm_t is not None:
                fns["fused_vmm_pers"] = lambda: pf(q, k, v, mine(self.vmm_t, lay))
                fns["fused_vmm_cm_pers"] = lambda: pf(qb, *self.kv_cm, L.chunk_major_out(self.vmm_t, lay))
        for tag, pd in self.pdiag.items():
            fns[f"pfa4_{tag}"] = lambda pd=pd: pd(q, k, v, self.fa_out)
            if self.vmm_t is not None:
                fns[f"fused_vmm_pers_{tag}"] = lambda pd=pd: pd(q, k, v, mine(self.vmm_t, lay))
            else:
                fns[f"fused_allhost_pers_{tag}"] = lambda pd=pd: pd(q, k, v, mine(self.host_t, lay))
        for tm in self.tile_mns:
            tag = f"t{tm[0]}x{tm[1]}"
            fns[f"fa4_{tag}"] = lambda tm=tm: fa(q, k, v, self.fa_out, tm)
            fns[f"fused_allhost_{tag}"] = lambda tm=tm: fa(q, k, v, mine(self.host_t, lay), tm)
        return fns

    def plan(self, name: str):
        """(buffer, first global row) of every receive buffer ``name`` must write; None for FA/SDPA-only."""
        W = self.lay.world_size
        exact = [(self.exact(j), j * self.lay.chunk_rows) for j in range(W)]
        if name in ("ce", "serial_fa4", "serial_cudnn", "serial_pfa4") or name.startswith(("pipelined", "fused_perchunk")):
            return exact
        if name.startswith(("fused_allhost", "fused_cm")):
            return [(self.host_t, 0)]
        if name.startswith("fused_vmm"):
            return [(self.vmm_t, 0)]
        if name.startswith("fused_hbm"):
            return [(self.hbm_t, 0)]
        return None

    def poison(self) -> None:
        nan = float("nan")
        for t in (self.host_t, self.local_t, self.hbm_t, self.vmm_t):
            if t is not None:
                t.fill_(nan)
        _sync(self.torch)

    def check(self, name: str, fn, expected) -> dict:
        """Poison every destination, run ``fn`` once, check ``plan(name)`` against ``expected`` ``(M, H, d)``."""
        self.poison()
        fn()
        _sync(self.torch)
        return L.check_destinations([(b, r0, expected) for b, r0 in self.plan(name)], self.lay)

    def free(self) -> None:
        _sync(self.torch)
        self.host_t = self.vmm_t = None
        self.host.free()
        if self.vmm is not None:
            self.vmm.free()
