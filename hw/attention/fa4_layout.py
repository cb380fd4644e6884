"""The Ulysses receive layout as strided views, for kernels that take an output tensor (FA4's ``out=``).

Rank ``r`` of ``W`` holds ``O_r[M, H, d]``; after the post-attention All-to-All rank ``j`` holds
``D_j[M/W, W·H, d]`` with ``D_j[s − j·M/W, r·H + h] = O_r[s, h]``. Put the W receive buffers one after
another and they form one ``[M, W·H, d]`` array; rank r's share of it is the view
``buf[:, r·H:(r+1)·H]`` — shape ``(M, H, d)``, strides ``(W·H·d, d, 1)``. Any kernel that accepts an
output with those strides (FA4 does: last dim contiguous, other strides multiples of 16 B, 16-B aligned
base) then writes the All-to-All itself: its epilogue stores are the send.

Pure torch views and checks (no CUDA calls): the same code runs on CPU tensors in the tests. The layout's
sizes (``ReceiveLayout``, no GPU library) are ``xstage.sim.workloads.receive_layout``.
"""

from xstage.errors import InputError
from xstage.sim.workloads.receive_layout import TILE_M, ReceiveLayout  # noqa: F401 - re-exported

ALIGN_BYTES = 16  # FA4 validate_output_layout(align_bytes=16) for d < 512


def receive_view(flat, lay: ReceiveLayout):
    """A flat buffer of ``lay.total_bytes`` (any dtype of ``lay.elem_bytes``) as ``[M, W·H, d]``."""
    want = lay.total_bytes // lay.elem_bytes
    if flat.numel() != want:
        raise InputError("receive buffer elements", flat.numel(), f"must be {want} for {lay.label()}")
    return flat.view(lay.seq_len, lay.world_size * lay.heads, lay.head_dim)


def chunk(buf, lay: ReceiveLayout, j: int):
    """Rank ``j``'s receive buffer ``(M/W, W·H, d)`` inside an ``[M, W·H, d]`` array."""
    return buf[j * lay.chunk_rows:(j + 1) * lay.chunk_rows]


def my_heads(dst, lay: ReceiveLayout):
    """This rank's heads of a receive buffer (or of the whole ``[M, W·H, d]``) as FA4's ``(1, rows, H, d)``."""
    return dst[:, lay.rank * lay.heads:(lay.rank + 1) * lay.heads].unsqueeze(0)


def chunk_major_q(q, lay: ReceiveLayout):
    """q ``(1, M, H, d)`` as ``(W, M/W, H, d)``: batch b = destination chunk b (a view)."""
    return q.view(lay.world_size, lay.chunk_rows, lay.heads, lay.head_dim)


def chunk_major_kv(t, lay: ReceiveLayout):
    """k or v ``(1, M, H, d)`` broadcast to ``(W, M, H, d)`` with a stride-0 batch (no copy)."""
    return t.expand(lay.world_size, lay.seq_len, lay.heads, lay.head_dim)


def chunk_major_out(buf, lay: ReceiveLayout):
    """This rank's heads of ``[M, W·H, d]`` as ``(W, M/W, H, d)``: batch b lands in rank b's buffer."""
    view = buf.view(lay.world_size, lay.chunk_rows, lay.world_size * lay.heads, lay.head_dim)
    return view[:, :, lay.rank * lay.heads:(lay.rank + 1) * lay.heads]


def check_out_layout(out, q, v) -> None:
    """FA4's own conditions on ``out=`` (interface.py, cute_dsl_utils.validate_output_layout), as one-line
    InputErrors instead of assertions deep in the library."""
    want = (*q.shape[:-1], v.shape[-1])
    if tuple(out.shape) != tuple(want):
        raise InputError("out shape", tuple(out.shape), f"must be {tuple(want)} (batch, seq, heads, head_dim)")
    if out.dtype != q.dtype:
        raise InputError("out dtype", str(out.dtype), f"must be q's {q.dtype}")
    if out.device != v.device:
        raise InputError("out device", str(out.device), f"must be {v.device}")
    if 0 in out.stride():
        raise InputError("out strides", tuple(out.stride()), "must have no stride 0 (broadcast)")
    if out.stride(-1) != 1:
        raise InputError("out strides", tuple(out.stride()), "must have a contiguous last dim (stride 1)")
    es = out.element_size()
    bad = [s for s in out.stride()[:-1] if (s * es) % ALIGN_BYTES]
    if bad:
        raise InputError("out strides", tuple(out.stride()), f"must be multiples of {ALIGN_BYTES} B "
                         f"({ALIGN_BYTES // es} elements) except the last")
    if out.data_ptr() % ALIGN_BYTES:
        raise InputError("out data_ptr", hex(out.data_ptr()), f"must be {ALIGN_BYTES}-B aligned")


def row_slices(seq_len: int, n: int) -> list:
    """Three reference row slices: the first rows, rows straddling M/2 (not tile-aligned), the last rows."""
    n = max(1, min(n, seq_len // 4))
    mid = seq_len // 2 - n // 2 - 7
    return [(0, n), (mid, mid + n), (seq_len - n, seq_len)]


def check_destinations(parts, lay: ReceiveLayout, atol: float = 1e-3, rtol: float = 1e-2) -> dict:
    """Check what one run wrote into poisoned (NaN) receive buffers.

    ``parts``: (buffer ``(rows, W·H, d)``, global row of its first row, expected ``(M, H, d)``) for every
    buffer the run was to write. ok: every element of this rank's heads written (no NaN left), no element
    outside them touched (still NaN), values within ``atol + rtol·max|expected|`` of the expected output
    (bitwise equality reported beside)."""
    import torch

    lo, hi = lay.rank * lay.heads, (lay.rank + 1) * lay.heads
    unwritten = stray = 0
    worst = amax = 0.0
    bitwise = True
    for buf, row0, want_all in parts:
        mine = buf[:, lo:hi]
        want = want_all[row0:row0 + buf.shape[0]]
        nan_mine = int(torch.isnan(mine).sum())
        unwritten += nan_mine
        stray += (buf.numel() - mine.numel()) - (int(torch.isnan(buf).sum()) - nan_mine)
        bitwise = bitwise and bool(torch.equal(mine, want))
        diff = torch.nan_to_num((mine.float() - want.float()).abs(), nan=0.0)
        worst = max(worst, float(diff.max()))
        amax = max(amax, float(want.float().abs().max()))
    ok = unwritten == 0 and stray == 0 and worst <= atol + rtol * amax
    return {"unwritten": unwritten, "stray": stray, "max_abs_diff": worst, "ref_absmax": amax,
            "bitwise_equal": bitwise, "ok": ok}
