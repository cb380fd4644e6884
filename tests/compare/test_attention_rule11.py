"""``xstage results attention``: the eleventh FA rule beside the one-GPU Triton rows, as new keys only."""

import json

from xstage.compare.attention_records import summarize
from xstage.compare.attention_rule11 import RULE11_FIT, RULE11_HELDOUT, with_rule11
from xstage.paths import data_dir


def test_new_keys_only_on_the_one_gpu_triton_rows():
    rows = summarize(data_dir())
    marked = [r for r in rows if "rule11_record" in r]
    assert {r["M"] for r in marked} == {8192, 16384, 32768, 49152, 65536}
    assert all(r["ranks"] == 1 and r["platform"] == "h200-pcie-host" and r["fa_core"] == "triton" for r in marked)
    assert all(not any(k.startswith(("rule11_", "e_res_predicted_rule11_")) for k in r) for r in rows if r not in marked)
    fit = json.loads((data_dir() / RULE11_FIT).read_text())
    want = next(x for x in fit["rows"] if x["set"] == "attention" and x["M"] == 65536 and x["variant"] == "fused_wb_split")
    r = next(r for r in marked if r["M"] == 65536)
    assert r["e_res_predicted_rule11_wb_split_us"] == want["rule11_E_res_us"] and r["rule11_held_out"] is False
    assert (r["rule11_heldout4_median_within"], r["rule11_heldout4_median_n"]) == (11, 20)
    assert (r["rule11_heldout4_single_within"], r["rule11_heldout4_single_n"]) == (31, 60)
    assert (r["rule11_heldout4_prereg_median_within"], r["rule11_heldout4_rule10_median_within"],
            r["rule11_heldout4_rule9_median_within"], r["rule11_heldout4_rule11_m_median_within"]) == (13, 13, 12, 12)
    assert 100 < r["rule11_heldout4_split_max_range_us"] < 120                 # 57344: 31 / 39 / 143 us
    assert r["rule11_heldout4_run"] == "attention-runs/ad8f0af-heldout4" and r["rule11_heldout4_record"] == RULE11_HELDOUT
    assert r["rule10_heldout3_within"] == 21 and "e_res_predicted_rule9_wb_split_us" in r   # earlier keys stay


def test_without_the_records_nothing_changes(tmp_path):
    rows = [{"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "triton", "fa_us": 1.0}]
    assert with_rule11(rows, tmp_path) == rows
    (tmp_path / "predictions").mkdir()
    rec = {"platform": "h200-pcie-host", "rows": [{"set": "attention", "M": 8192, "variant": "fused_wb_split",
                                                   "rule11_E_res_us": 7.0}]}
    (tmp_path / RULE11_FIT).write_text(json.dumps(rec))
    rows += [{"M": 8192, "ranks": 2, "platform": "h200-pcie-host", "fa_core": "triton"},
             {"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "fa4"}]
    out = with_rule11(rows, tmp_path)
    assert out[0] == {**rows[0], "e_res_predicted_rule11_wb_split_us": 7.0, "rule11_record": RULE11_FIT,
                      "rule11_held_out": False}
    assert out[1:] == rows[1:]
