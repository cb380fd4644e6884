"""``xstage replay fa --stall-backlog-MB --drift-log``: rule 17's drift read from the no-link build's tile log."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xstage.sim.predict_link import RULE17_DRIFT_LINE, SPREAD_OF_UNIFORM, log_drift, spread_drift

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "data" / "attention-runs" / "24ac5e2-rule17"
JUDGED = ROOT / "data" / "predictions" / "fa-rule17-judged-h200-pcie-host.json"
BASE = ["replay", "fa", "-p", "h200-pcie-host", "--order", "local_last", "--tail-parts", "2", "--fa-tail-parts", "2",
        "--stall-backlog-MB", "0.35", "--json"]


def point_flags(p: dict) -> list[str]:
    return ["-M", str(p["M"]), "--heads", str(p["heads"]), "--head-dim", str(p["head_dim"]),
            "--block-n", str(p["block_n"]), "--fa-us", repr(p["nolink_us"])]


def waves(slope_us: float, qloop_us: float, n: int = 6, **cols) -> pd.DataFrame:
    """One launch's per-wave summary whose p10-p90 end spread grows by ``slope_us`` per wave."""
    w = np.arange(n)
    end = (w + 1) * qloop_us
    return pd.DataFrame({"wave": w, "tiles": 132, "end_p10(us)": end, "end_p90(us)": end + slope_us * w,
                         "qloop_p50(us)": qloop_us, **cols})


def test_the_committed_run_gives_rule_17s_recorded_predictions(cli):
    """Every pre-registered point of 24ac5e2-rule17 through the CLI: the judged record's D_nl and link cost."""
    for p in json.loads(JUDGED.read_text())["points"]:
        code, out, err = cli(*BASE, *point_flags(p), "--drift-log", str(RUN / "inpair-wave.parquet"))
        d = json.loads(out)
        assert code == 0, err
        assert d["drift_log_D_nl"] == pytest.approx(p["D_nl"], rel=1e-12) and d["drift_log_launches"] == 24
        assert d["drift"] == pytest.approx(p["drift17"], rel=1e-12)
        assert d["E_res_us"] == pytest.approx(p["rule17"], abs=1e-6)


def test_a_one_launch_csv_reads_its_slope(cli, tmp_path):
    q, D = 500.0, 0.02
    f = tmp_path / "waves.csv"
    waves(SPREAD_OF_UNIFORM * D * q, q).to_csv(f, index=False)
    code, out, _ = cli(*BASE, "-M", "16384", "--heads", "3", "--fa-us", "1500", "--drift-log", str(f))
    d = json.loads(out)
    assert code == 0 and d["drift_log_launches"] == 1 and d["drift_log_D_nl"] == pytest.approx(D)
    assert d["drift"] == pytest.approx(RULE17_DRIFT_LINE["a"] + RULE17_DRIFT_LINE["b"] * D)
    same = json.loads(cli(*BASE, "-M", "16384", "--heads", "3", "--fa-us", "1500", "--program-spread",
                          repr(d["drift"]), "--fa-program-spread", repr(d["drift"]))[1])
    assert d["E_res_us"] == pytest.approx(same["E_res_us"], abs=1e-9)


def test_log_drift_takes_the_median_launch_of_the_no_link_variant_of_the_kernel():
    q = 400.0
    rows = [waves(SPREAD_OF_UNIFORM * D * q, q, rep=0, pair=i, variant="split_hbm", M=8192, heads=3, head_dim=128,
                  block_n=128) for i, D in enumerate((0.01, 0.03, 0.02))]
    rows.append(waves(SPREAD_OF_UNIFORM * 0.5 * q, q, rep=0, pair=0, variant="fa", M=8192, heads=3, head_dim=128,
                      block_n=128))
    rows.append(waves(SPREAD_OF_UNIFORM * 0.4 * q, q, rep=0, pair=0, variant="split_hbm", M=4096, heads=3,
                      head_dim=128, block_n=128))
    frame = pd.concat(rows, ignore_index=True)

    class K:
        seq_len, heads, head_dim, block_n = 8192, 3, 128, 128
    r = log_drift(frame, K())
    assert r["launches"] == 3 and r["D_nl"] == pytest.approx(0.02)
    assert spread_drift(rows[1]) == pytest.approx(0.03)


@pytest.mark.parametrize("extra, needle", [
    (["--program-spread", "0.01"], "--program-spread"),
    (["--fa-program-spread", "0.01"], "--fa-program-spread"),
])
def test_a_given_drift_and_a_log_conflict(cli, tmp_path, extra, needle):
    f = tmp_path / "w.csv"
    waves(4.0, 500.0).to_csv(f, index=False)
    code, out, err = cli(*BASE, "-M", "16384", "--heads", "3", "--fa-us", "1500", "--drift-log", str(f), *extra)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_bad_logs_are_one_line_naming_the_flag(cli, tmp_path):
    flags = ["-M", "16384", "--heads", "3", "--fa-us", "1500"]
    bad = tmp_path / "w.txt"
    bad.write_text("x")
    short = tmp_path / "short.csv"
    waves(4.0, 500.0, n=2).to_csv(short, index=False)
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    cases = [(BASE, str(tmp_path / "none.csv")), (BASE, str(bad)), (BASE, str(short)), (BASE, str(junk)),
             (BASE, str(RUN / "inpair-wave.parquet")),                     # no launch of M 16384 in that run
             ([a for a in BASE if a not in ("--stall-backlog-MB", "0.35")], str(short))]   # needs the stall model
    for base, path in cases:
        code, out, err = cli(*base, *flags, "--drift-log", path)
        assert code == 2 and out == "" and "--drift-log" in err and len(err.strip().splitlines()) == 1, (path, err)
        assert "Traceback" not in err
