"""``xstage demo``: the bundled platforms' reference scenarios, simulated, written into one folder.

For every bundled platform: the Burst-Gap sweeps of the paper's Fig. 3, one MoE configuration replayed
with the expert-wave and interleaved schedules, and the FlashAttention design audit (computed by
``xstage.demo``). Then the dashboards. The folder is built under a temporary name and renamed when complete.
"""

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from xstage import demo
from xstage.cli.common import add_out, add_quiet, check_output, print_table, say
from xstage.errors import InputError

MARKER = ".xstage-demo"   # lists every file the demo wrote, one relative path a line


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

    t0 = time.perf_counter()
    summary = {"provenance": provenance(), "platforms": {}}
    for name in bundled_platforms():
        platform = load_platform(name)
        folder = tmp / name
        folder.mkdir()
        say(args, f"[demo] {name}: burst-gap sweeps")
        sweeps = demo.burst_sweeps(platform)
        sweeps.to_csv(folder / "burst_sweeps.csv", index=False)
        say(args, f"[demo] {name}: MoE replay {demo.REFERENCE_MOE} (expert-wave vs interleaved)")
        moe = demo.reference_moe(platform)
        pd.DataFrame([moe]).to_csv(folder / "moe_reference.csv", index=False)
        entry = summary["platforms"][name] = demo.platform_summary(platform, sweeps, moe)
        say(args, f"[demo] {name}: simpy vs exact steady state, max rel err "
            f"{entry['sim_vs_model_max_rel_err_T_iss']:.2e}; MoE {demo.REFERENCE_MOE} interleaved speedup "
            f"{moe['speedup']:.3f}x; FA M_ub* {entry['fa_audit']['M_ub_star_tokens']} tokens")
    if not args.no_dashboards:
        from xstage.compare.collect import collect
        from xstage.dashboards.build import build_dashboards
        say(args, "[demo] dashboards")
        index = build_dashboards(tmp / "dashboards", collect())
        summary["dashboards"] = str(out / Path(index).relative_to(tmp))
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary
