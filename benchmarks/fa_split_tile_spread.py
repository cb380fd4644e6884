"""How far the split tile-end kernel's programs spread, wave by wave, in committed Triton tile logs (post hoc reading).

Per configuration (M, and heads / head dim where the log has them; repeat 0 where it has repeats) of
``fused_wb_split``: the p10-p90 range of its whole tiles' Q-loop starts in each wave that holds at least 90 % of
the fullest wave's tiles, its slope over the waves (us per wave) and that slope over the median per-tile mainloop.
The eighth to eleventh FA rules hide the kernel's tail bursts through this drift; a kernel hidden without it is
hidden by something they do not model. Prints only.

    python benchmarks/fa_split_tile_spread.py attention-runs/ad8f0af-heldout4 attention-runs/63fb3ec-heldout3
"""

import argparse

import numpy as np

from xstage.errors import InputError, exit_with
from xstage.paths import data_dir
from xstage.records import load_records

SPLIT = "fused_wb_split"


def spread_rows(tiles) -> list:
    t = tiles[(tiles["schedule"] == SPLIT) & ~tiles["split"].astype(bool)]
    if "rep" in t.columns:
        t = t[t["rep"] == t["rep"].min()]
    keys = ["M"] + [k for k in ("heads", "head_dim") if k in t.columns]
    out = []
    for k, g in t.groupby(keys):
        n = g.groupby("seq").size()
        rng = g.groupby("seq")["mainloop_start(us)"].agg(lambda x: np.percentile(x, 90) - np.percentile(x, 10))
        rng = rng[n >= 0.9 * n.max()]
        if len(rng) < 3:
            continue
        slope = float(np.polyfit(rng.index.to_numpy(float), rng.to_numpy(float), 1)[0])
        ml = float((g["mainloop_end(us)"] - g["mainloop_start(us)"]).median())
        out.append({**dict(zip(keys, (int(x) for x in np.atleast_1d(k)))), "waves": int(len(rng)),
                    "slope_us_per_wave": slope, "mainloop_us": ml, "slope_per_mainloop": slope / ml})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="Triton runs under data/ with an attention-tile.parquet")
    args = ap.parse_args(argv)
    for name in args.runs:
        path = data_dir() / name / "attention-tile.parquet"
        if not path.is_file():
            raise InputError("runs", name, "has no attention-tile.parquet")
        for r in spread_rows(load_records(path, "tile")[0]):
            print(f"{name:>32} " + " ".join(f"{k} {r[k]}" for k in ("M", "heads", "head_dim") if k in r)
                  + f": {r['waves']} waves, p10-p90 start range +{r['slope_us_per_wave']:.1f} us/wave, mainloop "
                  f"{r['mainloop_us']:.0f} us, {r['slope_per_mainloop']:.3f} of it")
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_split_tile_spread.py")
