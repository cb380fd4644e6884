"""The twelfth FA rule (``benchmarks/predict_fa_rule12.py``): the split kernel's drift by the K/V steps per Q tile
(M // block_n, three regimes), its fit rows and its pre-registration points."""

import json

import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim.platform import load_platform

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def mod():
    return load_script("predict_fa_rule12")


@pytest.fixture(scope="module")
def setup(mod):
    base = data_dir()
    factors = json.loads((base / mod.PP.LAWS).read_text())["mainloop_factors"]
    platform = load_platform("h200-pcie-host")
    m = {"q_c_bytes": 0.35e6}
    m8 = mod.R8.measure(base)
    return base, factors, platform, m, m8, mod.measure(base, platform, m, m8, factors)


def test_three_drifts_fitted_on_every_committed_split_row_with_each_repeat(mod, setup):
    m12 = setup[5]
    d = m12["split_drift"]
    assert d["low"] < d["band"] < d["high"]
    assert m12["block_n_of_fit_rows"] == [128]
    assert sum(m12["split_rows"].values()) == 32 + 13   # 32 single-run rows (rule 11's) + 5 configs x 3 repeats - 2 tail-0
    assert m12["split_rows"]["high"] >= 12             # heldout4's d 64 repeats sit in the high regime


def test_half_the_block_n_doubles_the_steps_at_the_same_m(mod, setup):
    base, factors, platform, m, m8, m12 = setup
    rows = {(r["M"], r["kw"]["block_n"], r["variant"]): r for r in mod.preregistered(
        mod.parse_points("32768:3:128:64,32768:3:128:128"), base, factors)}
    a, b = rows[(32768, 64, mod.R9.SPLIT)], rows[(32768, 128, mod.R9.SPLIT)]
    assert a["fa_us_interpolated"] == b["fa_us_interpolated"]
    ea, da, na = mod.split_answer(a, platform, m["q_c_bytes"], m8, m12)
    eb, db, nb = mod.split_answer(b, platform, m["q_c_bytes"], m8, m12)
    assert (na, nb) == ("high", "low") and (da, db) == (m12["split_drift"]["high"], m12["split_drift"]["low"])
    assert mod.R11.regime(a, 62914560, by_m=True) == "low"     # M alone does not see block_n
    assert ea < eb - 50                                  # more drift, more hidden


def test_points_take_block_n_and_bad_points_are_named(mod):
    assert mod.parse_points("32768:3:128:64,30720:3:64,8192") == [(32768, 3, 128, 64), (30720, 3, 64, 128),
                                                                  (8192, 3, 128, 128)]
    for bad in ("1:2:3:4:5", "32768:x"):
        with pytest.raises(InputError):
            mod.parse_points(bad)


def test_an_existing_out_is_refused(mod, tmp_path):
    out = tmp_path / "x.json"
    out.write_text("{}")
    with pytest.raises(InputError):
        mod.main(["--fit", "--out", str(out)])
