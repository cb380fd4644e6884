"""Error metrics of the compare layer: exact small cases."""

import math

import numpy as np
import pandas as pd

from xstage.compare.metrics import (add_relative_errors, error_summary, relative_error, sign_agreement,
                                    speedup_sign)


def test_relative_error_exact_and_missing():
    err = relative_error([2.0, 4.0, 0.0, np.nan], [2.5, 3.0, 1.0, 1.0])
    assert err[:2].tolist() == [0.25, 0.25]
    assert math.isnan(err[2]) and math.isnan(err[3])  # zero measurement / missing value


def test_error_summary_median_and_p90():
    meas = np.ones(10)
    sim = 1.0 + np.arange(10) / 100.0  # errors 0.00 .. 0.09
    s = error_summary(meas, sim, name="issue")
    assert s["issue_n_points"] == 10
    assert math.isclose(s["issue_median_rel_err"], 0.045)
    assert math.isclose(s["issue_p90_rel_err"], 0.081)
    empty = error_summary([np.nan], [1.0])
    assert empty["n_points"] == 0 and math.isnan(empty["median_rel_err"])


def test_speedup_sign_and_agreement():
    assert speedup_sign([1.2, 0.9, 1.0, 1.01], tolerance=0.02).tolist() == [1.0, -1.0, 0.0, 0.0]
    assert sign_agreement([1.2, 0.9, 1.1, 1.3], [1.1, 1.05, 1.2, 0.8]) == 0.5
    assert sign_agreement([1.2, np.nan], [1.1, 0.5]) == 1.0  # rows with a missing value are left out
    assert math.isnan(sign_agreement([np.nan], [1.0]))


def test_add_relative_errors_names_columns_by_quantity():
    frame = pd.DataFrame({"measured_issue(us)": [2.0], "simulated_issue(us)": [1.0]})
    out = add_relative_errors(frame, ["issue(us)"])
    assert out["issue_rel_err"].tolist() == [0.5]
    assert "issue_rel_err" not in frame
