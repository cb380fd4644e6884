"""Host side of the Gluon MoE kernel (``gluon.py``): TMA descriptors, the residency check, the launch.

``launch_moe_gluon`` takes ``kernel.launch_moe``'s operands and extras (``tile_log``, ``write_count``,
``spin_limit``) and the Gluon options of ``gluon_args.GLUON_DEFAULTS`` (``place`` too: programs per SM placed
by ``%smid``, ``placement.balanced_placement``). Imports triton: callers import it inside functions.
"""

from xstage.errors import InputError
from xstage.hw.moe.buffers import SPIN_LIMIT, Combine, DeviceLayout, check_logs
from xstage.hw.moe.gluon import _moe_ffn_gluon, gl
from xstage.hw.moe.gluon_args import gluon_options, run_options  # noqa: F401 - run_options re-exported

_resident: dict = {}


def descriptors(x_recv, w1_packed, act, w2, block_m: int, block_n: int, block_k: int) -> tuple:
    """Host TMA descriptors (x, w1, act, w2) of the kernel's four operands (bf16, NVMMA-swizzled blocks)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    a_layout = gl.NVMMASharedLayout.get_default_for([block_m, block_k], gl.bfloat16)
    w_layout = gl.NVMMASharedLayout.get_default_for([block_n, block_k], gl.bfloat16)
    E2I, H = w1_packed.shape[-2:]
    EH, I = w2.shape[0] * w2.shape[1], w2.shape[2]
    return (TensorDescriptor(x_recv, list(x_recv.shape), [H, 1], [block_m, block_k], a_layout),
            TensorDescriptor(w1_packed.view(-1, H), [w1_packed.shape[0] * E2I, H], [H, 1], [block_n, block_k],
                             w_layout),
            TensorDescriptor(act, list(act.shape), [I, 1], [block_m, block_k], a_layout),
            TensorDescriptor(w2.view(-1, I), [EH, I], [I, 1], [block_n, block_k], w_layout))

def check_resident_gluon(args: tuple, opts: dict, programs: int) -> dict:
    """Compile the launch (no run) and raise ``InputError`` unless all ``programs`` CTAs fit at once (the loader
    warp's partition counts: the compiled kernel's warps, not ``num_warps``)."""
    from xstage.hw.moe.residency import compiled_resources, device_limits, resident_per_sm

    key = (programs, tuple(sorted(opts.items())))
    if key not in _resident:
        compiled = _moe_ffn_gluon.warmup(*args, grid=(programs,), **opts)
        n_regs, shared = compiled_resources(compiled)
        sms, limits = device_limits()
        per_sm = resident_per_sm(n_regs, shared, int(compiled.metadata.num_warps), limits)
        _resident[key] = {"n_regs": n_regs, "shared_bytes": shared, "warps": int(compiled.metadata.num_warps),
                          "per_sm": per_sm, "resident": per_sm * sms}
    got = _resident[key]
    if programs > got["resident"]:
        raise InputError("programs", programs, f"must be <= {got['resident']} resident at once ({got})")
    return got


def launch_moe_gluon(x_recv, w1_packed, w2, act, dev: DeviceLayout, combine: Combine, *, tile_log=None,
                     write_count=None, spin_limit: int = SPIN_LIMIT, **options) -> dict:
    """Reset ``l2_full`` and run the Gluon kernel over ``dev``'s schedule into ``combine``; the same operands as
    ``kernel.launch_moe`` (x_recv [rows*BM, H], w1 packed [E, 2I, H], w2 [E, H, I], act [rows*BM, I], bf16),
    ``tile_log`` int64 [T, 8] and ``write_count`` int32 [W, combine_rows, H/BN] as there. ``options``:
    ``gluon_args.GLUON_DEFAULTS`` keys. Returns the residency record of the compiled launch."""
    import torch

    p = dev.layout.problem
    H, I, E, rows = p.hidden, p.intermediate, p.local_experts, dev.layout.recv_rows
    for name, t, shape in (("x_recv", x_recv, (rows, H)), ("w1", w1_packed, (E, 2 * I, H)), ("w2", w2, (E, H, I)),
                           ("act", act, (rows, I))):
        if tuple(t.shape) != shape or not t.is_contiguous() or t.dtype != torch.bfloat16:
            raise InputError(name, (tuple(t.shape), str(t.dtype)), f"must be a contiguous bf16 {shape} tensor")
    if H % 8 or any(ptr % 16 for ptr in combine.pointers):
        raise InputError("hidden/combine buffers", H, "must be a multiple of 8 / 16-byte aligned")
    o = gluon_options(options, H, I, p.block_m, p.block_n)
    spin_limit = check_logs(dev, tile_log, write_count, spin_limit, False)
    place_map, slots, n_sm, per_sm = dev.error, dev.error, 1, 0
    if o["place"]:
        from xstage.hw.moe.residency import device_limits

        n_sm = device_limits()[0]
        if dev.num_programs % n_sm or dev.num_programs < 2 * n_sm:
            raise InputError("gluon.place", o["place"], f"needs k x {n_sm} programs, k >= 2 (got {dev.num_programs})")
        per_sm = dev.num_programs // n_sm
        place_map, slots = dev.placement(n_sm, per_sm)
    args = (*descriptors(x_recv, w1_packed, act, w2, p.block_m, p.block_n, o["block_k"]), act, dev.tiles,
            dev.offsets, dev.l2_full, dev.error, dev.dest_rank, dev.dest_row, dev.weight, combine.table,
            write_count if write_count is not None else dev.error, tile_log if tile_log is not None else dev.error,
            place_map, slots, p.combine_rows, H, I, int(spin_limit), n_sm)
    opts = dict(BLOCK_M=p.block_m, BLOCK_N=p.block_n, BLOCK_K=o["block_k"], STAGES=o["stages"],
                LOADER_REGS=o["loader_regs"], EARLY_ROWS=bool(o["early_rows"]), DIRECT=bool(o["direct_store"]),
                PLACE=per_sm, INSTRUMENT=tile_log is not None, COUNT_WRITES=write_count is not None,
                num_warps=o["num_warps"], maxnreg=o["maxnreg"])
    got = check_resident_gluon(args, opts, dev.num_programs)
    dev.l2_full.zero_()
    if per_sm:
        slots.zero_()
    _moe_ffn_gluon[(dev.num_programs,)](*args, **opts)
    return got
