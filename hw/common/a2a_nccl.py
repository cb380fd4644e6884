"""Serial-best's transfer on W GPUs: NCCL ``all_to_all_single`` of one rank's attention output and
the local permute into the sequence-partitioned layout D_j (M/W, W*H, d) of ``xstage.sim.workloads.a2a_layout``
(pure torch; the fused kernel writes the same layout with remote stores).
"""

from xstage.errors import InputError


def send_rows(o):
    """The send buffer of ``all_to_all_single``: ``o`` (M, H, d) contiguous, so that rank j's rows
    [j*M/W, (j+1)*M/W) are the j-th of W equal chunks (a copy only when ``o`` is a strided view)."""
    if o.dim() != 3:
        raise InputError("o.shape", tuple(o.shape), "must be (M, H, d)")
    return o.contiguous()


def permute_received(recv, dest):
    """``all_to_all_single``'s output → the sequence-partitioned layout, in place into ``dest``.

    ``recv`` (M, H, d) holds W chunks of (M/W, H, d), sender r's rows of this rank's tokens at
    chunk r; ``dest`` is D_j (M/W, W*H, d) with ``D_j[s, r*H + h] = recv[r*M/W + s, h]``."""
    chunk, heads_total, d = dest.shape
    M, H, d_in = recv.shape
    if d_in != d or M % chunk or heads_total != (M // chunk) * H:
        raise InputError("recv/dest shapes", (tuple(recv.shape), tuple(dest.shape)),
                         "must be (M, H, d) and (M/W, W*H, d)")
    W = M // chunk
    dest.view(chunk, W, H, d).copy_(recv.view(W, chunk, H, d).transpose(0, 1))
    return dest


def nccl_all_to_all(o, recv, dest, group=None) -> None:
    """Serial-best's transfer of one rank's output ``o`` (M, H, d): NCCL all_to_all_single into
    ``recv`` (M, H, d), then ``permute_received`` into ``dest`` (M/W, W*H, d)."""
    import torch.distributed as dist

    dist.all_to_all_single(recv, send_rows(o), group=group)
    permute_received(recv, dest)
