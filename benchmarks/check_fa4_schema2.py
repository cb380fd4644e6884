"""The FA4 residual predicted on the host path's schema-2 platforms (fidelity issue, items 2 and 5).

``check_fa4_prediction.py`` judges the FA4 prediction made from run1's measured FA-only times on the bundled
``h200-pcie-host``. This re-runs that predictor (``meas_fa``: no SM-side stage) on the three platforms fitted on
the wide host grid's recorded split (``data/calibration-extra/host-probe-3a47e1b/heldout.json``: v1 with Q per
K, two-stage Q_shared + K q_sm, two-stage with the relaxing capacity), to see whether the host path's model
explains the residual FA4's tile-end stores leave. Same target: |predicted - measured| <= max(20 us, 20 %).

    python benchmarks/check_fa4_schema2.py
"""

import argparse
import dataclasses
import json
from pathlib import Path

from check_fa4_prediction import FRACTION, VARIANTS, measured, within
from xstage.errors import exit_with
from xstage.paths import data_dir
from xstage.sim.platform import Platform, load_platform
from xstage.sim.predict import FaKernel, predict_fa


def platforms(heldout: Path) -> dict:
    """The bundled platform and the wide grid's fitted ones (tensor rates from the bundled one)."""
    base = load_platform("h200-pcie-host")
    fitted = json.loads(heldout.read_text())["wide_grid"]
    out = {"bundled h200-pcie-host": base}
    for name, v in fitted.items():
        if isinstance(v, dict) and "platform" in v:
            out[name] = dataclasses.replace(Platform.from_dict(v["platform"]), tensor_TFLOPs=base.tensor_TFLOPs)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=None, help="FA4 records folder (default: the data folder's attention-fa4/)")
    args = ap.parse_args(argv)
    meas = measured(Path(args.records) if args.records else data_dir() / "attention-fa4")
    for name, plat in platforms(data_dir() / "calibration-extra" / "host-probe-3a47e1b" / "heldout.json").items():
        hits, errors = 0, []
        for M, g in sorted(meas["run1"].items()):
            fa = g.loc["fa4"]
            for variant, layout in VARIANTS.items():
                if variant not in g.index:
                    continue
                e = float(g.loc[variant, "paired_minus_fa(us)"])
                p = predict_fa(FaKernel(seq_len=M, heads=int(fa["heads"]), head_dim=int(fa["head_dim"]),
                                        world_size=int(fa["world_size"]), fa_us=float(fa["time(us)"]),
                                        remote_fraction=FRACTION[layout]), plat)
                hits += within(float(p["E_res_us"]), e)
                errors.append(float(p["E_res_us"]) - e)
        print(f"{name:>40}: within {hits}/{len(errors)}; predicted - measured (us): "
              + " ".join(f"{x:.0f}" for x in errors))
    return 0


if __name__ == "__main__":
    exit_with(main, "check_fa4_schema2")
