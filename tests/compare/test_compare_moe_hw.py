"""Hardware MoE sweep shapes are not catalog names: compare uses the replay the benchmark recorded."""

import pandas as pd
import pytest

from xstage.compare.moe import compare_moe
from xstage.errors import InputError
from xstage.sim.platform import load_platform


def kernel_rows(with_sim=True):
    rows = []
    for variant, t in (("expert_wave", 120.0), ("interleaved", 100.0), ("expert_wave_local", 50.0)):
        row = {"source": "hw", "experiment": "moe", "config": "h2048-i512-t4096-e8-skewed-bf16-w8-s0",
               "variant": variant, "time(us)": t, "trials": 20}
        if with_sim:
            row.update({"sim_wave(us)": 110.0, "sim_int(us)": 88.0})
        rows.append(row)
    return pd.DataFrame(rows)


def test_hardware_shape_uses_recorded_replay():
    out = compare_moe(kernel_rows(), load_platform("h200-pcie-host"))
    row = out.iloc[0]
    assert row["measured_speedup"] == pytest.approx(1.2)
    assert row["simulated_speedup"] == pytest.approx(1.25)
    assert row["simulated_wave(us)"] == 110.0 and row["simulated_int(us)"] == 88.0


def test_unknown_shape_without_replay_is_rejected():
    with pytest.raises(InputError):
        compare_moe(kernel_rows(with_sim=False), load_platform("h200-pcie-host"))


def test_agreement_over_configurations_with_two_orders():
    from xstage.compare.moe import moe_error_summary

    frame = pd.DataFrame({"measured_speedup": [1.10, 0.997, 1.05], "simulated_speedup": [1.2, 1.0, 1.1],
                          "schedules_identical": [False, True, False]})
    for q in ("wave", "int"):
        frame[f"measured_{q}(us)"] = frame[f"simulated_{q}(us)"] = 100.0
    out = moe_error_summary(frame)
    assert out["speedup_sign_agreement"] == pytest.approx(2 / 3)  # the tie counts as a miss here
    assert out["n_identical_schedules"] == 1 and out["speedup_sign_agreement_distinct"] == 1.0
