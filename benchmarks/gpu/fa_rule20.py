"""What moves the fused launch's time between blocks (issue 15 item 5, rule 20;
``docs/calibration/attention-rule20.md``; pre-registration ``data/attention-extra/rule20-preregistration.md``, plan
``fa-rule20-plan.json`` beside it), and rule 21's instrument (``data/attention-extra/rule21-preregistration.md``, plan
``fa-rule21-plan.json``: the ``keep`` arm with an ``hbm`` control arm, warm-up pairs and a seeded pair order).

Rule 19's instrument (plain builds, CUDA graphs, FA-only and ``fused_wb_split`` in alternating pairs) agrees with
itself inside a block but not between two blocks seconds apart, and the moving launch is the fused one. Here every
point of the plan runs many short blocks, interleaved in rounds across the points and the plan's arms (``"arms"``;
without it rule 20's three: keep, recapture, fresh), so that the block-to-block spread of each arm can be set
against the others and against what was recorded beside each block:

    keep       the graphs captured once per point, the same host-mapped destination buffer in every block
    recapture  fresh graphs captured in every block (rule 19's shape), the same buffer as ``keep``
    fresh      the graphs captured once per point, a newly allocated destination buffer in every block (its pointers
               written into the captured graph's pointer table; every earlier buffer is kept alive, so the pinned
               allocator hands out new pages)
    hbm        the control: graphs of FA-only and ``split_hbm`` (the same split build into device memory, no host
               stores) captured once per point; no poison, no probe; it runs in ``"hbm_rounds"`` of the rounds,
               spread evenly (``round_arms``: every other round for 8 of 16)

Per round r, per point, per arm (order rotated by the point's index and the rounds run so far with the same arms):
for ``keep`` / ``recapture`` poison the block's destinations and one untimed fused launch; for ``fresh`` a new
buffer and its check (float32 reference, every element written, no stray element); then ``"warm_pairs"`` (default
1) untimed pairs (FA-only then the arm's other build: direct launches before the timing with ``"warm": "direct"``,
the default; with ``"in_stream"`` queued by ``paired_differences`` after its host-queueing wait, right before the
timed pairs, so that the GPU reaches them from back-to-back launches), then ``timing.paired_differences`` (the
plan's pairs, ``raw=`` every launch's event time, ``marks=`` the block's host start and end for the nvidia-smi trace;
the order alternating, or with ``"order": "random"`` a balanced random order seeded per block by
``block_seed``, the seed in the block's row), then, but for ``hbm``, the link probe: the same bytes copied by the
copy engine into the same destinations (``refs.ce_transfer``, ``PROBE_REPS`` timed copies), and the block buffer's
page placement (``page_runs``: physical frame runs from /proc/self/pagemap, root only). The point's setup checks
FA-only and the fused build into the ``keep`` buffer, as rule 19 does (``fa_rule19.builds`` / ``check_build``), and
``split_hbm`` into device memory where the plan has the ``hbm`` arm; the same checks run again after the last round.
Rounds start while ``--budget-s`` is left.

Records under ``--out`` (``write_run``): ``rule20-pairs.parquet`` (one row per pair: point, arm, round, slot, variant,
pair, base_first, ``fa(us)``, ``other(us)``, ``diff(us)``), ``rule20-blocks.parquet`` (one row per block: host start
/ end, probe times, buffer address and page runs, check, warm pairs, order seed), ``rule20-meta.json`` (plan, the
resolved settings, checks, compile stats, NUMA nodes, provenance).

    python benchmarks/gpu/fa_rule20.py --plan data/attention-extra/fa-rule20-plan.json --out $OUT --budget-s 120
    python benchmarks/gpu/fa_rule20.py --plan data/attention-extra/fa-rule21-plan.json --out $OUT --budget-s 420
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from xstage.errors import InputError, exit_with, require_int  # noqa: E402

ARMS = ("keep", "recapture", "fresh")               # rule 20's arms: a plan without "arms" runs these
ALL_ARMS = ARMS + ("hbm",)
ORDERS = ("alternate", "random")
WARM = ("direct", "in_stream")                     # where the untimed warm pairs run (plan_settings)
# the block record's columns were spelt host_start_s, probe_us, ... in the call 71a2b52-rule20; renamed after it to the
# records' name(unit) rule (values unchanged; data/attention-runs/71a2b52-rule20/README.md)
PROBE_REPS = 4
PAGE = 4096
PAIR_COLUMNS = ["M", "heads", "head_dim", "block_n", "arm", "round", "slot", "variant", "pair", "base_first", "base_us",
                "other_us"]


def plan_settings(plan: dict) -> dict:
    """The plan's instrument settings, checked before anything runs: ``arms`` (default rule 20's three), ``rounds``,
    ``hbm_rounds`` (default every round), ``warm_pairs`` (default 1), ``warm`` (where they run: "direct", the
    default, launched before the timing as rule 20 did, or "in_stream", queued by ``paired_differences`` after its
    host-queueing wait, right before the timed pairs), ``order`` ("alternate", the default, or "random"); an
    ``InputError`` names the first bad field."""
    if not plan.get("points"):
        raise InputError("points", plan.get("points"), "must list at least one point")
    rounds = require_int("rounds", plan.get("rounds"), minimum=1)
    arms = plan.get("arms", list(ARMS))
    if not arms or len(set(arms)) != len(arms) or any(a not in ALL_ARMS for a in arms):
        raise InputError("arms", arms, f"must be distinct names among {list(ALL_ARMS)}")
    warm = plan.get("warm", "direct")
    if warm not in WARM:
        raise InputError("warm", warm, f"must be one of {list(WARM)}")
    order = plan.get("order", "alternate")
    if order not in ORDERS:
        raise InputError("order", order, f"must be one of {list(ORDERS)}")
    return {"arms": list(arms), "rounds": rounds,
            "hbm_rounds": require_int("hbm_rounds", plan.get("hbm_rounds", rounds), minimum=1, maximum=rounds),
            "warm_pairs": require_int("warm_pairs", plan.get("warm_pairs", 1), minimum=0), "warm": warm,
            "order": order,
            "order_seed": "block_seed: point seed x 10000 + round x 10 + arm index (keep 0, recapture 1, fresh 2, "
                          "hbm 3)" if order == "random" else None}


def round_arms(settings: dict) -> list:
    """Per round, the arms that run in it (the plan's order): every arm in every round, but ``hbm`` only in rounds
    floor(k x rounds / hbm_rounds), k = 0 .. hbm_rounds - 1 (spread evenly: every other round for 8 of 16)."""
    rounds = settings["rounds"]
    hbm = {k * rounds // settings["hbm_rounds"] for k in range(settings["hbm_rounds"])}
    return [[a for a in settings["arms"] if a != "hbm" or r in hbm] for r in range(rounds)]


def block_seed(point_seed: int, arm: str, rnd: int) -> int:
    """The seed of one block's pair order: point seed x 10000 + round x 10 + the arm's index in ``ALL_ARMS``."""
    return int(point_seed) * 10_000 + int(rnd) * 10 + ALL_ARMS.index(arm)


def pair_order(order: str, seed: int, pairs: int) -> list | None:
    """``paired_differences``' ``order``: None for "alternate" (its own alternation); for "random" a random
    permutation, seeded, of ceil(pairs / 2) base-first pairs and floor(pairs / 2) fused-first ones (both orders in
    every block, as ``E_bal`` and the gap need)."""
    if order == "alternate":
        return None
    base_first = np.arange(pairs) < (pairs + 1) // 2
    return [bool(x) for x in np.random.default_rng(seed).permutation(base_first)]


def pfn_runs(pfns) -> dict:
    """Physical placement of a buffer from its pages' frame numbers in virtual order (0 = not readable): the number
    of runs of physically consecutive frames, the longest run (pages) and the share of pages in runs of >= 512 pages
    (2 MiB)."""
    f = np.asarray(pfns, dtype=np.int64)
    if f.size == 0 or not f.any():
        return {"pages": int(f.size), "readable": 0, "runs": None, "longest_run": None, "share_in_2M_runs": None}
    breaks = np.flatnonzero((np.diff(f) != 1) | (f[1:] == 0) | (f[:-1] == 0)) + 1
    lengths = np.diff(np.concatenate([[0], breaks, [f.size]]))
    return {"pages": int(f.size), "readable": int((f != 0).sum()), "runs": int(lengths.size),
            "longest_run": int(lengths.max()), "share_in_2M_runs": float(lengths[lengths >= 512].sum() / f.size)}


def page_runs(ptr: int, nbytes: int, pagemap: str = "/proc/self/pagemap") -> dict:
    """``pfn_runs`` of the pages of [ptr, ptr + nbytes) (frame numbers read only as root; else all unreadable)."""
    first, last = ptr // PAGE, (ptr + nbytes - 1) // PAGE
    try:
        with open(pagemap, "rb") as fh:
            fh.seek(first * 8)
            raw = np.frombuffer(fh.read((last - first + 1) * 8), dtype=np.uint64)
    except OSError:
        raw = np.zeros(last - first + 1, dtype=np.uint64)
    present = (raw >> np.uint64(63)) & np.uint64(1)
    pfn = (raw & np.uint64((1 << 55) - 1)) * present
    return pfn_runs(pfn.astype(np.int64))


def numa_nodes() -> dict:
    """The machine's NUMA nodes and the GPUs' PCI NUMA nodes, as sysfs lists them."""
    nodes = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    gpus = {}
    for dev in Path("/sys/bus/pci/devices").glob("*"):
        try:
            if (dev / "vendor").read_text().strip() == "0x10de" and (dev / "class").read_text().startswith("0x03"):
                gpus[dev.name] = (dev / "numa_node").read_text().strip()
        except OSError:
            continue
    return {"nodes": nodes, "gpu_numa_node": gpus}


def probe(b: dict, dests) -> list:
    """``PROBE_REPS`` copy-engine transfers of the FA output's bytes into ``dests`` (the fused kernel's bytes and
    pattern over the copy engine), each timed with events (us)."""
    import torch

    from xstage.hw.attention.refs import ce_transfer
    from xstage.hw.common.timing import device

    if device() == "cpu":                       # dry run under the interpreter: nothing to time
        return []
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(PROBE_REPS)]
    for s, e in ev:
        s.record()
        ce_transfer(b["out"], dests)
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in ev]


class Point:
    """One point's builds, checks and per-arm graphs (module doc); ``arms`` the plan's."""

    def __init__(self, cfg, seed: int, arms=ARMS):
        from fa_rule19 import builds, check_build, compile_stats
        from xstage.hw.attention import kernel as A
        from xstage.hw.common.timing import capture

        self.cfg, self.seed = cfg, seed
        self.b = b = builds(cfg, seed)
        self.checked = ("fa", "fused_wb_split") + (("split_hbm",) if "hbm" in arms else ())
        self.checks = [check_build(cfg, b, name) for name in self.checked]
        self.stats = {name: compile_stats(A, cfg if name == "fa" else b["sc"], name != "fa")
                      for name in ("fa", "fused_wb_split")}          # split_hbm is the fused_wb_split build
        q, k, v, sc = b["q"], b["k"], b["v"], b["sc"]
        self.fresh_table = b["dests"].table.clone()
        self.fused_fresh = lambda: A.launch_fa(q, k, v, sc, dest_table=self.fresh_table)
        self.graphs = {}
        for arm, other in (("keep", b["fns"]["fused_wb_split"]), ("fresh", self.fused_fresh),
                           ("hbm", b["fns"]["split_hbm"])):
            if arm in arms:
                self.graphs[arm] = (capture(b["fns"]["fa"])[0], capture(other)[0])
        self.fresh_buffers = []

    @property
    def tag(self) -> dict:
        return {"M": self.cfg.seq_len, "heads": self.cfg.heads, "head_dim": self.cfg.head_dim,
                "block_n": self.cfg.block_n}

    def block(self, arm: str, n_pairs: int, warm_pairs: int = 1, order: list | None = None,
              warm: str = "direct") -> tuple:
        """(pair rows, block row, check) of one block of ``arm`` (module doc)."""
        from xstage.hw.common.timing import device, paired_differences, sync

        b, fns = self.b, self.b["fns"]
        check, dests, alloc_s = None, None, None
        if arm == "fresh":
            from fa_rule19 import check_build
            from xstage.hw.attention import kernel as A

            t = time.time()
            dests = A.Destinations.emulated(self.cfg.layout, device())
            self.fresh_buffers.append(dests)                 # kept alive: the next one gets new pages
            self.fresh_table.copy_(dests.table)
            alloc_s = time.time() - t
            check = check_build(self.cfg, b, "fused_wb_split", fn=self.fused_fresh, dests=dests)
            fused = self.fused_fresh
        elif arm == "hbm":
            fused = fns["split_hbm"]                         # no host stores: nothing to poison or probe
        else:
            dests = b["dests"]
            dests.poison()
            fns["fused_wb_split"]()
            fused = fns["fused_wb_split"]
        for _ in range(warm_pairs if warm == "direct" else 0):
            fns["fa"]()
            fused()
        sync()
        in_stream = warm_pairs if warm == "in_stream" else 0
        name = "split_hbm" if arm == "hbm" else "fused_wb_split"
        raw, marks = [], []
        if arm == "recapture":
            paired_differences(fns["fa"], {name: fused}, pairs=n_pairs, raw=raw, marks=marks, order=order,
                               warm=in_stream)
        else:
            base, other = self.graphs[arm]
            paired_differences(base, {name: other}, pairs=n_pairs, raw=raw, marks=marks, order=order,
                               capture_fn=lambda fn: (fn, "graph"), warm=in_stream)
        t_probe = time.time()
        probe_us = [] if dests is None else probe(b, dests)
        host = [] if dests is None else [x for x in dests.buffers if not x.is_cuda]
        pages = [page_runs(x.data_ptr(), x.numel() * x.element_size()) for x in host]
        row = {"host_start(s)": marks[0]["host_start_s"], "host_end(s)": marks[0]["host_end_s"],
               "probe_start(s)": t_probe, "probe(us)": probe_us,
               "probe_median(us)": float(np.median(probe_us)) if probe_us else None,
               "buffer_ptr": hex(host[0].data_ptr()) if host else None, "alloc(s)": alloc_s,
               "pages": int(sum(p["pages"] for p in pages)),
               "page_runs": sum(p["runs"] or 0 for p in pages) if pages and pages[0]["runs"] is not None else None,
               "share_in_2M_runs": float(np.mean([p["share_in_2M_runs"] for p in pages]))
               if pages and pages[0]["share_in_2M_runs"] is not None else None,
               "check_ok": None if check is None else bool(check["ok"]),
               "check_rel_err": None if check is None else check.get("rel_err")}
        return raw, row, check

    def final_checks(self) -> list:
        from fa_rule19 import check_build

        return [dict(check_build(self.cfg, self.b, name), when="after the rounds") for name in self.checked]


def sweep(points: list, pairs_per_block: list, settings: dict, budget_s: float, meta: dict, pair_rows: list,
          block_rows: list, save=lambda: None, log=print, t0: float | None = None) -> None:
    """The rounds (module doc): per round, per point, the round's arms (``round_arms``) rotated by the point's index
    and the earlier rounds with the same arms; each block's pair rows and block row appended, fresh buffers' checks to
    ``meta["checks"]``, ``meta["rounds_done"]`` counted and ``save()`` after every round. No round starts
    ``budget_s`` seconds after ``t0`` (default: now) or later."""
    t0 = time.time() if t0 is None else t0
    turns = {}
    for r, arms in enumerate(round_arms(settings)):
        if time.time() - t0 > budget_s:
            log(f"budget: {time.time() - t0:.0f} s > {budget_s:.0f} s; rounds from {r} left out")
            break
        turn = turns.get(tuple(arms), 0)
        turns[tuple(arms)] = turn + 1
        line = []
        for i, (pt, n_pairs) in enumerate(zip(points, pairs_per_block)):
            k = (turn + i) % len(arms)
            for j, arm in enumerate(arms[k:] + arms[:k]):
                seed = block_seed(pt.seed, arm, r)
                order = pair_order(settings["order"], seed, n_pairs)
                raw, row, check = pt.block(arm, n_pairs, settings["warm_pairs"], order, settings["warm"])
                where = {**pt.tag, "arm": arm, "round": r, "slot": j}
                pair_rows += [dict(x, **where) for x in raw]
                block_rows.append({**where, **row, "pairs": len(raw), "warm_pairs": settings["warm_pairs"],
                                   "warm": settings["warm"],
                                   "order_seed": None if order is None else seed})
                if check is not None:
                    meta["checks"].append(dict(check, **where, when="fresh buffer"))
                d = [x["other_us"] - x["base_us"] for x in raw]
                line.append(f"{pt.cfg.seq_len}:{pt.cfg.heads} {arm[:4]} {np.median(d) if d else float('nan'):.0f}")
        meta["rounds_done"] = r + 1
        save()
        log(f"round {r} ({time.time() - t0:.0f} s): " + "; ".join(line))


def write_run(outdir: Path, pair_rows: list, block_rows: list, meta: dict) -> None:
    """The run's three records (module doc), written over the previous ones: rule20-pairs.parquet,
    rule20-blocks.parquet and rule20-meta.json (``meta`` with its "args" and "provenance")."""
    import pandas as pd

    from xstage.records import atomic_write_text, save_records

    info = {"config": meta["args"], "provenance": meta["provenance"]}
    tbl = pd.DataFrame(pair_rows, columns=PAIR_COLUMNS)
    tbl = tbl.assign(**{"fa(us)": tbl["base_us"], "other(us)": tbl["other_us"],
                        "diff(us)": tbl["other_us"] - tbl["base_us"]})
    save_records(outdir / "rule20-pairs.parquet", "summary", tbl.drop(columns=["base_us", "other_us"]), info,
                 table="frame", overwrite=True)
    blk = pd.DataFrame(block_rows)
    if "probe(us)" in blk:
        blk["probe(us)"] = blk["probe(us)"].map(json.dumps)
    save_records(outdir / "rule20-blocks.parquet", "summary", blk, info, table="frame", overwrite=True)
    atomic_write_text(outdir / "rule20-meta.json", json.dumps(meta, indent=1, default=str), overwrite=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="the plan (.json): points with pairs per block, rounds, and "
                                                  "optionally arms, hbm_rounds, warm_pairs, order")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=120.0, help="start no round after this many seconds")
    args = ap.parse_args(argv)
    plan = json.loads(Path(args.plan).read_text())
    settings = plan_settings(plan)
    import torch

    from fa_rule19 import point_config
    from xstage.hw.common.timing import gpu_clocks
    from xstage.provenance import provenance

    pts = plan["points"]
    cfgs = [point_config(p) for p in pts]                        # validated before anything runs
    pairs = [require_int("pairs_per_block", p.get("pairs_per_block"), minimum=2) for p in pts]
    dev = {"name": "cpu (dry run)"}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        dev = {"name": props.name, "L2_cache_size": int(getattr(props, "L2_cache_size", -1)),
               "sm_count": int(props.multi_processor_count)}
    print(f"device: {dev}; clocks (sm, mem, temp, power, reasons): {gpu_clocks()}; numa {numa_nodes()}", flush=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    meta = {"args": vars(args), "plan": plan, "device": dev, "cuda": torch.version.cuda,
            "provenance": provenance(with_gpu=True), "numa": numa_nodes(), "uid": os.getuid(),
            "arms": settings["arms"], "settings": settings, "round_arms": round_arms(settings),
            "probe_reps": PROBE_REPS, "checks": [], "compile_stats": [], "rounds_done": 0}
    t0 = time.time()
    points = []
    for i, (p, cfg) in enumerate(zip(pts, cfgs)):
        t = time.time()
        points.append(Point(cfg, int(p.get("seed", 2 + i)), settings["arms"]))
        meta["checks"] += [dict(c, **points[-1].tag, when="setup") for c in points[-1].checks]
        meta["compile_stats"].append({**points[-1].tag, **points[-1].stats})
        print(f"setup {i} {cfg.seq_len}:{cfg.heads} d{cfg.head_dim} bn{cfg.block_n}: checks "
              f"{[bool(c['ok']) for c in points[-1].checks]}, {time.time() - t:.1f} s", flush=True)
    pair_rows, block_rows = [], []

    def save():
        write_run(outdir, pair_rows, block_rows, meta)

    sweep(points, pairs, settings, args.budget_s, meta, pair_rows, block_rows, save,
          log=lambda line: print(line, flush=True), t0=t0)
    for pt in points:
        meta["checks"] += [dict(c, **pt.tag) for c in pt.final_checks()]
    save()
    failed = [c for c in meta["checks"] if not c.get("ok")]
    print(f"checks: {len(meta['checks'])} rows, {len(failed)} failed; rounds {meta['rounds_done']}/{plan['rounds']}; "
          f"wall {time.time() - t0:.0f} s; clocks {gpu_clocks()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    exit_with(main, "fa_rule20.py")
