"""``xstage results attention``: the twelfth FA rule beside the one-GPU Triton rows, as new keys only."""

import json

from xstage.compare.attention_records import summarize
from xstage.compare.attention_rule12 import RULE12_FIT, RULE12_HELDOUT, with_rule12
from xstage.paths import data_dir


def test_new_keys_only_on_the_one_gpu_triton_rows():
    rows = summarize(data_dir())
    marked = [r for r in rows if "rule12_record" in r]
    assert {r["M"] for r in marked} == {8192, 16384, 32768, 49152, 65536}
    assert all(r["ranks"] == 1 and r["platform"] == "h200-pcie-host" and r["fa_core"] == "triton" for r in marked)
    assert all(not any(k.startswith(("rule12_", "e_res_predicted_rule12_")) for k in r) for r in rows if r not in marked)
    fit = json.loads((data_dir() / RULE12_FIT).read_text())
    want = next(x for x in fit["rows"] if x["set"] == "attention" and x["M"] == 32768 and x["variant"] == "fused_wb_split")
    r = next(r for r in marked if r["M"] == 32768)
    assert r["e_res_predicted_rule12_wb_split_us"] == want["rule12_E_res_us"] and r["rule12_held_out"] is False
    assert (r["rule12_heldout5_median_within"], r["rule12_heldout5_median_n"]) == (9, 24)
    assert (r["rule12_heldout5_single_within"], r["rule12_heldout5_single_n"]) == (27, 72)
    assert r["rule12_heldout5_prereg_median_within"] == 10
    assert (r["rule12_heldout5_split_high_steps_n"], r["rule12_heldout5_split_high_steps_within"],
            r["rule12_heldout5_split_high_steps_rule11_m_within"]) == (3, 0, 0)
    assert 290 < r["rule12_heldout5_split_high_steps_min_us"] < 310          # 48K at block_n 64: 302 us
    assert r["rule12_heldout5_run"] == "attention-runs/b4fb3a7-heldout5" and r["rule12_heldout5_record"] == RULE12_HELDOUT
    assert r["rule11_heldout4_median_within"] == 11 and "e_res_predicted_rule11_wb_split_us" in r   # earlier keys stay


def test_without_the_records_nothing_changes(tmp_path):
    rows = [{"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "triton", "fa_us": 1.0}]
    assert with_rule12(rows, tmp_path) == rows
    (tmp_path / "predictions").mkdir()
    rec = {"platform": "h200-pcie-host", "rows": [{"set": "attention", "M": 8192, "variant": "fused_wb_split",
                                                   "rule12_E_res_us": 7.0}]}
    (tmp_path / RULE12_FIT).write_text(json.dumps(rec))
    rows += [{"M": 8192, "ranks": 2, "platform": "h200-pcie-host", "fa_core": "triton"},
             {"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "fa4"}]
    out = with_rule12(rows, tmp_path)
    assert out[0] == {**rows[0], "e_res_predicted_rule12_wb_split_us": 7.0, "rule12_record": RULE12_FIT,
                      "rule12_held_out": False}
    assert out[1:] == rows[1:]
