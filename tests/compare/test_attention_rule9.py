"""``xstage results attention``: the ninth FA rule beside the one-GPU Triton rows, as new keys only."""

import json

from xstage.compare.attention_records import summarize
from xstage.compare.attention_rule9 import RULE9_FIT, RULE9_HELDOUT, with_rule9
from xstage.paths import data_dir


def test_new_keys_only_on_the_one_gpu_triton_rows():
    rows = summarize(data_dir())
    marked = [r for r in rows if "rule9_record" in r]
    assert {r["M"] for r in marked} == {8192, 16384, 32768, 49152, 65536}
    assert all(r["ranks"] == 1 and r["platform"] == "h200-pcie-host" and r["fa_core"] == "triton" for r in marked)
    assert all(not any(k.startswith(("rule9_", "e_res_predicted_rule9_")) for k in r) for r in rows if r not in marked)
    fit = json.loads((data_dir() / RULE9_FIT).read_text())
    want = next(x for x in fit["rows"] if x["set"] == "attention" and x["M"] == 49152 and x["variant"] == "fused_wb_split")
    r = next(r for r in marked if r["M"] == 49152)
    assert r["e_res_predicted_rule9_wb_split_us"] == want["rule9_E_res_us"] and r["rule9_held_out"] is False
    assert (r["rule9_heldout2_within"], r["rule9_heldout2_n"], r["rule9_heldout2_prereg_within"]) == (20, 24, 20)
    assert (r["rule9_heldout2_rule8_within"], r["rule9_heldout2_rule7_within"]) == (18, 12)
    assert r["rule9_heldout2_run"] == "attention-runs/6c1c349-heldout2" and r["rule9_heldout2_record"] == RULE9_HELDOUT
    assert "rule8_record" in r                                   # the eighth rule's keys stay beside


def test_without_the_records_nothing_changes(tmp_path):
    rows = [{"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "triton", "fa_us": 1.0}]
    assert with_rule9(rows, tmp_path) == rows
    (tmp_path / "predictions").mkdir()
    rec = {"platform": "h200-pcie-host", "rows": [{"set": "attention", "M": 8192, "variant": "fused_wb_split",
                                                   "rule9_E_res_us": 7.0},
                                                  {"set": "attention-fa4/triton", "M": 16384, "variant": "fused_wb",
                                                   "rule9_E_res_us": 9.0}]}
    (tmp_path / RULE9_FIT).write_text(json.dumps(rec))
    rows += [{"M": 8192, "ranks": 2, "platform": "h200-pcie-host", "fa_core": "triton"},
             {"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "fa4"},
             {"M": 16384, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "triton"}]
    out = with_rule9(rows, tmp_path)
    assert out[0] == {**rows[0], "e_res_predicted_rule9_wb_split_us": 7.0, "rule9_record": RULE9_FIT,
                      "rule9_held_out": False}
    assert out[1:] == rows[1:]
