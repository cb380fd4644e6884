"""``xstage results attention``: the tenth FA rule beside the one-GPU Triton rows, as new keys only."""

import json

from xstage.compare.attention_records import summarize
from xstage.compare.attention_rule10 import RULE10_FIT, RULE10_HELDOUT, with_rule10
from xstage.paths import data_dir


def test_new_keys_only_on_the_one_gpu_triton_rows():
    rows = summarize(data_dir())
    marked = [r for r in rows if "rule10_record" in r]
    assert {r["M"] for r in marked} == {8192, 16384, 32768, 49152, 65536}
    assert all(r["ranks"] == 1 and r["platform"] == "h200-pcie-host" and r["fa_core"] == "triton" for r in marked)
    assert all(not any(k.startswith(("rule10_", "e_res_predicted_rule10_")) for k in r) for r in rows if r not in marked)
    fit = json.loads((data_dir() / RULE10_FIT).read_text())
    want = next(x for x in fit["rows"] if x["set"] == "attention" and x["M"] == 65536 and x["variant"] == "fused_wb_split")
    r = next(r for r in marked if r["M"] == 65536)
    assert r["e_res_predicted_rule10_wb_split_us"] == want["rule10_E_res_us"] and r["rule10_held_out"] is False
    assert (r["rule10_heldout3_prereg_within"], r["rule10_heldout3_prereg_n"]) == (12, 20)
    assert (r["rule10_heldout3_within"], r["rule10_heldout3_n"], r["rule10_heldout3_rule9_within"]) == (21, 32, 22)
    assert r["rule10_heldout3_run"] == "attention-runs/63fb3ec-heldout3" and r["rule10_heldout3_record"] == RULE10_HELDOUT
    assert "rule9_record" in r and "e_res_predicted_rule9_wb_split_us" in r      # the ninth rule's keys stay beside


def test_without_the_records_nothing_changes(tmp_path):
    rows = [{"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "triton", "fa_us": 1.0}]
    assert with_rule10(rows, tmp_path) == rows
    (tmp_path / "predictions").mkdir()
    rec = {"platform": "h200-pcie-host", "rows": [{"set": "attention", "M": 8192, "variant": "fused_wb_split",
                                                   "rule10_E_res_us": 7.0}]}
    (tmp_path / RULE10_FIT).write_text(json.dumps(rec))
    rows += [{"M": 8192, "ranks": 2, "platform": "h200-pcie-host", "fa_core": "triton"},
             {"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_core": "fa4"}]
    out = with_rule10(rows, tmp_path)
    assert out[0] == {**rows[0], "e_res_predicted_rule10_wb_split_us": 7.0, "rule10_record": RULE10_FIT,
                      "rule10_held_out": False}
    assert out[1:] == rows[1:]
