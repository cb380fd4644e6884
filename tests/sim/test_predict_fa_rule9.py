"""The ninth FA rule (``benchmarks/predict_fa_rule9.py``): the split tile-end kernel's drift fitted per M on the
committed residuals, every other answer the eighth rule's where there is a tail, the non-split twin where there is none."""

import pytest

from xstage.paths import data_dir
from xstage.sim.platform import load_platform

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def mod():
    return load_script("predict_fa_rule9")


@pytest.fixture(scope="module")
def setup(mod):
    import json

    base = data_dir()
    factors = json.loads((base / mod.PP.LAWS).read_text())["mainloop_factors"]
    m8 = mod.R8.measure(base)
    return base, factors, m8


def _row(mod, setup, variant, M):
    base, factors, _ = setup
    return next(r for r in mod.R8.preregistered([M], base, factors) if r["variant"] == variant)


def test_no_tail_is_read_from_the_tile_count(mod):
    kw = {"heads": 3, "block_m": 128}
    assert mod.no_tail(dict(kw, seq_len=45056), 132)          # 1056 tiles = 8 waves of 132
    assert not mod.no_tail(dict(kw, seq_len=49152), 132)      # 1152 tiles: a tail of 96
    assert mod.no_tail(dict(kw, seq_len=49152), 96)


def test_with_a_tail_only_the_split_kernel_changes(mod, setup):
    m8 = setup[2]
    for v in mod.R8.VARIANTS:
        r = _row(mod, setup, v, 53248)
        kw9, kw8 = mod.rule9_kw(r, m8, 0.05, 132), mod.R8.rule8_kw(r, m8)
        if v == mod.SPLIT:
            assert kw9 == dict(kw8, program_spread=0.05)
        else:
            assert kw9 == kw8


def test_without_a_tail_the_split_variants_are_their_twins_with_no_mainloop_factor(mod, setup):
    m8 = setup[2]
    kws = {v: mod.rule9_kw(_row(mod, setup, v, 45056), m8, 0.05, 132) for v in mod.R8.VARIANTS}
    for split, twin in mod.TWIN.items():
        a, b = dict(kws[split]), dict(kws[twin])
        assert a.pop("tail_parts") == 2 and b.pop("tail_parts") == 1    # no tail: the parts never run
        assert a == b and a["mainloop_factor"] == 1.0
    r8 = mod.R8.rule8_kw(_row(mod, setup, "fused_wb", 45056), m8)
    assert r8["mainloop_factor"] > 1.0 and kws["fused_wb"]["mainloop_factor"] == 1.0


def test_the_split_kernels_answer_falls_with_its_drift(mod, setup):
    m8 = setup[2]
    r = _row(mod, setup, mod.SPLIT, 36864)
    platform = load_platform("h200-pcie-host")
    lo, hi = (mod.split_residual(r, m8, platform, 0.35e6, d) for d in (0.0, 0.06))
    assert lo > 2 * hi > 0


RUN = "attention-runs/6c1c349-heldout2"
RECORDS = {"fit": "predictions/fa-rule9-fit-h200-pcie-host.json",
           "preregistered": "predictions/fa-rule9-preregistered-h200-pcie-host.json",
           "heldout": "predictions/fa-rule9-heldout2-6c1c349-h200-pcie-host.json"}


@pytest.fixture(scope="module")
def recs():
    import json

    return {k: json.loads((data_dir() / v).read_text()) for k, v in RECORDS.items()}


def test_the_fitted_drifts_are_the_codes_on_the_committed_residuals(mod, recs, setup):
    import json

    from xstage.records import load_records

    base, factors, m8 = setup
    platform = load_platform("h200-pcie-host")
    m = mod.C.measure(load_records(base / mod.C.TILES, "tile")[0], json.loads((base / mod.C.SUMMARY).read_text()))
    m9 = json.loads(json.dumps(mod.measure(base, platform, m, m8, factors)))
    assert m9 == recs["fit"]["ninth_rule"]
    d = {int(k): v for k, v in m9["split_drift_per_M"].items()}
    assert max(d[M] for M in d if M <= 49152) < 0.025 < 0.06 < min(d[57344], d[65536])   # the fall at 56K and up


@pytest.mark.parametrize("name", ["fit", "preregistered", "heldout"])
def test_recorded_answers_are_the_codes(mod, recs, name):
    import json

    rec = recs[name]
    platform = load_platform(rec["platform"])
    fa4_law = json.loads((data_dir() / mod.PP.LAWS).read_text())["laws"]["fa4"]
    m9 = dict(rec["ninth_rule"], split_drift_per_M={int(k): v for k, v in rec["ninth_rule"]["split_drift_per_M"].items()})
    m8 = dict(rec["eighth_rule"], drift={v: {int(k): x for k, x in d.items()} for v, d in rec["eighth_rule"]["drift"].items()})
    for r in rec["rows"][::3]:
        again = {k: v for k, v in r.items() if k in ("set", "kind", "kernel", "M", "variant", "kw", "measured_E_res_us")}
        mod.predict(again, platform, fa4_law, rec["sixth_rule"], m8, m9, rec["seventh_rule_d7"], rec["triton_law"])
        for k in mod.KEYS:
            assert again[f"{k}_E_res_us"] == pytest.approx(r[f"{k}_E_res_us"], abs=1e-6)
            if "measured_E_res_us" in r:
                assert again[f"{k}_within"] == r[f"{k}_within"]


def test_the_fresh_run_was_predicted_before_it_was_measured(recs):
    from xstage.records import load_records

    pre, judged, fit = recs["preregistered"], recs["heldout"], recs["fit"]
    assert pre["mode"] == "preregistered" and pre["rules_commit"] == pre["provenance"]["git_commit"]
    _, meta = load_records(data_dir() / RUN / "attention-kernel.parquet", "kernel")
    assert pre["provenance"]["date"] < meta["provenance"]["date"]
    assert meta["provenance"]["git_commit"].startswith("6c1c349") and meta["provenance"]["git_commit"] != pre["rules_commit"]
    measured_before = {r["M"] for r in fit["rows"]}
    assert {r["M"] for r in pre["rows"]} == {r["M"] for r in judged["rows"]} and not measured_before & {r["M"] for r in pre["rows"]}
    for r in judged["rows"]:
        p = next(x for x in pre["rows"] if (x["M"], x["variant"]) == (r["M"], r["variant"]))
        assert r["prereg_rule9_E_res_us"] == p["rule9_E_res_us"]
    a = judged["summary"]["all"]
    assert (a["rule9"]["within"], a["prereg_rule9"]["within"], a["rule8"]["within"], a["rule7"]["within"], a["rule9"]["n"]) \
        == (20, 20, 18, 12, 24)
