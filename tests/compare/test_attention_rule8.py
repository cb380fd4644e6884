"""``xstage results attention``: the eighth FA rule beside the one-GPU Triton rows, as new keys only."""

import json

from xstage.compare.attention_records import RULE8_FIT, RULE8_HELDOUT, summarize, with_rule8
from xstage.paths import data_dir


def test_new_keys_only_on_the_one_gpu_triton_rows():
    rows = summarize(data_dir())
    tri = [r for r in rows if r.get("fa_core") == "triton"]
    marked = [r for r in tri if "rule8_record" in r]
    assert {r["M"] for r in marked} == {8192, 16384, 32768, 49152, 65536}
    assert all(r["ranks"] == 1 and r["platform"] == "h200-pcie-host" for r in marked)
    assert all(not any(k.startswith(("rule8_", "e_res_predicted_rule8_")) for k in r) for r in rows if r not in marked)
    fit = json.loads((data_dir() / RULE8_FIT).read_text())
    want = next(x for x in fit["rows"] if x["set"] == "attention" and x["M"] == 65536 and x["variant"] == "fused_wb")
    r = next(r for r in marked if r["M"] == 65536)
    assert r["e_res_predicted_rule8_wb_us"] == want["rule8_E_res_us"] and r["rule8_held_out"] is False
    assert (r["rule8_heldout_within"], r["rule8_heldout_n"], r["rule8_heldout_prereg_within"]) == (10, 12, 10)
    assert r["rule8_heldout_run"] == "attention-runs/7531682-heldout" and r["rule8_heldout_record"] == RULE8_HELDOUT


def test_without_the_records_nothing_changes(tmp_path):
    rows = [{"M": 8192, "ranks": 1, "platform": "h200-pcie-host", "fa_us": 1.0}]
    assert with_rule8(rows, tmp_path) == rows
    (tmp_path / "predictions").mkdir()
    rec = {"platform": "h200-pcie-host", "rows": [{"set": "attention", "M": 8192, "variant": "fused_wb", "rule8_E_res_us": 7.0},
                                                  {"set": "attention-fa4/triton", "M": 16384, "variant": "fused_wb",
                                                   "rule8_E_res_us": 9.0}]}
    (tmp_path / RULE8_FIT).write_text(json.dumps(rec))
    rows += [{"M": 8192, "ranks": 2, "platform": "h200-pcie-host"}, {"M": 16384, "ranks": 1, "platform": "h200-pcie-host"}]
    out = with_rule8(rows, tmp_path)
    assert out[0] == {**rows[0], "e_res_predicted_rule8_wb_us": 7.0, "rule8_record": RULE8_FIT, "rule8_held_out": False}
    assert out[1:] == rows[1:]
