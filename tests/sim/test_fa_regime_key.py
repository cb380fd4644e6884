"""``benchmarks/fa_regime_key.py``: the pre-registered decision between M (H_M) and the FA-only time (H_T) as the key
of the split kernel's hiding -- its classes and verdict on exact small cases, the clock helpers, the committed
pre-registration record against the module's rule, and the run it judged (8c8a959-regime): its judged numbers are the
run's records, and the commit the records carry already held the pre-registration."""

import json
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from xstage.errors import InputError
from xstage.paths import data_dir

from .bench_scripts import load_script

PRE = "predictions/fa-regime-preregistered-h200-pcie-host.json"


@pytest.fixture(scope="module")
def mod():
    return load_script("fa_regime_key")


def test_classes(mod):
    assert mod.classify(20.0, 50.0) == "hidden"                 # the 20 us floor
    assert mod.classify(20.1, 50.0) == "between"
    assert mod.classify(140.0, 1500.0) == "hidden"              # 0.1 x fused_wb
    assert mod.classify(100.0, 300.0) == "exposed"
    assert mod.classify(99.9, 300.0) == "between"
    assert mod.classify(-45.0, 1000.0) == "hidden"
    with pytest.raises(InputError):
        mod.classify(float("nan"), 1.0)


def test_each_hypothesis_side(mod):
    assert mod.predicted(65536, 4185.0) == {"H_M": "hidden", "H_T": "exposed"}
    assert mod.predicted(47104, 12817.0) == {"H_M": "exposed", "H_T": "hidden"}
    assert mod.predicted(53248, 8000.0) == {"H_M": "band", "H_T": "band"}
    assert mod.predicted(49152, 7000.0) == {"H_M": "exposed", "H_T": "exposed"}
    assert mod.predicted(61440, 10000.0) == {"H_M": "hidden", "H_T": "hidden"}


PRED = {"a": {"H_M": "hidden", "H_T": "exposed"}, "b": {"H_M": "hidden", "H_T": "exposed"},
        "c": {"H_M": "exposed", "H_T": "hidden"}, "d": {"H_M": "exposed", "H_T": "hidden"}}
OK = {"x": ("exposed", "exposed"), "y": ("hidden", "hidden")}


@pytest.mark.parametrize("classes,controls,want", [
    ({"a": "hidden", "b": "hidden", "c": "exposed", "d": "exposed"}, OK, "H_M supported"),
    ({"a": "hidden", "b": "between", "c": "exposed", "d": "exposed"}, OK, "H_M supported"),
    ({"a": "hidden", "b": "void", "c": "exposed", "d": "exposed"}, OK, "H_M supported"),
    ({"a": "exposed", "b": "exposed", "c": "hidden", "d": "hidden"}, OK, "H_T supported"),
    ({"a": "exposed", "b": "exposed", "c": "hidden", "d": "between"}, OK, "H_T supported"),
    ({"a": "hidden", "b": "hidden", "c": "hidden", "d": "hidden"}, OK, "both refuted"),
    ({"a": "exposed", "b": "exposed", "c": "exposed", "d": "exposed"}, OK, "both refuted"),
    ({"a": "hidden", "b": "hidden", "c": "exposed", "d": "hidden"}, OK, "inconclusive"),   # 3 as H_M, 1 as H_T
    ({"a": "hidden", "b": "between", "c": "between", "d": "exposed"}, OK, "inconclusive"),
    ({"a": "hidden", "b": "hidden", "c": "exposed", "d": "exposed"},
     {"x": ("between", "exposed"), "y": ("hidden", "hidden")}, "inconclusive"),           # a failed control
])
def test_verdict(mod, classes, controls, want):
    assert mod.verdict(classes, PRED, controls)["verdict"] == want


def test_a_configuration_that_does_not_discriminate_is_refused(mod):
    with pytest.raises(InputError):
        mod.verdict({"a": "hidden"}, {"a": {"H_M": "hidden", "H_T": "hidden"}}, OK)


def pre_record(mod):
    configs = []
    for c in mod.DISCRIMINATING + mod.CONTROLS:
        fa = 4000.0 if c[1] == 1 else 12000.0 if c[1] == 6 else (7000.0 if c[0] <= 49152 else 11000.0)
        configs.append({"config": mod.key(c), "role": "discriminating" if c in mod.DISCRIMINATING else "control",
                        "predicted": mod.predicted(c[0], fa)})
    return {"configs": configs, "repeats": 3}


def test_judge_takes_medians_and_voids_a_configuration_off_its_side(mod):
    pre = pre_record(mod)
    meas = {}
    for c in pre["configs"]:
        hidden = c["predicted"]["H_M"] == "hidden"
        fa = 4000.0 if c["config"].endswith(":1:128") else 12000.0 if ":6:" in c["config"] else 9000.0
        meas[c["config"]] = {"rep": [0, 1, 2], "split": [5.0, 300.0, 10.0] if hidden else [150.0, 180.0, 0.0],
                             "wb": [400.0] * 3, "fa": [fa] * 3}
    res = mod.judge(pre, meas)
    assert res["verdict"] == "H_M supported" and res["as_predicted"] == {"H_M": 4, "H_T": 0}
    row = next(r for r in res["table"] if r["config"] == "65536:1:128")
    assert (row["s"], row["f"], row["class"]) == (10.0, 400.0, "hidden")
    meas["47104:6:128"]["fa"] = [9500.0] * 3                      # FA-only under H_T's hidden bound: void
    meas["43008:6:128"]["split"] = meas["43008:6:128"]["split"][:2]   # a repeat missing: void
    res = mod.judge(pre, meas)
    assert res["void"] == 2 and res["verdict"] == "inconclusive"
    del meas["49152:3:128"]                                       # a control not measured: inconclusive
    assert mod.judge(pre, meas)["controls_valid"] is False


def test_paired_clocks_from_marks_and_a_trace(mod, tmp_path):
    trace = tmp_path / "smi.csv"
    trace.write_text("timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu, "
                     "clocks_event_reasons.active\n"
                     "1970/01/01 00:00:10.000, 1980 MHz, 500.00 W, 40, 0x0000000000000000\n"
                     "1970/01/01 00:00:10.050, 1800 MHz, 690.00 W, 41, 0x0000000000000004\n"
                     "1970/01/01 00:00:10.100, 1830 MHz, 695.00 W, 41, 0x0000000000000004\n"
                     "garbled line\n"
                     "1970/01/01 00:00:11.000, 345 MHz, 80.00 W, 40, 0x0000000000000001\n")
    rows = mod.smi_trace(trace)
    assert [r[0] for r in rows] == [10.0, 10.05, 10.1, 11.0] and rows[1][3] == 4
    marks = {"marks": [{"M": 65536, "heads": 1, "head_dim": 128, "rep": 0, "variant": "fused_wb_split",
                        "host_start_s": 10.04, "host_end_s": 10.2},
                       {"M": 65536, "heads": 1, "head_dim": 128, "rep": 0, "variant": "fused_wb",
                        "host_start_s": 10.5, "host_end_s": 10.6}]}
    pc = mod.paired_clocks(marks, rows)
    assert pc[0]["samples"] == 2 and pc[0]["sm_mhz"] == 1815.0 and pc[0]["capped_share"] == 1.0
    assert pc[1]["samples"] == 0 and pc[1]["sm_mhz"] is None
    assert mod.clock_summary(pc) == {"65536:1:128": {"sm_mhz": 1815.0, "capped_share": 1.0, "samples": 2,
                                                     "timings": 1}}
    assert mod.clock_summary(pc, "fused_wb") == {}


def test_the_preregistration_record_is_the_modules_rule(mod):
    pre = json.loads((data_dir() / PRE).read_text())
    assert pre["rule"] == json.loads(json.dumps(mod.RULE))
    assert [c["config"] for c in pre["configs"]] == [mod.key(c) for c in mod.DISCRIMINATING + mod.CONTROLS]
    for c in pre["configs"]:
        p = c["predicted"]
        assert p == mod.predicted(c["M"], c["fa_us_estimate"])
        if c["role"] == "discriminating":
            assert {p["H_M"], p["H_T"]} == {"hidden", "exposed"}
        else:
            assert p["H_M"] == p["H_T"] != "band"


RUN = "attention-runs/8c8a959-regime"
JUDGED = "predictions/fa-regime-judged-h200-pcie-host.json"
ROOT = Path(__file__).resolve().parents[2]


def _git(*args) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _run_meta():
    import pyarrow.parquet as pq

    base = data_dir() / RUN
    kernel = json.loads(pq.read_schema(base / "attention-kernel.parquet").metadata[b"xstage"])
    clock = json.loads((base / "clock" / "clock-diag.json").read_text())
    return kernel, clock


def test_the_judged_numbers_are_the_runs_records(mod):
    base = data_dir()
    pre = json.loads((base / PRE).read_text())
    judged = json.loads((base / JUDGED).read_text())
    meas = mod.measured(base / RUN)
    res = mod.judge(pre, meas)
    assert judged["verdict"] == res["verdict"] == "inconclusive"
    assert judged["as_predicted"] == res["as_predicted"] == {"H_M": 1, "H_T": 2}
    assert judged["controls_valid"] is True and judged["void"] == 0
    assert json.loads(json.dumps(res["table"])) == judged["table"]
    classes = {r["config"]: (round(r["s"]), round(r["f"]), r["class"]) for r in judged["table"]}
    assert classes == {"65536:1:128": (82, 354, "between"), "73728:1:128": (64, 994, "hidden"),
                       "43008:6:128": (128, 1460, "hidden"), "47104:6:128": (0, 1265, "hidden"),
                       "49152:3:128": (166, 715, "exposed"), "61440:3:128": (85, 922, "hidden")}
    assert all(len(e["split"]) == 3 for e in meas.values())


def test_the_preregistration_came_before_the_run():
    base = data_dir()
    pre = json.loads((base / PRE).read_text())
    kernel, clock = _run_meta()
    run_commit = kernel["provenance"]["git_commit"]
    assert clock["provenance"]["git_commit"] == run_commit and "dirty" not in run_commit
    assert json.loads((base / JUDGED).read_text())["preregistration_commit"] == pre["provenance"]["git_commit"]
    if _git("cat-file", "-e", f"{run_commit}^{{commit}}") is None:
        pytest.skip("a shallow checkout: no git history with the run's commit (the checks above ran)")
    # the records the run carries name a commit that already held the pre-registration, byte for byte as it is now
    for path in (PRE, "predictions/fa-regime-preregistration.md"):
        assert _git("show", f"{run_commit}:data/{path}") == (base / path).read_text()
    assert _git("merge-base", "--is-ancestor", pre["provenance"]["git_commit"], run_commit) is not None
    committed = datetime.fromisoformat(_git("log", "-1", "--format=%cI", run_commit).strip())
    assert committed < datetime.fromisoformat(kernel["provenance"]["date"])
