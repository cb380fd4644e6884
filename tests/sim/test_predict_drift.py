"""``sim.predict_drift``: the per-wave drift of persistent programs measured per M from a tile frame, read at any M."""

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.sim.predict_drift import drift_at, mean_drift, per_m_drift


def _frame(schedule, M, drift, waves=6, programs=8, ml=100.0):
    """Programs whose speeds are spread so that the range of their wave ends grows by ``drift`` x ml per wave."""
    rows = []
    speed = 1.0 + drift * np.arange(programs) / (programs - 1)
    for p in range(programs):
        end = 0.0
        for seq in range(waves):
            start, end = end, end + ml * speed[p]
            rows.append({"schedule": schedule, "M": M, "seq": seq, "split": False, "sm": p,
                         "mainloop_start(us)": start, "mainloop_end(us)": end})
    return pd.DataFrame(rows)


def test_the_measured_slope_is_the_built_drift_per_M_and_schedule():
    t = pd.concat([_frame("a", 32768, 0.05), _frame("a", 65536, 0.02), _frame("b", 32768, 0.0)])
    d = per_m_drift(t)
    assert d["a"][32768] == pytest.approx(0.05, rel=0.03) and d["a"][65536] == pytest.approx(0.02, rel=0.03)
    assert d["b"][32768] == pytest.approx(0.0, abs=1e-9)
    assert per_m_drift(t, min_M=40000) == {"a": {65536: pytest.approx(d["a"][65536])}}


def test_too_few_waves_split_items_and_closing_programs():
    few = _frame("a", 8192, 0.05, waves=2)
    assert per_m_drift(few) == {}
    t = _frame("a", 8192, 0.05).assign(split=True)       # split tail items are not whole tiles
    assert per_m_drift(t) == {}
    closing = _frame("a", 8192, 0.05)
    closing["mainloop_end(us)"] = (closing["seq"] + 1) * 100.0 + (6 - closing["seq"]) * closing["sm"]   # ends close up
    closing["mainloop_start(us)"] = closing["mainloop_end(us)"] - 100.0
    assert per_m_drift(closing)["a"][8192] == 0.0      # a negative slope counts as no drift


def test_drift_at_is_linear_in_log_M_and_held_at_the_ends():
    d = {32768: 0.03, 65536: 0.05}
    assert drift_at(d, 32768) == pytest.approx(0.03) and drift_at(d, 65536) == pytest.approx(0.05)
    assert drift_at(d, 32768 * 2 ** 0.5) == pytest.approx(0.04)
    assert drift_at(d, 8192) == pytest.approx(0.03) and drift_at(d, 1 << 20) == pytest.approx(0.05)
    assert mean_drift([{"x": {1: 0.1}}, {"y": {1: 0.3}}], {"y": "x"}) == {"x": {1: pytest.approx(0.2)}}


def test_bad_input_names_the_field():
    with pytest.raises(InputError, match="per_m"):
        drift_at({}, 1024)
    with pytest.raises(InputError, match="M"):
        drift_at({1: 0.1}, 0)
    with pytest.raises(InputError, match="tile frame"):
        per_m_drift(pd.DataFrame({"M": [1]}))


def test_fitted_per_m_takes_the_drift_of_least_median_error_per_M():
    from xstage.sim.predict_drift import fitted_per_m

    grid = [i / 100 for i in range(11)]
    calls = []

    def residual(M, d):                      # a residual that falls with drift, one prediction per measured run
        calls.append((M, d))
        return [200.0 - 2000.0 * d] * (2 if M == 1 else 1)

    fit = fitted_per_m(residual, {1: [100.0, 120.0], 2: [0.0]}, grid)
    assert fit == {1: 0.04, 2: 0.1}          # 1: any of 0.04-0.05 sits between the two runs, the smaller wins
    assert drift_at(fit, 1.5) == pytest.approx(0.04 + 0.06 * np.log(1.5) / np.log(2))
    with pytest.raises(InputError):
        fitted_per_m(residual, {1: []}, grid)
    with pytest.raises(InputError):
        fitted_per_m(lambda M, d: [1.0], {1: [1.0, 2.0]}, grid)
    with pytest.raises(InputError):
        fitted_per_m(residual, {2: [0.0]}, [-0.1])
