"""Can every program of a persistent MoE launch be resident at once? (two programs per SM, issue 17)

The fused kernels' Linear-2 tiles spin on Linear-1 tiles other programs run, so a launch of more
programs than the GPU holds at once would only end through the bounded spin (error flag, skipped
tiles). With one program per SM that never happens; a schedule built for 2 x 132 programs (so one
program's epilogue overlaps the other's mainloop on the same SM) needs two of them to fit an SM's
registers, shared memory and threads. ``resident_per_sm`` is that arithmetic (pure, tested on the
CPU); ``check_resident`` compiles the launch (``JITFunction.warmup``, no run), reads the compiled
kernel's registers and shared memory, and raises ``InputError`` before a launch that would not fit.
torch and triton are imported inside the functions.
"""

from functools import lru_cache

from xstage.errors import InputError

# SM90 (H100 / H200) per-SM limits, used where the device properties do not name them
SM90_LIMITS = {"regs": 65536, "shared_bytes": 233472, "threads": 2048, "ctas": 32}
RESERVED_SHARED_BYTES = 1024   # the driver's per-CTA shared-memory reserve on SM80+
REG_ALLOC_UNIT = 256           # registers are allocated per warp in units of 256

_checked: dict = {}


def resident_per_sm(n_regs: int, shared_bytes: int, num_warps: int, limits: dict = SM90_LIMITS) -> int:
    """CTAs of a kernel (``n_regs`` per thread, ``shared_bytes`` per CTA, ``num_warps``) one SM holds."""
    per_warp = -(-int(n_regs) * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    by_regs = limits["regs"] // max(per_warp * num_warps, 1)
    by_smem = limits["shared_bytes"] // (int(shared_bytes) + RESERVED_SHARED_BYTES)
    by_threads = limits["threads"] // (32 * num_warps)
    return int(min(by_regs, by_smem, by_threads, limits["ctas"]))


@lru_cache(maxsize=None)
def device_limits(device_index: int = 0) -> tuple:
    """(SM count, per-SM limits) of a CUDA device, SM90 values where torch does not name one."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    limits = {"regs": int(getattr(props, "regs_per_multiprocessor", SM90_LIMITS["regs"])),
              "shared_bytes": int(getattr(props, "shared_memory_per_multiprocessor", SM90_LIMITS["shared_bytes"])),
              "threads": int(getattr(props, "max_threads_per_multi_processor", SM90_LIMITS["threads"])),
              "ctas": SM90_LIMITS["ctas"]}
    return int(props.multi_processor_count), limits


def compiled_resources(compiled) -> tuple:
    """(registers per thread, shared bytes per CTA) of a Triton ``CompiledKernel``."""
    if getattr(compiled, "n_regs", None) is None and hasattr(compiled, "_init_handles"):
        compiled._init_handles()
    return int(compiled.n_regs), int(compiled.metadata.shared)


def check_resident(kernel, args: tuple, opts: dict, programs: int) -> dict | None:
    """Raise ``InputError`` when ``programs`` programs of ``kernel(*args, **opts)`` cannot all be resident.

    Launches of at most one program per SM pass without compiling anything here; the verdict of a
    compiled configuration is cached. Returns {"n_regs", "shared_bytes", "per_sm", "resident"} or None."""
    sms, limits = device_limits()
    if programs <= sms:
        return None
    key = (id(kernel), programs, tuple(sorted((k, v) for k, v in opts.items())))
    if key not in _checked:
        try:
            n_regs, shared = compiled_resources(kernel.warmup(*args, grid=(programs,), **opts))
        except (AttributeError, TypeError):  # a Triton without these fields: the bounded spin still guards
            return None
        per_sm = resident_per_sm(n_regs, shared, int(opts.get("num_warps", 4)), limits)
        _checked[key] = {"n_regs": n_regs, "shared_bytes": shared, "per_sm": per_sm, "resident": per_sm * sms}
    got = _checked[key]
    if programs > got["resident"]:
        raise InputError("programs", programs, f"must be <= {got['resident']} resident at once ({got['per_sm']} "
                         f"per SM x {sms}: {got['n_regs']} registers/thread, {got['shared_bytes']} B shared per "
                         f"program); lower num_stages / BLOCK_M or set maxnreg")
    return got
