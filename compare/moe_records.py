"""Summaries of the fused MoE records (issue 6): kernel rows, the simulator's prediction, summary.

Kernel rows (``experiment == "moe"``): one per (configuration, variant). Variants:
``expert_wave`` / ``interleaved`` (remote stores: W-1 ranks host-mapped), ``expert_wave_local`` /
``interleaved_local`` (all W Combine buffers in device memory: remote stores off),
``grouped_mm`` (the two grouped GEMMs of the user's baseline; column ``baseline`` says
``torch._grouped_mm`` or ``matmul_loop``), ``baseline_ffn`` (grouped GEMM, SwiGLU, grouped GEMM,
router scaling), ``combine_copy`` (a separate kernel storing the same Combine rows), and
``baseline_total`` (baseline_ffn + combine_copy, summed medians). The simulator's makespans for the
same configuration are the columns ``sim_wave(us)``, ``sim_int(us)`` of the two schedule rows.

W-rank records (``hw/moe/dist.py``, ``layout == "ep"``, platform h200-nvlink) hold one row per
(configuration, variant, rank); summaries take the slowest rank (``collapse_ranks``).

Kernel and tile rows are built by ``xstage.records.moe``; the bench stores the measured medians
(``measured_*``) and this module replays the simulator on them (``resimulate``).
"""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.compare.moe_library import geomean as _geomean, library_summary
from xstage.compare.moe_heldout import heldout_summary
from xstage.compare.moe_heldout2 import heldout2_summary, split_fresh
from xstage.compare.moe_heldout3 import heldout3_summary, split_heldout3
from xstage.compare.moe_two_stage import law_summary
from xstage.records import load_records
from xstage.records.moe import EXPERIMENT, PLATFORM, SCHEDULES, measured, same_order, tile_timings


# --- the simulator's prediction -----------------------------------------------------------------
def simulator_platform(out_dir: Path | None = None, name: str = PLATFORM):
    """(Platform, where it was found) to predict a MoE run with: ``name`` (default h200-pcie-host) bundled,
    committed, or calibrated by this run (``out_dir``'s sibling calib* folders); else (None, "none")."""
    from xstage.compare.platforms import locate_platform

    try:
        return locate_platform(name, search=[Path(out_dir).parent] if out_dir is not None else ())
    except InputError:
        return None, "none"


def scaled_b200(sm_count: int, drain_rate_GBps: float):
    """paper-b200 with the H200's SM count (capacity scaled with it) and a drain rate measured here."""
    from dataclasses import replace

    from xstage.sim.platform import load_platform

    b = load_platform("paper-b200")
    k0, q0 = b.capacity_points[0]
    return replace(b, name="paper-b200-scaled", sm_count=sm_count, drain_rate_GBps=float(drain_rate_GBps),
                   capacity_points=((sm_count, q0 * sm_count / k0),), target="host")


def _replay(layout, schedule, timings: dict, platform, coupled: bool = False, cover_us: float = 0.0):
    """Replay ``schedule`` with the measured mainloop and epilogue medians (a ``ReplayResult``).

    The Triton kernel has no separate epilogue role: staging_slots = 1 (epilogue in series).
    ``coupled``: the completion-coupled counterfactual (an epilogue ends when its bytes drained);
    ``cover_us``: the next mainloop may run that long before the previous epilogue ended (``ReplayConfig``)."""
    from xstage.sim.replay import ReplayConfig, replay

    if schedule.num_sms > platform.sm_count:
        # more programs than SMs (two per SM: hw/moe/bench.py BF16_SHORT_K): each program is a producer; the
        # measured per-tile medians already hold the SM's sharing, and the drain stays the platform's
        platform = dataclasses.replace(platform, sm_count=schedule.num_sms)
    kind = schedule.tiles[:, 0]
    ml = np.where(kind == 1, timings["l2_us"], timings["l1_us"])
    cfg = ReplayConfig(staging_slots=1, local_epilogue_us=max(timings["l1_epilogue_us"], 0.0),
                       remote_epilogue_us=max(timings["l2_epilogue_us"], 0.0), record_occupancy=False,
                       coupled=coupled, cover_us=cover_us)
    return replay(schedule, ml, layout.tile_remote_bytes(schedule.tiles), platform, cfg)


def simulate(layout, schedule, timings: dict, platform, coupled: bool = False, cover_us: float = 0.0) -> float:
    """The makespan (us) of ``_replay``."""
    return _replay(layout, schedule, timings, platform, coupled, cover_us).makespan_us


def replay_hw_tiles(measured: pd.DataFrame, kernel: pd.DataFrame | None, platform) -> pd.DataFrame:
    """Simulated tile records beside measured hardware ones (``config`` = a ``MoeProblem`` label): per
    configuration, both schedules replayed on its own dispatch layout with the mainloop and epilogue
    medians of its local-store tiles (``tile_timings``), the SM count of the run and the interleaved
    lead D of its kernel record (the Eq. 16 knee when no kernel record is given)."""
    from xstage.sim.workloads.moe_layout import MoeProblem, dispatch_layout
    from xstage.sim.model import lead_knee_rows
    from xstage.sim.schedules import make_moe_schedule

    out = []
    for config, tiles in measured.groupby("config"):
        rows = kernel[(kernel["config"] == config) & (kernel["variant"] == "interleaved")] if kernel is not None \
            else pd.DataFrame()
        if len(rows):
            r = rows.iloc[-1]
            problem = MoeProblem(**problem_fields(r))
            sms, lead, groups, bal = int(r["num_sms"]), int(r["lead_rows"]), group_rows(r), balanced(r)
        else:
            problem = parse_label(config)
            sms, groups, bal = int(tiles["sm"].max()) + 1, 1, False
            lead = max(1, lead_knee_rows(problem.block_n, sms, problem.intermediate))
        local = tiles[tiles["schedule"].astype(str).str.endswith("_local")]
        timings = tile_timings(local if len(local) else tiles)
        lay = dispatch_layout(problem)
        for kind in SCHEDULES:
            sched = make_moe_schedule(kind, lay.grid, sms, group_rows=groups, balance=bal,
                                      **({"lead_rows": lead} if kind == "interleaved" else {}))
            res = _replay(lay, sched, timings, platform)
            out.append(res.tiles(experiment=EXPERIMENT, config=config).assign(schedule=kind))
    return pd.concat(out, ignore_index=True)


def group_rows(row) -> int:
    """The rows a record's schedules walked side by side (``xstage.sim.schedules.pair_order``); 1 for
    records written before the column existed (Algorithm 1's row-major walk)."""
    v = row.get("group_rows") if hasattr(row, "get") else None
    return int(v) if v is not None and pd.notna(v) else 1


def balanced(row) -> bool:
    """Whether a record's schedules dealt the L1 and L2 remainders apart (``xstage.sim.schedules._merge``'s
    ``balance``); False for records without the column."""
    v = row.get("balance") if hasattr(row, "get") else None
    return bool(v) if v is not None and pd.notna(v) else False


def parse_label(label: str):
    """The ``MoeProblem`` of a label ``h{hidden}-i{I}-t{tokens}-e{E}-{routing}-{precision}-w{W}-s{seed}``
    (default tile sizes)."""
    from xstage.sim.workloads.moe_layout import MoeProblem

    parts = str(label).split("-")
    try:
        h, i, t, e = (int(p[1:]) for p in parts[:4])
        routing, precision = parts[4], parts[5]
        world, seed = int(parts[6][1:]), int(parts[7][1:])
    except (ValueError, IndexError):
        raise InputError("config", label, "is not a MoE hardware label h<H>-i<I>-t<T>-e<E>-<routing>-<precision>-w<W>-s<seed>") from None
    return MoeProblem(h, i, t, local_experts=e, routing=routing, precision=precision, world_size=world, seed=seed)


def replay_inputs(kernel: pd.DataFrame):
    """Per (config, rank) of the schedule rows that carry every measured per-tile median: ``(config, rank,
    row, layout, programs, group_rows, timings)``, the layout rebuilt from the row's fields (seeded; the EP
    layout for a W-rank record), ``timings`` the medians ``l1_us`` ... as the replay takes them."""
    from xstage.sim.workloads.moe_layout import MoeProblem, dispatch_layout

    keys = ["l1_us", "l2_us", "l1_epilogue_us", "l2_epilogue_us"]
    ranks = kernel["rank"] if "rank" in kernel else pd.Series(0, index=kernel.index)
    for (config, rank), grp in kernel[kernel["variant"].isin(SCHEDULES)].groupby(["config", ranks]):
        r = grp.iloc[0]
        if not all(measured(k) in r and np.isfinite(r[measured(k)]) for k in keys):
            continue
        fields = problem_fields(r)
        if str(r.get("layout", "")) == "ep":  # a W-rank record (hw/moe/dist.py): the EP routing
            from xstage.sim.workloads.ep import EpProblem, ep_layout

            lay = ep_layout(EpProblem(**fields))
        else:
            lay = dispatch_layout(MoeProblem(**fields))
        yield config, rank, r, lay, int(r["num_sms"]), group_rows(r), {k: float(r[measured(k)]) for k in keys}


def rows_of(kernel: pd.DataFrame, config, rank) -> pd.Series:
    """The rows of one (config, rank) (rank 0 where the records have no rank column)."""
    ranks = kernel["rank"] if "rank" in kernel else pd.Series(0, index=kernel.index)
    return (kernel["config"] == config) & (ranks == rank)


def resimulate(kernel: pd.DataFrame, platform, label: str) -> pd.DataFrame:
    """Fill ``sim_wave(us)``/``sim_int(us)`` of the schedule rows from the stored measured medians
    (``measured_l1(us)`` ...), rebuilding each configuration's layout and schedules (seeded)."""
    from xstage.sim.schedules import make_moe_schedule

    out = kernel.copy()
    for config, rank, r, lay, sms, groups, timings in replay_inputs(out):
        wave = simulate(lay, make_moe_schedule("expert_wave", lay.grid, sms, group_rows=groups, balance=balanced(r)),
                        timings, platform)
        inter = simulate(lay, make_moe_schedule("interleaved", lay.grid, sms, lead_rows=int(r["lead_rows"]),
                                                group_rows=groups, balance=balanced(r)), timings, platform)
        sel = rows_of(out, config, rank)
        out.loc[sel, "sim_wave(us)"], out.loc[sel, "sim_int(us)"], out.loc[sel, "sim_platform"] = wave, inter, label
    return out


# --- summary ------------------------------------------------------------------------------------
def load_kernel_records(folder: Path, platform: str | None = None) -> pd.DataFrame:
    files = sorted(Path(folder).glob("**/moe-kernel*.parquet"))  # one file per run
    if not files:
        raise InputError("moe records", str(folder), "hold no moe-kernel*.parquet files (run benchmarks/gpu/moe.sh)")
    frames = []
    for f in files:
        rows, meta = load_records(f, "kernel")
        sweep = str(((meta.get("config") or {}).get("args") or {}).get("sweep") or "main")  # bench --sweep
        frames.append(rows.assign(_run=str((meta.get("provenance") or {}).get("date", "")) + str(f), sweep=sweep))
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[frame["experiment"] == EXPERIMENT]
    # a configuration measured in several runs on one platform: keep the latest run's rows only (another GPU's run
    # of the same configuration, e.g. an H100's heldout2, keeps its own rows under its own platform)
    latest = frame.groupby(["config", "platform"])["_run"].transform("max")
    frame = frame[frame["_run"] == latest].drop(columns="_run")
    if platform is not None:
        frame = frame[frame["platform"] == platform]
    if frame.empty:
        raise InputError("moe records", str(folder), f"hold no rows for platform {platform!r}")
    return frame


def one_platform(kernel: pd.DataFrame) -> pd.DataFrame:
    """The rows of one platform: all of them where there is one; else h200-pcie-host's (the records' main platform),
    or the first platform's where it has none (``xstage results moe --platform`` picks another)."""
    names = list(dict.fromkeys(kernel["platform"]))
    if len(names) <= 1:
        return kernel
    return kernel[kernel["platform"] == (PLATFORM if PLATFORM in names else names[0])]


def collapse_ranks(kernel: pd.DataFrame) -> pd.DataFrame:
    """One row per (config, variant). W-rank records (``hw/moe/dist.py``) hold one row per rank; an
    expert-parallel layer ends with its slowest rank, so each variant keeps its slowest rank's row and
    the simulated makespans (``sim_*(us)``) become their maximum over the ranks of the configuration."""
    if "rank" not in kernel or kernel.groupby(["config", "variant"]).size().max() <= 1:
        return kernel
    out = kernel.loc[kernel.groupby(["config", "variant"])["time(us)"].idxmax()].copy()
    for col in [c for c in kernel.columns if c.startswith("sim_") and c.endswith("(us)")]:
        out[col] = out["config"].map(kernel.groupby("config")[col].max())
    return out.reset_index(drop=True)


def schedules_identical(problem, num_sms: int, lead_rows: int, group_rows: int = 1) -> bool:
    """True when the interleaved order with lead ``lead_rows`` is the expert-wave order, tile for tile
    (e.g. one wave holds every expert and D reaches the last row): the two kernels are then the same
    launch and there is no winner to predict."""
    from xstage.sim.workloads.moe_layout import dispatch_layout
    from xstage.sim.schedules import make_moe_schedule

    grid = dispatch_layout(problem).grid
    return same_order(make_moe_schedule("expert_wave", grid, int(num_sms), group_rows=int(group_rows)),
                      make_moe_schedule("interleaved", grid, int(num_sms), lead_rows=int(lead_rows),
                                        group_rows=int(group_rows)))


def problem_fields(row) -> dict:
    """The ``MoeProblem`` fields a record row holds, as Python values (strings for routing and precision)."""
    from xstage.sim.workloads.moe_layout import MoeProblem

    return {k: (str(row[k]) if k in ("routing", "precision") else int(row[k]))
            for k in MoeProblem.__dataclass_fields__ if k in row}


def _identical_column(kernel: pd.DataFrame) -> pd.Series:
    """Per configuration: ``schedules_identical`` as recorded, or rebuilt from the problem columns, the
    SM count and the tuned lead of the interleaved row (records written before the column existed)."""
    from xstage.sim.workloads.moe_layout import MoeProblem

    inter = kernel[kernel["variant"] == "interleaved"].drop_duplicates("config", keep="last").set_index("config")
    recorded = inter["schedules_identical"] if "schedules_identical" in inter else pd.Series(dtype=object)
    complete = set(MoeProblem.__dataclass_fields__) <= set(inter.columns)
    out = {}
    for config, row in inter.iterrows():
        if config in recorded.index and pd.notna(recorded[config]):  # recorded by the run (W-rank rows always)
            out[config] = bool(recorded[config])
            continue
        if not {"num_sms", "lead_rows"} <= set(row.index) or not complete:
            out[config] = False
            continue
        problem = MoeProblem(**problem_fields(row))
        out[config] = schedules_identical(problem, row["num_sms"], row["lead_rows"], group_rows(row))
    return pd.Series(out, dtype=bool)


def per_config(kernel: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: times of every variant, speedup, GEMM ratio, simulated winner
    (W-rank records: the slowest rank, ``collapse_ranks``)."""
    kernel = collapse_ranks(kernel)
    p = kernel.pivot_table(index="config", columns="variant", values="time(us)", aggfunc="median")
    need = {"expert_wave", "interleaved"}
    if not need <= set(p.columns):
        raise InputError("moe kernel variants", sorted(p.columns), "must include expert_wave and interleaved")
    out = pd.DataFrame(index=p.index)
    for v in p.columns:
        out[f"{v}(us)"] = p[v]
    out["speedup_interleaved"] = p["expert_wave"] / p["interleaved"]
    if {"expert_wave_local", "interleaved_local", "grouped_mm"} <= set(p.columns):
        out["gemm_vs_grouped_mm"] = p["grouped_mm"] / p[["expert_wave_local", "interleaved_local"]].min(axis=1)
    if "baseline_total" in p.columns:  # the user's baseline over the fused FFN: its slower schedule, its faster one
        out["fused_vs_baseline"] = p["baseline_total"] / p[["expert_wave", "interleaved"]].max(axis=1)
        out["fused_best_vs_baseline"] = p["baseline_total"] / p[["expert_wave", "interleaved"]].min(axis=1)
    sim = kernel[kernel["variant"].isin(["expert_wave", "interleaved"])]
    for col in ("sim_wave(us)", "sim_int(us)", "sim_platform", "sim_copyR_wave(us)", "sim_copyR_int(us)",
                "sim_coupled_wave(us)", "sim_coupled_int(us)"):
        if col in sim:
            out[col] = sim.groupby("config")[col].first()
    if {"sim_wave(us)", "sim_int(us)"} <= set(out.columns):
        out["sim_speedup"] = out["sim_wave(us)"] / out["sim_int(us)"]
    for tag in ("copyR", "coupled"):
        if {f"sim_{tag}_wave(us)", f"sim_{tag}_int(us)"} <= set(out.columns):
            out[f"sim_{tag}_speedup"] = out[f"sim_{tag}_wave(us)"] / out[f"sim_{tag}_int(us)"]
    for col in ("hidden", "intermediate", "tokens", "routing", "precision"):
        if col in kernel:
            out[col] = kernel.groupby("config")[col].first()
    out["schedules_identical"] = _identical_column(kernel).reindex(out.index).fillna(False).astype(bool)
    return out.reset_index()


def _gemm_ratio(c: pd.DataFrame, precision: str, worst: bool = False) -> float:
    """Geomean (``worst``: minimum) of the GEMM ratio over one precision: bf16 against torch._grouped_mm, w8a8
    against the fp8 torch._scaled_grouped_mm (records without a precision column count as bf16)."""
    if "gemm_vs_grouped_mm" not in c:
        return math.nan
    prec = c["precision"] if "precision" in c else pd.Series("bf16", index=c.index)
    x = c.loc[prec == precision, "gemm_vs_grouped_mm"].astype(float)
    x = x[np.isfinite(x)]
    if worst:
        return float(x.min()) if len(x) else math.nan
    return _geomean(x)


def _winner(speedup: float, identical: bool) -> str:
    if identical:
        return "same order"
    if not np.isfinite(speedup):
        return ""
    return "interleaved" if speedup > 1 else "expert_wave"


def hardware_table(kernel: pd.DataFrame, model: pd.Series | None = None) -> pd.DataFrame:
    """One row per hardware configuration for the page and docs/moe.md: which schedule wins and by how much,
    measured and simulated (``resimulate`` first when the records hold no simulated makespans), the GEMM
    rate against the grouped-GEMM library (remote stores off) and the user's baseline over the fused FFN."""
    c = per_config(kernel)
    models = kernel.groupby("config")["model"].first() if "model" in kernel else pd.Series(dtype=object)
    out = pd.DataFrame({"config": c["config"], "model": c["config"].map(models).astype(object).fillna("")})
    for col in ("precision", "routing"):
        out[col] = c[col] if col in c else ""
    out["measured_speedup"] = c["speedup_interleaved"]
    out["simulated_speedup"] = c["sim_speedup"] if "sim_speedup" in c else math.nan
    out["winner_measured"] = [_winner(x, i) for x, i in zip(out["measured_speedup"], c["schedules_identical"])]
    out["winner_simulated"] = [_winner(x, i) for x, i in zip(out["simulated_speedup"], c["schedules_identical"])]
    out["sim_names_winner"] = out["winner_measured"] == out["winner_simulated"]
    for col in ("gemm_vs_grouped_mm", "fused_vs_baseline", "fused_best_vs_baseline"):
        out[col] = c[col] if col in c else math.nan
    return out


def hardware_records(data_dir: Path) -> pd.DataFrame:
    """``hardware_table`` of the committed records under ``data_dir`` (as ``summarize`` reads them)."""
    folder = Path(data_dir) / "moe" if (Path(data_dir) / "moe").is_dir() else Path(data_dir)
    k = load_kernel_records(folder)
    if not ("sim_wave(us)" in k and np.isfinite(k["sim_wave(us)"].astype(float)).any()):
        plat, src = simulator_platform(name=str(k["platform"].iloc[0]) if "platform" in k else PLATFORM)
        if plat is not None:
            k = resimulate(k, plat, src)
    return hardware_table(k)


def _finite_min(c: pd.DataFrame, col: str) -> float:
    x = c[col].astype(float) if col in c else pd.Series(dtype=float)
    x = x[np.isfinite(x)]
    return float(x.min()) if len(x) else math.nan


def summarize(data_dir: Path, platform: str | None = None) -> dict:
    """``xstage results moe``: n_configs, speedups, GEMM ratio vs grouped GEMM, sign agreement with the sim. One
    platform's rows: ``platform``, else h200-pcie-host where the records hold several (session 23: an H100 run)."""
    folder = Path(data_dir) / "moe" if (Path(data_dir) / "moe").is_dir() else Path(data_dir)
    root = Path(data_dir) if (Path(data_dir) / "moe").is_dir() else folder.parent
    k, fresh3 = split_heldout3(one_platform(load_kernel_records(folder, platform)))  # --sweep heldout3: own keys
    k, fresh = split_fresh(k)  # --sweep heldout2 rows: their own keys only
    if k.empty:  # held-out sweeps only (the bench's own --out after --sweep heldout2 / heldout3): they are the summary
        return summarize_frame(pd.concat([fresh, fresh3]), folder, root)
    out = summarize_frame(k, folder, root)
    out.update(heldout_summary(k, lambda part: summarize_frame(part, folder, root)))
    out.update(heldout2_summary(k, fresh, lambda part: summarize_frame(part, folder, root), root))
    out.update(heldout3_summary(k, fresh, fresh3, lambda part: summarize_frame(part, folder, root), root))
    return out


def summarize_frame(k: pd.DataFrame, folder: Path, root: Path) -> dict:
    """``summarize``'s keys for the kernel rows ``k`` (records under ``folder``, predictions under ``root``)."""
    have_sim = "sim_wave(us)" in k and np.isfinite(k["sim_wave(us)"].astype(float)).any()
    if not have_sim:  # predicted at run time only when simpy and a platform were there: predict now
        plat, src = simulator_platform(name=str(k["platform"].iloc[0]) if "platform" in k else PLATFORM)
        if plat is not None:
            k = resimulate(k, plat, src)
    c = per_config(k)
    s = c["speedup_interleaved"]
    out = {"n_configs": int(len(c)), "geomean_speedup_interleaved": _geomean(s),
           "max_speedup_interleaved": float(s.max()), "min_speedup_interleaved": float(s.min()),
           "gemm_tflops_vs_grouped_mm": _gemm_ratio(c, "bf16"),
           "gemm_tflops_vs_grouped_mm_min": _gemm_ratio(c, "bf16", worst=True),
           "gemm_tflops_vs_scaled_grouped_mm": _gemm_ratio(c, "w8a8"),
           "gemm_tflops_vs_scaled_grouped_mm_min": _gemm_ratio(c, "w8a8", worst=True),
           "fused_vs_baseline_min": _finite_min(c, "fused_vs_baseline"),
           "fused_best_vs_baseline_min": _finite_min(c, "fused_best_vs_baseline"),
           "sign_agreement_with_sim": math.nan, "sim_platform": None}
    out.update(library_summary(c, folder))  # against the faster of torch and quack, where quack was run
    # a winner exists only where the two tile orders differ: configurations whose tuned interleaved order
    # is the expert-wave order (the same launch twice) are counted apart, and the plain fraction over all
    # configurations is kept as ``*_all``
    out["n_identical_schedules"] = int(c["schedules_identical"].sum())
    distinct = ~c["schedules_identical"]
    for tag in ("", "_copyR", "_coupled"):  # secondary: R = the measured copy rate; completion-coupled replay
        col = f"sim{tag}_speedup"
        if col not in c:
            continue
        have = np.isfinite(c[col]) & np.isfinite(s)
        agree = np.sign(c[col] - 1) == np.sign(s - 1)
        if (have & distinct).any():
            out[f"sign_agreement_with_sim{tag}"] = float(agree[have & distinct].mean())
            if tag == "":
                out["n_distinct_with_sim"] = int((have & distinct).sum())
                out["n_sim_names_winner"] = int(agree[have & distinct].sum())
        if have.any():
            out[f"sign_agreement_with_sim{tag}_all"] = float(agree[have].mean())
        if tag == "" and have.any() and "sim_platform" in c:
            out["sim_platform"] = str(c.loc[have, "sim_platform"].iloc[0])
    plat = simulator_platform(name=str(k["platform"].iloc[0]) if "platform" in k else PLATFORM)[0]
    out.update(law_summary(k, c, plat, root))  # speedup error (pp); the adopted two-stage law, if any
    if "baseline" in k:  # the bf16 library's name where there are bf16 rows (the W8A8 one is named by its key)
        b = k.loc[k["precision"] == "bf16", "baseline"].dropna() if "precision" in k else k["baseline"].dropna()
        b = b if len(b) else k["baseline"].dropna()
        out["grouped_gemm_baseline"] = str(b.iloc[0]) if len(b) else None
    return out
