"""Everything the dashboards and the report draw, computed once from a records folder and platforms.

``collect`` returns plain frames per page. Simulated frames are computed here (model curves,
simulator points, replays); measured frames are read from the records folder:

    calibration/<platform>/points.parquet  calibration points (``xstage calibrate``): the measured side
                                           of the calibration page (aggregate T_iss and period)
    calibration/<platform>/*.parquet       else burst records (e.g. ``xstage sim bursts --out``)
    any kernel records, experiment "attention" / "moe"
    any tile records (hw per-tile instrumentation), experiment "moe" / "attention"
    any summary records holding a MoE sweep (columns config, wave_us, int_us, speedup)

``quick=True`` shrinks every simulated grid (tests, previews); the pages say what they hold.
"""

from pathlib import Path

import pandas as pd

from xstage.compare import attention as att
from xstage.compare import moe as moe_cmp
from xstage.compare.bursts import MODE_ORDER, burst_error_summary, find_platform, load_calibration_points
from xstage.compare.calibration import calibration_frames
from xstage.compare.frames import load_kind
from xstage.compare.metrics import error_summary
from xstage.compare.replays import simulate_moe_tiles
from xstage.compare.tiles import compare_tile_summaries, span_quantiles, span_summary, stall_table
from xstage.compare.timeline import GANTT_LIMIT, timeline_frames
from xstage.compare.whatif import WhatIfGrid, whatif_frames
from xstage.errors import InputError
from xstage.paths import data_dir as default_data_dir
from xstage.sim.platform import bundled_platforms

SPAN_MODELS = ("DiT-MoE", "Qwen3.5", "Hy3", "MiMo-V2.5", "GLM-5.2", "DSv4-Flash", "DSv4-Pro")
QUICK_SPAN_MODELS = ("DiT-MoE", "MiMo-V2.5", "DSv4-Flash")
# Fig. 9: full -- the Table 2 setting (33,072 tiles per schedule: aggregated heatmap + exact window);
# quick -- 2,304 tiles with a 1,000-tile Gantt limit, so previews and tests draw both paths
TIMELINE = {False: ("Qwen3.5/w8a8/skewed/L", GANTT_LIMIT, 600), True: ("DiT-MoE/w8a8/skewed/S", 1_000, 300)}


def default_platforms(data_dir: Path) -> list[str]:
    """Bundled platforms (paper-b200 first) plus any calibrated under ``data_dir/calibration``."""
    names = bundled_platforms()
    calib = Path(data_dir) / "calibration"
    if calib.is_dir():
        names += [p.parent.name for p in sorted(calib.glob("*/platform.json")) if p.parent.name not in names]
    return sorted(names, key=lambda n: (n != "paper-b200", n))


def _burst_records(data_dir: Path, platform: str) -> pd.DataFrame:
    frame = load_kind(Path(data_dir) / "calibration" / platform, "burst")
    if frame.empty:
        frame = load_kind(data_dir, "burst", where=lambda f, m: (f["platform"] == platform).all())
    return frame[frame["source"] != "sim"] if len(frame) else frame


def _calibration_points(data_dir: Path, platform: str) -> pd.DataFrame | None:
    """``calibration/<platform>/points.parquet`` when it exists and holds calibration points, else None."""
    path = Path(data_dir) / "calibration" / platform / "points.parquet"
    if not path.is_file():
        return None
    try:
        frame = load_calibration_points(path)
    except InputError:
        return None
    return frame if len(frame) else None


def _moe_sweep_records(data_dir: Path, platform: str) -> pd.DataFrame:
    """``xstage sweep moe --out`` files (summary records, table moe_sweep) of ``platform`` (named in their
    meta config). Version 1 sweep files named no table and are not read."""

    def mine(frame, meta):
        if meta.get("table") != "moe_sweep":
            return False
        plat = meta.get("platform")        # a name (calibration points) or a platform dict
        named = (meta.get("config") or {}).get("platform") or (plat.get("name") if isinstance(plat, dict) else plat)
        return named in (None, platform)

    frame = load_kind(data_dir, "summary", where=mine)
    return frame.drop_duplicates("config", keep="last") if len(frame) else frame


def collect(data_dir=None, platforms=None, *, quick: bool = False, progress=None) -> dict:
    """All frames of all pages. ``progress(message)`` is called before each expensive step."""
    data_dir = Path(data_dir or default_data_dir())
    say = progress or (lambda _msg: None)
    names = list(platforms or default_platforms(data_dir))
    if not names:
        raise InputError("platforms", names, "must name at least one platform")
    plats = {n: find_platform(n, data_dir) for n in names}
    primary = plats[names[0]]
    out = {"platforms": names, "primary": primary.name, "data_dir": str(data_dir), "quick": quick,
           "calibration": {}, "whatif": {}}

    for name, p in plats.items():
        say(f"calibration frames: {name}")
        points = _calibration_points(data_dir, name)
        if points is not None:
            out["calibration"][name] = calibration_frames(p, points=points, fast=quick)
        else:
            measured = _burst_records(data_dir, name)
            out["calibration"][name] = calibration_frames(p, measured if len(measured) else None, fast=quick)
        say(f"what-if grid: {name}")
        out["whatif"][name] = whatif_frames(p, WhatIfGrid.default(p, small=quick))

    hw_tiles = load_kind(data_dir, "tile")
    hw_tiles = hw_tiles[hw_tiles["source"] != "sim"] if len(hw_tiles) else hw_tiles
    hw_moe_tiles = hw_tiles[hw_tiles["experiment"] == "moe"] if len(hw_tiles) else hw_tiles

    say("timeline replay")
    config, limit, bins = TIMELINE[quick]
    tiles, occ = simulate_moe_tiles(config, primary)
    timeline = {"config": config, "platform": primary.name, "sim": {}, "hw": {}}
    for sched, grp in tiles.groupby("schedule", sort=False):
        timeline["sim"][sched] = timeline_frames(grp, bins=bins, gantt_limit=limit, num_sms=int(grp["sm"].max()) + 1,
                                                 occupancy=occ[occ["schedule"] == sched])
    if len(hw_moe_tiles):
        first = hw_moe_tiles["config"].iloc[0]
        sel = hw_moe_tiles[hw_moe_tiles["config"] == first]
        hp = find_platform(str(sel["platform"].iloc[0]), data_dir) if "platform" in sel else primary
        timeline["hw_config"] = first
        for sched, grp in sel.groupby("schedule", sort=False):
            timeline["hw"][sched] = timeline_frames(grp, bins=600, drain_rate_GBps=hp.drain_rate_GBps)
    out["timeline"] = timeline

    say("span replays (Fig. 10, Table 2)")
    models = QUICK_SPAN_MODELS if quick else SPAN_MODELS
    setting = "S" if quick else "L"
    span_tiles = []
    for m in models:
        t, _ = simulate_moe_tiles(f"{m}/w8a8/skewed/{setting}", primary)
        span_tiles.append(t)
    sim_tiles = pd.concat(span_tiles, ignore_index=True)
    spans = {"setting": setting, "platform": primary.name,
             "l2": span_quantiles(sim_tiles), "summary": span_summary(sim_tiles), "table2": stall_table(sim_tiles)}
    if len(hw_moe_tiles):
        spans["hw_l2"] = span_quantiles(hw_moe_tiles)
        spans["hw_table2"] = stall_table(hw_moe_tiles)
        try:
            spans["compare"] = compare_tile_summaries(hw_moe_tiles, sim_tiles)
        except InputError:
            pass
    out["spans"] = spans

    say("MoE speedups (Fig. 8)")
    sweep = _moe_sweep_records(data_dir, primary.name)
    if len(sweep):
        moe = {"sweep": sweep, "source": "sweep records"}
    else:
        sweep = moe_cmp.quick_sweep(primary, models=SPAN_MODELS[:2] if quick else None,
                                    precisions=("w8a8",) if quick else ("w8a8", "w4a8"))
        moe = {"sweep": sweep, "source": f"quick sweep (setting {sweep['setting'].iloc[0]} only)"}
    moe["platform"] = primary.name
    moe["groups"] = moe_cmp.speedup_groups(moe["sweep"])
    kernels = load_kind(data_dir, "kernel")
    hw_kernels = kernels[kernels["source"] != "sim"] if len(kernels) else kernels
    if len(hw_kernels) and (hw_kernels["experiment"] == "moe").any():
        try:
            hp = find_platform(str(hw_kernels.loc[hw_kernels["experiment"] == "moe", "platform"].iloc[0]), data_dir) \
                if "platform" in hw_kernels else primary
            moe["compare"] = moe_cmp.compare_moe(hw_kernels, hp)
        except InputError as err:
            moe["compare_error"] = str(err)
    out["moe"] = moe

    say("FlashAttention + All-to-All (Fig. 11, Table 3)")
    attention = {"sim": att.simulated_catalog(primary, seq_lens=[8192, 32768] if quick else None),
                 "platform": primary.name}
    hw_att_tiles = hw_tiles[hw_tiles["experiment"] == "attention"] if len(hw_tiles) else hw_tiles
    if len(hw_att_tiles) and "M" in hw_att_tiles:
        try:
            hp = find_platform(str(hw_att_tiles["platform"].iloc[0]), data_dir)
            k = hw_kernels[hw_kernels["experiment"] == "attention"] if len(hw_kernels) else None
            attention["tiles"] = att.compare_attention_tiles(hw_att_tiles, hp, k)
        except InputError as err:
            attention["tiles_error"] = str(err)
    if len(hw_kernels) and (hw_kernels["experiment"] == "attention").any():
        k = hw_kernels[hw_kernels["experiment"] == "attention"]
        attention["hw"] = att.measured_summary(k)
        try:  # one GPU (emulated ranks) and W GPUs are different platforms: each replayed on its own
            names = sorted(set(k["platform"].astype(str))) if "platform" in k else [primary.name]
            attention["compare"] = pd.concat([att.compare_attention(k[k["platform"] == n] if "platform" in k else k,
                                                                    find_platform(n, data_dir)) for n in names],
                                             ignore_index=True)
            attention["compare_platform"] = ", ".join(names)
        except InputError as err:
            attention["compare_error"] = str(err)
    out["attention"] = attention

    out["errors"] = error_table(out)
    return out


def error_table(out: dict) -> pd.DataFrame:
    """One row per measured-vs-simulated comparison: median / p90 relative error, sign agreement."""
    rows = []
    for name, frames in out["calibration"].items():
        if "compare" in frames:
            s = burst_error_summary(frames["compare"])
            modes = [""] + [f"{m}_" for m in MODE_ORDER if f"{m}_issue_n_points" in s]
            for mode in modes:
                for q, label in (("issue", "issue time"), ("period", "period")):
                    if f"{mode}{q}_n_points" not in s or not s[f"{mode}{q}_n_points"]:
                        continue
                    rows.append({"experiment": f"calibration bursts: {name}",
                                 "quantity": label + (f" ({mode[:-1]})" if mode else ""),
                                 "median_rel_err": s[f"{mode}{q}_median_rel_err"],
                                 "p90_rel_err": s[f"{mode}{q}_p90_rel_err"], "n": s[f"{mode}{q}_n_points"],
                                 "speedup_sign_agreement": float("nan")})
    if "compare" in out.get("moe", {}):
        c = out["moe"]["compare"]
        s = moe_cmp.moe_error_summary(c)
        for q in ("wave", "int", "speedup"):
            rows.append({"experiment": "MoE kernels", "quantity": q, "median_rel_err": s[f"{q}_median_rel_err"],
                         "p90_rel_err": s[f"{q}_p90_rel_err"], "n": s[f"{q}_n_points"],
                         "speedup_sign_agreement": s["speedup_sign_agreement"] if q == "speedup" else float("nan")})
    if "compare" in out.get("attention", {}) and len(out["attention"]["compare"]):
        c = out["attention"]["compare"]
        s = att.attention_error_summary(c)
        for q in ("fused", "speedup_vs_serial"):
            rows.append({"experiment": "FlashAttention + A2A", "quantity": q,
                         "median_rel_err": s[f"{q}_median_rel_err"], "p90_rel_err": s[f"{q}_p90_rel_err"],
                         "n": s[f"{q}_n_points"],
                         "speedup_sign_agreement": s["speedup_sign_agreement"] if q.startswith("speedup") else float("nan")})
    if "compare" in out.get("spans", {}):
        c = out["spans"]["compare"]
        s = error_summary(c["measured_span_median(us)"], c["simulated_span_median(us)"])
        rows.append({"experiment": "MoE tiles", "quantity": "span median", "median_rel_err": s["median_rel_err"],
                     "p90_rel_err": s["p90_rel_err"], "n": s["n_points"], "speedup_sign_agreement": float("nan")})
    return pd.DataFrame(rows, columns=["experiment", "quantity", "median_rel_err", "p90_rel_err", "n",
                                       "speedup_sign_agreement"])
