"""How far the lockstep finite runs reproduce themselves, and the predictions against that (issue 15, item 4;
session 10): scoring of repeated measurements of one grid.

    python benchmarks/finite_runs_repeat.py score PRED.json OUT.json RUN_DIR [RUN_DIR ...]

Each RUN_DIR is one ``benchmarks/gpu/lockstep_drained.py`` output (the pre-registered grid of
``finite_runs_drained.GRID``, every figure the median over its trials). With two or more of them, measured on
one microbenchmark build:

- ``agreement``: per target and figure, for every ordered pair of measurements (a, b), the share of runs where
  a is within 10 % of b (|a - b| / b <= 0.10: one measurement used as the prediction of the other, scored as
  the predictions are). Its mean over the pairs is the instrument's own share, the most any fixed prediction
  can expect from a new measurement of the same grid.
- ``reproducible``: the runs where every ordered pair agrees within 10 %.
- ``predictions``: the predictions of PRED.json (``finite_runs_drained.py predict``) scored on each measurement,
  on the consensus (per run the median over the measurements) and on the reproducible runs' consensus.
"""

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finite_runs_drained import FIGURES, _errs, _write, measured  # noqa: E402

TOL = 0.10
KEY = ["K", "B", "n"]


def _tables(run_dirs: list[Path], targets) -> dict:
    """Per (target, figure), runs x measurements: the figure's median over trials, one column per RUN_DIR (its
    folder name). Each RUN_DIR's runs.csv is read once."""
    meas = {d.name: measured(d) for d in run_dirs}
    return {(t, fig): pd.DataFrame({name: m[m["target"] == t].set_index(KEY)[fig] for name, m in meas.items()}).dropna()
            for t in targets for fig in FIGURES}


def agreement(table: pd.DataFrame) -> dict:
    """Ordered pairs of measurements: the share of runs where column a is within TOL of column b."""
    pairs, ok = {}, np.ones(len(table), bool)
    for a, b in itertools.permutations(table.columns, 2):
        within = ((table[a] - table[b]).abs() / table[b] <= TOL).to_numpy()
        pairs[f"{a} vs {b}"] = float(within.mean())
        ok &= within
    return {"pairs": pairs, "mean_share": float(np.mean(list(pairs.values()))), "n_runs": int(len(table)),
            "reproducible": [list(map(int, k)) for k in table.index[ok]],
            "not_reproducible": {" ".join(map(str, k)): [float(v) for v in table.loc[k]] for k in table.index[~ok]}}


def score(pred: dict, run_dirs: list[Path]) -> dict:
    out = {"run_dirs": [str(d) for d in run_dirs], "tolerance": TOL, "predictions_rule": pred["rule"],
           "agreement": {}, "predictions": {}}
    tables = _tables(run_dirs, sorted({k.split()[0] for k in pred["predictions"]}))
    for (target, fig), table in tables.items():
        out["agreement"][f"{target} {fig}"] = agreement(table)
    for key, p in pred["predictions"].items():
        target = key.split()[0]
        res = {}
        for fig in FIGURES:
            table = tables[(target, fig)]
            pr = pd.Series({tuple(r[k] for k in KEY): r[fig] for r in p["runs"]}).reindex(table.index)
            per = {c: _errs(((pr - table[c]) / table[c]).abs()) for c in table.columns}
            cons = table.median(axis=1)
            err = ((pr - cons) / cons).abs()
            rep = [tuple(k) for k in out["agreement"][f"{target} {fig}"]["reproducible"]]
            misses = {" ".join(map(str, k)): {"pred": float(pr[k]), "consensus": float(cons[k]),
                                              "rel_err": float((pr[k] - cons[k]) / cons[k])}
                      for k in err.index[err > TOL]}
            res[fig] = {"per_measurement": per, "consensus": _errs(err),
                        "reproducible_consensus": _errs(err.loc[rep]) if rep else None, "misses_on_consensus": misses}
        out["predictions"][key] = res
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 5 or argv[0] != "score":
        print("usage: finite_runs_repeat.py score PRED.json OUT.json RUN_DIR RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    pred_path, dest, run_dirs = Path(argv[1]), Path(argv[2]), [Path(d) for d in argv[3:]]
    if dest.exists():
        print(f"OUT.json: {dest} exists (records are never overwritten)", file=sys.stderr)
        return 2
    for d in run_dirs:
        if not (d / "runs.csv").is_file():
            print(f"RUN_DIR: {d} holds no runs.csv (a lockstep_drained.py output folder)", file=sys.stderr)
            return 2
    if len({d.name for d in run_dirs}) != len(run_dirs):
        print(f"RUN_DIR: folder names repeat ({', '.join(d.name for d in run_dirs)}); they label the measurements",
              file=sys.stderr)
        return 2
    from xstage.provenance import provenance
    obj = score(json.loads(pred_path.read_text()), run_dirs)
    for key, a in obj["agreement"].items():
        print(f"{key}: measurements agree within 10 % on {a['mean_share']:.0%} of runs (mean over "
              f"{len(a['pairs'])} ordered pairs); reproducible runs {len(a['reproducible'])} of {a['n_runs']}")
    for key, res in obj["predictions"].items():
        for fig, r in res.items():
            per = " ".join(f"{v['within_10pct']:.0%}" for v in r["per_measurement"].values())
            rc = r["reproducible_consensus"]
            print(f"{key} {fig}: per measurement {per}; consensus {r['consensus']['within_10pct']:.0%}"
                  + (f"; reproducible runs {rc['within_10pct']:.0%} of {rc['n']}" if rc else ""))
    obj["provenance"] = provenance(with_gpu=False)
    _write(dest, obj)
    return 0


if __name__ == "__main__":
    sys.exit(main())
