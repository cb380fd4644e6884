"""Workload catalog, routing generator, compute model, FA timing."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim.platform import load_platform
from xstage.sim.schedules import KIND_L1, KIND_L2
from xstage.sim.workloads.catalog import (FaConfig, critical_rank, fa_catalog, fa_timing, moe_catalog, moe_configs,
                                  moe_workload, parse_config, route)


@pytest.fixture(scope="module")
def b200():
    return load_platform("paper-b200")


def test_84_configurations_and_sources():
    cfgs = moe_configs()
    assert len(cfgs) == 84 and len({c.name for c in cfgs}) == 84
    cat = moe_catalog()
    assert len(cat["models"]) == 7
    for name, m in cat["models"].items():
        for key in ("hidden", "intermediate", "experts", "top_k"):
            assert key in m["sources"] and m["sources"][key].strip(), (name, key)
    for key in ("block_m, block_n", "combine_bytes_per_tile", "remote_epilogue_us", "local_epilogue_us"):
        assert cat["tile"]["sources"][key].strip()
    for p in cat["precisions"].values():
        assert p["source"].strip()
    for s in cat["settings"].values():
        assert s["source"].strip()
    assert set(fa_catalog()["sources"]) >= {"seq_lens", "heads_per_rank", "completion_latency_us"}


def test_routing_balanced_and_skewed():
    b = route(1000, 16, 2, "balanced")
    assert b.sum() == 2000 and b.max() - b.min() <= 1
    s1 = route(1000, 16, 2, "skewed", seed=3)
    assert s1.sum() == 2000 and np.array_equal(s1, route(1000, 16, 2, "skewed", seed=3))
    # persistent hot set: the same 2 experts are hot whatever the token count
    hot_small = set(np.argsort(route(2000, 16, 2, "skewed", seed=3))[-2:])
    hot_large = set(np.argsort(route(200000, 16, 2, "skewed", seed=3))[-2:])
    assert hot_small == hot_large
    assert s1.max() > 3 * b.max()
    r, local = critical_rank(np.arange(8), 4)
    assert r == 3 and local.tolist() == [6, 7]


def test_compute_model_and_overrides(b200):
    w = moe_workload(parse_config("DSv4-Pro/w8a8/skewed/S"), b200)
    rate = 4500.0 / 148 * 1e6 * 0.31            # FLOP per us per SM at the catalog efficiency
    assert w.l1_us == pytest.approx(2 * 128 * 128 * 7168 / rate)
    assert w.l2_us == pytest.approx(2 * 128 * 128 * 2048 / rate)
    w2 = moe_workload(parse_config("DSv4-Pro/w8a8/skewed/S"), b200, mainloop_override_us={"L1": 11.57, "L2": 9.54})
    s = w2.schedule("interleaved", 148)
    ml = w2.mainloop_us(s)
    assert set(np.unique(ml[s.column("kind") == KIND_L1])) == {11.57}
    nbytes = w2.remote_bytes(s)
    assert nbytes[s.column("kind") == KIND_L1].sum() == 0
    assert nbytes.max() == pytest.approx(moe_catalog()["tile"]["combine_bytes_per_tile"])
    # partial row blocks send proportionally fewer bytes; total = tokens x hidden columns x bytes per column
    total = w2.tokens_per_expert.sum() * 7168 * w2.combine_bytes_per_row / 128
    assert nbytes[s.column("kind") == KIND_L2].sum() == pytest.approx(total)
    assert w2.lead_knee_rows == 5                 # ceil(128 * 148 / (2 * 2048))
    frame = w2.tile_frame(s)
    assert frame["kind"].iloc[0] == "L1" and frame["mainloop(us)"].iloc[0] == 11.57
    assert frame["bytes_remote"].sum() == pytest.approx(nbytes.sum())


def test_bad_configs(b200):
    with pytest.raises(InputError, match="model"):
        parse_config("GPT-9")
    with pytest.raises(InputError, match="precision"):
        parse_config("DSv4-Pro/fp64")
    with pytest.raises(InputError, match="routing"):
        parse_config("DSv4-Pro/w8a8/zipf")
    with pytest.raises(InputError, match="setting"):
        parse_config("DSv4-Pro/w8a8/skewed/XL")
    with pytest.raises(InputError, match="config"):
        parse_config("a/b/c/d/e")
    with pytest.raises(InputError, match="empty"):
        route(0, 8, 2, "balanced")
    with pytest.raises(InputError, match="keys"):
        moe_workload(parse_config("DiT-MoE"), b200, mainloop_override_us={"L3": 1.0})


def test_fa_timing(b200):
    t = fa_timing(FaConfig("fa4", 8192), b200)
    assert t["kv_step_us"] == pytest.approx(0.79, abs=0.01)      # the paper's sigma
    assert t["kv_tiles"] == 64 and t["tile_bytes"] == 32768
    t2 = fa_timing(FaConfig("fa4", 16384), b200)
    assert t2["qloop_us"] - t["qloop_us"] == pytest.approx(64 * t["kv_step_us"])
    with pytest.raises(InputError, match="seq_len"):
        fa_timing(FaConfig("fa4", 1000), b200)
    with pytest.raises(InputError, match="shape"):
        FaConfig("fa9")
