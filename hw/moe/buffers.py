"""Device-side state of one fused MoE launch, shared by both precisions; torch only (no triton).

``Combine``: the W Combine buffers ``[combine_rows, hidden]`` bf16 and their device table of base
addresses (own rank's in device memory, the W-1 others host-mapped pinned buffers, or all in device
memory with ``remote=False``). ``DeviceLayout``: a dispatch layout's per-row arrays and a schedule's
tile arrays on the device. ``TILE_LOG_FIELDS``: one row of the instrumented kernels' tile log.
``check_logs``: the tile-log and write-count checks both launchers share.
"""

import numpy as np

from xstage.errors import InputError
from xstage.hw.moe.refs import compare
from xstage.sim.workloads.moe_layout import DispatchLayout

TILE_LOG_FIELDS = ("program", "sm", "seq", "wait_start_ns", "mainloop_start_ns", "mainloop_end_ns",
                   "issue_start_ns", "issue_end_ns")
SPIN_LIMIT = 1 << 22
INTERPRETER_SPIN_LIMIT = 64  # each poll is a Python call in the Triton interpreter


class Combine:
    """The W Combine buffers ``[combine_rows, hidden]`` bf16 of one problem and their pointer table."""

    def __init__(self, layout: DispatchLayout, device, *, remote: bool = True):
        import torch

        from xstage.hw.common.hostmap import pinned_buffer

        p = layout.problem
        device = torch.device(device)
        self.layout, self.remote = layout, remote and device.type == "cuda"
        self.buffers, pointers = [], []
        shape = (p.combine_rows, p.hidden)
        for r in range(p.world_size):
            if r == p.rank or not self.remote:
                t = torch.empty(shape, dtype=torch.bfloat16, device=device)
                ptr = t.data_ptr()
            else:
                t, ptr = pinned_buffer(shape, torch.bfloat16)
            self.buffers.append(t)
            pointers.append(int(ptr))
        self.pointers = pointers
        self.table = torch.tensor(pointers, dtype=torch.int64, device=device)

    def poison(self) -> None:
        for b in self.buffers:
            b.fill_(float("nan"))

    def gather(self, device) -> "object":
        """This GPU's rows in receive order, float32 ``[recv_rows, hidden]`` (padding rows zero)."""
        import torch

        lay = self.layout
        out = torch.zeros((lay.recv_rows, lay.problem.hidden), dtype=torch.float32, device=device)
        v = np.flatnonzero(lay.valid)
        for r, buf in enumerate(self.buffers):
            sel = v[lay.dest_rank[v] == r]
            if len(sel):
                rows = torch.as_tensor(lay.dest_row[sel].astype(np.int64), device=device)
                out[torch.as_tensor(sel, device=device)] = buf.to(device).index_select(0, rows).float()
        return out

    def check(self, ref) -> dict:
        """Compare with ``ref`` (float32 ``[recv_rows, hidden]``); count unwritten and stray elements
        (stray: non-poison elements outside this GPU's rows)."""
        import torch

        lay = self.layout
        got = self.gather(ref.device)
        valid = torch.as_tensor(lay.valid, device=ref.device)
        unwritten = int(torch.isnan(got[valid]).sum())
        written_total = sum(int((~torch.isnan(b.to(ref.device))).sum()) for b in self.buffers)
        stray = written_total - (int(valid.sum()) * lay.problem.hidden - unwritten)
        res = compare(got[valid], ref[valid])
        return {**res, "unwritten": unwritten, "stray": stray,
                "ok": unwritten == 0 and stray == 0 and res["ok"]}


class DeviceLayout:
    """The layout's per-row arrays and a schedule's tile arrays as device tensors."""

    def __init__(self, layout: DispatchLayout, schedule_arrays: dict, device):
        import torch

        self.layout = layout
        self.dest_rank = torch.as_tensor(layout.dest_rank, device=device)
        self.dest_row = torch.as_tensor(layout.dest_row, device=device)
        self.weight = torch.as_tensor(layout.weight, device=device)
        tiles = np.ascontiguousarray(schedule_arrays["tiles"], dtype=np.int32)
        offsets = np.ascontiguousarray(schedule_arrays["sm_offsets"], dtype=np.int32)
        if len(tiles) and int(tiles[:, 6].max()) >= layout.grid.rows:
            raise InputError("schedule rows", int(tiles[:, 6].max()), f"must be < the layout's {layout.grid.rows} rows")
        self.tiles_np = tiles
        self.tiles = torch.as_tensor(tiles, device=device)
        self.offsets = torch.as_tensor(offsets, device=device)
        self.num_programs = len(offsets) - 1
        self.l2_full = torch.zeros(max(layout.grid.rows, 1), dtype=torch.int32, device=device)
        self.error = torch.zeros(1, dtype=torch.int32, device=device)
        self._placed = {}

    def placement(self, n_sm: int, per_sm: int) -> tuple:
        """(program of each SM slot, int32 [n_sm * per_sm]; per-SM slot counters, int32 [n_sm]) on the device:
        ``placement.balanced_placement`` of this schedule's programs (cached; the launcher zeroes the counters)."""
        import torch

        from xstage.hw.moe.placement import balanced_placement, program_work

        key = (int(n_sm), int(per_sm))
        if key not in self._placed:
            p = self.layout.problem
            work = program_work(self.tiles_np, self.offsets.cpu().numpy(), p.hidden, p.intermediate)
            place = balanced_placement(work, *key)
            self._placed[key] = (torch.as_tensor(place, device=self.tiles.device),
                                 torch.zeros(int(n_sm), dtype=torch.int32, device=self.tiles.device))
        return self._placed[key]


def check_logs(dev: DeviceLayout, tile_log, write_count, spin_limit: int, interpreted: bool) -> int:
    """The tile-log and write-count checks both launchers share; returns the spin limit to launch with
    (fewer polls in the interpreter)."""
    p = dev.layout.problem
    if tile_log is not None and tuple(tile_log.shape) != (len(dev.tiles_np), len(TILE_LOG_FIELDS)):
        raise InputError("tile_log.shape", tuple(tile_log.shape), f"must be ({len(dev.tiles_np)}, 8)")
    if write_count is not None and tuple(write_count.shape) != (p.world_size, p.combine_rows, p.hidden // p.block_n):
        raise InputError("write_count.shape", tuple(write_count.shape), "must be (W, combine_rows, H/BN)")
    return INTERPRETER_SPIN_LIMIT if interpreted and spin_limit == SPIN_LIMIT else spin_limit
