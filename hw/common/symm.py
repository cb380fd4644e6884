"""Symmetric-memory destinations of the W-rank paths: one process per GPU (torchrun), any W, 1 included.

Each rank allocates one buffer with torch symmetric memory and rendezvouses it with the group; the
handle's ``buffer_ptrs`` are the W peer base addresses (this rank's own at index ``rank``), which the
fused kernels take as their destination table. The same kernels take host-mapped buffers on one GPU
(``xstage.hw.common.hostmap``); nothing else changes. No multicast object is ever created: launchers keep
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and ``NCCL_NVLS_ENABLE=0`` (``init_distributed`` sets them too).
"""

import warnings


def init_distributed():
    """One process per GPU under torchrun (or a single rank without it): (device, rank, world_size),
    NCCL process group initialised and the no-multicast variables set (``targets.init_distributed``)."""
    import torch

    from xstage.hw.common.targets import init_distributed as init

    rank, world = init()
    return torch.device("cuda", torch.cuda.current_device()), rank, world


def symmetric_buffer(shape, dtype, device, group):
    """(local buffer, rendezvous handle, int64 device table of the W peer base addresses).

    Collective: every rank of ``group`` must call it with the same shape and dtype."""
    import torch
    import torch.distributed._symmetric_memory as symm_mem

    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)  # needed by older torch, a no-op later
    if enable is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            enable(group.group_name)
    buf = symm_mem.empty(tuple(shape), dtype=dtype, device=device)
    handle = symm_mem.rendezvous(buf, group)
    table = torch.tensor([int(p) for p in handle.buffer_ptrs], dtype=torch.int64, device=device)
    return buf, handle, table
