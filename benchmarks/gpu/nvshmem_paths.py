"""The W-rank paths on both symmetric-memory backends at world size 1 (issue 18; nvshmem_puts.sh, PATHS=1).

    python benchmarks/gpu/nvshmem_paths.py OUT.json      # one process, no torchrun (self-PE)

One process allocates each path's destination twice, with torch symmetric memory (``symm.symmetric_buffer``)
and from NVSHMEM's heap (``nvshmem.symmetric_buffer``), and runs the same kernels into both:
  attention  the X-Stage-Fused FlashAttention kernel and Serial (FA-only, then the All-to-All kernel) at
             M = 2048, 3 heads, d = 128 (``hw/attention/dist.py``'s inputs and float32 reference)
  moe        the fused MoE kernel's two schedules with the Combine through the symmetric table, the first
             configuration of ``hw/moe/dist.py``'s checks (bf16, 2048 / 512 / 1000 tokens, balanced)
Every destination is poisoned (NaN) first and checked against the float32 reference (the benches' checks), and
the two backends' results are compared bit for bit (bf16 words as int16), with a second torch run as the
control that the kernels themselves are deterministic. Writes the JSON summary to OUT.json; exit 1 on any
failure.
"""

import json
import sys
import time


def bits_equal(a, b) -> dict:
    import torch
    x, y = a.contiguous().view(torch.int16), b.contiguous().view(torch.int16)
    return {"identical": bool(torch.equal(x, y)), "differing_elements": int((x != y).sum()), "elements": x.numel()}


def attention(device, group, M: int = 2048) -> dict:
    import torch

    from xstage.hw.attention import kernel as A
    from xstage.hw.attention.config import AttentionConfig
    from xstage.hw.attention.dist import _qkv, check_buffer, reference_dest, symmetric_destinations

    cfg = AttentionConfig(M, 3, 128, 1)
    q, k, v = _qkv(cfg, 0, device, seed=M)
    ref = reference_dest(cfg, device, seed=M)
    out = torch.empty_like(q)
    got, checks = {}, []
    for backend in ("torch", "nvshmem", "torch"):
        buf, _handle, table = symmetric_destinations(cfg, device, group, backend)
        for name, fn in (("fused", lambda: A.launch_fa(q, k, v, cfg, dest_table=table)),
                         ("serial", lambda: A.launch_a2a(A.launch_fa(q, k, v, cfg, out=out), table, cfg))):
            buf.fill_(float("nan"))
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
            key = (backend if (backend, name) not in got else "torch-rerun", name)
            checks.append({"backend": key[0], "variant": name, **check_buffer(buf, ref)})
            got[key] = buf.clone()
    same = {name: {"nvshmem_vs_torch": bits_equal(got[("nvshmem", name)], got[("torch", name)]),
                   "torch_rerun_vs_torch": bits_equal(got[("torch-rerun", name)], got[("torch", name)])}
            for name in ("fused", "serial")}
    return {"config": cfg.label(), "checks": checks, "bitwise": same}


def moe(device, group) -> dict:
    import torch

    from xstage.hw.common import nvshmem as nvs
    from xstage.hw.common.symm import symmetric_buffer as torch_buffer
    from xstage.hw.moe import dist as md
    from xstage.hw.moe.ep_inputs import expected_combine
    from xstage.hw.moe.setup import num_sms
    from xstage.records.moe import SCHEDULES
    from xstage.sim.workloads.ep import EpProblem

    h, i, t, r, prec = md.CHECKS[0]
    p = EpProblem(h, i, t, routing=r, precision=prec, world_size=1, rank=0, seed=t)
    sms, kw = num_sms(False), dict(md.KERNEL_KW)
    expected = expected_combine(p, device)
    got, checks = {}, []
    for backend in ("torch", "nvshmem", "torch"):
        alloc = nvs.symmetric_buffer if backend == "nvshmem" else torch_buffer
        pool, handle, table = alloc((p.combine_rows * h,), torch.bfloat16, device, group)
        peers = md.Peers(pool, table, handle.buffer_ptrs).view(p.combine_rows, h)
        comm = md.Comm(handle)
        s = md.rank_setup(p, sms, peers, "regen")
        for sc in SCHEDULES:
            key = (backend if (backend, sc) not in got else "torch-rerun", sc)
            res = md.check_remote(s, lambda sc=sc: s.run(sc, True, kw), peers, comm, expected, sc)
            checks.append({"backend": key[0], **res})
            got[key] = peers.buffer.clone()
    same = {sc: {"nvshmem_vs_torch": bits_equal(got[("nvshmem", sc)], got[("torch", sc)]),
                 "torch_rerun_vs_torch": bits_equal(got[("torch-rerun", sc)], got[("torch", sc)])}
            for sc in SCHEDULES}
    return {"config": p.label(), "checks": checks, "bitwise": same}


def main(out_path: str) -> int:
    import torch.distributed as dist

    from xstage.hw.common import nvshmem as nvs
    from xstage.hw.common.symm import init_distributed
    from xstage.provenance import provenance

    t0 = time.time()
    device, rank, world = init_distributed()
    result = {"world_size": world, "provenance": provenance(with_gpu=True)}
    status = 0
    for name, fn in (("moe", moe), ("attention", attention)):
        t = time.time()
        try:
            result[name] = fn(device, dist.group.WORLD)
        except Exception as err:  # noqa: BLE001 - report it and go on with the other path
            import traceback
            traceback.print_exc()
            result[name] = {"error": repr(err)}
        part = result[name]
        ok = "error" not in part and all(c.get("ok") for c in part["checks"]) and all(
            v["nvshmem_vs_torch"]["identical"] for v in part["bitwise"].values())
        part.update(ok=ok, wall_s=round(time.time() - t, 1))
        status |= 0 if ok else 1
        print(f"{name}: ok={ok} ({part['wall_s']} s) " + json.dumps(part.get("bitwise", part.get("error"))), flush=True)
    nvs.finalize()
    result["wall_s"] = round(time.time() - t0, 1)
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
