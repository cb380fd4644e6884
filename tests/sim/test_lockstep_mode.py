"""Mode ``lockstep`` (issue 15, item 4): every burst from a drained path, the next at max(drained, issue end +
barrier) + G; both engines agree, the other modes and their summaries are unchanged, and the session-7 record
(``finite-runs-lockstep-s7.json``, whose rule lived in ``benchmarks/finite_runs.py``) is what the mode gives."""

import json

import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import load_platform

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
HOST_V1 = EXTRA / "h200-pcie-host-wide" / "platform.json"
HOST_GATED = EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json"


def _summary(p, K, B, n, mode="lockstep", barrier=1.2, G=0.0, engine="auto", skip=None):
    cfg = BurstConfig(K, B, G, n, mode=mode, barrier_us=barrier if mode == "lockstep" else None, engine=engine,
                      skip=skip)
    return simulate_bursts(p, cfg, record_occupancy=False).summary(p)


@pytest.mark.parametrize("path", [HOST_V1, HOST_GATED])
def test_drain_bound_period_is_the_drain_and_small_bursts_are_barrier_paced(path):
    p = load_platform(path)
    R = p.drain_rate_Bpus
    big = _summary(p, 132, 32768, 12, barrier=1.2)                   # V / R = 82 us >> T_iss + barrier
    assert big["period_us"] == pytest.approx(132 * 32768 / R, rel=1e-9)
    iso = _summary(p, 132, 32768, 12, mode="isolated", G=1.2)      # isolated adds the barrier after the drain
    assert iso["period_us"] == pytest.approx(big["period_us"] + 1.2, rel=1e-9)
    assert big["T_iss_us"] == pytest.approx(iso["T_iss_us"], rel=1e-9)   # issue from a drained path, as isolated
    small = _summary(p, 8, 2048, 12, barrier=1.2, G=0.5)              # V / R = 0.3 us: the barrier paces it
    assert small["period_us"] == pytest.approx(small["T_iss_us"] + 1.2 + 0.5, rel=1e-9)
    for s in (big, small):
        assert s["model_period_us"] == pytest.approx(s["period_us"], rel=1e-9)
        assert s["model_T_iss_us"] == pytest.approx(s["T_iss_us"], rel=1e-9)
        assert s["warmup_bursts"] == 0 and s["steady"] is True and s["barrier_us"] == 1.2


def test_drained_us_is_the_last_start_plus_one_drain_and_engines_agree():
    p = load_platform(HOST_V1)
    K, B, n = 40, 20480, 9
    ex, sp = (_summary(p, K, B, n, engine=e, barrier=1.2) for e in ("exact", "simpy"))
    assert ex["engine"] == "exact" and sp["engine"] == "simpy"
    for key in ("T_iss_us", "period_us", "drained_us"):
        assert sp[key] == pytest.approx(ex[key], rel=1e-9)
    drain = max(p.issue_time0_us(K, B), K * B / p.drain_rate_Bpus)
    assert ex["drained_us"] == pytest.approx((n - 1) * ex["period_us"] + drain, rel=1e-9)


def test_other_modes_keep_their_keys_and_the_barrier_belongs_to_lockstep():
    p = load_platform(HOST_V1)
    for mode in ("periodic", "isolated", "coupled", "local"):
        assert "barrier_us" not in _summary(p, 8, 4096, 6, mode=mode)
    with pytest.raises(InputError, match="barrier_us"):
        BurstConfig(8, 4096, 0.0, 6, mode="lockstep")
    with pytest.raises(InputError, match="barrier_us"):
        BurstConfig(8, 4096, 0.0, 6, mode="isolated", barrier_us=1.0)
    with pytest.raises(InputError, match="barrier_us"):
        BurstConfig(8, 4096, 0.0, 6, mode="lockstep", barrier_us=-1.0)


def test_skip_counts_from_the_first_burst_in_lockstep_too():
    p = load_platform(HOST_GATED)
    a = _summary(p, 16, 8192, 8, skip=0)
    b = _summary(p, 16, 8192, 8, skip=6)
    assert a["skip"] == 0 and b["skip"] == 6 and b["T_iss_us"] == pytest.approx(a["T_iss_us"], rel=1e-9)


def test_the_session7_record_is_what_the_mode_gives():
    """``finite_runs.lockstep`` (now ``--mode lockstep``) on the exact-engine platform reproduces the committed
    figures: shares and counts exactly, relative errors to 1e-9 (the old formula subtracted the barrier from an
    isolated period: the same numbers up to the order of float operations)."""
    fr = load_script("finite_runs")
    rec = json.loads((EXTRA / "finite-runs-lockstep-s7.json").read_text())
    p = load_platform(HOST_V1)
    for label, grid in (("host v1", "h200-pcie-host-wide"), ("host v1 on fresh", "h200-pcie-host-fresh")):
        got, want = fr.lockstep(EXTRA / grid, p), rec[label]
        assert got["barrier_us"] == want["barrier_us"]
        for how in ("as_run", "at_measured_gap"):
            for fig, stats in want[how].items():
                assert got[how][fig] == pytest.approx(stats, rel=1e-9)
        for half, figs in want["lockstep_overlap"].items():
            for fig, stats in figs.items():
                assert got["lockstep_overlap"][half][fig]["n"] == stats["n"]
                assert got["lockstep_overlap"][half][fig]["within_10pct"] == stats["within_10pct"]
                assert got["lockstep_overlap"][half][fig] == pytest.approx(stats, rel=1e-9)
