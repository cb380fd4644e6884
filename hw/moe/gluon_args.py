"""Options of the warp-specialised Gluon MoE kernel (``gluon.py``), checked without torch or triton.

``gluon_options`` merges a user's options over ``GLUON_DEFAULTS`` and checks each against the problem
(one line naming the field on bad input: ``InputError``); ``stage_bytes`` / ``shared_estimate`` are the
shared memory the stage ring needs (the compiled kernel's own figure decides residency on the GPU).
"""

from xstage.errors import InputError

# BLOCK_K 64, three stages (2 x 48 KB ring + epilogue scratch: two CTAs per SM), one consumer warpgroup
# (4 warps: a 128 x 128 fp32 accumulator, 128 registers of the 232 it gets), one loader warp at 24 registers,
# 128 registers per thread at launch (8 warps: two CTAs per SM).
# early_rows: a Linear-2 tile loads its rows' destinations before its mainloop; direct_store: its epilogue stores
# from the accumulator's layout (no shared-memory round trip); place: each SM's programs by %smid (a heavy and a
# light one, ``placement``). All 0 / 1; measured (data/moe/gluon-2c64ee5): early_rows and direct_store lose.
GLUON_DEFAULTS = {"block_k": 64, "stages": 3, "num_warps": 4, "loader_regs": 24, "maxnreg": 128, "early_rows": 0,
                  "direct_store": 0, "place": 0}
_RANGES = {"block_k": (16, 128), "stages": (2, 8), "num_warps": (4, 8), "loader_regs": (24, 256),
           "maxnreg": (24, 256), "early_rows": (0, 1), "direct_store": (0, 1), "place": (0, 1)}


def gluon_options(opts: dict | None, hidden: int, intermediate: int, block_m: int, block_n: int) -> dict:
    """``opts`` over ``GLUON_DEFAULTS``, checked for a problem of ``hidden`` / ``intermediate`` at tiles
    ``block_m`` x ``block_n``; the launch options of ``gluon.launch_moe_gluon``."""
    out = dict(GLUON_DEFAULTS)
    for key, value in (opts or {}).items():
        if key not in GLUON_DEFAULTS:
            raise InputError(f"gluon.{key}", value, f"must be one of {sorted(GLUON_DEFAULTS)}")
        if isinstance(value, bool) and _RANGES[key] == (0, 1):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"gluon.{key}", value, "must be an integer")
        lo, hi = _RANGES[key]
        if not lo <= value <= hi:
            raise InputError(f"gluon.{key}", value, f"must be in [{lo}, {hi}]")
        out[key] = value
    bk, warps = out["block_k"], out["num_warps"]
    if bk & (bk - 1) or hidden % bk or intermediate % bk:
        raise InputError("gluon.block_k", bk, f"must be a power of two dividing hidden={hidden} and "
                                              f"intermediate={intermediate}")
    if warps not in (4, 8):
        raise InputError("gluon.num_warps", warps, "must be 4 or 8 (one or two consumer warpgroups)")
    if block_m % (16 * warps) or block_n not in (64, 128, 256) or hidden % block_n:
        raise InputError("gluon.tiles", (block_m, block_n), f"must have BLOCK_M a multiple of {16 * warps} and "
                                                            f"BLOCK_N 64 / 128 / 256 dividing hidden={hidden}")
    for key in ("loader_regs", "maxnreg"):
        if out[key] % 8:
            raise InputError(f"gluon.{key}", out[key], "must be a multiple of 8 (setmaxnreg)")
    return out


def stage_bytes(block_m: int, block_n: int, block_k: int, elem_bytes: int = 2) -> int:
    """Shared bytes of one stage: the A tile [BM, BK] and the weight tile [BN, BK]."""
    return (block_m + block_n) * block_k * elem_bytes


def shared_estimate(block_m: int, block_n: int, block_k: int, stages: int) -> int:
    """Shared bytes of the stage ring and its 2 x ``stages`` mbarriers (the epilogue scratch comes on top)."""
    return stages * stage_bytes(block_m, block_n, block_k) + 2 * stages * 8


def run_options(kw: dict) -> dict:
    """The Gluon options inside a bench's kernel options (``--short-k-kernel '{"gluon": true, "gluon_stages": 3}'``):
    every ``gluon_<key>`` as ``<key>`` (the Triton options beside them are the kernel it replaces: ``bench.alt_kw``)."""
    return {k[len("gluon_"):]: v for k, v in kw.items() if k.startswith("gluon_")}


def check_run_keys(kw: dict, flag: str) -> None:
    """``InputError`` unless every ``gluon_<key>`` of a ``--short-k-kernel`` / ``--long-k-kernel`` object names a
    ``GLUON_DEFAULTS`` key with a value in its range (what depends on the problem is checked at the launch)."""
    for k, v in kw.items():
        if not k.startswith("gluon_"):
            continue
        key = k[len("gluon_"):]
        lo, hi = _RANGES.get(key, (None, None))
        if key not in GLUON_DEFAULTS or isinstance(v, bool) and hi != 1 or not isinstance(v, int) \
                or not lo <= int(v) <= hi:
            raise InputError(f"{flag} {k}", v, f"must be gluon_ + one of {sorted(GLUON_DEFAULTS)} with an integer "
                                               "in its range (gluon_args._RANGES)")
