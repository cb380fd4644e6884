"""The frames behind every dashboard page: one collector per page, each returning plain frames.

    measured = load_measured(data_dir, ["paper-b200"])      # the records folder's measured side
    frames = spans_frames(measured, quick=True)             # one page's frames
    collected = collect(data_dir)                           # every page's, as the dashboards draw them

Each collector joins the page's measured records (``xstage.compare.measured``) with the simulator
(model curves, simulator points, replays) and returns a dict of frames and a few labels; ``collect``
runs them in page order and adds the error table. ``xstage.compare.store`` writes the result as
records and reads it back, so the dashboards draw saved frames and never simulate.

``quick=True`` shrinks every simulated grid (tests, previews); the pages say what they hold.
"""

from pathlib import Path

import pandas as pd

from xstage.compare import attention as att
from xstage.compare import moe as moe_cmp
from xstage.compare.calibration import calibration_frames
from xstage.compare.errors_table import error_table
from xstage.compare.heldout_frames import heldout_frames
from xstage.compare.measured import (Measured, burst_records, calibration_points, default_platforms,  # noqa: F401
                                     load_measured, moe_sweep_records)
from xstage.compare.replays import simulate_moe_tiles
from xstage.compare.tiles import compare_tile_summaries, span_quantiles, span_summary, stall_table
from xstage.compare.timeline import GANTT_LIMIT, timeline_frames
from xstage.compare.whatif import WhatIfGrid, whatif_frames
from xstage.errors import InputError
from xstage.paths import data_dir as default_data_dir

SPAN_MODELS = ("DiT-MoE", "Qwen3.5", "Hy3", "MiMo-V2.5", "GLM-5.2", "DSv4-Flash", "DSv4-Pro")
QUICK_SPAN_MODELS = ("DiT-MoE", "MiMo-V2.5", "DSv4-Flash")
# Fig. 9: full -- the Table 2 setting (33,072 tiles per schedule: aggregated heatmap + exact window);
# quick -- 2,304 tiles with a 1,000-tile Gantt limit, so previews and tests draw both paths
TIMELINE = {False: ("Qwen3.5/w8a8/skewed/L", GANTT_LIMIT, 600), True: ("DiT-MoE/w8a8/skewed/S", 1_000, 300)}


def calibration_page_frames(m: Measured, name: str, quick: bool = False) -> dict:
    """Fig. 3 a-d of one platform: its calibration points, else its burst records, over the model."""
    p = m.platforms[name]
    points = calibration_points(m.data_dir, name)
    if points is not None:
        return calibration_frames(p, points=points, fast=quick)
    measured = burst_records(m.data_dir, name)
    return calibration_frames(p, measured if len(measured) else None, fast=quick)


def whatif_page_frames(m: Measured, name: str, quick: bool = False) -> dict:
    p = m.platforms[name]
    return whatif_frames(p, WhatIfGrid.default(p, small=quick))


def timeline_page_frames(m: Measured, quick: bool = False) -> dict:
    """Fig. 9: one catalog configuration replayed on the primary platform, and the first measured MoE run."""
    primary = m.primary
    config, limit, bins = TIMELINE[quick]
    tiles, occ = simulate_moe_tiles(config, primary)
    timeline = {"config": config, "platform": primary.name, "sim": {}, "hw": {}}
    for sched, grp in tiles.groupby("schedule", sort=False):
        timeline["sim"][sched] = timeline_frames(grp, bins=bins, gantt_limit=limit, num_sms=int(grp["sm"].max()) + 1,
                                                 occupancy=occ[occ["schedule"] == sched])
    hw = m.moe_tiles()
    if len(hw):
        first = hw["config"].iloc[0]
        sel = hw[hw["config"] == first]
        hp = m.platform(str(sel["platform"].iloc[0])) if "platform" in sel else primary
        timeline["hw_config"] = first
        for sched, grp in sel.groupby("schedule", sort=False):
            timeline["hw"][sched] = timeline_frames(grp, bins=600, drain_rate_GBps=hp.drain_rate_GBps)
    return timeline


def spans_page_frames(m: Measured, quick: bool = False) -> dict:
    """Fig. 10 and Table 2: catalog replays' spans and stalls, and the measured MoE tiles beside them."""
    primary = m.primary
    models = QUICK_SPAN_MODELS if quick else SPAN_MODELS
    setting = "S" if quick else "L"
    sim_tiles = pd.concat([simulate_moe_tiles(f"{model}/w8a8/skewed/{setting}", primary)[0] for model in models],
                          ignore_index=True)
    spans = {"setting": setting, "platform": primary.name,
             "l2": span_quantiles(sim_tiles), "summary": span_summary(sim_tiles), "table2": stall_table(sim_tiles)}
    hw = m.moe_tiles()
    if len(hw):
        spans["hw_l2"] = span_quantiles(hw)
        spans["hw_table2"] = stall_table(hw)
        try:
            spans["compare"] = compare_tile_summaries(hw, sim_tiles)
        except InputError:
            pass
    return spans


def moe_page_frames(m: Measured, quick: bool = False) -> dict:
    """Fig. 8: the primary platform's sweep records (else a quick sweep), and measured kernels vs the simulator."""
    primary = m.primary
    sweep = moe_sweep_records(m.data_dir, primary.name)
    if len(sweep):
        moe = {"sweep": sweep, "source": "sweep records"}
    else:
        sweep = moe_cmp.quick_sweep(primary, models=SPAN_MODELS[:2] if quick else None,
                                    precisions=("w8a8",) if quick else ("w8a8", "w4a8"))
        moe = {"sweep": sweep, "source": f"quick sweep (setting {sweep['setting'].iloc[0]} only)"}
    moe["platform"] = primary.name
    moe["groups"] = moe_cmp.speedup_groups(moe["sweep"])
    hw = m.moe_kernels()
    if len(hw):
        try:
            hp = m.platform(str(hw["platform"].iloc[0])) if "platform" in m.kernels else primary
            moe["compare"] = moe_cmp.compare_moe(m.kernels, hp)
        except InputError as err:
            moe["compare_error"] = str(err)
        try:  # per configuration: winner measured and simulated, GEMM rate vs the library (issue 17)
            from xstage.compare.moe_records import hardware_records

            moe["hardware"] = hardware_records(m.data_dir)
        except InputError as err:
            moe["hardware_error"] = str(err)
    return moe


def attention_page_frames(m: Measured, quick: bool = False) -> dict:
    """Fig. 11 and Table 3: catalog replays, measured kernels per M and their replays, measured tiles."""
    primary = m.primary
    attention = {"sim": att.simulated_catalog(primary, seq_lens=[8192, 32768] if quick else None),
                 "platform": primary.name}
    tiles, k = m.attention_tiles(), m.attention_kernels()
    if len(tiles) and "M" in tiles:
        try:
            attention["tiles"] = att.compare_attention_tiles(tiles, m.platform(str(tiles["platform"].iloc[0])),
                                                             k if len(m.kernels) else None)
        except InputError as err:
            attention["tiles_error"] = str(err)
    if len(k):
        attention["hw"] = att.measured_summary(k)
        try:  # one GPU (emulated ranks) and W GPUs are different platforms: each replayed on its own
            names = sorted(set(k["platform"].astype(str))) if "platform" in k else [primary.name]
            attention["compare"] = pd.concat([att.compare_attention(k[k["platform"] == n] if "platform" in k else k,
                                                                    m.platform(n)) for n in names],
                                             ignore_index=True)
            attention["compare_platform"] = ", ".join(names)
        except InputError as err:
            attention["compare_error"] = str(err)
    fa4 = m.kernels[m.kernels["experiment"] == att.FA4_EXPERIMENT] if len(m.kernels) else m.kernels
    if len(fa4):  # FA4 as the FA core (issue 16): its own series, one per run
        attention["fa4"] = att.fa4_summary(fa4)
        try:
            attention["fa4_compare"] = att.compare_fa4(fa4, m.platform(str(fa4["platform"].iloc[0])))
        except InputError as err:
            attention["fa4_compare_error"] = str(err)
    return attention


def collect(data_dir=None, platforms=None, *, quick: bool = False, progress=None) -> dict:
    """All frames of all pages. ``progress(message)`` is called before each expensive step."""
    data_dir = Path(data_dir or default_data_dir())
    say = progress or (lambda _msg: None)
    m = load_measured(data_dir, platforms)
    out = {"platforms": list(m.platforms), "primary": m.primary.name, "data_dir": str(data_dir), "quick": quick,
           "calibration": {}, "whatif": {}}
    for name in m.platforms:
        say(f"calibration frames: {name}")
        out["calibration"][name] = calibration_page_frames(m, name, quick)
        say(f"what-if grid: {name}")
        out["whatif"][name] = whatif_page_frames(m, name, quick)
    say("timeline replay")
    out["timeline"] = timeline_page_frames(m, quick)
    say("span replays (Fig. 10, Table 2)")
    out["spans"] = spans_page_frames(m, quick)
    say("MoE speedups (Fig. 8)")
    out["moe"] = moe_page_frames(m, quick)
    say("held-out validation of the calibrations")
    out["heldout"] = heldout_frames(data_dir)
    say("FlashAttention + All-to-All (Fig. 11, Table 3)")
    out["attention"] = attention_page_frames(m, quick)
    out["errors"] = error_table(out)
    return out
