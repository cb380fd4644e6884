"""Rule 22: does a term for the last wave of tiles (the host stores with no later computation to hide behind) explain
the split Triton kernel's plain-build fused - FA-only E better than rule 21, held out? Post hoc, on rule 21's 39
committed plain-build points (issue 15 item 5; ``docs/calibration/attention-rule22.md``, whose question, forms and
decision rule were committed before any fit).

The layout, per point, from the project's own configuration (``benchmarks/gpu/fa_rule19.py``'s ``point_config``
with the ``fused_wb_split`` options, ``AttentionConfig.tail_split``, ``A2ALayout.work_order`` / ``tile_plan``): items
round-robin over P = min(tiles, 132) programs, a whole tile one Q-loop, a tail part 1 / parts; a tile's stores are
issued when its last item ends. ``layout_terms`` gives the span S, the compute H after the last host-bound tile's
stores (Q-loops), the tiles n_last stored at that moment and the idle share I of the SMs' time. With tau = T / S:

    cover_after   E = a_b X - g_b T - h_b T_H      T_H = tau * H (us)
    last_batch    E = a_b X - g_b T + c_b X_last   X_last = n_last * block_m * head_dim / 1e6
    idle_tail     E = a_b X - g_b T + k_b T_I      T_I = T * I (us)

Each is rule 21's ``bytes_offset`` (``fa_rule21.py``) plus one term, fitted and held out by rule 21's code (per
build, least squares without intercept; leave one point out, leave one call out). A form is frozen as rule 22 only
if it is within at more points than ``bytes_offset`` leaving one call out and at no fewer leaving one point out.

The outcome (``data/attention-extra/fa-rule22-posthoc-h200-pcie-host.json``): no form qualifies, so nothing is
frozen and the pending rule-21 call scores rule 21 alone. Each form gains in-sample over ``bytes_offset`` (19 of
39) and loses held out: leaving one point out 14 / 15 / 15 of 39 against 18, leaving one call out 11 / 9 / 12 against
15.

    python benchmarks/fa_rule22.py posthoc [--out data/attention-extra/fa-rule22-posthoc-h200-pcie-host.json]
"""

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_link_cost as F  # noqa: E402
import fa_rule21 as R21  # noqa: E402

from xstage.errors import exit_with  # noqa: E402
from xstage.hw.attention.variants import FUSED_OPTIONS, fused_options, fused_tag  # noqa: E402
from xstage.paths import data_dir  # noqa: E402

SMS = 132                       # H200 SMs: the persistent kernel runs min(tiles, SMs) programs (kernel.num_programs)
BASE = "bytes_offset"           # rule 21's frozen form, scored beside by the same code
FORMS = {  # name: (inputs, signs, needs), rule 21's ``spec`` shape
    "cover_after": (("X", "T", "T_H"), (1.0, -1.0, -1.0), "build, M, heads, block_m, W, SMs, T"),
    "last_batch": (("X", "T", "X_last"), (1.0, -1.0, 1.0), "build, M, heads, block_m, W, SMs, T"),
    "idle_tail": (("X", "T", "T_I"), (1.0, -1.0, 1.0), "build, M, heads, block_m, W, SMs, T"),
}
POSTHOC = "attention-extra/fa-rule22-posthoc-h200-pcie-host.json"


def _gpu_script(name: str):
    """``benchmarks/gpu/<name>.py`` as module ``<name>_gpu`` (a CPU script of that name exists)."""
    path = Path(__file__).resolve().parent / "gpu" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_G19 = _gpu_script("fa_rule19")
WB_SPLIT = next(o for o in FUSED_OPTIONS if fused_tag(*o) == "_wb_split")


def fused_config(p: dict):
    """The ``fused_wb_split`` build's configuration at point {M, heads, head_dim, block_n}: the calls'
    ``point_config`` with the ``_wb_split`` fused options (FA-only has the same tiles and tail split)."""
    return fused_options(_G19.point_config(p), WB_SPLIT)


def layout_terms(cfg, sms: int = SMS) -> dict:
    """The kernel's schedule in Q-loops (a whole tile 1, a tail part 1 / parts), items round-robin over the programs:
    tiles, programs, tail tiles, parts, span S, H (compute after the last host-bound tile's stores are issued),
    n_last (host-bound tiles issued at that moment) and the idle share I = 1 - work / (programs * S)."""
    lay = cfg.layout
    tiles = lay.num_tiles
    programs = min(tiles, sms)
    n_full, parts = cfg.tail_split(programs)
    item = np.arange(n_full + parts * (tiles - n_full))
    split = item >= n_full
    length = np.where(split, 1.0 / parts, 1.0)
    pos = np.where(split, n_full + (item - n_full) // parts, item)       # the tile's place in the work order
    end = np.zeros(len(item))
    for p in range(programs):                                           # program p runs items p, p + P, ...
        end[p::programs] = np.cumsum(length[p::programs])
    tile_end = np.zeros(tiles)
    np.maximum.at(tile_end, pos, end)                                   # stores issued when the last part ends
    remote = lay.tile_plan()["remote"].to_numpy()[lay.work_order(cfg.local_last)]
    span = float(end.max())
    last = float(tile_end[remote].max()) if remote.any() else 0.0
    return {"tiles": int(tiles), "programs": int(programs), "tail": int(tiles - n_full), "parts": int(parts),
            "S": span, "H": span - last, "n_last": int((tile_end[remote] == last).sum()),
            "I": 1.0 - float(length.sum()) / (programs * span)}


def with_terms(f: pd.DataFrame, sms: int = SMS) -> pd.DataFrame:
    """Rows of points (M, heads, head_dim, block_n, T) with the layout and the three regressors T_H, X_last, T_I."""
    rows = []
    for r in f.to_dict(orient="records"):
        cfg = fused_config(r)
        t = layout_terms(cfg, sms)
        rows.append({**t, "T_H": r["T"] * t["H"] / t["S"], "X_last": t["n_last"] * cfg.block_m * cfg.head_dim / 1e6,
                     "T_I": r["T"] * t["I"]})
    return pd.concat([f.reset_index(drop=True), pd.DataFrame(rows)], axis=1)


def plain_points(base: Path) -> pd.DataFrame:
    """Rule 21's 39 plain-build points (``fa_rule21.plain_points``) with the layout terms."""
    return with_terms(R21.plain_points(base))


def counts(v: dict) -> tuple:
    """(in-sample, leave one point out, leave one call out) within counts of a ``score_form`` result."""
    return v["in_sample"]["within"], v["leave_one_point_out"]["within"], v["leave_one_call_out"]["within"]


def decide(forms: dict) -> str | None:
    """The frozen form, by the decision rule fixed before fitting (``attention-rule22.md``): more within than
    ``bytes_offset`` leaving one call out, no fewer leaving one point out; ties by leave one call out, leave one point
    out, in-sample, then ``FORMS`` order. None when no form qualifies."""
    _, lopo0, loco0 = counts(forms[BASE])
    ok = [k for k in FORMS if counts(forms[k])[2] > loco0 and counts(forms[k])[1] >= lopo0]
    return max(ok, key=lambda k: (counts(forms[k])[2], counts(forms[k])[1], counts(forms[k])[0],
                                  -list(FORMS).index(k))) if ok else None


def by_build(f: pd.DataFrame, form: str, forms: dict | None = None) -> dict:
    """{build: in-sample, leave one call out within shares} (``fa_rule21.share``); leave one point out by build is in
    ``fa_rule21.score_form``'s result."""
    b = f["build"].to_numpy()
    fits = {"in_sample": R21.predict(f, form, R21.fit(f, form, forms), forms),
            "leave_one_call_out": R21.held_out(f, form, "run", forms)}
    return {k: {x: R21.share(pred[b == x], f["E"][b == x]) for x in sorted(set(b))} for k, pred in fits.items()}


def posthoc(base: Path) -> dict:
    f = plain_points(base)
    forms = {BASE: R21.score_form(f, BASE)} | {k: R21.score_form(f, k, FORMS) for k in FORMS}
    for k, v in forms.items():
        extra = by_build(f, k, FORMS if k in FORMS else None)
        v["in_sample"]["by_build"] = extra["in_sample"]
        v["leave_one_call_out"]["by_build"] = extra["leave_one_call_out"]
    for k, v in forms.items():
        print(f"{k:<13} in-sample {v['in_sample']['within']:>2}/39  LOPO {v['leave_one_point_out']['within']:>2}/39 "
              f"(median |err| {v['leave_one_point_out']['median_abs_error_us']:.0f} us)  LOCO "
              f"{v['leave_one_call_out']['within']:>2}/39 ({v['leave_one_call_out']['n']} predicted)  rule19 from "
              f"the others {v['rule19_from_others']['within']}/14")
        for b in sorted(v["in_sample"]["by_build"]):
            print(f"    {b:<11} " + "  ".join(f"{w} {v[w]['by_build'][b]['within']}/{v[w]['by_build'][b]['of']}"
                                              for w in ("in_sample", "leave_one_point_out", "leave_one_call_out")))
    chosen = decide(forms)
    print(f"decision: {'freeze ' + chosen if chosen else 'no form qualifies; nothing frozen'}")
    return {"what": "rule 22 post hoc: rule 21's bytes_offset plus one last-wave term (cover_after, last_batch, "
                    "idle_tail), fitted and held out by fa_rule21's code on its 39 plain-build points; decision rule "
                    "fixed in docs/calibration/attention-rule22.md before fitting",
            "records": [R21.STD_RECORD, R21.RULE19_RECORD, R21.RULE20_RECORD], "sms": SMS,
            "decision_rule": "frozen only if leave-one-call-out within > bytes_offset's and leave-one-point-out "
                             "within >= bytes_offset's",
            "decision": chosen, "forms": forms, "points": f.round(4).to_dict(orient="records")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("posthoc",))
    ap.add_argument("--out", help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    F.check_out(args.out)
    F.write_record(args.out, posthoc(data_dir()))
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_rule22.py")
