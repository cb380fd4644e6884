"""``xstage demo``: the bundled platforms' reference scenarios, simulated, written into one folder.

For every bundled platform: the Burst-Gap sweeps of the paper's Fig. 3 (periodic gap sweep, isolated
volume sweep, the local control and the completion-coupled counterfactual), one MoE configuration replayed
with the expert-wave and interleaved schedules, and the FlashAttention design audit. Then the dashboards.
"""

import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from xstage.cli.common import add_out, add_quiet, print_table, say
from xstage.errors import InputError

MARKER = ".xstage-demo"   # lists every file the demo wrote, one relative path a line
REFERENCE_MOE = "Qwen3.5/w8a8/skewed/M"


def register(sub):
    p = sub.add_parser("demo", help="simulate the bundled platforms' reference scenarios and build the dashboards",
                       description="Simulate every bundled platform's reference scenarios (burst-gap sweeps, "
                       "a MoE replay, the FlashAttention audit), write records and dashboards into --out. The "
                       "folder is built under a temporary name and renamed when complete.")
    add_out(p, "output folder (default ./xstage-demo); an existing one is replaced only with --overwrite, and "
            "only if it holds nothing but an earlier demo's files", default="xstage-demo", overwrite=False)
    p.add_argument("--overwrite", action="store_true", help="replace an earlier demo's folder at --out")
    p.add_argument("--no-dashboards", action="store_true", help="skip building the dashboards")
    add_quiet(p)
    p.set_defaults(func=run_demo)


def _written_by_demo(out: Path) -> set:
    marker = out / MARKER
    if not marker.is_file():
        return set()
    return {line for line in marker.read_text().splitlines()[1:] if line}


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse --out before any work unless it is missing, empty, or an earlier demo's (with --overwrite)."""
    from xstage.cli.common import check_output

    check_output("--out", out, folder=True)
    if not out.exists() or not any(out.iterdir()):
        return
    ours = _written_by_demo(out)
    if not ours:
        raise InputError("--out", str(out), "is a non-empty folder not written by `xstage demo`; choose another")
    if not overwrite:
        raise InputError("--out", str(out), "holds an earlier demo (pass --overwrite to replace it)")
    theirs = sorted(str(p.relative_to(out)) for p in out.rglob("*")
                    if p.is_file() and p.name != MARKER and str(p.relative_to(out)) not in ours)
    if theirs:
        raise InputError("--out", str(out), f"holds files the demo did not write ({', '.join(theirs[:3])}"
                         f"{', ...' if len(theirs) > 3 else ''}); move them or choose another folder")


def _publish(tmp: Path, out: Path) -> None:
    """Put the finished folder at ``out``: rename, replacing an empty or earlier demo folder."""
    files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    (tmp / MARKER).write_text("written by xstage demo\n" + "\n".join(files) + "\n")
    os.chmod(tmp, 0o755)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def burst_sweeps(platform) -> pd.DataFrame:
    """Fig. 3 a-c on the simpy simulator (the reference engine): one summary row per (mode, K, B, G).

    Gaps are fractions of G*, rounded *up* to 1e-4 us: rounding G* down leaves a gap a hair short of it,
    whose warm-up from an empty X-Stage is ceil((Q - R G) / Delta) bursts with Delta -> 0 (7,400 bursts
    at 2.7e-5 us short). Every periodic point runs past its closed-form warm-up, so its summary is steady.
    """
    from xstage.sim.bursts import BurstConfig, simulate_bursts
    from xstage.sim.model import recovery_gap_us, warmup_bursts

    K, B = platform.sm_count, 32 * 1024
    t0, V, R = platform.issue_time0_us(K, B), K * B, platform.drain_rate_Bpus
    g_star = recovery_gap_us(t0, V, R)
    gaps = [math.ceil(g_star * f * 1e4) / 1e4 for f in (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)]
    rows = []
    for mode in ("periodic", "local", "coupled"):
        for g in gaps:
            n = max(40, warmup_bursts(g, t0, V, R, platform.capacity_bytes(K)) + 10)
            rows.append(simulate_bursts(platform, BurstConfig(K, B, g, n, mode=mode, engine="simpy"),
                                        record_occupancy=False).summary(platform))
    for kib in (4, 8, 16, 24, 32, 40, 48, 64, 96, 128):
        cfg = BurstConfig(K, kib * 1024, 1.0, 3, mode="isolated", engine="simpy")
        rows.append(simulate_bursts(platform, cfg, record_occupancy=False).summary(platform))
    return pd.DataFrame(rows)


def run_demo(args) -> int:
    out = Path(args.out)
    _check_out(out, args.overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        summary = _build(args, tmp, out)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print_table({"out": str(out), "summary": str(out / "summary.json"),
                 "dashboards": summary.get("dashboards", "skipped"), "wall_s": summary["wall_s"]})
    return 0


def _build(args, tmp: Path, out: Path) -> dict:
    """Every file of the demo, written into ``tmp`` (paths in summary.json name ``out``)."""
    from xstage.provenance import provenance
    from xstage.sim.platform import bundled_platforms, load_platform
    from xstage.sim.scenarios import burst_model, fa_model
    from xstage.sim.sweep import run_moe_config

    t0 = time.perf_counter()
    summary = {"provenance": provenance(), "platforms": {}}
    for name in bundled_platforms():
        platform = load_platform(name)
        folder = tmp / name
        folder.mkdir()
        say(args, f"[demo] {name}: burst-gap sweeps")
        sweeps = burst_sweeps(platform)
        sweeps.to_csv(folder / "burst_sweeps.csv", index=False)
        K = platform.sm_count
        say(args, f"[demo] {name}: MoE replay {REFERENCE_MOE} (expert-wave vs interleaved)")
        moe = run_moe_config(REFERENCE_MOE, platform)
        pd.DataFrame([moe]).to_csv(folder / "moe_reference.csv", index=False)
        fa = fa_model(platform, K, 128, 128, 128, 2, 0.79)
        periodic = sweeps[sweeps["mode"] == "periodic"]
        if not periodic["steady"].all():
            raise RuntimeError(f"demo burst sweep on {name}: a periodic point ran shorter than its warm-up")
        # against the exact steady state (model_T_iss_us = max(T_iss0, V/R - G, (V - Q)/R)), steady windows only
        err = ((periodic["T_iss_us"] - periodic["model_T_iss_us"]).abs() / periodic["model_T_iss_us"]).max()
        summary["platforms"][name] = {
            "model_K_32KiB_gap0": burst_model(platform, K, 32 * 1024, 0.0),
            "sim_vs_model_max_rel_err_T_iss": float(err),  # simpy engine vs the exact steady state
            "moe_reference": {k: moe[k] for k in ("config", "wave_us", "int_us", "speedup", "wave_span_median_us",
                                                  "int_span_median_us")},
            "fa_audit": fa,
        }
        say(args, f"[demo] {name}: simpy vs exact steady state, max rel err {err:.2e}; MoE {REFERENCE_MOE} "
            f"interleaved speedup {moe['speedup']:.3f}x; FA M_ub* {fa['M_ub_star_tokens']} tokens")
    if not args.no_dashboards:
        from xstage.compare.collect import collect
        from xstage.dashboards.build import build_dashboards
        say(args, "[demo] dashboards")
        index = build_dashboards(tmp / "dashboards", collect())
        summary["dashboards"] = str(out / Path(index).relative_to(tmp))
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary
